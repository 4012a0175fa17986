"""Monte Carlo tree search with UCT selection; parallel simulations use a virtual loss."""

from __future__ import annotations

import asyncio
import math
from dataclasses import replace

from ...graph import NodeStatus
from ..context import SearchContext
from ..operators import expand
from ..stop import StopReason
from .base import BuiltinStrategy
from .common import STEP_NEEDS
from .fit import needs_steps


class _Tree:
    def __init__(self) -> None:
        self.visits: dict[int, int] = {}
        self.value: dict[int, float] = {}
        self.dead: set[int] = set()
        self.busy: set[int] = set()


def _uct(tree: _Tree, parent: int, child: int, c: float) -> float:
    n = tree.visits.get(child, 0)
    if n == 0:
        return math.inf
    return tree.value.get(child, 0.0) / n + c * math.sqrt(math.log(max(1, tree.visits.get(parent, 1))) / n)


async def _simulate(ctx: SearchContext, tree: _Tree) -> None:
    graph, c = ctx.graph, ctx.config.mcts_exploration
    path = [ctx.root]
    node = ctx.root
    # A node another simulation is still expanding has no children yet: stop there, do not mark it dead.
    while node in ctx.expanded and node not in tree.busy:
        kids = [
            k for k in graph.children(node)
            if k not in tree.dead and graph.node(k).status is NodeStatus.SUCCEEDED
        ]
        if not kids:
            tree.dead.add(node)
            break
        node = max(kids, key=lambda k: (_uct(tree, node, k, c), graph.node(k).score or 0.0, -k))
        path.append(node)
    for n in path:  # virtual loss: parallel simulations spread over different branches
        tree.visits[n] = tree.visits.get(n, 0) + 1
    reward = ctx.graph.node(node).score or 0.0
    if node not in tree.dead and node not in tree.busy and ctx.expandable(node):
        tree.busy.add(node)
        try:
            children = await expand(ctx, node)
        finally:
            tree.busy.discard(node)
        if children:
            reward = max(graph.node(k).score or 0.0 for k in children)
        else:
            tree.dead.add(node)
    elif node not in ctx.expanded and node not in tree.busy and not ctx.expandable(node):
        tree.dead.add(node)  # terminal or at the depth limit: nothing below
    for n in path:
        tree.value[n] = tree.value.get(n, 0.0) + reward


async def run_mcts(ctx: SearchContext) -> None:
    """Run `mcts_iterations` simulations, up to `beam` at once."""
    tree = _Tree()
    done = 0
    total = ctx.config.mcts_iterations
    while done < total and not ctx.stopped:
        batch = min(ctx.beam, total - done)
        await asyncio.gather(*(_simulate(ctx, tree) for _ in range(batch)))
        done += batch
        await ctx.checkpoint()  # MCTS backtracks by itself: a revived frontier is not needed here
        if ctx.root in tree.dead:
            ctx.stop(StopReason.FRONTIER_EXHAUSTED)
            return
    ctx.stop(StopReason.ITERATIONS)


STRATEGIES = (BuiltinStrategy("mcts", run_mcts, replace(STEP_NEEDS, from_node=False), needs_steps),)
