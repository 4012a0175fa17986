"""Breadth-first search with a beam (the Tree-of-Thoughts paper's BFS)."""

from __future__ import annotations

from ..context import SearchContext
from .common import expand_all, next_level


async def run_bfs(ctx: SearchContext) -> None:
    """Expand the whole beam level by level; keep the best `beam` thoughts of each level."""
    frontier: list[int] | None = [ctx.root]
    while frontier:
        children = await expand_all(ctx, frontier)
        frontier = await next_level(ctx, frontier, children)
