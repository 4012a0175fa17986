"""Slots: the gateway's FIFO semaphore."""

from __future__ import annotations

import asyncio

import pytest

from thoughtloom.llm.slots import Slots


async def test_no_more_than_size_holders_at_once() -> None:
    slots, held, peak = Slots(3), 0, 0

    async def work() -> None:
        nonlocal held, peak
        async with slots:
            held += 1
            peak = max(peak, held)
            await asyncio.sleep(0.001)
            held -= 1

    await asyncio.gather(*(work() for _ in range(20)))
    assert peak == 3
    assert slots.free == 3


async def test_waiters_are_served_first_come_first_served() -> None:
    slots, order = Slots(1), []
    await slots.acquire()

    async def wait(i: int) -> None:
        async with slots:
            order.append(i)

    tasks = [asyncio.create_task(wait(i)) for i in range(5)]
    await asyncio.sleep(0)
    slots.release()
    await asyncio.gather(*tasks)
    assert order == [0, 1, 2, 3, 4]


async def test_a_cancelled_waiter_does_not_lose_the_slot() -> None:
    slots = Slots(1)
    await slots.acquire()
    waiter = asyncio.create_task(slots.acquire())
    await asyncio.sleep(0)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    slots.release()
    assert slots.free == 1


def test_size_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="size must be >= 1"):
        Slots(0)


async def test_try_acquire_takes_a_free_slot_and_never_waits() -> None:
    slots = Slots(1)
    assert slots.try_acquire() is True
    assert slots.try_acquire() is False
    slots.release()
    assert slots.free == 1


async def test_try_acquire_does_not_jump_the_queue_of_waiters() -> None:
    slots = Slots(1)
    await slots.acquire()
    waiter = asyncio.ensure_future(slots.acquire())
    await asyncio.sleep(0)
    slots.release()  # the slot passes to the waiter
    assert slots.try_acquire() is False
    await waiter
