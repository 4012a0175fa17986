"""Work done once per key (a program run in the sandbox), shared by everyone who asks for it, with a cap.

A task's thoughts are often needed by several steps (the vote among siblings, the grounder, the
final answer): each asks for the same program's run. The first asker runs it, later ones wait
for that run rather than starting another; at most `concurrency` run at a time (they compete for
the CPU with the model) and the last `keep` results are kept.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class RunOnce(Generic[K, V]):
    """Results by key, each made once within the owner's life (up to `keep` of them remembered)."""

    def __init__(self, *, concurrency: int = 2, keep: int = 4096) -> None:
        """concurrency: runs at a time; keep: results remembered (the oldest forgotten first)."""
        self._concurrency = concurrency
        # One semaphore per event loop: an owner (a task object) may serve several asyncio.run() calls in turn.
        self._slots: tuple[asyncio.AbstractEventLoop, asyncio.Semaphore] | None = None
        self._keep = keep
        self._done: dict[K, V] = {}
        self._running: dict[K, asyncio.Future[V]] = {}

    async def get(self, key: K, make: Callable[[], Awaitable[V]]) -> V:
        """The result for `key`, made now by `make` or earlier (a run under way is waited for, not repeated)."""
        if key in self._done:
            return self._done[key]
        running = self._running.get(key)
        if running is not None:
            try:
                return await asyncio.shield(running)
            except asyncio.CancelledError:
                if not running.cancelled():
                    raise  # this waiter was cancelled, not the run it waited for
                return await self.get(key, make)  # the run's owner was cancelled: run it here
        future: asyncio.Future[V] = asyncio.get_running_loop().create_future()
        self._running[key] = future
        try:
            async with self._semaphore():
                result = await make()
        except asyncio.CancelledError:
            future.cancel()
            raise
        except Exception as exc:
            future.set_exception(exc)
            future.exception()  # retrieved here: a waiter may never come
            raise
        finally:
            del self._running[key]
        if len(self._done) >= self._keep:
            self._done.pop(next(iter(self._done)))
        self._done[key] = result
        future.set_result(result)
        return result

    def known(self, key: K) -> V | None:
        """The result made already for `key`; None when it was not made (or was forgotten)."""
        return self._done.get(key)

    def _semaphore(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        if self._slots is None or self._slots[0] is not loop:
            self._slots = (loop, asyncio.Semaphore(self._concurrency))
        return self._slots[1]
