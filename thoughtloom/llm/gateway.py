"""The gateway every model call goes through: hard budget, concurrency, retries, cache, records."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from .budget import Budget, BudgetLimits, Pricing, Reservation
from .cache import ResponseCache, sample_key
from .errors import BudgetExceeded, ModelError, TransientModelError
from .slots import Slots
from .types import NO_USAGE, Backend, Completion, GenerateRequest, Message, Prompt, Usage

T = TypeVar("T")

# Fewer output tokens than this per sample is not worth a call when the budget is nearly gone.
MIN_USEFUL_TOKENS = 16


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Retries with exponential backoff and jitter for transient errors."""

    max_attempts: int = 4
    base_delay_s: float = 0.5
    max_delay_s: float = 8.0

    def delay(self, attempt: int, rng: random.Random) -> float:
        """Seconds to wait before retry number `attempt` (1-based)."""
        d = min(self.max_delay_s, self.base_delay_s * 2 ** (attempt - 1))
        return d * (0.5 + rng.random() / 2)


@dataclass(slots=True)
class CallRecord:
    """One call as it happened: enough to replay it without the model.

    The prompt and the usage are kept as plain fields (text, messages, token counts) and
    rebuilt on access: a long search holds one record per call, and one object per record
    instead of three is what the garbage collector notices.
    """

    seq: int
    purpose: str
    model: str
    prompt_text: str | None
    prompt_messages: tuple[Message, ...] | None
    n: int
    max_tokens: int
    temperature: float
    stop: tuple[str, ...]
    seed: int | None
    texts: tuple[str, ...] = ()
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    cached: int = 0  # how many of the n samples came from the cache
    started_at: float = 0.0
    duration_s: float = 0.0
    attempts: int = 0
    error: str | None = None

    @property
    def prompt(self) -> Prompt:
        """What was asked."""
        return Prompt(self.prompt_text, self.prompt_messages)

    @property
    def usage(self) -> Usage:
        """Tokens the call consumed (zero until it is answered, or when it failed)."""
        return Usage(self.input_tokens, self.output_tokens)

    @usage.setter
    def usage(self, usage: Usage) -> None:
        self.input_tokens, self.output_tokens = usage.input_tokens, usage.output_tokens


@dataclass(slots=True)
class _Open:
    """A call between being recorded and being answered."""

    request: GenerateRequest
    record: CallRecord
    keys: list[Any]
    texts: list[str | None]
    missing: list[int]  # samples the cache did not answer
    sub: GenerateRequest | None  # what the backend must still answer (None: nothing, or done)
    t0: float


class _CutOff(BudgetExceeded):
    """The wall-clock limit stopped a call already running (so it is charged in full)."""


def prompt_token_bound(prompt: Prompt) -> int:
    """An upper bound on a prompt's tokens without a tokenizer.

    No BPE token is shorter than one byte, so UTF-8 bytes bound the text; each chat message
    adds a few template tokens.
    """
    if prompt.messages:
        return sum(len(m.content.encode()) + 8 for m in prompt.messages) + 8
    return len(prompt.as_text().encode()) + 8


class Gateway:
    """Front door to a Backend that never lets spending cross the budget's hard limits."""

    def __init__(
        self,
        backend: Backend,
        budget: Budget | BudgetLimits | None = None,
        *,
        concurrency: int = 8,
        retry: RetryPolicy | None = None,
        cache: ResponseCache | None = None,
        pricing: Pricing | None = None,
        listener: Callable[[CallRecord], None] | None = None,
        rng_seed: int = 0,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        self.backend = backend
        self.budget = budget if isinstance(budget, Budget) else Budget(budget)
        self.concurrency = min(concurrency, max(1, backend.max_concurrency))
        self._sem = Slots(self.concurrency)
        self.retry = retry or RetryPolicy()
        self.cache = cache
        self.pricing = pricing
        self.listener = listener
        self.records: list[CallRecord] = []
        self._rng = random.Random(rng_seed)
        self._eager_safe = bool(getattr(backend, "eager_safe", False))

    def _cost(self, usage: Usage) -> float:
        return self.pricing.cost(usage.input_tokens, usage.output_tokens) if self.pricing else 0.0

    @property
    def batches(self) -> bool:
        """True when the backend answers several requests in one call (see generate_batch)."""
        return bool(getattr(self.backend, "supports_batch", False))

    def _open(self, request: GenerateRequest) -> _Open:
        """Record a call and look its samples up in the cache."""
        n = request.n
        prompt = request.prompt
        record = CallRecord(
            len(self.records), request.purpose, self.backend.name, prompt.text, prompt.messages, n,
            request.max_tokens, request.temperature, request.stop, request.seed, started_at=time.time(),
        )
        self.records.append(record)
        cache = self.cache
        if cache is None:
            keys, texts, missing = [], [None] * n, list(range(n))
        elif n == 1:  # the common case, without the comprehensions
            key = sample_key(record.model, request, 0)
            text = cache.get(key)
            keys, texts, missing = [key], [text], [0] if text is None else []
        else:
            keys = [sample_key(record.model, request, i) for i in range(n)]
            texts = [cache.get(k) for k in keys]
            missing = [i for i, t in enumerate(texts) if t is None]
        record.cached = n - len(missing)
        # A copy only when the cache answered some samples (replace() is costly per call).
        sub = None if not missing else request if len(missing) == n else replace(request, n=len(missing))
        return _Open(request, record, keys, texts, missing, sub, time.perf_counter())

    def _close(self, call: _Open, completion: Completion | None) -> Completion:
        """Fill in the record (and the cache) from what the backend returned."""
        record, texts = call.record, call.texts
        usage = NO_USAGE
        whole = False  # the backend answered every sample: its completion can be passed on as is
        if completion is not None:
            usage = completion.usage
            cache = self.cache
            # Samples cut short by a budget-shrunk max_tokens must not answer the full request later.
            if cache is not None and record.max_tokens == call.request.max_tokens:
                keys = call.keys
                for i, text in zip(call.missing, completion.texts):
                    cache.put(keys[i], text)
            if len(call.missing) == record.n and len(completion.texts) == record.n:
                got = completion.texts
                record.texts = got if type(got) is tuple else tuple(got)
                whole = got is record.texts and completion.model == record.model
            else:
                for i, text in zip(call.missing, completion.texts):
                    texts[i] = text
                record.texts = tuple(t or "" for t in texts)
        else:
            record.texts = tuple(t or "" for t in texts)
        record.usage = usage
        if self.pricing is not None:
            record.cost_usd = self._cost(usage)
        record.duration_s = time.perf_counter() - call.t0
        self._notify(record)
        return completion if whole else Completion(record.texts, usage, record.model)  # type: ignore[return-value]

    def _fail(self, call: _Open, exc: BaseException) -> None:
        record = call.record
        record.error = f"{type(exc).__name__}: {exc}"
        record.duration_s = time.perf_counter() - call.t0
        self._notify(record)

    async def generate(self, request: GenerateRequest) -> Completion:
        """Answer a request within the budget; raises BudgetExceeded instead of overspending."""
        call = self._open(request)
        try:
            completion = None if call.sub is None else await self._call_within_budget(call.sub, call.record)
        except BaseException as exc:
            self._fail(call, exc)
            raise
        return self._close(call, completion)

    async def generate_batch(self, requests: Sequence[GenerateRequest]) -> list[Completion]:
        """Answer several requests with one backend call: all of them fit the budget, or none is made.

        Each request is reserved at its full max_tokens (no shrinking) and recorded, cached and
        charged as its own call. BudgetExceeded means the batch as a whole does not fit: make the
        calls one by one with `generate`, which shrinks or refuses each on its own.
        """
        if not self.batches:
            raise TypeError(f"{self.backend.name} does not answer batches; use generate()")
        calls = [self._open(r) for r in requests]
        todo = [i for i, c in enumerate(calls) if c.sub is not None]
        out: list[Completion | None] = [None] * len(calls)
        try:
            if todo:
                completions = await self._batch_within_budget([calls[i] for i in todo])
                for i, completion in zip(todo, completions):
                    out[i] = self._close(calls[i], completion)
        except BaseException as exc:
            for i in todo:
                if out[i] is None:
                    self._fail(calls[i], exc)
            raise
        return [c if c is not None else self._close(calls[i], None) for i, c in enumerate(out)]

    def _notify(self, record: CallRecord) -> None:
        if self.listener is not None:
            self.listener(record)

    def _input_bound(self, request: GenerateRequest) -> int:
        counted = self.backend.count_tokens(request.prompt)
        return counted if counted is not None else prompt_token_bound(request.prompt)

    def _fit_request(self, request: GenerateRequest) -> tuple[GenerateRequest, int]:
        """Shrink max_tokens to what the budget still allows; return the request and its reservation."""
        input_bound = self._input_bound(request)
        left = self.budget.tokens_left()
        if left is not None and input_bound + request.n * request.max_tokens > left:
            per_sample = (left - input_bound) // request.n
            if per_sample < min(MIN_USEFUL_TOKENS, request.max_tokens):
                raise BudgetExceeded(
                    "tokens",
                    f"token budget nearly used up: {max(left, 0)} left of {self.budget.limits.tokens}, "
                    f"a call needs at least {input_bound + request.n * MIN_USEFUL_TOKENS}",
                )
            request = replace(request, max_tokens=per_sample)
        return request, input_bound + request.n * request.max_tokens

    async def _call_within_budget(self, request: GenerateRequest, record: CallRecord) -> Completion:
        """Hold a slot and a reservation around the call and its retries; settle with real usage."""
        if not self._sem.try_acquire():
            await self._sem.acquire()
        try:
            request, reserve_tokens = self._fit_request(request)
            record.max_tokens = request.max_tokens
            reservation, out_tokens = self._reserve(request, reserve_tokens)
            usage: Usage | None = None

            def call() -> Awaitable[Completion]:
                return self._own_task(self.backend.generate(request))

            try:
                if self.budget.limits.wall_s is None:
                    # The first attempt without the retry loop's extra coroutine (the common case).
                    record.attempts = 1
                    try:
                        completion = await call()
                    except TransientModelError:
                        if self.retry.max_attempts <= 1:
                            raise
                        await asyncio.sleep(self.retry.delay(1, self._rng))
                        completion = await self._attempts(call, [record], tried=1)
                else:
                    completion = await self._attempts(call, [record])
                usage = completion.usage
                return completion
            except (asyncio.CancelledError, _CutOff):
                # A call stopped midway may have been billed in full: charge the worst case.
                usage = Usage(reserve_tokens - out_tokens, out_tokens)
                raise
            finally:
                self.budget.settle(reservation, usage, self._cost(usage) if usage is not None else 0.0)
        finally:
            self._sem.release()

    async def _batch_within_budget(self, calls: list[_Open]) -> list[Completion]:
        """One slot and one reservation per request around one batched backend call."""
        backend: Any = self.backend
        requests = [c.sub for c in calls]
        reservations: list[tuple[Reservation, int, int]] = []
        await self._sem.acquire()
        try:
            bounds = [self._input_bound(r) + r.n * r.max_tokens for r in requests]  # type: ignore[union-attr]
            left = self.budget.tokens_left()
            if left is not None and sum(bounds) > left:
                raise BudgetExceeded(
                    "tokens",
                    f"a batch of {len(requests)} calls needing up to {sum(bounds)} tokens does not fit in "
                    f"the {max(left, 0)} left of the {self.budget.limits.tokens}-token budget",
                )
            try:
                for request, reserve_tokens in zip(requests, bounds):
                    assert request is not None
                    reservation, out_tokens = self._reserve(request, reserve_tokens)
                    reservations.append((reservation, reserve_tokens, out_tokens))
            except BudgetExceeded:
                for reservation, _, _ in reservations:
                    self.budget.settle(reservation, None)
                raise
            usages: list[Usage | None] = [None] * len(requests)
            try:
                completions = await self._attempts(
                    lambda: self._own_task(backend.generate_batch(requests)), [c.record for c in calls]
                )
                if len(completions) != len(requests):
                    raise ModelError(
                        f"{backend.name} answered {len(completions)} of {len(requests)} batched requests"
                    )
                usages = [c.usage for c in completions]
                return completions
            except (asyncio.CancelledError, _CutOff):
                usages = [Usage(r - o, o) for _, r, o in reservations]
                raise
            finally:
                for (reservation, _, _), usage in zip(reservations, usages):
                    self.budget.settle(reservation, usage, self._cost(usage) if usage is not None else 0.0)
        finally:
            self._sem.release()

    def _own_task(self, call: Coroutine[Any, Any, T]) -> Awaitable[T]:
        """The backend call, in a task of its own unless the backend is eager-safe.

        The search runs operators eagerly (search/eager.py): a coroutine may start in its
        caller's task and finish in another. Backends built on per-task state (httpx's anyio
        cancel scopes, TaskGroups) must start and end in one task; a task costs nothing beside
        a network call. Backends that declare `eager_safe = True` (in-process fakes, replays)
        are awaited directly.
        """
        return call if self._eager_safe else asyncio.ensure_future(call)

    def _reserve(self, request: GenerateRequest, reserve_tokens: int) -> tuple[Reservation, int]:
        out_tokens = request.n * request.max_tokens
        pricing = self.pricing
        reserve_cost = pricing.cost(reserve_tokens - out_tokens, out_tokens) if pricing else 0.0
        return self.budget.reserve(reserve_tokens, reserve_cost), out_tokens

    async def _attempts(
        self, make_call: Callable[[], Awaitable[T]], records: Sequence[CallRecord], tried: int = 0
    ) -> T:
        """Run a backend call with retries on transient errors, cut off by the wall-clock budget.

        tried: attempts already made (failed transiently, backoff waited) before this call.
        """
        budget = self.budget
        attempt = tried
        while True:
            attempt += 1
            for record in records:
                record.attempts = attempt
            try:
                wall_left = budget.wall_left()
                if wall_left is None:
                    return await make_call()
                if wall_left <= 0:
                    raise BudgetExceeded("wall_s", "wall-clock budget is used up")
                try:
                    return await asyncio.wait_for(make_call(), wall_left)
                except TimeoutError:
                    raise _CutOff("wall_s", "wall-clock budget ran out during a call") from None
            except TransientModelError:
                if attempt >= self.retry.max_attempts:
                    raise
                await asyncio.sleep(self.retry.delay(attempt, self._rng))

    async def aclose(self) -> None:
        """Close the backend."""
        await self.backend.aclose()
