"""Level-by-level search: the Tree-of-Thoughts paper's BFS (a beam), and seed 001's tree_of_thoughts and
breadth_first (no beam cut).

The three differ only in which scored children go on to the next level; every one of them
also loses the thoughts scored below SearchConfig.prune_threshold, which the context prunes
as they are scored.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..context import SearchContext
from ..continuation import continued
from .base import BuiltinStrategy
from .common import STEP_NEEDS, Keep, expand_all, keep_all, keep_beam, keep_promising, next_level
from .fit import needs_steps


async def run_bfs(ctx: SearchContext) -> None:
    """Expand the whole beam level by level; keep the best `beam` thoughts of each level."""
    await _by_level(ctx, keep_beam)


async def run_tree_of_thoughts(ctx: SearchContext) -> None:
    """Level by level, expand every thought that reaches the prune threshold and that its evaluator
    found promising (no beam cut)."""
    await _by_level(ctx, keep_promising)


async def run_breadth_first(ctx: SearchContext) -> None:
    """Level by level, expand every thought that reaches the prune threshold (no beam cut, no verdicts)."""
    await _by_level(ctx, keep_all)


async def _by_level(ctx: SearchContext, keep: Keep) -> None:
    async def one_pass(ctx: SearchContext, start: Sequence[int]) -> None:
        frontier: Sequence[int] | None = start
        while frontier:
            children = await expand_all(ctx, frontier)
            frontier = await next_level(ctx, frontier, children, keep)

    await continued(ctx, one_pass)


STRATEGIES = (
    BuiltinStrategy("bfs", run_bfs, STEP_NEEDS, needs_steps),
    BuiltinStrategy("tree_of_thoughts", run_tree_of_thoughts, STEP_NEEDS, needs_steps, variant_of="bfs"),
    BuiltinStrategy("breadth_first", run_breadth_first, STEP_NEEDS, needs_steps, variant_of="bfs"),
)
