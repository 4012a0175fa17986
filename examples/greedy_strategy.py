"""A search strategy of your own: greedy search, which follows only the best child of each thought.

A strategy is any object with a name, its settings, what it needs of a run, a fit check for a task
and `run(ctx)` (the `thoughtloom.Strategy` protocol). `ctx` is what a strategy may use of its
search, the `thoughtloom.SearchAPI` protocol: the same operators as the built-in strategies
(`ctx.expand` asks the model for a thought's children and scores them), the model, the tools, the
graph, its scores and frontier, and `ctx.stop` with a typed reason.
A frozen dataclass that is its own settings is the simplest form: a stored run records the fields
and builds `GreedyStrategy(**fields)` again to resume or replay.

It keeps a trace, too (the `thoughtloom.TracedStrategy` protocol): at each level it notes on the root
(`ctx.note`, under the key it declares) how many children it had and which it kept, and
`read_trace(graph)` reads that back as a `GreedyTrace`: `result.trace`, the `greedy` key of `--json`,
and one line of `loom solve`'s text. A strategy without `read_trace` simply has no trace.

    loom solve --task game24 --strategy examples/greedy_strategy.py:GreedyStrategy "4 5 6 10"
    thoughtloom.solve("4 5 6 10", task="game24", strategy=GreedyStrategy(width=2))

Installed in a package under the entry-point group `thoughtloom.strategies`
(`greedy = greedy_strategy:GreedyStrategy`), it is `--strategy greedy` and the bench lane `greedy`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from thoughtloom import Needs, SearchAPI, StopReason, Task, ThoughtGraph
from thoughtloom.search.strategies.fit import needs_steps

#: The node.extra key it notes its levels under, on the root.
LEVELS = "greedy_levels"


@dataclass(frozen=True, slots=True)
class GreedyLevel:
    """One level of a greedy search: how many children its frontier had, and the ids of those it kept."""

    children: int
    kept: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class GreedyTrace:
    """What the greedy search kept at each level (a `thoughtloom.Trace`)."""

    key: ClassVar[str] = "greedy"

    levels: tuple[GreedyLevel, ...]

    def to_dict(self) -> dict[str, Any]:
        """Plain data, as `--json` prints it."""
        return {"levels": [{"children": level.children, "kept": list(level.kept)} for level in self.levels]}

    def lines(self) -> list[str]:
        """One line for `loom solve`: the thoughts kept at each level, of how many."""
        kept = " · ".join(f"{', '.join(f'#{i}' for i in level.kept) or 'none'} of {level.children}"
                          for level in self.levels)
        return [f"greedy: {len(self.levels)} levels kept {kept}"]


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
        frontier, levels = [ctx.root], []
        while frontier and not ctx.stopped:
            children = [c for node in frontier if ctx.expandable(node) for c in await ctx.expand(node)]
            frontier = ctx.rank(children)[: self.width]
            if children:
                # Noted at each level, not at the end: a run the budget cuts off keeps the levels it did.
                levels.append({"children": len(children), "kept": frontier})
                ctx.note(ctx.root, LEVELS, list(levels))
        if not ctx.stopped:
            ctx.stop(StopReason.FRONTIER_EXHAUSTED)

    def read_trace(self, graph: ThoughtGraph) -> GreedyTrace | None:
        """The levels it noted on the root; None when the graph has none (nothing was expanded)."""
        levels = graph.node(0).extra.get(LEVELS) if len(graph) else None
        if not levels:
            return None
        return GreedyTrace(tuple(GreedyLevel(level["children"], tuple(level["kept"])) for level in levels))
