"""A user's own scorer: a plain or async function that scores thoughts in place of the model's evaluation.

`solve(..., scorer=fn)` and `loom solve --scorer module:function` (or `file.py:function`) give one to
the strategies whose calls are the operators' (Needs.operators, search/strategies/base.py). It is called with
the thought and its path (the texts from the root: the problem as posed first, the thought last) and
returns a score in [0, 1]: a number, a (score, reasoning) pair, or `Scored`. No model call scores a
thought then: it stands in for value, vote and prior alike (a task's exact values still come first).
A stored run records the scorer by name; resume and replay import it only when the user names it
again (run/grants.py), as they do a custom checker (tasks/checkers.py:load_function loads both).
"""

from __future__ import annotations

import inspect
import math
import numbers
import os
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from ..tasks.checkers import CheckerError, is_reference, load_function


class ScorerError(ValueError):
    """A scorer that cannot be imported, failed, or gave something that is not a score (one line, naming it)."""


@dataclass(frozen=True, slots=True)
class Scored:
    """A score in [0, 1] and why (kept on the thought as its evaluation, as an evaluator's reasoning is)."""

    score: float
    reasoning: str = ""


#: What a scorer may return for a thought.
ScoreValue = float | Scored | tuple[float, str]


class Scorer(Protocol):
    """A function of a thought and its path (texts from the root, the thought last): its score, or an awaitable."""

    def __call__(self, thought: str, path: Sequence[str], /) -> ScoreValue | Awaitable[ScoreValue]:
        ...


@dataclass(frozen=True, slots=True)
class ThoughtScorer:
    """A user's scorer and the name a stored run records it by (`call` None: named by a stored run, not imported)."""

    name: str
    call: Scorer | None = field(default=None, compare=False, repr=False)

    @classmethod
    def of(cls, scorer: Scorer | str | ThoughtScorer) -> ThoughtScorer:
        """A scorer ready to call: a function (named by its qualified name), or one imported from its reference."""
        if isinstance(scorer, ThoughtScorer):
            return scorer if scorer.call is not None else cls.of(scorer.name)
        if isinstance(scorer, str):
            name = scorer_name(scorer)
            if not is_reference(name):
                raise ScorerError(f"--scorer {scorer}: name a scorer module:function or file.py:function")
            try:
                return cls(name, load_function(name, what="scorer"))
            except CheckerError as exc:
                raise ScorerError(str(exc)) from None
        if not callable(scorer):
            raise ScorerError(f"a scorer is a function of (thought, path); got {type(scorer).__name__}")
        return cls(scorer_name(scorer), scorer)

    async def score(self, thought: str, path: Sequence[str]) -> Scored:
        """The thought's score, checked (ScorerError, one line, when the scorer fails or gives no score in [0, 1])."""
        if self.call is None:
            raise ScorerError(f"scorer {self.name} is named but not imported; give it again (--scorer {self.name})")
        try:
            value = self.call(thought, path)
            if inspect.isawaitable(value):
                value = await value
        except Exception as exc:  # noqa: BLE001 - a user's function may fail in any way
            raise ScorerError(f"scorer {self.name} failed: {type(exc).__name__}: {exc}") from None
        return self._checked(value)

    def _checked(self, value: object) -> Scored:
        score, reasoning = value, ""
        if isinstance(value, Scored):
            score, reasoning = value.score, value.reasoning
        elif isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], str):
            score, reasoning = value
        number = float(score) if isinstance(score, numbers.Real) else math.nan  # numpy's numbers too
        if not (math.isfinite(number) and 0 <= number <= 1):
            shown = repr(value)
            shown = shown if len(shown) <= 80 else shown[:77] + "..."
            raise ScorerError(f"scorer {self.name} must return a score in [0, 1], a (score, reasoning) pair or "
                              f"Scored; got {shown}")
        return Scored(number, reasoning)


def scorer_name(scorer: Scorer | str) -> str:
    """The name a stored run records a scorer by: its reference (a file made absolute), else module:qualname."""
    if isinstance(scorer, str):
        module, colon, function = scorer.strip().partition(":")
        return f"{os.path.abspath(module)}:{function}" if colon and module.endswith(".py") else scorer.strip()
    owner = scorer if inspect.isroutine(scorer) else type(scorer)
    return f"{getattr(owner, '__module__', '?')}:{getattr(owner, '__qualname__', type(scorer).__name__)}"


__all__ = ["Scored", "ScoreValue", "Scorer", "ScorerError", "ThoughtScorer", "scorer_name"]
