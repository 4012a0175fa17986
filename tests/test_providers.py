"""Reaching remote models as a user configures them: OPENAI_BASE_URL, a request timeout, and prices.

Every remote test goes through real HTTP to a scripted OpenAI-compatible server on 127.0.0.1.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from benchdata import data_dir, needs
from machine import scaled
from openai_server import FakeOpenAIServer, Reply, serve
from test_cli import LOOM, assert_one_line_error, loom
from test_role_models import QUESTION, SEARCH, reply

from thoughtloom.api import solve
from thoughtloom.llm.budget import FREE, BudgetLimits, Pricing
from thoughtloom.llm.errors import ModelTimeout
from thoughtloom.llm.registry import known_pricing, make_backend, parse_model_spec
from thoughtloom.llm.types import GenerateRequest, Prompt
from thoughtloom.run.execute import live_backend
from thoughtloom.run.options import spec_from_options
from thoughtloom.run.spec import RunSpec, SpecError, resolve

DATA = data_dir("game24/24_dev.csv")


@pytest.fixture
def chat_server() -> Any:
    """A scripted server answering the general task's prompts (the same answers for the same prompts)."""
    with serve(FakeOpenAIServer(responder=reply)) as fake:
        yield fake


def ask() -> GenerateRequest:
    return GenerateRequest(Prompt(text="Say something."), n=1)


# --- OPENAI_BASE_URL --------------------------------------------------------------------------------


def test_openai_models_go_to_openai_base_url_when_it_is_set() -> None:
    spec = parse_model_spec("openai:gpt-4o-mini", {"OPENAI_BASE_URL": "http://127.0.0.1:9/v1/"})
    assert spec.base_url == "http://127.0.0.1:9/v1"


def test_openai_models_behind_openai_base_url_are_recorded_under_that_server() -> None:
    spec = parse_model_spec("openai:gpt-4o-mini", {"OPENAI_BASE_URL": "http://127.0.0.1:9/v1"})
    assert spec.identity == "openai-compatible:http://127.0.0.1:9/v1@gpt-4o-mini"


def test_a_known_openai_model_behind_openai_base_url_has_no_known_price() -> None:
    assert known_pricing(parse_model_spec("openai:gpt-4o-mini", {"OPENAI_BASE_URL": "http://127.0.0.1:9/v1"})) is None
    assert known_pricing(parse_model_spec("openai:gpt-4o-mini", {})) is not None


async def test_an_openai_model_is_asked_at_openai_base_url_with_the_openai_key(server: FakeOpenAIServer) -> None:
    backend = make_backend("openai:gpt-4o-mini", {"OPENAI_API_KEY": "sk-mine", "OPENAI_BASE_URL": server.url})
    try:
        completion = await backend.generate(ask())
    finally:
        await backend.aclose()
    assert completion.texts == ("sample 0",)
    assert server.seen[0].headers["authorization"] == "Bearer sk-mine"
    assert server.seen[0].body["model"] == "gpt-4o-mini"


def test_a_malformed_openai_base_url_is_a_one_line_error() -> None:
    env = {**os.environ, "OPENAI_API_KEY": "sk-x", "OPENAI_BASE_URL": "127.0.0.1:8000"}
    proc = subprocess.run([*LOOM, "solve", "--model", "openai:gpt-4o-mini", "hi"], capture_output=True, text=True,
                          env=env, timeout=scaled(60), check=False)
    assert_one_line_error(proc, "must start with http:// or https://")


# --- the request timeout ----------------------------------------------------------------------------


async def test_a_request_slower_than_the_given_timeout_times_out(server: FakeOpenAIServer) -> None:
    server.script(Reply(200, None, delay_s=2.0))
    backend = make_backend(f"openai-compatible:{server.url}@m", {}, timeout_s=0.3)
    t0 = time.monotonic()
    with pytest.raises(ModelTimeout, match="0.3s"):
        await backend.generate(ask())
    assert time.monotonic() - t0 < 1.5
    await backend.aclose()


def test_the_timeout_option_reaches_the_runs_backend(chat_server: FakeOpenAIServer) -> None:
    spec = spec_from_options({"problem": QUESTION, "task": "general", "timeout": 7.5,
                              "model": f"openai-compatible:{chat_server.url}@m"})
    assert spec.model_timeout_s == 7.5
    assert live_backend(spec).timeout_s == 7.5  # type: ignore[attr-defined]


def test_a_zero_timeout_is_refused() -> None:
    with pytest.raises(SpecError, match="timeout"):
        resolve(QUESTION, task="general", model_timeout_s=0)


def test_a_negative_timeout_option_is_a_one_line_error() -> None:
    assert_one_line_error(loom("solve", "--timeout", "-1", "hi"), "--timeout")


# --- prices -----------------------------------------------------------------------------------------


def test_an_embedded_model_costs_nothing() -> None:
    assert known_pricing(parse_model_spec("local")) == FREE


def test_a_negative_price_is_refused() -> None:
    with pytest.raises(ValueError, match="USD per million"):
        Pricing(-1.0, 2.0)


def test_the_given_price_makes_a_dollar_budget_hold(chat_server: FakeOpenAIServer) -> None:
    # $0.001 a token: each request reserves its prompt and its whole reply, so only a few fit in $1
    # (the whole search answered costs about $0.18, but its requests could have cost more).
    result = solve(QUESTION, task="general", model=f"openai-compatible:{chat_server.url}@m#chat", controller=False,
                   budget=BudgetLimits(cost_usd=1.0), pricing=Pricing(1000, 1000), **SEARCH)
    assert result.termination_reason == "budget_cost_usd"
    assert 0 < result.usage.cost_usd <= 1.0
    assert result.usage.cost_known


def test_the_given_price_is_charged_per_token(chat_server: FakeOpenAIServer) -> None:
    result = solve(QUESTION, task="general", model=f"openai-compatible:{chat_server.url}@m#chat", controller=False,
                   pricing=Pricing(2.0, 10.0), **SEARCH)
    u = result.usage
    assert u.cost_usd == pytest.approx((2.0 * u.input_tokens + 10.0 * u.output_tokens) / 1e6)


def test_a_dollar_budget_on_a_model_without_a_price_is_refused_before_any_request(
        chat_server: FakeOpenAIServer) -> None:
    with pytest.raises(SpecError, match="--price-in"):
        resolve(QUESTION, task="general", model=f"openai-compatible:{chat_server.url}@m",
                budget=BudgetLimits(cost_usd=1.0))
    assert chat_server.seen == []


def test_a_dollar_budget_with_an_unpriced_role_model_names_that_role(chat_server: FakeOpenAIServer) -> None:
    with pytest.raises(SpecError, match="--evaluator-model"):
        resolve(QUESTION, task="general", model="openai:gpt-4o-mini", budget=BudgetLimits(cost_usd=1.0),
                role_models={"evaluator": f"openai-compatible:{chat_server.url}@m"})


def test_budget_usd_without_a_price_is_a_one_line_error(chat_server: FakeOpenAIServer) -> None:
    proc = loom("solve", "--task", "general", "--model", f"openai-compatible:{chat_server.url}@m", "--budget-usd",
                "1", QUESTION)
    assert_one_line_error(proc, "--budget-usd", "--price-in")
    assert chat_server.seen == []


def test_only_one_of_the_two_prices_is_a_one_line_error() -> None:
    assert_one_line_error(loom("solve", "--price-in", "1", "hi"), "--price-in", "--price-out")


def test_a_model_without_a_price_shows_its_cost_as_unknown(chat_server: FakeOpenAIServer) -> None:
    result = solve(QUESTION, task="general", model=f"openai-compatible:{chat_server.url}@m#chat", controller=False,
                   **SEARCH)
    assert not result.usage.cost_known
    assert result.usage.to_dict()["cost_usd"] is None


def test_the_cli_says_the_cost_is_unknown_rather_than_nothing(chat_server: FakeOpenAIServer) -> None:
    proc = loom("solve", "--task", "general", "--model", f"openai-compatible:{chat_server.url}@m",
                "--breadth", "2", "--depth", "1", QUESTION)
    assert proc.returncode == 0, proc.stderr
    assert "cost unknown" in proc.stdout


def test_the_cli_shows_the_cost_at_the_given_price(chat_server: FakeOpenAIServer) -> None:
    proc = loom("solve", "--task", "general", "--model", f"openai-compatible:{chat_server.url}@m",
                "--breadth", "2", "--depth", "1", "--one-pass", "--price-in", "1000", "--price-out", "1000",
                "--budget-usd", "5", QUESTION)
    assert proc.returncode == 0, proc.stderr
    assert "cost unknown" not in proc.stdout
    assert "tokens 116 of 20,000 (in 80 / out 36)" in proc.stdout  # what the scripted server reports
    assert "· $0.1160 ·" in proc.stdout  # 116 tokens at $0.001 each


def test_a_stored_spec_keeps_the_given_price_and_timeout() -> None:
    spec = resolve(QUESTION, task="general", model="openai-compatible:http://127.0.0.1:9/v1@m",
                   pricing=Pricing(1.5, 2.5), model_timeout_s=30.0)
    again = RunSpec.from_dict(spec.to_dict())
    assert again.pricing == Pricing(1.5, 2.5)
    assert again.model_timeout_s == 30.0


@needs("game24/24_dev.csv")
def test_bench_refuses_a_dollar_budget_on_a_model_without_a_price(chat_server: FakeOpenAIServer, tmp_path: Any) -> None:
    proc = loom("bench", "--model", f"openai-compatible:{chat_server.url}@m", "--budget-usd", "1", "--lanes", "io",
                "--tasks", "game24", "--limit", "1", "--data-dir", str(DATA), "--out", str(tmp_path / "out"))
    assert_one_line_error(proc, "--budget-usd", "lane io", "no known price")
    assert chat_server.seen == []


def test_a_stored_run_at_a_given_price_replays_within_its_dollar_budget_at_that_price(
        chat_server: FakeOpenAIServer, tmp_path: Path) -> None:
    import asyncio

    from thoughtloom.api import areplay
    from thoughtloom.store.sqlite import SQLiteStore

    store = str(tmp_path / "runs.db")
    result = solve(QUESTION, task="general", model=f"openai-compatible:{chat_server.url}@m#chat", controller=False,
                   budget=BudgetLimits(cost_usd=1.0), pricing=Pricing(1000, 1000), store=store, concurrency=1,
                   **SEARCH)
    sent = len(chat_server.seen)
    with SQLiteStore(store) as opened:
        replayed, verdict = asyncio.run(areplay(opened, str(result.run_id)))
    assert verdict.identical, str(verdict)
    assert len(chat_server.seen) == sent
    assert replayed.usage.cost_known
    assert result.usage.cost_usd > 0
    assert replayed.usage.cost_usd == pytest.approx(result.usage.cost_usd)
