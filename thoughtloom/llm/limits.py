"""A model-concurrency limit several runs share, within one process or across processes.

`loom bench` runs many (lane, problem) searches over one loaded model or one server; each gets
its own gateway and budget, and all of them wait for a `SharedSlots` slot before a call goes to
the model, so the model never serves more than `limit` calls at once however many runs are in
flight. With `slots_dir`, processes sharing the directory share the limit (lock files).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Protocol

from .. import filelocks
from .types import Backend, Completion, GenerateRequest
from .wrapper import BackendWrapper

#: Why processes cannot share a limit here (one line, for the bench to refuse with).
NO_SHARED_SLOTS = ("several processes share a model limit through file locks, which this platform lacks (no fcntl "
                   "module): run one process (no --workers, no --shard)")


class ModelLimit(Protocol):
    """A model-concurrency limit: entered around each model call; `limit` calls at most are inside at once."""

    limit: int

    async def __aenter__(self) -> None: ...

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None: ...


class SharedSlots:
    """A model-concurrency limit: an asyncio semaphore, plus lock files when processes share it."""

    def __init__(self, limit: int, slots_dir: Path | None = None) -> None:
        """ValueError (one line) when processes are to share the limit on a platform without file locks."""
        if slots_dir is not None and not filelocks.available():
            raise ValueError(NO_SHARED_SLOTS)
        self.limit = max(1, limit)
        self._sem = asyncio.Semaphore(self.limit)
        self._dir = slots_dir
        self._held: list[int] = []  # fds of the slot files this process holds

    async def __aenter__(self) -> None:
        await self._sem.acquire()
        if self._dir is None:
            return
        self._dir.mkdir(parents=True, exist_ok=True)
        # Cross-process: hold one of `limit` lock files; poll, since flock cannot be awaited.
        while True:
            for i in range(self.limit):
                fd = os.open(self._dir / f"slot-{i}.lock", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
                try:
                    locked = filelocks.lock(fd, wait=False)
                except OSError:
                    locked = False
                if not locked:
                    os.close(fd)
                    continue
                self._held.append(fd)  # held until __aexit__
                return
            await asyncio.sleep(0.05)

    async def __aexit__(self, *exc: object) -> None:
        if self._dir is not None and self._held:
            fd = self._held.pop()
            filelocks.unlock(fd)
            os.close(fd)
        self._sem.release()


class LimitedBackend(BackendWrapper):
    """A backend whose calls each wait for a slot of a shared ModelLimit."""

    def __init__(self, inner: Backend, slots: ModelLimit) -> None:
        super().__init__(inner)
        self.slots = slots
        #: Calls (a batch counts once) that went through this wrapper.
        self.calls = 0

    @property
    def max_concurrency(self) -> int:
        """The wrapped backend's, capped by the shared limit."""
        return min(self.inner.max_concurrency, self.slots.limit)

    async def generate(self, request: GenerateRequest) -> Completion:
        """One call, within the shared limit."""
        async with self.slots:
            self.calls += 1
            return await self.inner.generate(request)

    async def generate_batch(self, requests: Sequence[GenerateRequest]) -> list[Completion]:
        """One batched call, within the shared limit."""
        async with self.slots:
            self.calls += 1
            return await self.inner.generate_batch(requests)  # type: ignore[attr-defined]
