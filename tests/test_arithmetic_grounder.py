"""The arithmetic a free-text thought writes out is computed exactly, and a wrong result fails the thought."""

from __future__ import annotations

import pytest

from thoughtloom.grounding.equations import ArithmeticGrounder, equations
from thoughtloom.grounding.types import Thought
from thoughtloom.llm.fake import ScriptedBackend
from thoughtloom.llm.gateway import Gateway
from thoughtloom.llm.types import GenerateRequest
from thoughtloom.search.config import SearchConfig
from thoughtloom.search.engine import search
from thoughtloom.tasks.general import GeneralTask


def claims(text: str) -> list[tuple[str, bool]]:
    return [(str(e), e.holds) for e in equations(text)]


def thought(content: str) -> Thought:
    return Thought("A shop sells 17 boxes of 23 pens and 5 loose pens. How many pens?", (), content, "hypothesis")


def test_a_wrong_result_is_read_as_a_claim_that_does_not_hold() -> None:
    assert claims("Final answer: 17 * 23 + 5 = 451.") == [("17 * 23 + 5 = 451", False)]


def test_each_step_of_a_worked_calculation_is_its_own_claim() -> None:
    assert claims("17 * 23 = 391, then 391 + 5 = 396") == [("17 * 23 = 391", True), ("391 + 5 = 396", True)]


def test_a_chain_of_equal_signs_is_read_pairwise() -> None:
    assert claims("1 + 1 = 2 = 3 - 1") == [("1 + 1 = 2", True), ("2 = 3 - 1", True)]


def test_parentheses_belong_to_a_side_only_when_they_balance_in_it() -> None:
    assert claims("(5 * 6) - (10 - 4) = 24") == [("(5 * 6) - (10 - 4) = 24", True)]
    assert claims("as shown (1 + 2 = 3)") == [("1 + 2 = 3", True)]
    assert claims("10 - 4 = 6 (left: 5 6 6)") == [("10 - 4 = 6", True)]


@pytest.mark.parametrize(("text", "holds"), [("10 / 3 = 3.33", True), ("1/3 = 0.333", True),
                                             ("10 / 3 = 3.4", False), ("7 / 2 = 3", False)])
def test_a_decimal_counts_as_rounded_to_its_places_and_a_whole_number_must_be_exact(text: str, holds: bool) -> None:
    assert claims(text) == [(text, holds)]


@pytest.mark.parametrize("text", ["1,000 + 1 = 1,001", "The cost is $5 + $3 = $8", "5 + 3 = 8%", "x2 + 3 = 5",
                                  "(a + 1) = 2", "x = 5", "if total == 2 + 2:", "5 = 5", "2 <= 1 + 1"])
def test_numbers_inside_longer_tokens_names_and_comparisons_are_not_claims(text: str) -> None:
    assert claims(text) == []


@pytest.mark.parametrize("text", [r"\frac{1}{5} \times 600 = 150 + 120", "3 times 4 = 6 + 6", "then 2 + 2 = 4 times 3",
                                  r"\(3 + 4 = 7\)"])
def test_a_side_that_goes_on_in_words_or_latex_is_not_read_in_part(text: str) -> None:
    assert claims(text) == []


async def test_a_thought_with_a_wrong_equation_fails_and_says_what_the_right_value_is() -> None:
    result = await ArithmeticGrounder().ground(thought("17 * 23 = 391 and 391 + 5 = 451, so 451 pens"))
    assert (result.grounded, result.verified, result.passed, result.failed) == (True, False, 1, 1)
    assert "wrong: 391 + 5 = 451 (the left side is 396, the right side 451)" in result.evidence
    assert result.outcome == pytest.approx(0.5)


async def test_right_arithmetic_is_counted_but_does_not_verify_the_step() -> None:
    result = await ArithmeticGrounder().ground(thought("17 * 23 = 391 and 391 + 5 = 396"))
    assert (result.grounded, result.verified, result.passed, result.failed) == (True, None, 2, 0)


def test_a_thought_without_arithmetic_is_not_taken() -> None:
    grounder = ArithmeticGrounder()
    assert not grounder.can_ground(thought("Count the pens in one box first."))
    assert grounder.can_ground(thought("One box: 23 pens, so 17 * 23 = 391."))


def test_the_general_task_grounds_its_thoughts_arithmetic() -> None:
    assert [g.name for g in GeneralTask().grounders("any question")] == ["arithmetic"]


async def test_in_a_search_the_thought_with_wrong_arithmetic_loses_to_the_right_one() -> None:
    # Two proposals the model values alike; only their arithmetic tells them apart.
    def respond(request: GenerateRequest, index: int) -> str:
        text = request.prompt.as_text()
        if text.endswith("Possible next steps:\n1."):
            return " 17 * 23 + 5 = 451 pens\n2. 17 * 23 + 5 = 396 pens"
        if text.endswith("Final answer:"):
            return " 396"
        return " 6"  # every step's value: 6 of 10

    config = SearchConfig(strategy="bfs", generation="propose", breadth=2, beam=1, max_depth=1, value_samples=1)
    gateway = Gateway(ScriptedBackend(responder=respond))
    result = await search(GeneralTask(), "A shop sells 17 boxes of 23 pens and 5 loose pens. How many?", gateway,
                          config)
    steps = {node.content: node for node in result.graph if node.kind.value == "hypothesis"}
    wrong, right = steps["17 * 23 + 5 = 451 pens"], steps["17 * 23 + 5 = 396 pens"]
    assert result.grounding[wrong.id].verified is False and result.grounding[right.id].verified is None
    assert right.score == pytest.approx(0.6)  # the model's value, kept: right arithmetic is no proof of the step
    assert wrong.score is not None and wrong.score < 0.1
    assert result.best_node == right.id
