"""Where the `loom` command sends its OpenTelemetry spans: `--trace FILE` and the standard OTEL_* variables.

The library only emits spans (llm/tracing.py, tools/traced.py) to whatever TracerProvider the
application set; the `loom` command is an application, so it sets one when the user asks for
spans, and only then:

- `--trace FILE` writes them as OTLP JSON Lines, the layout of the OpenTelemetry Collector's file
  exporter (one TracesData object per line, trace and span ids in hex), readable by its
  `otlpjsonfile` receiver;
- `OTEL_TRACES_EXPORTER` (comma-separated: `otlp`, `console`, `none`), as in OTel's SDK
  configuration; when it is unset, setting `OTEL_EXPORTER_OTLP_ENDPOINT` or
  `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` selects `otlp`, and nothing set exports nothing (a
  command-line tool does not post to localhost:4318 unasked). The OTLP exporter reads its own
  variables (endpoint, headers, timeout, compression); `OTEL_EXPORTER_OTLP[_TRACES]_PROTOCOL`
  picks http/protobuf (default, in the `otel` extra) or grpc (a package of its own).
  `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES` name the service (default "thoughtloom");
  `OTEL_SDK_DISABLED=true` turns the variables off (an explicit `--trace` still writes). Under
  `opentelemetry-instrument`, which already set a provider from the same variables, nothing is added.

Everything OTel is imported only when spans are asked for; a missing package is a one-line hint.
"""

from __future__ import annotations

import base64
import json
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import IO, Any

from .common import UsageError

EXPORTERS_ENV = "OTEL_TRACES_EXPORTER"
ENDPOINT_ENVS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
PROTOCOL_ENVS = ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
KNOWN_EXPORTERS = ("otlp", "console", "none")
INSTALL_HINT = "pip install 'thoughtloom[otel]'"


def requested_exporters(env: Mapping[str, str]) -> list[str]:
    """The exporters the OTEL_* variables ask for (none, unless asked); a one-line UsageError for an unknown one."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return []
    raw = env.get(EXPORTERS_ENV)
    if raw is None or not raw.strip():
        return ["otlp"] if any(env.get(name, "").strip() for name in ENDPOINT_ENVS) else []
    names = [n.strip().lower() for n in raw.split(",") if n.strip()]
    unknown = [n for n in names if n not in KNOWN_EXPORTERS]
    if unknown:
        raise UsageError(f"{EXPORTERS_ENV}: unknown span exporter {unknown[0]!r}; loom knows "
                         f"{', '.join(KNOWN_EXPORTERS)} (and --trace FILE)")
    return [n for n in dict.fromkeys(names) if n != "none"]


def otlp_protocol(env: Mapping[str, str]) -> str:
    """The OTLP protocol the variables name, the traces-specific one first (default http/protobuf)."""
    for name in PROTOCOL_ENVS:
        value = env.get(name, "").strip()
        if value:
            return value
    return "http/protobuf"


@contextmanager
def exported_spans(trace_file: str | None) -> Iterator[None]:
    """Send the command's spans where `--trace` and the OTEL_* variables say; flushed when the command ends."""
    env = os.environ  # the SDK's exporters and Resource.create read the same variables there
    names = requested_exporters(env)
    if trace_file is None and not names:
        yield
        return
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        asked = "--trace" if trace_file is not None else f"{EXPORTERS_ENV}/OTEL_EXPORTER_OTLP_ENDPOINT"
        raise UsageError(f"{asked} needs OpenTelemetry: {INSTALL_HINT}") from None
    if not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        if trace_file is None:  # already configured, e.g. by `opentelemetry-instrument loom ...` from these variables
            yield
            return
        # OTel lets a process set its provider once: loom run inside an application that set its own.
        raise UsageError("--trace: this process already has an OpenTelemetry TracerProvider; its spans go there")
    exporters = [_exporter(name, env) for name in names]
    if trace_file is not None:
        try:
            from opentelemetry.exporter.otlp.proto.common.trace_encoder import (
                encode_spans,  # noqa: F401
            )
        except ImportError:
            raise UsageError(f"--trace writes OTLP JSON with the OTLP exporter's encoder: {INSTALL_HINT}") from None
        exporters.append(OtlpJsonLinesExporter(_open(trace_file)))
    # Resource.create reads OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES; a name given there wins.
    named = env.get("OTEL_SERVICE_NAME") or "service.name=" in env.get("OTEL_RESOURCE_ATTRIBUTES", "")
    provider = TracerProvider(resource=Resource.create({} if named else {"service.name": "thoughtloom"}))
    for exporter in exporters:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    try:
        yield
    finally:
        provider.shutdown()  # exports what is still queued, then closes the exporters


def _exporter(name: str, env: Mapping[str, str]) -> Any:
    """The SDK exporter an OTEL_TRACES_EXPORTER name stands for."""
    if name == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter(out=sys.stderr)  # stdout is the command's own output (--json)
    protocol = otlp_protocol(env)
    if protocol == "http/protobuf":
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
                OTLPSpanExporter,
            )
        except ImportError:
            raise UsageError(f"OTLP over http/protobuf needs its exporter: {INSTALL_HINT}") from None
        return OTLPSpanExporter()
    if protocol == "grpc":
        try:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
                OTLPSpanExporter as GrpcExporter,
            )
        except ImportError:
            raise UsageError("OTLP over grpc needs its exporter: pip install opentelemetry-exporter-otlp-proto-grpc "
                             "(or use the default http/protobuf)") from None
        return GrpcExporter()
    raise UsageError(f"{PROTOCOL_ENVS[1]}: loom exports OTLP as http/protobuf or grpc, not {protocol!r}")


def _open(path: str) -> IO[str]:
    """The --trace file, opened for appending before the run starts (a bad path fails before any model call)."""
    try:
        return open(os.path.expanduser(path), "a", encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"--trace: cannot write {path}: {exc.strerror or exc}") from None


class OtlpJsonLinesExporter:
    """A span exporter writing each batch as one line of OTLP JSON (TracesData), as the Collector's file exporter
    does."""

    def __init__(self, out: IO[str]) -> None:
        self._out = out

    def export(self, spans: Sequence[Any]) -> Any:
        """Write one batch as one JSON line."""
        from opentelemetry.sdk.trace.export import SpanExportResult

        try:
            self._out.write(json.dumps(otlp_json(spans), separators=(",", ":")) + "\n")
            self._out.flush()
        except (OSError, ValueError):  # a full disk, a closed file: the run goes on, the spans are lost
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        """Close the file."""
        self._out.close()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Every batch is flushed as it is written."""
        return True


def otlp_json(spans: Sequence[Any]) -> dict[str, Any]:
    """Finished SDK spans as an OTLP/JSON TracesData object (the protobuf JSON mapping, ids as hex)."""
    from google.protobuf.json_format import MessageToDict
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    data = MessageToDict(encode_spans(spans), use_integers_for_enums=True)
    # The OTLP/JSON spec writes trace and span ids as hex, where protobuf's JSON mapping has base64.
    for resource in data.get("resourceSpans", []):
        for scope in resource.get("scopeSpans", []):
            for span in scope.get("spans", []):
                _hex_ids(span)
                for link in span.get("links", []):
                    _hex_ids(link)
    return data


def _hex_ids(item: dict[str, Any]) -> None:
    for key in ("traceId", "spanId", "parentSpanId"):
        if item.get(key):
            item[key] = base64.b64decode(item[key]).hex()
