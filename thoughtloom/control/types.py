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


class BudgetDecision(str, enum.Enum):
    """What the budget negotiator decides."""

    SUFFICIENT = "sufficient"
    REQUEST_INCREASE = "request_increase"
    PROPOSE_COMPROMISE = "propose_compromise"
    TERMINATE = "terminate"


@dataclass(frozen=True, slots=True)
class BudgetSituation:
    """The budget and progress assessment the negotiator decides on."""

    tokens_spent: int
    tokens_left: int | None
    tokens_total: int | None
    best_score: float
    acceptable_threshold: float
    goal_threshold: float
    estimated_tokens_to_acceptable: int | None
    estimated_tokens_to_goal: int | None
    confidence: float  # in the estimates, 0..1

    @property
    def gap_to_acceptable(self) -> float:
        """How far the best thought is below the acceptable threshold (0 when above)."""
        return max(0.0, self.acceptable_threshold - self.best_score)

    def to_dict(self) -> dict[str, Any]:
        """Plain data."""
        return asdict(self)


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
    """A request for more tokens, with a justification a person can read."""

    tokens: int
    justification: str
    situation: BudgetSituation


@dataclass(frozen=True, slots=True)
class DepthAnswer:
    """What a person (or policy) answers to a depth feedback request."""

    action: DepthAction  # CONTINUE (deeper by `extra_depth`), STOP or BACKTRACK
    extra_depth: int = 0


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
