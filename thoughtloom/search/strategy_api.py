"""What a strategy may use of its search: the `SearchAPI` protocol, and the context the engine gives it.

A strategy's `run(ctx)` receives a `StrategyContext`: the search's `SearchContext` with the
operators as methods. A strategy of your own uses only what `SearchAPI` names: ask the model,
call a tool, expand a thought (the operators), add a thought, score it, note its own record on a
thought (what its trace reads back), read the graph, the frontier and the scores, and stop with a
typed reason. Everything else on the context (the
controller's knobs, the counts, the operators' bookkeeping) is the engine's and may change.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import astuple
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ..graph import EdgeKind, NodeKind, ThoughtGraph
from ..tasks.base import Query, Task
from . import operators
from .calls import Answer
from .context import EXTRA as CONTEXT_EXTRA, SearchContext
from .fork import EXTRA as FORK_EXTRA
from .grounding_step import EXTRA as GROUNDING_EXTRA
from .operators import EXTRA as OPERATOR_EXTRA
from .stop import StopReason

if TYPE_CHECKING:
    from ..tools.toolbox import Toolbox


@runtime_checkable
class SearchAPI(Protocol):
    """What a strategy may use of its search (`Strategy.run(ctx)`): the model, tools, thoughts, scores, stop."""

    # --- reading the search ---------------------------------------------------------------

    @property
    def task(self) -> Task[Any]:
        """The task searched: its prompts, parsers and checks."""

    @property
    def problem(self) -> Any:
        """The problem, as the task parsed and prepared it."""

    @property
    def graph(self) -> ThoughtGraph:
        """The thoughts so far with their contents, scores and statuses (read it; change it through this API)."""

    @property
    def root(self) -> int:
        """The problem's node, which every thought descends from."""

    @property
    def start(self) -> int:
        """Where the first pass starts: the root, or the node a fork continues from."""

    @property
    def goals(self) -> Sequence[int]:
        """The thoughts that reached the goal, in the order they did."""

    @property
    def stopped(self) -> bool:
        """True once the search was stopped (a goal, a budget, a limit, `stop`): a strategy then returns."""

    def steps(self, node_id: int) -> tuple[str, ...]:
        """The thoughts' contents from below the root down to this node."""

    def path_score(self, node_id: int) -> float | None:
        """The node's path score under the configured aggregation (None for the root)."""

    def quality(self, node_id: int) -> float:
        """The task's judgement of a scored thought as an answer (0 for unscored ones)."""

    def expandable(self, node_id: int) -> bool:
        """True when the thought is scored, alive, not expanded yet, not terminal and above the depth limit."""

    def frontier(self) -> list[int]:
        """The thoughts that may be expanded next, best first."""

    def rank(self, node_ids: Iterable[int]) -> list[int]:
        """The thoughts best first: by own score, then path score, then age."""

    # --- the model and the tools ------------------------------------------------------------

    async def ask(self, query: Query, n: int, purpose: str, key: object, role: str | None = None) -> Answer | None:
        """One model call of `n` samples: (texts, tokens), or None when the budget or a failure stopped the search.

        purpose names the call in records and events; key (with purpose) seeds it and makes it
        replayable; role (generator, evaluator, synthesizer, ...) routes it to that role's model.
        """

    async def ask_many(
        self, queries: Sequence[Query], n: int, purpose: str, keys: Sequence[object], role: str | None = None,
    ) -> list[Answer | None]:
        """Several calls as one batched backend call where the backend batches (concurrent calls otherwise)."""

    @property
    def tools(self) -> Toolbox | None:
        """The tools the run granted (`await ctx.tools.call(name, args)`); None when it granted none."""

    # --- the operators ----------------------------------------------------------------------

    async def expand(self, node_id: int) -> list[int]:
        """Generate, validate, deduplicate and score a thought's children (once per thought): the scored ones."""

    async def value(self, node_ids: Sequence[int], *, rescore: bool = False) -> None:
        """Score thoughts with the evaluator (or the user's scorer), as `expand` scores children."""

    # --- thoughts and scores ----------------------------------------------------------------

    def add_thought(
        self,
        parents: Sequence[int],
        content: str,
        creator: str,
        *,
        kind: NodeKind | None = None,
        edge_kind: EdgeKind = EdgeKind.ELABORATION,
        cost_tokens: int = 0,
        replaces_last: bool = False,
    ) -> int | None:
        """Add a thought below its parents (the first is its path's): its id, or None past max_nodes.

        kind: the task's thought_kind when None; replaces_last: it stands in for the first parent's
        last step (a merge or a refinement) rather than adding one.
        """

    def set_score(self, node_id: int, score: float) -> None:
        """Score a thought in [0, 1]: its path score, goal status and threshold pruning follow."""

    def scorer(self) -> Callable[[int, float], None]:
        """`set_score` with its lookups made once, for a loop that scores many thoughts without awaiting."""

    def prune(self, node_id: int, reason: str) -> None:
        """Cut a thought from the search, saying why."""

    def note(self, node_id: int, key: str, data: Any) -> None:
        """Keep plain data (JSON-like) on a thought under `key`, a key the strategy declares: stored with the run,
        it is what the strategy's trace reads back from the graph (`TracedStrategy.read_trace`)."""

    def stop(self, reason: StopReason) -> None:
        """Stop the search; the first reason given is the one reported."""


#: The node.extra keys the engine writes and reads back (a strategy's note under one would pass for its record).
ENGINE_KEYS: frozenset[str] = frozenset(
    value for extra in (CONTEXT_EXTRA, GROUNDING_EXTRA, OPERATOR_EXTRA, FORK_EXTRA) for value in astuple(extra))


class StrategyContext(SearchContext):
    """The context the engine gives a strategy: the SearchContext, with the operators as methods (a SearchAPI)."""

    # The operator functions themselves, bound as methods: no wrapper between a strategy and them.
    expand = operators.expand
    value = operators.value_many

    def note(self, node_id: int, key: str, data: Any) -> None:
        """Keep plain data on a thought under `key` (a strategy's own record, for its trace); ValueError for a key
        the engine writes itself."""
        if key in ENGINE_KEYS:
            raise ValueError(f"note key {key!r} is one the engine writes on thoughts itself "
                             f"({', '.join(sorted(ENGINE_KEYS))}); name your strategy's records with keys of its own")
        self.graph.node(node_id).extra[key] = data
