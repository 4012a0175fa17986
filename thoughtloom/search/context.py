"""SearchContext: the state one search shares between its strategy and its operators."""

from __future__ import annotations

import json
import logging
import zlib
from collections import deque
from collections.abc import Callable, Collection, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Final, Protocol

from ..graph import EdgeKind, NodeKind, NodeStatus, ThoughtGraph
from ..grounding.policy import GroundingPolicy
from ..grounding.types import Grounder, GroundingResult, Thought
from ..llm.budget import BudgetLimits
from ..llm.errors import BatchRefused, BudgetExceeded, ModelError
from ..llm.gateway import Gateway
from ..llm.inline import Later
from ..llm.slots import Slots
from ..llm.types import Completion, GenerateRequest
from ..tasks.base import Query, Task
from .config import SearchConfig
from .counts import SearchCounts
from .eager import eager_gather
from .events import (
    DuplicateMerged,
    EventBus,
    GoalFound,
    NodeAdded,
    NodePruned,
    NodeRevived,
    NodeScored,
    ThoughtDelta,
    ThoughtGrounded,
    ThoughtRejected,
    ThoughtRepaired,
)
from .stop import StopReason

logger = logging.getLogger(__name__)

if TYPE_CHECKING:
    from ..tools.toolbox import Toolbox
    from .scorer import ThoughtScorer

_S = NodeStatus

#: What a model call gave the search: its texts and the tokens it cost.
Answer = tuple[list[str], int]


@dataclass(frozen=True, slots=True)
class ContextExtra:
    """The node.extra keys the context writes: what grounding found, why a thought was rejected."""

    grounding: str = "grounding"
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

    def report(self, ctx: SearchContext) -> dict[str, Any]:
        """What the controller saw and did, for the result."""
        ...


def overrides(task: Task[Any], hook: str) -> bool:
    """True when the task (its class or the instance itself) replaces the base Task's hook."""
    if hook in getattr(task, "__dict__", {}):
        return True
    return getattr(type(task), hook, None) is not getattr(Task, hook)


def combine(aggregation: str, parent_value: float | None, score: float, length: int) -> float:
    """Path score after appending `score` to a path of `length - 1` scored steps."""
    if parent_value is None or length <= 1:
        return score
    if aggregation == "sum":
        return parent_value + score
    if aggregation == "product":
        return parent_value * score
    if aggregation == "min":
        return min(parent_value, score)
    return parent_value + (score - parent_value) / length  # running mean


class SearchContext:
    """Graph, task, gateway and bookkeeping of one search; operators and strategies act through it."""

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
        # A search.agent ProcessorRegistry; not named here, as the agent package builds on this module.
        processors: Any = None,
        # A search.research ResearchSetup (the research strategy's settings and roles), for the same reason.
        research: Any = None,
        routed_roles: Collection[str] = (),
        user_scorer: ThoughtScorer | None = None,
    ) -> None:
        self.task = task
        #: The user's scorer: it scores every thought the model would have evaluated (None: the model does).
        self.user_scorer = user_scorer
        #: The agent strategy's tools and processors (None: no tools; the built-in processors).
        self.tools = tools
        self.processors = processors
        #: The research strategy's setup, and the ResearchResult it leaves for the engine's result.
        self.research = research
        self.research_result: Any = None
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
        # Knobs the controller may turn during the search; strategies and operators read these.
        self.beam = config.beam
        self.breadth = config.breadth
        self.max_depth = config.max_depth
        self.value_samples = config.value_samples
        self.temperature = config.temperature
        self.controller = controller
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
        return max(len(s) for s in self._steps.values())

    def expandable(self, node_id: int) -> bool:
        """True when the node is scored, alive, not terminal and above the depth limit."""
        node = self.graph.node(node_id)
        return (
            node.status is _S.SUCCEEDED
            and node_id not in self.expanded
            and len(self._steps[node_id]) < self.max_depth
            and not self.terminal(node_id)
        )

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

    # --- model calls --------------------------------------------------------------------

    def _seed(self, purpose: str, key: object) -> int | None:
        # Derived from content, not call order, so concurrent runs stay reproducible.
        if self.config.seed is None:
            return None
        return zlib.crc32(f"{self.config.seed}|{purpose}|{key!r}".encode()) & 0x7FFFFFFF

    @property
    def scores_choices(self) -> bool:
        """True when a query's choices are scored from the model's distribution (one call, no samples)."""
        return self.gateway.scores_choices

    def _request(self, query: Query, n: int, purpose: str, key: object, role: str | None) -> GenerateRequest:
        choices = query.choices
        # The backend's capabilities are read only for a query with choices: this runs once per call.
        score = bool(choices) and self.gateway.scores_choices
        # Positional (keywords cost twice as much, once per call): prompt, n, max_tokens,
        # temperature, stop, seed, purpose, schema, route, choices, score_choices, logprobs, form, tools
        # (test_search.py checks each
        # field arrives where it belongs).
        request = GenerateRequest(
            query.prompt,
            1 if score else n,
            1 if score else query.max_tokens,
            self.temperature if query.temperature is None else query.temperature,
            query.stop,
            None if self.config.seed is None else self._seed(purpose, key),  # no call per request when unseeded
            purpose,
            query.schema,
            # Only a role with a model of its own is routed: the requests (and so the cache and replay
            # keys) of a run without role models stay what they were.
            role if role is not None and role in self.routed_roles else None,
            choices if choices and (score or self.gateway.follows_choices) else (),
            score,
            None,  # logprobs
            None,  # form
            query.tools,
        )
        return request if not self.bus.deltas else self._watched(request)

    def _watched(self, request: GenerateRequest) -> GenerateRequest:
        """The request, with its reply's text sent to the event bus as it is written (ThoughtDelta)."""
        call, bus, purpose = self._watched_calls, self.bus, request.purpose
        self._watched_calls += 1
        return replace(request, on_text=lambda sample, text: bus.emit(ThoughtDelta(call, purpose, sample, text)))

    async def ask(self, query: Query, n: int, purpose: str, key: object,
                  role: str | None = None) -> Answer | None:
        """Make one model call; None when the budget or a model failure stopped the search.

        role: who asks (generator, evaluator, synthesizer, brancher); a role with a model of its
        own (`routed_roles`) has the call answered by that model.
        """
        out = self.ask_now(query, n, purpose, key, role)
        return await out if type(out) is Later else out  # type: ignore[return-value]

    def ask_now(self, query: Query, n: int, purpose: str, key: object,
                role: str | None = None) -> Answer | None | Later[Answer | None]:
        """`ask`, answered at once when the model answers without waiting; otherwise a Later that
        finishes the call (await it). The operators' hot loops call this: a call answered at once
        then costs no coroutine."""
        if self.stop_reason is not None:  # self.stopped, without the property call (once per model call)
            return None
        request = self._request(query, n, purpose, key, role)
        if self._call_slots is not None:
            return Later(self._ask_later(request, self.gateway.budget.limits, None))
        try:
            out = self.gateway.start(request)
        except (BudgetExceeded, ModelError) as exc:
            # start() never waits, so the limits are still the ones the call was made under.
            return Later(self._ask_later(request, self.gateway.budget.limits, exc))
        if type(out) is Later:
            return Later(self._ask_later(request, self.gateway.budget.limits, out))
        return self._answered(request, out)  # type: ignore[arg-type]

    async def _ask_later(self, request: GenerateRequest, limits_before: BudgetLimits,
                         first: Later[Completion] | BaseException | None) -> Answer | None:
        """The rest of a call that waited or failed (first: how its first try went; None: not made
        yet): a budget the controller raises makes the call again."""
        while True:
            try:
                if isinstance(first, BaseException):
                    raise first
                if first is not None:
                    completion = await first
                elif self._call_slots is None:
                    completion = await self.gateway.generate(request)
                else:
                    async with self._call_slots:
                        completion = await self.gateway.generate(request)
                break
            except BudgetExceeded as exc:
                if (
                    self.controller is not None and not self.stopped
                    and await self.controller.on_budget_exhausted(self, exc.limit, limits_before)
                ):
                    first, limits_before = None, self.gateway.budget.limits
                    continue  # the limit was raised: make the call after all
                self.stop(StopReason.budget(exc.limit))
                return None
            except ModelError as exc:
                self._model_failed(exc)
                return None
        return self._answered(request, completion)

    def _answered(self, request: GenerateRequest, completion: Completion) -> Answer:
        """A successful call's texts and what it cost in tokens."""
        self._successful_calls += 1
        if request.schema is not None:
            self._count_parse_failures(request, completion.texts)
        usage = completion.usage
        return list(completion.texts), usage.input_tokens + usage.output_tokens

    def _count_parse_failures(self, request: GenerateRequest, texts: Sequence[str]) -> None:
        """Count the replies to a structured request that are not the JSON object it asked for: the
        task read them with its text fallback, and how often that happens says whether the backend
        enforces schemas (a reply constrained to choices is not JSON, and is not counted)."""
        if request.schema is None or request.choices:
            return
        self.counts.parse_failures += sum(1 for text in texts if not _is_json_object(text))

    def _model_failed(self, exc: ModelError) -> None:
        if self._successful_calls == 0:
            raise exc  # nothing computed yet: a configuration problem the caller must see
        self.error = str(exc)
        self.stop(StopReason.MODEL_ERROR)

    async def ask_many(
        self, queries: Sequence[Query], n: int, purpose: str, keys: Sequence[object], role: str | None = None,
    ) -> list[Answer | None]:
        """Make several calls as one batched backend call (concurrent single calls if it cannot); role as in ask."""
        if self.stopped:
            return [None] * len(queries)
        if self.gateway.batches:
            requests = [self._request(q, n, purpose, k, role) for q, k in zip(queries, keys, strict=True)]
            try:
                if self._call_slots is None:
                    completions = await self.gateway.generate_batch(requests)
                else:
                    async with self._call_slots:
                        completions = await self.gateway.generate_batch(requests)
            except BudgetExceeded:
                pass  # the batch does not fit as a whole: the calls one by one shrink or negotiate
            except BatchRefused:
                pass  # the server cannot batch (it never will be asked again): single calls
            except ModelError as exc:
                self._model_failed(exc)
                return [None] * len(queries)
            else:
                self._successful_calls += len(completions)
                for request, completion in zip(requests, completions, strict=True):
                    self._count_parse_failures(request, completion.texts)
                return [(list(c.texts), c.usage.total) for c in completions]
        return await eager_gather(self.ask(q, n, purpose, k, role) for q, k in zip(queries, keys, strict=True))

    # --- grounding ----------------------------------------------------------------------

    async def ground(self, node_id: int, score: float) -> float | None:
        """Test a thought with the first grounder that can; return its score adjusted by the result.

        A thought is grounded once: a re-score reuses the result it already has. None: the
        wall-clock budget ran out before grounding finished (the grounder is cancelled, its
        sandbox killed, the search stopped), and the thought stays unscored.
        """
        result = self.grounding.get(node_id)
        if result is None:
            budget = self.gateway.budget
            try:
                if budget.wall_left() is None:
                    result = await self._run_grounder(node_id)
                else:
                    # The grounding runs in a task of its own (Budget.within_wall), cancelled at the deadline.
                    result = await budget.within_wall(self._run_grounder(node_id))
            except TimeoutError:
                self.stop(StopReason.BUDGET_WALL_S)
                return None
            if result is None:
                # No grounder could test it: the policy may require grounding (unverified_factor).
                return self.grounding_policy.adjust(score, None)
            logger.info("node %d grounded by %s: %s, %d passed, %d failed", node_id, result.grounder,
                        {True: "verified", False: "FAILED", None: "inconclusive"}[result.verified],
                        result.passed, result.failed)
        adjusted = self.grounding_policy.adjust(score, result)
        if self.bus:
            first = result.evidence.strip().splitlines()[0] if result.evidence.strip() else ""
            self.bus.emit(ThoughtGrounded(
                node_id, result.grounder, result.verified, result.passed, result.failed, score, adjusted, first,
            ))
        return adjusted

    async def _run_grounder(self, node_id: int) -> GroundingResult | None:
        steps = self._steps[node_id]
        node = self.graph.node(node_id)
        thought = Thought(self.problem_text, steps[:-1], steps[-1], node.kind.value)
        grounder = next((g for g in self.grounders if g.can_ground(thought)), None)
        if grounder is None:
            return None
        async with self._grounding_slots:
            try:
                # In the caller's task, start to end: search/eager.py never moves a coroutine between tasks.
                result = await grounder.ground(thought)
            except Exception as exc:
                # A grounder that breaks must cost one thought its check, not the whole search.
                self.counts.grounder_errors += 1
                logger.info("grounder %s failed on node %d: %s: %s", grounder.name, node_id, type(exc).__name__, exc)
                logger.debug("the grounder's traceback", exc_info=True)
                result = GroundingResult(
                    grounder.name, False, None, f"the grounder failed: {type(exc).__name__}: {exc}", 0.0
                )
        self.grounding[node_id] = result
        node.extra[EXTRA.grounding] = result.to_dict()
        if result.grounded and result.verified is not None:
            self.counts.grounded += 1
            if result.verified:
                self.counts.verified += 1
            else:
                self.counts.grounding_failed += 1
        if self.task.grounded_goal(self.problem, steps, result):
            self._grounded_goals.add(node_id)
        return result

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

    def set_score(self, node_id: int, score: float) -> None:
        """Record a node's score, its path score, goal status and threshold pruning."""
        self.set_scores(((node_id, score),))

    def set_scores(self, scores: Iterable[tuple[int, float]]) -> None:
        """set_score for several nodes in turn (siblings, usually), with lookups made once."""
        score_one = self.scorer()
        for node_id, score in scores:
            score_one(node_id, score)

    def scorer(self) -> Callable[[int, float], None]:
        """set_score with the search's lookups made once: for a loop that scores thoughts one by one
        without waiting in between (the attributes it holds do not change while nothing waits)."""
        # The hot path of every search (once per thought): lookups are hoisted, calls kept few.
        graph, root, steps_of, path_scores = self.graph, self.root, self._steps, self._path_score
        node_of, succeed, primary_parent = graph.node, graph.succeed, graph.primary_parent
        aggregation = self.config.aggregation
        task, problem = self.task, self.problem
        qualities, best_by_depth, goal_ids, recent = self._quality, self._best_by_depth, self._goal_ids, self.recent
        sinks = self.bus.sinks
        by_quality, by_goal, grounded_goals = self._qualities, self._goals, self._grounded_goals
        prune_threshold, stop_on_goal = self.config.prune_threshold, self.config.stop_on_goal
        whole_answers = task.whole_answers

        def score_one(node_id: int, score: float) -> None:
            if not 0.0 <= score <= 1.0:  # out of range: clamped; NaN -> 0
                score = 1.0 if score > 1.0 else 0.0
            node = node_of(node_id)
            node.score = score
            if node.status is not _S.PRUNED:  # a re-score must not revive a thought pruned meanwhile
                succeed(node_id)
            steps = steps_of[node_id]
            depth = len(steps)
            # The path score extends the nearest ancestor one step shorter (a merge or refinement
            # stands in for its parent's step rather than adding one).
            base = primary_parent(node_id)
            assert base is not None  # only the root has no parent, and it is never scored
            while base != root and len(steps_of[base]) >= depth:
                base = primary_parent(base)
                assert base is not None
            path = combine(aggregation, path_scores[base], score, depth)
            path_scores[node_id] = path
            if sinks:
                self.bus.emit(NodeScored(node_id, score, path))
            quality = task.quality(problem, steps, score) if by_quality else score
            qualities[node_id] = quality
            if quality > best_by_depth.get(depth, -1.0):
                best_by_depth[depth] = quality
            best_quality_id = self.best_quality_id
            if best_quality_id is None or quality > qualities[best_quality_id]:
                self.best_quality_id = node_id
            recent.append(node_id)
            goal = node_id in goal_ids
            if not goal:  # a re-scored goal stays a goal, and goals are never pruned
                goal_quality = self.goal_quality
                if (
                    (by_goal and task.is_goal(problem, steps)) or node_id in grounded_goals
                    or (goal_quality is not None and quality >= goal_quality)
                ):
                    goal = True
                    self.goals.append(node_id)
                    goal_ids.add(node_id)
                    if sinks:
                        self.bus.emit(GoalFound(node_id))
                    if stop_on_goal:
                        self.stop(StopReason.GOAL_REACHED)
                elif score < prune_threshold:
                    self.prune(node_id, f"score {score:.2f} below threshold {prune_threshold:.2f}")
            # The best thought so far: goals first, then scored above zero, deeper, better path, older
            # (where each thought is a whole answer: better scored, then older, at any depth).
            best = self._best_key
            if best is None or goal or not best[0]:  # a non-goal never beats a goal
                key = (goal, score > 0.0, score, 0, -node_id) if whole_answers else \
                    (goal, score > 0.0, depth, path or 0.0, -node_id)
                if best is None or key > best:
                    self._best_key = key
                    self.best_id = node_id

        return score_one

    def quality(self, node_id: int) -> float:
        """The task's judgement of a scored thought as an answer (0 for unscored ones)."""
        return self._quality.get(node_id, 0.0)

    def quality_history(self) -> list[float]:
        """Best quality at each depth from 1 to the deepest scored one (0 where none)."""
        deepest = max(self._best_by_depth, default=0)
        return [self._best_by_depth.get(d, 0.0) for d in range(1, deepest + 1)]

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


def _is_json_object(text: str) -> bool:
    """Whether a reply is one JSON object (what a structured request asks for)."""
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False
