"""Budget negotiation: assess, then decide sufficient / request more / propose a compromise / stop.

The rules:

- Progress rate: the best quality gained per token between the first and the latest checkpoint
  (state.progress). Estimated tokens to reach a threshold = gap / rate; None when there is no
  progress yet. Confidence grows with the number of checkpoints (up to 10) and falls when the
  per-checkpoint gains are erratic; it never exceeds 0.9.
- SUFFICIENT: the best thought is already acceptable, or there are tokens left for at least one
  more expansion at the observed cost (with no observation yet: any tokens left).
- REQUEST_INCREASE: otherwise, if more tokens plausibly reach acceptable: an estimate exists and
  is at most `max_request_fraction` of the original budget, or (no estimate) the gap to acceptable
  is at most `near_gap`. The request is the estimate (at least two expansions' worth), rounded up
  to 100 tokens, and never more than `max_request_fraction` of the original budget.
- PROPOSE_COMPROMISE: otherwise, if the best thought is at or above the compromise threshold.
- TERMINATE: otherwise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .types import (
    BudgetDecision,
    BudgetRequest,
    BudgetSituation,
    Compromise,
    SearchState,
)


@dataclass(frozen=True, slots=True)
class Negotiation:
    """The negotiator's decision with what backs it."""

    decision: BudgetDecision
    situation: BudgetSituation
    reason: str
    request: BudgetRequest | None = None
    compromise: Compromise | None = None


@dataclass(slots=True)
class BudgetNegotiator:
    """Decides what to do when the token budget runs short."""

    acceptable_threshold: float = 0.7
    goal_threshold: float = 0.95
    compromise_threshold: float = 0.5
    max_request_fraction: float = 0.5
    near_gap: float = 0.15

    def assess(self, state: SearchState, original_tokens: int | None) -> BudgetSituation:
        """The situation: spent, left, best, thresholds, estimates and their confidence."""
        best = state.best.quality if state.best else 0.0
        rate, confidence = self._rate(state)
        return BudgetSituation(
            tokens_spent=state.tokens_spent,
            tokens_left=state.tokens_left,
            tokens_total=state.tokens_total,
            best_score=best,
            acceptable_threshold=self.acceptable_threshold,
            goal_threshold=self.goal_threshold,
            estimated_tokens_to_acceptable=_estimate(best, self.acceptable_threshold, rate),
            estimated_tokens_to_goal=_estimate(best, self.goal_threshold, rate),
            confidence=confidence,
        )

    def negotiate(self, state: SearchState, original_tokens: int | None, *, exhausted: bool = False) -> Negotiation:
        """Decide; `exhausted` says the last call was refused for lack of tokens."""
        s = self.assess(state, original_tokens)
        if s.best_score >= self.acceptable_threshold:
            return Negotiation(BudgetDecision.SUFFICIENT, s, f"best {s.best_score:.2f} is acceptable")
        per_expansion = state.tokens_per_expansion
        if s.tokens_left is None:
            return Negotiation(BudgetDecision.SUFFICIENT, s, "no token limit")
        if not exhausted and s.tokens_left > (per_expansion or 0):
            return Negotiation(BudgetDecision.SUFFICIENT, s, f"{s.tokens_left:,} tokens left")
        base = original_tokens or s.tokens_total or 0
        cap = max(100, int(base * self.max_request_fraction))
        est = s.estimated_tokens_to_acceptable
        plausible = (est is not None and est <= cap) or (est is None and s.gap_to_acceptable <= self.near_gap)
        if plausible:
            floor = int(2 * (per_expansion or 0))
            amount = max(floor, est or floor or cap)
            amount = min(cap, int(math.ceil(amount / 100.0) * 100))
            justification = (
                f"Best score {s.best_score:.2f} < {self.acceptable_threshold:.2f} acceptable; "
                f"{s.tokens_spent:,} tokens spent, {max(0, s.tokens_left):,} left. "
                + (
                    f"At the observed rate about {est:,} more tokens should reach acceptable "
                    f"(confidence {s.confidence:.0%})."
                    if est is not None
                    else f"Only {s.gap_to_acceptable:.2f} short of acceptable; no progress rate observed yet."
                )
            )
            return Negotiation(
                BudgetDecision.REQUEST_INCREASE, s, "budget nearly spent, acceptable within reach",
                request=BudgetRequest(amount, justification, s),
            )
        compromise = self.compromise(state)
        if compromise is not None:
            why = (
                f"acceptable needs about {est:,} more tokens, over the {cap:,} a request may ask"
                if est is not None
                else "no progress rate to justify more tokens"
            )
            return Negotiation(BudgetDecision.PROPOSE_COMPROMISE, s, why, compromise=compromise)
        return Negotiation(
            BudgetDecision.TERMINATE, s,
            f"best {s.best_score:.2f} is below the compromise threshold {self.compromise_threshold:.2f} "
            "and more tokens are unlikely to reach acceptable",
        )

    def compromise(self, state: SearchState) -> Compromise | None:
        """The best thought as a compromise, if it clears the compromise threshold."""
        best = state.best
        if best is None or best.quality < self.compromise_threshold:
            return None
        gap = max(0.0, self.acceptable_threshold - best.quality)
        tradeoffs = [
            "quality significantly below target" if gap > 0.2
            else "quality moderately below target" if gap > 0.1
            else "quality slightly below target",
        ]
        if best.depth < state.max_depth:
            tradeoffs.append(f"reasoning stopped at depth {best.depth} of {state.max_depth}")
        tradeoffs.append("not verified as a complete solution")
        return Compromise(best.id, best.content, best.path, best.quality, gap, tuple(tradeoffs))

    @staticmethod
    def _rate(state: SearchState) -> tuple[float | None, float]:
        points = state.progress
        if len(points) < 2:
            return None, 0.0
        (t0, q0), (t1, q1) = points[0], points[-1]
        if t1 <= t0 or q1 <= q0:
            return None, 0.0
        rate = (q1 - q0) / (t1 - t0)
        gains = [b[1] - a[1] for a, b in zip(points, points[1:])]
        mean = sum(gains) / len(gains)
        spread = (max(gains) - min(gains)) / (abs(mean) + 1e-9) if len(gains) > 1 else 1.0
        confidence = min(0.9, len(points) / 10) * (1.0 / (1.0 + spread))
        return rate, round(confidence, 3)


def _estimate(best: float, target: float, rate: float | None) -> int | None:
    if best >= target:
        return 0
    if rate is None or rate <= 0:
        return None
    return int(math.ceil((target - best) / rate))
