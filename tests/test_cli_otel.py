"""`loom` exporting its OpenTelemetry spans: `--trace FILE` (OTLP JSON Lines) and the standard OTEL_* variables.

Spans are received for real: a `loom` subprocess writes the file, or posts OTLP/HTTP to a small
receiver on 127.0.0.1; the model is the local fake OpenAI server.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from benchdata import data_dir, needs
from machine import scaled

pytest.importorskip("opentelemetry.sdk.trace")
pytest.importorskip("opentelemetry.exporter.otlp.proto.http.trace_exporter")

from openai_server import FakeOpenAIServer
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from thoughtloom.cli.common import UsageError
from thoughtloom.cli.main import main
from thoughtloom.cli.otel import requested_exporters

ROOT = Path(__file__).resolve().parents[1]
DATA = data_dir("game24/24_dev.csv")


def loom(*args: str, env: dict[str, str] | None = None, tmp: Path) -> subprocess.CompletedProcess[str]:
    """Run `loom` in a subprocess with no OTEL_* variables but those given."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    base.update(PYTHONPATH=str(ROOT), THOUGHTLOOM_STORE=str(tmp / "runs.db"), **(env or {}))
    return subprocess.run([sys.executable, "-m", "thoughtloom", *args], env=base, capture_output=True, text=True,
                          timeout=scaled(120), check=False, cwd=tmp)


def solve(server: FakeOpenAIServer, tmp: Path, *extra: str, env: dict[str, str] | None = None
          ) -> subprocess.CompletedProcess[str]:
    return loom("solve", "--task", "game24", "4 9 10 13", "--model", f"openai-compatible:{server.url}@m#completions",
                "--budget-tokens", "3000", "--quiet", *extra, env=env, tmp=tmp)


def spans_of(traces: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every span of OTLP/JSON TracesData objects, with its resource's attributes under "_resource"."""
    out = []
    for data in traces:
        for resource in data["resourceSpans"]:
            attrs = {a["key"]: a["value"] for a in resource["resource"]["attributes"]}
            for scope in resource["scopeSpans"]:
                out.extend({**span, "_resource": attrs, "_scope": scope["scope"]["name"]} for span in scope["spans"])
    return out


class _Receiver(BaseHTTPRequestHandler):
    received: list[tuple[str, str, bytes]]

    def do_POST(self) -> None:
        """Keep the request; answer as an OTLP/HTTP collector does."""
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.received.append((self.path, self.headers["Content-Type"], body))
        reply = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, format: str, *args: object) -> None:
        """Quiet."""


@contextmanager
def otlp_receiver() -> Iterator[tuple[str, list[tuple[str, str, bytes]]]]:
    """An OTLP/HTTP trace receiver on an ephemeral 127.0.0.1 port: its base URL and what it received."""
    received: list[tuple[str, str, bytes]] = []
    handler = type("Receiver", (_Receiver,), {"received": received})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", received
    finally:
        httpd.shutdown()
        httpd.server_close()


# --- --trace FILE ---------------------------------------------------------------------------------


def test_trace_file_holds_a_solve_runs_spans_as_otlp_json_lines(server: FakeOpenAIServer, tmp_path: Path) -> None:
    done = solve(server, tmp_path, "--trace", str(tmp_path / "spans.jsonl"))
    assert done.returncode == 0, done.stderr
    lines = (tmp_path / "spans.jsonl").read_text().splitlines()
    spans = spans_of([json.loads(line) for line in lines])
    (search,) = [s for s in spans if s["name"] == "invoke_agent thoughtloom bfs"]
    calls = [s for s in spans if s["name"] == "text_completion m"]
    assert calls and all(c["parentSpanId"] == search["spanId"] and c["traceId"] == search["traceId"] for c in calls)
    assert len(search["traceId"]) == 32 and len(search["spanId"]) == 16  # hex, as OTLP/JSON writes ids
    int(search["traceId"], 16)
    assert search["_resource"]["service.name"] == {"stringValue": "thoughtloom"}
    assert search["_scope"] == "thoughtloom"


def test_a_trace_file_is_appended_to_run_after_run(server: FakeOpenAIServer, tmp_path: Path) -> None:
    for _ in range(2):
        assert solve(server, tmp_path, "--trace", str(tmp_path / "spans.jsonl")).returncode == 0
    spans = spans_of([json.loads(line) for line in (tmp_path / "spans.jsonl").read_text().splitlines()])
    assert len({s["traceId"] for s in spans if s["name"].startswith("invoke_agent")}) == 2


@needs("game24/24_dev.csv")
def test_bench_sampling_lanes_write_their_spans_to_the_trace_file(server: FakeOpenAIServer, tmp_path: Path) -> None:
    done = loom("bench", "--tasks", "game24", "--lanes", "io,cot", "--limit", "1", "--data-dir", str(DATA),
                "--model", f"openai-compatible:{server.url}@m#completions", "--out", str(tmp_path / "bench"),
                "--quiet", "--trace", str(tmp_path / "spans.jsonl"), tmp=tmp_path)
    assert done.returncode == 0, done.stderr
    spans = spans_of([json.loads(line) for line in (tmp_path / "spans.jsonl").read_text().splitlines()])
    for lane in ("io", "cot"):
        (run,) = [s for s in spans if s["name"] == f"invoke_agent thoughtloom {lane}"]
        assert any(s.get("parentSpanId") == run["spanId"] and s["name"] == "text_completion m" for s in spans)


def test_a_trace_file_that_cannot_be_written_is_a_one_line_error(tmp_path: Path) -> None:
    done = loom("tasks", "--trace", str(tmp_path / "missing" / "spans.jsonl"), tmp=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "--trace: cannot write" in done.stderr


# --- the OTEL_* variables ------------------------------------------------------------------------


def test_an_otlp_http_receiver_gets_a_solve_runs_spans_when_the_endpoint_is_set(
        server: FakeOpenAIServer, tmp_path: Path) -> None:
    with otlp_receiver() as (url, received):
        done = solve(server, tmp_path, env={"OTEL_EXPORTER_OTLP_ENDPOINT": url, "OTEL_SERVICE_NAME": "my-solver"})
    assert done.returncode == 0, done.stderr
    assert received and all(path == "/v1/traces" and kind == "application/x-protobuf" for path, kind, _ in received)
    names, services = [], set()
    for _, _, body in received:
        request = ExportTraceServiceRequest.FromString(body)
        for resource in request.resource_spans:
            services |= {a.value.string_value for a in resource.resource.attributes if a.key == "service.name"}
            names += [s.name for scope in resource.scope_spans for s in scope.spans]
    assert "invoke_agent thoughtloom bfs" in names and "text_completion m" in names
    assert services == {"my-solver"}


def test_the_console_exporter_writes_spans_to_stderr_and_leaves_the_json_output_clean(
        server: FakeOpenAIServer, tmp_path: Path) -> None:
    done = solve(server, tmp_path, "--json", env={"OTEL_TRACES_EXPORTER": "console"})
    assert done.returncode == 0, done.stderr
    json.loads(done.stdout)
    assert '"name": "invoke_agent thoughtloom bfs"' in done.stderr


def test_without_a_request_no_exporter_is_configured() -> None:
    assert requested_exporters({}) == []
    assert requested_exporters({"OTEL_SERVICE_NAME": "x"}) == []


def test_an_otlp_endpoint_alone_selects_the_otlp_exporter() -> None:
    assert requested_exporters({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}) == ["otlp"]
    assert requested_exporters({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}) == ["otlp"]


def test_otel_traces_exporter_none_and_sdk_disabled_export_nothing() -> None:
    assert requested_exporters({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://h"}) == []
    assert requested_exporters({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}) == []
    assert requested_exporters({"OTEL_TRACES_EXPORTER": "otlp, console,otlp"}) == ["otlp", "console"]


def test_an_unknown_traces_exporter_is_refused() -> None:
    with pytest.raises(UsageError, match="unknown span exporter 'zipkin'"):
        requested_exporters({"OTEL_TRACES_EXPORTER": "zipkin"})


def test_an_unknown_traces_exporter_is_a_one_line_cli_error(monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "zipkin")
    assert main(["tasks"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "OTEL_TRACES_EXPORTER" in err and "Traceback" not in err


def test_otlp_over_grpc_without_its_package_names_the_package(tmp_path: Path) -> None:
    if importlib.util.find_spec("opentelemetry.exporter.otlp.proto.grpc") is not None:
        pytest.skip("the grpc exporter is installed here")
    done = loom("tasks", env={"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, tmp=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "pip install opentelemetry-exporter-otlp-proto-grpc" in done.stderr


APP_WITH_ITS_OWN_PROVIDER = """
import sys
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from thoughtloom.cli.main import main

spans = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(spans))
trace.set_tracer_provider(provider)
code = main(sys.argv[1:])
print("exit", code, "spans", sorted({s.name for s in spans.get_finished_spans()}))
"""


def run_inside_app(*args: str, env: dict[str, str], tmp: Path) -> subprocess.CompletedProcess[str]:
    """`loom` called in a process whose application already set a TracerProvider (as opentelemetry-instrument does)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    base.update(PYTHONPATH=str(ROOT), THOUGHTLOOM_STORE=str(tmp / "runs.db"), **env)
    return subprocess.run([sys.executable, "-c", APP_WITH_ITS_OWN_PROVIDER, *args], env=base, capture_output=True,
                          text=True, timeout=scaled(120), check=False, cwd=tmp)


def test_with_a_provider_already_set_the_otel_variables_leave_it_in_charge(server: FakeOpenAIServer,
                                                                          tmp_path: Path) -> None:
    done = run_inside_app("solve", "--task", "game24", "4 9 10 13", "--model",
                          f"openai-compatible:{server.url}@m#completions", "--budget-tokens", "3000", "--quiet",
                          env={"OTEL_TRACES_EXPORTER": "console"}, tmp=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "exit 0 spans ['invoke_agent thoughtloom bfs', 'text_completion m']" in done.stdout
    assert "invoke_agent" not in done.stderr  # no second, console exporter of loom's own


def test_with_a_provider_already_set_trace_file_is_a_one_line_error(tmp_path: Path) -> None:
    done = run_inside_app("tasks", "--trace", str(tmp_path / "spans.jsonl"), env={}, tmp=tmp_path)
    assert "exit 2" in done.stdout
    assert done.stderr.count("\n") == 1 and "already has an OpenTelemetry TracerProvider" in done.stderr
    assert not (tmp_path / "spans.jsonl").exists()
