"""Anticipated failures are acted on, and those nothing prevents go to the feedback handler, which may abort.

Scenarios run BFS under a Controller on the scripted task of test_controller_scenarios. Where a
scenario needs one failure at a known checkpoint, a stub detector reports it (the detectors'
own rules are tested in test_failures); elsewhere the real detectors see it coming.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from openai_server import FakeOpenAIServer
from test_controller_scenarios import (
    STEADY,
    ScriptTask,
    by_depth,
    padded_child,
    run,
    scripted,
)
from test_interactive_cli import general_server_reply

from thoughtloom import solve
from thoughtloom.control import (
    AutomaticHandler,
    CallbackHandler,
    Controller,
    ControlReport,
    ControlSettings,
)
from thoughtloom.control.failures import DetectorLimits, FailureAnticipator
from thoughtloom.control.types import (
    AnticipatedFailure,
    BudgetRequest,
    DepthAction,
    DepthAnswer,
    DepthDecision,
    FailureAction,
    FailureMode,
    SearchState,
)
from thoughtloom.llm.budget import BudgetLimits
from thoughtloom.llm.gateway import Gateway
from thoughtloom.run.spec import AutoAnswers
from thoughtloom.search import SearchConfig, search
from machine import scaled

# Slow progress, 0.30 -> 0.33 -> 0.36 ...: at depth 2 of 4 the depth-exceeded detector sees the
# limit coming long before acceptable (about 13 more levels needed at 0.03 a level).
SLOW = {d: 3 + 0.3 * (d - 1) for d in range(1, 9)}


async def test_a_foreseen_depth_limit_is_put_to_the_handler_and_an_approval_raises_it_early() -> None:
    asked: list[DepthDecision] = []

    def deeper(decision: DepthDecision, state: SearchState) -> DepthAnswer:
        asked.append(decision)
        return DepthAnswer(DepthAction.CONTINUE, 2)

    r = await run(scripted(padded_child, by_depth(SLOW)), ControlSettings(), CallbackHandler(on_depth=deeper),
                  max_depth=4)
    first = asked[0]
    assert first.raises_limit and "likely to reach the depth limit 4" in first.reason
    assert "Ask to raise the depth limit" in first.suggestion and "(the hard limit is 7)" in first.suggestion
    assert r.actions("depth_exceeded")[0].action == "asked to raise the depth limit: now 6 (was 4)"
    raised = next(d for d in r.control.decisions if d.decision == "continue_deeper")
    assert raised.depth == 2  # asked two levels before the limit, not at it
    assert r.control.depth_limits.search == 7  # raised again later, up to the hard limit 4 + 3
    assert r.result.stats.max_depth == 7  # the search went past the limit it started with


async def test_a_failure_nothing_prevents_is_put_to_the_handler_which_aborts() -> None:
    seen: list[AnticipatedFailure] = []

    def abort(failure: AnticipatedFailure, state: SearchState) -> FailureAction:
        seen.append(failure)
        return FailureAction.ABORT

    # No margin: the depth limit is the hard one, so raising it cannot prevent the failure.
    r = await run(scripted(padded_child, by_depth(SLOW)), ControlSettings(depth_margin=0),
                  CallbackHandler(on_failure=abort), max_depth=4)
    assert [f.mode for f in seen] == [FailureMode.DEPTH_EXCEEDED]
    assert "cannot be raised" in seen[0].prevention and "raise the depth limit" not in seen[0].prevention
    assert r.actions("depth_exceeded")[0].action == "no deeper limit asked: the depth limit 4 is the hard limit"
    assert r.decisions("failure")[-1] == "abort"
    assert r.result.termination_reason == "anticipated_failure"
    assert r.result.stats.max_depth == 2  # stopped two levels before the limit, with its best answer
    assert r.result.answer is not None


async def test_a_failure_the_handler_lets_pass_is_not_asked_about_again() -> None:
    seen: list[FailureMode] = []

    def carry_on(failure: AnticipatedFailure, state: SearchState) -> FailureAction:
        seen.append(failure.mode)
        return FailureAction.CONTINUE

    r = await run(scripted(padded_child, by_depth(SLOW)), ControlSettings(depth_margin=0),
                  CallbackHandler(on_failure=carry_on), max_depth=4)
    assert seen.count(FailureMode.DEPTH_EXCEEDED) == 1
    assert "continue" in r.decisions("failure")
    assert r.result.termination_reason == "max_depth"


def test_automatic_answers_abort_above_their_bar_through_solve() -> None:
    model = scripted(padded_child, by_depth(SLOW))
    common = {"task": ScriptTask(), "model": model, "generation": "sample", "breadth": 2, "beam": 1, "max_depth": 4,
              "value_samples": 1, "controller": ControlSettings(depth_margin=0), "one_pass": True}
    aborted = solve("sort a list", answers=AutoAnswers(abort_above=0.8), **common)
    assert aborted.termination_reason == "anticipated_failure"
    kept_on = solve("sort a list", **common)  # by default the automatic answers never abort
    assert kept_on.termination_reason == "max_depth"


@dataclass(frozen=True, slots=True)
class BudgetRunningOut:
    """Reports budget exhaustion, 90% likely, from the second checkpoint on (the controller's response is under test)."""

    mode: ClassVar[FailureMode] = FailureMode.BUDGET_EXHAUSTED

    def assess(self, state: SearchState, limits: DetectorLimits) -> AnticipatedFailure | None:
        if len(state.progress) < 2:
            return None
        return AnticipatedFailure(self.mode, 0.9, "within ~3 expansions", "Request more tokens.",
                                  "Offer the best thought.", "test")


async def test_a_foreseen_budget_exhaustion_asks_for_tokens_before_they_are_short() -> None:
    requests: list[BudgetRequest] = []

    def grant(request: BudgetRequest) -> float:
        requests.append(request)
        return request.amount

    gateway_tokens = 1_000
    controller = Controller(ControlSettings(), CallbackHandler(on_budget=grant),
                            anticipator=FailureAnticipator(detectors=(BudgetRunningOut(),)))
    gateway = Gateway(scripted(padded_child, by_depth(STEADY)), BudgetLimits(tokens=gateway_tokens))
    config = SearchConfig(strategy="bfs", generation="sample", breadth=2, beam=1, max_depth=6, value_samples=1,
                          one_pass=True)
    result = await search(ScriptTask(), "sort a list", gateway, config, controller=controller)
    assert isinstance(result.control, ControlReport)
    [request] = requests
    assert request.limit == "tokens" and request.situation.left is not None
    assert request.situation.left > 200  # far more than an expansion costs: asked early, not when short
    asked = next(d for d in result.control.decisions if d.decision == "request_increase")
    assert "asking early" in asked.reason
    assert gateway.budget.limits.tokens == gateway_tokens + request.amount
    act = result.control.actions[0]
    assert act.mode == "budget_exhausted" and act.action.endswith("before they run out: granted")


async def test_a_denied_early_request_is_not_repeated_when_the_tokens_are_really_short() -> None:
    asked: list[BudgetRequest] = []
    handler = CallbackHandler(on_budget=lambda request: asked.append(request) or 0,
                              on_failure=lambda failure, state: FailureAction.CONTINUE)
    r = await run(scripted(padded_child, by_depth(STEADY)), ControlSettings(), handler, tokens=200)
    assert len(asked) == 1 and r.control.budget_requests[0].approved is False
    assert r.actions("budget_exhausted")[0].action.endswith("before they run out: denied")
    assert r.decisions("budget") == ["request_increase", "denied"]  # the negotiator did not ask again


async def test_the_automatic_handler_never_aborts_unless_told_to() -> None:
    failure = AnticipatedFailure(FailureMode.PROBLEM_INTRACTABLE, 0.95, "now", "p.", "m.", "e")
    state = SearchState(3, 6, 10, 3, 500, 1000, 500, None, [0.1], 9, 0, 0, [], [], 160.0)
    assert await AutomaticHandler().failure_feedback(failure, state) is FailureAction.CONTINUE
    assert await AutomaticHandler(abort_above=0.9).failure_feedback(failure, state) is FailureAction.ABORT
    assert await AutomaticHandler(abort_above=0.99).failure_feedback(failure, state) is FailureAction.CONTINUE


def test_loom_solve_auto_abort_above_stops_on_a_failure_it_cannot_prevent(server: FakeOpenAIServer) -> None:
    server.responder = general_server_reply  # 0.3, 0.45, 0.6 by depth: depth 3 ends below acceptable
    args = [sys.executable, "-m", "thoughtloom", "solve", "--task", "general",
            "--model", f"openai-compatible:{server.url}@scripted#completions", "--breadth", "2", "--beam", "1",
            "--one-pass", "--depth", "3", "--hard-depth", "3", "--value-samples", "1", "--json", "--quiet", "--no-interactive",
            "--no-store", "--auto-abort-above", "0.8", "sort a list"]
    proc = subprocess.run(args, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          cwd=Path(__file__).parents[1], timeout=scaled(60), check=False)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["termination_reason"] == "anticipated_failure"
    abort = [d for d in out["control"]["decisions"] if d["kind"] == "failure" and d["decision"] == "abort"]
    assert len(abort) == 1 and abort[0]["mode"] == "depth_exceeded" and abort[0]["likelihood"] >= 0.8
    assert out["answer"] is not None  # the best answer so far is kept
