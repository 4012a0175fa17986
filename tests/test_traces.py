"""A strategy's trace: a frozen dataclass its strategy reads from the graph, as `--json` data and `loom solve` lines."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
from test_agent import Broken, run, trip_model
from test_cove import CHECKS, DRAFT, QUESTION, REVISION, cove, world
from test_recursive import PROBLEM as POEM, decomposition, plans, run as run_recursive
from test_structured_plans import json_recursion

from thoughtloom.api import asolve
from thoughtloom.cli.solve import format_text
from thoughtloom.llm.budget import BudgetLimits
from thoughtloom.llm.fake import ScriptedBackend
from thoughtloom.llm.gateway import Gateway
from thoughtloom.llm.types import Completion, GenerateRequest
from thoughtloom.search import SearchConfig, SearchResult, search
from thoughtloom.search.agent.scheduler import AgentTrace
from thoughtloom.search.strategies.cove import CoveCheck, CoveTrace
from thoughtloom.search.strategies.recursive import RecursionTrace
from thoughtloom.search.strategies.registry import built_in_strategies, trace_of
from thoughtloom.tasks import get_task
from thoughtloom.tools import Toolbox

RECURSION_LINE = ("recursion: verified true · goals 3 · decompositions 1 · recompositions 1 (failed 0) · invalid "
                  "plans 0 · cycles 0 · backtracks 0 · retries 0")


def test_the_recursive_trace_is_its_summary_and_every_nodes_record_printed_as_one_line() -> None:
    result = run_recursive(json_recursion())
    trace = result.trace
    assert isinstance(trace, RecursionTrace)
    assert trace.summary["verified"] is True and trace.summary["decompositions"] == 1
    assert all("goal" in n.record for n in trace.nodes) and trace.nodes[0].node == 0
    assert trace.to_dict() == result.recursion() == result.to_dict()["recursion"]
    assert trace.to_dict()["nodes"][0] == {"node": 0, "kind": trace.nodes[0].kind, "status": trace.nodes[0].status,
                                           **trace.nodes[0].record}
    assert trace.lines() == [RECURSION_LINE]
    assert RECURSION_LINE in format_text(result).splitlines()


class SolvesNothing(ScriptedBackend):
    """Answers every call but those that solve a goal, which wait until cancelled."""

    solving: asyncio.Event | None = None

    async def generate(self, request: GenerateRequest) -> Completion:
        if "Solve the goal" in request.prompt.as_text():
            assert self.solving is not None
            self.solving.set()
            await asyncio.Event().wait()
        return await super().generate(request)


def test_a_recursive_run_cancelled_mid_way_keeps_the_trace_of_what_it_did() -> None:
    model = SolvesNothing().on("Decompose the goal", plans(decomposition("first line", "second line")))
    config = SearchConfig(strategy="recursive", breadth=3, beam=3, max_depth=1, temperature=0.0)

    async def cancelled_while_solving() -> SearchResult:  # as Ctrl-C does: the engine returns what it has
        model.solving = asyncio.Event()
        run = asyncio.create_task(search(get_task("general"), POEM, Gateway(model, BudgetLimits(tokens=200_000)),
                                         config))
        await model.solving.wait()
        run.cancel()
        return await run

    result = asyncio.run(cancelled_while_solving())
    assert result.termination_reason == "interrupted"
    trace = result.trace
    assert isinstance(trace, RecursionTrace)
    assert trace.summary["decompositions"] == 1 and trace.summary["verified"] is False
    assert [n.record["goal"] for n in trace.nodes][-2:] == ["first line", "second line"]
    assert trace.lines()[0].startswith("recursion: verified false · goals 3 · decompositions 1")


def test_the_cove_trace_is_the_draft_each_check_with_its_answer_and_the_revision_and_prints_nothing() -> None:
    result = cove(world())
    trace = result.trace
    assert isinstance(trace, CoveTrace)
    assert trace.draft == DRAFT and trace.revision == REVISION
    assert [(c.question, c.answer) for c in trace.checks] == list(CHECKS.items())
    assert trace.to_dict() == {
        "questions": 2, "answered": 2, "revised": True, "off_topic": 0, "draft": DRAFT,
        "checks": [{"node": c.node, "question": c.question, "answer": c.answer} for c in trace.checks],
        "revision": REVISION,
    }
    assert trace.to_dict() == result.cove() == result.to_dict()["cove"]
    # The best path shows the draft, the questions and the revision: the trace adds no line of its own.
    assert trace.lines() == []


def test_an_unanswered_cove_question_has_no_answer_in_the_trace() -> None:
    model = world()
    model.on("Question: Which river flows through Salzburg?\n", "")
    (first, second) = cove(model).trace.checks  # type: ignore[union-attr]
    assert first.answer == CHECKS["Where was Mozart born?"]
    assert second == CoveCheck(second.node, "Which river flows through Salzburg?", None)


def test_the_agent_trace_lists_every_worked_node_and_prints_the_summary_and_each_failure() -> None:
    result = asyncio.run(run(trip_model(), Toolbox([Broken(failures=5)]), on_failure="fail"))
    trace = result.trace
    assert isinstance(trace, AgentTrace)
    assert [n.node for n in trace.nodes] == [n.id for n in result.graph]
    add_up = next(n for n in trace.nodes if n.step.startswith("Add up"))
    check = next(n for n in trace.nodes if n.step.startswith("Check the total"))
    assert add_up.status == "failed" and "the calculator is down" in add_up.shown["error"]
    assert add_up.node in check.after and check.node not in add_up.after
    assert trace.to_dict() == result.agent() == result.to_dict()["agent"]
    assert trace.lines() == [
        "agent: 5 steps worked (4 succeeded, 1 failed, 0 replanned, 4 cancelled) · tool calls 1 (1 failed, "
        "0 malformed replies) · order breadth_first",
        "  #4 evidence failed: calc: error: the calculator is down",
        "  #5 analysis cancelled: cancelled: node 4, which it depends on, failed",
        "  #6 synthesis cancelled: cancelled: node 5, which it depends on, failed",
        "  #7 critique cancelled: cancelled: node 6, which it depends on, failed",
        "  #8 solution cancelled: cancelled: node 7, which it depends on, failed",
    ]
    text = format_text(result).splitlines()
    assert text[-len(trace.lines()):] == trace.lines()


def test_a_trace_is_frozen() -> None:
    trace = cove(world()).trace
    with pytest.raises(dataclasses.FrozenInstanceError):
        trace.draft = "another"  # type: ignore[union-attr,misc]


def test_a_strategy_that_keeps_no_trace_has_none_in_its_result_and_json() -> None:
    model = ScriptedBackend(default="Answer: 42\nScore: 0.9")
    result = asyncio.run(asolve(QUESTION, model=model, strategy="bfs", controller=False))
    assert result.trace is None and result.recursion() is None and result.cove() is None and result.agent() is None
    assert not {"recursion", "agent", "cove"} & set(result.to_dict())


def test_the_strategies_that_keep_a_trace_declare_how_to_read_it_and_each_under_its_own_key() -> None:
    keeping = {s.name: s.trace for s in built_in_strategies() if s.trace is not None}
    assert keeping == {"recursive": RecursionTrace.read, "agent": AgentTrace.read, "cove": CoveTrace.read}
    assert len({read.__self__.key for read in keeping.values()}) == 3  # type: ignore[attr-defined]


def test_a_trace_is_read_for_the_strategy_the_run_names_and_for_no_other() -> None:
    result = cove(world())
    assert isinstance(trace_of("cove", result.graph), CoveTrace)
    assert trace_of("bfs", result.graph) is None and trace_of("no_such_strategy", result.graph) is None
