"""Running a coroutine inside the caller's own task: at once, and driven on only if it waits.

A model call that answers without waiting (a fake, a replay, a cache in front of the model)
should cost a function call, not an asyncio task and a pass through the event loop. So the
gateway starts a backend's coroutine itself (`coroutine.send(None)`): when it finishes at once
the answer is there; when it waits, `drive` passes what it waits on up to the task (and what
the task throws in back down), exactly as `await` would, so the call still runs start to end
in one task.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Generator
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class Later(Generic[T]):
    """The part of a call that could not be done at once: await it (exactly once) for the result.

    `Gateway.start` and `SearchContext.ask_now` answer a call at once when the model does, and
    return a Later otherwise. Whatever the call holds (a concurrency slot, a budget reservation)
    is given back when the Later is awaited to its end, so it must not be dropped.
    """

    __slots__ = ("coro",)

    def __init__(self, coro: Coroutine[Any, Any, T]) -> None:
        self.coro = coro

    def __await__(self) -> Generator[Any, Any, T]:
        return self.coro.__await__()


class Relay:
    """An awaitable that passes one yielded item up to the running task, unchanged."""

    __slots__ = ("item",)

    def __init__(self, item: Any) -> None:
        self.item = item

    def __await__(self) -> Generator[Any, Any, Any]:
        return (yield self.item)


async def drive(coro: Coroutine[Any, Any, T], yielded: Any) -> T:
    """Drive a coroutine that already ran up to its first wait (it yielded `yielded`) to its end."""
    while True:
        try:
            await Relay(yielded)
        except BaseException as exc:  # noqa: BLE001 - a cancellation (or error) the task throws in goes to the coroutine
            try:
                yielded = coro.throw(exc)
            except StopIteration as stop:
                return stop.value
            continue
        try:
            yielded = coro.send(None)
        except StopIteration as stop:
            return stop.value


async def cancellable(coro: Coroutine[Any, Any, T], yielded: Any) -> T:
    """`drive`, and a cancel of the caller requested meanwhile always reaches the caller.

    A client may turn a cancel into an error of its own (or a result): the caller would then go
    on running, and Ctrl-C would not stop a search. So a cancel requested while the call waited
    is raised here whatever the client made of it.
    """
    task = asyncio.current_task()
    cancels = task.cancelling() if task is not None else 0
    try:
        result = await drive(coro, yielded)
    except asyncio.CancelledError:
        raise
    except BaseException as exc:
        if task is not None and task.cancelling() > cancels:
            raise asyncio.CancelledError() from exc
        raise
    if task is not None and task.cancelling() > cancels:
        raise asyncio.CancelledError()
    return result


async def call_inline(coro: Coroutine[Any, Any, T]) -> T:
    """Await `coro` in this task: no wait at all when it answers at once (see `cancellable`)."""
    try:
        yielded = coro.send(None)
    except StopIteration as stop:
        return stop.value
    return await cancellable(coro, yielded)
