"""A backend around another backend: the base of the limiting, recording and replaying wrappers.

A wrapper forwards every attribute it does not define itself to the backend it wraps (name,
max_concurrency, supports_batch, capabilities, and any a backend adds later), so a
wrapper never has to copy, and can never forget, what the backend it wraps declares. Wrappers
are composed when a run is built (see thoughtloom.run.execute), never patched into a gateway.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .types import Backend, Completion, GenerateRequest, Prompt


class BackendWrapper:
    """Forwards everything to `inner`; subclasses override what they change."""

    def __init__(self, inner: Backend) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        # Reached only for attributes the wrapper lacks; "inner" itself must not recurse.
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    async def generate(self, request: GenerateRequest) -> Completion:
        """The wrapped backend's answer."""
        return await self.inner.generate(request)

    async def generate_batch(self, requests: Sequence[GenerateRequest]) -> list[Completion]:
        """The wrapped backend's answers to a batch."""
        return await self.inner.generate_batch(requests)  # type: ignore[attr-defined]

    def count_tokens(self, prompt: Prompt) -> int | None:
        """The wrapped backend's count."""
        return self.inner.count_tokens(prompt)

    async def aclose(self) -> None:
        """Close the wrapped backend."""
        await self.inner.aclose()


class SharedBackend(BackendWrapper):
    """A backend several runs share (one loaded model for a benchmark's lanes): closing a run leaves it open."""

    async def aclose(self) -> None:
        """The owner closes the shared backend once, when every run is done."""
