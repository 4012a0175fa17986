"""What the SDK-backed remote backends (OpenAI-compatible, Anthropic) share: a lazy client, valid reply text."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from .text import valid_text
from .types import Prompt

logger = logging.getLogger(__name__)


class LazySdkClient:
    """The SDK client a remote backend makes on its first call (`_client`, with its semaphore `_sem`)."""

    name: str
    _client: Any
    _sem: asyncio.Semaphore | None

    #: Whether a reply has already been warned of as not valid Unicode (a hostile server repeats itself).
    _warned_invalid_text: bool = False

    def _reply_text(self, text: str) -> str:
        """A reply's text as the run may keep it: a server's JSON can escape lone surrogates, which
        would fail wherever the run stores or prints the text (see thoughtloom.llm.text)."""
        fixed = valid_text(text)
        if fixed is not text and not self._warned_invalid_text:
            self._warned_invalid_text = True
            logger.warning("model endpoint %s sent text that is not valid Unicode (lone surrogates); replaced them "
                           "with U+FFFD (further ones not shown)", self.name)
        return fixed

    def count_tokens(self, prompt: Prompt) -> int | None:
        """None: a remote model's tokenizer is not available locally."""
        return None

    async def aclose(self) -> None:
        """Close the HTTP client if one was created."""
        client, self._client, self._sem = self._client, None, None
        if client is not None:
            await client.close()
