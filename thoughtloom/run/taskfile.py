"""A task from a file: a TOML file declares a task on the general task's prompts, with its answer checker.

    name = "units"                       # the task's name (not a built-in task's)
    description = "unit conversions"     # one line, for `loom tasks`
    instructions = "Convert the quantity. End with 'Final answer: NUMBER'."
    checker = "numeric"                  # or {kind = "numeric", tolerance = 0.01}, or "module:function"

    [prompts]                            # each optional; the general task's prompt where absent
    propose = "Problem: {problem}\\nSo far:\\n{steps}\\nList {k} next steps, one per line."
    evaluate = "Problem: {problem}\\nSo far:\\n{steps}\\nHow good is the last step?"
    answer = "Problem: {problem}\\nWork:\\n{steps}\\nGive the final answer."

    [search]                             # the task's search defaults (SearchConfig fields)
    beam = 2

    [[examples]]                         # worked examples (problem, answer, optional reasoning)
    problem = "2 km in metres"
    answer = "2000"

Every error is one line naming the file, the key and what is expected (TaskFileError, a SpecError:
exit 2 on the command line). The file is read like any file a user names (grounding/files.py).
It lives in the run layer because its search defaults are checked as SearchConfig checks them.
"""

from __future__ import annotations

import json
import os
import re
import string
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..grounding.files import FileRefused, read_utf8
from ..search.config import SearchConfig
from ..tasks.checkers import CheckerError, checker_from
from ..tasks.general import PROMPT_FIELDS, FileTask, TaskExample, file_task
from ..tasks.registry import all_tasks
from .spec import SpecError

_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")
_KEYS = ("name", "description", "instructions", "checker", "prompts", "examples", "search")
#: SearchConfig fields a task file may not set: the run's own, not the task's.
_RUN_ONLY = ("temperature", "seed")
#: The most a stored run's task declaration may hold (as JSON): a received manifest is anyone's.
MAX_DECLARATION_BYTES = 1 << 20


class TaskFileError(SpecError):
    """A task file that cannot be read as a task: one line naming the key and what is expected."""


def load_task(path: str | os.PathLike[str]) -> FileTask:
    """The task a TOML task file declares (TaskFileError, one line, when it cannot be read as one).

    A custom checker (`module:function`) is not imported here: `task.checker.loaded()` imports it,
    which `loom bench` does for a file the user names."""
    where = os.fspath(path)
    try:
        text = read_utf8(path, what="task file")
    except FileRefused as exc:
        raise TaskFileError(str(exc)) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise TaskFileError(f"{where}: not TOML ({exc})") from None
    return task_from(data, where, str(Path(where).resolve().parent))


def task_from(data: Mapping[str, Any], where: str, base_dir: str | None = None, *, source: bool = True) -> FileTask:
    """The task a task file's parsed TOML declares; `where` names the file in errors (source: `where` is that file,
    else the task is declared in Python and a stored run keeps its declaration)."""
    unknown = [key for key in data if key not in _KEYS]
    if unknown:
        raise TaskFileError(f"{where}: unknown key {unknown[0]!r}; a task file has {', '.join(_KEYS)}")
    name = _text(data, "name", where, required=True)
    if not _NAME.match(name):
        raise TaskFileError(
            f"{where}: name: expected a letter, then letters, digits, _ or - (at most 64); got {name!r}"
        )
    if name in all_tasks():
        raise TaskFileError(f"{where}: name: {name!r} is a task 'loom tasks' lists already; choose another name")
    prompts = _prompts(data.get("prompts", {}), where)
    try:
        checker = checker_from(data["checker"], f"{where}: checker", base_dir) if "checker" in data else None
    except CheckerError as exc:
        raise TaskFileError(str(exc)) from None
    return file_task(
        name, _text(data, "description", where) or f"task file {Path(where).name}", where if source else "",
        _search(data, where), declaration=data, instructions=_text(data, "instructions", where),
        examples=_examples(data.get("examples", []), where), prompts=prompts, checker=checker,
    )


def task(
    name: str, *, instructions: str = "", examples: Sequence[TaskExample | tuple[Any, ...] | Mapping[str, Any]] = (),
    prompts: Mapping[str, str] | None = None, checker: str | Mapping[str, Any] | None = None,
    search: Mapping[str, Any] | None = None, description: str = "",
) -> FileTask:
    """A task declared in Python as a task file declares it (the same keys, checks and one-line TaskFileError).

    examples: (problem, answer) or (problem, answer, reasoning) pairs, TaskExamples or tables; checker: a kind
    ("numeric"), a table ({"kind": "numeric", "tolerance": 0.01}) or "module:function" (imported only when
    `task.checker.loaded()` is called). A stored run keeps all of it, so replay and resume rebuild the task."""
    where = "task()"
    data: dict[str, Any] = {"name": name, "description": description or f"task {name}, declared in Python"}
    if instructions:
        data["instructions"] = instructions
    if examples:
        data["examples"] = [_example(item, f"{where}: examples[{i}]") for i, item in enumerate(examples, 1)]
    if prompts is not None:
        data["prompts"] = dict(prompts) if isinstance(prompts, Mapping) else prompts
    if checker is not None:
        data["checker"] = dict(checker) if isinstance(checker, Mapping) else checker
    if search is not None:
        data["search"] = dict(search) if isinstance(search, Mapping) else search
    return task_from(data, where, source=False)


def declared_task(data: Any, where: str) -> FileTask:
    """The task a stored run's declaration (FileTask.declared) gives; the manifest is anyone's, so the declaration
    is capped in size and checked as a task file is (TaskFileError, one line naming `where`)."""
    if not isinstance(data, Mapping):
        raise TaskFileError(f"{where}: expected a table of a task's keys; got {_shown(data)}")
    try:
        size = len(json.dumps(data))
    except (TypeError, ValueError, RecursionError):
        raise TaskFileError(f"{where}: not plain data (text, numbers, lists and tables)") from None
    if size > MAX_DECLARATION_BYTES:
        raise TaskFileError(f"{where}: {size} bytes; a stored task declaration holds at most {MAX_DECLARATION_BYTES}")
    return task_from(data, where, source=False)


def _example(item: Any, where: str) -> Any:
    """A Python example as a task file's table (a table, or anything else, is left for _examples to check)."""
    if isinstance(item, TaskExample):
        return {"problem": item.problem, "answer": item.answer, "reasoning": item.reasoning}
    if isinstance(item, (tuple, list)):
        if len(item) not in (2, 3):
            raise TaskFileError(f"{where}: expected (problem, answer[, reasoning]); got {len(item)} items")
        return dict(zip(("problem", "answer", "reasoning"), item, strict=False))
    return dict(item) if isinstance(item, Mapping) else item


def _text(data: Mapping[str, Any], key: str, where: str, *, required: bool = False) -> str:
    value = data.get(key)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or not value.strip():
        raise TaskFileError(f"{where}: {key}: expected {'a' if required else 'a non-empty'} text"
                            + (" (it is required)" if value is None else f"; got {_shown(value)}"))
    return value.strip()


def _prompts(value: Any, where: str) -> dict[str, str]:
    if not isinstance(value, dict):
        raise TaskFileError(f"{where}: prompts: expected a table ([prompts]) of {', '.join(PROMPT_FIELDS)}")
    out = {}
    for key, template in value.items():
        if key not in PROMPT_FIELDS:
            raise TaskFileError(f"{where}: prompts.{key}: unknown prompt; a task file may write "
                                f"{', '.join(PROMPT_FIELDS)}")
        if not isinstance(template, str) or not template.strip():
            raise TaskFileError(f"{where}: prompts.{key}: expected a non-empty text; got {_shown(template)}")
        allowed = PROMPT_FIELDS[key]
        try:
            names = [field for _, field, _, _ in string.Formatter().parse(template) if field is not None]
        except ValueError as exc:
            raise TaskFileError(f"{where}: prompts.{key}: {exc}; write a brace as {{{{ or }}}}") from None
        bad = [n for n in names if n not in allowed]
        if bad:
            raise TaskFileError(f"{where}: prompts.{key}: unknown placeholder {{{bad[0]}}}; it may use "
                                + ", ".join(f"{{{n}}}" for n in allowed))
        if "problem" not in names:
            raise TaskFileError(
                f"{where}: prompts.{key}: expected the placeholder {{problem}} (where the problem goes)"
            )
        out[key] = template
    return out


def _examples(value: Any, where: str) -> list[TaskExample]:
    if not isinstance(value, list):
        raise TaskFileError(f"{where}: examples: expected an array of tables ([[examples]]) with problem and answer")
    out = []
    for i, item in enumerate(value, 1):
        key = f"examples[{i}]"
        if not isinstance(item, dict):
            raise TaskFileError(f"{where}: {key}: expected a table with problem and answer")
        extra = sorted(set(item) - {"problem", "answer", "reasoning"})
        if extra:
            raise TaskFileError(f"{where}: {key}.{extra[0]}: unknown key; an example has problem, answer, reasoning")
        problem = item.get("problem")
        answer = item.get("answer")
        if not isinstance(problem, str) or not problem.strip():
            raise TaskFileError(f"{where}: {key}.problem: expected a non-empty text; got {_shown(problem)}")
        if isinstance(answer, bool) or not isinstance(answer, (str, int, float)) or not str(answer).strip():
            raise TaskFileError(f"{where}: {key}.answer: expected a text or a number; got {_shown(answer)}")
        reasoning = item.get("reasoning", "")
        if not isinstance(reasoning, str):
            raise TaskFileError(f"{where}: {key}.reasoning: expected a text; got {_shown(reasoning)}")
        out.append(TaskExample(problem.strip(), str(answer).strip(), reasoning.strip()))
    return out


def _search(data: Mapping[str, Any], where: str) -> dict[str, Any]:
    value = data.get("search", {})
    if not isinstance(value, dict):
        raise TaskFileError(f"{where}: search: expected a table ([search]) of search settings")
    defaults = {name: v for name, v in SearchConfig().to_dict().items() if name not in _RUN_ONLY}
    for key, given in value.items():
        if key not in defaults:
            raise TaskFileError(
                f"{where}: search.{key}: not a search setting a task sets; one of {', '.join(defaults)}"
            )
        kind = _kind(defaults[key], given)
        if kind is not None:
            raise TaskFileError(f"{where}: search.{key}: expected {kind}; got {_shown(given)}")
    try:
        SearchConfig(**value)
    except (ValueError, TypeError) as exc:
        raise TaskFileError(f"{where}: search: {exc}") from None
    return dict(value)


def _kind(default: Any, given: Any) -> str | None:
    """What a search setting must be when `given` is not of its default's type; None when it is."""
    if isinstance(default, bool):
        return None if isinstance(given, bool) else "true or false"
    if isinstance(default, int) or default is None:  # the optional settings are counts
        return None if isinstance(given, int) and not isinstance(given, bool) else "a whole number"
    if isinstance(default, float):
        return None if isinstance(given, (int, float)) and not isinstance(given, bool) else "a number"
    return None if isinstance(given, type(default)) else f"a {type(default).__name__}"


def _shown(value: Any) -> str:
    return f"{type(value).__name__} {str(value)[:40]!r}" if value is not None else "nothing"


__all__ = ["MAX_DECLARATION_BYTES", "TaskFileError", "declared_task", "load_task", "task", "task_from"]
