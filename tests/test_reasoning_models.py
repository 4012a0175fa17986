"""Reasoning models: --reasoning-effort and --thinking-tokens reach the endpoints that take them, and the
reasoning tokens they report are counted in the budget and shown in usage (through real HTTP on 127.0.0.1)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import BackendFactory
from inprocess import loom_here
from openai_server import FakeOpenAIServer, Reply, Seen, always, serve
from test_anthropic_backend import ask, general_reply, message, root

from thoughtloom.api import areplay, solve
from thoughtloom.llm.anthropic_backend import AnthropicBackend
from thoughtloom.llm.budget import BudgetLimits
from thoughtloom.llm.errors import ModelConfigError
from thoughtloom.llm.gateway import Gateway
from thoughtloom.llm.registry import make_backend
from thoughtloom.llm.types import Usage
from thoughtloom.run.spec import SpecError
from thoughtloom.store.sqlite import SQLiteStore

SECRET = "THE HIDDEN CHAIN OF THOUGHT"


def thinking(reply: Reply, output_tokens: int = 1_100) -> Reply:
    """An Anthropic answer with a thinking block before its text, billing the thinking as output."""
    assert reply.body is not None
    body = {**reply.body, "content": [{"type": "thinking", "thinking": SECRET, "signature": "sig"},
                                      *reply.body["content"]]}
    body["usage"] = {**body["usage"], "output_tokens": output_tokens}
    return Reply(200, body)


def reasoning_openai(seen: Seen) -> Reply:
    """An OpenAI-compatible answer whose usage reports hidden reasoning inside completion_tokens."""
    reply = always("42")(seen)
    assert reply.body is not None
    reply.body["usage"] = {"prompt_tokens": 10, "completion_tokens": 100, "total_tokens": 110,
                           "completion_tokens_details": {"reasoning_tokens": 90}}
    return reply


@pytest.fixture
def anthropic_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAIServer]:
    """A Messages API double whose every answer thought first, and the environment pointing at it."""
    with serve(FakeOpenAIServer(responder=lambda seen: thinking(general_reply(seen)))) as server:
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", root(server))
        yield server


def anthropic(server: FakeOpenAIServer, **kwargs: Any) -> AnthropicBackend:
    made = make_backend("anthropic:claude-test", {"ANTHROPIC_API_KEY": "k", "ANTHROPIC_BASE_URL": root(server)},
                        **kwargs)
    assert isinstance(made, AnthropicBackend)
    return made


# --- OpenAI-compatible: reasoning_effort ------------------------------------------------------------


async def test_reasoning_effort_is_sent_exactly_when_set(server: FakeOpenAIServer, backend_for: BackendFactory) -> None:
    await backend_for(reasoning_effort="high").generate(ask())
    await backend_for().generate(ask())
    assert server.seen[0].body["reasoning_effort"] == "high"
    assert "reasoning_effort" not in server.seen[1].body


async def test_reasoning_tokens_the_server_reports_are_in_usage_once(backend_for: BackendFactory) -> None:
    with serve(FakeOpenAIServer(responder=reasoning_openai)) as server:
        backend = backend_for(base_url=server.url, reasoning_effort="low")
        gateway = Gateway(backend)
        completion = await gateway.generate(ask(max_tokens=200))
        await backend.aclose()
    assert completion.usage == Usage(10, 100, 90)
    # completion_tokens already holds the reasoning: charged once, not 100 + 90.
    assert gateway.budget.spent == Usage(10, 100, 90)


def test_the_cli_sends_the_effort_and_shows_reasoning_in_the_summary(capsys: pytest.CaptureFixture[str]) -> None:
    with serve(FakeOpenAIServer(responder=reasoning_openai)) as server:
        out = loom_here(capsys, "solve", "--model", f"openai-compatible:{server.url}@o-test", "--reasoning-effort",
                        "medium", "--task", "general", "--depth", "1", "--breadth", "1",
                        "What is six times seven?")
    assert out.returncode == 0, out.stderr
    assert {s.body.get("reasoning_effort") for s in server.seen} == {"medium"}
    assert f"/ out {100 * len(server.seen):,}, reasoning {90 * len(server.seen):,})" in out.stdout


# --- Anthropic: extended thinking -------------------------------------------------------------------


async def test_a_thinking_budget_is_sent_with_max_tokens_above_it(anthropic_env: FakeOpenAIServer) -> None:
    backend = anthropic(anthropic_env, thinking_tokens=2_000)
    await backend.generate(ask(max_tokens=300))
    await anthropic(anthropic_env).generate(ask(max_tokens=300))
    with_thinking, without = (s.body for s in anthropic_env.seen)
    assert with_thinking["thinking"] == {"type": "enabled", "budget_tokens": 2_000}
    assert with_thinking["max_tokens"] == 2_300  # the reply keeps its own 300 after the thinking
    assert "thinking" not in without and without["max_tokens"] == 300


async def test_thinking_text_never_reaches_the_answer(anthropic_env: FakeOpenAIServer) -> None:
    anthropic_env.script(thinking(message("42", output_tokens=5), output_tokens=900))
    completion = await anthropic(anthropic_env, thinking_tokens=1_024).generate(ask())
    assert completion.texts == ("42",)
    assert completion.usage.output_tokens == 900  # Anthropic bills the thinking as output
    assert 0 < completion.usage.reasoning_tokens < 900  # the output the reply's text does not account for


async def test_the_gateway_reserves_the_thinking_budget_so_billed_thinking_is_not_clamped(
        anthropic_env: FakeOpenAIServer) -> None:
    gateway = Gateway(anthropic(anthropic_env, thinking_tokens=1_024), BudgetLimits(tokens=100_000))
    completion = await gateway.generate(ask(max_tokens=100))
    assert completion.usage.output_tokens == 1_100  # above max_tokens, within max_tokens + thinking
    assert gateway.budget.spent.output_tokens == 1_100


def test_a_run_stops_at_its_token_budget_when_thinking_eats_it(anthropic_env: FakeOpenAIServer) -> None:
    result = solve("What is six times seven?", task="general", model="anthropic:claude-test", controller=False,
                   breadth=2, beam=1, max_depth=4, value_samples=1, thinking_tokens=1_024,
                   budget=BudgetLimits(tokens=8_000))
    assert "budget" in result.termination_reason
    assert result.usage.total_tokens <= 8_000
    assert result.usage.output_tokens >= result.usage.reasoning_tokens > 0
    assert SECRET not in (result.answer or "") and all(SECRET not in s.content for s in result.best_path)


def test_a_stored_run_with_a_thinking_budget_replays_exactly(anthropic_env: FakeOpenAIServer, tmp_path: Path) -> None:
    store = str(tmp_path / "runs.db")
    result = solve("What is six times seven?", task="general", model="anthropic:claude-test", controller=False,
                   breadth=2, beam=1, max_depth=2, value_samples=1, thinking_tokens=1_024, store=store)
    live_calls = len(anthropic_env.seen)
    with SQLiteStore(store) as opened:
        replayed, verdict = asyncio.run(areplay(opened, str(result.run_id)))
    assert verdict.identical, str(verdict)
    assert verdict.model_calls == 0 and len(anthropic_env.seen) == live_calls
    assert replayed.answer == result.answer and replayed.usage == result.usage
    assert result.usage.reasoning_tokens > 0


# --- settings a model cannot take --------------------------------------------------------------------


@pytest.mark.parametrize("flag", [("--reasoning-effort", "low"), ("--thinking-tokens", "2000")])
def test_the_embedded_model_refuses_reasoning_settings_in_one_line(
        capsys: pytest.CaptureFixture[str], flag: tuple[str, str]) -> None:
    out = loom_here(capsys, "solve", "--model", "local", *flag, "What is six times seven?")
    assert out.returncode == 2 and out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and flag[0] in lines[0] and "embedded model" in lines[0], out.stderr


@pytest.mark.parametrize(("model", "settings", "says"), [
    ("anthropic:claude-test", {"reasoning_effort": "low"}, "--thinking-tokens"),
    ("openai-compatible:http://127.0.0.1:9/v1@m", {"thinking_tokens": 2_000}, "--reasoning-effort"),
    ("openai-compatible:http://127.0.0.1:9/v1@m#completions", {"reasoning_effort": "low"}, "chat endpoint"),
    ("anthropic:claude-test", {"thinking_tokens": 500}, "at least 1024"),
])
def test_a_setting_the_endpoint_does_not_take_is_refused(model: str, settings: dict[str, Any], says: str) -> None:
    with pytest.raises(ModelConfigError, match=says):
        make_backend(model, {"ANTHROPIC_API_KEY": "k"}, **settings)
    with pytest.raises(SpecError, match=says):
        solve("hi", task="general", model=model, **settings)
