"""Which strategies a task can be searched with, decided from the task's class before any problem or model.

A strategy needs certain prompts of its task (bfs needs a way to write the next step, got a way
to merge and refine thoughts, recursive a decomposition, cove a free-text answer to revise).
Asking first lets `loom solve` refuse in one line and `loom bench` leave the lane out with the
reason, instead of finding out mid-run and recording every problem as failed.
"""

from __future__ import annotations

from typing import Any

from ...tasks.base import Task
from ..context import overrides

#: Strategies that do not write thoughts step by step through the task's propose / sample prompts.
_STEPLESS = frozenset({"recursive", "agent", "research", "cove"})


def unsupported_reason(strategy: str, task: Task[Any]) -> str | None:
    """Why `strategy` cannot search `task` (one line), or None when it can."""
    name = task.name
    if strategy == "cove":
        if task.programmatic_answer:
            return f"cove drafts and revises a free-text answer, and task {name} composes its own answer from its steps"
        return None
    if strategy == "recursive":
        if not decomposes(task):
            return f"task {name} has no decomposition for recursive (its steps have a fixed form)"
        return None
    if strategy in _STEPLESS:
        return None  # agent and research run on their own tasks; the run layer checks those
    if not (overrides(task, "propose") or overrides(task, "sample")):
        hint = "; it searches with recursive" if decomposes(task) else ""
        return f"task {name} has no step prompts (propose or sample), which {strategy} needs{hint}"
    if strategy == "got" and not (overrides(task, "aggregate") and overrides(task, "refine")):
        return f"task {name} has no aggregate and refine prompts, which got needs to merge thoughts"
    return None


def decomposes(task: Task[Any]) -> bool:
    """True when the recursive strategy applies: the task brings its own decomposition or takes free-text steps."""
    return task.free_text_steps or overrides(task, "recursion")


def fitting(task: Task[Any]) -> str:
    """The step-by-step strategies that can search `task`, as a phrase for an error ("bfs, dfs or mcts")."""
    names = [s for s in ("bfs", "dfs", "best_first", "mcts", "got") if unsupported_reason(s, task) is None]
    return ", ".join(names[:-1]) + f" or {names[-1]}" if len(names) > 1 else "".join(names)


def no_decomposition(task: Task[Any]) -> str:
    """The refusal of --strategy recursive for a task of fixed-form steps with no decomposition of its own."""
    return (f"task {task.name} has no decomposition for --strategy recursive (its steps have a fixed form); "
            f"use {fitting(task)}")
