"""Spending what the search was given: a tree search that ends short of its goal with budget left goes on.

The paper's searches make one pass: a level-by-level beam stops at its depth limit, a depth- or
best-first search when nothing is left to expand, whatever the budget. On Game of 24 that left
60% of a 20,000-token budget unspent on every run. Here a pass that ends that way (max_depth,
frontier_exhausted) is followed by another, from where the search has not been yet:

1. the thoughts the beam held back, deepest level first (closest to an answer, so cheapest to
   finish), the best of them first, `beam` at a time;
2. when none is left, more children for a thought already expanded: the next valid proposals
   the model ranked (a task that lists its valid steps), or new samples with a seed of their own
   (free-text steps), deepest thoughts first and the root last (a re-seeded restart);
3. when nothing gives a new thought, the search space is exhausted (`search_exhausted`).

Between passes the budget, the node limit and the controller stop the search as in any pass.
`SearchConfig.one_pass` (`--one-pass`) keeps the paper's single pass, and so does a search given no
budget at all (no limit on tokens, calls, dollars or seconds; `loom solve` and `loom bench` always
set one): there is nothing to spend, and going on would search the whole space at whatever it costs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from ..graph import NodeStatus
from .context import SearchContext
from .events import SearchContinued
from .operators import widen
from .stop import StopReason

#: The ends of a pass that another pass may go past; every other stop is final.
CONTINUABLE = frozenset({StopReason.MAX_DEPTH, StopReason.FRONTIER_EXHAUSTED})
#: Why the beam cut a thought (SearchContext.prune_reasons): those may be brought back.
OUTSIDE_BEAM = "outside the beam"

Pass = Callable[[SearchContext, Sequence[int]], Awaitable[None]]


async def continued(ctx: SearchContext, run_pass: Pass) -> None:
    """Run a strategy's pass from the root (a fork: its node), then more passes while one ends short, budget left."""
    await run_pass(ctx, [ctx.start])
    if ctx.config.one_pass or not _budgeted(ctx):
        return
    widened: dict[int, int] = {}  # widenings made per node, for free-text samples' seeds
    spent: set[int] = set()  # nodes whose widening gave nothing new
    while ctx.stop_reason in CONTINUABLE:
        ended = str(ctx.stop_reason)
        ctx.resume()
        frontier = _held_back(ctx)
        if frontier:
            _announce(ctx, ended, "held back by the beam", frontier)
        while not frontier and not ctx.stopped:
            node = _to_widen(ctx, spent)
            if node is None:
                break
            widened[node] = widened.get(node, 0) + 1
            new = await widen(ctx, node, widened[node])
            if not new:
                spent.add(node)
                continue
            _announce(ctx, ended, "a restart from the root" if node == ctx.root else f"more proposals for #{node}", new)
            # New thoughts at the depth limit are scored (a goal among them stops the search) and
            # end there; only those with room below go on to a pass.
            frontier = [n for n in new if ctx.expandable(n)]
        if ctx.stopped:
            return
        if not frontier:
            ctx.stop(StopReason.SEARCH_EXHAUSTED)
            return
        await run_pass(ctx, frontier)


def _announce(ctx: SearchContext, ended: str, how: str, frontier: Sequence[int]) -> None:
    """Count a continuation and tell the event sinks where it starts."""
    ctx.counts.continuations += 1
    if ctx.bus:
        ctx.bus.emit(SearchContinued(ended, how, tuple(frontier), len(ctx.steps(frontier[0]))))


def held_back(ctx: SearchContext) -> list[int]:
    """Thoughts the beam cut that a later pass could still expand (none when the search makes one pass)."""
    if ctx.config.one_pass:
        return []
    graph = ctx.graph
    return [node for node, why in ctx.prune_reasons.items()
            if why == OUTSIDE_BEAM and graph.node(node).status is NodeStatus.PRUNED and node not in ctx.expanded
            and len(ctx.steps(node)) < ctx.max_depth and not ctx.terminal(node)]


def _held_back(ctx: SearchContext) -> list[int]:
    """The best `beam` thoughts the beam cut at the deepest level that has any, brought back."""
    graph = ctx.graph
    by_depth: dict[int, list[int]] = {}
    for node in held_back(ctx):
        by_depth.setdefault(len(ctx.steps(node)), []).append(node)
    if not by_depth:
        return []
    ranked = sorted(by_depth[max(by_depth)],
                    key=lambda n: (-(graph.node(n).score or 0.0), -(ctx.path_score(n) or 0.0), n))
    chosen = ranked[:ctx.beam]
    for node in chosen:
        ctx.revive(node)
    return chosen


def _to_widen(ctx: SearchContext, spent: set[int]) -> int | None:
    """The expanded thought to ask for more children: the deepest, best first, the root last."""
    graph = ctx.graph
    options = [n for n in ctx.expanded if n not in spent and graph.node(n).status is NodeStatus.SUCCEEDED
               and len(ctx.steps(n)) < ctx.max_depth]
    if not options:
        return None
    return min(options, key=lambda n: (-len(ctx.steps(n)), -(graph.node(n).score or 0.0), n))


def _budgeted(ctx: SearchContext) -> bool:
    """Whether the search was given a budget to spend (a limit on tokens, calls, dollars or seconds)."""
    limits = ctx.gateway.budget.limits
    return any(limit is not None for limit in (limits.tokens, limits.calls, limits.cost_usd, limits.wall_s))
