"""Calls, dollars and wall-clock seconds are negotiated as tokens are: request more, compromise, or stop.

The scripted task of test_controller_scenarios makes three requests a level (one sampling two
thoughts, one value call each) and reaches the goal at depth 4, so the moment a calls, dollars or
seconds limit runs short (at the depth-3 checkpoint, best quality 0.6 < 0.7 acceptable) is known.
Seconds come from a clock the fake model moves by one second a request, so nothing waits.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from machine import scaled
from openai_server import FakeOpenAIServer
from test_controller_scenarios import (
    STEADY,
    ScriptTask,
    by_depth,
    padded_child,
    scripted,
)
from test_interactive_cli import general_server_reply

from thoughtloom.control import (
    AutomaticHandler,
    CallbackHandler,
    Controller,
    ControlReport,
    ControlSettings,
    FeedbackHandler,
)
from thoughtloom.control.types import BudgetRequest
from thoughtloom.llm.budget import Budget, BudgetLimits, Pricing
from thoughtloom.llm.fake import ScriptedBackend
from thoughtloom.llm.gateway import Gateway
from thoughtloom.llm.types import GenerateRequest
from thoughtloom.search import SearchConfig, SearchResult, search

REPO = Path(__file__).parents[1]
CONFIG = SearchConfig(strategy="bfs", generation="sample", breadth=2, beam=1, max_depth=6, value_samples=1)
REQUESTS_TO_GOAL = 12  # four levels of three requests


class Clock:
    """Seconds that pass only when the fake model answers a request."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def timed_model(clock: Clock) -> ScriptedBackend:
    """The steady scripted model, taking one second of `clock` per request."""
    steady = scripted(padded_child, by_depth(STEADY))
    assert steady.responder is not None
    respond = steady.responder

    def answer(request: GenerateRequest, index: int) -> str:
        if index == 0:
            clock.now += 1.0
        return respond(request, index)

    return ScriptedBackend(responder=answer)


async def run(limits: BudgetLimits, handler: FeedbackHandler, *, pricing: Pricing | None = None,
              clock: Clock | None = None) -> tuple[SearchResult, Gateway]:
    model = timed_model(clock) if clock is not None else scripted(padded_child, by_depth(STEADY))
    gateway = Gateway(model, Budget(limits, clock=clock) if clock is not None else Budget(limits), pricing=pricing)
    result = await search(ScriptTask(), "sort a list", gateway, CONFIG,
                          controller=Controller(ControlSettings(), handler))
    return result, gateway


def control_of(result: SearchResult) -> ControlReport:
    """The controller's report of a run under the built-in Controller."""
    assert isinstance(result.control, ControlReport)
    return result.control


async def test_a_call_budget_asks_is_granted_and_spends_past_the_original_limit() -> None:
    result, gateway = await run(BudgetLimits(calls=12), AutomaticHandler(approve_calls=10))
    [request] = control_of(result).budget_requests
    asked = request.request
    assert (asked.limit, asked.amount, request.granted, request.approved) == ("calls", 6, 6, True)
    assert "tokens" not in request.to_dict()  # a calls request is not a token request
    assert asked.situation.limit == "calls" and asked.situation.left == 3
    assert "9 calls spent, 3 calls left" in asked.justification
    assert gateway.budget.limits.calls == 12 + 6
    assert result.usage.calls > 12 - 3  # past the point where the original limit would have stopped it
    assert result.termination_reason == "goal_reached"


async def test_a_denied_call_request_leads_to_the_compromise() -> None:
    result, gateway = await run(BudgetLimits(calls=12), AutomaticHandler())
    control = control_of(result)
    assert [(r.request.limit, r.approved) for r in control.budget_requests] == [("calls", False)]
    assert [d.decision for d in control.decisions if d.kind in ("budget", "compromise")] == [
        "request_increase", "denied", "propose", "accepted"]
    assert result.termination_reason == "compromise_accepted"
    assert gateway.budget.limits.calls == 12


async def test_a_refused_call_is_negotiated_and_made_once_the_limit_is_raised() -> None:
    # Two calls: the first level's second value call is refused before any checkpoint; the best
    # thought (0.6) is close to acceptable, so the refusal asks for one more call, and the call is made.
    grants: list[BudgetRequest] = []

    def grant(request: BudgetRequest) -> float:
        grants.append(request)
        return request.amount

    gateway = Gateway(scripted(padded_child, by_depth({1: 6, 2: 10})), BudgetLimits(calls=2))
    result = await search(ScriptTask(), "sort a list", gateway, CONFIG,
                          controller=Controller(ControlSettings(), CallbackHandler(on_budget=grant)))
    assert grants[0].limit == "calls" and grants[0].situation.left == 0 and grants[0].amount == 1
    refused = [rec for rec in gateway.records if rec.error is not None]
    assert "call budget of 2 is used up" in (refused[0].error or "")
    again = gateway.records[gateway.records.index(refused[0]) + 1]
    assert again.error is None and again.prompt == refused[0].prompt
    assert result.termination_reason == "goal_reached"


async def test_a_dollar_budget_asks_is_granted_and_spends_past_the_original_limit() -> None:
    price = Pricing(input_per_mtok=100.0, output_per_mtok=100.0)  # $0.0001 a token
    result, gateway = await run(BudgetLimits(cost_usd=0.02), AutomaticHandler(approve_usd=1.0), pricing=price)
    [request] = control_of(result).budget_requests
    assert (request.request.limit, request.request.amount, request.granted) == ("cost_usd", 0.01, 0.01)
    assert gateway.budget.limits.cost_usd == pytest.approx(0.03)
    assert 0.02 < result.usage.cost_usd <= 0.03
    assert result.termination_reason == "goal_reached"


async def test_a_wall_clock_budget_asks_is_granted_and_runs_past_the_original_limit() -> None:
    clock = Clock()
    result, gateway = await run(BudgetLimits(wall_s=10), AutomaticHandler(approve_seconds=20), clock=clock)
    [request] = control_of(result).budget_requests
    assert (request.request.limit, request.approved) == ("wall_s", True)
    assert request.request.amount == request.granted == 5  # capped at half the original 10 seconds
    assert "9 seconds spent, 1 seconds left" in request.request.justification
    assert gateway.budget.limits.wall_s == 10 + 5
    assert clock.now == REQUESTS_TO_GOAL > 10  # the fake clock ran past the original limit
    assert result.termination_reason == "goal_reached"


async def test_no_thought_worth_a_compromise_stops_at_the_limit_it_ran_out_of() -> None:
    poor = scripted(padded_child, by_depth(dict.fromkeys(range(1, 7), 2)))
    gateway = Gateway(poor, BudgetLimits(calls=9))
    flat = await search(ScriptTask(), "sort a list", gateway, CONFIG,
                        controller=Controller(ControlSettings(), AutomaticHandler(approve_calls=10)))
    assert flat.termination_reason == "budget_calls"
    assert control_of(flat).budget_requests == ()  # nothing worth paying for


# --- from the command line ---------------------------------------------------------------------------


def loom_json(server: FakeOpenAIServer, *extra: str) -> dict[str, Any]:
    server.responder = general_server_reply
    args = [sys.executable, "-m", "thoughtloom", "solve", "--task", "general",
            "--model", f"openai-compatible:{server.url}@scripted#completions", "--breadth", "2", "--beam", "1",
            "--depth", "5", "--value-samples", "1", "--json", "--quiet", "--no-interactive", "--no-store",
            *extra, "sort a list"]
    proc = subprocess.run(args, capture_output=True, text=True, stdin=subprocess.DEVNULL, cwd=REPO, timeout=scaled(60),
                          env={**os.environ, "PYTHONUNBUFFERED": "1"}, check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_auto_approve_calls_grants_calls_past_budget_calls(server: FakeOpenAIServer) -> None:
    out = loom_json(server, "--budget-calls", "12", "--auto-approve-calls", "6")
    [request] = out["control"]["budget_requests"]
    assert (request["limit"], request["granted"], request["approved"]) == ("calls", 6, True)
    assert out["usage"]["calls"] > 12
    assert out["termination_reason"] == "goal_reached"


def test_without_an_allowance_budget_calls_stays_hard(server: FakeOpenAIServer) -> None:
    out = loom_json(server, "--budget-calls", "12")
    [request] = out["control"]["budget_requests"]
    assert (request["limit"], request["approved"]) == ("calls", False)
    assert out["usage"]["calls"] <= 12
    assert out["termination_reason"] == "compromise_accepted"


def test_budget_limits_read_as_a_person_reads_them() -> None:
    from thoughtloom.llm.budget import BudgetLimits

    assert BudgetLimits(tokens=20_000, cost_usd=0.5).text() == "20,000 tokens, $0.5"
    assert BudgetLimits(calls=3, wall_s=60).text() == "3 calls, 60 s"
    assert BudgetLimits().text() == "no limit"
