"""Search strategies: each decides which nodes to work on next over the same graph and operators."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from ..agent.scheduler import run_agent
from ..context import SearchContext
from ..research.explorer import run_research
from .best_first import run_best_first
from .bfs import run_bfs, run_breadth_first, run_tree_of_thoughts
from .cove import run_cove
from .dfs import run_dfs
from .got import run_got
from .mcts import run_mcts
from .recursive import run_recursive

StrategyFn = Callable[[SearchContext], Awaitable[None]]

STRATEGY_FUNCTIONS: dict[str, StrategyFn] = {
    "bfs": run_bfs,
    "tree_of_thoughts": run_tree_of_thoughts,
    "breadth_first": run_breadth_first,
    "dfs": run_dfs,
    "best_first": run_best_first,
    "mcts": run_mcts,
    "got": run_got,
    "recursive": run_recursive,
    "agent": run_agent,
    "research": run_research,
    "cove": run_cove,
}

__all__ = ["STRATEGY_FUNCTIONS", "StrategyFn"]
