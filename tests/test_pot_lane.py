"""The pot lane (program of thought): programs that compute the answer, run in the sandbox for what they print."""

from __future__ import annotations

import pytest

from thoughtloom.eval.datasets import DATASETS, Dataset, Problem
from thoughtloom.eval.lanes import LaneError, check_lane
from thoughtloom.eval.runner import compare_strategies
from thoughtloom.grounding.programs import program_text, run_answer_program
from thoughtloom.llm.fake import ScriptedBackend
from thoughtloom.llm.types import GenerateRequest

QUESTION = "Ann has 8 apples and buys 3 bags of 4 more. How many apples does she have?"


def gsm8k(gold: str = "#### 20") -> Dataset:
    return Dataset(DATASETS["gsm8k"], [Problem("1", QUESTION, QUESTION, gold)], "<test>")


def test_the_program_of_a_chat_reply_is_its_first_python_block() -> None:
    reply = "Here is the program:\n```python\nx = 8 + 3 * 4\nprint(x)\n```\nIt prints 20."
    assert program_text(reply) == "x = 8 + 3 * 4\nprint(x)"


def test_the_program_of_a_completion_is_the_text_up_to_its_closing_fence() -> None:
    assert program_text("x = 8 + 3 * 4\nprint(x)\n```\nQuestion: more") == "x = 8 + 3 * 4\nprint(x)"


async def test_a_program_answers_with_the_last_line_it_prints() -> None:
    got = await run_answer_program("```python\nprint('working')\nprint(8 + 3 * 4)\n```")
    assert got.answer == "20"


async def test_a_failing_program_has_no_answer_and_says_why() -> None:
    got = await run_answer_program("```python\nprint(1 / 0)\n```")
    assert got.answer is None
    assert "ZeroDivisionError" in got.why_not


async def test_a_program_that_prints_nothing_has_no_answer() -> None:
    got = await run_answer_program("x = 8 + 3 * 4")
    assert (got.answer, got.why_not) == (None, "the program printed nothing")


def _writes(program: str):
    def respond(request: GenerateRequest, index: int) -> str:
        return f"```python\n{program}\n```"
    return respond


async def test_the_pot_lane_scores_what_the_models_program_computes() -> None:
    model = ScriptedBackend(responder=_writes("apples = 8 + 3 * 4\nprint(apples)"))
    cmp = await compare_strategies(gsm8k(), ["pot"], model=model, limit=1)
    (result,) = cmp["pot"]
    assert result.record.solved
    assert result.answer == "20"
    prompt = model.calls[0].prompt
    assert prompt.text is not None and prompt.text.endswith(f"Question: {QUESTION}\n```python\n")


async def test_pot_votes_over_k_programs_by_their_printed_value() -> None:
    programs = iter(["print(20)", "print(19)", "print(20.0)"])
    model = ScriptedBackend(responder=lambda request, index: f"```python\n{next(programs)}\n```")
    cmp = await compare_strategies(gsm8k(), ["pot"], model=model, limit=1, lane_params={"pot": {"k": 3}})
    (result,) = cmp["pot"]
    assert result.record.solved and result.record.candidates == 3


def test_pot_runs_only_where_the_data_set_has_a_program_prompt() -> None:
    with pytest.raises(LaneError, match="lane pot writes programs for math questions"):
        check_lane("pot", Dataset(DATASETS["game24"], [], "<test>"))
