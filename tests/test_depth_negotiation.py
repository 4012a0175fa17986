"""Depth negotiation: at the search's depth limit the controller asks, and an approval raises the limit.

The scripted task of test_controller_scenarios values every thought at depth d as the test says,
so the moment the search reaches its limit without an acceptable thought is known. Most
scenarios set act_threshold=1.0 so that the failure anticipation (which asks the same question a
level earlier, see test_failure_anticipation) stays out of the way and the depth policy is what asks.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from machine import scaled
from openai_server import FakeOpenAIServer
from test_controller_scenarios import ScriptTask, by_depth, padded_child, run, scripted
from test_interactive_cli import general_server_reply

from thoughtloom import solve
from thoughtloom.control import (
    AutomaticHandler,
    CallbackHandler,
    Controller,
    ControlReport,
    ControlSettings,
)
from thoughtloom.control.report import DepthLimits
from thoughtloom.control.types import (
    DepthAction,
    DepthAnswer,
    DepthDecision,
    SearchState,
)
from thoughtloom.llm.gateway import Gateway
from thoughtloom.run.spec import AutoAnswers, resolve
from thoughtloom.search import SearchConfig, search

REPO = Path(__file__).parents[1]
# 0.3, 0.4, 0.5 by depth 3 (still below the 0.7 acceptable), the goal at depth 4.
GOAL_AT_4 = {1: 3, 2: 4, 3: 5, 4: 10, 5: 10, 6: 10}
QUIET_ANTICIPATION = ControlSettings(act_threshold=1.0)


async def test_at_the_depth_limit_an_approval_raises_max_depth_and_the_search_goes_deeper() -> None:
    r = await run(scripted(padded_child, by_depth(GOAL_AT_4)), QUIET_ANTICIPATION, AutomaticHandler(extra_depth=2),
                  max_depth=3)
    depth = [d for d in r.control.decisions if d.kind == "depth"]
    assert [d.decision for d in depth] == ["request_feedback", "continue_deeper"]
    assert depth[0].depth == 3 and "depth limit 3 reached without an acceptable thought" in depth[0].reason
    assert "depth limit raised from 3 to 5 (hard limit 6)" in depth[1].reason and depth[1].detail["max_depth"] == 5
    assert r.control.depth_limits == DepthLimits(soft=5, hard=6, search=5, search_at_start=3)
    assert r.result.stats.max_depth == 4  # one level past the limit the search started with
    assert r.result.termination_reason == "goal_reached"


async def test_a_declined_request_ends_the_search_at_its_own_limit() -> None:
    r = await run(scripted(padded_child, by_depth(GOAL_AT_4)), QUIET_ANTICIPATION, AutomaticHandler(), max_depth=3)
    assert r.decisions("depth") == ["request_feedback", "stop"]
    assert r.result.stats.max_depth == 3
    assert r.result.termination_reason == "max_depth"
    assert r.control.depth_limits.search == 3


async def test_the_limit_is_never_raised_past_the_hard_depth() -> None:
    settings = ControlSettings(act_threshold=1.0, hard_depth=4)
    r = await run(scripted(padded_child, by_depth({1: 3, 2: 4, 3: 5, 4: 5.5, 5: 10})), settings,
                  AutomaticHandler(extra_depth=5), max_depth=3)
    assert r.control.depth_limits.hard == 4 and r.control.depth_limits.search == 4
    assert r.result.stats.max_depth == 4  # the goal at depth 5 stays out of reach
    assert r.result.termination_reason == "max_depth"


async def test_the_handler_sees_the_question_with_the_hard_limit_it_may_go_to() -> None:
    asked: list[tuple[DepthDecision, SearchState]] = []

    def one_more(decision: DepthDecision, state: SearchState) -> DepthAnswer:
        asked.append((decision, state))
        return DepthAnswer(DepthAction.CONTINUE, 1)

    r = await run(scripted(padded_child, by_depth(GOAL_AT_4)), QUIET_ANTICIPATION, CallbackHandler(on_depth=one_more),
                  max_depth=3)
    [(decision, state)] = asked
    assert decision.raises_limit is True and "hard limit 6" in decision.suggestion
    assert (state.depth, state.max_depth, state.hard_depth) == (3, 3, 6)
    assert r.result.stats.max_depth == 4 and r.result.termination_reason == "goal_reached"


async def test_no_question_when_every_answer_is_complete_at_the_limit() -> None:
    class ThreeSteps(ScriptTask):
        def natural_depth(self, problem: str) -> int:
            return 3

    asked: list[DepthDecision] = []
    handler = CallbackHandler(on_depth=lambda decision, state: asked.append(decision) or DepthAnswer(DepthAction.STOP))
    config = SearchConfig(strategy="bfs", generation="sample", breadth=2, beam=1, max_depth=3, value_samples=1,
                          one_pass=True)
    result = await search(ThreeSteps(), "sort a list", Gateway(scripted(padded_child, by_depth(GOAL_AT_4))), config,
                          controller=Controller(ControlSettings(), handler))
    assert asked == []
    assert result.termination_reason == "max_depth"


async def test_a_zero_margin_keeps_the_old_fixed_limit() -> None:
    r = await run(scripted(padded_child, by_depth(GOAL_AT_4)), ControlSettings(act_threshold=1.0, depth_margin=0),
                  AutomaticHandler(extra_depth=2), max_depth=3)
    assert r.control.depth_limits == DepthLimits(soft=3, hard=3, search=3, search_at_start=3)
    assert "request_feedback" not in r.decisions("depth")
    assert r.result.termination_reason == "max_depth"


# --- through the run layer: the default profile negotiates depth, from Python and the CLI -----------


def test_the_default_profile_lets_the_controller_go_three_levels_past_the_tasks_depth() -> None:
    spec = resolve("a question", task="general")
    assert spec.control is not None
    assert (spec.config.max_depth, spec.control.soft_depth, spec.control.hard_depth, spec.control.depth_margin) == (
        3, None, None, 3)


def test_solve_goes_deeper_when_its_automatic_answers_approve() -> None:
    result = solve("sort a list", task=ScriptTask(), model=scripted(padded_child, by_depth(GOAL_AT_4)),
                   generation="sample", breadth=2, beam=1, max_depth=3, value_samples=1, one_pass=True,
                   answers=AutoAnswers(extra_depth=1))
    assert isinstance(result.control, ControlReport)
    assert result.control.depth_limits.search_at_start == 3 and result.control.depth_limits.search == 4
    assert result.stats.max_depth == 4
    assert result.termination_reason == "goal_reached"


def test_solve_without_an_allowance_stops_at_the_tasks_depth() -> None:
    result = solve("sort a list", task=ScriptTask(), model=scripted(padded_child, by_depth(GOAL_AT_4)),
                   generation="sample", breadth=2, beam=1, max_depth=3, value_samples=1, one_pass=True)
    assert isinstance(result.control, ControlReport) and result.control.depth_limits.hard == 6
    assert result.stats.max_depth == 3 and result.termination_reason == "max_depth"


@pytest.mark.parametrize("field", [{"hard_depth": 0}, {"soft_depth": 0}, {"depth_margin": -1}])
def test_depth_limits_below_one_or_a_negative_margin_are_refused(field: dict[str, int]) -> None:
    with pytest.raises(ValueError, match="at least 1|>= 0"):
        ControlSettings(**field)


def test_loom_solve_auto_deeper_raises_the_depth_limit(server: FakeOpenAIServer) -> None:
    server.responder = general_server_reply  # values 0.3, 0.45, 0.6 by depth, the goal at depth 4
    args = [sys.executable, "-m", "thoughtloom", "solve", "--task", "general",
            "--model", f"openai-compatible:{server.url}@scripted#completions", "--breadth", "2", "--beam", "1",
            "--one-pass", "--depth", "3", "--value-samples", "1", "--json", "--quiet", "--no-interactive", "--no-store",
            "--auto-deeper", "1", "sort a list"]
    proc = subprocess.run(args, capture_output=True, text=True, stdin=subprocess.DEVNULL, cwd=REPO, timeout=scaled(60),
                          check=False)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["control"]["depth_limits"] == {"soft": 4, "hard": 6, "search": 4, "search_at_start": 3}
    assert out["stats"]["max_depth"] == 4
    assert out["termination_reason"] == "goal_reached" and out["answer"] == "merge sort"


def test_a_hard_depth_below_the_search_depth_is_a_one_line_error() -> None:
    from thoughtloom.run.spec import SpecError

    with pytest.raises(SpecError, match="hard depth 2 is below the search's depth 3"):
        resolve("a question", task="general", control={"hard_depth": 2})
