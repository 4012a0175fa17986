"""Response cache keyed by model, prompt, parameters and sample index."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Hashable
from typing import Protocol

from .types import GenerateRequest

SampleKey = tuple[Hashable, ...]


def sample_key(model: str, request: GenerateRequest, index: int) -> SampleKey:
    """Cache key of one sample: the sample index is part of it so caching keeps sample diversity.

    A plain tuple: hashing it is cheap (strings cache their hash), which keeps the per-call cost
    of the in-memory cache low. Stores that persist keys use `digest(key)`.
    """
    # A role's own model answers a routed request: the same prompt to another model is another sample.
    # A pinned prompt form is another reading of the prompt (GenerateRequest.form): another sample.
    key: SampleKey = (
        model if request.route is None else f"{model}#{request.route}",
        request.prompt.text,
        request.prompt.messages,
        request.max_tokens,
        request.temperature,
        request.stop,
        request.seed,
        index,
        request.schema,
        request.form,
    )
    # The fields below join only when set (appended, not unpacked into the tuple: this runs once per call).
    if request.choices:  # a distribution over the choices and a sample constrained to them are different replies
        key += (("choices", request.choices, request.score_choices),)
    if request.tools is not None:  # function definitions on the wire make the reply the model's calls
        key += (("tools", request.tools),)
    return key


def digest(key: SampleKey) -> str:
    """A stable hex digest of a sample key, the same in every process (for persistent caches)."""
    model, text, messages, max_tokens, temperature, stop, seed, index, schema, form, *tail = key
    choices = [t for t in tail if t[0] == "choices"]  # type: ignore[index]
    tools = [t[1] for t in tail if t[0] == "tools"]  # type: ignore[index]
    assert isinstance(stop, tuple) and (messages is None or isinstance(messages, tuple))  # as sample_key builds them
    # Fields added later join only when set, so keys persisted before them keep their digests.
    payload = json.dumps(
        [model, text, [[m.role, m.content] for m in messages] if messages else None,
         max_tokens, temperature, list(stop), seed, index, *([schema] if schema is not None else []),
         *([{"form": form}] if form is not None else []),
         *([[list(c[1]), c[2]] for c in choices]),  # type: ignore[index]
         *([{"tools": t} for t in tools])],
        ensure_ascii=False, separators=(",", ":"),
    )
    return hashlib.sha256(payload.encode()).hexdigest()


class ResponseCache(Protocol):
    """Where sample texts are kept between identical calls."""

    def get(self, key: SampleKey) -> str | None:
        """The cached text, or None."""
        ...

    def put(self, key: SampleKey, text: str) -> None:
        """Remember a text."""
        ...


class MemoryCache:
    """A dict-backed ResponseCache for one process."""

    def __init__(self) -> None:
        self._data: dict[SampleKey, str] = {}

    def get(self, key: SampleKey) -> str | None:
        """The cached text, or None."""
        return self._data.get(key)

    def put(self, key: SampleKey, text: str) -> None:
        """Remember a text."""
        self._data[key] = text

    def __len__(self) -> int:
        return len(self._data)
