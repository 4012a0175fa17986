"""`loom bench --price-in/--price-out`: lanes' cost at the user's price, unknown without one, never $0."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from benchdata import needs
from openai_server import FakeOpenAIServer
from test_bench_cli import DATA, bench_args, completions
from test_cli import assert_one_line_error, loom

from thoughtloom.cli.main import main
from thoughtloom.eval.protocol import Protocol

pytestmark = needs("game24/24_dev.csv")

PRICE = ("--price-in", "1000", "--price-out", "2000")


def run(server: FakeOpenAIServer, out: Path, *extra: str) -> int:
    server.responder = completions({})
    return main(bench_args(server, out, "--lanes", "io", "--limit", "2", "--no-plot", *extra))


def records(out: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines() if line.strip()]


def test_bench_reports_a_lanes_cost_at_the_given_price(server: FakeOpenAIServer, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    assert run(server, out, *PRICE) == 0
    (summary,) = json.loads((out / "summary.json").read_text())["summaries"]
    expected = sum((int(r["input_tokens"]) * 1000 + int(r["output_tokens"]) * 2000) / 1e6  # type: ignore[call-overload]
                   for r in records(out))
    assert expected > 0
    assert summary["cost_usd"] == pytest.approx(expected)
    assert summary["mean_cost_usd"] == pytest.approx(expected / 2)
    assert f"${expected:.4g}" in capsys.readouterr().out


def test_bench_cost_without_a_price_is_unknown_not_zero(server: FakeOpenAIServer, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    assert run(server, out) == 0
    (summary,) = json.loads((out / "summary.json").read_text())["summaries"]
    assert summary["cost_usd"] is None and summary["mean_cost_usd"] is None
    table = capsys.readouterr().out
    assert "| unknown |" in table and "$0" not in table


def test_bench_keeps_the_given_price_in_its_manifest(server: FakeOpenAIServer, tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert run(server, out, *PRICE) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert (manifest["price_in"], manifest["price_out"]) == (1000, 2000)


def test_a_dollar_budget_binds_at_the_given_price(server: FakeOpenAIServer, tmp_path: Path) -> None:
    # 1000 / 2000 USD per million tokens: $0.01 is 10 input tokens, less than one prompt.
    out = tmp_path / "run"
    assert run(server, out, *PRICE, "--budget-usd", "0.01") == 0
    assert {r["stop_reason"] for r in records(out)} == {"budget_cost_usd"}
    assert server.seen == []  # the reservation refused the first call: no dollar was spent past the limit


def test_bench_with_one_price_only_is_a_one_line_error(tmp_path: Path) -> None:
    proc = loom("bench", "--price-in", "1", "--lanes", "io", "--tasks", "game24", "--limit", "1",
                "--data-dir", str(DATA), "--out", str(tmp_path / "out"))
    assert_one_line_error(proc, "--price-in", "--price-out")


def test_bench_refusing_an_unpriced_dollar_budget_names_the_price_flags(server: FakeOpenAIServer,
                                                                      tmp_path: Path) -> None:
    proc = loom("bench", "--model", f"openai-compatible:{server.url}@m", "--budget-usd", "1", "--lanes", "io",
                "--tasks", "game24", "--limit", "1", "--data-dir", str(DATA), "--out", str(tmp_path / "out"))
    assert_one_line_error(proc, "--budget-usd", "--price-in", "--price-out")
    assert server.seen == []


def test_a_protocol_file_may_give_the_price(server: FakeOpenAIServer, tmp_path: Path) -> None:
    protocol = tmp_path / "protocol.json"
    protocol.write_text(json.dumps({"price_in": 1000, "price_out": 2000}))
    out = tmp_path / "run"
    assert run(server, out, "--protocol", str(protocol)) == 0
    (summary,) = json.loads((out / "summary.json").read_text())["summaries"]
    assert summary["cost_usd"] > 0


def test_a_manifest_without_prices_keeps_its_fingerprint(server: FakeOpenAIServer, tmp_path: Path) -> None:
    # A run started before the price fields existed resumes: its manifest hashes as it did.
    out = tmp_path / "run"
    assert run(server, out) == 0
    data = json.loads((out / "manifest.json").read_text())
    old = {k: v for k, v in data.items() if k not in ("price_in", "price_out")}
    assert Protocol.from_dict(old).fingerprint() == Protocol.from_dict(data).fingerprint()
    assert Protocol.from_dict({**data, "price_in": 1.0, "price_out": 1.0}).fingerprint() != \
        Protocol.from_dict(data).fingerprint()


def test_a_protocol_built_in_python_with_one_price_only_is_refused() -> None:
    from thoughtloom.eval.protocol import ProtocolError
    from thoughtloom.eval.runner import BenchOptions, build_protocol

    with pytest.raises(ProtocolError, match="price_out"):
        build_protocol(BenchOptions(tasks=["game24"], lanes=["io"], price_in=1.0), datasets={})
