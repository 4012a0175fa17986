"""recursive: search over decompositions of the problem, with recomposition contracts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Final

from ...graph import ThoughtGraph
from ...tasks.base import UnsupportedOperation
from ...tasks.recursion.hooks import Goal, RecursiveHooks
from ..context import SearchContext
from ..recursive.solver import EXTRA as SOLVER_EXTRA, Outcome, Solver
from .base import BuiltinStrategy, root_record
from .fit import needs_decomposition


@dataclass(frozen=True, slots=True)
class RecursiveExtra:
    """The node.extra keys the recursive strategy writes: its summary on the root (each node's own record is
    the solver's, SOLVER_EXTRA.recursion)."""

    recursion_summary: str = "recursion_summary"


EXTRA: Final = RecursiveExtra()


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
    outcome: Outcome | None = None
    try:
        outcome = await solver.solve(root_goal, 0, (), ctx.root, hooks.default_policy)
    finally:
        # Also when the run is cancelled mid-way (Ctrl-C, the wall budget): what the solver did is the run's record.
        chosen = max(solver.root_outcomes, key=lambda o: (o.verification.passed, o.score), default=None)
        ctx.graph.node(ctx.root).extra[EXTRA.recursion_summary] = _summary(solver, hooks, root_goal, outcome, chosen)
    if chosen is not None and not ctx.goals:
        # The context ranks deeper thoughts first; a recursive search's answer is its best root result.
        ctx.best_id = chosen.result_node


def _summary(solver: Solver, hooks: RecursiveHooks, root_goal: Goal, outcome: Outcome | None,
             chosen: Outcome | None) -> dict[str, Any]:
    """The run's summary from what the solver has done so far: the root's outcome (a run cut short: its best root
    result so far, if any), the counts, the tokens per level and the task's errors."""
    finished = outcome if outcome is not None else chosen
    summary: dict[str, Any] = {
        "verified": finished.verification.passed if finished is not None else False,
        "mode": finished.mode if finished is not None else None,
        **{k: solver.stats[k] for k in ("goals", "plans", "decompositions", "recompositions", "recompositions_failed",
                                        "invalid_plans", "cycles", "backtracks", "retries", "replans",
                                        "level_budget_refusals")},
        "level_tokens": dict(sorted(solver.level_tokens.items())),
    }
    errors = hooks.errors(root_goal, chosen.value if chosen is not None else None)
    if errors is not None:
        summary["errors"] = errors
    return summary


@dataclass(frozen=True, slots=True)
class RecursionNode:
    """One node of a recursive search: its id, kind and status, and its recursion record (goal, contract,
    verification, notes)."""

    node: int
    kind: str
    status: str
    record: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        """Plain data: the record's keys beside the node's."""
        return {"node": self.node, "kind": self.kind, "status": self.status, **self.record}


@dataclass(frozen=True, slots=True)
class RecursionTrace:
    """The recursive strategy's trace: its summary (counts, verified, mode, tokens per level) and every node's
    record."""

    key: ClassVar[str] = "recursion"
    summary: dict[str, Any]
    nodes: tuple[RecursionNode, ...]

    @classmethod
    def read(cls, graph: ThoughtGraph) -> RecursionTrace | None:
        """The trace a recursive search left on the graph's root, or None."""
        summary = root_record(graph, EXTRA.recursion_summary)
        if summary is None:
            return None
        return cls(summary, tuple(RecursionNode(n.id, n.kind.value, n.status.value, n.extra[SOLVER_EXTRA.recursion])
                                  for n in graph if SOLVER_EXTRA.recursion in n.extra))

    def to_dict(self) -> dict[str, Any]:
        """Plain data: the summary and the nodes."""
        return {"summary": self.summary, "nodes": [n.to_dict() for n in self.nodes]}

    def lines(self) -> list[str]:
        """One line of the summary's counts."""
        r = self.summary
        errors = f"errors {r['errors']} · " if "errors" in r else ""
        return [
            f"recursion: {errors}verified {str(r['verified']).lower()} · goals {r['goals']} · decompositions "
            f"{r['decompositions']} · recompositions {r['recompositions']} (failed {r['recompositions_failed']}) · "
            f"invalid plans {r['invalid_plans']} · cycles {r['cycles']} · backtracks {r['backtracks']} · "
            f"retries {r['retries']}"
        ]


STRATEGIES = (BuiltinStrategy("recursive", run_recursive, fit=needs_decomposition, trace=RecursionTrace.read),)
