"""Tasks by name, and the options some of them take (tests, data files, a repository to debug).

Besides the built-in tasks, installed packages may add their own through the `thoughtloom.tasks`
entry-point group; they are looked up only when a name is not built in (and on `loom tasks`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .agent import AgentTask
from .base import Task
from .blocksworld import BlocksworldTask
from .game24 import Game24
from .general import GeneralTask
from .math import MathTask
from .prontoqa import ProntoQAProofTask, ProntoQATask
from .research import ResearchTask

if TYPE_CHECKING:
    from ..grounding.sandbox import SandboxLimits


@dataclass(frozen=True, slots=True)
class TaskOptions:
    """What `loom solve` passes to tasks besides the problem text; each task uses its own."""

    tests: Path | None = None  # code: a file of tests the program must pass
    data: Path | None = None  # humaneval, mbpp, crosswords: the benchmark file
    repo: Path | None = None  # debug: the repository with the bug
    failing_test: str | None = None  # debug: the test that fails (a pytest node id)
    test_command: tuple[str, ...] | None = None  # debug: how to run tests (default: pytest)
    sandbox: SandboxLimits | None = None  # code, debug: limits for running programs and tests
    size: int | None = None  # sorting, set_intersection: instance size (data file, or a generated instance)
    #: debug: run the repository's other tests against each fix (None: the profile's run_regression_tests)
    regression_tests: bool | None = None

    def given(self) -> list[str]:
        """Names of the options that are set, as their flags are named."""
        names = [
            name for name in ("tests", "data", "repo", "failing_test", "test_command", "size") if getattr(self, name)
        ]
        return [*names, "no_regression_tests"] if self.regression_tests is False else names


class UnknownTask(ValueError):
    """No task of that name."""


class TaskOptionError(ValueError):
    """An option the task does not take, or one it needs and did not get."""


def _no_options(cls: type[Task[Any]]) -> Callable[[TaskOptions], Task[Any]]:
    def build(options: TaskOptions) -> Task[Any]:
        if options.given():
            raise TaskOptionError(
                f"task {cls.name} takes no --{options.given()[0].replace('_', '-')}; "
                "see 'loom tasks' for the tasks that do"
            )
        return cls()

    return build


def _only(options: TaskOptions, task: str, allowed: set[str]) -> None:
    extra = [name for name in options.given() if name not in allowed]
    if extra:
        raise TaskOptionError(f"task {task} takes no --{extra[0].replace('_', '-')}")


def _sandbox_kw(options: TaskOptions) -> dict[str, Any]:
    return {"sandbox_limits": options.sandbox} if options.sandbox is not None else {}


def _code(options: TaskOptions) -> Task[Any]:
    from .code import CodeTask, read_tests

    _only(options, "code", {"tests"})
    return CodeTask(tests=read_tests(options.tests) if options.tests else (), **_sandbox_kw(options))


def _humaneval(options: TaskOptions) -> Task[Any]:
    from .humaneval import HumanEvalTask

    _only(options, "humaneval", {"data"})
    return HumanEvalTask(data=options.data, **_sandbox_kw(options))


def _mbpp(options: TaskOptions) -> Task[Any]:
    from .humaneval import MBPPTask

    _only(options, "mbpp", {"data"})
    return MBPPTask(data=options.data, **_sandbox_kw(options))


def _crosswords(options: TaskOptions) -> Task[Any]:
    from .crosswords import CrosswordsTask

    _only(options, "crosswords", {"data"})
    return CrosswordsTask(data=options.data)


def _debug(options: TaskOptions) -> Task[Any]:
    from .debug import DebugTask

    _only(options, "debug", {"repo", "failing_test", "test_command", "no_regression_tests"})
    if options.repo is None or not options.failing_test:
        raise TaskOptionError("task debug needs --repo DIR and --failing-test TEST (a pytest node id)")
    return DebugTask(
        repo=options.repo, failing_test=options.failing_test, test_command=options.test_command,
        regression_tests=options.regression_tests is not False, **_sandbox_kw(options),
    )


def _got(name: str) -> Callable[[TaskOptions], Task[Any]]:
    def build(options: TaskOptions) -> Task[Any]:
        from .got_paper import KeywordCountingTask, SetIntersectionTask, SortingTask

        if name == "keyword_counting":
            _only(options, name, {"data"})
            return KeywordCountingTask(data=options.data)
        _only(options, name, {"data", "size"})
        cls = SortingTask if name == "sorting" else SetIntersectionTask
        return cls(size=options.size, data=options.data)

    return build


#: name -> (one-line description, builder)
TASKS: dict[str, tuple[str, Callable[[TaskOptions], Task[Any]]]] = {
    "game24": (Game24.description, _no_options(Game24)),
    "general": (GeneralTask.description, _no_options(GeneralTask)),
    "math": (MathTask.description, _no_options(MathTask)),
    "agent": (AgentTask.description, _no_options(AgentTask)),
    "research": (ResearchTask.description, _no_options(ResearchTask)),
    "code": ("write a Python function (--tests FILE); programs are run against the tests in a sandbox", _code),
    "humaneval": ("HumanEval problem by id (--problem HumanEval/0); pass@1 on the hidden tests", _humaneval),
    "mbpp": ("MBPP problem by id (--problem MBPP/2, --data FILE); pass@1 on all its tests", _mbpp),
    "crosswords": (
        'ToT 5x5 mini crossword: ten lines "h1. clue" ... "v5. clue" (--data mini0505.json: LM-free '
        "steps from its other puzzles' words)",
        _crosswords,
    ),
    "debug": ("fix a failing test in a repository (--repo DIR --failing-test TEST)", _debug),
    "sorting": (
        "sort digits 0-9 (GoT): a list, an ID with --size 32/64/128, or --size N alone; exact errors",
        _got("sorting"),
    ),
    "set_intersection": (
        'intersect two sets (GoT): "[..] [..]" or an ID with --size 32/64/128; exact errors',
        _got("set_intersection"),
    ),
    "keyword_counting": (
        "count country mentions (GoT): a text or an ID from countries.csv; exact errors",
        _got("keyword_counting"),
    ),
    "blocksworld": (BlocksworldTask.description, _no_options(BlocksworldTask)),
    "prontoqa": (ProntoQATask.description, _no_options(ProntoQATask)),
    "prontoqa_proof": (ProntoQAProofTask.description, _no_options(ProntoQAProofTask)),
}


#: The entry-point group through which installed packages add tasks (a Task subclass, built without arguments).
ENTRY_POINT_GROUP = "thoughtloom.tasks"


def _installed(entry: Any) -> tuple[str, Callable[[TaskOptions], Task[Any]]]:
    """The description and builder of one installed task; a broken one says why when it is chosen."""
    try:
        cls = entry.load()
    except Exception as exc:  # noqa: BLE001 - a user's package can fail to import in any way
        reason = f"cannot load {entry.value} ({type(exc).__name__}: {exc})"
    else:
        if isinstance(cls, type) and issubclass(cls, Task):
            return cls.description or (cls.__doc__ or "").strip().split("\n")[0], _no_options(cls)
        reason = f"{entry.value} is not a thoughtloom Task subclass"

    def broken(options: TaskOptions) -> Task[Any]:
        raise TaskOptionError(f"installed task {entry.name!r}: {reason}")

    return f"(installed, broken: {reason})", broken


def installed_tasks() -> dict[str, tuple[str, Callable[[TaskOptions], Task[Any]]]]:
    """Tasks that installed packages register under ENTRY_POINT_GROUP; a built-in name is never replaced."""
    from importlib.metadata import entry_points

    found: dict[str, tuple[str, Callable[[TaskOptions], Task[Any]]]] = {}
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        if entry.name not in TASKS and entry.name not in found:
            found[entry.name] = _installed(entry)
    return found


def all_tasks() -> dict[str, tuple[str, Callable[[TaskOptions], Task[Any]]]]:
    """Every task by name: the built-in ones, then the installed ones."""
    return {**TASKS, **installed_tasks()}


def get_task(name: str, options: TaskOptions | None = None) -> Task[Any]:
    """A fresh task instance by name (built-in or installed); UnknownTask lists the names there are."""
    entry = TASKS.get(name)
    if entry is None:
        tasks = all_tasks()
        if name not in tasks:
            raise UnknownTask(f"unknown task {name!r}; choose one of: {', '.join(sorted(tasks))}")
        entry = tasks[name]
    _, build = entry
    return build(options or TaskOptions())
