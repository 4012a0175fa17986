"""What the SDK-backed remote backends (OpenAI-compatible, Anthropic) share: a client made on first use."""

from __future__ import annotations

import asyncio
from typing import Any

from .types import Prompt


class LazySdkClient:
    """The SDK client a remote backend makes on its first call (`_client`, with its semaphore `_sem`)."""

    _client: Any
    _sem: asyncio.Semaphore | None

    def count_tokens(self, prompt: Prompt) -> int | None:
        """None: a remote model's tokenizer is not available locally."""
        return None

    async def aclose(self) -> None:
        """Close the HTTP client if one was created."""
        client, self._client, self._sem = self._client, None, None
        if client is not None:
            await client.close()
