"""Running a RunSpec: the one place that builds the backend chain, the gateway, the controller and the store session.

    live backend  (the spec's model, built here, or a Backend object the caller owns; a RoutedBackend
                   over it and the roles' own models when the spec has role models)
      -> LimitedBackend   (a model-concurrency limit shared with other runs, `slots`)
      -> ReplayBackend    (resume: recorded answers first; replay: recorded answers only)
      -> RecordingBackend (a stored run records every exchange)
      -> Gateway          (hard budget, concurrency, retries, cache, call records)
      -> search()         (with the controller, the grounders and the session's recorder as a sink)

The agent strategy's tools are built here too (`build_tools`), and the session puts the run's
recorded tool calls in front of them (resume) or in their place (replay: no tool runs).

`loom solve`, `solve()` / `asolve()`, the search lanes of `loom bench`, `loom resume` and
`loom replay` all run through `execute`, so they search the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from ..control.controller import Controller
from ..control.feedback import AutomaticHandler, FeedbackHandler
from ..grounding.knowledge import KnowledgeBase
from ..grounding.types import Grounder
from ..llm.budget import BudgetLimits
from ..llm.gateway import Gateway, RetryPolicy
from ..llm.limits import LimitedBackend, ModelLimit
from ..llm.tracing import search_attributes, span, traced
from ..llm.types import Backend
from ..llm.wrapper import SharedBackend
from ..search.agent.processors import ProcessorRegistry
from ..search.context import SearchController
from ..search.engine import search
from ..search.events import EventSink
from ..search.research.explorer import ResearchSetup
from ..search.research.roles import ResearchRoles
from ..search.result import SearchResult
from ..search.strategies.registry import StrategyError
from ..tools.toolbox import Toolbox
from .gateway import build_gateway
from .session import RunSession, record_session
from .spec import RunSpec, SpecError


def build_controller(spec: RunSpec, handler: FeedbackHandler | None = None) -> Controller | None:
    """The spec's controller (None for a plain search), answering through `handler` or the spec's automatic answers."""
    if spec.control is None:
        return None
    if handler is None:
        a = spec.answers
        handler = AutomaticHandler(
            approve_tokens=a.approve_tokens,
            accept_compromise_above=(a.accept_compromise_above if a.accept_compromise_above is not None
                                     else spec.control.compromise_threshold),
            extra_depth=a.extra_depth, approve_calls=a.approve_calls, approve_usd=a.approve_usd,
            approve_seconds=a.approve_seconds, abort_above=a.abort_above,
        )
    return Controller(spec.control, handler, profile=spec.profile)


def open_knowledge(spec: RunSpec) -> KnowledgeBase | None:
    """The spec's knowledge base for grounding: None without `knowledge`, or where the strategy reads the
    folder through its docs tool (the agent, the research flow; a replay of them must not need the folder)."""
    if spec.knowledge is None or spec.needs.tools:
        return None
    from ..grounding.knowledge import KnowledgeBase, KnowledgeBaseError

    try:
        return KnowledgeBase.open(spec.knowledge, spec.knowledge_index, spec.retrieval)
    except KnowledgeBaseError as exc:
        raise SpecError(str(exc)) from None


def spec_grounders(spec: RunSpec, free_text: bool = True, kb: KnowledgeBase | None = None) -> list[Grounder]:
    """Grounders the spec adds to the task's own: the research grounder over `knowledge` (its citations
    checked, required when the profile says so), the consistency check, then the given ones.

    free_text: whether the task's steps are free text (a consistency check reads claims, not moves).
    kb: the spec's knowledge base when it is open already (else it is opened here).
    """
    out: list[Grounder] = []
    threshold = spec.checks.cross_reference_threshold
    kb = kb if kb is not None else open_knowledge(spec)
    if kb is not None:
        from ..grounding.citations import CitationChecker, CitationGrounder
        from ..grounding.knowledge_check import ResearchGrounder

        out.append(CitationGrounder(ResearchGrounder(kb, min_coverage=threshold),
                                    CitationChecker(kb, min_coverage=threshold),
                                    required=spec.checks.require_citations))
    if spec.checks.check_consistency and free_text and not spec.needs.tools:
        from ..grounding.consistency import ConsistencyGrounder

        out.append(ConsistencyGrounder(min_coverage=threshold))
    return [*out, *spec.grounders]


def posed_problem(spec: RunSpec, free_text: bool, kb: KnowledgeBase | None) -> str:
    """The problem as the search poses it: when citations are required, with the passages to cite
    (grounding/citations.py:with_sources); else as given."""
    if kb is None or not spec.checks.require_citations or not free_text:
        return spec.problem
    from ..grounding.citations import with_sources

    return with_sources(spec.problem, kb)


def lane_gateway(backend: Backend, budget: BudgetLimits | None, slots: ModelLimit | None = None) -> Gateway:
    """A gateway for a method that prompts the model without a search (a benchmark's sampling lane).

    Built like a search's: over a backend the caller owns, a span per model call (otel extra), within
    the shared concurrency limit.
    """
    return build_gateway(_bottom(traced(SharedBackend(backend)), slots), budget)


def _bottom(backend: Backend, slots: ModelLimit | None) -> Backend:
    return LimitedBackend(backend, slots) if slots is not None else backend


def live_backend(spec: RunSpec, progress: Callable[[str], None] | None = None,
                 threads: int | str | None = None, stream: bool | None = None) -> Backend:
    """The model a spec names, built now (a missing key or a bad spec fails here); a Backend object as given.

    With roles on models of their own, a RoutedBackend sends each role's calls to its model. threads:
    CPU threads of the embedded models built here; stream: whether they stream watched replies (see make_backend).
    """
    from ..llm.registry import make_backend

    # A Backend object is the caller's: they close it.
    main = SharedBackend(spec.model) if not isinstance(spec.model, str) else make_backend(
        spec.model, pricing=spec.pricing, timeout_s=spec.model_timeout_s, threads=threads, progress=progress,
        reasoning_effort=spec.reasoning_effort, thinking_tokens=spec.thinking_tokens, stream=stream,
        tool_calling=spec.tool_calling)
    if not spec.role_models:
        return main
    from ..llm.routing import RoutedBackend

    routes: dict[str, Backend] = {}
    # One backend per distinct spec: two roles (or a role and the run) on one model share it, so an
    # embedded model is loaded once; the RoutedBackend closes each once (the shares do not close).
    built: dict[str, Backend] = {spec.model: main} if isinstance(spec.model, str) else {}
    try:
        for role, model in spec.role_models:
            if model in built:
                routes[role] = SharedBackend(built[model])
            else:
                routes[role] = built[model] = make_backend(model, timeout_s=spec.model_timeout_s, threads=threads,
                                                           progress=progress, reasoning_effort=spec.reasoning_effort,
                                                           thinking_tokens=spec.thinking_tokens, stream=stream,
                                                           tool_calling=spec.tool_calling)
    except BaseException:
        for backend in (main, *routes.values()):
            _close_soon(backend)
        raise
    return RoutedBackend(main, routes)


def _close_soon(backend: Backend) -> None:
    """Close a backend built for a run that will not start (from sync code inside the event loop)."""
    import asyncio

    try:
        asyncio.get_running_loop().create_task(backend.aclose())
    except RuntimeError:
        asyncio.run(backend.aclose())


def research_setup(spec: RunSpec, roles: ResearchRoles | None = None) -> ResearchSetup | None:
    """What the research strategy runs with: the spec's settings and the caller's roles."""
    if spec.config.strategy != "research":
        return None
    from ..search.research.config import ResearchConfig

    return ResearchSetup(spec.research or ResearchConfig(), roles or ResearchRoles())


async def build_tools(spec: RunSpec) -> Toolbox | None:
    """The spec's granted tools, started (MCP servers connected); None when it grants none."""
    if not spec.tools:
        return None
    from ..tools.base import ToolConfigError
    from ..tools.registry import build_toolbox

    try:
        return await build_toolbox(spec.tools, limits=spec.tool_limits, knowledge=spec.knowledge,
                                   knowledge_index=spec.knowledge_index, retrieval=spec.retrieval,
                                   read_roots=spec.read_roots,
                                   mcp_config=spec.mcp_config)
    except ToolConfigError as exc:
        raise SpecError(str(exc)) from None


async def execute(
    spec: RunSpec,
    *,
    sinks: Sequence[EventSink] = (),
    handler: FeedbackHandler | None = None,
    controller: SearchController | None = None,
    session: RunSession | None = None,
    slots: ModelLimit | None = None,
    progress: Callable[[str], None] | None = None,
    on_stored: Callable[[str], None] | None = None,
    on_gateway: Callable[[Gateway], None] | None = None,
    processors: ProcessorRegistry | None = None,
    roles: ResearchRoles | None = None,
    threads: int | str | None = None,
    stream: bool | None = None,
) -> SearchResult:
    """Run the spec's search; the result carries the stored run's id and store when it was recorded.

    sinks: event sinks (a progress display, ...). handler: who answers the controller (default: the
    spec's automatic answers). controller: one to use instead of the spec's. session: a resume or
    replay session (thoughtloom.run.session); a new run is recorded when `spec.store` is set.
    slots: a model-concurrency limit shared with other runs. progress: one-line notes while the
    model loads. on_stored(run_id): called once the run's first state is stored. on_gateway:
    called with the run's gateway once it is built (a benchmark reads what the run spent from its budget).
    processors: the agent strategy's processors by kind (default: the built-in ones). roles: the
    research strategy's brancher, evaluator and synthesizer given as functions (default: the built-in ones).
    threads: CPU threads of an embedded model this run loads, a number or "auto" (None:
    $THOUGHTLOOM_THREADS, else auto); a runtime setting, not part of the stored run. stream: whether the model
    streams replies a sink watches (None: $THOUGHTLOOM_STREAM, else on); a runtime setting too.
    """
    if spec.scorer is not None and spec.scorer.call is None:
        # A stored run's scorer, by name only: imported when the caller names it again (run/session.py:spec_of).
        raise SpecError(f"scorer {spec.scorer.name} is named but not imported; give it again "
                        f"(--scorer {spec.scorer.name}, or the function)")
    try:
        # A strategy that is not built in (a stored run's is made again here, before anything is stored).
        strategy = spec.strategy.load() if spec.strategy is not None else None
    except StrategyError as exc:
        raise SpecError(str(exc)) from None
    task = spec.task_object()
    kb = open_knowledge(spec)
    grounders = spec_grounders(spec, task.free_text_steps, kb)
    problem = posed_problem(spec, task.free_text_steps, kb)
    ctrl = controller if controller is not None else build_controller(spec, handler)
    if session is None and spec.store is not None:
        session = record_session(spec, task, on_start=on_stored)
    try:
        if session is not None:
            session.check(task, spec.config)
        backend: Backend | None = None
        if session is None or session.needs_live_model:
            # Spans (with the otel extra) time the model itself: inside the shared concurrency limit.
            backend = _bottom(traced(live_backend(spec, progress, threads, stream)), slots)
        if session is not None:
            backend = session.wrap(backend)
        assert backend is not None
        retry = None if session is None or session.retry_delays else replace(RetryPolicy(), base_delay_s=0.0,
                                                                               max_delay_s=0.0)
        gateway = build_gateway(backend, spec.budget, concurrency=spec.config.concurrency, retry=retry,
                                pricing=spec.pricing)
    except BaseException:
        if session is not None:
            session.close()
        raise
    if on_gateway is not None:
        on_gateway(gateway)
    tools: Toolbox | None = None
    try:
        if spec.needs.tools:
            live_tools = await build_tools(spec) if session is None or session.needs_live_model else None
            tools = session.wrap_tools(live_tools) if session is not None else live_tools
        with span(f"invoke_agent thoughtloom {spec.config.strategy}",
                  search_attributes(task.name, spec.config.strategy)) as search_span:
            result = await search(
                task, problem, gateway, spec.config,
                sinks=[*sinks, *(session.sinks if session is not None else [])], controller=ctrl, grounders=grounders,
                grounding_policy=spec.grounding, on_context=session.on_context if session is not None else None,
                tools=tools, processors=processors, research=research_setup(spec, roles),
                routed_roles=[role for role, _ in spec.role_models], scorer=spec.scorer, fork=spec.fork,
                strategy=strategy,
            )
            if search_span is not None:
                search_span.set_attributes({
                    "thoughtloom.stop_reason": str(result.termination_reason), "thoughtloom.nodes": len(result.graph),
                    "gen_ai.usage.input_tokens": result.usage.input_tokens,
                    "gen_ai.usage.output_tokens": result.usage.output_tokens,
                })
    except BaseException:
        if session is not None:
            session.abort()
        raise
    finally:
        try:
            if tools is not None:
                await tools.aclose()
        finally:
            await gateway.aclose()
    result.problem = spec.problem  # the user's problem; the graph's root shows it as posed, sources included
    if session is not None:
        session.finish(result)
    return result
