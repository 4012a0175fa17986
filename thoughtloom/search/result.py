"""What a search returns: the answer, why it stopped, the best path, usage and stats."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..graph import ThoughtGraph
from ..grounding.types import GroundingResult
from ..llm.gateway import CallRecord


@dataclass(frozen=True, slots=True)
class PathStep:
    """One node of the best path."""

    id: int
    kind: str
    content: str
    score: float | None


@dataclass(slots=True)
class SearchResult:
    """Everything a search found; `to_dict` is the `--json` output."""

    task: str
    problem: str
    answer: str | None
    solved: bool | None
    score: float | None
    termination_reason: str
    best_path: list[PathStep]
    usage: dict[str, Any]
    stats: dict[str, Any]
    config: dict[str, Any]
    model: str
    graph: ThoughtGraph = field(repr=False)
    calls: list[CallRecord] = field(default_factory=list, repr=False)
    goal_node: int | None = None
    best_node: int | None = None
    answer_node: int | None = None
    error: str | None = None
    #: The controller's report (decisions, budget requests, compromise, failures), when one ran.
    control: dict[str, Any] | None = None
    #: What grounding found, by node id (empty when no grounder ran).
    grounding: dict[int, GroundingResult] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON output."""
        return {
            "task": self.task,
            "problem": self.problem,
            "model": self.model,
            "answer": self.answer,
            "solved": self.solved,
            "score": self.score,
            "termination_reason": self.termination_reason,
            "error": self.error,
            "best_path": [
                {"id": s.id, "kind": s.kind, "content": s.content, "score": s.score} for s in self.best_path
            ],
            "usage": self.usage,
            "stats": self.stats,
            "config": self.config,
            **({"control": self.control} if self.control is not None else {}),
            **({"grounding": [{"node": n, **r.to_dict()} for n, r in self.grounding.items()]}
               if self.grounding else {}),
            **({"recursion": self.recursion()} if self.recursion() is not None else {}),
        }

    def recursion(self) -> dict[str, Any] | None:
        """The recursive strategy's trace: its summary and every node's goal, contract and verification."""
        summary = self.graph.node(0).extra.get("recursion_summary") if len(self.graph) else None
        if summary is None:
            return None
        nodes = [
            {"node": n.id, "kind": n.kind.value, "status": n.status.value, **n.extra["recursion"]}
            for n in self.graph if "recursion" in n.extra
        ]
        return {"summary": summary, "nodes": nodes}
