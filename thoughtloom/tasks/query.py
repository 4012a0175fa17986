"""What a task hands the engine: a prompt with its generation settings, and a validator's verdict."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..llm.text import loads_valid
from ..llm.types import Prompt, value_type


@value_type
class Query:
    """A prompt with the generation settings it needs."""

    prompt: Prompt
    max_tokens: int = 256
    stop: tuple[str, ...] = ()
    temperature: float | None = None  # None: the search's configured temperature
    #: A JSON Schema (canonical JSON text) the reply should match, where the backend can enforce it.
    schema: str | None = None
    #: Every valid reply, when the task can list them (its legal next steps, a verdict's words).
    #: The engine then lets the model choose among them: their distribution in one pass where
    #: the backend can score choices, otherwise samples constrained to them where it can.
    choices: tuple[str, ...] = ()
    #: Function definitions (llm.tool_calls.definitions_text) sent through the endpoint's function calling;
    #: the reply is then the calls the model made (llm.tool_calls.read_tool_calls).
    tools: str | None = None


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the task's exact validator says of a proposed thought."""

    ok: bool
    thought: str  # the thought to keep, possibly repaired
    note: str | None = None  # why it was rejected or what was repaired

    @property
    def repaired(self) -> bool:
        """True when the validator changed the thought."""
        return self.ok and self.note is not None


def schema_text(schema: dict[str, Any]) -> str:
    """A JSON Schema as a Query carries it: sorted and compact, so a stored request's key is the same text each time."""
    return json.dumps(schema, sort_keys=True, separators=(",", ":"))


def json_object(text: str) -> dict[str, Any] | None:
    """A reply that is one JSON object (what a structured request asks for), or None."""
    try:
        value = loads_valid(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


@dataclass(frozen=True, slots=True)
class Tally:
    """Sibling thoughts compared without a model: each one's share of the agreeing answers, and
    which of them an agreement settles (goals)."""

    shares: tuple[float, ...]  # one per thought tallied, in [0, 1]
    agreed: frozenset[int] = frozenset()  # indexes of the thoughts whose answer enough samples reached
    #: What the count says of each thought, for a person ("3 of 5 samples printed 20"); empty: nothing.
    notes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Sampled:
    """A thought and how many of the samples drawn gave it (a vote counts each)."""

    thought: str
    times: int = 1
