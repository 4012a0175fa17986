"""The Game of 24 task: problem parsing, exact step checking, state, answers and the benchmark rule."""

from __future__ import annotations

import csv
import itertools
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import pytest
from benchdata import data_file, needs

from thoughtloom.tasks import ProblemError
from thoughtloom.tasks.game24 import Game24, check_game24

F = Fraction
DEV_CSV = data_file("game24/24_dev.csv")


@pytest.fixture
def task() -> Game24:
    return Game24()


def steps_of(task: Game24, problem, *raw: str) -> tuple[str, ...]:
    """Validate raw steps one after the other, as the search does; return the kept (canonical) steps."""
    steps: tuple[str, ...] = ()
    for thought in raw:
        verdict = task.validate(problem, steps, thought)
        assert verdict.ok, verdict.note
        steps += (verdict.thought,)
    return steps


# --- parse_problem ----------------------------------------------------------------------


def test_parse_problem_reads_four_whole_numbers(task):
    assert task.parse_problem("4 5 6 10") == (F(4), F(5), F(6), F(10))


def test_parse_problem_rejects_three_numbers_and_shows_the_expected_form(task):
    with pytest.raises(ProblemError) as err:
        task.parse_problem("1 2 3")
    assert "exactly four numbers" in str(err.value)
    assert '"4 5 6 10"' in str(err.value)


def test_parse_problem_rejects_words_and_asks_for_whole_numbers(task):
    with pytest.raises(ProblemError) as err:
        task.parse_problem("a b c d")
    assert "four whole numbers" in str(err.value)
    assert '"4 5 6 10"' in str(err.value)


def test_parse_problem_rejects_an_empty_problem_and_shows_the_expected_form(task):
    with pytest.raises(ProblemError) as err:
        task.parse_problem("")
    assert "exactly four numbers" in str(err.value)
    assert '"4 5 6 10"' in str(err.value)


# --- validate ---------------------------------------------------------------------------


def test_validate_accepts_a_correct_step_unchanged(task):
    verdict = task.validate(task.parse_problem("4 5 6 10"), (), "4 + 5 = 9 (left: 6 9 10)")
    assert verdict.ok and not verdict.repaired
    assert verdict.thought == "4 + 5 = 9 (left: 6 9 10)"


def test_validate_repairs_a_wrong_result(task):
    verdict = task.validate(task.parse_problem("4 5 6 10"), (), "4 + 5 = 10 (left: 6 9 10)")
    assert verdict.ok and verdict.repaired
    assert verdict.thought == "4 + 5 = 9 (left: 6 9 10)"
    assert "result corrected to 9" in verdict.note


def test_validate_repairs_a_wrong_left_list(task):
    verdict = task.validate(task.parse_problem("4 5 6 10"), (), "4 + 5 = 9 (left: 4 6 10)")
    assert verdict.ok and verdict.repaired
    assert verdict.thought == "4 + 5 = 9 (left: 6 9 10)"
    assert "left corrected to 6 9 10" in verdict.note


def test_validate_adds_a_missing_result_and_left_list(task):
    verdict = task.validate(task.parse_problem("4 5 6 10"), (), "10 - 4 =")
    assert verdict.ok
    assert verdict.thought == "10 - 4 = 6 (left: 5 6 6)"


def test_validate_keeps_a_division_result_as_an_exact_fraction(task):
    verdict = task.validate(task.parse_problem("4 5 6 10"), (), "5 / 6 = 0.83 (left: 0.83 4 10)")
    assert verdict.ok
    assert verdict.thought == "5 / 6 = 5/6 (left: 5/6 4 10)"


def test_validate_accepts_a_decimal_rendering_of_a_fraction_left_earlier(task):
    problem = task.parse_problem("4 5 6 10")
    steps = steps_of(task, problem, "5 / 6 = 5/6 (left: 5/6 4 10)")
    verdict = task.validate(problem, steps, "4 - 0.83 = 3.17 (left: 3.17 10)")
    assert verdict.ok
    assert verdict.thought == "4 - 5/6 = 19/6 (left: 19/6 10)"


def test_validate_rejects_a_step_using_numbers_that_are_not_left(task):
    verdict = task.validate(task.parse_problem("4 5 6 10"), (), "7 * 3 = 21 (left: 4 5 6 10 21)")
    assert not verdict.ok
    assert "uses 7 and 3" in verdict.note and "4 5 6 10" in verdict.note


def test_validate_rejects_using_one_number_twice_when_it_is_left_once(task):
    verdict = task.validate(task.parse_problem("4 5 6 10"), (), "4 * 4 = 16 (left: 5 6 10 16)")
    assert not verdict.ok


def test_validate_rejects_division_by_zero(task):
    verdict = task.validate(task.parse_problem("0 4 6 10"), (), "4 / 0 = 0 (left: 0 6 10)")
    assert not verdict.ok
    assert verdict.note == "division by zero"


def test_validate_rejects_a_line_that_is_not_a_step(task):
    verdict = task.validate(task.parse_problem("4 5 6 10"), (), "I think we should multiply")
    assert not verdict.ok


# --- state ------------------------------------------------------------------------------


def test_state_key_ignores_the_order_of_the_problem_numbers(task):
    assert task.state_key(task.parse_problem("10 4 6 5"), ()) == task.state_key(task.parse_problem("4 5 6 10"), ())


def test_state_key_is_the_same_for_the_same_steps_in_a_different_order(task):
    problem = task.parse_problem("4 5 6 10")
    one = steps_of(task, problem, "4 + 5 = 9", "6 + 10 = 16")
    other = steps_of(task, problem, "6 + 10 = 16", "4 + 5 = 9")
    assert one != other
    assert task.state_key(problem, one) == task.state_key(problem, other)


def test_state_key_differs_for_different_numbers_left(task):
    problem = task.parse_problem("4 5 6 10")
    assert task.state_key(problem, steps_of(task, problem, "4 + 5 = 9")) != task.state_key(
        problem, steps_of(task, problem, "4 * 5 = 20")
    )


def test_a_state_with_24_left_is_terminal_goal_and_worth_one(task):
    problem = task.parse_problem("4 5 6 10")
    steps = steps_of(task, problem, "10 - 4 = 6", "5 * 6 = 30", "30 - 6 = 24")
    assert task.is_terminal(problem, steps)
    assert task.is_goal(problem, steps)
    assert task.exact_value(problem, steps) == 1.0


def test_a_state_with_one_other_number_left_is_terminal_worthless_and_no_goal(task):
    problem = task.parse_problem("4 5 6 10")
    steps = steps_of(task, problem, "10 - 4 = 6", "5 * 6 = 30", "30 + 6 = 36")
    assert task.is_terminal(problem, steps)
    assert not task.is_goal(problem, steps)
    assert task.exact_value(problem, steps) == 0.0


def test_a_state_with_two_numbers_left_is_open_and_needs_the_model_to_value_it(task):
    problem = task.parse_problem("4 5 6 10")
    steps = steps_of(task, problem, "10 - 4 = 6", "5 * 6 = 30")
    assert not task.is_terminal(problem, steps)
    assert not task.is_goal(problem, steps)
    assert task.exact_value(problem, steps) is None


def test_24_among_several_numbers_left_is_not_a_goal(task):
    problem = task.parse_problem("4 6 1 1")
    steps = steps_of(task, problem, "4 * 6 = 24")
    assert not task.is_goal(problem, steps)


# --- compose_answer ---------------------------------------------------------------------


def test_compose_answer_builds_an_expression_the_checker_accepts(task):
    problem = task.parse_problem("4 5 6 10")
    steps = steps_of(task, problem, "10 - 4 = 6", "5 * 6 = 30", "30 - 6 = 24")
    answer = task.compose_answer(problem, steps, None)
    assert answer == "(5 * 6) - (10 - 4) = 24"
    assert task.check_answer(problem, answer) is True


def test_compose_answer_handles_fractional_intermediate_results(task):
    problem = task.parse_problem("3 3 8 8")
    steps = steps_of(task, problem, "8 / 3 = 2.67", "3 - 8/3 = 0.33", "8 / 1/3 = 24")
    answer = task.compose_answer(problem, steps, None)
    assert answer == "8 / (3 - (8 / 3)) = 24"
    assert task.check_answer(problem, answer) is True


def test_compose_answer_gives_nothing_for_a_path_that_does_not_reach_24(task):
    problem = task.parse_problem("4 5 6 10")
    steps = steps_of(task, problem, "10 - 4 = 6", "5 * 6 = 30", "30 + 6 = 36")
    assert task.compose_answer(problem, steps, None) is None


# --- check_answer: the benchmark's scoring rule -----------------------------------------

P4 = (4, 5, 6, 10)
P3388 = (3, 3, 8, 8)


def test_check_accepts_a_correct_expression():
    assert check_game24(P4, "(5 * 6) - (10 - 4)") is True


def test_check_uses_exact_fractions_so_8_over_3_minus_8_over_3_is_24():
    # In floating point this is 23.999999999999996.
    assert check_game24(P3388, "8 / (3 - 8 / 3)") is True


def test_check_rejects_a_rounded_decimal_standing_in_for_a_fraction():
    assert check_game24(P3388, "8 / (3 - 2.6667)") is False


def test_check_rejects_a_bare_float_near_24():
    assert check_game24(P4, "23.9999") is False


def test_check_reads_only_the_last_line():
    assert check_game24(P4, "Steps:\n10 - 4 = 6\n5 * 6 = 30\n(5 * 6) - (10 - 4) = 24") is True


def test_check_rejects_a_correct_expression_that_is_not_on_the_last_line():
    assert check_game24(P4, "(5 * 6) - (10 - 4) = 24\nI hope this helps!") is False


@pytest.mark.parametrize("prefix", ["answer:", "Answer:", "ANSWER: "])
def test_check_strips_an_answer_prefix(prefix):
    assert check_game24(P4, f"{prefix}(5 * 6) - (10 - 4) = 24") is True


def test_check_cuts_at_the_equals_sign_and_ignores_the_claimed_result():
    assert check_game24(P4, "(5 * 6) - (10 - 4) = 25") is True
    assert check_game24(P4, "(5 * 6) + (10 - 4) = 24") is False


def test_check_rejects_an_answer_using_a_number_twice():
    assert check_game24(P3388, "8 * 3 + 8 - 8") is False  # 24, but 8 three times and 3 once


def test_check_rejects_an_answer_with_an_extra_number():
    assert check_game24(P3388, "8 / (3 - 8 / 3) * 1") is False


def test_check_rejects_an_answer_missing_a_number():
    assert check_game24((1, 4, 6, 6), "4 * 6") is False


def test_check_rejects_an_expression_that_is_not_24():
    assert check_game24(P4, "4 + 5 + 6 + 10") is False


@pytest.mark.parametrize("answer", [None, "", "   ", "no idea", "4 5 6 10 (5*6", "(10 - 10) / (5 - 5) + 4 * 6"])
def test_check_rejects_missing_unparsable_or_undefined_answers(answer):
    assert check_game24((5, 5, 10, 10), answer) is False


def test_check_answer_of_the_task_applies_the_benchmark_rule(task):
    problem = task.parse_problem("3 3 8 8")
    assert task.check_answer(problem, "Answer: 8 / (3 - 8 / 3) = 24") is True
    assert task.check_answer(problem, "8 * 3 + 8 - 8 = 24") is False


# --- parsers ----------------------------------------------------------------------------


@pytest.mark.parametrize(("word", "value"), [("sure", 1.0), ("likely", 0.3), ("impossible", 0.0)])
def test_parse_value_maps_each_verdict_word(task, word, value):
    problem = task.parse_problem("4 5 6 10")
    assert task.parse_value(problem, (), [f"5 + 6 = 11\n{word}"]) == pytest.approx(value)


def test_parse_value_averages_the_samples_and_counts_a_sample_without_a_verdict_as_zero(task):
    problem = task.parse_problem("4 5 6 10")
    value = task.parse_value(problem, (), ["Sure", "likely", "I cannot tell"])
    assert value == pytest.approx((1.0 + 0.3 + 0.0) / 3)


def test_parse_value_takes_the_last_verdict_word_of_a_sample_because_the_reasoning_comes_first(task):
    problem = task.parse_problem("4 5 6 10")
    reply = "It is likely that 10 - 4 = 6 helps.\n(10 - 4) * (9 - 5) = 6 * 4 = 24\nsure"
    assert task.parse_value(problem, (), [reply]) == pytest.approx(1.0)


def test_the_chat_form_gives_the_examples_as_earlier_turns(task):
    problem = task.parse_problem("4 5 6 10")
    messages = task.propose(problem, [], 5).prompt.messages
    roles = [m.role for m in messages]
    assert roles[0] == "system" and roles[-1] == "user" and roles[1:-1] == ["user", "assistant"] * 4
    assert messages[1].content == "Input: 2 8 8 14"
    assert messages[2].content.splitlines()[1] == "2 + 8 = 10 (left: 8 10 14)"
    assert messages[-1].content == "Input: 4 5 6 10"
    value = task.value(problem, ["4 + 5 = 9 (left: 6 9 10)"]).prompt.messages
    assert (value[1].content, value[2].content.splitlines()[-1], value[-1].content) == ("10 14", "sure", "6 9 10")


def test_the_completion_form_is_the_papers_few_shot_text(task):
    problem = task.parse_problem("4 5 6 10")
    text = task.propose(problem, [], 5).prompt.text
    assert text.startswith("Input: 2 8 8 14\nPossible next steps:\n") and text.endswith("Input: 4 5 6 10\nPossible next steps:\n")


def test_parse_proposals_extracts_step_lines_from_noisy_output_once_each(task):
    problem = task.parse_problem("4 5 6 10")
    reply = (
        "Sure! Here are some possible next steps:\n"
        "1. 4 + 5 = 9 (left: 6 9 10)\n"
        "   10 - 4 = 6 (left: 5 6 6)\n"
        "\n"
        "These look promising.\n"
        "10 - 4 = 6 (left: 5 6 6)\n"
        "5 × 6 = 30 (left: 4 10 30)\n"
        "Input: 4 6 9\n"
    )
    assert task.parse_proposals(problem, (), reply) == [
        "1. 4 + 5 = 9 (left: 6 9 10)",
        "10 - 4 = 6 (left: 5 6 6)",
        "5 × 6 = 30 (left: 4 10 30)",
    ]


def test_extracted_proposals_validate_to_canonical_steps(task):
    problem = task.parse_problem("4 5 6 10")
    found = task.parse_proposals(problem, (), "1. 4 + 5 = 9 (left: 6 9 10)\n2) 5 × 6 = 30 (left: 4 10 30)")
    assert [task.validate(problem, (), t).thought for t in found] == [
        "4 + 5 = 9 (left: 6 9 10)",
        "5 * 6 = 30 (left: 4 10 30)",
    ]


# --- the checker on real benchmark puzzles ----------------------------------------------


def _solutions(items: list[tuple[Fraction, str]]) -> Iterator[str]:
    """Every expression combining all items with + - * / (brute force, exact arithmetic)."""
    if len(items) == 1:
        if items[0][0] == 24:
            yield items[0][1]
        return
    for i, j in itertools.permutations(range(len(items)), 2):
        (a, ea), (b, eb) = items[i], items[j]
        rest = [items[k] for k in range(len(items)) if k not in (i, j)]
        options = [(a + b, f"({ea} + {eb})"), (a - b, f"({ea} - {eb})"), (a * b, f"({ea} * {eb})")]
        if b != 0:
            options.append((a / b, f"({ea} / {eb})"))
        for option in options:
            yield from _solutions(rest + [option])


@needs("game24/24_dev.csv")
def test_checker_accepts_brute_force_solutions_of_the_first_50_dev_puzzles():
    with DEV_CSV.open(newline="") as f:
        puzzles = [row["Puzzles"] for row in itertools.islice(csv.DictReader(f), 50)]
    assert len(puzzles) == 50
    for puzzle in puzzles:
        numbers = [int(t) for t in puzzle.split()]
        expression = next(_solutions([(F(n), str(n)) for n in numbers]), None)
        assert expression is not None, f"brute force found no solution for {puzzle}"
        assert check_game24(numbers, f"{expression} = 24") is True, (puzzle, expression)
        assert check_game24(numbers, f"{expression} + {numbers[0]} = 24") is False, puzzle
