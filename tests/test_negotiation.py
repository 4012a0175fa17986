"""BudgetNegotiator: sufficient / request / compromise / terminate, with estimates."""

from __future__ import annotations

from thoughtloom.control.negotiation import BudgetNegotiator
from thoughtloom.control.types import BudgetDecision, SearchState, ThoughtView


def state(best: float, *, left: int | None, total: int | None = 1000, spent: int = 900,
          progress: list[tuple[int, float]] | None = None, per_expansion: float | None = 200.0,
          depth: int = 2) -> SearchState:
    view = ThoughtView(7, "best thought", depth, best, best, ("a", "best thought"))
    return SearchState(
        depth=depth, max_depth=4, nodes=20, expansions=5, tokens_spent=spent, tokens_total=total,
        tokens_left=left, best=view, score_history=[best], generated=10, rejected=0, duplicates=0,
        value_spreads=[], recent=[], tokens_per_expansion=per_expansion, progress=progress or [],
    )


NEG = BudgetNegotiator(acceptable_threshold=0.7, goal_threshold=0.95, compromise_threshold=0.5)


def test_an_acceptable_best_thought_is_sufficient() -> None:
    assert NEG.negotiate(state(0.8, left=0), 1000).decision is BudgetDecision.SUFFICIENT


def test_tokens_for_another_expansion_are_sufficient() -> None:
    assert NEG.negotiate(state(0.3, left=500), 1000).decision is BudgetDecision.SUFFICIENT


def test_an_unlimited_budget_is_sufficient() -> None:
    assert NEG.negotiate(state(0.3, left=None, total=None), None).decision is BudgetDecision.SUFFICIENT


def test_close_to_acceptable_with_steady_progress_requests_an_increase() -> None:
    result = NEG.negotiate(state(0.62, left=50, progress=[(100, 0.3), (500, 0.5), (900, 0.62)]), 1000)
    assert result.decision is BudgetDecision.REQUEST_INCREASE
    assert result.request is not None
    # 0.08 short at (0.62-0.3)/800 per token = 200 tokens, but at least two expansions (400)
    assert result.request.tokens == 400
    assert "0.62 < 0.70 acceptable" in result.request.justification
    assert result.situation.estimated_tokens_to_acceptable == 200


def test_a_request_is_capped_at_half_the_original_budget() -> None:
    result = NEG.negotiate(state(0.66, left=10, progress=[(0, 0.0), (900, 0.66)], per_expansion=900), 1000)
    assert result.decision is BudgetDecision.REQUEST_INCREASE
    assert result.request is not None and result.request.tokens == 500


def test_too_far_from_acceptable_proposes_the_compromise() -> None:
    result = NEG.negotiate(state(0.55, left=10, progress=[(0, 0.50), (900, 0.55)]), 1000)
    assert result.decision is BudgetDecision.PROPOSE_COMPROMISE
    assert result.compromise is not None
    assert result.compromise.node_id == 7
    assert abs(result.compromise.gap_to_acceptable - 0.15) < 1e-9
    assert "moderately below target" in result.compromise.tradeoffs[0]


def test_nothing_above_the_compromise_threshold_terminates() -> None:
    result = NEG.negotiate(state(0.2, left=10, progress=[(0, 0.19), (900, 0.2)]), 1000)
    assert result.decision is BudgetDecision.TERMINATE
    assert "below the compromise threshold" in result.reason


def test_an_exhausted_budget_is_negotiated_even_with_tokens_left() -> None:
    result = NEG.negotiate(state(0.62, left=300, progress=[(0, 0.3), (900, 0.62)]), 1000, exhausted=True)
    assert result.decision is BudgetDecision.REQUEST_INCREASE


def test_no_observed_progress_gives_no_estimate_and_no_confidence() -> None:
    situation = NEG.assess(state(0.4, left=10, progress=[(100, 0.4)]), 1000)
    assert situation.estimated_tokens_to_acceptable is None
    assert situation.confidence == 0.0
