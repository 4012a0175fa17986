"""The agent on a question about numbers: every number from a tool, the answer from agreeing computations."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from thoughtloom.api import agent, areplay
from thoughtloom.cli.solve import format_text
from thoughtloom.graph import NodeKind, NodeStatus
from thoughtloom.llm.budget import BudgetLimits
from thoughtloom.llm.fake import ScriptedBackend
from thoughtloom.search.agent.kinds import printed_answer
from thoughtloom.store.sqlite import SQLiteStore
from thoughtloom.tools.builtin import CUT_NOTE, NOTHING_PRINTED, STDERR_NOTE

QUESTION = "A baker makes 3 trays of 12 cookies and sells 20 of them. How many cookies are left?"
RIGHT = "```python\nmade = 3 * 12\nsold = 20\nprint(made - sold)\n```"
WRONG = "```python\nprint(3 * 12)\n```"


def run(model: ScriptedBackend, tools: tuple[str, ...] = ("python",), task: str = QUESTION, **config: Any) -> Any:
    return asyncio.run(agent(task, tools=list(tools), model=model, controller=False, seed=0, **config))


def vote_of_node(result: Any) -> Any:
    return result.graph.by_kind(NodeKind.SYNTHESIS)[0]


def vote_of(result: Any) -> dict[str, Any]:
    return vote_of_node(result).extra["result"]


def test_a_question_about_numbers_is_computed_by_programs_the_python_tool_runs() -> None:
    model = ScriptedBackend(default="ok").on(f"Question: {QUESTION}", RIGHT)
    result = run(model)
    programs = result.graph.by_kind(NodeKind.CODE)
    assert len(programs) == 5
    assert all(p.extra["tool_calls"][0]["tool"] == "python" and p.extra["text"] == "16" for p in programs)
    assert result.answer == "16"


def test_a_question_about_numbers_asks_for_no_plan_and_no_prose_step() -> None:
    model = ScriptedBackend(default="ok").on(f"Question: {QUESTION}", RIGHT)
    run(model)
    assert {c.purpose for c in model.calls} == {"program"}


def test_the_answer_is_the_one_most_programs_printed() -> None:
    model = ScriptedBackend(default="ok").on(f"Question: {QUESTION}", WRONG, RIGHT, RIGHT, WRONG, RIGHT)
    result = run(model)
    assert result.answer == "16"
    assert vote_of(result) == {"votes": {"16": 3, "36": 2}, "computations": 5, "agreed": True, "round": 1}


#: Fifteen programs that use every number of the question and print fifteen different answers (16 to 30).
SCATTERED = tuple(f"```python\nprint(3 * 12 - 20 + {k})\n```" for k in range(15))
#: A first round where 16 has two votes of five, then programs that print 16 again.
SPLIT = tuple(f"```python\nprint({e})\n```" for e in ("3 * 12 - 20", "3 * 12 + 20", "3 + 12 - 20", "3 * 12 + 20",
                                                      "3 * 12 - 20"))


def test_computations_that_do_not_agree_are_computed_again_and_the_new_vote_counts_them_all() -> None:
    result = run(ScriptedBackend(default="ok").on(f"Question: {QUESTION}", *SPLIT))
    votes = [n.extra["result"] for n in result.graph.by_kind(NodeKind.SYNTHESIS)]
    assert [(v["round"], v["computations"], v["agreed"]) for v in votes] == [(1, 5, False), (2, 10, True)]
    assert result.answer == "16" and result.answer_doubt() is None


def test_no_more_than_three_rounds_are_computed() -> None:
    result = run(ScriptedBackend(default="ok").on(f"Question: {QUESTION}", *SCATTERED))
    assert len(result.graph.by_kind(NodeKind.CODE)) == 15 and len(result.graph.by_kind(NodeKind.SYNTHESIS)) == 3


def test_answers_that_no_quorum_agreed_on_are_marked_not_agreed() -> None:
    result = run(ScriptedBackend(default="ok").on(f"Question: {QUESTION}", *SCATTERED))
    last = result.graph.by_kind(NodeKind.SYNTHESIS)[-1].extra["result"]
    assert last["agreed"] is False and result.answer == "16"  # the earliest of the tied answers


def test_an_answer_the_computations_did_not_agree_on_carries_a_doubt() -> None:
    result = run(ScriptedBackend(default="ok").on(f"Question: {QUESTION}", *SCATTERED))
    assert result.answer_doubt() == "the samples did not agree enough: 1 of 15 computations gave 16"


def test_an_answer_a_quorum_of_computations_gave_carries_no_doubt() -> None:
    result = run(ScriptedBackend(default="ok").on(f"Question: {QUESTION}", WRONG, RIGHT, RIGHT, WRONG, RIGHT))
    assert result.answer_doubt() is None
    assert vote_of_node(result).extra["tally"] == "3 of 5 computations gave 16"


def test_a_program_that_leaves_out_numbers_of_the_question_counts_less() -> None:
    guesses = ["```python\nprint(12)\n```"] * 3
    result = run(ScriptedBackend(default="ok").on(f"Question: {QUESTION}", *guesses, RIGHT, RIGHT))
    assert result.answer == "16"  # two programs that use 3, 12 and 20 against three that print a number
    assert vote_of(result)["votes"] == {"12": 3, "16": 2}


def test_a_program_that_fails_in_the_sandbox_casts_no_vote() -> None:
    broken = "```python\nprint(1 / 0)\n```"
    model = ScriptedBackend(default="ok").on(f"Question: {QUESTION}", broken, broken, RIGHT, RIGHT, RIGHT)
    result = run(model, on_failure="skip")
    failed = [p for p in result.graph.by_kind(NodeKind.CODE) if p.status is NodeStatus.FAILED]
    assert len(failed) == 2 and "ZeroDivisionError" in failed[0].extra["error"]
    assert vote_of(result)["votes"] == {"16": 3} and result.answer == "16"


def test_a_failed_program_is_written_again_under_the_default_replan_policy() -> None:
    broken = "```python\nprint(1 / 0)\n```"
    result = run(ScriptedBackend(default="ok").on(f"Question: {QUESTION}", broken, RIGHT))
    programs = result.graph.by_kind(NodeKind.CODE)
    assert len(programs) == 6 and programs[-1].extra["retry_of"] == programs[0].id
    assert vote_of(result)["votes"] == {"16": 5}


def test_with_only_the_calculator_a_question_about_numbers_is_computed_as_expressions() -> None:
    model = ScriptedBackend(default="ok").on(f"Question: {QUESTION}", "3 * 12 - 20")
    result = run(model, tools=("calc",))
    steps = result.graph.by_kind(NodeKind.EVIDENCE)
    assert len(steps) == 5 and all(s.extra["tool_calls"][0]["args"] == {"expression": "3 * 12 - 20"} for s in steps)
    assert result.answer == "16"


def test_the_expression_prompt_lists_no_tool_description_to_copy_numbers_from() -> None:
    model = ScriptedBackend(default="ok").on(f"Question: {QUESTION}", "3 * 12 - 20")
    run(model, tools=("calc",))
    assert all("2 * 150" not in c.prompt.as_text() for c in model.calls)


def test_a_calculator_fraction_votes_as_its_decimal() -> None:
    task = "A rope of 10 m is cut into 4 equal parts. How long is each part?"
    result = run(ScriptedBackend(default="ok").on(f"Question: {task}", "10 / 4"), tools=("calc",), task=task)
    assert result.answer == "2.5"


def test_a_task_that_is_not_a_question_is_planned_even_when_it_holds_numbers() -> None:
    model = ScriptedBackend(default="ok").on("Tools: python", "1. Bake 3 trays of 12 cookies.\n2. Sell 20.")
    result = run(model, task="Plan a bake sale: 3 trays of 12 cookies each, 20 sold in total.")
    assert result.graph.by_kind(NodeKind.PLAN) and not result.graph.by_kind(NodeKind.CODE)


@pytest.mark.local_model
def test_the_embedded_agent_computes_a_word_problem_with_programs() -> None:
    result = asyncio.run(agent(QUESTION, tools=["python"], model="local", controller=False, seed=0))
    assert result.answer == "16"
    assert all(p.extra["tool_calls"][0]["tool"] == "python" for p in result.graph.by_kind(NodeKind.CODE)
               if p.extra.get("tool_calls"))


def test_a_run_whose_failed_program_was_written_again_is_stored_and_replays(tmp_path: Any) -> None:
    # The vote, added before the retry, gains the retry as a parent: the store must write the retry's
    # thought before the vote's new version names it.
    broken = "```python\nprint(1 / 0)\n```"
    store = str(tmp_path / "runs.db")
    model = ScriptedBackend(default="ok").on(f"Question: {QUESTION}", RIGHT, RIGHT, RIGHT, RIGHT, broken)
    # The retry of the last program is refused by the budget: the run ends before a flush writes it.
    result = asyncio.run(agent(QUESTION, tools=["python"], model=model, controller=False, seed=0, store=store,
                               budget=BudgetLimits(calls=5)))
    assert result.answer == "16" and result.graph_cid is not None
    with SQLiteStore(store) as opened:
        replayed, verdict = asyncio.run(areplay(opened, result.run_id))
    assert verdict.identical, str(verdict)
    assert str(replayed.graph_cid) == str(result.graph_cid)


def test_the_printed_path_shows_a_votes_account_once() -> None:
    result = run(ScriptedBackend(default="ok").on(f"Question: {QUESTION}", RIGHT))
    assert format_text(result).count("vote: 5 of 5 computations gave 16") == 1


def test_the_printed_answer_carries_the_account_of_the_last_rounds_vote() -> None:
    text = format_text(run(ScriptedBackend(default="ok").on(f"Question: {QUESTION}", *SPLIT)))
    assert "vote: 2 of 5 computations gave 16" in text and "vote: 7 of 10 computations gave 16" in text


@pytest.mark.parametrize(("output", "answer"), [
    ("16\n", "16"),
    ("made 36\n16\n\n[stderr]\nDeprecationWarning: 17", "16"),
    ("16\n17" + CUT_NOTE, "17"),
    (NOTHING_PRINTED, None),
    (STDERR_NOTE + "a warning", None),
])
def test_a_programs_answer_is_its_last_printed_line_without_the_python_tools_notes(output: str,
                                                                                    answer: str | None) -> None:
    assert printed_answer(output) == answer
