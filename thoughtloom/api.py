"""The Python API: solve a problem with one call, built exactly as `loom solve` builds it."""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import warnings
from dataclasses import replace
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, ParamSpec, TypeVar

from .control.controller import Controller
from .control.feedback import FeedbackHandler
from .grounding.adjust import GroundingPolicy
from .grounding.types import Grounder
from .llm.budget import BudgetLimits
from .llm.types import Backend
from .run.execute import execute
from .run.gateway import make_gateway
from .run.session import ReplayVerdict, open_replay
from .run.spec import resolve
from .search.agent.processors import ProcessorRegistry
from .search.config import SearchConfig
from .search.events import EventSink
from .search.result import SearchResult
from .tasks.base import Task
from .tasks.registry import TaskOptions
from .tools.toolbox import ToolLimits

__all__ = ["agent", "areplay", "asolve", "make_gateway", "solve"]

_P = ParamSpec("_P")
_T = TypeVar("_T")


async def asolve(
    problem: str,
    *,
    task: str | Task[Any] | None = None,
    model: str | Backend = "local",
    profile: str = "default",
    config: SearchConfig | None = None,
    budget: BudgetLimits | None = None,
    task_options: TaskOptions | None = None,
    sinks: Sequence[EventSink] = (),
    controller: bool | Controller = True,
    handler: FeedbackHandler | None = None,
    grounders: Sequence[Grounder] = (),
    grounding_policy: GroundingPolicy | None = None,
    knowledge: str | None = None,
    store: Any = None,
    run_id: str | None = None,
    **overrides: Any,
) -> SearchResult:
    """Search for an answer (async); the same run `loom solve` makes with the same settings.

    task: a task name (default: the profile's, else "general") or a Task object. profile: a
    domain profile (see `loom profiles`), applied exactly as `--profile`. config: a whole
    SearchConfig instead of the task's and profile's settings; keyword `overrides` set single
    SearchConfig fields on top. controller: True runs the self-aware controller with the
    profile's thresholds (as the CLI does), False a plain search, or give a Controller; handler
    answers its questions (default: the automatic policy, which keeps the budget hard).
    grounders / grounding_policy / knowledge: extra grounders, how grounding moves scores, and a
    folder of documents to check claims against. store: a BlockStore or a SQLite file path to
    record the run in (`result.run_id`), under `run_id` (default: a new id). A Backend object
    passed as `model` is not closed: the caller owns it.
    """
    spec = resolve(
        problem, task=task, model=model, profile=profile, task_options=task_options, config=config,
        search=overrides, budget=budget,
        control=controller.settings if isinstance(controller, Controller) else controller,
        grounding=grounding_policy, knowledge=knowledge, grounders=grounders, store=store, run_id=run_id,
    )
    result = await execute(spec, sinks=sinks, handler=handler,
                           controller=controller if isinstance(controller, Controller) else None)
    if result.store_error is not None:  # the result is whole; the stored run is not
        warnings.warn(f"run {result.run_id or '(none)'} is not stored whole: {result.store_error}", RuntimeWarning,
                      stacklevel=2)
    return result


async def agent(
    task: str,
    *,
    tools: Sequence[str] = ("calc",),
    model: str | Backend = "local",
    profile: str = "default",
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
    **overrides: Any,
) -> SearchResult:
    """Work an open task as a graph of typed steps with tools (async); the same run `loom agent` makes.

    tools: names as `--tools` takes them (calc, the default, python, docs, files, mcp:NAME, mcp); mcp_config,
    knowledge and read_roots are what mcp, docs and files need. processors: a registry with your own
    processors (start from thoughtloom.search.agent.kinds.default_processors()). Keyword
    `overrides` set SearchConfig fields (beam = steps in progress at once, agent_order, on_failure,
    max_nodes, seed, ...). The rest is as in asolve.
    """
    spec = resolve(
        task, task="agent", model=model, profile=profile, search={"strategy": "agent", **overrides}, budget=budget,
        control=controller.settings if isinstance(controller, Controller) else controller, knowledge=knowledge,
        store=store, run_id=run_id, tools=tools, tool_limits=tool_limits, mcp_config=mcp_config,
        read_roots=read_roots,
    )
    return await execute(spec, sinks=sinks, handler=handler, processors=processors,
                         controller=controller if isinstance(controller, Controller) else None)


async def areplay(store: Any, run: str, *, task: Task[Any] | None = None, config: SearchConfig | None = None,
                  controller: Controller | None = None) -> tuple[SearchResult, ReplayVerdict]:
    """Replay a finished stored run with zero model calls; the verdict says whether the graph came out identical.

    The search is rebuilt from the run's stored spec; pass `task` (a custom Task object the run
    used), `config` or `controller` to replay it with those instead (and see where it diverges).
    """
    spec, session = open_replay(store, run)
    if task is not None or config is not None:
        spec = replace(spec, task=task if task is not None else spec.task, config=config or spec.config)
    result = await execute(spec, session=session, controller=controller)
    return result, session.verdict()


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
solve.__doc__ = """Search for an answer (blocking); the arguments are asolve's. Works inside a running event loop too."""
