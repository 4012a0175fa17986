"""The flow's pluggable roles: brancher, evaluator and synthesizer, each a function of the caller's or the built-in one.

A role given as a function replaces the built-in one: it may be plain or async, and what it
returns is read leniently (a list of strings or Proposals; a float; a string, a (string,
confidence) pair or a SynthesisReply). A role can also keep the built-in prompts and run on a
different model: name a model spec per role (RunSpec.role_models, `--brancher-model`, ...), and
its calls go to that model through the same budget, record and replay as every other call.
Functions are the caller's code: calls they make to a model outside thoughtloom are not counted.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ...tasks.research import Proposal, SynthesisReply, proposal_of
from .records import Hypothesis


@dataclass(frozen=True, slots=True)
class BranchRequest:
    """What a brancher is asked: n hypotheses for the question, from passages (the question's) or as alternatives
    to one."""

    question: str
    n: int
    #: The hypothesis to branch from (None: the question itself).
    hypothesis: Hypothesis | None = None
    #: (citation, text) of passages found for the question.
    passages: tuple[tuple[str, str], ...] = ()


class Brancher(Protocol):
    """Proposes hypotheses."""

    def __call__(self, request: BranchRequest) -> Any:
        """Strings or Proposals (or an awaitable of them)."""
        ...


class Evaluator(Protocol):
    """Says how confident the flow should be in a hypothesis, given its evidence."""

    def __call__(self, hypothesis: Hypothesis) -> Any:
        """A confidence from 0 to 1 (or an awaitable of one)."""
        ...


class Synthesizer(Protocol):
    """Writes one answer from several hypotheses."""

    def __call__(self, question: str, hypotheses: Sequence[Hypothesis]) -> Any:
        """A string, a (string, confidence) pair or a SynthesisReply (or an awaitable of one)."""
        ...


@dataclass(frozen=True, slots=True)
class ResearchRoles:
    """The caller's own roles (None: the built-in one, on the run's model or on the role's model)."""

    brancher: Brancher | Callable[..., Any] | None = None
    evaluator: Evaluator | Callable[..., Any] | None = None
    synthesizer: Synthesizer | Callable[..., Any] | None = None


class RoleError(ValueError):
    """A caller's role returned something the flow cannot read."""


async def call(fn: Callable[..., Any], *args: Any) -> Any:
    """Call a role, awaiting it when it is async."""
    out = fn(*args)
    return await out if inspect.isawaitable(out) else out


def read_proposals(value: Any) -> list[Proposal]:
    """A brancher's answer as proposals."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise RoleError(f"a brancher returns a list of hypotheses; got {type(value).__name__}")
    out = []
    for item in value:
        if isinstance(item, Proposal):
            out.append(item)
        elif isinstance(item, str) and (proposal := proposal_of(item)) is not None:
            out.append(proposal)
        else:
            raise RoleError(f"a brancher's hypotheses are strings or Proposals; got {type(item).__name__}")
    return out


def read_confidence(value: Any) -> float:
    """An evaluator's answer as a confidence."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= float(value) <= 1.0:
        raise RoleError(f"an evaluator returns a confidence between 0 and 1; got {value!r}")
    return float(value)


def read_synthesis(value: Any) -> SynthesisReply:
    """A synthesizer's answer as a reply."""
    if isinstance(value, SynthesisReply):
        return value
    if isinstance(value, str) and value.strip():
        return SynthesisReply(value.strip(), "")
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str):
        return SynthesisReply(value[0].strip(), "", read_confidence(value[1]))
    raise RoleError(f"a synthesizer returns text, (text, confidence) or a SynthesisReply; got {value!r}")
