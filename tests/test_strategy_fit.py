"""Which strategies a task can be searched with, decided before any model call (solve refuses, bench leaves out)."""

from __future__ import annotations

import asyncio

import pytest

from thoughtloom.api import asolve
from thoughtloom.eval.datasets import DATASETS, Dataset
from thoughtloom.eval.lanes import LaneError, check_lane
from thoughtloom.eval.report import format_table, summarize
from thoughtloom.eval.results import Record
from thoughtloom.llm.fake import ScriptedBackend
from thoughtloom.run.spec import SpecError
from thoughtloom.search.strategies.registry import fitting, unsupported_reason
from thoughtloom.tasks.registry import get_task


@pytest.mark.parametrize(
    ("strategy", "task", "reason"),
    [
        ("recursive", "game24", "task game24 has no decomposition for recursive (its steps have a fixed form)"),
        ("got", "game24", "task game24 has no aggregate and refine prompts, which got needs to merge thoughts"),
        ("got", "humaneval", "task humaneval has no aggregate and refine prompts, which got needs to merge thoughts"),
        ("bfs", "sorting", ("task sorting has no step prompts (propose or sample), which bfs needs; it searches "
                            "with recursive")),
        ("cove", "game24", ("cove drafts and revises a free-text answer, and task game24 composes its own answer "
                            "from its steps")),
    ],
)
def test_a_strategy_the_task_lacks_a_prompt_for_is_named_with_the_reason(strategy: str, task: str,
                                                                          reason: str) -> None:
    assert unsupported_reason(strategy, get_task(task)) == reason


@pytest.mark.parametrize(("task", "phrase"), [("game24", "bfs, dfs, best_first or mcts"),
                                             ("general", "bfs, dfs, best_first, mcts or got")])
def test_the_strategies_a_refusal_suggests_are_those_that_fit_the_task(task: str, phrase: str) -> None:
    assert fitting(get_task(task)) == phrase


def test_recursive_on_a_task_of_fixed_steps_suggests_only_strategies_that_fit() -> None:
    with pytest.raises(SpecError, match=r"use bfs, dfs, best_first or mcts$"):
        asyncio.run(asolve("What is 17 * 23 + 5?", task="math", model=ScriptedBackend(), strategy="recursive"))


@pytest.mark.parametrize(("strategy", "task"), [("bfs", "game24"), ("got", "general"), ("recursive", "general"),
                                                ("recursive", "sorting"), ("cove", "general"), ("mcts", "humaneval")])
def test_a_strategy_the_task_has_every_prompt_for_applies(strategy: str, task: str) -> None:
    assert unsupported_reason(strategy, get_task(task)) is None


def test_loom_solve_refuses_got_on_game24_before_any_model_call() -> None:
    model = ScriptedBackend(default="anything")
    with pytest.raises(SpecError, match="^--strategy got: task game24 has no aggregate and refine prompts"):
        asyncio.run(asolve("4 5 6 10", task="game24", model=model, strategy="got"))
    assert model.calls == []


def test_the_got_lane_is_left_out_of_game24_rather_than_failing_mid_run() -> None:
    with pytest.raises(LaneError, match="^lane got does not apply: task game24 has no aggregate and refine prompts"):
        check_lane("got", Dataset(DATASETS["game24"], [], ""))


def test_the_recursive_lane_is_left_out_of_game24_and_runs_on_the_got_tasks() -> None:
    with pytest.raises(LaneError, match="^lane recursive does not apply: task game24 has no decomposition"):
        check_lane("recursive", Dataset(DATASETS["game24"], [], ""))
    check_lane("recursive", Dataset(DATASETS["sorting32"], [], ""))


def test_a_step_a_task_lacks_mid_run_counts_as_a_lane_error_not_a_silent_failure() -> None:
    rec = Record("game24", "got", "1", 0, 0, None, False, None, None, 0, 10, 8, 2, 1, 0.1, "unsupported")
    (summary,) = summarize([rec], {"game24": "rate"}, ["got"], {"game24": 1})
    assert summary.lane_errors == 1
    assert "got: 1 of 1 problems ended in a model error, a crash or an unsupported step" in format_table([summary])
