"""thoughtloom: make a language model reason as a tree or graph of thoughts, under a hard budget.

Imports are lazy so that `import thoughtloom` stays fast; heavy libraries load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._version import __version__

_EXPORTS = {
    "solve": "thoughtloom.api",
    "asolve": "thoughtloom.api",
    "make_gateway": "thoughtloom.api",
    "areplay": "thoughtloom.api",
    "fork": "thoughtloom.api",
    "afork": "thoughtloom.api",
    "Grants": "thoughtloom.run.grants",
    "agent": "thoughtloom.api",
    "research": "thoughtloom.api",
    "ResearchStream": "thoughtloom.api",
    "ResearchConfig": "thoughtloom.search.research.config",
    "ResearchResult": "thoughtloom.search.research.records",
    "ProcessorRegistry": "thoughtloom.search.agent.processors",
    "default_processors": "thoughtloom.search.agent.kinds",
    "Toolbox": "thoughtloom.tools.toolbox",
    "ToolSpec": "thoughtloom.tools.base",
    "RunSpec": "thoughtloom.run.spec",
    "resolve": "thoughtloom.run.spec",
    "execute": "thoughtloom.run.execute",
    "StopReason": "thoughtloom.search.stop",
    "SearchConfig": "thoughtloom.search.config",
    "SearchResult": "thoughtloom.search.result",
    "search": "thoughtloom.search.engine",
    "BudgetLimits": "thoughtloom.llm.budget",
    "Gateway": "thoughtloom.llm.gateway",
    "ThoughtGraph": "thoughtloom.graph.dag",
    "get_task": "thoughtloom.tasks.registry",
    # A task declared in a TOML file (docs/tasks.md).
    "load_task": "thoughtloom.run.taskfile",
    # The same task declared in Python: instructions, examples, prompts, checker (docs/tasks.md).
    "task": "thoughtloom.run.taskfile",
    "TaskExample": "thoughtloom.tasks.general",
    # What a user's own task is written with (see examples/custom_task.py).
    "Task": "thoughtloom.tasks.base",
    "Query": "thoughtloom.tasks.query",
    "Verdict": "thoughtloom.tasks.query",
    "ProblemError": "thoughtloom.tasks.base",
    # Your own scorer's result and protocol (solve(..., scorer=fn), --scorer).
    "Scored": "thoughtloom.search.scorer",
    "Scorer": "thoughtloom.search.scorer",
    # Your own strategy's protocol and what it declares it needs (solve(..., strategy=obj), --strategy).
    "Strategy": "thoughtloom.search.strategies.base",
    "Needs": "thoughtloom.search.strategies.base",
    # A strategy that keeps a trace reads it back from the graph (read_trace): a Trace, to_dict() and lines().
    "TracedStrategy": "thoughtloom.search.strategies.base",
    "Trace": "thoughtloom.search.trace",
    # What a strategy's run(ctx) may use of its search.
    "SearchAPI": "thoughtloom.search.strategy_api",
    "compare_strategies": "thoughtloom.eval.runner",
    # An application that starts MCP servers or sandboxes calls it once (loom's own main does).
    "make_process_private": "thoughtloom.grounding.neighbours",
}

__all__ = ["__version__", *_EXPORTS]

if TYPE_CHECKING:
    # `X as X`: re-exported names (the lazy __getattr__ below loads them at run time).
    from .api import (
        ResearchStream as ResearchStream,
        afork as afork,
        agent as agent,
        areplay as areplay,
        asolve as asolve,
        fork as fork,
        make_gateway as make_gateway,
        research as research,
        solve as solve,
    )
    from .eval.runner import compare_strategies as compare_strategies
    from .graph.dag import ThoughtGraph as ThoughtGraph
    from .grounding.neighbours import make_process_private as make_process_private
    from .llm.budget import BudgetLimits as BudgetLimits
    from .llm.gateway import Gateway as Gateway
    from .run.execute import execute as execute
    from .run.grants import Grants as Grants
    from .run.spec import RunSpec as RunSpec, resolve as resolve
    from .run.taskfile import load_task as load_task, task as task
    from .search.agent.kinds import default_processors as default_processors
    from .search.agent.processors import ProcessorRegistry as ProcessorRegistry
    from .search.config import SearchConfig as SearchConfig
    from .search.engine import search as search
    from .search.research.config import ResearchConfig as ResearchConfig
    from .search.research.records import ResearchResult as ResearchResult
    from .search.result import SearchResult as SearchResult
    from .search.scorer import Scored as Scored, Scorer as Scorer
    from .search.stop import StopReason as StopReason
    from .search.strategies.base import Needs as Needs, Strategy as Strategy, TracedStrategy as TracedStrategy
    from .search.strategy_api import SearchAPI as SearchAPI
    from .search.trace import Trace as Trace
    from .tasks.base import ProblemError as ProblemError, Task as Task
    from .tasks.general import TaskExample as TaskExample
    from .tasks.query import Query as Query, Verdict as Verdict
    from .tasks.registry import get_task as get_task
    from .tools.base import ToolSpec as ToolSpec
    from .tools.toolbox import Toolbox as Toolbox


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'thoughtloom' has no attribute {name!r}")
