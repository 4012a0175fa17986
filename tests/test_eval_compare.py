"""compare_strategies on any task: free-text questions, whole results, and lanes left out with their reason."""

from __future__ import annotations

import pytest

from thoughtloom.eval.datasets import Dataset, given_problems
from thoughtloom.eval.lanes import LaneError
from thoughtloom.eval.runner import compare_strategies
from thoughtloom.graph import NodeKind
from thoughtloom.llm.fake import ScriptedBackend
from thoughtloom.search.result import SearchResult
from thoughtloom.tasks.base import ProblemError

QUESTION = "What is the capital of France?"


def paris() -> ScriptedBackend:
    """Answers io with the span, cot with reasoning then the answer line, and any search prompt with Paris."""
    model = ScriptedBackend(default="Paris is the capital of France.")
    model.on(f"Question: {QUESTION}\nAnswer:", " Paris")
    model.on(f"Question: {QUESTION}\nReasoning:", " France's government sits in Paris.\nAnswer: Paris")
    return model


async def test_io_and_cot_answer_a_free_text_question() -> None:
    model = paris()
    out = await compare_strategies(QUESTION, ["io", "cot"], model=model, budget_tokens=2000)
    assert list(out) == ["io", "cot"]
    assert out["io"][0].answer == "Paris" and out["cot"][0].answer == "Paris"
    assert out["cot"][0].outcome.replies == (" France's government sits in Paris.\nAnswer: Paris",)
    assert len(model.calls) == 2


async def test_a_free_text_question_is_compared_on_the_general_task_unless_one_is_named() -> None:
    out = await compare_strategies(QUESTION, ["io"], model=paris(), budget_tokens=2000)
    assert out.protocol.tasks == ["general"]
    game = await compare_strategies("1 1 4 6", ["io"], task="game24",
                                    model=ScriptedBackend(default="Answer: 1 * 1 * 4 * 6 = 24"), budget_tokens=2000)
    assert game.protocol.tasks == ["game24"] and game["io"][0].record.solved


async def test_the_general_task_has_no_checker_so_its_table_shows_no_success_rate() -> None:
    out = await compare_strategies(QUESTION, ["io"], model=paris(), budget_tokens=2000)
    assert out.summaries["io"].metric == "unchecked"
    assert "| io | 1 | - (no checker) | - |" in out.table()


async def test_an_engine_lane_returns_its_whole_search_result_with_the_graph() -> None:
    out = await compare_strategies(QUESTION, ["tot"], model=paris(), budget_tokens=4000)
    (tot,) = out["tot"]
    assert isinstance(tot.search, SearchResult)
    assert tot.search.answer == tot.answer and len(tot.search.graph) > 1
    assert tot.outcome.replies == ()  # replies are the sampling lanes' record; a search keeps its calls


async def test_the_cove_lane_runs_on_a_free_text_question_and_returns_its_graph() -> None:
    model = paris()
    model.on("Verification questions (", "1. Which city is the seat of France's government?")
    model.on("Question: Which city is the seat of France's government?\n", "Answer: Paris.")
    model.on("Verifications:\n", "Final answer: Paris.")
    out = await compare_strategies(QUESTION, ["cove"], model=model, budget_tokens=4000)
    (cove,) = out["cove"]
    assert cove.answer == "Paris."
    assert [n.content for n in cove.search.graph.by_kind(NodeKind.QUESTION)] == [
        "Which city is the seat of France's government?"]


async def test_lanes_that_do_not_apply_are_left_out_with_their_reason() -> None:
    model = ScriptedBackend(default="Answer: 1 * 1 * 4 * 6 = 24")
    out = await compare_strategies("1 1 4 6", ["io", "recursive"], task="game24", model=model, budget_tokens=2000)
    assert list(out) == ["io"] and list(out.summaries) == ["io"]
    assert out.left_out == {"recursive": "lane recursive does not apply: task game24 has no decomposition for "
                                         "recursive (its steps have a fixed form)"}
    assert "not run on game24: recursive (" in out.table()


async def test_no_lane_applying_is_an_error_before_any_call() -> None:
    model = ScriptedBackend(default="x")
    with pytest.raises(LaneError, match="^nothing to run: lane react needs a tool for general"):
        await compare_strategies(QUESTION, ["react"], model=model)
    assert model.calls == []


def test_a_problem_given_as_text_is_checked_by_its_task_before_any_model_loads() -> None:
    with pytest.raises(ProblemError):
        given_problems("1 2 3", "game24")
    ds = given_problems(QUESTION)
    assert isinstance(ds, Dataset) and ds.spec.task == "general" and ds.problems[0].shown == QUESTION


@pytest.mark.local_model
async def test_the_embedded_model_answers_a_free_text_question_through_io_and_cot() -> None:
    out = await compare_strategies(QUESTION, ["io", "cot"], model="local", budget_tokens=2000, seed=0)
    for lane in ("io", "cot"):
        (result,) = out[lane]
        assert result.outcome.replies and result.outcome.replies[0].strip()
        assert 0 < result.record.tokens <= 2000
