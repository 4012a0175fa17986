"""Tasks: prompts, parsers and exact validators for each kind of problem."""

from .base import ProblemError, Query, Task, UnsupportedOperation, Verdict
from .registry import TASKS, UnknownTask, get_task

__all__ = ["TASKS", "ProblemError", "Query", "Task", "UnknownTask", "UnsupportedOperation", "Verdict", "get_task"]
