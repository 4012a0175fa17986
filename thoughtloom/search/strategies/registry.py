"""Strategies by name: the built-in ones, those installed packages add, and a user's own.

The built-in strategies are declared in their own modules (each a `STRATEGIES` tuple) and listed
here once, in the order `--strategy` shows them. Installed packages add strategies through the
`thoughtloom.strategies` entry-point group, looked up only when a name is not built in and loaded
only when chosen (a broken one is refused in one line then; `loom bench` leaves its lane out with
the reason). A strategy not installed can be named by its class, `module:Class` or
`file.py:Class`, or passed as an object (`solve(..., strategy=MyStrategy())`).

A run with a strategy that is not built in records it as a `ChosenStrategy` (its name, where its
class is loaded from, its settings) so resume and replay build the same strategy again.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, is_dataclass
from typing import TYPE_CHECKING, Any

from ...tasks.base import Task
from ...tasks.checkers import CheckerError, is_reference, load_function
from ..trace import Trace
from .base import BuiltinStrategy, Needs, Strategy, TracedStrategy

logger = logging.getLogger(__name__)

if TYPE_CHECKING:
    from ...graph import ThoughtGraph

ENTRY_POINT_GROUP = "thoughtloom.strategies"


class StrategyError(ValueError):
    """A strategy that is unknown, not installed, or cannot be loaded (one line, naming it)."""


@functools.cache
def built_in_strategies() -> tuple[BuiltinStrategy, ...]:
    """The built-in strategies, in the order they are offered."""
    # Imported when asked: the CLI imports this module for its errors without loading every strategy.
    # Kept once made (the tuple of the modules' constants never changes): every search looks its
    # strategy up, and the nine imports and the tuple cost about 32k instructions each time.
    from ..agent import scheduler
    from ..research import explorer
    from . import best_first, bfs, cove, dfs, got, mcts, recursive

    return (*bfs.STRATEGIES, *dfs.STRATEGIES, *best_first.STRATEGIES, *mcts.STRATEGIES, *got.STRATEGIES,
            *recursive.STRATEGIES, *scheduler.STRATEGIES, *explorer.STRATEGIES, *cove.STRATEGIES)


def built_in_names() -> tuple[str, ...]:
    """The built-in strategies' names."""
    return tuple(s.name for s in built_in_strategies())


def _built_in(name: str) -> BuiltinStrategy | None:
    return next((s for s in built_in_strategies() if s.name == name), None)


def installed_names() -> tuple[str, ...]:
    """Names installed packages register under ENTRY_POINT_GROUP (not loaded; a built-in name is never replaced)."""
    from importlib.metadata import entry_points

    builtin = set(built_in_names())
    return tuple(dict.fromkeys(e.name for e in entry_points(group=ENTRY_POINT_GROUP) if e.name not in builtin))


def strategy_names() -> tuple[str, ...]:
    """Every strategy a name can choose: the built-in ones, then the installed ones."""
    return (*built_in_names(), *installed_names())


def strategy_named(name: str) -> Strategy:
    """The strategy a name chooses: built-in, installed, or a `module:Class` / `file.py:Class` reference."""
    return _built_in(name) or build(name)


def unsupported_reason(strategy: str, task: Task[Any]) -> str | None:
    """Why `strategy` (a name) cannot search `task` (one line), or None when it can."""
    return strategy_named(strategy).unfit(task)


def fitting(task: Task[Any]) -> str:
    """The step-by-step strategies that can search `task`, as a phrase for an error ("bfs, dfs or mcts")."""
    names = [s.name for s in built_in_strategies() if s.needs.grows_depth and s.variant_of is None
             and s.unfit(task) is None]
    return ", ".join(names[:-1]) + f" or {names[-1]}" if len(names) > 1 else "".join(names)


def no_decomposition(task: Task[Any]) -> str:
    """The refusal of --strategy recursive for a task of fixed-form steps with no decomposition of its own."""
    return (f"task {task.name} has no decomposition for --strategy recursive (its steps have a fixed form); "
            f"use {fitting(task)}")


def needs_of(name: str) -> Needs:
    """What the built-in strategy of this name needs (any other name: nothing; a run asks its own strategy,
    RunSpec.needs)."""
    builtin = _built_in(name)
    return builtin.needs if builtin is not None else Needs()


def trace_of(strategy: str | Strategy, graph: ThoughtGraph) -> Trace | None:
    """The trace a strategy (an object, or a built-in one's name) left on `graph`; None when it keeps none (a name
    not built in: None)."""
    chosen = _built_in(strategy) if isinstance(strategy, str) else strategy
    if not isinstance(chosen, TracedStrategy):
        return None
    try:
        return chosen.read_trace(graph)
    except Exception as exc:
        if isinstance(chosen, BuiltinStrategy):
            raise  # the engine's own strategies: a bug to see, not to hide
        # A user's strategy whose trace cannot be read costs the run its trace, not its answer.
        logger.warning("strategy %s could not read its trace: %s: %s", chosen.name, type(exc).__name__, exc)
        return None


def build(name: str, settings: Mapping[str, Any] | None = None, source: str | None = None) -> Strategy:
    """A strategy that is not built in, made with `settings`: from `source` (a class reference) or installed
    under `name`; StrategyError (one line) when it is not there or not a strategy."""
    if source is None and is_reference(name):
        source = name
    if source is not None:
        try:
            factory = load_function(source, what="strategy")
        except CheckerError as exc:
            raise StrategyError(str(exc)) from None
        where = source
    else:
        factory, where = _entry_point(name)
    try:
        made = factory(**dict(settings or {}))
    except Exception as exc:  # noqa: BLE001 - a user's class may refuse its settings in any way
        raise StrategyError(f"strategy {name}: {where} cannot be made with settings {dict(settings or {})} "
                            f"({type(exc).__name__}: {exc})") from None
    if not isinstance(made, Strategy):
        raise StrategyError(f"strategy {name}: {where} does not make a Strategy (name, settings, needs, unfit, run)")
    return made


def _entry(name: str) -> Any:
    """The entry point an installed package registers under `name` (not loaded), or None."""
    from importlib.metadata import entry_points

    return next((e for e in entry_points(group=ENTRY_POINT_GROUP) if e.name == name), None)


def _installed_value(name: str) -> str | None:
    """What an installed package registers under `name` (`module:Class`); None: nothing."""
    entry = _entry(name)
    return None if entry is None else str(entry.value)


def _entry_point(name: str) -> tuple[Any, str]:
    """The factory an installed package registers under `name`, and where it is."""
    entry = _entry(name)
    if entry is None:
        raise StrategyError(f"unknown strategy {name!r}: not built in or installed; choose one of: "
                            f"{', '.join(strategy_names())} (or name a class, module:Class or file.py:Class)")
    try:
        return entry.load(), entry.value
    except Exception as exc:  # noqa: BLE001 - a user's package can fail to import in any way
        raise StrategyError(f"installed strategy {name!r}: cannot load {entry.value} "
                            f"({type(exc).__name__}: {exc})") from None


def settings_of(strategy: Strategy) -> dict[str, Any]:
    """A strategy's settings as plain data (what a run records)."""
    settings = strategy.settings
    if settings is None:
        return {}
    if not is_dataclass(settings) or isinstance(settings, type):
        raise StrategyError(f"strategy {strategy.name}: its settings must be a frozen dataclass instance or None; "
                            f"got {type(settings).__name__}")
    return asdict(settings)


@dataclass(frozen=True, slots=True)
class ChosenStrategy:
    """A strategy that is not built in, as a run records it: its name, where its class is loaded from
    (None: installed under its name), its settings; and the strategy (None: named by a stored run, not made yet)."""

    name: str
    source: str | None = None
    settings: Mapping[str, Any] = field(default_factory=dict)
    strategy: Strategy | None = field(default=None, compare=False, repr=False)

    @classmethod
    def of(cls, choice: str | Strategy) -> ChosenStrategy:
        """The choice of a strategy that is not built in: an installed name, a class reference, or an object."""
        if isinstance(choice, str):
            made = build(choice)
            source = _absolute(choice) if is_reference(choice) else None
            return cls(made.name, source, settings_of(made), made)
        if not isinstance(choice, Strategy):
            raise StrategyError(f"a strategy is a name or an object with name, settings, needs, unfit and run; got "
                                f"{type(choice).__name__}")
        name = choice.name
        if not isinstance(name, str) or not name.strip():
            raise StrategyError(f"a strategy's name must be a non-empty string; got {name!r}")
        if name in built_in_names():
            raise StrategyError(f"strategy {name!r}: a built-in strategy has that name; give yours another")
        reference = _class_reference(choice)
        installed = reference is not None and _installed_value(name) == reference  # found again by its name
        return cls(name, None if installed else reference, settings_of(choice), choice)

    def load(self) -> Strategy:
        """The strategy, made from its record when a stored run named it (StrategyError, one line, when it is
        not installed)."""
        if self.strategy is not None:
            return self.strategy
        try:
            return build(self.name, self.settings, self.source)
        except StrategyError as exc:
            raise StrategyError(f"the run's strategy {self.name} is not available here: {exc}") from None

    def to_dict(self) -> dict[str, Any]:
        """The plain-data form a stored run keeps."""
        return {"name": self.name, **({"source": self.source} if self.source else {}),
                "settings": dict(self.settings)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ChosenStrategy:
        """Rebuild from `to_dict`'s form (not made until `load`)."""
        return cls(str(data["name"]), data.get("source"), dict(data.get("settings") or {}))


def _absolute(reference: str) -> str:
    """A `file.py:Class` reference with the file's absolute path (so a replay elsewhere finds it)."""
    module, _, name = reference.rpartition(":")
    return f"{os.path.abspath(module)}:{name}" if module.endswith(".py") else reference


def _class_reference(strategy: Strategy) -> str | None:
    """`module:Class` for an object whose class can be imported again by name; None otherwise."""
    cls = type(strategy)
    if cls.__module__ == "__main__" or "<" in cls.__qualname__ or cls.__module__.startswith("thoughtloom_strategy_"):
        return None
    return f"{cls.__module__}:{cls.__qualname__}"
