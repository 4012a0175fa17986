"""DepthPolicy: soft and hard limits judged by progress."""

from __future__ import annotations

import pytest

from thoughtloom.control.depth import DepthPolicy
from thoughtloom.control.types import DepthAction


def policy(**kw: object) -> DepthPolicy:
    values = {"soft_limit": 3, "hard_limit": 6, "min_progress_rate": 0.05, "stagnation_threshold": 3}
    values.update(kw)
    return DepthPolicy(**values)  # type: ignore[arg-type]


def test_below_the_soft_limit_the_search_continues() -> None:
    assert policy().decide(2, [0.1, 0.1]).action is DepthAction.CONTINUE


def test_at_the_hard_limit_the_search_stops_with_a_suggestion() -> None:
    decision = policy().decide(6, [0.1] * 6)
    assert decision.action is DepthAction.STOP
    assert "hard depth limit 6" in decision.reason and decision.suggestion


def test_stagnation_at_the_soft_limit_requests_feedback() -> None:
    decision = policy().decide(3, [0.5, 0.5, 0.5])
    assert decision.action is DepthAction.REQUEST_FEEDBACK
    assert "stagnating" in decision.reason


def test_slow_progress_at_the_soft_limit_requests_feedback() -> None:
    decision = policy().decide(3, [0.3, 0.5, 0.52])
    assert decision.action is DepthAction.REQUEST_FEEDBACK
    assert "slowing" in decision.reason


def test_good_progress_past_the_soft_limit_continues() -> None:
    assert policy().decide(3, [0.3, 0.4, 0.6]).action is DepthAction.CONTINUE


def test_a_fall_below_an_earlier_depth_backtracks_to_it() -> None:
    decision = policy().decide(3, [0.3, 0.7, 0.4])
    assert decision.action is DepthAction.BACKTRACK
    assert "depth 2" in decision.suggestion


def test_a_soft_limit_above_the_hard_limit_is_clamped() -> None:
    assert policy(soft_limit=9).soft_limit == 6


def test_limits_below_one_are_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        policy(hard_limit=0)
