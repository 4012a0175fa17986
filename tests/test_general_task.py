"""The general task reads what base and instruct models write: scores, steps, answers."""

from __future__ import annotations

import pytest

from thoughtloom.tasks.general import GeneralTask, score_from

PROBLEM = "How many clips did Natalia sell in April and May?"


@pytest.mark.parametrize(("reply", "score"), [
    (" 7", 0.7),  # a base model continuing "on a scale of 0 to 10:"
    ("7/10", 0.7),
    ("Score: 6", 0.6),
    ("**Score: 8/10**\n\nThe step correctly halves 48.", 0.8),
    ("The last step is logically valid and makes progress. I would rate it 9 out of 10.", 0.9),
    ("Step 2 is sound: 8", 0.8),
    ("Rating: 7.5", 0.75),
])
def test_a_score_is_read_however_the_model_writes_it(reply: str, score: float) -> None:
    assert score_from(reply) == pytest.approx(score)


def test_a_reply_without_a_score_counts_zero() -> None:
    assert score_from("The step is fine.") == 0.0


def test_numbers_above_ten_are_not_scores() -> None:
    assert score_from("48 / 2 = 24 clips in May, so the step is right: 9") == pytest.approx(0.9)


def test_value_averages_the_samples() -> None:
    task = GeneralTask()
    assert task.parse_value(PROBLEM, ["48 / 2 = 24"], ["Score: 8", "6/10", "no idea"]) == pytest.approx((0.8 + 0.6) / 3)


def test_the_value_prompt_leaves_an_instruct_model_room_to_say_its_score() -> None:
    assert GeneralTask().value(PROBLEM, ["48 / 2 = 24"]).max_tokens >= 24


def test_a_step_label_the_model_wrote_itself_is_dropped() -> None:
    assert GeneralTask().parse_sample(PROBLEM, ["a"], "Step 2: Step 2: Halve 48.") == "Halve 48."
    assert GeneralTask().parse_sample(PROBLEM, ["a"], "**Step 2:** Halve 48.") == "Halve 48."


@pytest.mark.parametrize("step", ["Final answer: 72", "So the answer is 72.", r"She sold \(\boxed{72}\) clips."])
def test_a_step_that_states_the_final_answer_ends_its_path(step: str) -> None:
    assert GeneralTask().is_terminal(PROBLEM, ["48 / 2 = 24", step])


def test_an_intermediate_step_does_not_end_its_path() -> None:
    assert not GeneralTask().is_terminal(PROBLEM, ["In May she sold 48 / 2 = 24 clips."])
