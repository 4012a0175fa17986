"""The grounding seam: a grounder tests a thought against reality and reports what it found.

Grounders are independent of the search: they get the problem text, the path of steps that
leads to the thought, and the thought itself, and return a `GroundingResult`. The search turns
the result into a score adjustment (see `policy.py`) and keeps the evidence on the node.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class Thought:
    """What a grounder sees of a thought: the problem, the steps before it, and its content."""

    problem: str
    steps: tuple[str, ...]  # the path from the root, not including `content`
    content: str
    kind: str = "analysis"  # a NodeKind value: "code", "hypothesis", "solution", ...

    @property
    def path(self) -> tuple[str, ...]:
        """The steps including this thought."""
        return (*self.steps, self.content)


@dataclass(frozen=True, slots=True)
class Citation:
    """A passage in a document: where it is and what it says."""

    path: str
    line_start: int
    line_end: int
    text: str
    score: float = 0.0  # the index's relevance (higher is more relevant)
    title: str = ""  # the document's title (its opening heading, else its file name)

    def shown_text(self) -> str:
        """The text as a reader is shown it: after its document's title, unless it opens with that title's heading."""
        first = " ".join(self.text.split("\n", 1)[0].strip().lstrip("#").split())
        if not self.title or first == self.title:
            return self.text
        return f"{self.title}: {self.text}"

    def ref(self) -> str:
        """`file:line` or `file:start-end`."""
        if self.line_end != self.line_start:
            return f"{self.path}:{self.line_start}-{self.line_end}"
        return f"{self.path}:{self.line_start}"


@dataclass(frozen=True, slots=True)
class GroundingResult:
    """What grounding a thought found.

    `grounded` says whether the grounder could test the thought at all; `verified` is None when
    it could not, else whether the thought passed. `score` is the graded outcome in [0, 1] when
    the test is graded (the fraction of tests passed), else 1.0 or 0.0 from `verified`.
    """

    grounder: str
    grounded: bool
    verified: bool | None
    evidence: str  # a short human-readable account: what was run or looked up, what happened
    confidence: float  # how sure the grounder is of `verified`, 0..1
    elapsed_ms: int = 0
    cost: int = 0  # grounder-specific resource units (sandbox runs, index lookups), not tokens
    score: float | None = None
    passed: int = 0  # tests passed / claims supported
    failed: int = 0  # tests failed / claims contradicted
    citations: tuple[Citation, ...] = ()
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def outcome(self) -> float | None:
        """The graded outcome in [0, 1], or None when nothing was tested."""
        if not self.grounded or self.verified is None:
            return None
        if self.score is not None:
            return self.score
        return 1.0 if self.verified else 0.0

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready summary."""
        return {
            "grounder": self.grounder,
            "grounded": self.grounded,
            "verified": self.verified,
            "score": self.outcome,
            "confidence": round(self.confidence, 3),
            "passed": self.passed,
            "failed": self.failed,
            "evidence": self.evidence,
            "elapsed_ms": self.elapsed_ms,
            "cost": self.cost,
            "citations": [c.ref() for c in self.citations],
            **({"details": self.details} if self.details else {}),
        }


def not_grounded(grounder: str, why: str) -> GroundingResult:
    """The result for a thought the grounder cannot test."""
    return GroundingResult(grounder=grounder, grounded=False, verified=None, evidence=why, confidence=0.0)


@runtime_checkable
class Grounder(Protocol):
    """Tests thoughts against reality: running code, reproducing bugs, looking up documents."""

    name: str

    def can_ground(self, thought: Thought) -> bool:
        """True when this grounder knows how to test the thought (cheap, no side effects)."""
        ...

    async def ground(self, thought: Thought) -> GroundingResult:
        """Test the thought; never raises for a thought that fails, only reports it."""
        ...


def join_evidence(parts: Sequence[str], limit: int = 2000) -> str:
    """Join evidence lines and cap the length so results stay small."""
    text = "\n".join(p for p in parts if p)
    return text if len(text) <= limit else text[: limit - 15] + "\n… (truncated)"
