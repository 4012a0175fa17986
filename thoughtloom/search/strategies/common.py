"""Helpers the strategies share."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from itertools import chain

from ..config import OPERATOR_ROLES
from ..context import SearchContext
from ..continuation import OUTSIDE_BEAM
from ..eager import eager_gather
from ..operators import EXTRA as OPERATOR_EXTRA, expand
from ..stop import StopReason
from .base import Needs

#: The step-by-step strategies' needs: their calls are the operators', in the operators' roles, they
#: grow the tree step by step (the controller may let them go deeper), and their thoughts are the steps of
#: one path, searched from a frontier a fork can start at (mcts and got say otherwise).
STEP_NEEDS = Needs(roles=OPERATOR_ROLES, grows_depth=True, operators=True, one_path=True, from_node=True)


async def expand_all(ctx: SearchContext, node_ids: Sequence[int]) -> list[int]:
    """Expand several nodes concurrently; the scored children of all of them, in node order."""
    if len(node_ids) == 1:
        return await expand(ctx, node_ids[0])
    results = await eager_gather(expand(ctx, n) for n in node_ids)
    return list(chain.from_iterable(results))  # not a comprehension: this runs over every scored thought


def keep_beam(ctx: SearchContext, candidates: Iterable[int]) -> list[int]:
    """The best `beam` expandable candidates; the others are pruned."""
    ranked = ctx.rank(c for c in candidates if ctx.expandable(c))
    beam = ctx.beam
    for dropped in ranked[beam:]:
        ctx.prune(dropped, OUTSIDE_BEAM)
    return ranked[:beam]


def keep_all(ctx: SearchContext, candidates: Iterable[int]) -> list[int]:
    """Every expandable candidate, best first (no beam cut: only the prune threshold has removed any)."""
    return ctx.rank(c for c in candidates if ctx.expandable(c))


def keep_promising(ctx: SearchContext, candidates: Iterable[int]) -> list[int]:
    """Every expandable candidate its evaluator did not call unpromising, best first; those it did are pruned."""
    kept = []
    for c in keep_all(ctx, candidates):
        evaluation = ctx.graph.node(c).extra.get(OPERATOR_EXTRA.evaluation)
        if evaluation is not None and evaluation["is_promising"] is False:
            ctx.prune(c, "its evaluator found it not worth expanding")
        else:
            kept.append(c)
    return kept


#: How a level-by-level strategy picks the next level from the children it scored.
Keep = Callable[[SearchContext, Iterable[int]], list[int]]


async def next_level(ctx: SearchContext, frontier: Sequence[int], children: Iterable[int],
                     keep: Keep = keep_beam) -> list[int] | None:
    """After a level-by-level step: where to go next, or None when the search ends here.

    The controller may send the search back to revived earlier thoughts; otherwise the children
    `keep` picks (by default the best `beam`), unless the depth limit is reached or nothing is
    left to expand.
    """
    if ctx.stopped:
        return None
    revived = await ctx.checkpoint()
    if ctx.stopped:
        return None
    if revived:
        return revived
    if len(ctx.steps(frontier[0])) + 1 >= ctx.max_depth:
        ctx.stop(StopReason.MAX_DEPTH)
        return None
    kept = keep(ctx, children)
    if not kept:
        ctx.stop(StopReason.FRONTIER_EXHAUSTED)
        return None
    return kept
