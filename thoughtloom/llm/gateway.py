"""The gateway every model call goes through: hard budget, concurrency, retries, cache, records."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from .budget import Budget, BudgetLimits, Pricing
from .cache import ResponseCache, sample_key
from .errors import BudgetExceeded, TransientModelError
from .slots import Slots
from .types import Backend, Completion, GenerateRequest, Prompt, Usage

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
    """One call as it happened: enough to replay it without the model."""

    seq: int
    purpose: str
    model: str
    prompt: Prompt
    n: int
    max_tokens: int
    temperature: float
    stop: tuple[str, ...]
    seed: int | None
    texts: tuple[str, ...] = ()
    usage: Usage = field(default_factory=Usage)
    cost_usd: float = 0.0
    cached: int = 0  # how many of the n samples came from the cache
    started_at: float = 0.0
    duration_s: float = 0.0
    attempts: int = 0
    error: str | None = None


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

    def _cost(self, usage: Usage) -> float:
        return self.pricing.cost(usage.input_tokens, usage.output_tokens) if self.pricing else 0.0

    async def generate(self, request: GenerateRequest) -> Completion:
        """Answer a request within the budget; raises BudgetExceeded instead of overspending."""
        model = self.backend.name
        n = request.n
        record = CallRecord(
            len(self.records), request.purpose, model, request.prompt, n, request.max_tokens,
            request.temperature, request.stop, request.seed, started_at=time.time(),
        )
        self.records.append(record)
        cache = self.cache
        if cache is not None:
            keys = [sample_key(model, request, i) for i in range(n)]
            texts: list[str | None] = [cache.get(k) for k in keys]
            missing = [i for i, t in enumerate(texts) if t is None]
        else:
            keys, texts, missing = [], [None] * n, list(range(n))
        record.cached = n - len(missing)
        usage = Usage()
        t0 = time.perf_counter()
        try:
            if missing:
                # A copy only when the cache answered some samples (replace() is costly per call).
                sub = request if len(missing) == n else replace(request, n=len(missing))
                completion = await self._call_within_budget(sub, record)
                usage = completion.usage
                # Samples cut short by a budget-shrunk max_tokens must not answer the full request later.
                cacheable = cache is not None and record.max_tokens == request.max_tokens
                for i, text in zip(missing, completion.texts):
                    texts[i] = text
                    if cacheable:
                        cache.put(keys[i], text)  # type: ignore[union-attr]
        except BaseException as exc:
            record.error = f"{type(exc).__name__}: {exc}"
            record.duration_s = time.perf_counter() - t0
            self._notify(record)
            raise
        record.texts = tuple(t or "" for t in texts)
        record.usage = usage
        if self.pricing is not None:
            record.cost_usd = self._cost(usage)
        record.duration_s = time.perf_counter() - t0
        self._notify(record)
        return Completion(record.texts, usage, model)

    def _notify(self, record: CallRecord) -> None:
        if self.listener is not None:
            self.listener(record)

    def _fit_request(self, request: GenerateRequest) -> tuple[GenerateRequest, int]:
        """Shrink max_tokens to what the budget still allows; return the request and its reservation."""
        counted = self.backend.count_tokens(request.prompt)
        input_bound = counted if counted is not None else prompt_token_bound(request.prompt)
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
        await self._sem.acquire()
        try:
            request, reserve_tokens = self._fit_request(request)
            record.max_tokens = request.max_tokens
            out_tokens = request.n * request.max_tokens
            pricing = self.pricing
            reserve_cost = pricing.cost(reserve_tokens - out_tokens, out_tokens) if pricing else 0.0
            budget = self.budget
            reservation = budget.reserve(reserve_tokens, reserve_cost)
            usage: Usage | None = None
            try:
                # Retries live here, inside one slot and one reservation.
                attempt = 0
                while True:
                    attempt += 1
                    record.attempts = attempt
                    try:
                        wall_left = budget.wall_left()
                        if wall_left is None:
                            completion = await self.backend.generate(request)
                        elif wall_left <= 0:
                            raise BudgetExceeded("wall_s", "wall-clock budget is used up")
                        else:
                            try:
                                completion = await asyncio.wait_for(self.backend.generate(request), wall_left)
                            except TimeoutError:
                                raise _CutOff("wall_s", "wall-clock budget ran out during a call") from None
                        usage = completion.usage
                        return completion
                    except TransientModelError:
                        if attempt >= self.retry.max_attempts:
                            raise
                        await asyncio.sleep(self.retry.delay(attempt, self._rng))
            except (asyncio.CancelledError, _CutOff):
                # A call stopped midway may have been billed in full: charge the worst case.
                usage = Usage(reserve_tokens - out_tokens, out_tokens)
                raise
            finally:
                budget.settle(reservation, usage, self._cost(usage) if usage is not None and pricing else 0.0)
        finally:
            self._sem.release()

    async def aclose(self) -> None:
        """Close the backend."""
        await self.backend.aclose()
