"""Graph of thoughts: beam search that also merges the best thoughts of each level and refines the merge."""

from __future__ import annotations

from dataclasses import replace

from ..context import SearchContext
from ..operators import aggregate, refine
from .base import BuiltinStrategy
from .common import STEP_NEEDS, expand_all, next_level
from .fit import needs_merges


async def run_got(ctx: SearchContext) -> None:
    """Per level: expand, aggregate the top `aggregate_k` into one node, refine it, keep the beam."""
    cfg = ctx.config
    frontier: list[int] | None = [ctx.root]
    while frontier:
        children = await expand_all(ctx, frontier)
        if ctx.stopped:
            return
        top = ctx.rank(children)[: cfg.aggregate_k]
        if len(top) >= 2:
            merged = await aggregate(ctx, top)
            for _ in range(cfg.refine_rounds):
                if merged is None or ctx.stopped:
                    break
                better = await refine(ctx, merged)
                if better is not None:
                    children.append(merged)
                    merged = better
            if merged is not None:
                children.append(merged)
        frontier = await next_level(ctx, frontier, children)


STRATEGIES = (BuiltinStrategy("got", run_got, replace(STEP_NEEDS, one_path=False, from_node=False), needs_merges),)
