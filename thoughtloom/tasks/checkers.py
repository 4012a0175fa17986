"""Answer checkers: how a final answer is compared with a labelled gold answer, one place for every kind.

A task file names one (`checker = "numeric"`, or a table with its settings), and `loom bench
--metric` names one for a labelled data set. The answer is read as every lane's answer is read
(tasks/answers.py: the span of its last 'Answer:' line, else the whole text), then compared:

- exact: the normalized span equals the normalized gold (lowercase, no punctuation, no a/an/the)
- numeric: the answer's number (final_number) is within `tolerance` (absolute) or `relative` of the gold's
- f1: F1 over normalized tokens; solved at `threshold` (default 1.0) or above, the F1 kept as a score
- contains: the normalized gold appears, as whole words, in the normalized answer
- one_of: exact against any of the gold's alternatives (a list, or a text split at `separator`)
- regex: the gold is a regular expression that matches somewhere in the answer's span
- custom (`module:function`, or `file.py:function` beside the task file): the user's own function
  `f(answer: str | None, gold) -> bool | float`; a number is a score in [0, 1], solved at `threshold`

A custom checker is Python code: `load_function` imports it only when a caller asks (`loaded`), so a
task or protocol read from a stored run never runs it unless the user names it again.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import re
import sys
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from pathlib import Path
from typing import Any

from .answers import final_number, marked_span, normalize_answer, token_f1

#: The built-in kinds; anything else of the form `module:function` is a custom checker.
CHECKER_KINDS = ("exact", "numeric", "f1", "contains", "one_of", "regex")
CUSTOM = "custom"
_REFERENCE = re.compile(r"^[^:\s]+:[A-Za-z_]\w*$")


class CheckerError(ValueError):
    """A checker that cannot be built or run (one line: what is wrong and what is expected)."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """One answer against its gold: solved, and a score in [0, 1] where the kind gives one (f1, custom)."""

    solved: bool
    score: float | None = None


def is_reference(text: str) -> bool:
    """True for a custom checker's reference, `module:function` or `file.py:function`."""
    return bool(_REFERENCE.match(text)) and text.partition(":")[0] not in CHECKER_KINDS


@dataclass(frozen=True, slots=True)
class Checker:
    """A checker's kind and settings; `check(answer, gold)` gives the verdict."""

    kind: str = "exact"
    #: numeric: the largest absolute difference that still counts as equal
    tolerance: float = 0.0
    #: numeric: the largest difference relative to the gold's size that still counts as equal
    relative: float = 0.0
    #: f1 and custom scores: solved at this score or above
    threshold: float = 1.0
    #: one_of: what separates the alternatives when the gold is one text (a CSV cell)
    separator: str = "|"
    #: custom: "module:function" or "file.py:function"
    function: str | None = None
    #: custom: the folder a "file.py" reference is found in (the task file's; else the working directory)
    base_dir: str | None = None
    #: custom: the imported function, once `loaded` imported it
    call: Callable[..., Any] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.kind not in (*CHECKER_KINDS, CUSTOM):
            raise CheckerError(f"unknown checker {self.kind!r}; choose {', '.join(CHECKER_KINDS)} or module:function")
        if self.kind == CUSTOM and (self.function is None or not is_reference(self.function)):
            raise CheckerError(f"a custom checker is named module:function; got {self.function!r}")
        for name in ("tolerance", "relative", "threshold"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
                    and value >= 0):
                raise CheckerError(f"checker {name} must be a number at least 0; got {value!r}")
        if self.threshold > 1:
            raise CheckerError(f"checker threshold must be in [0, 1]; got {self.threshold}")
        if not self.separator:
            raise CheckerError("checker separator must not be empty")

    @classmethod
    def named(cls, text: str, base_dir: str | None = None) -> Checker:
        """A checker by name as `--metric` takes it: a built-in kind or module:function."""
        if is_reference(text):
            return cls(CUSTOM, function=text, base_dir=base_dir)
        return cls(text)

    @property
    def name(self) -> str:
        """The kind, or the custom function's reference."""
        return self.function if self.kind == CUSTOM and self.function else self.kind

    @property
    def scores(self) -> bool:
        """True when the verdict carries a score worth a mean (f1; a custom function may give one)."""
        return self.kind in ("f1", CUSTOM)

    def loaded(self) -> Checker:
        """This checker ready to run: a custom one with its function imported (CheckerError, one line, if it cannot
        be)."""
        if self.kind != CUSTOM or self.call is not None:
            return self
        assert self.function is not None
        return replace(self, call=load_function(self.function, self.base_dir))

    def check(self, answer: str | None, gold: Any) -> Verdict:
        """The verdict on one answer against its gold (a custom checker must be `loaded` first)."""
        if self.kind == CUSTOM:
            return self._custom(answer, gold)
        if answer is None or not answer.strip():
            return Verdict(False, 0.0 if self.kind == "f1" else None)
        span = marked_span(answer)
        if self.kind == "numeric":
            return Verdict(self._close(_number(span, answer), _gold_number(gold)))
        if self.kind == "f1":
            score = token_f1(span, _gold_text(gold))
            return Verdict(score >= self.threshold, score)
        if self.kind == "contains":
            want = normalize_answer(_gold_text(gold))
            return Verdict(bool(want) and f" {want} " in f" {normalize_answer(span)} ")
        if self.kind == "regex":
            return Verdict(gold_pattern(gold).search(span) is not None)
        golds = self.alternatives(gold) if self.kind == "one_of" else [_gold_text(gold)]
        said = normalize_answer(span)
        return Verdict(any(said == normalize_answer(g) for g in golds))

    def key(self, answer: str | None) -> Hashable:
        """What two answers must share to count as one vote (cot_sc's majority): the number for numeric,
        else the normalized span."""
        if answer is None:
            return None
        if self.kind == "numeric":
            return _number(marked_span(answer), answer)
        return normalize_answer(marked_span(answer)) or None

    def alternatives(self, gold: Any) -> list[str]:
        """one_of: the gold's alternatives (a list, or one text split at the separator)."""
        if isinstance(gold, (list, tuple)):
            return [str(g) for g in gold]
        return [part.strip() for part in str(gold).split(self.separator) if part.strip()]

    def check_gold(self, gold: Any) -> str | None:
        """Why a gold answer cannot be checked by this kind (a number for numeric, a pattern for regex); None if it
        can."""
        if gold is None or (isinstance(gold, str) and not gold.strip()):
            return "the answer is empty"
        if self.kind == "numeric" and _gold_number(gold) is None:
            return f"the numeric checker needs a number; {str(gold)[:40]!r} has none"
        if self.kind == "regex":
            try:
                gold_pattern(gold)
            except re.error as exc:
                return f"the regex checker needs a regular expression; {str(gold)[:40]!r} is not one ({exc})"
        if self.kind == "one_of" and not self.alternatives(gold):
            return "the one_of checker needs alternatives"
        return None

    def _close(self, got: Fraction | None, want: Fraction | None) -> bool:
        if got is None or want is None:
            return False
        diff = abs(float(got - want))
        return got == want or diff <= self.tolerance or diff <= self.relative * abs(float(want))

    def _custom(self, answer: str | None, gold: Any) -> Verdict:
        if self.call is None:
            raise CheckerError(f"checker {self.function} is not loaded; call loaded() first (it imports Python code)")
        try:
            value = self.call(answer, gold)
        except Exception as exc:  # noqa: BLE001 - a user's function may fail in any way
            raise CheckerError(f"checker {self.function} failed: {type(exc).__name__}: {exc}") from None
        if isinstance(value, bool):
            return Verdict(value, 1.0 if value else 0.0)
        if isinstance(value, (int, float)) and math.isfinite(value) and 0 <= value <= 1:
            return Verdict(value >= self.threshold, float(value))
        raise CheckerError(f"checker {self.function} must return true/false or a score in [0, 1]; got {value!r}")


def gold_pattern(gold: Any) -> re.Pattern[str]:
    """The regex checker's gold as a compiled pattern (case-insensitive)."""
    return re.compile(str(gold), re.IGNORECASE)


def _number(span: str, answer: str) -> Fraction | None:
    """The answer's number: in its marked span, else anywhere in it (final_number's rules); 0 is a number."""
    found = final_number(span)
    return found if found is not None else final_number(answer)


def _gold_text(gold: Any) -> str:
    return " ".join(str(g) for g in gold) if isinstance(gold, (list, tuple)) else str(gold)


def _gold_number(gold: Any) -> Fraction | None:
    if isinstance(gold, bool):
        return None
    if isinstance(gold, int):
        return Fraction(gold)
    if isinstance(gold, float):
        return Fraction(gold) if math.isfinite(gold) else None
    return final_number(str(gold))


def load_function(reference: str, base_dir: str | None = None, what: str = "checker") -> Callable[..., Any]:
    """Import a user's function (a checker, a scorer: `what`, for the errors): `module:function` from the
    import path, or `file.py:function` from base_dir."""
    module_name, _, function = reference.partition(":")
    try:
        if module_name.endswith(".py"):
            path = Path(base_dir or ".") / module_name
            if not path.is_file():
                raise CheckerError(f"{what} {reference}: no file {path}")
            spec = importlib.util.spec_from_file_location(f"thoughtloom_{what}_{path.stem}", path)
            if spec is None or spec.loader is None:
                raise CheckerError(f"{what} {reference}: cannot load {path}")
            module = importlib.util.module_from_spec(spec)
            # Registered as an import would be: a dataclass in it looks its module up by name.
            sys.modules[spec.name] = module
            spec.loader.exec_module(module)
        else:
            module = importlib.import_module(module_name)
    except CheckerError:
        raise
    except Exception as exc:  # noqa: BLE001 - importing a user's module may fail in any way
        raise CheckerError(f"{what} {reference}: cannot import {module_name} ({type(exc).__name__}: {exc})") from None
    found = getattr(module, function, None)
    if not callable(found):
        raise CheckerError(f"{what} {reference}: {module_name} has no function {function}")
    return found


def checker_from(value: Any, where: str, base_dir: str | None = None) -> Checker:
    """A checker as a task file declares it: a name (`"numeric"`, `"module:function"`) or a table
    (`{kind = "numeric", tolerance = 0.01}`); CheckerError naming `where` and what is expected."""
    if isinstance(value, str):
        try:
            return Checker.named(value, base_dir)
        except CheckerError as exc:
            raise CheckerError(f"{where}: {exc}") from None
    if not isinstance(value, dict):
        raise CheckerError(f"{where}: expected a checker name or a table with kind = ...; got {type(value).__name__}")
    settings = dict(value)
    kind = settings.pop("kind", None)
    if not isinstance(kind, str):
        raise CheckerError(f"{where}.kind: expected one of {', '.join(CHECKER_KINDS)} or module:function")
    allowed = {"numeric": {"tolerance", "relative"}, "f1": {"threshold"}, "one_of": {"separator"}}.get(kind, set())
    if is_reference(kind):
        allowed = {"threshold"}
        settings |= {"function": kind, "base_dir": base_dir}
        kind = CUSTOM
    unknown = sorted(set(settings) - allowed - {"function", "base_dir"})
    if unknown:
        takes = ", ".join(sorted(allowed)) or "no settings"
        raise CheckerError(f"{where}.{unknown[0]}: checker {value.get('kind')} takes {takes}")
    try:
        return Checker(kind, **settings)
    except CheckerError as exc:
        raise CheckerError(f"{where}: {exc}") from None
    except TypeError as exc:
        raise CheckerError(f"{where}: {exc}") from None


__all__: Sequence[str] = ["CHECKER_KINDS", "Checker", "CheckerError", "Verdict", "checker_from", "is_reference",
                          "load_function"]
