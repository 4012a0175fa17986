"""The model gateway: hard budget, concurrency, retries, cache and call records."""

from __future__ import annotations

import asyncio
import random
import time

import pytest

from thoughtloom.llm.budget import Budget, BudgetLimits, Pricing
from thoughtloom.llm.cache import MemoryCache, sample_key
from thoughtloom.llm.errors import BudgetExceeded, ModelError, TransientModelError
from thoughtloom.llm.fake import ScriptedBackend
from thoughtloom.llm.gateway import (
    MIN_USEFUL_TOKENS,
    CallRecord,
    Gateway,
    RetryPolicy,
    prompt_token_bound,
)
from thoughtloom.llm.types import Completion, GenerateRequest, Message, Prompt, Usage

FAST = RetryPolicy(base_delay_s=0.001, max_delay_s=0.001)
PROMPT3 = "one two three"  # the fake counts 3 prompt tokens (words)
DOLLAR_PER_TOKEN = Pricing(input_per_mtok=1_000_000, output_per_mtok=1_000_000)


def req(text: str = PROMPT3, **kw) -> GenerateRequest:
    return GenerateRequest(Prompt(text), **kw)


def words(n: int) -> str:
    return " ".join(["w"] * n)


def gateway(backend: ScriptedBackend, limits: BudgetLimits | Budget | None = None, **kw) -> Gateway:
    kw.setdefault("retry", FAST)
    return Gateway(backend, limits, **kw)


async def attempt(gw: Gateway, request: GenerateRequest) -> str | None:
    """Run one call; None when the budget refused it (any other error propagates)."""
    try:
        return (await gw.generate(request)).texts[0]
    except BudgetExceeded:
        return None


# --- the hard token budget -------------------------------------------------------------------


async def test_fifty_concurrent_calls_under_a_1000_token_budget_never_spend_more_than_1000() -> None:
    budget = Budget(BudgetLimits(tokens=1000))
    committed: list[int] = []  # spent + reserved, sampled while calls are in flight
    rng = random.Random(1)

    def responder(request: GenerateRequest, index: int) -> str:
        committed.append(budget.spent.total + budget.reserved_tokens)
        return words(rng.randint(1, 150))

    fake = ScriptedBackend(responder=responder, latency_s=0.01)
    gw = gateway(fake, budget, concurrency=8)

    async def one(i: int) -> str | None:
        await asyncio.sleep(i * 0.001)  # staggered arrivals, so finished calls free tokens
        return await attempt(gw, req(f"question number {i}", max_tokens=120))

    results = await asyncio.gather(*(one(i) for i in range(50)))

    assert budget.spent.total <= 1000
    assert committed and max(committed) <= 1000
    assert any(r is not None for r in results) and any(r is None for r in results)
    assert (budget.reserved_tokens, budget.in_flight) == (0, 0)


async def test_max_tokens_is_shrunk_to_the_tokens_left() -> None:
    fake = ScriptedBackend(default="ok")
    gw = gateway(fake, BudgetLimits(tokens=100))
    await gw.generate(req(max_tokens=256))
    assert fake.calls[0].max_tokens == 100 - 3
    assert gw.records[0].max_tokens == 100 - 3


async def test_max_tokens_is_shrunk_per_sample_when_n_is_above_one() -> None:
    fake = ScriptedBackend(default="ok")
    gw = gateway(fake, BudgetLimits(tokens=100))
    await gw.generate(req(n=2, max_tokens=256))
    assert fake.calls[0].max_tokens == (100 - 3) // 2


async def test_a_request_that_fits_keeps_its_max_tokens() -> None:
    fake = ScriptedBackend(default="ok")
    gw = gateway(fake, BudgetLimits(tokens=1000))
    await gw.generate(req(max_tokens=50))
    assert fake.calls[0].max_tokens == 50


async def test_a_call_is_refused_when_fewer_than_min_useful_tokens_per_sample_remain() -> None:
    fake = ScriptedBackend(default="ok")
    gw = gateway(fake, BudgetLimits(tokens=3 + MIN_USEFUL_TOKENS - 1))
    with pytest.raises(BudgetExceeded) as err:
        await gw.generate(req(max_tokens=256))
    assert err.value.limit == "tokens"
    assert fake.calls == []
    assert gw.budget.spent == Usage()


async def test_a_call_with_exactly_min_useful_tokens_left_goes_ahead() -> None:
    fake = ScriptedBackend(default="ok")
    gw = gateway(fake, BudgetLimits(tokens=3 + MIN_USEFUL_TOKENS))
    await gw.generate(req(max_tokens=256))
    assert fake.calls[0].max_tokens == MIN_USEFUL_TOKENS


async def test_the_minimum_applies_to_each_of_n_samples() -> None:
    fake = ScriptedBackend(default="ok")
    gw = gateway(fake, BudgetLimits(tokens=3 + 2 * MIN_USEFUL_TOKENS - 1))
    with pytest.raises(BudgetExceeded):
        await gw.generate(req(n=2, max_tokens=256))
    assert fake.calls == []


async def test_a_backend_that_cannot_count_is_charged_the_prompt_byte_bound() -> None:
    fake = ScriptedBackend(default="ok")

    class Uncounting:
        name, max_concurrency = fake.name, fake.max_concurrency
        generate, aclose = fake.generate, fake.aclose

        def count_tokens(self, prompt: Prompt) -> int | None:
            return None

    gw = Gateway(Uncounting(), BudgetLimits(tokens=100))
    await gw.generate(req("abcd", max_tokens=256))
    assert fake.calls[0].max_tokens == 100 - (4 + 8)


def test_the_prompt_bound_counts_bytes_not_characters() -> None:
    assert prompt_token_bound(Prompt("é")) == 2 + 8


def test_the_prompt_bound_adds_template_tokens_per_message() -> None:
    prompt = Prompt(messages=(Message("system", "ab"), Message("user", "c")))
    assert prompt_token_bound(prompt) == (2 + 8) + (1 + 8) + 8


async def test_spending_is_the_real_usage_not_the_reservation() -> None:
    fake = ScriptedBackend(default=words(5))
    gw = gateway(fake, BudgetLimits(tokens=1000))
    await gw.generate(req(max_tokens=200))
    assert gw.budget.spent == Usage(3, 5)
    assert gw.budget.reserved_tokens == 0


# --- calls and dollars -----------------------------------------------------------------------


async def test_the_call_limit_is_hard_for_sequential_calls() -> None:
    fake = ScriptedBackend(default="ok")
    gw = gateway(fake, BudgetLimits(calls=3))
    for _ in range(3):
        await gw.generate(req())
    with pytest.raises(BudgetExceeded) as err:
        await gw.generate(req())
    assert err.value.limit == "calls"
    assert len(fake.calls) == 3


async def test_the_call_limit_is_hard_for_concurrent_calls() -> None:
    fake = ScriptedBackend(default="ok", latency_s=0.01)
    gw = gateway(fake, BudgetLimits(calls=3))
    results = await asyncio.gather(*(attempt(gw, req()) for _ in range(10)))
    assert sum(r is not None for r in results) == 3
    assert len(fake.calls) == 3 and gw.budget.calls == 3


async def test_a_call_whose_worst_case_would_cross_the_dollar_limit_is_refused() -> None:
    fake = ScriptedBackend(default="ok")
    gw = gateway(fake, BudgetLimits(cost_usd=10), pricing=DOLLAR_PER_TOKEN)
    with pytest.raises(BudgetExceeded) as err:
        await gw.generate(req(max_tokens=20))  # worst case 3 + 20 tokens = $23
    assert err.value.limit == "cost_usd"
    assert fake.calls == []


async def test_the_dollar_limit_is_hard_for_concurrent_calls() -> None:
    budget = Budget(BudgetLimits(cost_usd=100))
    committed: list[float] = []

    def responder(request: GenerateRequest, index: int) -> str:
        committed.append(budget.cost_usd + budget.reserved_cost)
        return words(4)

    fake = ScriptedBackend(responder=responder, latency_s=0.01)
    gw = gateway(fake, budget, pricing=DOLLAR_PER_TOKEN)

    async def one(i: int) -> str | None:
        await asyncio.sleep(i * 0.002)
        return await attempt(gw, req(max_tokens=20))

    results = await asyncio.gather(*(one(i) for i in range(30)))
    assert budget.cost_usd <= 100
    assert max(committed) <= 100
    assert any(r is None for r in results)


async def test_a_call_is_priced_from_its_real_usage() -> None:
    fake = ScriptedBackend(default=words(3))
    gw = gateway(fake, pricing=Pricing(input_per_mtok=1_000_000, output_per_mtok=2_000_000))
    await gw.generate(req(max_tokens=50))
    assert gw.records[0].cost_usd == 3 * 1 + 3 * 2
    assert gw.budget.cost_usd == 3 * 1 + 3 * 2


# --- wall clock ------------------------------------------------------------------------------


async def test_a_slow_call_is_cut_off_when_the_wall_clock_runs_out() -> None:
    fake = ScriptedBackend(default="ok", latency_s=10)
    gw = gateway(fake, BudgetLimits(wall_s=0.05))
    t0 = time.monotonic()
    with pytest.raises(BudgetExceeded) as err:
        await gw.generate(req())
    assert err.value.limit == "wall_s"
    assert time.monotonic() - t0 < 2
    assert (gw.budget.reserved_tokens, gw.budget.in_flight) == (0, 0)


async def test_no_call_starts_once_the_wall_clock_is_used_up() -> None:
    now = [0.0]
    fake = ScriptedBackend(default="ok")
    gw = gateway(fake, Budget(BudgetLimits(wall_s=5), clock=lambda: now[0]))
    now[0] = 5.0
    with pytest.raises(BudgetExceeded) as err:
        await gw.generate(req())
    assert err.value.limit == "wall_s"
    assert fake.calls == []


# --- concurrency -----------------------------------------------------------------------------


async def test_no_more_calls_are_in_flight_than_the_concurrency_limit() -> None:
    fake = ScriptedBackend(default="ok", latency_s=0.01)
    gw = gateway(fake, concurrency=3)
    await asyncio.gather(*(gw.generate(req()) for _ in range(12)))
    assert fake.peak_in_flight == 3


async def test_the_backend_max_concurrency_caps_the_gateway() -> None:
    fake = ScriptedBackend(default="ok", latency_s=0.01, max_concurrency=2)
    gw = gateway(fake, concurrency=8)
    await asyncio.gather(*(gw.generate(req()) for _ in range(8)))
    assert gw.concurrency == 2
    assert fake.peak_in_flight == 2


def test_concurrency_below_one_is_rejected() -> None:
    with pytest.raises(ValueError):
        Gateway(ScriptedBackend(default="ok"), concurrency=0)


# --- retries ---------------------------------------------------------------------------------


async def test_transient_errors_are_retried_until_success() -> None:
    fake = ScriptedBackend(default="ok", failures=[TransientModelError("429"), TransientModelError("503")])
    gw = gateway(fake)
    completion = await gw.generate(req())
    assert completion.texts == ("ok",)
    assert gw.records[0].attempts == 3
    assert len(fake.calls) == 3
    assert gw.records[0].error is None


async def test_a_non_transient_model_error_is_not_retried() -> None:
    fake = ScriptedBackend(default="ok", failures=[ModelError("bad request")])
    gw = gateway(fake)
    with pytest.raises(ModelError, match="bad request"):
        await gw.generate(req())
    assert len(fake.calls) == 1


async def test_the_last_transient_error_is_raised_when_retries_run_out() -> None:
    failures = [TransientModelError(f"503 #{i}") for i in range(5)]
    fake = ScriptedBackend(default="ok", failures=failures)
    gw = gateway(fake, retry=RetryPolicy(max_attempts=3, base_delay_s=0.001))
    with pytest.raises(TransientModelError, match="503 #2"):
        await gw.generate(req())
    assert len(fake.calls) == 3


async def test_one_attempt_means_no_retry() -> None:
    fake = ScriptedBackend(default="ok", failures=[TransientModelError("429 once")])
    gw = gateway(fake, retry=RetryPolicy(max_attempts=1))
    with pytest.raises(TransientModelError, match="429 once"):
        await gw.generate(req())
    assert (len(fake.calls), gw.records[0].attempts) == (1, 1)


async def test_transient_errors_are_retried_under_a_wall_clock_limit_too() -> None:
    fake = ScriptedBackend(default="ok", failures=[TransientModelError("503")])
    gw = gateway(fake, BudgetLimits(wall_s=60), retry=RetryPolicy(base_delay_s=0.001))
    assert (await gw.generate(req())).texts == ("ok",)
    assert gw.records[0].attempts == 2


async def test_a_refused_call_releases_its_reservation_and_counts_as_a_request_without_tokens() -> None:
    fake = ScriptedBackend(default="ok", failures=[ModelError("bad request")])
    gw = gateway(fake, BudgetLimits(tokens=1000, calls=5))
    with pytest.raises(ModelError):
        await gw.generate(req())
    budget = gw.budget
    assert (budget.spent, budget.calls, budget.reserved_tokens, budget.in_flight) == (Usage(), 1, 0, 0)


def test_retry_delay_doubles_within_jitter_and_is_capped() -> None:
    policy = RetryPolicy(base_delay_s=1.0, max_delay_s=3.0)
    rng = random.Random(0)
    for attempt_no, full in [(1, 1.0), (2, 2.0), (3, 3.0), (6, 3.0)]:
        delay = policy.delay(attempt_no, rng)
        assert full / 2 <= delay <= full


# --- cache -----------------------------------------------------------------------------------


def counting_backend() -> ScriptedBackend:
    """A fake whose every sample is distinct: call number and index within the call."""
    fake = ScriptedBackend()
    fake.responder = lambda request, index: f"call {len(fake.calls)} sample {index}"
    return fake


async def test_a_repeated_request_is_served_from_the_cache_at_no_cost() -> None:
    fake = counting_backend()
    gw = gateway(fake, BudgetLimits(tokens=1000), cache=MemoryCache())
    first = await gw.generate(req(max_tokens=50))
    spent = gw.budget.spent
    again = await gw.generate(req(max_tokens=50))
    assert again.texts == first.texts
    assert again.usage == Usage()
    assert gw.budget.spent == spent
    assert len(fake.calls) == 1
    assert gw.records[1].cached == 1


async def test_each_of_n_samples_is_cached_separately() -> None:
    fake = counting_backend()
    cache = MemoryCache()
    gw = gateway(fake, cache=cache)
    completion = await gw.generate(req(n=3))
    assert len(set(completion.texts)) == 3
    assert len(cache) == 3


async def test_a_larger_n_reuses_the_cached_samples_and_asks_only_for_the_rest() -> None:
    fake = counting_backend()
    gw = gateway(fake, cache=MemoryCache())
    three = await gw.generate(req(n=3))
    five = await gw.generate(req(n=5))
    assert five.texts[:3] == three.texts
    assert len(set(five.texts)) == 5
    assert [c.n for c in fake.calls] == [3, 2]
    assert gw.records[1].cached == 3


@pytest.mark.parametrize(
    "change",
    [
        {"temperature": 0.2},
        {"seed": 7},
        {"max_tokens": 64},
        {"stop": ("\n",)},
        {"prompt": Prompt("another prompt")},
    ],
    ids=["temperature", "seed", "max_tokens", "stop", "prompt"],
)
async def test_a_request_differing_in_a_generation_parameter_misses_the_cache(change: dict) -> None:
    fake = counting_backend()
    gw = gateway(fake, cache=MemoryCache())
    base = req(temperature=0.7, seed=1, max_tokens=32)
    first = await gw.generate(base)
    fields = {
        "prompt": base.prompt,
        "temperature": base.temperature,
        "seed": base.seed,
        "max_tokens": base.max_tokens,
        "stop": base.stop,
    }
    second = await gw.generate(GenerateRequest(**(fields | change)))
    assert len(fake.calls) == 2
    assert second.texts != first.texts
    assert gw.records[1].cached == 0


async def test_the_purpose_is_not_part_of_the_cache_key() -> None:
    fake = counting_backend()
    gw = gateway(fake, cache=MemoryCache())
    await gw.generate(req(purpose="generate"))
    await gw.generate(req(purpose="evaluate"))
    assert len(fake.calls) == 1


def test_the_cache_key_includes_the_model_and_the_sample_index() -> None:
    request = req()
    keys = {sample_key("a", request, 0), sample_key("a", request, 1), sample_key("b", request, 0)}
    assert len(keys) == 3


async def test_a_request_that_pins_its_prompt_form_is_not_answered_from_one_that_does_not() -> None:
    fake = counting_backend()
    gw = gateway(fake, cache=MemoryCache())
    await gw.generate(req())
    await gw.generate(req(form="text"))
    assert len(fake.calls) == 2


def test_the_cache_digest_of_a_request_without_a_pinned_form_is_unchanged() -> None:
    from thoughtloom.llm.cache import digest

    # Digests persist across versions: the field added later must not move the old ones.
    key = sample_key("m", GenerateRequest(Prompt(text="hi"), max_tokens=4, temperature=0.5, seed=1), 0)
    assert digest(key) == "18db043bfa47b0bf8a4594cc3424a8132fee21b8a64d6adeddce9b1d4d1a47b3"


TOOLS = '[{"description":"exact arithmetic","name":"calc","parameters":{"type":"object"}}]'


async def test_a_request_with_function_definitions_is_not_answered_from_one_without() -> None:
    fake = counting_backend()
    gw = gateway(fake, cache=MemoryCache())
    await gw.generate(req())
    await gw.generate(req(tools=TOOLS))
    await gw.generate(req(tools=TOOLS))  # the same definitions: answered from the cache
    assert len(fake.calls) == 2


def test_function_definitions_change_the_cache_digest_and_leave_the_others_as_they_were() -> None:
    from thoughtloom.llm.cache import digest

    plain = GenerateRequest(Prompt(text="hi"), max_tokens=4, temperature=0.5, seed=1)
    with_tools = GenerateRequest(Prompt(text="hi"), max_tokens=4, temperature=0.5, seed=1, tools=TOOLS)
    assert digest(sample_key("m", plain, 0)) == "18db043bfa47b0bf8a4594cc3424a8132fee21b8a64d6adeddce9b1d4d1a47b3"
    assert digest(sample_key("m", with_tools, 0)) != digest(sample_key("m", plain, 0))


async def test_function_definitions_are_reserved_as_prompt() -> None:
    # 40 tokens hold the 3-word prompt and its 4-token reply, not the definitions the server also reads.
    assert await attempt(gateway(counting_backend(), BudgetLimits(tokens=40)), req(max_tokens=4)) is not None
    assert await attempt(gateway(counting_backend(), BudgetLimits(tokens=40)), req(max_tokens=4, tools=TOOLS)) is None


async def test_a_sample_cut_short_by_the_budget_is_not_cached_as_a_full_answer() -> None:
    fake = counting_backend()
    budget = Budget(BudgetLimits(tokens=100))
    gw = gateway(fake, budget, cache=MemoryCache())
    budget.hold(60)
    await gw.generate(req(max_tokens=80))  # shrunk to fit the 40 tokens not held
    budget.release_hold()
    await gw.generate(req(max_tokens=80))  # fits in full now: must not get the shrunk answer
    assert [c.max_tokens for c in fake.calls] == [40 - 3, 80]


# --- records and listener --------------------------------------------------------------------


async def test_a_successful_call_is_recorded_with_its_request_and_result() -> None:
    fake = ScriptedBackend(default=words(2))
    gw = gateway(fake)
    request = req(n=2, max_tokens=40, temperature=0.3, stop=("END",), seed=9, purpose="generate")
    await gw.generate(request)
    (record,) = gw.records
    assert (record.seq, record.purpose, record.model, record.prompt) == (
        0,
        "generate",
        fake.name,
        request.prompt,
    )
    assert (record.n, record.max_tokens, record.temperature, record.stop, record.seed) == (
        2,
        40,
        0.3,
        ("END",),
        9,
    )
    assert record.texts == ("w w", "w w")
    assert record.usage == Usage(3, 4)
    assert (record.cached, record.attempts, record.error) == (0, 1, None)
    assert record.duration_s >= 0


async def test_a_failed_call_is_recorded_with_its_error() -> None:
    fake = ScriptedBackend(default="ok", failures=[ModelError("bad request")])
    gw = gateway(fake)
    with pytest.raises(ModelError):
        await gw.generate(req())
    (record,) = gw.records
    assert record.error == "ModelError: bad request"
    assert (record.texts, record.usage) == ((), Usage())


async def test_a_call_refused_by_the_budget_is_recorded_with_its_error() -> None:
    fake = ScriptedBackend(default="ok")
    gw = gateway(fake, BudgetLimits(calls=1))
    await gw.generate(req())
    with pytest.raises(BudgetExceeded):
        await gw.generate(req())
    assert [r.seq for r in gw.records] == [0, 1]
    assert gw.records[1].error is not None and gw.records[1].error.startswith("BudgetExceeded")


async def test_a_call_served_from_the_cache_is_recorded_too() -> None:
    fake = ScriptedBackend(default="ok")
    gw = gateway(fake, cache=MemoryCache())
    await gw.generate(req())
    await gw.generate(req())
    assert len(gw.records) == 2
    assert (gw.records[1].texts, gw.records[1].cached, gw.records[1].usage) == (("ok",), 1, Usage())


async def test_the_listener_receives_every_record_once() -> None:
    received: list[CallRecord] = []
    fake = ScriptedBackend(default="ok", failures=[ModelError("boom")])
    gw = gateway(fake, listener=received.append)
    with pytest.raises(ModelError):
        await gw.generate(req("a"))
    await gw.generate(req("b"))
    await gw.generate(req("c"))
    assert len(received) == 3
    assert all(got is rec for got, rec in zip(received, gw.records, strict=True))


# --- the budget ledger -----------------------------------------------------------------------


def test_raise_limit_raises_the_token_limit_by_exactly_the_amount() -> None:
    budget = Budget(BudgetLimits(tokens=100, calls=4, cost_usd=2.0, wall_s=60))
    left = budget.tokens_left()
    budget.raise_limit(50)
    assert budget.limits == BudgetLimits(tokens=150, calls=4, cost_usd=2.0, wall_s=60)
    assert budget.tokens_left() == left + 50


@pytest.mark.parametrize("amount", [0, -5])
def test_raise_limit_rejects_a_non_positive_amount(amount: int) -> None:
    with pytest.raises(ValueError):
        Budget(BudgetLimits(tokens=100)).raise_limit(amount)


async def test_a_call_refused_for_tokens_goes_through_after_raise_limit() -> None:
    fake = ScriptedBackend(default="ok")
    gw = gateway(fake, BudgetLimits(tokens=10))
    with pytest.raises(BudgetExceeded):
        await gw.generate(req(max_tokens=256))
    gw.budget.raise_limit(50)
    await gw.generate(req(max_tokens=256))
    assert fake.calls[0].max_tokens == 60 - 3


@pytest.mark.parametrize(("limit", "extra", "raised"), [
    ("calls", 3, BudgetLimits(tokens=100, calls=7, cost_usd=2.0, wall_s=60)),
    ("cost_usd", 0.5, BudgetLimits(tokens=100, calls=4, cost_usd=2.5, wall_s=60)),
    ("wall_s", 30, BudgetLimits(tokens=100, calls=4, cost_usd=2.0, wall_s=90)),
])
def test_raise_limit_raises_any_one_limit_by_exactly_the_amount(limit: str, extra: float,
                                                                 raised: BudgetLimits) -> None:
    budget = Budget(BudgetLimits(tokens=100, calls=4, cost_usd=2.0, wall_s=60))
    budget.raise_limit(extra, limit)
    assert budget.limits == raised


def test_raise_limit_takes_whole_calls_and_known_limits_only() -> None:
    with pytest.raises(ValueError, match="whole number"):
        Budget(BudgetLimits(calls=4)).raise_limit(1.5, "calls")
    with pytest.raises(ValueError, match="no budget limit"):
        Budget(BudgetLimits(calls=4)).raise_limit(1, "minutes")


async def test_a_call_refused_by_the_call_limit_goes_through_after_it_is_raised() -> None:
    gw = gateway(ScriptedBackend(default="ok"), BudgetLimits(calls=1))
    await gw.generate(req())
    with pytest.raises(BudgetExceeded) as refused:
        await gw.generate(req(seed=2))
    assert refused.value.limit == "calls"
    gw.budget.raise_limit(1, "calls")
    await gw.generate(req(seed=2))
    assert gw.budget.calls == 2


def test_a_paused_clock_does_not_spend_wall_clock_seconds() -> None:
    now = [0.0]
    budget = Budget(BudgetLimits(wall_s=10), clock=lambda: now[0])
    now[0] = 4.0
    with budget.paused():
        now[0] = 9.0  # a person took five seconds to answer
        with budget.paused():  # nested: counted once
            now[0] = 10.0
    now[0] = 11.0
    assert budget.elapsed_s == pytest.approx(5.0)
    assert budget.wall_left() == pytest.approx(5.0)


async def test_a_deadline_moves_when_the_wall_clock_limit_is_raised_while_waiting() -> None:
    budget = Budget(BudgetLimits(wall_s=0.05))

    async def slow() -> str:
        await asyncio.sleep(0.15)
        return "done"

    async def raise_soon() -> None:
        await asyncio.sleep(0.02)
        budget.raise_limit(1.0, "wall_s")

    raiser = asyncio.ensure_future(raise_soon())
    assert await budget.within_wall(slow()) == "done"
    await raiser
    with pytest.raises(TimeoutError):
        await Budget(BudgetLimits(wall_s=0.05)).within_wall(slow())


async def test_held_tokens_are_kept_away_from_calls() -> None:
    fake = ScriptedBackend(default="ok")
    gw = gateway(fake, BudgetLimits(tokens=100))
    gw.budget.hold(60)
    await gw.generate(req(max_tokens=256))
    assert fake.calls[0].max_tokens == 40 - 3


async def test_a_call_is_refused_when_only_held_tokens_would_fit_it() -> None:
    fake = ScriptedBackend(default="ok")
    gw = gateway(fake, BudgetLimits(tokens=100))
    gw.budget.hold(90)
    with pytest.raises(BudgetExceeded):
        await gw.generate(req(max_tokens=256))
    assert fake.calls == []


async def test_released_tokens_are_spendable_again() -> None:
    fake = ScriptedBackend(default="ok")
    gw = gateway(fake, BudgetLimits(tokens=100))
    gw.budget.hold(90)
    gw.budget.release_hold()
    await gw.generate(req(max_tokens=256))
    assert fake.calls[0].max_tokens == 100 - 3


def test_hold_takes_no_more_than_is_left() -> None:
    budget = Budget(BudgetLimits(tokens=100))
    budget.hold(500)
    assert (budget.held_tokens, budget.tokens_left()) == (100, 0)


def test_a_refused_reservation_holds_nothing() -> None:
    budget = Budget(BudgetLimits(tokens=100))
    with pytest.raises(BudgetExceeded):
        budget.reserve(101)
    assert (budget.reserved_tokens, budget.in_flight, budget.tokens_left()) == (0, 0, 100)


def test_settling_twice_counts_once() -> None:
    budget = Budget(BudgetLimits(tokens=100))
    reservation = budget.reserve(50)
    budget.settle(reservation, Usage(3, 7))
    budget.settle(reservation, Usage(3, 7))
    assert (budget.spent, budget.calls, budget.reserved_tokens, budget.in_flight) == (Usage(3, 7), 1, 0, 0)


@pytest.mark.parametrize("field", ["tokens", "calls", "cost_usd", "wall_s"])
def test_budget_limits_must_be_positive(field: str) -> None:
    with pytest.raises(ValueError):
        BudgetLimits(**{field: 0})


def test_the_prompt_bound_is_of_the_form_the_backend_sends() -> None:
    prompt = Prompt("abc", (Message("system", "a much longer system instruction"), Message("user", "abc")))
    assert prompt_token_bound(prompt, "text") == 3 + 8
    assert prompt_token_bound(prompt, "chat") == (32 + 8) + (3 + 8) + 8
    assert prompt_token_bound(prompt) == prompt_token_bound(prompt, "chat")  # unknown: the larger


async def test_a_cancelled_call_cancels_its_caller_even_when_the_client_turns_the_cancel_into_an_error() -> None:
    class Converting(ScriptedBackend):
        """A client that reports a cancel as a connection error (as HTTP clients may)."""

        async def generate(self, request: GenerateRequest):  # type: ignore[no-untyped-def]
            self.calls.append(request)
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                raise TransientModelError("connection closed") from None
            raise AssertionError("not reached")

    backend = Converting(default="x")
    gateway = Gateway(backend)
    call = asyncio.ensure_future(gateway.generate(GenerateRequest(Prompt(text="hi"))))
    await asyncio.sleep(0.05)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert len(backend.calls) == 1  # not retried as a transient error


async def test_a_cancelled_call_cancels_its_caller_even_when_the_client_turns_the_cancel_into_a_result() -> None:
    class Swallowing(ScriptedBackend):
        """A client that answers a cancelled request anyway."""

        async def generate(self, request: GenerateRequest):  # type: ignore[no-untyped-def]
            self.calls.append(request)
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                pass
            return Completion(("late",), Usage(1, 1), self.name)

    backend = Swallowing(default="x")
    gateway = Gateway(backend)
    call = asyncio.ensure_future(gateway.generate(GenerateRequest(Prompt(text="hi"), max_tokens=4)))
    await asyncio.sleep(0.05)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert gateway.records[0].error is not None and gateway.records[0].error.startswith("CancelledError")
    assert gateway.budget.calls == 1 and gateway.budget.in_flight == 0  # the request went out: it counts


class _AnswersAtOnce:
    """A network-style backend (no eager_safe, nothing declared) that happens to answer without waiting."""

    name = "fake:at-once"
    max_concurrency = 8

    def __init__(self) -> None:
        self.tasks_seen: list[int] = []

    async def generate(self, request: GenerateRequest) -> Completion:
        self.tasks_seen.append(len(asyncio.all_tasks()))
        return Completion(("ok",), Usage(1, 1), self.name)

    def count_tokens(self, prompt: Prompt) -> int | None:
        return 1

    async def aclose(self) -> None:
        return None


async def test_a_call_the_backend_answers_without_waiting_makes_no_task() -> None:
    backend = _AnswersAtOnce()
    gateway = Gateway(backend, cache=MemoryCache())
    before = len(asyncio.all_tasks())
    completion = await gateway.generate(GenerateRequest(Prompt(text="hi"), max_tokens=4))
    assert completion.texts == ("ok",)
    assert backend.tasks_seen == [before]
    assert (gateway.budget.calls, len(gateway.records)) == (1, 1)


def test_start_answers_at_once_when_the_backend_does_not_wait() -> None:
    gw = gateway(ScriptedBackend(default="yes"), BudgetLimits(calls=5))
    out = gw.start(req())  # no event loop needed: nothing waits
    assert isinstance(out, Completion) and out.texts == ("yes",)
    assert (gw.budget.calls, gw.budget.in_flight, len(gw.records)) == (1, 0, 1)


async def test_start_hands_back_a_later_that_holds_the_call_until_it_is_awaited() -> None:
    from thoughtloom.llm.inline import Later

    gw = gateway(ScriptedBackend(default="yes", latency_s=0.01), BudgetLimits(calls=5), concurrency=1)
    out = gw.start(req())
    assert isinstance(out, Later)
    assert (gw.budget.in_flight, gw.budget.calls) == (1, 0)  # reserved and on the wire, not yet charged
    completion = await out
    assert completion.texts == ("yes",)
    assert (gw.budget.in_flight, gw.budget.calls, gw.records[0].texts) == (0, 1, ("yes",))


def test_start_raises_at_once_when_the_budget_refuses_the_call() -> None:
    gw = gateway(ScriptedBackend(default="yes"), BudgetLimits(calls=1))
    gw.start(req())
    with pytest.raises(BudgetExceeded):
        gw.start(req("another prompt"))
    assert gw.records[-1].error is not None and gw.budget.in_flight == 0


async def test_a_backend_that_fails_before_its_first_await_gives_back_its_slot_and_reservation() -> None:
    class Broken(ScriptedBackend):
        def generate(self, request: GenerateRequest):  # type: ignore[override]  # not even a coroutine
            raise RuntimeError("client not configured")

    gw = gateway(Broken(default="x"), BudgetLimits(calls=3), concurrency=1)
    for _ in range(2):  # the second call would wait forever for a slot the first kept
        with pytest.raises(RuntimeError):
            await asyncio.wait_for(gw.generate(req()), 1)
    assert (gw.budget.in_flight, gw.budget.reserved_tokens, gw.budget.calls) == (0, 0, 2)
