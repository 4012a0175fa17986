"""Shared fixtures."""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from machine import scaled
from openai_server import FakeOpenAIServer, serve

from thoughtloom.llm.openai_backend import OpenAIBackend

# A suite started in the background by a non-interactive shell (`pytest &`, CI runners) inherits
# SIGINT ignored, and every `loom` subprocess would inherit that: the Ctrl-C tests would then watch
# a process that cannot be interrupted. A handler (unlike "ignored") is reset to the default on exec.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


#: The hang guard of a test without a timeout of its own (pytest-timeout), for an idle machine.
TEST_TIMEOUT_S = 600


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test's hang guard, scaled to how fast and how busy this machine is when the suite starts."""
    guard = pytest.mark.timeout(scaled(TEST_TIMEOUT_S))
    for item in items:
        if item.get_closest_marker("timeout") is None:
            item.add_marker(guard)


@pytest.fixture(autouse=True)
def private_store(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs stored by `loom solve` (in-process or in a subprocess) go to a temporary store, not ~/.thoughtloom."""
    monkeypatch.setenv("THOUGHTLOOM_STORE", str(tmp_path_factory.mktemp("store") / "store.db"))


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    """A scripted OpenAI-compatible server on an ephemeral 127.0.0.1 port."""
    with serve() as fake:
        yield fake


BackendFactory = Callable[..., OpenAIBackend]


@pytest.fixture
async def backend_for(server: FakeOpenAIServer) -> AsyncIterator[BackendFactory]:
    """Make backends pointed at the fake server (keyword arguments override); closed after the test."""
    made: list[OpenAIBackend] = []

    def make(**kwargs: Any) -> OpenAIBackend:
        options: dict[str, Any] = {"model": "test-model", "base_url": server.url, "api_key": "sk-test"}
        options.update(kwargs)
        made.append(OpenAIBackend(**options))
        return made[-1]

    yield make
    for backend in made:
        await backend.aclose()


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A clean XDG cache (and no data directory from the environment); the data folder inside it (`loom data` tests)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("THOUGHTLOOM_DATA", raising=False)
    monkeypatch.delenv("THOUGHTLOOM_DATA_URL", raising=False)
    return tmp_path / "xdg" / "thoughtloom" / "data"
