"""Programs compared by what they do: probe calls made from a problem's examples, and groups of programs that agree.

A few visible tests let wrong programs through (HumanEval's docstrings give two or three
examples). Among the programs that pass them, the one to trust is the one most others agree
with on inputs nobody checked (as CodeT and MBR-exec choose). The probes here are calls of the
function with the examples' own arguments changed a little (an int plus or minus one, a list
reversed, shortened or with its first item repeated, a string reversed or shortened), so that
they stay the kind of input the problem is about. A program's behaviour is what it returns on
each probe, or the kind of error it raises. The values come back through the test runner's own
channel (grounding/testrun.py), which the program cannot write; a program can only make its own
behaviour what it likes, which is what is being compared.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from .testrun import TestOutcome, TestRun

#: Probe calls per problem: enough to tell programs apart, few enough to run in a second.
MAX_PROBES = 10
#: A probe argument longer than this (as Python source) is left out: probes stay small and quick.
MAX_ARGUMENT = 2000

# The probe's value is normalised in the runner before its repr is taken: floats to 9 significant
# digits (0.1 + 0.2 and 0.3 agree), sets and dicts in sorted order (a set's order changes between
# processes, a dict's with the order it was built in).
_NORMALISE = '''def __norm__(v):
    if type(v) is float:
        return float("%.9g" % v)
    if type(v) in (list, tuple):
        return type(v)(__norm__(x) for x in v)
    if type(v) in (set, frozenset):
        return ("set", sorted((__norm__(x) for x in v), key=repr))
    if type(v) is dict:
        return ("dict", sorted(((__norm__(k), __norm__(x)) for k, x in v.items()), key=repr))
    return v
'''


@dataclass(frozen=True, slots=True)
class Behaviour:
    """A program's visible tests passed and failed, and what it did on each probe (a value's repr, or `!Error`)."""

    passed: int
    failed: int
    signature: tuple[str, ...]
    load_error: str | None = None

    @property
    def passes(self) -> bool:
        """True when the program loaded and failed no visible test."""
        return self.load_error is None and self.failed == 0


def probe_calls(tests: Sequence[str], entry_point: str, limit: int = MAX_PROBES) -> tuple[str, ...]:
    """Calls of `entry_point` with the tests' literal arguments changed a little (none repeats a test's own call).

    Taken round-robin over the tests' calls, one change each in turn, so that every example
    gives probes before any gives many.
    """
    examples = [c for test in tests for c in _literal_calls(test, entry_point)]
    seen = {_call_source(entry_point, *e) for e in examples}
    variants = [_variants(*e) for e in examples]
    calls: list[str] = []
    while variants and len(calls) < limit:
        for it in list(variants):
            found = next(it, None)
            if found is None:
                variants.remove(it)
                continue
            call = _call_source(entry_point, *found)
            if call is None or call in seen:
                continue
            seen.add(call)
            calls.append(call)
            if len(calls) >= limit:
                break
    return tuple(calls)


def probe_test(call: str) -> str:
    """The test snippet that runs one probe call and leaves the repr of its normalised value in `__value__`."""
    return f"{_NORMALISE}__value__ = repr(__norm__({call}))\n"


def visible_part(run: TestRun, tests: int) -> TestRun:
    """The run as its first `tests` tests alone (the probes after them left out): what a grounder reports."""
    results = run.results[:tests]
    passed = sum(r.passed for r in results)
    return replace(run, passed=passed, failed=len(results) - passed, total=len(results), results=results)


def behaviour_of(run: TestRun, tests: int) -> Behaviour:
    """A run of `tests` visible tests followed by probes, as the visible tests' count and the probes' outcomes."""
    visible = visible_part(run, tests)
    return Behaviour(visible.passed, visible.failed, tuple(_outcome(r) for r in run.results[tests:]), run.load_error)


def agreeing_groups(signatures: Sequence[tuple[str, ...]], weights: Sequence[int]) -> list[list[int]]:
    """Indexes of programs grouped by identical behaviour, the heaviest group first (the earliest of a tie)."""
    groups: dict[tuple[str, ...], list[int]] = {}
    for i, signature in enumerate(signatures):
        groups.setdefault(signature, []).append(i)
    return sorted(groups.values(), key=lambda g: (-sum(weights[i] for i in g), g[0]))


def _outcome(result: TestOutcome) -> str:
    """A probe's result as compared: the value's repr, or `!` and the kind of error (its message left out)."""
    if result.passed:
        return result.value if result.value is not None else "!no value"
    kind = (result.error or "failed").split(":", 1)[0].split(" |", 1)[0].strip()
    return "!" + kind


def _literal_calls(test: str, entry_point: str) -> Iterator[tuple[tuple[Any, ...], tuple[tuple[str, Any], ...]]]:
    """The literal arguments of each call of `entry_point` in a test (calls with any other argument are skipped)."""
    try:
        tree = ast.parse(test)
    except SyntaxError:
        return
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == entry_point):
            continue
        try:
            args = tuple(ast.literal_eval(a) for a in node.args)
            kwargs = tuple((k.arg, ast.literal_eval(k.value)) for k in node.keywords if k.arg is not None)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            continue
        if len(kwargs) == len(node.keywords) and not any(isinstance(a, ast.Starred) for a in node.args):
            yield args, kwargs


def _variants(args: tuple[Any, ...], kwargs: tuple[tuple[str, Any], ...]) -> Iterator[tuple[Any, ...]]:
    """The call's arguments with one of them changed, each change in turn: (args, kwargs) pairs."""
    for i, value in enumerate(args):
        for changed in _changes(value):
            yield args[:i] + (changed,) + args[i + 1 :], kwargs
    for i, (name, value) in enumerate(kwargs):
        for changed in _changes(value):
            yield args, kwargs[:i] + ((name, changed),) + kwargs[i + 1 :]


def _changes(value: Any) -> list[Any]:
    """Small changes of one argument that keep its type and shape (empty: none that make sense)."""
    if isinstance(value, bool) or value is None:
        return []
    if isinstance(value, int):
        smaller = value - 1 if abs(value) > 1 else None
        doubled = value * 2 if 1 < abs(value) < 1000 else None
        return [v for v in (value + 1, smaller, doubled) if v is not None]
    if isinstance(value, float):
        return [value * 2, value + 0.5]
    if isinstance(value, str | list | tuple):
        return _sequence_changes(value)
    return []


def _sequence_changes(value: Any) -> list[Any]:
    """A string, list or tuple reversed, without its first item, with its first item again, sorted."""
    out: list[Any] = []
    if len(value) > 1 and value[::-1] != value:
        out.append(value[::-1])
    if len(value) > 1:
        out.append(value[1:])
    if value:
        out.append(value + value[:1])
    if not isinstance(value, str) and len(value) > 1:
        try:
            ordered = type(value)(sorted(value))
        except TypeError:
            ordered = value
        if ordered != value:
            out.append(ordered)
    return out


def _call_source(entry_point: str, args: tuple[Any, ...], kwargs: tuple[tuple[str, Any], ...]) -> str | None:
    """The call as Python source; None when an argument is too long to be a quick probe."""
    parts = [repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs]
    if any(len(p) > MAX_ARGUMENT for p in parts):
        return None
    return f"{entry_point}({', '.join(parts)})"
