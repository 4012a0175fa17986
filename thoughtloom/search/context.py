"""SearchContext: the state one search shares between its strategy and its operators.

What every strategy shares lives here: the graph and its mutations (add, reject, merge, prune,
revive), paths and the frontier, stopping, the controller's hooks and knobs. The context's other
jobs are its base classes, each in a module of its own: asking the model (calls.py), grounding a
thought (grounding_step.py) and recording scores (scoring.py). What a strategy may use of all this
is the SearchAPI protocol (strategy_api.py).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Protocol

from ..graph import EdgeKind, NodeKind, NodeStatus, ThoughtGraph
from ..grounding.policy import GroundingPolicy
from ..grounding.types import Grounder, GroundingResult
from ..llm.budget import BudgetLimits
from ..llm.gateway import Gateway
from ..llm.slots import Slots
from ..tasks.base import Task
from .calls import Answer as Answer, ModelCalls
from .config import SearchConfig
from .counts import SearchCounts
from .events import DuplicateMerged, EventBus, NodeAdded, NodePruned, NodeRevived, ThoughtRejected, ThoughtRepaired
from .grounding_step import Grounding
from .handoff import ByType
from .scoring import Scoring
from .stop import StopReason

if TYPE_CHECKING:
    from ..tools.toolbox import Toolbox
    from .scorer import ThoughtScorer
    from .trace import Trace

_S = NodeStatus


@dataclass(frozen=True, slots=True)
class ContextExtra:
    """The node.extra key the context writes: why a thought was rejected (grounding_step.py declares its own)."""

    rejected: str = "rejected"


EXTRA: Final = ContextExtra()


class SearchController(Protocol):
    """Called by the engine and the strategies at fixed points; it may turn the context's knobs."""

    @property
    def goal_quality(self) -> float:
        """The quality at which a thought counts as reaching the goal."""
        ...

    def attach(self, ctx: SearchContext) -> None:
        """Bind to a search before its strategy starts."""
        ...

    async def checkpoint(self, ctx: SearchContext) -> list[int] | None:
        """After a unit of work: a list means continue from these nodes (backtracking)."""
        ...

    async def on_budget_exhausted(self, ctx: SearchContext, limit: str, before: BudgetLimits) -> bool:
        """A call was refused by a budget limit (tokens, calls, cost_usd, wall_s; `before`: the limits
        when it was made): True to retry it (that limit was raised)."""
        ...

    def report(self, ctx: SearchContext) -> Trace:
        """What the controller saw and did, for the result (SearchResult.control)."""
        ...


def overrides(task: Task[Any], hook: str) -> bool:
    """True when the task (its class or the instance itself) replaces the base Task's hook."""
    if hook in getattr(task, "__dict__", {}):
        return True
    return getattr(type(task), hook, None) is not getattr(Task, hook)


class SearchContext(ModelCalls, Grounding, Scoring):
    """Graph, task, gateway and bookkeeping of one search; operators and strategies act through it.

    A strategy of its own uses what the SearchAPI protocol names (strategy_api.py); the rest is the
    engine's, the operators' and the controller's. The controller's knobs (beam, breadth, max_depth,
    value_samples, temperature, goal_quality, order) are plain attributes, as the operators read them
    once per thought; the controller turns them during the search.
    """

    def __init__(
        self,
        task: Task[Any],
        problem: Any,
        gateway: Gateway,
        config: SearchConfig,
        bus: EventBus | None = None,
        controller: SearchController | None = None,
        grounders: Sequence[Grounder] = (),
        grounding_policy: GroundingPolicy | None = None,
        tools: Toolbox | None = None,
        strategy_inputs: Iterable[object] = (),
        routed_roles: Collection[str] = (),
        user_scorer: ThoughtScorer | None = None,
    ) -> None:
        self.task = task
        #: The user's scorer: it scores every thought the model would have evaluated (None: the model does).
        self.user_scorer = user_scorer
        #: The tools the run granted (None: none).
        self.tools = tools
        #: What the run hands one kind of strategy (the agent's processors, the research setup), by type;
        #: and what a strategy leaves for the engine's result (a ResearchResult).
        self.strategy_inputs = ByType(strategy_inputs)
        self.strategy_outputs = ByType()
        #: Roles that run on a model of their own: their calls carry the role as their route.
        self.routed_roles = frozenset(routed_roles)
        self.problem = problem
        # Hooks the task leaves at the base class's default are not called once per thought.
        self.task_validates = overrides(task, "validate")
        self._kinds = overrides(task, "thought_kind")
        self._qualities = overrides(task, "quality")
        self._goals = overrides(task, "is_goal")
        self._terminals = overrides(task, "is_terminal")
        #: The task computes some values exactly (else every thought is valued by the model).
        self.task_values_exactly = overrides(task, "exact_value")
        self.task_tallies = overrides(task, "tally")
        #: The task's evaluator explains itself (else a value reply is parse_value's number alone).
        self.task_explains = overrides(task, "parse_evaluation")
        self.gateway = gateway
        self.config = config
        self.bus = bus or EventBus()
        self.graph = ThoughtGraph()
        self.stop_reason: StopReason | None = None
        self.error: str | None = None
        self.goals: list[int] = []
        self._goal_ids: set[int] = set()
        self.best_id: int | None = None
        self.seen: dict[Hashable, int] = {}
        self.expanded: set[int] = set()
        #: Why each pruned thought was cut (a later pass may bring back those the beam held back).
        self.prune_reasons: dict[int, str] = {}
        #: Calls whose reply was sent to the bus as it was written (numbers ThoughtDelta.call).
        self._watched_calls = 0
        #: What this search counted as it went; the result's stats are read from it.
        self.counts = SearchCounts()
        self.grounders = tuple(grounders)
        self.grounding_policy = grounding_policy or GroundingPolicy()
        #: What grounding found, by node.
        self.grounding: dict[int, GroundingResult] = {}
        self._grounding_slots = Slots(config.grounding_concurrency)
        self._grounded_goals: set[int] = set()
        self.controller = controller
        # The controller's knobs: it turns them during the search; strategies and operators read them
        # (plain attributes, as the operators read them once per thought; not part of the SearchAPI).
        self.beam = config.beam
        self.breadth = config.breadth
        self.max_depth = config.max_depth
        self.value_samples = config.value_samples
        self.temperature = config.temperature
        #: A thought whose quality reaches this counts as a goal (set by the controller).
        self.goal_quality: float | None = None
        #: agent: which ready node starts first (breadth_first, depth_first, best_first); the controller may switch it.
        self.order: str | None = None
        #: Answers a strategy settled itself, by SOLUTION node (the engine then makes no synthesis).
        self.answers: dict[int, str] = {}
        self.value_spreads: deque[float] = deque(maxlen=100)
        self.recent: deque[int] = deque(maxlen=50)
        self.best_quality_id: int | None = None
        self._quality: dict[int, float] = {}
        self._best_by_depth: dict[int, float] = {}
        self._steps: dict[int, tuple[str, ...]] = {}
        self._path_score: dict[int, float | None] = {}
        self._best_key: tuple[Any, ...] | None = None
        self._successful_calls = 0
        # The config's cap on model calls in flight, needed only when the gateway allows more.
        self._call_slots = (
            Slots(config.concurrency) if gateway.concurrency > config.concurrency else None
        )
        root = self.graph.add_node(
            task.root_content(problem), NodeKind.INPUT, creator="input"
        )
        self.root = root.id
        #: Where the strategy's first pass starts: the root, or a fork's node (search/fork.py).
        self.start = root.id
        #: The problem as grounders see it.
        self.problem_text = root.content
        self._steps[self.root] = ()
        self._path_score[self.root] = None
        self.graph.set_status(self.root, _S.IN_PROGRESS)
        self.graph.set_status(self.root, _S.SUCCEEDED)
        self.seen[task.state_key(problem, ())] = self.root
        if self.bus:
            self.bus.emit(NodeAdded(self.root, (), NodeKind.INPUT.value, 0, root.content, "input"))

    # --- control ------------------------------------------------------------------------

    @property
    def stopped(self) -> bool:
        """True once any stop condition fired."""
        return self.stop_reason is not None

    def stop(self, reason: StopReason) -> None:
        """Stop the search; the first reason given is the one reported."""
        if self.stop_reason is None:
            self.stop_reason = reason

    def resume(self) -> None:
        """Take back a stop that ended one pass (search/continuation.py decides another may follow)."""
        self.stop_reason = None

    async def _budget_raised(self, limit: str, before: BudgetLimits) -> bool:
        """Whether the controller raised a budget limit that refused a call (made under `before`)."""
        return (
            self.controller is not None and not self.stopped
            and await self.controller.on_budget_exhausted(self, limit, before)
        )

    # --- paths and scores ---------------------------------------------------------------

    def steps(self, node_id: int) -> tuple[str, ...]:
        """Contents of the thoughts from below the root down to this node."""
        return self._steps[node_id]

    def path_score(self, node_id: int) -> float | None:
        """The node's path score under the configured aggregation (None for the root)."""
        return self._path_score.get(node_id)

    @property
    def path_scores(self) -> Mapping[int, float | None]:
        """Every scored node's path score, by node id (a live view: the search keeps adding to it)."""
        return self._path_score

    def deepest(self) -> int:
        """The most steps any thought in the graph is from the root."""
        return max(map(len, self._steps.values()))  # no generator frame: this walks every thought

    def expandable(self, node_id: int) -> bool:
        """True when the node is scored, alive, not terminal and above the depth limit."""
        node = self.graph.node(node_id)
        return (
            node.status is _S.SUCCEEDED
            and node_id not in self.expanded
            and len(self._steps[node_id]) < self.max_depth
            # terminal(), inline: a strategy asks this of every candidate of every level
            and not (self._terminals and self.task.is_terminal(self.problem, self._steps[node_id]))
        )

    def frontier(self) -> list[int]:
        """The thoughts that may be expanded next (scored, alive, not expanded, above the depth limit), best first."""
        alive = self.graph.by_status(_S.SUCCEEDED)
        return self.rank(n.id for n in alive if n.kind is not NodeKind.SOLUTION and self.expandable(n.id))

    def rank(self, node_ids: Iterable[int]) -> list[int]:
        """Best first: by own score, then path score, then age (older first, for determinism)."""
        node, path_score = self.graph.node, self._path_score.get
        return sorted(node_ids, key=lambda n: (-(node(n).score or 0.0), -(path_score(n) or 0.0), n))

    def terminal(self, node_id: int) -> bool:
        """True when the task says the node's path is complete (nothing may follow it)."""
        return self._terminals and self.task.is_terminal(self.problem, self._steps[node_id])

    def held_by_depth(self, node_id: int) -> bool:
        """True when only the depth limit keeps the node from being expanded (a deeper limit would let it)."""
        node = self.graph.node(node_id)
        return (
            node.status is _S.SUCCEEDED
            and node_id not in self.expanded
            and len(self._steps[node_id]) >= self.max_depth
            and not (self._terminals and self.task.is_terminal(self.problem, self._steps[node_id]))
        )

    # --- graph mutations ----------------------------------------------------------------

    def add_thought(
        self,
        parents: Sequence[int],
        content: str,
        creator: str,
        *,
        kind: NodeKind | None = None,
        edge_kind: EdgeKind = EdgeKind.ELABORATION,
        cost_tokens: int = 0,
        note: str | None = None,
        replaces_last: bool = False,
        steps: tuple[str, ...] | None = None,
    ) -> int | None:
        """Add a thought below its parents (first parent = primary); None past max_nodes.

        replaces_last: the thought stands in for the primary parent's last step (a merge or a
        refinement), so it sits at the same search level rather than one step further.
        steps: the new thought's path, when the caller already built it (saves a copy).
        """
        graph = self.graph
        if len(graph) >= self.config.max_nodes:
            self.stop(StopReason.MAX_NODES)
            return None
        if steps is None:
            base = self._steps[parents[0]]
            steps = (base[:-1] if replaces_last else base) + (content,)
        if kind is None:
            kind = self.task.thought_kind(self.problem, steps) if self._kinds else NodeKind.HYPOTHESIS
        node = graph.add_node(
            content, kind, parents, edge_kind, None, creator, cost_tokens, None,
            None if note is None else {"repaired": note},
        )
        self._steps[node.id] = steps
        if self.bus.sinks:
            self.bus.emit(NodeAdded(node.id, tuple(parents), kind.value, node.depth, content, creator))
            if note is not None:
                self.bus.emit(ThoughtRepaired(node.id, note))
        if note is not None:
            self.counts.repaired += 1
        return node.id

    def add_solution(self, node_id: int, answer: str) -> int:
        """Add the final answer below the thought it comes from, with that thought's scores.

        Added even past max_nodes: it is the answer, not more search.
        """
        node = self.graph.node(node_id)
        solution = self.graph.add_node(
            answer, NodeKind.SOLUTION, [node_id], EdgeKind.DEPENDENCY, creator="synthesize", score=node.score,
        )
        # Walk the state machine forward even when the answer hangs below a pruned thought.
        self.graph.succeed(solution.id)
        self._steps[solution.id] = self._steps[node_id]
        self._path_score[solution.id] = self._path_score.get(node_id)
        if self.bus:
            self.bus.emit(
                NodeAdded(solution.id, (node_id,), NodeKind.SOLUTION.value, solution.depth, answer, "synthesize")
            )
        return solution.id

    def reject(self, parent: int, content: str, reason: str, creator: str) -> None:
        """Record a thought the validator rejected, as a failed node."""
        # The task is not asked for the kind: a rejected thought may not even parse as a step.
        nid = self.add_thought([parent], content, creator, kind=NodeKind.HYPOTHESIS)
        if nid is None:
            return
        self.graph.node(nid).extra[EXTRA.rejected] = reason
        self.graph.set_status(nid, _S.FAILED)
        self.counts.rejected += 1
        if self.bus:
            self.bus.emit(ThoughtRejected(nid, reason))

    def merge_duplicate(self, parent: int, key: Hashable) -> bool:
        """If the state is already in the graph, link parent to it and return True."""
        existing = self.seen.get(key)
        if existing is None:
            return False
        graph = self.graph
        if existing != parent and parent not in graph.parents(existing) and not graph.reaches(existing, parent):
            graph.add_edge(parent, existing, EdgeKind.ELABORATION)
        self.counts.duplicates += 1
        if self.bus:
            self.bus.emit(DuplicateMerged(parent, existing))
        return True

    async def checkpoint(self) -> list[int] | None:
        """Let the controller look at the search; a list means: continue from these nodes."""
        if self.controller is None or self.stopped:
            return None
        return await self.controller.checkpoint(self)

    def prove_goals(self, node_ids: Iterable[int]) -> None:
        """Thoughts the task proved solve the problem (an agreement it counted): goals once scored."""
        self._grounded_goals.update(node_ids)

    def revive(self, node_id: int) -> None:
        """Bring a pruned thought back into the search (backtracking)."""
        if self.graph.node(node_id).status is _S.PRUNED:
            self.graph.set_status(node_id, _S.SUCCEEDED)
            self.prune_reasons.pop(node_id, None)
            self.counts.pruned -= 1
            if self.bus:
                self.bus.emit(NodeRevived(node_id))

    def prune(self, node_id: int, reason: str) -> None:
        """Cut a thought from the search."""
        self.graph.set_status(node_id, _S.PRUNED)
        self.prune_reasons[node_id] = reason
        self.counts.pruned += 1
        if self.bus:
            self.bus.emit(NodePruned(node_id, reason))

    def cancel(self, node_id: int) -> None:
        """Mark a thought the search stopped before scoring."""
        node = self.graph.node(node_id)
        if node.status in (_S.READY, _S.PENDING, _S.IN_PROGRESS):
            self.graph.set_status(node_id, _S.CANCELLED)
