"""Best-first search: always expand the most promising open thoughts, several at once."""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import Sequence

from ..context import SearchContext
from ..continuation import continued
from ..operators import expand
from ..stop import StopReason
from .base import BuiltinStrategy
from .common import STEP_NEEDS
from .fit import needs_steps


def _priority(ctx: SearchContext, node_id: int) -> float:
    if ctx.config.priority == "promise":
        return ctx.path_score(node_id) or 0.0
    return ctx.graph.node(node_id).score or 0.0


async def run_best_first(ctx: SearchContext) -> None:
    """Keep up to `beam` expansions in flight, each time taking the best open thought."""
    await continued(ctx, _from)


async def _from(ctx: SearchContext, start: Sequence[int]) -> None:
    """One best-first pass from the start nodes until nothing open is left."""
    heap: list[tuple[float, int]] = [(-1.0 if n == ctx.root else -_priority(ctx, n), n) for n in start]
    heapq.heapify(heap)
    running: dict[asyncio.Task[list[int]], int] = {}
    try:
        while not ctx.stopped:
            while heap and len(running) < ctx.beam:
                _, nid = heapq.heappop(heap)
                if ctx.expandable(nid):
                    running[asyncio.ensure_future(expand(ctx, nid))] = nid
            if not running:
                ctx.stop(StopReason.FRONTIER_EXHAUSTED)
                return
            done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                del running[task]
                for child in task.result():
                    heapq.heappush(heap, (-_priority(ctx, child), child))
            for revived in await ctx.checkpoint() or ():
                heapq.heappush(heap, (-_priority(ctx, revived), revived))
    finally:
        for task in running:
            task.cancel()
        if running:
            await asyncio.gather(*running, return_exceptions=True)


STRATEGIES = (BuiltinStrategy("best_first", run_best_first, STEP_NEEDS, needs_steps),)
