"""Breadth-first search with a beam (the Tree-of-Thoughts paper's BFS)."""

from __future__ import annotations

from ..context import SearchContext
from .common import expand_all, keep_beam


async def run_bfs(ctx: SearchContext) -> None:
    """Expand the whole beam level by level; keep the best `beam` thoughts of each level."""
    frontier = [ctx.root]
    while True:
        children = await expand_all(ctx, frontier)
        if ctx.stopped:
            return
        revived = await ctx.checkpoint()
        if ctx.stopped:
            return
        if revived:
            frontier = revived  # the controller backtracked to an earlier level
            continue
        if len(ctx.steps(frontier[0])) + 1 >= ctx.max_depth:
            ctx.stop("max_depth")
            return
        frontier = keep_beam(ctx, children)
        if not frontier:
            ctx.stop("frontier_exhausted")
            return
