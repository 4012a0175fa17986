"""The controller's report: a typed record of what it saw and did (`SearchResult.control`).

`to_dict()` is the plain data `--json` prints, a stored run keeps and `loom view` shows; `lines()`
are the lines `loom solve` prints after the result. A stored run's report is read back as that
plain data, so runs stored before a field was added still show.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from .types import AnticipatedFailure, BudgetRequest, Compromise, amount_text, more_text

#: A compromise's `accepted` as its line says it (None: offered, no answer came).
_VERDICTS: dict[bool | None, str] = {True: "accepted", False: "rejected", None: "offered"}


@dataclass(frozen=True, slots=True)
class Thresholds:
    """The qualities the controller worked to."""

    acceptable: float
    goal: float
    compromise: float

    def to_dict(self) -> dict[str, Any]:
        """Plain data."""
        return {"acceptable": self.acceptable, "goal": self.goal, "compromise": self.compromise}


@dataclass(frozen=True, slots=True)
class DepthLimits:
    """The depth limits: the policy's soft and hard ones, the search's at the end and at the start."""

    soft: int | None
    hard: int | None
    search: int
    search_at_start: int | None

    def to_dict(self) -> dict[str, Any]:
        """Plain data."""
        return {"soft": self.soft, "hard": self.hard, "search": self.search, "search_at_start": self.search_at_start}


@dataclass(frozen=True, slots=True)
class BudgetRequestOutcome:
    """A request for more of one budget limit and what the handler granted (0: denied)."""

    request: BudgetRequest
    #: In the limit's unit: whole tokens or calls, dollars, seconds.
    granted: float

    @property
    def approved(self) -> bool:
        """Whether any of it was granted."""
        return self.granted > 0

    def to_dict(self) -> dict[str, Any]:
        """Plain data; a token request also says its tokens under `tokens`."""
        r = self.request
        return {"limit": r.limit, "amount": r.amount, **({"tokens": r.tokens} if r.limit == "tokens" else {}),
                "justification": r.justification, "situation": r.situation.to_dict(), "granted": self.granted,
                "approved": self.approved}

    def line(self) -> str:
        """'budget request: 1,200 more tokens -> approved 1,500. <justification>'."""
        limit = self.request.limit
        granted = f"{self.granted:,}" if limit == "tokens" else amount_text(limit, self.granted)
        answer = f"approved {granted}" if self.approved else "denied"
        return f"budget request: {more_text(limit, self.request.amount)} -> {answer}. {self.request.justification}"


@dataclass(frozen=True, slots=True)
class CompromiseOutcome:
    """The compromise offered and the handler's answer (None: no answer came)."""

    offer: Compromise
    accepted: bool | None

    def to_dict(self) -> dict[str, Any]:
        """Plain data: the compromise's, with `accepted`."""
        return {**self.offer.to_dict(), "accepted": self.accepted}

    def line(self) -> str:
        """'compromise accepted: <explanation>'."""
        return f"compromise {_VERDICTS[self.accepted]}: {self.offer.explain()}"


@dataclass(frozen=True, slots=True)
class Anticipation:
    """A failure a detector saw coming, at the checkpoint it was seen."""

    checkpoint: int
    failure: AnticipatedFailure

    def to_dict(self) -> dict[str, Any]:
        """Plain data: the checkpoint and the failure's fields."""
        return {"checkpoint": self.checkpoint, **self.failure.to_dict()}


@dataclass(frozen=True, slots=True)
class ControlAction:
    """Something the controller did to the search: against a failure mode, or `depth` (backtracking)."""

    mode: str
    action: str
    #: The failure's likelihood (None: a depth action).
    likelihood: float | None = None
    #: The thoughts it acted on (None: not about particular thoughts).
    nodes: tuple[int, ...] | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain data; likelihood and nodes only when set."""
        return {"mode": self.mode, "action": self.action,
                **({"likelihood": self.likelihood} if self.likelihood is not None else {}),
                **({"nodes": list(self.nodes)} if self.nodes is not None else {})}

    def line(self) -> str:
        """'controller: <mode>: <action>'."""
        return f"controller: {self.mode}: {self.action}"


@dataclass(frozen=True, slots=True)
class Decision:
    """One entry of the controller's timeline: what it decided, why, and where the search stood."""

    kind: str  # budget, compromise, depth, failure, order
    decision: str
    reason: str
    tokens_spent: int
    #: How deep the search had gone (levels with a best quality).
    depth: int
    #: What else the decision carries, by kind (limit, amount, situation, mode, likelihood, max_depth ...).
    detail: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Plain data: the fields, then the detail's."""
        return {"kind": self.kind, "decision": self.decision, "reason": self.reason,
                "tokens_spent": self.tokens_spent, "depth": self.depth, **self.detail}


@dataclass(frozen=True, slots=True)
class ControlReport:
    """Everything the controller saw and did in one search."""

    key: ClassVar[str] = "control"
    profile: str
    thresholds: Thresholds
    depth_limits: DepthLimits
    goal_reached: bool
    acceptable_reached: bool
    best_quality: float
    budget_requests: tuple[BudgetRequestOutcome, ...]
    compromise: CompromiseOutcome | None
    anticipated_failures: tuple[Anticipation, ...]
    actions: tuple[ControlAction, ...]
    #: The best quality at each depth, index 0 = depth 1.
    score_history: tuple[float, ...]
    decisions: tuple[Decision, ...]

    def to_dict(self) -> dict[str, Any]:
        """Plain data, as `--json` prints it and a stored run keeps it."""
        return {
            "profile": self.profile,
            "thresholds": self.thresholds.to_dict(),
            "depth_limits": self.depth_limits.to_dict(),
            "goal_reached": self.goal_reached,
            "acceptable_reached": self.acceptable_reached,
            "best_quality": self.best_quality,
            "budget_requests": [r.to_dict() for r in self.budget_requests],
            "compromise": self.compromise.to_dict() if self.compromise is not None else None,
            "anticipated_failures": [a.to_dict() for a in self.anticipated_failures],
            "actions": [a.to_dict() for a in self.actions],
            "score_history": list(self.score_history),
            "decisions": [d.to_dict() for d in self.decisions],
        }

    def lines(self) -> list[str]:
        """What `loom solve` prints: one line per budget request, the compromise, then each action."""
        return [*(r.line() for r in self.budget_requests),
                *([self.compromise.line()] if self.compromise is not None else []),
                *(a.line() for a in self.actions)]
