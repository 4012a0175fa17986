"""Tasks by name."""

from __future__ import annotations

from typing import Any

from .base import Task
from .game24 import Game24
from .general import GeneralTask

TASKS: dict[str, type[Task[Any]]] = {"game24": Game24, "general": GeneralTask}


class UnknownTask(ValueError):
    """No task of that name."""


def get_task(name: str) -> Task[Any]:
    """A fresh task instance by name; UnknownTask lists the names there are."""
    try:
        return TASKS[name]()
    except KeyError:
        raise UnknownTask(f"unknown task {name!r}; choose one of: {', '.join(sorted(TASKS))}") from None
