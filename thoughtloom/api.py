"""The Python API: solve a problem with one call."""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from .control.controller import Controller
from .grounding.adjust import GroundingPolicy
from .grounding.types import Grounder
from .llm.budget import BudgetLimits, Pricing
from .llm.cache import MemoryCache
from .llm.gateway import Gateway
from .llm.types import Backend
from .search.config import SearchConfig
from .search.engine import search
from .search.events import EventSink
from .search.result import SearchResult
from .tasks.base import Task
from .tasks.registry import get_task


def make_gateway(
    model: str | Backend = "local",
    budget: BudgetLimits | None = None,
    *,
    concurrency: int = 8,
    pricing: Pricing | None = None,
    progress: Callable[[str], None] | None = None,
) -> Gateway:
    """A gateway over the model named by a spec string (see thoughtloom.llm.registry) or a Backend."""
    if isinstance(model, str):
        from .llm.registry import make_backend

        backend = make_backend(model, pricing=pricing, progress=progress)
    else:
        backend = model
    return Gateway(
        backend, budget, concurrency=concurrency, cache=MemoryCache(),
        pricing=pricing or getattr(backend, "pricing", None),
    )


async def asolve(
    problem: str,
    *,
    task: str | Task[Any] = "general",
    model: str | Backend = "local",
    config: SearchConfig | None = None,
    budget: BudgetLimits | None = None,
    sinks: list[EventSink] | None = None,
    controller: Controller | None = None,
    grounders: Sequence[Grounder] = (),
    grounding_policy: GroundingPolicy | None = None,
    store: Any = None,
    run_id: str | None = None,
    **overrides: Any,
) -> SearchResult:
    """Search for an answer (async). Keyword overrides change single SearchConfig fields.

    controller: a thoughtloom.control.Controller to run the search self-aware (budget
    negotiation, compromises, depth policy, failure anticipation); None searches plainly.
    grounders: extra grounders (e.g. a ResearchGrounder over your documents) besides the task's
    own; grounding_policy: how their results move scores.
    store: a thoughtloom.store BlockStore or the path of a SQLite store file: the run is recorded
    there as it runs (see thoughtloom.store.runs), under `run_id` (default: a new id).
    """
    task_obj = get_task(task) if isinstance(task, str) else task
    # Without a config the task's own defaults apply, as on the command line.
    config = replace(config or SearchConfig(**task_obj.search_defaults), **overrides)
    session = None
    if store is not None:
        from .store.session import api_session

        session = api_session(store, run_id=run_id, model=model, task=task_obj, problem=problem, config=config,
                              budget=budget)
    gateway = make_gateway(model, budget, concurrency=config.concurrency)
    if session is not None:
        session.attach(gateway)
    try:
        result = await search(task_obj, problem, gateway, config,
                              sinks=[*(sinks or []), *session.sinks] if session is not None else sinks,
                              controller=controller, grounders=grounders, grounding_policy=grounding_policy,
                              on_context=session.on_context if session is not None else None)
    except BaseException:
        if session is not None:
            session.abort()
        raise
    finally:
        await gateway.aclose()
    if session is not None:
        session.finish(result)
        if session.recorder.write_error is not None:  # the result is whole; the stored run is not
            warnings.warn(f"run {session.run_id} is not stored whole: {session.recorder.write_error}",
                          RuntimeWarning, stacklevel=2)
    return result


def solve(problem: str, **kwargs: Any) -> SearchResult:
    """Search for an answer; see asolve for the arguments."""
    return asyncio.run(asolve(problem, **kwargs))
