"""Batched calls: several requests answered by one backend call, each charged and recorded as its own."""

from __future__ import annotations

import pytest

from thoughtloom.llm.budget import BudgetLimits
from thoughtloom.llm.cache import MemoryCache
from thoughtloom.llm.errors import BudgetExceeded, ModelError, TransientModelError
from thoughtloom.llm.fake import ScriptedBackend
from thoughtloom.llm.gateway import Gateway, RetryPolicy
from thoughtloom.llm.types import GenerateRequest, Prompt, Usage

FAST = RetryPolicy(base_delay_s=0.001, max_delay_s=0.001)


def req(text: str, **kw) -> GenerateRequest:
    return GenerateRequest(Prompt(text), **kw)


def batching(**kw) -> ScriptedBackend:
    return ScriptedBackend(responder=lambda r, i: f"re {r.prompt.text} {i}", supports_batch=True, **kw)


async def test_a_batch_is_one_backend_call_with_one_completion_per_request() -> None:
    fake = batching()
    gw = Gateway(fake, retry=FAST)
    out = await gw.generate_batch([req("a b", max_tokens=8), req("c", max_tokens=8)])
    assert [c.texts for c in out] == [("re a b 0",), ("re c 0",)]
    assert fake.batch_sizes == [2]


async def test_each_request_of_a_batch_is_charged_and_recorded_as_its_own_call() -> None:
    gw = Gateway(batching(), BudgetLimits(tokens=1000), retry=FAST)
    out = await gw.generate_batch([req("a b", max_tokens=8), req("c", max_tokens=8)])
    assert [c.usage for c in out] == [Usage(2, 4), Usage(1, 3)]
    assert gw.budget.spent == Usage(3, 7) and gw.budget.calls == 2
    assert [(r.seq, r.texts, r.usage) for r in gw.records] == [(0, ("re a b 0",), Usage(2, 4)), (1, ("re c 0",), Usage(1, 3))]


async def test_a_batch_that_does_not_fit_the_budget_as_a_whole_is_refused_without_spending() -> None:
    fake = batching()
    gw = Gateway(fake, BudgetLimits(tokens=17), retry=FAST)
    with pytest.raises(BudgetExceeded):
        await gw.generate_batch([req("a", max_tokens=8), req("b", max_tokens=8)])  # 2 x (1 + 8) > 17
    assert fake.calls == [] and gw.budget.spent == Usage() and gw.budget.reserved_tokens == 0
    assert gw.budget.in_flight == 0
    assert all(r.error and "BudgetExceeded" in r.error for r in gw.records)


async def test_a_batch_is_not_shrunk_to_fit_the_budget() -> None:
    gw = Gateway(batching(), BudgetLimits(tokens=60), retry=FAST)
    with pytest.raises(BudgetExceeded):
        await gw.generate_batch([req("a", max_tokens=30), req("b", max_tokens=30)])
    assert (await gw.generate(req("a", max_tokens=30))).texts  # alone, the same request is shrunk and made


async def test_the_call_limit_counts_every_request_of_a_batch() -> None:
    gw = Gateway(batching(), BudgetLimits(calls=1), retry=FAST)
    with pytest.raises(BudgetExceeded):
        await gw.generate_batch([req("a"), req("b")])


async def test_cached_requests_of_a_batch_are_not_sent_again() -> None:
    fake = batching()
    gw = Gateway(fake, cache=MemoryCache(), retry=FAST)
    await gw.generate(req("a"))
    out = await gw.generate_batch([req("a"), req("b")])
    assert [c.texts for c in out] == [("re a 0",), ("re b 0",)]
    assert [r.prompt.text for r in fake.calls] == ["a", "b"] and fake.batch_sizes == [1]
    assert out[0].usage == Usage() and gw.records[1].cached == 1


async def test_a_batch_answered_entirely_from_the_cache_makes_no_backend_call() -> None:
    fake = batching()
    gw = Gateway(fake, cache=MemoryCache(), retry=FAST)
    await gw.generate_batch([req("a"), req("b")])
    again = await gw.generate_batch([req("a"), req("b")])
    assert [c.texts for c in again] == [("re a 0",), ("re b 0",)]
    assert fake.batch_sizes == [2]


async def test_a_transient_failure_retries_the_whole_batch() -> None:
    fake = batching(failures=[TransientModelError("busy")])
    gw = Gateway(fake, BudgetLimits(tokens=1000), retry=FAST)
    out = await gw.generate_batch([req("a"), req("b")])
    assert len(out) == 2 and fake.batch_sizes == [2, 2]
    assert [r.attempts for r in gw.records] == [2, 2]


async def test_a_failed_batch_releases_every_reservation_and_records_the_error() -> None:
    gw = Gateway(batching(failures=[ModelError("broken")]), BudgetLimits(tokens=1000), retry=FAST)
    with pytest.raises(ModelError):
        await gw.generate_batch([req("a"), req("b")])
    assert gw.budget.reserved_tokens == 0 and gw.budget.in_flight == 0 and gw.budget.spent == Usage()
    assert [r.error for r in gw.records] == ["ModelError: broken"] * 2


async def test_generate_batch_is_refused_for_a_backend_that_does_not_batch() -> None:
    gw = Gateway(ScriptedBackend(default="x"), retry=FAST)
    assert gw.batches is False
    with pytest.raises(TypeError, match="does not answer batches"):
        await gw.generate_batch([req("a"), req("b")])
