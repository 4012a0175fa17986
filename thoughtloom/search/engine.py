"""The engine: runs a strategy over a task under a gateway's budget and returns the best answer found."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from ..graph import NodeStatus
from ..grounding.policy import GroundingPolicy
from ..grounding.types import Grounder
from ..llm.budget import Budget
from ..llm.gateway import CallRecord, Gateway
from ..tasks.base import Task
from ..tasks.evaluation import Evaluation
from .config import SearchConfig
from .context import SearchContext, SearchController
from .events import BudgetSpent, EventBus, EventSink, SearchStarted, SearchStopped
from .fork import ForkPoint, graft
from .operators import EXTRA as OPERATOR_EXTRA, synthesize
from .paths import ScoredPaths
from .research.records import ResearchResult
from .result import PathStep, SearchResult, SearchStats, SearchUsage, role_usage
from .scorer import ThoughtScorer
from .stop import StopReason
from .strategies.base import Strategy
from .strategies.registry import strategy_named
from .strategy_api import StrategyContext

if TYPE_CHECKING:
    from ..tools.toolbox import Toolbox
    from .agent.processors import ProcessorRegistry
    from .research.explorer import ResearchSetup

T = TypeVar("T")

#: Tokens kept back from the search for the final synthesis call, when the task needs one.
SYNTHESIS_RESERVE_TOKENS = 600
#: How long past the wall-clock deadline the strategy may take to wind down before it is cancelled.
#: Model calls and grounding are cut at the deadline itself; this only catches anything else.
WALL_GRACE_S = 0.5


def _budget_listener(gateway: Gateway, bus: EventBus):
    def on_call(record: CallRecord) -> None:
        b = gateway.budget
        bus.emit(
            BudgetSpent(
                purpose=record.purpose,
                call_tokens=record.usage.total,
                spent_tokens=b.spent.total,
                token_limit=b.limits.tokens,
                calls=b.calls,
                cost_usd=b.cost_usd,
                cached=record.cached,
                error=record.error,
            )
        )

    return on_call


class _WallDeadline(Exception):
    """The wall-clock budget ran out while the search was waiting (internal)."""


async def _within_wall(budget: Budget, step: Awaitable[T], grace_s: float = 0.0) -> T:
    """Await `step`, cancelled when the wall-clock budget (plus grace_s) runs out."""
    if budget.wall_left() is None:
        return await step
    try:
        # The step runs in a task of its own, so cancelling it is safe from any caller; a wall-clock
        # limit the controller raises meanwhile moves the deadline.
        return await budget.within_wall(step, grace_s)
    except TimeoutError:
        left = budget.wall_left()
        if left is not None and left <= 0:
            raise _WallDeadline() from None
        raise


async def search(
    task: Task[Any],
    problem_text: str,
    gateway: Gateway,
    config: SearchConfig | None = None,
    *,
    sinks: list[EventSink] | None = None,
    controller: SearchController | None = None,
    grounders: Sequence[Grounder] = (),
    grounding_policy: GroundingPolicy | None = None,
    on_context: Callable[[SearchContext], None] | None = None,
    tools: Toolbox | None = None,
    processors: ProcessorRegistry | None = None,
    research: ResearchSetup | None = None,
    routed_roles: Collection[str] = (),
    scorer: ThoughtScorer | None = None,
    fork: ForkPoint | None = None,
    strategy: Strategy | None = None,
) -> SearchResult:
    """Search for an answer to problem_text; always returns the best found and why it stopped.

    Raises ProblemError for an invalid problem and ModelError when the very first model call
    fails (a configuration problem); later failures stop the search and keep what was found.
    Thoughts are grounded by the task's own grounders and by `grounders`, and their scores moved
    by `grounding_policy` (default: GroundingPolicy()). `on_context` is called once with the
    SearchContext before the strategy starts (a run recorder reads the graph through it).
    `tools` and `processors` are what the agent strategy works with (other strategies ignore them);
    `research` is the research strategy's setup (with `tools`), and `result.research` its ResearchResult.
    `routed_roles`: roles (generator, evaluator, synthesizer; brancher for research) whose calls go
    to a model of their own (the gateway's backend routes them; see thoughtloom.llm.routing), and
    `result.usage.roles` says what each model was charged. `scorer`: the user's scorer, which scores the
    thoughts in place of the model's evaluation (search/scorer.py). `fork`: a stored run's path to
    copy below the root, the strategy starting from its end (search/fork.py). `strategy`: the strategy object
    to run (a user's); None: the one `config.strategy` names (search/strategies/registry.py).
    Cancelled (Ctrl-C), it returns what it has with termination_reason "interrupted" and makes
    no further model call.

    A wall-clock budget is a deadline for the whole search: the task's preparation, model calls
    and grounding in flight are cancelled when it passes (sandboxes are killed with them), and the
    search returns its best answer with termination_reason "budget_wall_s". The final answer check
    (task.acheck_answer: hidden tests, re-running a fix) is scoring, not search: it runs after the
    deadline with an allowance of its own, as long again as the wall-clock budget; a check that
    does not finish in it leaves `solved` None and stats.answer_check "timeout".
    """
    config = config or SearchConfig()
    runner = strategy if strategy is not None else strategy_named(config.strategy)
    budget = gateway.budget
    parsed = task.parse_problem(problem_text)
    try:
        problem = await _within_wall(budget, task.prepare(parsed))
        out_of_time = False
    except _WallDeadline:
        problem, out_of_time = parsed, True
    all_grounders = [*task.grounders(problem), *grounders]
    bus = EventBus(list(sinks or []))
    if bus and gateway.listener is None:
        gateway.listener = _budget_listener(gateway, bus)
    started = time.monotonic()
    calls_before = len(gateway.records)
    requests_before = gateway.budget.calls
    spent_before = gateway.budget.spent
    cost_before = gateway.budget.cost_usd
    routes_before = dict(gateway.budget.routes)
    if bus:
        bus.emit(SearchStarted(task.name, problem_text, config.strategy, gateway.budget.limits.tokens))
    ctx = StrategyContext(task, problem, gateway, config, bus, controller, all_grounders, grounding_policy, tools,
                          (processors, research), routed_roles, scorer)
    if out_of_time:
        ctx.stop(StopReason.BUDGET_WALL_S)
    if on_context is not None:
        on_context(ctx)
    if controller is not None:
        controller.attach(ctx)
        ctx.goal_quality = controller.goal_quality
    if fork is not None:
        graft(ctx, fork)
    if not task.programmatic_answer:
        gateway.budget.hold(SYNTHESIS_RESERVE_TOKENS)
    interrupted = False
    try:
        if not ctx.stopped:
            await _within_wall(budget, runner.run(ctx), WALL_GRACE_S)
    except _WallDeadline:
        ctx.stop(StopReason.BUDGET_WALL_S)
    except asyncio.CancelledError:
        # Ctrl-C or a caller's cancel: keep what was found rather than lose it with the task.
        interrupted = True
        ctx.stop_reason = StopReason.INTERRUPTED
    finally:
        gateway.budget.release_hold()
    reason = ctx.stop_reason or StopReason.FRONTIER_EXHAUSTED
    for node in ctx.graph.by_status(NodeStatus.READY, NodeStatus.PENDING, NodeStatus.IN_PROGRESS):
        ctx.cancel(node.id)
    best = ctx.goals[0] if ctx.goals else ctx.best_id
    answer, answer_node = (None, None)
    if best is not None and best in ctx.answers:
        answer, answer_node = ctx.answers[best], best
    elif best is not None and not (interrupted and not task.programmatic_answer):
        answer, answer_node = await synthesize(ctx, best)
    if bus:
        bus.emit(SearchStopped(reason, best, len(ctx.graph), ctx.counts.pruned, ctx.counts.rejected,
                               ctx.deepest()))
    path_ids = (
        ctx.graph.path_to_root(answer_node if answer_node is not None else best) if best is not None else [ctx.root]
    )
    best_path = [
        PathStep(n.id, n.kind.value, n.content, n.score,
                 Evaluation.from_dict(n.extra[OPERATOR_EXTRA.evaluation]) if OPERATOR_EXTRA.evaluation in n.extra
                 else None)
        for n in (ctx.graph.node(i) for i in path_ids)
    ]
    spent = budget.spent
    input_tokens = spent.input_tokens - spent_before.input_tokens
    output_tokens = spent.output_tokens - spent_before.output_tokens
    # Requests charged to the ledger, like the tokens: answered, failed or cancelled after sending.
    calls = budget.calls - requests_before
    cost_usd = budget.cost_usd - cost_before
    usage = SearchUsage(
        input_tokens=input_tokens, output_tokens=output_tokens, calls=calls, cost_usd=round(cost_usd, 6),
        token_limit=budget.limits.tokens, cost_known=gateway.cost_known,
        roles=role_usage(input_tokens, output_tokens, calls, cost_usd, budget.routes, routes_before, ctx.routed_roles),
        reasoning_tokens=spent.reasoning_tokens - spent_before.reasoning_tokens,
    )
    check_s = budget.limits.wall_s
    answer_check = None
    if check_s is None:
        solved = await task.acheck_answer(problem, answer)
    else:
        try:
            solved = await asyncio.wait_for(task.acheck_answer(problem, answer), check_s)
        except TimeoutError:
            solved = None
            answer_check = "timeout"
    stats = SearchStats.of(
        ctx.counts, nodes=len(ctx.graph), max_depth=ctx.deepest(), wall_s=round(time.monotonic() - started, 3),
        grounded=bool(all_grounders), answer_check=answer_check,
    )
    return SearchResult(
        task=task.name,
        problem=problem_text,
        answer=answer,
        solved=solved,
        score=ctx.graph.node(best).score if best is not None else None,
        termination_reason=reason,
        best_path=best_path,
        usage=usage,
        stats=stats,
        config=config.to_dict(),
        model=gateway.backend.name,
        graph=ctx.graph,
        calls=gateway.records[calls_before:],
        goal_node=ctx.goals[0] if ctx.goals else None,
        best_node=best,
        answer_node=answer_node,
        error=ctx.error,
        control=controller.report(ctx) if controller is not None else None,
        grounding={n: r for n, r in sorted(ctx.grounding.items())},
        research=ctx.strategy_outputs.get(ResearchResult),
        best_path_total=ctx.path_score(path_ids[-1]),
        # The path scores alone, not the context: a result outlives its search.
        paths=ScoredPaths(ctx.graph, ctx.path_scores.get),
        strategy=runner,
    )
