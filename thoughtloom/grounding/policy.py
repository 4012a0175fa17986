"""How a grounding result changes a thought's score (graded and configurable per profile).

The rule, with s the score the evaluator gave, c the grounder's confidence and p the graded
outcome (the fraction of tests passed, of claims supported):

- verified:      s' = min(1, s * boost)                           (bounded boost, default x1.2)
- not verified:  m  = fail_factor + partial_credit * p * (1 - fail_factor)
                 s' = s * (1 - c * (1 - m))                       (strong penalty, default x0.1 when
                                                                   nothing passed and c = 1)
- inconclusive (no grounder could test it, or verified is None): s' = s * unverified_factor
                                                                  (default 1: unchanged)

The penalty is weighted by confidence so that a shaky check (a hypothesis matched against a
traceback) costs less than a certain one (a failing test), and partial credit keeps a program
that passes 4 of 5 tests ahead of one that passes none. A domain that requires grounding (seed
000's `require_grounding`, the code_generation profile) lowers `unverified_factor`, so a thought
nobody could test neither passes for a tested one nor reaches the goal threshold on its score alone.
The factor applies where the run has grounders: a task with none has nothing to require.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from .types import GroundingResult


@dataclass(frozen=True, slots=True)
class GroundingPolicy:
    """How strongly grounding moves scores; one per profile, every value overridable."""

    fail_factor: float = 0.1  # score multiplier when verification failed outright with confidence 1
    boost: float = 1.2  # score multiplier when verified (capped at 1)
    partial_credit: float = 0.5  # how much of the graded outcome softens the penalty (0: none)
    unverified_factor: float = 1.0  # score multiplier when no grounder could verify the thought (1: unchanged)

    def __post_init__(self) -> None:
        if not 0.0 <= self.fail_factor <= 1.0:
            raise ValueError(f"fail_factor must be in [0, 1], got {self.fail_factor}")
        if not 1.0 <= self.boost < math.inf:
            raise ValueError(f"boost must be >= 1 and finite, got {self.boost}")
        if not 0.0 <= self.partial_credit <= 1.0:
            raise ValueError(f"partial_credit must be in [0, 1], got {self.partial_credit}")
        if not 0.0 <= self.unverified_factor <= 1.0:
            raise ValueError(f"unverified_factor must be in [0, 1], got {self.unverified_factor}")

    def adjust(self, score: float, result: GroundingResult | None) -> float:
        """The score after grounding (see the module docstring for the rule); None: no grounder could test it."""
        if result is None or not result.grounded or result.verified is None:
            return score * self.unverified_factor
        if result.verified:
            return min(1.0, score * self.boost)
        outcome = result.outcome or 0.0
        multiplier = self.fail_factor + self.partial_credit * outcome * (1.0 - self.fail_factor)
        confidence = min(1.0, max(0.0, result.confidence))
        return score * (1.0 - confidence * (1.0 - multiplier))

    def to_dict(self) -> dict[str, Any]:
        """Plain data for results and `loom profiles`."""
        return asdict(self)
