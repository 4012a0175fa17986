"""A search strategy of your own: greedy search, which follows only the best child of each thought.

A strategy is any object with a name, its settings, what it needs of a run, a fit check for a task
and `run(ctx)` (the `thoughtloom.Strategy` protocol). `ctx` is what a strategy may use of its
search, the `thoughtloom.SearchAPI` protocol: the same operators as the built-in strategies
(`ctx.expand` asks the model for a thought's children and scores them), the model, the tools, the
graph, its scores and frontier, and `ctx.stop` with a typed reason.
A frozen dataclass that is its own settings is the simplest form: a stored run records the fields
and builds `GreedyStrategy(**fields)` again to resume or replay.

    loom solve --task game24 --strategy examples/greedy_strategy.py:GreedyStrategy "4 5 6 10"
    thoughtloom.solve("4 5 6 10", task="game24", strategy=GreedyStrategy(width=2))

Installed in a package under the entry-point group `thoughtloom.strategies`
(`greedy = greedy_strategy:GreedyStrategy`), it is `--strategy greedy` and the bench lane `greedy`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from thoughtloom import Needs, SearchAPI, StopReason, Task
from thoughtloom.search.strategies.fit import needs_steps


@dataclass(frozen=True, slots=True)
class GreedyStrategy:
    """Expand a thought, keep its `width` best children, expand those; no backtracking, no second pass."""

    #: Children kept per step (1: pure greedy).
    width: int = 1

    name = "greedy"
    #: Its calls are the operators' (a model per role, a user's scorer apply); it does not call tools.
    needs = Needs(roles=("generator", "evaluator", "synthesizer"), operators=True)

    def __post_init__(self) -> None:
        if self.width < 1:
            raise ValueError(f"width must be at least 1; got {self.width}")

    @property
    def settings(self) -> GreedyStrategy:
        """Its settings are its own fields."""
        return self

    def unfit(self, task: Task[Any]) -> str | None:
        """It writes thoughts step by step, so the task needs step prompts (as bfs does)."""
        return needs_steps(self.name, task)

    async def run(self, ctx: SearchAPI) -> None:
        """Follow the best children down until a goal, the depth limit or the budget stops it."""
        frontier = [ctx.root]
        while frontier and not ctx.stopped:
            children = [c for node in frontier if ctx.expandable(node) for c in await ctx.expand(node)]
            frontier = ctx.rank(children)[: self.width]
        if not ctx.stopped:
            ctx.stop(StopReason.FRONTIER_EXHAUSTED)
