"""recursive: search over decompositions of the problem, with recomposition contracts."""

from __future__ import annotations

from typing import Any

from ...tasks.base import UnsupportedOperation
from ...tasks.recursion.hooks import RecursiveHooks
from ..context import SearchContext
from ..recursive.solver import Solver
from .base import BuiltinStrategy
from .fit import needs_decomposition


async def run_recursive(ctx: SearchContext) -> None:
    """Solve the root goal recursively; the best root-level result becomes the search's answer."""
    hooks = ctx.task.recursion(ctx.problem)
    if hooks is None:
        if not ctx.task.free_text_steps:
            # The run layer refused this before (with the strategies that fit); a direct search() ends here.
            raise UnsupportedOperation(needs_decomposition("--strategy recursive", ctx.task))
        hooks = RecursiveHooks(ctx.problem_text)
    solver = Solver(ctx, hooks)
    root_goal = hooks.root_goal()
    outcome = await solver.solve(root_goal, 0, (), ctx.root, hooks.default_policy)
    chosen = max(
        solver.root_outcomes, key=lambda o: (o.verification.passed, o.score), default=None
    )
    if chosen is not None and not ctx.goals:
        # The context ranks deeper thoughts first; a recursive search's answer is its best root result.
        ctx.best_id = chosen.result_node
    summary: dict[str, Any] = {
        "verified": outcome.verification.passed,
        "mode": outcome.mode,
        **{k: solver.stats[k] for k in ("goals", "plans", "decompositions", "recompositions", "recompositions_failed",
                                        "invalid_plans", "cycles", "backtracks", "retries", "replans",
                                        "level_budget_refusals")},
        "level_tokens": dict(sorted(solver.level_tokens.items())),
    }
    errors = hooks.errors(root_goal, chosen.value if chosen is not None else None)
    if errors is not None:
        summary["errors"] = errors
    ctx.graph.node(ctx.root).extra["recursion_summary"] = summary


STRATEGIES = (BuiltinStrategy("recursive", run_recursive, fit=needs_decomposition),)
