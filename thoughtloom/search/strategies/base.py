"""What a strategy is: the `Strategy` protocol, what it needs of a run (`Needs`), and the built-ins' form.

A strategy decides which thoughts to work on next over the search's graph, through the same
context (`ctx`: ask the model, expand, score, stop; what a strategy may use is the `SearchAPI`
protocol, strategy_api.py) as every other. Each one says what makes it
differ, so nothing outside it lists strategy names: its name, its settings (a frozen dataclass;
None for the built-ins, whose settings are SearchConfig's), what it needs (tools, roles of their
own, a depth the controller may grow, the operators' calls), whether a task has the prompts it
needs (`unfit`), and `run(ctx)`. The registry (registry.py) finds them by name. A strategy that keeps a
record of what it did besides its thoughts reads it back from the graph as a `Trace` (trace.py): it is then
also a `TracedStrategy`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, cast, runtime_checkable

if TYPE_CHECKING:
    from ...graph import ThoughtGraph
    from ...tasks.base import Task
    from ..context import SearchContext
    from ..strategy_api import SearchAPI
    from ..trace import Trace


@dataclass(frozen=True, slots=True)
class Needs:
    """What a strategy needs of a run besides a model and a task."""

    #: It calls tools: the run grants it the tools asked for (the others are given none).
    tools: bool = False
    #: Roles whose calls may run on a model of their own (RunSpec.role_models, `--evaluator-model` ...).
    roles: tuple[str, ...] = ()
    #: It grows the thought tree step by step up to `max_depth`, which the controller may raise.
    grows_depth: bool = False
    #: Its calls are the operators' (search/operators.py), so a user's scorer can stand in for the evaluator.
    operators: bool = False
    #: Its thoughts are the task's steps along their primary path, so `loom fork` can copy a path of them.
    one_path: bool = False
    #: Its passes start from a frontier of nodes (search/continuation.py), so a fork can start it at its node.
    from_node: bool = False


@runtime_checkable
class Strategy(Protocol):
    """A search strategy: `solve(..., strategy=MyStrategy())`, or installed under `thoughtloom.strategies`.

    Its class is built with its settings' fields as keyword arguments when a stored run is replayed
    (`cls(**asdict(settings))`), so a frozen dataclass that is its own settings is the simplest form.
    """

    @property
    def name(self) -> str:
        """The name runs record and `--strategy` / bench lanes use."""
        ...

    @property
    def settings(self) -> Any:
        """Its settings: a frozen dataclass instance (recorded with the run), or None."""
        ...

    @property
    def needs(self) -> Needs:
        """What it needs of a run."""
        ...

    def unfit(self, task: Task[Any]) -> str | None:
        """Why it cannot search `task` (one line naming what the task lacks), or None when it can."""
        ...

    def run(self, ctx: SearchAPI) -> Awaitable[None]:
        """Search (an `async def` is one): add, score and settle thoughts through `ctx` until done or stopped."""
        ...


@runtime_checkable
class TracedStrategy(Protocol):
    """A strategy that keeps a trace: it reads it back from the search's graph (what it noted on its thoughts).

    Apart from `Strategy`, so a strategy without a trace needs no method for it. The trace is read from the
    graph, not handed over at the end, so it is stored with the run and kept by a run cut short.
    """

    def read_trace(self, graph: ThoughtGraph) -> Trace | None:
        """Its trace on `graph` (`result.trace`, `--json` under the trace's key, `loom solve` lines); None: none."""
        ...


#: How a strategy reads its trace from a search's graph: None when the graph holds none.
TraceReader = Callable[["ThoughtGraph"], "Trace | None"]


def root_record(graph: ThoughtGraph, key: str) -> Any:
    """What a strategy recorded on the graph's root under `key`, or None (an empty graph has no root)."""
    return graph.node(0).extra.get(key) if len(graph) else None


#: A built-in strategy's search, and its fit check (the strategy's name, the task: a reason or None).
Runner = Callable[["SearchContext"], Awaitable[None]]
FitCheck = Callable[[str, "Task[Any]"], "str | None"]


@dataclass(frozen=True, slots=True)
class BuiltinStrategy:
    """A built-in strategy: a search function with its declaration (settings: SearchConfig's fields)."""

    name: str
    runner: Runner
    needs: Needs = Needs()
    fit: FitCheck | None = None
    #: A variant of another strategy (tree_of_thoughts of bfs): left out where strategies are suggested.
    variant_of: str | None = None
    #: How it reads its trace from the graph, when it keeps one.
    trace: TraceReader | None = None
    settings: None = None

    def unfit(self, task: Task[Any]) -> str | None:
        """Why this strategy cannot search `task`, or None."""
        return self.fit(self.name, task) if self.fit is not None else None

    def read_trace(self, graph: ThoughtGraph) -> Trace | None:
        """Its trace on `graph`, read by `trace`; None when it keeps none."""
        return self.trace(graph) if self.trace is not None else None

    def run(self, ctx: SearchAPI) -> Awaitable[None]:
        """The search (the runner's coroutine itself: no wrapper on the engine's path)."""
        # A built-in is the engine's own: it works with the whole context the engine gives every strategy.
        return self.runner(cast("SearchContext", ctx))
