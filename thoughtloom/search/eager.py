"""eager_gather: asyncio.gather that makes a task only for the coroutines that really wait.

A search gathers thousands of small coroutines (one per expansion, one per value call). Against
a fast model (a response-cache hit, an in-process fake) most of them finish without ever
waiting, and wrapping each in an asyncio Task costs more than the work itself. Like Python 3.12's
eager task factory, but local to the call: each coroutine runs at once, in order, up to its first
real wait; only then is the rest of it handed to a task. Coroutines start in the same order as
with gather, so results and the order of model calls do not change.

The one rule: a coroutine may start in its caller's task and finish in a new one, so code that
keeps per-task state across a wait (anyio cancel scopes inside httpx, TaskGroups) must run in a
task of its own. The gateway does that for backends not marked `eager_safe`, and the search for
grounders.

What it costs: coroutines that never wait never yield to the event loop. Against an in-process
model or the response cache a whole level of the search runs without a pause, and a cancellation
(Ctrl-C) lands at the next real wait: the next model call that leaves the process.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Generator, Iterable
from typing import Any, TypeVar

T = TypeVar("T")


class _Relay:
    """An awaitable that passes one yielded item up to the running task, unchanged."""

    __slots__ = ("item",)

    def __init__(self, item: Any) -> None:
        self.item = item

    def __await__(self) -> Generator[Any, Any, Any]:
        return (yield self.item)


async def _resume(coro: Coroutine[Any, Any, T], yielded: Any) -> T:
    """Drive a coroutine that already ran up to its first wait, as the task driving us would."""
    while True:
        try:
            await _Relay(yielded)
        except BaseException as exc:  # a cancellation (or error) the task throws in goes to the coroutine
            try:
                yielded = coro.throw(exc)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
            continue
        try:
            yielded = coro.send(None)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]


async def eager_gather(coros: Iterable[Coroutine[Any, Any, T]]) -> list[T]:
    """Run the coroutines concurrently and return their results in order.

    The first exception is raised once the others have been cancelled (or never started).
    """
    results: list[Any] = []
    waiting: list[tuple[int, Coroutine[Any, Any, T], asyncio.Future[T]]] = []
    todo = iter(coros)
    for coro in todo:
        try:
            yielded = coro.send(None)
        except StopIteration as stop:
            results.append(stop.value)
            continue
        except BaseException:
            for rest in todo:
                rest.close()
            await _cancel_all(waiting)
            raise
        waiting.append((len(results), coro, asyncio.ensure_future(_resume(coro, yielded))))
        results.append(None)
    if waiting:
        try:
            done = await asyncio.gather(*(f for _, _, f in waiting))
        except BaseException:
            await _cancel_all(waiting)
            raise
        for (index, _, _), value in zip(waiting, done):
            results[index] = value
    return results


async def _cancel_all(waiting: list[tuple[int, Coroutine[Any, Any, Any], asyncio.Future[Any]]]) -> None:
    """Cancel the coroutines still waiting and let them clean up."""
    live = [f for _, _, f in waiting if not f.done()]
    for f in live:
        f.cancel()
    if live:
        await asyncio.gather(*live, return_exceptions=True)
    for _, coro, _ in waiting:
        # A task cancelled before its first step never resumed its coroutine, which already
        # ran up to a wait: close it so that its cleanup (finally blocks) runs now.
        if coro.cr_frame is not None:
            coro.close()
