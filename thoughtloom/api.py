"""The Python API: solve a problem with one call, built exactly as `loom solve` builds it."""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import os
import warnings
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping, Sequence
from dataclasses import asdict, fields, replace
from typing import Any, ParamSpec, TypeVar

from .control.controller import Controller, ControlSettings
from .control.feedback import FeedbackHandler
from .control.profiles import DomainChecks, DomainProfile
from .grounding.policy import GroundingPolicy
from .grounding.types import Grounder
from .llm.budget import BudgetLimits, Pricing
from .llm.types import Backend
from .run.execute import execute
from .run.gateway import make_gateway
from .run.grants import Grants
from .run.session import ReplayVerdict, open_replay
from .run.spec import AutoAnswers, RunSpec, research_tools, resolve
from .search.agent.processors import ProcessorRegistry
from .search.config import SearchConfig
from .search.events import Event, EventSink, InsightFound
from .search.research.config import ResearchConfig
from .search.research.records import Insight, ResearchResult
from .search.research.roles import ResearchRoles
from .search.result import SearchResult
from .search.scorer import Scorer
from .tasks.base import Task
from .tasks.registry import TaskOptions
from .tools.toolbox import ToolLimits

__all__ = ["Grants", "ResearchStream", "afork", "agent", "areplay", "asolve", "fork", "make_gateway", "research",
           "research_tools", "solve"]

_P = ParamSpec("_P")
_T = TypeVar("_T")


async def asolve(
    problem: str,
    *,
    task: str | Task[Any] | None = None,
    model: str | Backend = "local",
    profile: str | DomainProfile | None = None,
    config: SearchConfig | None = None,
    budget: BudgetLimits | None = None,
    task_options: TaskOptions | None = None,
    sinks: Sequence[EventSink] = (),
    controller: bool | ControlSettings | Controller = True,
    handler: FeedbackHandler | None = None,
    answers: AutoAnswers | None = None,
    grounders: Sequence[Grounder] = (),
    grounding_policy: GroundingPolicy | None = None,
    knowledge: str | None = None,
    checks: DomainChecks | Mapping[str, Any] | None = None,
    store: Any = None,
    run_id: str | None = None,
    role_models: Mapping[str, str] | None = None,
    pricing: Pricing | None = None,
    model_timeout_s: float | None = None,
    threads: int | str | None = None,
    stream: bool | None = None,
    reasoning_effort: str | None = None,
    thinking_tokens: int | None = None,
    scorer: Scorer | str | None = None,
    tool_calling: str = "auto",
    **overrides: Any,
) -> SearchResult:
    """Search for an answer (async); the same run `loom solve` makes with the same settings.

    task: a task name (default: the profile's, else "math" for a question about numbers, else
    "general") or a Task object. profile: a
    domain profile (see `loom profiles`) by name or your own DomainProfile, applied exactly as
    `--profile` (default: the profile the controller settings came from, else "default"). config: a
    SearchConfig whose given fields are laid over the task's and profile's search settings, as the
    CLI's options are (`SearchConfig(breadth=3)` keeps Game of 24's prior evaluation); keyword
    `overrides` set single SearchConfig fields on top. controller: True (the default) runs the
    self-aware controller with the profile's thresholds and depth limits, as the CLI does; False a plain search; or give
    ControlSettings (e.g. `ControlSettings.from_profile(...)`, whose profile then applies) or a
    Controller. handler answers its questions (default: the automatic policy of `answers`, an
    AutoAnswers: approve nothing, go no deeper, never abort, like the CLI's `--auto-*` defaults).
    grounders / grounding_policy / knowledge: extra grounders, how grounding moves scores, and a
    folder of documents to check claims against. checks: the profile's DomainChecks, whole or some
    fields of them (require_citations, cross_reference_threshold, check_consistency,
    run_regression_tests). store: a BlockStore or a SQLite file path to
    record the run in (`result.run_id`), under `run_id` (default: a new id). A Backend object
    passed as `model` is not closed: the caller owns it. role_models: {"evaluator":
    "openai:gpt-4o-mini", ...} runs a role (generator, evaluator, synthesizer) on a model of its
    own, as `--evaluator-model` does; `result.usage.roles` then says what each model was charged.
    pricing: the model's price (USD per million tokens) when it is not on the known price list, as
    `--price-in/--price-out`; model_timeout_s: seconds one request to a remote model may take, as `--timeout`.
    threads: CPU threads an embedded model computes with, a number or "auto", as `--threads`
    (default: $THOUGHTLOOM_THREADS, else auto: the count follows the machine's load; llm/threads.py).
    stream: False sends each request whole instead of streaming the reply, as `--no-stream` (for servers
    that cannot stream; sinks then see no ThoughtDelta); None (default): $THOUGHTLOOM_STREAM, else on.
    reasoning_effort ("low", "medium", "high") / thinking_tokens: a reasoning model's controls, as
    `--reasoning-effort` (OpenAI-compatible chat) / `--thinking-tokens` (Anthropic); an embedded model refuses them.
    scorer: your own scorer, a plain or async function `f(thought, path)` giving a score in [0, 1] (or
    `Scored(score, reasoning)`), or its `module:function` reference as `--scorer`: it scores the thoughts
    instead of the model (no evaluation call); a stored run records it by name (search/scorer.py).
    `strategy` (one of the overrides): a strategy's name, or your own `thoughtloom.Strategy` object or its
    `module:Class` reference; a stored run records its name and settings (docs/search.md).
    tool_calling: how the agent's tool calls reach the model, as `--tool-calling`: "auto" (function calling
    on OpenAI's and Anthropic's APIs, JSON replies elsewhere), "native" or "text" (docs/agent.md).
    """
    spec = resolve(
        problem, task=task, model=model, profile=profile, task_options=task_options, config=config,
        search=overrides, budget=budget,
        control=controller.settings if isinstance(controller, Controller) else controller, answers=answers,
        grounding=grounding_policy, checks=checks, knowledge=knowledge, grounders=grounders, store=store,
        run_id=run_id, role_models=role_models, pricing=pricing, model_timeout_s=model_timeout_s,
        reasoning_effort=reasoning_effort, thinking_tokens=thinking_tokens, scorer=scorer, tool_calling=tool_calling,
    )
    result = await execute(spec, sinks=sinks, handler=handler,
                           controller=controller if isinstance(controller, Controller) else None, threads=threads,
                           stream=stream)
    if result.store_error is not None:  # the result is whole; the stored run is not
        warnings.warn(f"run {result.run_id or '(none)'} is not stored whole: {result.store_error}", RuntimeWarning,
                      stacklevel=2)
    return result


async def agent(
    task: str,
    *,
    tools: Sequence[str] = ("calc",),
    model: str | Backend = "local",
    profile: str | DomainProfile | None = None,
    budget: BudgetLimits | None = None,
    mcp_config: str | None = None,
    knowledge: str | None = None,
    read_roots: Sequence[str] = (),
    tool_limits: ToolLimits | None = None,
    processors: ProcessorRegistry | None = None,
    sinks: Sequence[EventSink] = (),
    controller: bool | Controller = True,
    handler: FeedbackHandler | None = None,
    store: Any = None,
    run_id: str | None = None,
    threads: int | str | None = None,
    stream: bool | None = None,
    tool_calling: str = "auto",
    **overrides: Any,
) -> SearchResult:
    """Work an open task as a graph of typed steps with tools (async); the same run `loom agent` makes.

    tools: names as `--tools` takes them (calc, the default, python, docs, files, mcp:NAME, mcp); mcp_config,
    knowledge and read_roots are what mcp, docs and files need. processors: a registry with your own
    processors (start from thoughtloom.search.agent.kinds.default_processors()). Keyword
    `overrides` set SearchConfig fields (beam = steps in progress at once, agent_order, on_failure,
    max_nodes, seed, ...). tool_calling: "auto", "native" or "text", as `--tool-calling` (docs/agent.md).
    The rest (threads and stream included) is as in asolve.
    """
    spec = resolve(
        task, task="agent", model=model, profile=profile, search={"strategy": "agent", **overrides}, budget=budget,
        control=controller.settings if isinstance(controller, Controller) else controller, knowledge=knowledge,
        store=store, run_id=run_id, tools=tools, tool_limits=tool_limits, mcp_config=mcp_config,
        read_roots=read_roots, tool_calling=tool_calling,
    )
    return await execute(spec, sinks=sinks, handler=handler, processors=processors,
                         controller=controller if isinstance(controller, Controller) else None, threads=threads,
                         stream=stream)


async def areplay(store: Any, run: str, *, task: Task[Any] | None = None, config: SearchConfig | None = None,
                  controller: Controller | None = None,
                  grants: Grants = Grants()) -> tuple[SearchResult, ReplayVerdict]:
    """Replay a finished stored run with zero model calls; the verdict says whether the graph came out identical.

    The search is rebuilt from the run's stored spec; pass `task` (a custom Task object the run
    used), `config` (its given fields laid over the stored settings, as in solve) or `controller`
    to replay it with those instead (and see where it diverges). A stored run is untrusted input:
    the files its task and grounding read (knowledge, tests, data, repo, test command) are used only
    when `grants` names them again, e.g. `Grants(knowledge="docs")` (GrantError says what it asks for); a
    run made with a scorer is replayed with it named again, `Grants(scorer=fn)` or `Grants(scorer="mod:fn")`.
    """
    spec, session = open_replay(store, run, grants)
    if task is not None or config is not None:
        merged = spec.config if config is None else SearchConfig(**{**spec.config.to_dict(), **config.given_fields()})
        spec = replace(spec, task=task if task is not None else spec.task, config=merged)
    result = await execute(spec, session=session, controller=controller)
    return result, session.verdict()


async def afork(store: Any, run: str, at: str | int, *, model: str | None = None, grants: Grants = Grants(),
                budget: BudgetLimits | None = None, profile: str | None = None,
                role_models: Mapping[str, str] | None = None, control: Mapping[str, Any] | None = None,
                pricing: Pricing | None = None, model_timeout_s: float | None = None,
                reasoning_effort: str | None = None, thinking_tokens: int | None = None,
                sinks: Sequence[EventSink] = (), threads: int | str | None = None, stream: bool | None = None,
                **overrides: Any) -> SearchResult:
    """Continue a stored run from node `at` with other settings, recorded as a new run in `store` linked to it (async).

    The new run (`result.run_id`) begins with the run's path from the root down to `at` (a node id, or a node
    CID), and its strategy goes on from there; `loom show` and `loom runs` name its parent, and it replays as
    any run. Everything not given is the run's: model, budget (a new one of the same size; `budget` replaces
    the limits it sets), profile, role_models, controller thresholds (`control`: ControlSettings fields),
    pricing and reasoning controls; keyword `overrides` set SearchConfig fields (strategy, beam, breadth,
    max_depth, temperature, seed, ...). A stored run is untrusted input: its model, when it is not a named
    embedded one and `model` does not replace it, and its files are used only when `grants` names them again
    (as for areplay). threads and stream are as in asolve. Bad input raises RunError, SpecError or GrantError with
    one line (run/fork.py).
    """
    from .run.fork import Changes, open_fork
    from .run.session import open_block_store

    changes = Changes(
        model=model, role_models=tuple((role_models or {}).items()), profile=profile, search=overrides,
        budget={k: v for k, v in asdict(budget).items() if v is not None} if budget is not None else {},
        control=dict(control or {}), pricing=pricing, model_timeout_s=model_timeout_s,
        reasoning_effort=reasoning_effort, thinking_tokens=thinking_tokens,
    )
    blocks, _, owns = open_block_store(store)
    try:
        spec, session = open_fork(blocks, run, at, grants, changes)
    except BaseException:
        if owns:
            blocks.close()
        raise
    session.owns_store = owns
    result = await execute(spec, session=session, sinks=sinks, threads=threads, stream=stream)
    if result.store_error is not None:  # the result is whole; the stored run is not
        warnings.warn(f"run {result.run_id or '(none)'} is not stored whole: {result.store_error}", RuntimeWarning,
                      stacklevel=2)
    return result


_RESEARCH_FIELDS = {f.name for f in fields(ResearchConfig)}
_END = object()


class ResearchStream:
    """A research run that streams its insights as they happen.

    `async for insight in stream` starts the run (if it has not started) and yields each Insight;
    leaving the loop early (break) stops the run, which keeps what it found (stopped_by
    "interrupted"). `await stream.result()` runs it to the end (or waits for the stop) and returns
    the ResearchResult; `stream.search` is then the whole SearchResult (usage, run id, graph).
    """

    def __init__(self, spec: RunSpec, *, roles: ResearchRoles, sinks: Sequence[EventSink] = (),
                 handler: FeedbackHandler | None = None, controller: Controller | None = None,
                 threads: int | str | None = None, stream: bool | None = None) -> None:
        self.spec = spec
        self._threads = threads
        self._stream = stream
        self._roles = roles
        self._sinks = list(sinks)
        self._handler = handler
        self._controller = controller
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._task: asyncio.Task[SearchResult] | None = None
        #: The run's whole result, once it has ended.
        self.search: SearchResult | None = None
        self._drained = False

    def _sink(self, event: Event) -> None:
        if isinstance(event, InsightFound):
            self._queue.put_nowait(Insight(event.kind, event.content, event.confidence, event.node_id,  # type: ignore[arg-type]
                                           event.depth, source=event.source))

    def _start(self) -> asyncio.Task[SearchResult]:
        if self._task is None:
            self._task = asyncio.ensure_future(self._run())
        return self._task

    async def _run(self) -> SearchResult:
        try:
            self.search = await execute(self.spec, sinks=[*self._sinks, self._sink], handler=self._handler,
                                        controller=self._controller, roles=self._roles, threads=self._threads,
                                        stream=self._stream)
            return self.search
        finally:
            self._queue.put_nowait(_END)

    def __aiter__(self) -> AsyncIterator[Insight]:
        return self._insights()

    async def _insights(self) -> AsyncIterator[Insight]:
        task = self._start()
        ended = self._drained  # a second loop over a finished stream yields nothing (and does not wait)
        try:
            while not ended:
                item = await self._queue.get()
                if item is _END:
                    ended = self._drained = True
                    break
                yield item
        finally:
            if not ended and not task.done():
                task.cancel()  # the caller stopped reading: stop the run (it keeps what it found)
        task.result()  # a run that could not start raises here (a bad model, a missing key)

    async def result(self) -> ResearchResult:
        """The ResearchResult, once the run has ended (running it to the end if nobody stopped it)."""
        result = await self._start()
        assert result.research is not None
        return result.research

    async def stop(self) -> ResearchResult:
        """Stop the run now (no further model call) and return what it found."""
        task = self._start()
        if not task.done():
            task.cancel()
        return await self.result()


def research(
    question: str,
    *,
    knowledge: str | os.PathLike[str] | None = None,
    knowledge_index: str | os.PathLike[str] | None = None,
    retrieval: str = "bm25",
    model: str | Backend = "local",
    config: ResearchConfig | None = None,
    budget: BudgetLimits | None = None,
    brancher: Any = None,
    evaluator: Any = None,
    synthesizer: Any = None,
    role_models: Mapping[str, str] | None = None,
    profile: str | DomainProfile | None = None,
    sinks: Sequence[EventSink] = (),
    controller: bool | Controller = True,
    handler: FeedbackHandler | None = None,
    store: Any = None,
    run_id: str | None = None,
    threads: int | str | None = None,
    stream: bool | None = None,
    **settings: Any,
) -> ResearchStream:
    """Research a question as a tree of hypotheses tested against `knowledge` (a folder of documents); the run `loom
    research` makes.

    Iterate the returned stream for insights as they happen; `await stream.result()` for the
    ResearchResult. config: a ResearchConfig; keyword `settings` set single fields of it
    (max_branches, depth_limit, branching_strategy, merge_strategy, confidence_threshold,
    insight_target, allow, ...) or of the SearchConfig (seed, temperature, concurrency).
    brancher / evaluator / synthesizer: your own functions for those roles (see
    thoughtloom.search.research.roles); retrieval: "bm25", or "hybrid" to rank the documents' passages by
    sentence embeddings too (the embed extra); role_models: {"brancher": "openai:gpt-4o-mini", ...} runs a
    role's built-in prompts on another model. Settings are checked now: a bad one, or one of the
    seed's anti-patterns not allowed explicitly, raises SpecError with one line. threads, stream: as in asolve.
    """
    research_settings = {k: v for k, v in settings.items() if k in _RESEARCH_FIELDS}
    search_settings = {k: v for k, v in settings.items() if k not in _RESEARCH_FIELDS}
    base: ResearchConfig | Mapping[str, Any] = config or {}
    if research_settings:
        base = {**(config.to_dict() if config else {}), **research_settings}
    spec = resolve(
        question, task="research", model=model, profile=profile, search={"strategy": "research", **search_settings},
        budget=budget, control=controller.settings if isinstance(controller, Controller) else controller,
        knowledge=knowledge, knowledge_index=knowledge_index, retrieval=retrieval, tools=research_tools(knowledge),
        store=store,
        run_id=run_id, research=base, role_models=role_models,
    )
    roles = ResearchRoles(brancher=brancher, evaluator=evaluator, synthesizer=synthesizer)
    return ResearchStream(spec, roles=roles, sinks=sinks, handler=handler,
                          controller=controller if isinstance(controller, Controller) else None, threads=threads,
                          stream=stream)


def _blocking(coroutine_function: Callable[_P, Coroutine[Any, Any, _T]]) -> Callable[_P, _T]:
    """The blocking form of an async function; inside a running event loop (Jupyter) it runs in a thread."""

    @functools.wraps(coroutine_function)
    def run(*args: _P.args, **kwargs: _P.kwargs) -> _T:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(coroutine_function(*args, **kwargs))
        # asyncio.run cannot nest in a running loop; a worker thread has none. Awaiting the
        # async form directly is better there: `await asolve(...)`.
        with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="thoughtloom-solve") as pool:
            return pool.submit(asyncio.run, coroutine_function(*args, **kwargs)).result()

    return run


solve = _blocking(asolve)
solve.__doc__ = (
    """Search for an answer (blocking); the arguments are asolve's. Works inside a running event loop too."""
)
fork = _blocking(afork)
fork.__doc__ = (
    """Continue a stored run from a node with other settings, as a new run (blocking); the arguments are afork's."""
)
