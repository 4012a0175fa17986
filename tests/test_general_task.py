"""The general task reads what base and instruct models write: scores, steps, answers."""

from __future__ import annotations

import json

import pytest

from thoughtloom.tasks.evaluation import EVALUATION_SCHEMA, Evaluation, read_evaluation
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
    ('{"reasoning": "It halves 48 correctly.", "score": 8, "is_promising": true}', 0.8),
    ('```json\n{"reasoning": "Halves 48.", "score": 6, "is_promising": true}\n```', 0.6),
    ("On a scale from 0 to 10 I would give it 7.", 0.7),
    ("I'd rate this step 8. It uses 2 facts from the problem.", 0.8),
])
def test_a_score_is_read_however_the_model_writes_it(reply: str, score: float) -> None:
    assert score_from(reply) == pytest.approx(score)


@pytest.mark.parametrize("reply", ["Step 2: the step halves 48 correctly. 0.8", "Step 2. Halving 48 is right. 0.8",
                                   "step 3 is fine, 0.8"])
def test_a_leading_step_number_is_not_the_score(reply: str) -> None:
    assert score_from(reply) == pytest.approx(0.8)


def test_a_decimal_up_to_one_is_already_a_unit_score() -> None:
    assert score_from("Score: 0.8") == pytest.approx(0.8)
    assert score_from("Score: 8") == pytest.approx(0.8)


def test_a_reply_without_a_score_counts_zero() -> None:
    assert score_from("The step is fine.") == 0.0


def test_numbers_above_ten_are_not_scores() -> None:
    assert score_from("48 / 2 = 24 clips in May, so the step is right: 9") == pytest.approx(0.9)


def test_a_json_reply_gives_the_reasoning_score_and_verdict() -> None:
    reply = '{"reasoning": "It repeats step 1 and adds nothing.", "score": 2, "is_promising": false}'
    assert read_evaluation(reply) == Evaluation(0.2, "It repeats step 1 and adds nothing.", False)


def test_a_json_reply_without_a_score_is_no_score_even_with_numbers_in_its_reasoning() -> None:
    assert read_evaluation('{"reasoning": "It uses 3 of the 4 facts.", "is_promising": true}') is None


def test_a_json_reply_cut_short_still_gives_its_score_and_verdict() -> None:
    got = read_evaluation('{"reasoning": "Halves 48.", "score": 7, "is_promising": false, "no')
    assert got == Evaluation(0.7, "Halves 48.", False)


@pytest.mark.parametrize(("reply", "promising"), [
    ("Score: 7/10. Promising: yes", True),
    ("Score: 3/10\n**Promising:** no", False),
    ("The step is not very promising: 3/10.", False),
    ("An unpromising detour: 2/10.", False),
    ("This looks promising, 8/10.", True),
    ("7/10", None),
])
def test_a_free_text_reply_gives_its_verdict_when_it_states_one(reply: str, promising: bool | None) -> None:
    got = read_evaluation(reply)
    assert got is not None and got.is_promising is promising


def test_a_free_text_reply_keeps_its_words_as_the_reasoning() -> None:
    got = read_evaluation("The step halves 48 correctly.\n\n**Score: 8/10**")
    assert got is not None and got.reasoning == "The step halves 48 correctly. **Score: 8/10**"


def test_a_bare_number_gives_no_reasoning() -> None:
    assert read_evaluation(" 7") == Evaluation(0.7, "", None)


def test_a_sample_without_a_score_does_not_count_as_zero() -> None:
    task = GeneralTask()
    assert task.parse_value(PROBLEM, ["48 / 2 = 24"], ["Score: 8", "6/10", "no idea"]) == pytest.approx(0.7)


def test_samples_combine_into_one_evaluation() -> None:
    got = GeneralTask().parse_evaluation(PROBLEM, ["48 / 2 = 24"], [
        '{"reasoning": "Correct halving.", "score": 8, "is_promising": true}',
        '{"reasoning": "Right, but slow.", "score": 6, "is_promising": false}',
        '{"reasoning": "Correct halving.", "score": 7, "is_promising": true}',
    ])
    assert got == Evaluation(pytest.approx(0.7), "Correct halving.\nRight, but slow.", True)


def test_samples_without_any_score_score_zero_and_say_why() -> None:
    got = GeneralTask().parse_evaluation(PROBLEM, ["48 / 2 = 24"], ["I cannot judge this.", ""])
    assert got.score == 0.0 and got.reasoning == "no score in the evaluator's reply: I cannot judge this."


def test_the_value_prompt_asks_for_the_evaluation_as_json() -> None:
    query = GeneralTask().value(PROBLEM, ["48 / 2 = 24"])
    assert query.schema == EVALUATION_SCHEMA
    assert set(json.loads(query.schema)["required"]) == {"reasoning", "score", "is_promising"}
    assert "is_promising" in query.prompt.messages[0].content


def test_the_value_prompt_leaves_the_model_room_to_give_its_reasons() -> None:
    assert GeneralTask().value(PROBLEM, ["48 / 2 = 24"]).max_tokens >= 120


def test_the_embedded_model_can_enforce_the_evaluation_schema() -> None:
    pytest.importorskip("llama_cpp")
    from thoughtloom.llm.local import _grammar

    grammar = _grammar(EVALUATION_SCHEMA)
    assert grammar is not None and b"is_promising" in grammar


def test_a_step_label_the_model_wrote_itself_is_dropped() -> None:
    assert GeneralTask().parse_sample(PROBLEM, ["a"], "Step 2: Step 2: Halve 48.") == "Halve 48."
    assert GeneralTask().parse_sample(PROBLEM, ["a"], "**Step 2:** Halve 48.") == "Halve 48."


@pytest.mark.parametrize("step", ["Final answer: 72", "So the answer is 72.", r"She sold \(\boxed{72}\) clips."])
def test_a_step_that_states_the_final_answer_ends_its_path(step: str) -> None:
    assert GeneralTask().is_terminal(PROBLEM, ["48 / 2 = 24", step])


def test_an_intermediate_step_does_not_end_its_path() -> None:
    assert not GeneralTask().is_terminal(PROBLEM, ["In May she sold 48 / 2 = 24 clips."])
