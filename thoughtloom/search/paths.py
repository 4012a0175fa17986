"""Every root-to-leaf path a search scored, with its total under the configured aggregation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..graph import NodeKind, ThoughtGraph
from .context import SearchContext

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


def scored_paths(ctx: SearchContext, limit: int | None = None) -> tuple[list[ScoredPath], int]:
    """The best `limit` (default MAX_PATHS) root-to-leaf paths by total (then older leaf first), and how many there are.

    A leaf is a scored thought (kept or pruned) with no scored thought below it; its path
    follows each node's first parent, and its total is the path score the search ranked it by
    (SearchConfig.aggregation of the steps' scores: sum, product, min or mean). The final
    answer's SOLUTION node is not a step, so it is no leaf.
    """
    graph = ctx.graph
    scored = {n.id for n in graph if n.score is not None and n.kind not in (NodeKind.INPUT, NodeKind.SOLUTION)}
    # A scored node whose parent is scored makes that parent no leaf: one pass over the parents
    # instead of a copy of every node's children (this runs once per search, over every thought).
    parent_ids = graph.parent_ids
    inner = {p for i in scored for p in parent_ids(i)}
    total = ctx.path_score
    leaves = [i for i in scored if i not in inner]
    # Unscored paths (a strategy that scores no paths) last; each leaf's total looked up once.
    leaves.sort(key=lambda i: ((t := total(i)) is None, -(t or 0.0), i))
    kept = leaves[: MAX_PATHS if limit is None else limit]
    node, path_to_root = graph.node, graph.path_to_root
    paths = [ScoredPath(tuple(path_to_root(i)), total(i), node(i).status.value) for i in kept]
    return paths, len(leaves)

