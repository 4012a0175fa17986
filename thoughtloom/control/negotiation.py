"""Budget negotiation: assess, then decide sufficient / request more / propose a compromise / stop.

Every limit the run has is negotiated the same way, in its own unit: tokens, calls, dollars
(cost_usd) and wall-clock seconds (wall_s). The rules, for one limit:

- Progress rate: the best quality gained per unit spent between the first and the latest
  checkpoint (tokens: state.progress; the others: their Allowance's progress). Estimated units to
  reach a threshold = gap / rate; None when there is no progress yet. Confidence grows with the
  number of checkpoints (up to 10) and falls when the per-checkpoint gains are erratic; it never
  exceeds 0.9.
- SUFFICIENT: the best thought is already acceptable, or there is enough left for at least one
  more expansion at the observed cost (with no observation yet: anything left).
- REQUEST_INCREASE: otherwise, if more plausibly reaches acceptable: an estimate exists and
  is at most `max_request_fraction` of the original limit, or (no estimate) the gap to acceptable
  is at most `near_gap`. The request is the estimate (at least two expansions' worth), rounded up
  (tokens to 100, calls and seconds to a whole one, dollars to a cent), and never more than
  `max_request_fraction` of the original limit.
- PROPOSE_COMPROMISE: otherwise, if the best thought is at or above the compromise threshold.
- TERMINATE: otherwise.

An anticipated exhaustion (`anticipated=True`: the failure detector sees the limit running out
before acceptable) asks for the same request early, and otherwise leaves the decision to the
moment the limit is really short: a forecast alone never proposes a compromise or terminates.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from .types import (
    UNITS,
    BudgetDecision,
    BudgetRequest,
    BudgetSituation,
    Compromise,
    SearchState,
    amount_text,
    more_text,
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
    """Decides what to do when a budget limit (tokens, calls, dollars, seconds) runs short."""

    acceptable_threshold: float = 0.7
    goal_threshold: float = 0.95
    compromise_threshold: float = 0.5
    max_request_fraction: float = 0.5
    near_gap: float = 0.15

    def assess(self, state: SearchState, original: float | None, limit: str = "tokens") -> BudgetSituation:
        """The situation of one limit: spent, left, best, thresholds, estimates and their confidence."""
        reading = _read(state, limit)
        best = state.best.quality if state.best else 0.0
        rate, confidence = _rate(reading.progress)
        return BudgetSituation(
            spent=reading.spent,
            left=reading.left,
            total=reading.total,
            best_score=best,
            acceptable_threshold=self.acceptable_threshold,
            goal_threshold=self.goal_threshold,
            estimated_to_acceptable=_estimate(best, self.acceptable_threshold, rate, limit),
            estimated_to_goal=_estimate(best, self.goal_threshold, rate, limit),
            confidence=confidence,
            limit=limit,
        )

    def negotiate(self, state: SearchState, original: float | None, *, exhausted: bool = False,
                  limit: str = "tokens", anticipated: bool = False) -> Negotiation:
        """Decide for one limit; `exhausted`: a call was just refused for it; `anticipated`: a detector
        sees it running out before acceptable (ask early, never give up on a forecast)."""
        s = self.assess(state, original, limit)
        unit = UNITS[limit]
        if s.best_score >= self.acceptable_threshold:
            return Negotiation(BudgetDecision.SUFFICIENT, s, f"best {s.best_score:.2f} is acceptable")
        per_expansion = _read(state, limit).per_expansion
        if s.left is None:
            return Negotiation(BudgetDecision.SUFFICIENT, s, f"no {unit} limit")
        if not exhausted and not anticipated and s.left > (per_expansion or 0):
            return Negotiation(BudgetDecision.SUFFICIENT, s, f"{amount_text(limit, s.left)} left")
        base = original or s.total or 0
        cap = max(_STEP[limit], _round_down(base * self.max_request_fraction, limit))
        est = s.estimated_to_acceptable
        plausible = (est is not None and est <= cap) or (est is None and s.gap_to_acceptable <= self.near_gap)
        if plausible:
            floor = _round_down(2 * (per_expansion or 0), limit)
            amount = max(floor, est or floor or cap)
            amount = min(cap, _round_up(amount, limit))
            justification = (
                f"Best score {s.best_score:.2f} < {self.acceptable_threshold:.2f} acceptable; "
                f"{amount_text(limit, s.spent)} spent, {amount_text(limit, max(0, s.left))} left. "
                + (
                    f"At the observed rate about {more_text(limit, est)} should reach acceptable "
                    f"(confidence {s.confidence:.0%})."
                    if est is not None
                    else f"Only {s.gap_to_acceptable:.2f} short of acceptable; no progress rate observed yet."
                )
            )
            why = ("budget nearly spent, acceptable within reach" if limit == "tokens"
                   else f"{unit} nearly used up, acceptable within reach")
            if anticipated and exhausted is False and s.left > (per_expansion or 0):
                why = f"{unit} will run out before acceptable at the observed rate; asking early"
            return Negotiation(
                BudgetDecision.REQUEST_INCREASE, s, why, request=BudgetRequest(amount, justification, s),
            )
        if anticipated and s.left > (per_expansion or 0):
            return Negotiation(BudgetDecision.SUFFICIENT, s,
                               f"no increase is justified yet; {amount_text(limit, s.left)} left")
        compromise = self.compromise(state)
        if compromise is not None:
            why = (
                f"acceptable needs about {more_text(limit, est)}, over the {amount_text(limit, cap)} a "
                "request may ask"
                if est is not None
                else f"no progress rate to justify more {unit}"
            )
            return Negotiation(BudgetDecision.PROPOSE_COMPROMISE, s, why, compromise=compromise)
        return Negotiation(
            BudgetDecision.TERMINATE, s,
            f"best {s.best_score:.2f} is below the compromise threshold {self.compromise_threshold:.2f} "
            f"and more {unit} are unlikely to reach acceptable",
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



@dataclass(frozen=True, slots=True)
class _Reading:
    spent: float
    left: float | None
    total: float | None
    per_expansion: float | None
    progress: tuple[tuple[float, float], ...]


def _read(state: SearchState, limit: str) -> _Reading:
    """One limit as the state reports it (tokens from its token fields, the others from allowances)."""
    if limit == "tokens":
        return _Reading(state.tokens_spent, state.tokens_left, state.tokens_total, state.tokens_per_expansion,
                        tuple(state.progress))
    allowance = state.allowances.get(limit)
    if allowance is None:
        return _Reading(0, None, None, None, ())
    per_expansion = allowance.spent / state.expansions if state.expansions else None
    return _Reading(allowance.spent, allowance.left, allowance.limit, per_expansion, allowance.progress)


def _rate(points: tuple[tuple[float, float], ...]) -> tuple[float | None, float]:
    if len(points) < 2:
        return None, 0.0
    (t0, q0), (t1, q1) = points[0], points[-1]
    if t1 <= t0 or q1 <= q0:
        return None, 0.0
    rate = (q1 - q0) / (t1 - t0)
    gains = [b[1] - a[1] for a, b in itertools.pairwise(points)]
    mean = sum(gains) / len(gains)
    spread = (max(gains) - min(gains)) / (abs(mean) + 1e-9) if len(gains) > 1 else 1.0
    confidence = min(0.9, len(points) / 10) * (1.0 / (1.0 + spread))
    return rate, round(confidence, 3)


#: The smallest amount of each limit a request asks for, and the step it is rounded up to.
_STEP: dict[str, float] = {"tokens": 100, "calls": 1, "cost_usd": 0.01, "wall_s": 1}


def _round_up(amount: float, limit: str) -> float:
    """Rounded up to the limit's step (whole tokens and calls as ints)."""
    step = _STEP[limit]
    rounded = math.ceil(round(amount / step, 9)) * step
    return int(rounded) if limit in ("tokens", "calls", "wall_s") else round(rounded, 2)


def _round_down(amount: float, limit: str) -> float:
    """Cut to a whole number (tokens, calls, seconds) or to the cent (dollars)."""
    return int(amount) if limit in ("tokens", "calls", "wall_s") else math.floor(round(amount * 100, 9)) / 100


def _estimate(best: float, target: float, rate: float | None, limit: str) -> float | None:
    if best >= target:
        return 0
    if rate is None or rate <= 0:
        return None
    needed = (target - best) / rate
    return math.ceil(needed) if limit in ("tokens", "calls", "wall_s") else round(needed, 4)
