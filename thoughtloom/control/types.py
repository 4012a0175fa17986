"""The controller's vocabulary: what it observes, what it decides, and what it asks a person."""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class ThoughtView:
    """What the controller sees of one scored thought."""

    id: int
    content: str
    depth: int  # steps from the root
    score: float  # the evaluator's score of this thought
    quality: float  # the task's judgement of it as an answer, in [0, 1] (see Task.quality)
    path: tuple[str, ...]  # contents from below the root down to it


@dataclass(frozen=True, slots=True)
class Allowance:
    """One budget limit as the negotiator reads it, in its own unit (calls, dollars or seconds)."""

    spent: float  # by this search
    limit: float  # the limit now
    left: float  # what calls in flight do not hold
    #: (spent, best quality) after each checkpoint: the observed rate of progress against this limit.
    progress: tuple[tuple[float, float], ...] = ()


@dataclass(slots=True)
class SearchState:
    """A snapshot of the search, taken at each checkpoint, that detectors and policies read."""

    depth: int  # deepest level reached
    max_depth: int  # the current depth limit
    nodes: int
    expansions: int
    tokens_spent: int
    tokens_total: int | None  # the hard token limit now (None: unlimited)
    tokens_left: int | None
    best: ThoughtView | None
    #: Best quality seen at each depth, index 0 = depth 1.
    score_history: list[float]
    #: Thoughts created / rejected by the validator / merged as duplicates, cumulative.
    generated: int
    rejected: int
    duplicates: int
    #: Spread (max - min) of the value samples of each valued thought, most recent last.
    value_spreads: list[float]
    #: Recently created live thoughts (for circular-reasoning checks), oldest first.
    recent: list[ThoughtView]
    #: Tokens one expansion costs on average so far (None before the first).
    tokens_per_expansion: float | None
    #: (tokens spent, best quality) after each checkpoint: the observed rate of progress.
    progress: list[tuple[int, float]] = field(default_factory=list)
    #: Steps every answer takes when the task fixes it (Game of 24: 3); None when open-ended.
    natural_depth: int | None = None
    #: Thoughts tested by a grounder (tests run, claims checked), and how many of them failed.
    grounded: int = 0
    grounding_failed: int = 0
    #: The budget's other limits (calls, cost_usd, wall_s), those the run has, by name; tokens are the fields above.
    allowances: dict[str, Allowance] = field(default_factory=dict)
    #: The hard depth limit the controller may raise max_depth to when asked (None: it cannot).
    hard_depth: int | None = None


class DepthAction(str, enum.Enum):
    """What the depth policy decides at a checkpoint."""

    CONTINUE = "continue"
    STOP = "stop"
    REQUEST_FEEDBACK = "request_feedback"
    BACKTRACK = "backtrack"


@dataclass(frozen=True, slots=True)
class DepthDecision:
    """A depth decision with the reason and a suggestion a person can read."""

    action: DepthAction
    reason: str = ""
    suggestion: str = ""
    #: The question is whether to go past the search's depth limit (approving raises it).
    raises_limit: bool = False


class BudgetDecision(str, enum.Enum):
    """What the budget negotiator decides."""

    SUFFICIENT = "sufficient"
    REQUEST_INCREASE = "request_increase"
    PROPOSE_COMPROMISE = "propose_compromise"
    TERMINATE = "terminate"


#: How a budget limit's amounts read (the names are BudgetLimits' fields and BudgetExceeded's limits).
UNITS: dict[str, str] = {"tokens": "tokens", "calls": "calls", "cost_usd": "dollars", "wall_s": "seconds"}


def amount_text(limit: str, amount: float) -> str:
    """An amount of one budget limit as a person reads it: '1,200 tokens', '3 calls', '$0.05', '30 seconds'."""
    if limit == "cost_usd":
        return _dollars(amount)
    if limit == "wall_s":
        return f"{amount:,.0f} seconds"
    return f"{int(amount):,} {UNITS[limit]}"


def _dollars(amount: float) -> str:
    """Cents, or four decimals for less than a cent (a few cheap calls)."""
    return f"${amount:,.2f}" if amount == 0 or abs(amount) >= 0.01 else f"${amount:.4f}"


def more_text(limit: str, amount: float) -> str:
    """An increase of one budget limit as a person reads it: '1,200 more tokens', '3 more calls',
    '$0.05 more', '30 more seconds'."""
    if limit == "cost_usd":
        return f"{_dollars(amount)} more"
    if limit == "wall_s":
        return f"{amount:,.0f} more seconds"
    return f"{int(amount):,} more {UNITS[limit]}"


@dataclass(frozen=True, slots=True)
class BudgetSituation:
    """The budget and progress assessment the negotiator decides on, for one limit, in its unit."""

    spent: float
    left: float | None
    total: float | None
    best_score: float
    acceptable_threshold: float
    goal_threshold: float
    estimated_to_acceptable: float | None
    estimated_to_goal: float | None
    confidence: float  # in the estimates, 0..1
    #: Which limit: tokens, calls, cost_usd or wall_s.
    limit: str = "tokens"

    @property
    def gap_to_acceptable(self) -> float:
        """How far the best thought is below the acceptable threshold (0 when above)."""
        return max(0.0, self.acceptable_threshold - self.best_score)

    @property
    def tokens_spent(self) -> float | None:
        """Tokens spent (None when the situation is about another limit)."""
        return self.spent if self.limit == "tokens" else None

    @property
    def tokens_left(self) -> float | None:
        """Tokens left (None when unlimited, or about another limit)."""
        return self.left if self.limit == "tokens" else None

    @property
    def tokens_total(self) -> float | None:
        """The token limit (None when unlimited, or about another limit)."""
        return self.total if self.limit == "tokens" else None

    @property
    def estimated_tokens_to_acceptable(self) -> float | None:
        """Tokens estimated to reach acceptable (None without an estimate, or about another limit)."""
        return self.estimated_to_acceptable if self.limit == "tokens" else None

    def to_dict(self) -> dict[str, Any]:
        """Plain data; a token situation also carries its figures under the token names it always had."""
        d = asdict(self)
        if self.limit == "tokens":
            d.update(tokens_spent=self.spent, tokens_left=self.left, tokens_total=self.total,
                     estimated_tokens_to_acceptable=self.estimated_to_acceptable,
                     estimated_tokens_to_goal=self.estimated_to_goal)
        return d


@dataclass(frozen=True, slots=True)
class Compromise:
    """The best thought short of acceptable, offered honestly with what it trades off."""

    node_id: int
    content: str
    path: tuple[str, ...]
    score: float
    gap_to_acceptable: float
    tradeoffs: tuple[str, ...]

    def explain(self) -> str:
        """One paragraph a person can read."""
        return (
            f"Compromise (quality {self.score:.2f}, {self.gap_to_acceptable:.2f} below acceptable): "
            f"{self.content}. Trade-offs: " + "; ".join(self.tradeoffs)
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain data, with the explanation."""
        return {**asdict(self), "explanation": self.explain()}


@dataclass(frozen=True, slots=True)
class BudgetRequest:
    """A request for more of one budget limit, with a justification a person can read."""

    #: How much more, in the limit's unit (whole tokens or calls, dollars, seconds).
    amount: float
    justification: str
    situation: BudgetSituation

    @property
    def limit(self) -> str:
        """Which limit: tokens, calls, cost_usd or wall_s."""
        return self.situation.limit

    @property
    def tokens(self) -> int:
        """The tokens asked for (0 for a request about another limit)."""
        return int(self.amount) if self.limit == "tokens" else 0

    def describe(self) -> str:
        """The increase as a person reads it: '1,200 more tokens', '3 more calls', '$0.05 more', '30 more seconds'."""
        return more_text(self.limit, self.amount)


@dataclass(frozen=True, slots=True)
class DepthAnswer:
    """What a person (or policy) answers to a depth feedback request."""

    action: DepthAction  # CONTINUE (deeper by `extra_depth`), STOP or BACKTRACK
    extra_depth: int = 0


class FailureAction(str, enum.Enum):
    """What a person (or policy) answers when the controller could not prevent an anticipated failure."""

    CONTINUE = "continue"
    ABORT = "abort"


class FailureMode(str, enum.Enum):
    """The failure modes a search can fall into."""

    BUDGET_EXHAUSTED = "budget_exhausted"
    DEPTH_EXCEEDED = "depth_exceeded"
    QUALITY_PLATEAU = "quality_plateau"
    CIRCULAR_REASONING = "circular_reasoning"
    GROUNDING_FAILURE = "grounding_failure"
    GENERATOR_EXHAUSTION = "generator_exhaustion"
    EVALUATOR_UNRELIABLE = "evaluator_unreliable"
    PROBLEM_INTRACTABLE = "problem_intractable"


@dataclass(frozen=True, slots=True)
class AnticipatedFailure:
    """A failure a detector sees coming."""

    mode: FailureMode
    likelihood: float  # 0..1
    when: str  # e.g. "within ~2 expansions", "at depth 5", "now"
    prevention: str
    mitigation: str
    evidence: str  # what the detector saw
    #: Node ids the failure is about (e.g. the paraphrased thoughts of a loop).
    nodes: tuple[int, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """Plain data."""
        d = asdict(self)
        d["mode"] = self.mode.value
        return d
