"""eager_gather: asyncio.gather that makes a task only for the coroutines that must overlap.

A search gathers thousands of small coroutines (one per expansion, one per value call). Against
a fast model (a response-cache hit, a backend that answers without waiting) most of them finish
without ever waiting, and wrapping each in an asyncio Task costs more than the work itself. So
each coroutine runs at once, in order, in the caller's task. The first one that waits stays in
the caller's task, which drives it to its end; every coroutine after it starts in a task of its
own, so that they overlap. Coroutines start in the same order as with gather, so results and the
order of model calls do not change.

No coroutine ever moves from one task to another: code that keeps per-task state across a wait
(anyio cancel scopes inside httpx, TaskGroups, asyncio.timeout) runs start to end in the task
it started in, so model clients need no task of their own.

What it costs: coroutines that never wait never yield to the event loop. Against an in-process
model or the response cache a whole level of the search runs without a pause, and a cancellation
(Ctrl-C) lands at the next real wait: the next model call that leaves the process.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterable, Sequence
from typing import Any, TypeVar

from ..llm.inline import drive

T = TypeVar("T")


async def eager_gather(coros: Iterable[Coroutine[Any, Any, T]]) -> list[T]:
    """Run the coroutines concurrently and return their results in order.

    The first exception is raised once the others have been cancelled (or never started).
    """
    results: list[Any] = []
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
            raise
        index = len(results)
        results.append(None)
        # The ones after the first that waits overlap with it: each in a task of its own.
        tasks = [asyncio.ensure_future(rest) for rest in todo]
        results[index] = await _drive(coro, yielded, tasks)
        if tasks:
            try:
                results += await asyncio.gather(*tasks)
            except BaseException:
                await _cancel_all(tasks)
                raise
        return results
    return results


async def _drive(coro: Coroutine[Any, Any, T], yielded: Any, tasks: Sequence[asyncio.Future[Any]]) -> T:
    """Drive a coroutine that waits, in this task, to its end, as the task itself would.

    A task of `tasks` that fails meanwhile interrupts it (with a cancel of this task, taken back
    once the coroutine has ended), as gather would cancel it; a cancel of this task cancels the
    tasks too.
    """
    caller = asyncio.current_task()
    cancels = caller.cancelling() if caller is not None else 0
    failed: list[BaseException] = []
    driving = True

    def interrupt(task: asyncio.Future[Any]) -> None:
        if not driving or failed or caller is None:
            return
        error = asyncio.CancelledError() if task.cancelled() else task.exception()
        if error is not None:
            failed.append(error)
            caller.cancel()

    for task in tasks:
        task.add_done_callback(interrupt)
    try:
        value = await drive(coro, yielded)
    except BaseException:
        driving = False
        await _cancel_all(tasks)
        if failed and caller is not None:
            caller.uncancel()  # our own interrupt, not the caller's cancellation
            if caller.cancelling() <= cancels:
                raise failed[0] from None
        raise
    driving = False
    if failed and caller is not None:  # it ended (or swallowed the interrupt) as a task failed
        caller.uncancel()
        await _cancel_all(tasks)
        raise failed[0]
    if caller is not None and caller.cancelling() > cancels:
        # The caller was cancelled while the coroutine ran, and the coroutine swallowed it.
        await _cancel_all(tasks)
        raise asyncio.CancelledError()
    return value


async def _cancel_all(tasks: Sequence[asyncio.Future[Any]]) -> None:
    """Cancel the tasks still running and let them clean up."""
    live = [t for t in tasks if not t.done()]
    for t in live:
        t.cancel()
    if live:
        await asyncio.gather(*live, return_exceptions=True)
    for t in tasks:
        if t.done() and not t.cancelled():
            t.exception()  # retrieved: an error it ended with is not "never retrieved"
