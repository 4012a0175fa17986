"""Depth policy: soft and hard depth limits judged by the progress made.

Rules, checked at each checkpoint in this order:
1. At or past the hard limit: STOP.
2. Below the soft limit: CONTINUE.
3. At or past the soft limit:
   - the best quality at the last depth fell more than `min_progress_rate` below the best of an
     earlier depth: BACKTRACK to that depth (the search went down a worse line);
   - the last `stagnation_threshold` depths vary by less than 0.01: REQUEST_FEEDBACK (stagnating);
   - the last depth improved on the one before by less than `min_progress_rate`: REQUEST_FEEDBACK;
   - otherwise CONTINUE (still progressing: the soft limit is a checkpoint, not a wall).
"""

from __future__ import annotations

from dataclasses import dataclass

from .types import DepthAction, DepthDecision


@dataclass(slots=True)
class DepthPolicy:
    """Soft and hard depth limits, a minimum progress rate and a stagnation threshold."""

    soft_limit: int
    hard_limit: int
    min_progress_rate: float = 0.05
    stagnation_threshold: int = 3

    def __post_init__(self) -> None:
        if self.hard_limit < 1 or self.soft_limit < 1:
            raise ValueError(f"depth limits must be at least 1; got soft {self.soft_limit}, hard {self.hard_limit}")
        self.soft_limit = min(self.soft_limit, self.hard_limit)

    def decide(self, depth: int, history: list[float]) -> DepthDecision:
        """Decide at a checkpoint; history is the best quality at each depth reached so far."""
        if depth >= self.hard_limit:
            return DepthDecision(
                DepthAction.STOP, f"hard depth limit {self.hard_limit} reached",
                "decompose the problem or raise the hard limit",
            )
        if depth < self.soft_limit or not history:
            return DepthDecision(DepthAction.CONTINUE)
        peak = max(history)
        if history[-1] < peak - self.min_progress_rate and history.index(peak) < len(history) - 1:
            return DepthDecision(
                DepthAction.BACKTRACK,
                f"quality fell from {peak:.2f} at depth {history.index(peak) + 1} "
                f"to {history[-1]:.2f} at depth {depth}",
                f"resume from the best thoughts at depth {history.index(peak) + 1}",
            )
        window = history[-self.stagnation_threshold:]
        if len(window) >= self.stagnation_threshold and max(window) - min(window) < 0.01:
            return DepthDecision(
                DepthAction.REQUEST_FEEDBACK,
                f"quality stagnating at {history[-1]:.2f} over the last {self.stagnation_threshold} depths",
                "the current approach may be exhausted: go deeper only if worth the cost",
            )
        if len(history) >= 2 and history[-1] - history[-2] < self.min_progress_rate:
            return DepthDecision(
                DepthAction.REQUEST_FEEDBACK,
                f"progress slowing: {history[-1] - history[-2]:+.2f} at depth {depth} "
                f"< {self.min_progress_rate:.2f} per depth",
                "may need a different approach or more depth",
            )
        return DepthDecision(DepthAction.CONTINUE, f"soft limit {self.soft_limit} passed while still progressing")
