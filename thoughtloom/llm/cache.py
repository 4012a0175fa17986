"""Response cache keyed by model, prompt, parameters and sample index."""

from __future__ import annotations

import hashlib
import json
from typing import Protocol

from .types import GenerateRequest


def sample_key(model: str, request: GenerateRequest, index: int) -> str:
    """Cache key of one sample: the sample index is part of it so caching keeps sample diversity."""
    p = request.prompt
    payload = json.dumps(
        [
            model,
            p.text,
            [[m.role, m.content] for m in p.messages] if p.messages else None,
            request.max_tokens,
            request.temperature,
            list(request.stop),
            request.seed,
            index,
        ],
        ensure_ascii=False,
        separators=(",", ":"),
    )
    return hashlib.sha256(payload.encode()).hexdigest()


class ResponseCache(Protocol):
    """Where sample texts are kept between identical calls."""

    def get(self, key: str) -> str | None:
        """The cached text, or None."""
        ...

    def put(self, key: str, text: str) -> None:
        """Remember a text."""
        ...


class MemoryCache:
    """A dict-backed ResponseCache for one process."""

    def __init__(self) -> None:
        self._data: dict[str, str] = {}

    def get(self, key: str) -> str | None:
        """The cached text, or None."""
        return self._data.get(key)

    def put(self, key: str, text: str) -> None:
        """Remember a text."""
        self._data[key] = text

    def __len__(self) -> int:
        return len(self._data)
