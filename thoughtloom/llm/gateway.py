"""The gateway every model call goes through: hard budget, concurrency, retries, cache, records."""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from .budget import Budget, BudgetLimits, Pricing, Reservation, estimate_tokens, least_tokens, utf8_size
from .cache import ResponseCache, SampleKey, sample_key
from .errors import BatchRefused, BudgetExceeded, ModelError, ModelTimeout, TransientModelError
from .inline import Later, call_inline, cancellable
from .slots import Slots
from .types import NO_USAGE, Backend, Capabilities, Completion, GenerateRequest, Message, Prompt, Usage, capabilities_of

T = TypeVar("T")

logger = logging.getLogger(__name__)

# Fewer output tokens than this per sample is not worth a call when the budget is nearly gone.
MIN_USEFUL_TOKENS = 16


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Retries with exponential backoff and jitter for transient errors."""

    max_attempts: int = 4
    base_delay_s: float = 0.5
    max_delay_s: float = 8.0

    def delay(self, attempt: int, rng: random.Random, error: TransientModelError | None = None) -> float:
        """Seconds to wait before retry number `attempt` (1-based); a server's Retry-After wins
        when it asks for longer than the backoff (the backend has already capped it)."""
        d = min(self.max_delay_s, self.base_delay_s * 2 ** (attempt - 1))
        backoff = d * (0.5 + rng.random() / 2)
        asked = error.retry_after_s if error is not None else None
        return max(backoff, asked) if asked is not None else backoff


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
    keys: Sequence[SampleKey]
    texts: list[str | None]
    missing: Sequence[int]  # samples the cache did not answer
    sub: GenerateRequest | None  # what the backend must still answer (None: nothing, or done)
    t0: float


class _CutOff(BudgetExceeded):
    """The wall-clock limit stopped a call already running (so it is charged in full)."""


#: The missing samples of a one-sample call the cache did not answer.
_FIRST = (0,)

#: Tokens a server's template may add around a request's function definitions.
TOOLS_PREAMBLE_TOKENS = 64


def _clamp(value: int, bound: int) -> int:
    """A reported token count, or the bound when it is negative or above it."""
    return value if 0 <= value <= bound else bound


def _shifted(sink: Callable[[int, str], None] | None, by: int) -> Callable[[int, str], None] | None:
    """A follow-up request's text sink: its samples are the call's samples from `by` on."""
    if sink is None or by == 0:
        return sink
    return lambda sample, text: sink(sample + by, text)


def _sent_forms(prompt: Prompt, form: str | None) -> list[tuple[str, int]]:
    """The text a prompt goes out as and its number of chat messages, for each form it may go out in:
    the backend's `prompt_form` ("text" or "chat"), else every form the prompt has."""
    forms: list[tuple[str, int]] = []
    if form == "text" or (form is None and prompt.text is not None):
        forms.append((prompt.as_text(), 0))
    if form == "chat" or (form is None and prompt.messages):
        messages = prompt.as_messages()
        forms.append(("".join(m.content for m in messages), len(messages)))
    return forms or [("", 0)]


def prompt_token_bound(prompt: Prompt, form: str | None = None) -> int:
    """An upper bound on a prompt's tokens without a tokenizer, for the form the backend sends.

    No BPE token is shorter than one byte, so UTF-8 bytes bound the text; each chat message
    adds a few template tokens. form: "text" or "chat" (the backend's `prompt_form`); None when
    the backend does not say: the larger of the forms the prompt has.
    """
    return max(utf8_size(text) + 8 * messages + 8 for text, messages in _sent_forms(prompt, form))


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
        route_pricing: Mapping[str, Pricing | None] | None = None,
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
        #: The price of each role's own model (see thoughtloom.llm.routing); other calls cost `pricing`.
        self.route_pricing = dict(route_pricing or {})
        self.listener = listener
        self.records: list[CallRecord] = []
        # The retries' jitter, seeded when first needed: most gateways never retry, and seeding a
        # Random costs as much as a dozen calls (the harness makes a gateway per search).
        self._rng_seed = rng_seed
        self._rng: random.Random | None = None
        self._warned: set[str] = set()
        # Set once a prompt had to be bounded by its bytes: the backend does not count its own tokens
        # (a server), so what it reports is checked against what the texts must cost (see _checked).
        self._uncounted = False
        self._capabilities: Capabilities | None = None

    @property
    def cost_known(self) -> bool:
        """Whether every model this gateway pays for has a price (else its dollar cost is unknown, not $0)."""
        return self.pricing is not None and all(p is not None for p in self.route_pricing.values())

    def _price(self, route: str | None) -> Pricing | None:
        """The price of the model a request goes to: its role's own model, or the run's."""
        if route is None or route not in self.route_pricing:
            return self.pricing
        return self.route_pricing[route]

    def _cost(self, usage: Usage, route: str | None = None) -> float:
        pricing = self._price(route)
        return pricing.cost(usage.input_tokens, usage.output_tokens) if pricing else 0.0

    @property
    def capabilities(self) -> Capabilities:
        """What the backend declares it can do (read on first use: the embedded model's form needs the model)."""
        if self._capabilities is None:
            self._capabilities = capabilities_of(self.backend)
        return self._capabilities

    @property
    def scores_choices(self) -> bool:
        """True when the backend answers score_choices requests from the model's distribution."""
        return self.capabilities.scores_choices

    @property
    def follows_choices(self) -> bool:
        """True when the backend's samples keep to a request's choices (else it is sent none)."""
        return self.capabilities.follows_choices

    @property
    def thinking_tokens(self) -> int:
        """Tokens a reasoning model may think per sample on top of a request's max_tokens (Anthropic's
        thinking budget): reserved and bounded as output, which it is billed as."""
        return self.capabilities.thinking_tokens

    @property
    def batches(self) -> bool:
        """True when the backend answers several requests in one call (see generate_batch)."""
        return bool(getattr(self.backend, "supports_batch", False))

    def _open(self, request: GenerateRequest) -> _Open:
        """Record a call and look its samples up in the cache."""
        n = request.n
        prompt = request.prompt
        # Positional (this runs once per call). The record copies the request's fields rather than
        # holding it: a record outlives its request, and holding it kept ~225 B more per thought
        # (benchmarks/engine_overhead.py) to save 0.09 us.
        record = CallRecord(
            len(self.records), request.purpose, self.backend.name, prompt.text, prompt.messages, n,
            request.max_tokens, request.temperature, request.stop, request.seed, (), 0, 0, 0.0, 0, time.time(),
        )
        self.records.append(record)
        # Token logprobs live only in a fresh answer: the cache keeps texts.
        cache = self.cache if request.logprobs is None else None
        keys: Sequence[SampleKey]
        texts: list[str | None]
        missing: Sequence[int]
        if cache is None:
            keys, texts, missing = (), [None] * n, range(n)
        elif n == 1:  # the common case, without the comprehensions
            key = sample_key(record.model, request, 0)
            text = cache.get(key)
            # Tuples where nothing is changed later (texts is filled in): no list made per call.
            keys, texts, missing = (key,), [text], _FIRST if text is None else ()
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
            if cache is not None and call.keys and record.max_tokens == call.request.max_tokens:
                keys = call.keys
                if len(keys) == 1:  # the common case, without the loop
                    if completion.texts:
                        cache.put(keys[0], completion.texts[0])
                else:
                    for i, text in zip(call.missing, completion.texts, strict=False):
                        cache.put(keys[i], text)
            if len(call.missing) == record.n and len(completion.texts) == record.n:
                got = completion.texts
                record.texts = got if type(got) is tuple else tuple(got)
                whole = got is record.texts and completion.model == record.model
            else:
                for i, text in zip(call.missing, completion.texts, strict=False):
                    texts[i] = text
                # Samples the budget refused (a server ignoring n) are left out, not made up.
                record.texts = tuple(t for t in texts if t is not None)
        else:  # the cache answered every sample
            record.texts = tuple(texts)  # type: ignore[arg-type]
        record.input_tokens, record.output_tokens = usage.input_tokens, usage.output_tokens
        if self.pricing is not None or self.route_pricing:
            record.cost_usd = self._cost(usage, call.request.route)
        record.duration_s = time.perf_counter() - call.t0
        if logger.isEnabledFor(logging.DEBUG):  # once per call: the check keeps a quiet run's cost at one lookup
            logger.debug("%s call to %s: %d samples, %d+%d tokens, %d from the cache, %.3fs", record.purpose or "model",
                         self.backend.name, len(record.texts), usage.input_tokens, usage.output_tokens,
                         record.cached, record.duration_s)
        if self.listener is not None:
            self.listener(record)
        return completion if whole else Completion(record.texts, usage, record.model)  # type: ignore[return-value]

    def _fail(self, call: _Open, exc: BaseException) -> None:
        record = call.record
        record.error = f"{type(exc).__name__}: {exc}"
        if isinstance(exc, BudgetExceeded):
            logger.info("budget refused a %s call (%s limit): %s", record.purpose or "model", exc.limit, exc)
        elif isinstance(exc, Exception):  # a cancellation is the caller's doing, not a failure to report
            logger.info("%s call to %s failed: %s", record.purpose or "model", self.backend.name, record.error)
        record.duration_s = time.perf_counter() - call.t0
        self._notify(record)

    async def generate(self, request: GenerateRequest) -> Completion:
        """Answer a request within the budget; raises BudgetExceeded instead of overspending."""
        out = self.start(request)
        return await out if type(out) is Later else out  # type: ignore[return-value]

    def start(self, request: GenerateRequest) -> Completion | Later[Completion]:
        """`generate`, answered at once when the cache or the backend answers without waiting;
        otherwise a Later that finishes the call (it holds a slot and a reservation: await it).

        A search makes most of its calls this way: a call that needs no wait then costs no
        coroutine of the gateway's own. Raises what generate raises when the call fails at once.
        """
        call = self._open(request)
        sub = call.sub
        if sub is None:
            return self._close(call, None)
        try:
            first = self._send_now(sub, call.record)
        except TransientModelError as exc:
            return Later(self._finish(call, exc))
        except BaseException as exc:
            self._fail(call, exc)
            raise
        if type(first) is Later or len(first.texts) < sub.n:  # type: ignore[union-attr]
            return Later(self._finish(call, first))
        return self._close(call, first)  # type: ignore[arg-type]

    async def _finish(self, call: _Open, first: Completion | Later[Completion] | TransientModelError) -> Completion:
        """The rest of a call `start` could not answer at once: its wait, its retries, its missing samples."""
        sub, record = call.sub, call.record
        assert sub is not None
        try:
            try:
                if isinstance(first, TransientModelError):
                    raise first
                completion = await first if type(first) is Later else first
            except TransientModelError as exc:
                if self.retry.max_attempts <= 1:
                    raise
                await self._back_off(1, exc)
                completion = await self._retried(sub, record, tried=1)
            if len(completion.texts) < sub.n:  # type: ignore[union-attr]
                completion = await self._rest_of_samples(sub, record, completion)  # type: ignore[arg-type]
        except BaseException as exc:
            self._fail(call, exc)
            raise
        return self._close(call, completion)  # type: ignore[arg-type]

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
                for i, completion in zip(todo, completions, strict=True):
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
        if counted is None:
            self._uncounted = True
            counted = prompt_token_bound(request.prompt, self.capabilities.prompt_form)
        if request.score_choices:
            # Scoring reads every choice after the prompt; no token is shorter than one byte.
            counted += sum(len(c.encode()) for c in request.choices)
        if request.tools is not None:
            # The function definitions are read as prompt too (no token is shorter than one byte), in a
            # preamble the server's template adds (OpenAI's "# Tools" namespace), bounded by a margin.
            counted += utf8_size(request.tools) + TOOLS_PREAMBLE_TOKENS
        return counted

    def _out_bound(self, request: GenerateRequest) -> int:
        """The most output tokens a request can cost: its samples' max_tokens and their thinking."""
        # Read on every request: the capabilities once read, not through two properties each time.
        caps = self._capabilities if self._capabilities is not None else self.capabilities
        return request.n * (request.max_tokens + caps.thinking_tokens)

    def _fit_request(self, request: GenerateRequest) -> tuple[GenerateRequest, int]:
        """Shrink max_tokens to what the budget still allows; return the request and its reservation."""
        input_bound = self._input_bound(request)
        left = None if self.budget.limits.tokens is None else self.budget.tokens_left()
        if left is not None and input_bound + self._out_bound(request) > left:
            per_sample = (left - input_bound) // request.n - self.thinking_tokens
            if per_sample < min(MIN_USEFUL_TOKENS, request.max_tokens):
                raise BudgetExceeded(
                    "tokens",
                    f"token budget nearly used up: {max(left, 0)} left of {self.budget.limits.tokens}, "
                    f"a call needs at least {input_bound + request.n * (MIN_USEFUL_TOKENS + self.thinking_tokens)}",
                )
            request = replace(request, max_tokens=per_sample)
        return request, input_bound + self._out_bound(request)

    async def _back_off(self, attempt: int, exc: TransientModelError) -> None:
        """Wait before retry number `attempt`, saying so in the log."""
        if self._rng is None:
            self._rng = random.Random(self._rng_seed)
        delay = self.retry.delay(attempt, self._rng, exc)
        logger.info("%s: transient error (attempt %d of %d): %s; retrying in %.2fs",
                       self.backend.name, attempt, self.retry.max_attempts, exc, delay)
        await asyncio.sleep(delay)

    async def _retried(self, request: GenerateRequest, record: CallRecord, tried: int = 0) -> Completion:
        """Send a request until it is answered, retrying transient errors (each retry is a request)."""
        attempt = tried
        while True:
            attempt += 1
            try:
                return await self._send(request, record)
            except TransientModelError as exc:
                if attempt >= self.retry.max_attempts:
                    raise
                await self._back_off(attempt, exc)

    async def _send(self, request: GenerateRequest, record: CallRecord) -> Completion:
        """One request on the wire (see _send_now), awaited to its answer."""
        out = self._send_now(request, record)
        return await out if type(out) is Later else out  # type: ignore[return-value]

    def _send_now(
        self, request: GenerateRequest, record: CallRecord, slotted: bool = False
    ) -> Completion | Later[Completion]:
        """One request on the wire: a slot and a reservation before it is sent, settled by what it
        cost; answered at once when the backend answers without waiting (llm/inline.py), else a
        Later that waits for the answer in the caller's task."""
        sem = self._sem
        if not slotted and not sem.try_acquire():
            return Later(self._send_when_free(request, record))
        limits = self.budget.limits
        try:
            if limits.tokens is None and request.route is None and self.pricing is None:
                # Nothing to shrink and nothing to price (the common local case): the helpers' work inline,
                # _out_bound's too (the capabilities once read).
                caps = self._capabilities if self._capabilities is not None else self.capabilities
                out_bound = request.n * (request.max_tokens + caps.thinking_tokens)
                in_bound = self._input_bound(request)
                record.attempts += 1
                reserved_cost = 0.0
                self.budget.claim(in_bound + out_bound)
            else:
                request, reserve_tokens = self._fit_request(request)
                if request.max_tokens < record.max_tokens:
                    record.max_tokens = request.max_tokens
                record.attempts += 1
                out_bound = self._out_bound(request)
                in_bound = reserve_tokens - out_bound
                reserved_cost = self._reserve_cost(request, reserve_tokens, out_bound)
                self.budget.claim(reserve_tokens, reserved_cost)
        except BaseException:
            sem.release()
            raise
        try:
            generating = self.backend.generate(request)
            coro = generating if limits.wall_s is None else self._timed(generating)
            yielded = coro.send(None)
        except StopIteration as stop:
            return self._settle(request, reserved_cost, in_bound, out_bound, stop.value)
        except BaseException as exc:
            self._settle_unanswered(request, reserved_cost, in_bound, out_bound, exc)
            raise
        return Later(self._send_later(coro, yielded, request, reserved_cost, in_bound, out_bound))

    async def _send_when_free(self, request: GenerateRequest, record: CallRecord) -> Completion:
        await self._sem.acquire()
        out = self._send_now(request, record, slotted=True)
        return await out if type(out) is Later else out  # type: ignore[return-value]

    async def _send_later(self, coro: Coroutine[Any, Any, Completion], yielded: Any, request: GenerateRequest,
                          reserved_cost: float, in_bound: int, out_bound: int) -> Completion:
        """Wait, in this task, for a backend call that did not answer at once; then settle it."""
        try:
            completion = await cancellable(coro, yielded)
        except BaseException as exc:
            self._settle_unanswered(request, reserved_cost, in_bound, out_bound, exc)
            raise
        return self._settle(request, reserved_cost, in_bound, out_bound, completion)

    def _settle(self, request: GenerateRequest, reserved_cost: float, in_bound: int, out_bound: int,
                completion: Completion) -> Completion:
        """Charge an answered request what it reported (made possible, see _checked) and free its slot."""
        try:
            usage = completion.usage
            # _checked's first test, inline (this runs once per request): a backend that counts its own
            # tokens and reports a possible usage is charged it as reported, without the call.
            if self._uncounted or not (0 <= usage.input_tokens <= in_bound and 0 <= usage.output_tokens <= out_bound):
                usage = self._checked(request, usage, in_bound, completion.texts, out_bound)
                if usage is not completion.usage:
                    completion = replace(completion, usage=usage)
        except BaseException as exc:  # not a Completion: the backend is broken, the request still went out
            self._settle_unanswered(request, reserved_cost, in_bound, out_bound, exc)
            raise
        priced = self.pricing is not None or self.route_pricing
        self.budget.charge(in_bound + out_bound, reserved_cost, request.route, usage,
                           self._cost(usage, request.route) if priced else 0.0)
        self._sem.release()
        return completion

    def _settle_unanswered(self, request: GenerateRequest, reserved_cost: float, in_bound: int, out_bound: int,
                           exc: BaseException) -> None:
        """Charge a request that got no answer (see _unanswered) and free its slot."""
        try:
            usage = self._unanswered(exc, Usage(in_bound, out_bound))
            priced = usage is not None and (self.pricing is not None or self.route_pricing)
            self.budget.charge(in_bound + out_bound, reserved_cost, request.route, usage,
                               self._cost(usage, request.route) if priced else 0.0)  # type: ignore[arg-type]
        finally:
            self._sem.release()

    async def _rest_of_samples(self, request: GenerateRequest, record: CallRecord, first: Completion) -> Completion:
        """A server that ignores n answered fewer samples: ask again for the rest, each request
        reserved, counted and slotted like any other. The budget refusing one keeps the samples
        already paid for (fewer than n)."""
        per_request = len(first.texts)
        if per_request == 0:
            raise ModelError(f"{self.backend.name} returned no samples; check that the server supports this endpoint")
        texts, usage, extra = list(first.texts), first.usage, 0
        while len(texts) < request.n:
            missing = request.n - len(texts)
            sizes = [min(per_request, missing - done) for done in range(0, missing, per_request)]
            # Each request gets its own seed: with the caller's seed repeated, a seeded server
            # would return the same sample every time.
            subs = [
                replace(request, n=size, seed=None if request.seed is None else request.seed + extra + k + 1,
                        on_text=_shifted(request.on_text, len(texts) + sum(sizes[:k])))
                for k, size in enumerate(sizes)
            ]
            extra += len(subs)
            outcomes = await asyncio.gather(*(self._retried(sub, record) for sub in subs), return_exceptions=True)
            failed = next((o for o in outcomes if isinstance(o, BaseException)), None)
            if failed is not None and (isinstance(failed, _CutOff) or not isinstance(failed, BudgetExceeded)):
                raise failed
            added = 0
            for outcome in outcomes:
                if isinstance(outcome, Completion):
                    texts.extend(outcome.texts)
                    usage = usage + outcome.usage
                    added += len(outcome.texts)
            if failed is not None:
                break  # the budget refused a request: keep the samples already paid for
            if added == 0:
                raise ModelError(
                    f"{self.backend.name} returned no samples for the missing ones; ask for n=1 or check the server"
                )
        return Completion(tuple(texts[: request.n]), usage, first.model)

    async def _batch_within_budget(self, calls: list[_Open]) -> list[Completion]:
        """One batched request (and its retries): one slot, one reservation per prompt it carries."""
        requests = [c.sub for c in calls]
        records = [c.record for c in calls]
        attempt = 0
        while True:
            attempt += 1
            try:
                return await self._send_batch(requests, records)  # type: ignore[arg-type]
            except TransientModelError as exc:
                if attempt >= self.retry.max_attempts:
                    raise
                await self._back_off(attempt, exc)

    async def _send_batch(self, requests: list[GenerateRequest], records: list[CallRecord]) -> list[Completion]:
        backend: Any = self.backend
        reservations: list[Reservation] = []
        await self._sem.acquire()
        try:
            bounds = [self._input_bound(r) for r in requests]
            need = sum(b + self._out_bound(r) for b, r in zip(bounds, requests, strict=True))
            left = self.budget.tokens_left()
            if left is not None and need > left:
                raise BudgetExceeded(
                    "tokens",
                    f"a batch of {len(requests)} calls needing up to {need} tokens does not fit in "
                    f"the {max(left, 0)} left of the {self.budget.limits.tokens}-token budget",
                )
            try:
                for request, bound in zip(requests, bounds, strict=True):
                    reservations.append(self._reserve(request, bound + self._out_bound(request))[0])
            except BudgetExceeded:
                for reservation in reservations:
                    self.budget.settle(reservation, None)
                raise
            for record in records:
                record.attempts += 1
            usages: list[Usage | None] = [None] * len(requests)
            try:
                completions = await self._timed(call_inline(backend.generate_batch(requests)))
                if len(completions) != len(requests):
                    raise ModelError(f"{backend.name} answered {len(completions)} of {len(requests)} batched requests")
                usages = self.charge_batch(requests, completions, bounds)
                return [c if c.usage == u else replace(c, usage=u) for c, u in zip(completions, usages, strict=True)]
            except BaseException as exc:
                usages = self.charge_batch(requests, exc, bounds)
                raise
            finally:
                for request, reservation, usage in zip(requests, reservations, usages, strict=True):
                    self.budget.settle(reservation, usage,
                                       self._cost(usage, request.route) if usage is not None else 0.0)
        finally:
            self._sem.release()

    # --- what a request costs ---------------------------------------------------------------

    def charge(self, request: GenerateRequest, outcome: Completion | BaseException) -> Usage | None:
        """What one request handed to the backend costs the ledger (None: nothing was sent).

        An answer costs its reported usage, checked (see _checked); a request that went out and got
        no answer (cancelled, cut off by the wall clock, timed out) costs its reservation, since the
        server may have generated every token; one the server refused costs no tokens but is a call.
        """
        bound = self._input_bound(request)
        if isinstance(outcome, Completion):
            return self._checked(request, outcome.usage, bound, outcome.texts)
        return self._unanswered(outcome, Usage(bound, self._out_bound(request)))

    def charge_batch(
        self, requests: Sequence[GenerateRequest], outcome: Sequence[Completion] | BaseException,
        bounds: Sequence[int] | None = None,
    ) -> list[Usage | None]:
        """What each request of one batched backend call costs (see charge)."""
        bounds = bounds if bounds is not None else [self._input_bound(r) for r in requests]
        worst = [Usage(b, self._out_bound(r)) for b, r in zip(bounds, requests, strict=True)]
        if not isinstance(outcome, BaseException):
            return [
                self._checked(r, c.usage, w.input_tokens, c.texts)
                for r, c, w in zip(requests, outcome, worst, strict=False)
            ]
        if isinstance(outcome, BatchRefused) and outcome.usage is not None:
            # The server answered the list wrongly but billed it: the whole (checked) usage goes on
            # the first request, each request is still a call.
            total = Usage(sum(w.input_tokens for w in worst), sum(w.output_tokens for w in worst))
            used = outcome.usage
            clamped = Usage(
                _clamp(used.input_tokens, total.input_tokens), _clamp(used.output_tokens, total.output_tokens)
            )
            if clamped != used:
                self._warn(
                    "batch", f"{self.backend.name} reported impossible usage {used} for a batch; charged {clamped}"
                )
            return [clamped, *[NO_USAGE] * (len(requests) - 1)]
        return [self._unanswered(outcome, w) for w in worst]

    def _unanswered(self, exc: BaseException, worst: Usage) -> Usage | None:
        if isinstance(exc, (asyncio.CancelledError, _CutOff, ModelTimeout)) or getattr(exc, "cut_short", False):
            return worst
        if isinstance(exc, BudgetExceeded):
            return None  # refused before anything was sent (a replay's emulated wall clock)
        return NO_USAGE  # the server answered with an error: a call, but no tokens

    def _checked(self, request: GenerateRequest, usage: Usage, input_bound: int, texts: Sequence[str],
                 out_bound: int | None = None) -> Usage:
        """What an answered request is charged: the usage its backend reported, made possible and believable.

        A count below zero or above the request's bound (the prompt bound, n x max_tokens) is
        replaced by the local bound: the ledger never decreases and never exceeds what was reserved.
        A backend that does not count its own tokens (a server) must also report at least what the
        prompt and the replies must cost (their bytes / MAX_TOKEN_BYTES, which no tokenizer we meet
        undercuts): a report below that is not believed, and each of its counts becomes at least the
        local estimate (BYTES_PER_TOKEN bytes a token), so a server reporting 0 or 1 token a reply
        cannot make the budget soft. Honest counts below the estimate (a tokenizer that packs more
        bytes a token) stay as reported. Each kind of correction is logged once, as a warning.
        """
        if out_bound is None:
            out_bound = self._out_bound(request)
        used_in, used_out = usage.input_tokens, usage.output_tokens
        possible = 0 <= used_in <= input_bound and 0 <= used_out <= out_bound
        if possible and not self._uncounted:
            return usage  # an in-process model's count, from its own tokenizer
        # Every form the prompt has (the smallest wins below): a request may pin a form other than the backend's.
        sent = [text for text, _ in _sent_forms(request.prompt, None)]
        least_in = min(least_tokens(t) for t in sent) if self._uncounted else 0
        # A score_choices reply is the choices' odds, not generated text: it costs no output tokens.
        replies = () if request.score_choices or not self._uncounted else texts
        least_out = sum(min(request.max_tokens, least_tokens(t)) for t in replies)
        under = 0 <= used_in < least_in or 0 <= used_out < least_out
        if possible and not under:
            return usage
        reasoning = usage.reasoning_tokens
        if not possible:
            # No token is shorter than one byte: the texts' bytes bound what they cost.
            out_bytes = min(out_bound, sum(utf8_size(t) for t in texts))
            used_in = input_bound if not 0 <= used_in <= input_bound else used_in
            used_out = out_bytes if used_out < 0 else min(used_out, out_bound)
            self._warn(
                "usage",
                f"{self.backend.name} reported impossible usage ({usage.input_tokens} prompt, {usage.output_tokens} "
                f"completion tokens for a prompt of at most {input_bound} and {out_bound} completion tokens); "
                f"charged {used_in} and {used_out} instead",
            )
        if under:
            estimate_in = min(estimate_tokens(t) for t in sent)
            estimate_out = sum(min(request.max_tokens, estimate_tokens(t)) for t in replies)
            used_in = max(used_in, min(input_bound, estimate_in))
            used_out = max(used_out, min(out_bound, estimate_out))
            self._warn(
                "under",
                f"{self.backend.name} reported {usage.input_tokens} prompt and {usage.output_tokens} completion "
                f"tokens, fewer than the texts must cost (at least {least_in} and {least_out}); charged the "
                f"local estimate, {used_in} and {used_out}, against the budget instead",
            )
        return Usage(used_in, used_out, min(max(reasoning, 0), used_out))

    def _warn(self, kind: str, message: str) -> None:
        """Log a warning once per kind: a hostile server repeats itself on every call."""
        if kind not in self._warned:
            self._warned.add(kind)
            logger.warning("%s (further ones not shown)", message)

    async def _timed(self, call: Awaitable[T]) -> T:
        """Await a backend call, cut off when the wall-clock budget runs out."""
        if self.budget.wall_left() is None:
            return await call
        try:
            return await self.budget.within_wall(call)
        except TimeoutError:
            raise _CutOff("wall_s", "wall-clock budget ran out during a call") from None

    def _reserve(self, request: GenerateRequest, reserve_tokens: int) -> tuple[Reservation, int]:
        out_tokens = self._out_bound(request)
        return self.budget.reserve(reserve_tokens, self._reserve_cost(request, reserve_tokens, out_tokens),
                                   request.route), out_tokens

    def _reserve_cost(self, request: GenerateRequest, reserve_tokens: int, out_tokens: int) -> float:
        """The dollars to hold for a request of at most so many tokens (nothing for an unpriced model)."""
        pricing = self.pricing if request.route is None else self._price(request.route)
        return pricing.cost(reserve_tokens - out_tokens, out_tokens) if pricing else 0.0

    async def aclose(self) -> None:
        """Close the backend."""
        await self.backend.aclose()
