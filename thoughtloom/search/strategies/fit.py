"""Which strategies a task can be searched with, decided from the task's class before any problem or model.

A strategy needs certain prompts of its task (bfs needs a way to write the next step, got a way
to merge and refine thoughts, recursive a decomposition, cove a free-text answer to revise); each
declares its check (Strategy.unfit), built from the checks here (registry.py asks it by name).
Asking first lets `loom solve`
refuse in one line and `loom bench` leave the lane out with the reason, instead of finding out
mid-run and recording every problem as failed.
"""

from __future__ import annotations

from typing import Any

from ...tasks.base import Task
from ..context import overrides


def needs_steps(strategy: str, task: Task[Any]) -> str | None:
    """The step-by-step strategies' check: the task writes next steps (propose or sample prompts)."""
    if not (overrides(task, "propose") or overrides(task, "sample")):
        hint = "; it searches with recursive" if decomposes(task) else ""
        return f"task {task.name} has no step prompts (propose or sample), which {strategy} needs{hint}"
    return None


def needs_merges(strategy: str, task: Task[Any]) -> str | None:
    """got's check: step prompts, and aggregate and refine prompts to merge thoughts."""
    if (missing := needs_steps(strategy, task)) is not None:
        return missing
    if not (overrides(task, "aggregate") and overrides(task, "refine")):
        return f"task {task.name} has no aggregate and refine prompts, which {strategy} needs to merge thoughts"
    return None


def needs_decomposition(strategy: str, task: Task[Any]) -> str | None:
    """recursive's check: the task brings its own decomposition or takes free-text steps."""
    if decomposes(task):
        return None
    return f"task {task.name} has no decomposition for {strategy} (its steps have a fixed form)"


def needs_free_text_answer(strategy: str, task: Task[Any]) -> str | None:
    """cove's check: the answer is free text the strategy can draft and revise."""
    if task.programmatic_answer:
        return (f"{strategy} drafts and revises a free-text answer, and task {task.name} composes its own answer "
                "from its steps")
    return None


def decomposes(task: Task[Any]) -> bool:
    """True when the recursive strategy applies: the task brings its own decomposition or takes free-text steps."""
    return task.free_text_steps or overrides(task, "recursion")
