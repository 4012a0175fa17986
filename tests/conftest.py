"""Shared fixtures."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from openai_server import FakeOpenAIServer, serve


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    """A scripted OpenAI-compatible server on an ephemeral 127.0.0.1 port."""
    with serve() as fake:
        yield fake
