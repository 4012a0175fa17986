"""How grounding results move scores: a strong penalty on failure, a bounded boost on success."""

from __future__ import annotations

import pytest

from thoughtloom.control.profiles import PROFILES
from thoughtloom.grounding import GroundingPolicy, GroundingResult


def result(verified: bool | None, *, confidence: float = 1.0, score: float | None = None, grounded: bool = True) -> GroundingResult:
    return GroundingResult("test", grounded, verified, "evidence", confidence, score=score)


def test_a_verified_thought_is_boosted_by_the_boost_factor() -> None:
    assert GroundingPolicy(boost=1.2).adjust(0.5, result(True)) == pytest.approx(0.6)


def test_the_boost_is_capped_at_one() -> None:
    assert GroundingPolicy(boost=1.2).adjust(0.9, result(True)) == 1.0


def test_a_certain_failure_with_nothing_passed_multiplies_by_the_fail_factor() -> None:
    assert GroundingPolicy(fail_factor=0.1).adjust(0.8, result(False, score=0.0)) == pytest.approx(0.08)


def test_partial_passes_soften_the_penalty() -> None:
    policy = GroundingPolicy(fail_factor=0.1, partial_credit=0.5)
    none_passed = policy.adjust(0.8, result(False, score=0.0))
    most_passed = policy.adjust(0.8, result(False, score=0.8))
    assert most_passed == pytest.approx(0.8 * (0.1 + 0.5 * 0.8 * 0.9))
    assert most_passed > none_passed


def test_a_less_confident_failure_costs_less() -> None:
    policy = GroundingPolicy(fail_factor=0.1)
    assert policy.adjust(0.8, result(False, confidence=0.5, score=0.0)) == pytest.approx(0.8 * (1 - 0.5 * 0.9))


@pytest.mark.parametrize("r", [result(None), result(True, grounded=False), result(None, score=0.5)])
def test_an_inconclusive_result_leaves_the_score_unchanged(r: GroundingResult) -> None:
    assert GroundingPolicy().adjust(0.42, r) == 0.42


@pytest.mark.parametrize("kw", [{"fail_factor": 1.5}, {"fail_factor": -0.1}, {"boost": 0.9}, {"partial_credit": 2}])
def test_out_of_range_settings_are_rejected(kw: dict) -> None:
    with pytest.raises(ValueError):
        GroundingPolicy(**kw)


def test_profiles_set_their_own_grounding_policy() -> None:
    assert PROFILES["debugging"].grounding.fail_factor < PROFILES["code_generation"].grounding.fail_factor
    assert PROFILES["research_synthesis"].grounding.fail_factor > PROFILES["code_generation"].grounding.fail_factor
