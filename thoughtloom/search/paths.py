"""Every root-to-leaf path a search scored, with its total under the configured aggregation."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..graph import NodeKind, ThoughtGraph

#: The most paths a result lists (the best by total): a search of thousands of thoughts has as
#: many leaves, and a result is read by a person or a program, not a dump of the graph.
MAX_PATHS = 50


@dataclass(frozen=True, slots=True)
class ScoredPath:
    """One root-to-leaf path: node ids from the root down, its total score, and the leaf's status."""

    nodes: tuple[int, ...]
    total: float | None
    status: str

    def to_dict(self, graph: ThoughtGraph) -> dict[str, Any]:
        """Plain data for --json: the ids, the steps' text below the root, the total and the leaf's status."""
        return {"nodes": list(self.nodes), "steps": [graph.node(i).content for i in self.nodes[1:]],
                "total": self.total, "status": self.status}


class ScoredPaths:
    """A search's best root-to-leaf paths and how many there are, worked out when first read.

    Most callers of `search` never read them (a benchmark, a bench lane), and working them out
    walks every scored thought: a tenth of a small search's time.
    """

    __slots__ = ("_found", "_graph", "_limit", "_total")

    def __init__(self, graph: ThoughtGraph, total: Callable[[int], float | None], limit: int = MAX_PATHS) -> None:
        self._graph, self._total, self._limit = graph, total, limit
        self._found: tuple[list[ScoredPath], int] | None = None

    def _work_out(self) -> tuple[list[ScoredPath], int]:
        if self._found is None:
            self._found = scored_paths(self._graph, self._total, self._limit)
        return self._found

    @property
    def best(self) -> list[ScoredPath]:
        """The best paths by total (then older leaf first), at most the limit."""
        return self._work_out()[0]

    @property
    def count(self) -> int:
        """How many root-to-leaf paths the search scored."""
        return self._work_out()[1]


def scored_paths(graph: ThoughtGraph, total: Callable[[int], float | None],
                 limit: int = MAX_PATHS) -> tuple[list[ScoredPath], int]:
    """The best `limit` root-to-leaf paths by total (then older leaf first), and how many there are.

    A leaf is a scored thought (kept or pruned) with no scored thought below it; its path
    follows each node's first parent, and its total (`total(leaf)`) is the path score the search
    ranked it by (SearchConfig.aggregation of the steps' scores: sum, product, min or mean). The
    final answer's SOLUTION node is not a step, so it is no leaf.
    """
    scored = {n.id for n in graph if n.score is not None and n.kind not in (NodeKind.INPUT, NodeKind.SOLUTION)}
    # A scored node whose parent is scored makes that parent no leaf: one pass over the parents
    # instead of a copy of every node's children.
    parent_ids = graph.parent_ids
    inner = {p for i in scored for p in parent_ids(i)}
    leaves = [i for i in scored if i not in inner]
    # Unscored paths (a strategy that scores no paths) last; each leaf's total looked up once.
    leaves.sort(key=lambda i: ((t := total(i)) is None, -(t or 0.0), i))
    node, path_to_root = graph.node, graph.path_to_root
    paths = [ScoredPath(tuple(path_to_root(i)), total(i), node(i).status.value) for i in leaves[:limit]]
    return paths, len(leaves)
