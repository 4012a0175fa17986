"""An OpenAIServer (thoughtloom.llm.serve) run for real on a free 127.0.0.1 port, its own event loop in a thread."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from thoughtloom.llm.serve import OpenAIServer, ServedModel, ServedSearches


@contextmanager
def running(model: ServedModel | None, searches: ServedSearches | None = None) -> Iterator[str]:
    """Serve `model` (and `searches`) for the block; yields the base URL."""
    started: dict[str, object] = {}
    ready = threading.Event()

    async def main() -> None:
        async with OpenAIServer(model, "127.0.0.1", 0, searches=searches) as server:
            started["url"], started["task"] = server.url, asyncio.current_task()
            ready.set()
            await server.serve_forever()

    loop = asyncio.new_event_loop()

    def run() -> None:
        try:
            loop.run_until_complete(main())
        except asyncio.CancelledError:
            pass
        finally:
            ready.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert ready.wait(60) and "url" in started
    try:
        yield str(started["url"])
    finally:
        loop.call_soon_threadsafe(started["task"].cancel)  # type: ignore[union-attr]
        thread.join(60)
        loop.close()
