"""eager_gather runs coroutines like asyncio.gather, making tasks only for those that wait."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from thoughtloom.llm.budget import BudgetLimits
from thoughtloom.llm.gateway import Gateway
from thoughtloom.llm.types import Completion, GenerateRequest, Prompt, Usage
from thoughtloom.search.eager import eager_gather


async def _now(value: int) -> int:
    return value


async def _later(value: int, delay: float = 0.01) -> int:
    await asyncio.sleep(delay)
    return value


def test_results_come_back_in_argument_order_whether_or_not_a_coroutine_waited() -> None:
    async def main() -> list[int]:
        return await eager_gather([_later(1, 0.02), _now(2), _later(3, 0.0), _now(4)])

    assert asyncio.run(main()) == [1, 2, 3, 4]


def test_coroutines_that_finish_at_once_make_no_task() -> None:
    async def main() -> int:
        before = len(asyncio.all_tasks())
        seen: list[int] = []

        async def count() -> None:
            seen.append(len(asyncio.all_tasks()))

        await eager_gather([count() for _ in range(5)])
        return max(seen) - before

    assert asyncio.run(main()) == 0


def test_waiting_coroutines_overlap() -> None:
    async def main() -> float:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        await eager_gather([_later(i, 0.1) for i in range(10)])
        return loop.time() - t0

    assert asyncio.run(main()) < 0.5  # ten 0.1 s waits, run one after another, would take 1 s


def test_coroutines_start_in_argument_order() -> None:
    started: list[int] = []

    async def record(i: int) -> None:
        started.append(i)
        await asyncio.sleep(0.001 * (5 - i))

    asyncio.run(eager_gather([record(i) for i in range(5)]))
    assert started == [0, 1, 2, 3, 4]


def _slow(finished: list[str]) -> Callable[[], Coroutine[Any, Any, None]]:
    """A coroutine function that waits 10 s and notes "slow" in `finished` however it ends."""

    async def slow() -> None:
        try:
            await asyncio.sleep(10)
        finally:
            finished.append("slow")

    return slow


def test_an_error_cancels_the_waiting_coroutines_and_closes_the_unstarted_ones() -> None:
    finished: list[str] = []
    slow = _slow(finished)

    async def boom() -> None:
        raise ValueError("boom")

    unstarted = _now(1)

    async def main() -> None:
        await eager_gather(iter([slow(), boom(), unstarted]))

    with pytest.raises(ValueError, match="boom"):
        asyncio.run(main())
    assert finished == ["slow"]
    assert unstarted.cr_frame is None  # closed, so no "never awaited" warning


def test_an_error_after_a_wait_cancels_the_others() -> None:
    cancelled: list[bool] = []

    async def slow() -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    async def fails_later() -> None:
        await asyncio.sleep(0.01)
        raise RuntimeError("late")

    with pytest.raises(RuntimeError, match="late"):
        asyncio.run(eager_gather([slow(), fails_later()]))
    assert cancelled == [True]


def test_cancelling_the_caller_cancels_the_waiting_coroutines() -> None:
    cancelled: list[int] = []

    async def slow(i: int) -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.append(i)
            raise

    async def main() -> None:
        task = asyncio.ensure_future(eager_gather([slow(0), slow(1)]))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert sorted(cancelled) == [0, 1]


def test_a_coroutine_that_waits_ends_in_the_task_it_started_in() -> None:
    async def stays(i: int) -> bool:
        started_in = asyncio.current_task()
        await asyncio.sleep(0.001 * (3 - i))
        return asyncio.current_task() is started_in

    async def main() -> list[bool]:
        return await eager_gather([stays(i) for i in range(3)])

    assert asyncio.run(main()) == [True, True, True]


def test_only_the_coroutines_after_the_first_that_waits_get_a_task() -> None:
    async def main() -> int:
        before = len(asyncio.all_tasks())
        seen: list[int] = []

        async def count(wait: bool) -> None:
            if wait:
                await asyncio.sleep(0.001)
            seen.append(len(asyncio.all_tasks()))

        await eager_gather([count(False), count(True), count(False), count(False)])
        return max(seen) - before

    assert asyncio.run(main()) == 2


def test_an_error_in_a_task_interrupts_the_coroutine_the_caller_drives() -> None:
    finished: list[str] = []
    slow = _slow(finished)

    async def fails_later() -> None:
        await asyncio.sleep(0.01)
        raise RuntimeError("late")

    async def main() -> int:
        with pytest.raises(RuntimeError, match="late"):
            await eager_gather([slow(), fails_later()])
        task = asyncio.current_task()
        assert task is not None
        return task.cancelling()  # the interrupt was taken back: the caller is not being cancelled

    assert asyncio.run(asyncio.wait_for(main(), 5)) == 0
    assert finished == ["slow"]


class _TaskBoundBackend:
    """A backend that, like httpx under anyio, must finish in the task it started in."""

    name = "fake:task-bound"
    max_concurrency = 10

    async def generate(self, request: GenerateRequest) -> Completion:
        started_in = asyncio.current_task()
        await asyncio.sleep(0.001)
        assert asyncio.current_task() is started_in, "resumed in another task"
        return Completion(("ok",), Usage(1, 1), self.name)

    def count_tokens(self, prompt: Prompt) -> int | None:
        return 1

    async def aclose(self) -> None:
        return None


def test_each_backend_call_runs_start_to_finish_in_one_task() -> None:
    gateway = Gateway(_TaskBoundBackend(), BudgetLimits(), concurrency=4)

    async def main() -> list[Completion]:
        return await eager_gather(
            gateway.generate(GenerateRequest(Prompt(text=f"q{i}"), max_tokens=4)) for i in range(6)
        )

    assert [c.texts for c in asyncio.run(main())] == [("ok",)] * 6
