"""Depth-first search with a pruning threshold and backtracking (the ToT paper's DFS)."""

from __future__ import annotations

from collections.abc import Sequence

from ...graph import NodeStatus
from ..context import SearchContext
from ..continuation import continued
from ..events import Backtracked
from ..operators import expand
from ..stop import StopReason
from .base import BuiltinStrategy
from .common import STEP_NEEDS
from .fit import needs_steps


async def run_dfs(ctx: SearchContext) -> None:
    """Follow the best child first; children below the threshold are pruned; backtrack when stuck."""
    await continued(ctx, _from)


async def _from(ctx: SearchContext, start: Sequence[int]) -> None:
    """One depth-first pass from each start node in turn."""
    for node_id in start:
        await _visit(ctx, node_id)
        if ctx.stopped:
            return
    ctx.stop(StopReason.FRONTIER_EXHAUSTED)


async def _visit(ctx: SearchContext, node_id: int) -> None:
    if ctx.stopped or not ctx.expandable(node_id):
        return
    children = await expand(ctx, node_id)
    await ctx.checkpoint()  # DFS backtracks by itself: a revived frontier is not needed here
    for child in ctx.rank(children):
        if ctx.graph.node(child).status is not NodeStatus.SUCCEEDED:
            continue
        await _visit(ctx, child)
        if ctx.stopped:
            return
    if node_id != ctx.root and ctx.bus:
        ctx.bus.emit(Backtracked(node_id, ctx.graph.parents(node_id)[0]))


STRATEGIES = (BuiltinStrategy("dfs", run_dfs, STEP_NEEDS, needs_steps),)
