"""What a research flow produces: hypotheses and their evidence, syntheses, insights, statistics, the result.

The flow keeps these records as it runs and mirrors each into the thought graph (hypotheses are
HYPOTHESIS nodes, evidence EVIDENCE nodes under them on SUPPORTS or CONTRADICTION edges, syntheses
SYNTHESIS nodes on AGGREGATION edges), so a stored run holds them and a replay rebuilds them.
Wall-clock times live only in these records; the graph keeps the step at which each thing happened.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from ...grounding.citations import CitationCheck

#: What evidence counts for when only the model claims it (no document, no tool): it weighs less.
MODEL_EVIDENCE_WEIGHT = 0.5
#: The source of evidence the model asserts without a document or a tool behind it.
MODEL_SOURCE = "model"


class HypothesisStatus(StrEnum):
    """Where a hypothesis is: still in play, branched into children, cut, or merged into a synthesis."""

    EXPLORING = "exploring"
    EXPANDED = "expanded"
    PRUNED = "pruned"
    MERGED = "merged"


@dataclass(frozen=True, slots=True)
class Evidence:
    """A finding for or against a hypothesis: what it says, which way, how strongly, and where it came from.

    source: `docs:FILE:LINES` for a passage of the documents, `tool:NAME` for a tool's result, or
    "model" for the model's own claim (weighted by MODEL_EVIDENCE_WEIGHT).
    """

    content: str
    supports: bool
    strength: float
    source: str
    node_id: int | None = None
    #: Why the judge read it so (for a passage), when it said.
    why: str = ""

    @property
    def weight(self) -> float:
        """How much this evidence counts: its strength, less when only the model says so."""
        return self.strength * (MODEL_EVIDENCE_WEIGHT if self.source == MODEL_SOURCE else 1.0)

    @property
    def cited(self) -> bool:
        """True when a document or a tool stands behind it."""
        return self.source != MODEL_SOURCE

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form."""
        return {"content": self.content, "supports": self.supports, "strength": self.strength,
                "source": self.source, "weight": round(self.weight, 4), "why": self.why, "node": self.node_id}


@dataclass(slots=True)
class Hypothesis:
    """A node of the exploration tree (the question itself is the root, depth 0)."""

    id: int
    content: str
    parent_id: int | None
    depth: int
    confidence: float
    promise: float
    status: HypothesisStatus = HypothesisStatus.EXPLORING
    evidence: list[Evidence] = field(default_factory=list)
    children: list[int] = field(default_factory=list)
    created_at: datetime = field(default_factory=datetime.now)
    explored_at: datetime | None = None
    #: The short answer it proposes ("Yes", "Ed Wood"), when it states one.
    answer: str | None = None
    #: Confidence before any evidence (the brancher's, else 0.5).
    prior: float = 0.5
    #: The factors promise is computed from, as last computed.
    factors: dict[str, float] = field(default_factory=dict)
    pruned_reason: str | None = None
    #: The synthesis it was merged into.
    merged_into: int | None = None

    @property
    def explored(self) -> bool:
        """True once its evidence was gathered."""
        return self.explored_at is not None

    def balance(self) -> tuple[float, float]:
        """Summed weight of the evidence for it and against it."""
        pro = sum(e.weight for e in self.evidence if e.supports)
        con = sum(e.weight for e in self.evidence if not e.supports)
        return pro, con

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form (times as ISO text)."""
        return {
            "id": self.id, "content": self.content, "answer": self.answer, "parent": self.parent_id,
            "depth": self.depth, "confidence": round(self.confidence, 4), "prior": round(self.prior, 4),
            "promise": round(self.promise, 4), "factors": {k: round(v, 4) for k, v in self.factors.items()},
            "status": self.status.value, "pruned_reason": self.pruned_reason, "merged_into": self.merged_into,
            "evidence": [e.to_dict() for e in self.evidence], "children": list(self.children),
            "created_at": self.created_at.isoformat(timespec="milliseconds"),
            "explored_at": self.explored_at.isoformat(timespec="milliseconds") if self.explored_at else None,
        }


@dataclass(frozen=True, slots=True)
class Synthesis:
    """Hypotheses combined into one position: what it says, how sure, which hypotheses and citations stand behind it."""

    content: str
    confidence: float
    sources: tuple[int, ...]
    method: str
    #: The evidence sources behind the sources (documents and lines, tools), supporting ones first.
    citations: tuple[str, ...] = ()
    answer: str | None = None
    node_id: int | None = None
    final: bool = False
    #: The final answer's citations checked (evidence.check_citations); `citations` keeps the valid ones.
    checks: tuple[CitationCheck, ...] = ()

    @property
    def flagged(self) -> tuple[CitationCheck, ...]:
        """Citations of the final answer that did not hold (not a passage read, or not saying the answer)."""
        return tuple(c for c in self.checks if not c.valid)

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form."""
        checked = {"citation_checks": [c.to_dict() for c in self.checks]} if self.final else {}
        return {"content": self.content, "answer": self.answer, "confidence": round(self.confidence, 4),
                "sources": list(self.sources), "citations": list(self.citations), "method": self.method,
                "node": self.node_id, "final": self.final, **checked}


InsightType = Literal["discovery", "evidence", "contradiction", "synthesis"]


@dataclass(frozen=True, slots=True)
class Insight:
    """A finding during exploration, streamed as it happens."""

    type: InsightType
    content: str
    confidence: float
    hypothesis_id: int
    depth: int
    timestamp: datetime = field(default_factory=datetime.now)
    #: Where it came from (an evidence source, or a synthesis's citations).
    source: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form."""
        return {"type": self.type, "content": self.content, "confidence": round(self.confidence, 4),
                "hypothesis": self.hypothesis_id, "depth": self.depth, "source": self.source,
                "timestamp": self.timestamp.isoformat(timespec="milliseconds")}


@dataclass(slots=True)
class ResearchStats:
    """Seed 004's metrics of one flow."""

    hypotheses_generated: int = 0
    hypotheses_pruned: int = 0
    hypotheses_merged: int = 0
    explorations: int = 0
    max_depth_reached: int = 0
    #: Average children per branched hypothesis (the question included).
    branch_factor: float = 0.0
    insights_discovered: int = 0
    #: Insights per hypothesis explored.
    exploration_efficiency: float = 0.0
    final_confidence: float = 0.0
    pruned_by: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form."""
        return {"hypotheses_generated": self.hypotheses_generated, "hypotheses_pruned": self.hypotheses_pruned,
                "hypotheses_merged": self.hypotheses_merged, "explorations": self.explorations,
                "max_depth_reached": self.max_depth_reached, "branch_factor": round(self.branch_factor, 3),
                "insights_discovered": self.insights_discovered,
                "exploration_efficiency": round(self.exploration_efficiency, 3),
                "final_confidence": round(self.final_confidence, 4), "pruned_by": dict(self.pruned_by)}


@dataclass(slots=True)
class ResearchResult:
    """Final result of a research flow: the answer (a synthesis with its sources), the tree, the insights and the
    metrics."""

    question: str
    answer: Synthesis | None
    confidence: float
    #: The exploration tree by hypothesis id (the question itself is the root, depth 0).
    tree: dict[int, Hypothesis]
    insights: list[Insight]
    statistics: ResearchStats
    #: Every merge made, the final one last.
    syntheses: list[Synthesis] = field(default_factory=list)
    #: Every move of the flow's state machine, as [from, direction, to].
    transitions: list[list[str]] = field(default_factory=list)
    state: str = "dormant"
    #: Why the flow converged: confidence_threshold, insight_target, exploration_budget, max_nodes,
    #: frontier_exhausted, a budget limit, or interrupted.
    stopped_by: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form (`loom research --json`)."""
        return {"question": self.question, "answer": self.answer.to_dict() if self.answer else None,
                "confidence": round(self.confidence, 4), "stopped_by": self.stopped_by, "state": self.state,
                "statistics": self.statistics.to_dict(), "insights": [i.to_dict() for i in self.insights],
                "tree": [h.to_dict() for h in self.tree.values()], "syntheses": [s.to_dict() for s in self.syntheses],
                "transitions": self.transitions}
