"""Model calls: how a search asks its model (ModelCalls, a base of SearchContext).

Every call a strategy or an operator makes goes through these methods: the request is built from
the task's query (seeded from its content, routed by role), sent under the config's concurrency
cap, and a refused budget is negotiated with the controller before the search stops. They are
methods of the context itself (a base class, not an object it holds), so the operators' hot loops
pay no extra call per model request.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from ..llm.budget import BudgetLimits
from ..llm.errors import BatchRefused, BudgetExceeded, ModelError
from ..llm.gateway import Gateway
from ..llm.inline import Later
from ..llm.slots import Slots
from ..llm.types import Completion, GenerateRequest
from ..tasks.base import Query
from .config import SearchConfig
from .counts import SearchCounts
from .eager import eager_gather
from .events import EventBus, ThoughtDelta
from .stop import StopReason

#: What a model call gave the search: its texts and the tokens it cost.
Answer = tuple[list[str], int]


class ModelCalls:
    """Asking the model on behalf of a search: `ask`, `ask_now`, `ask_many` (SearchContext sets the state)."""

    # The search's state these methods use (set by SearchContext.__init__).
    config: SearchConfig
    gateway: Gateway
    bus: EventBus
    counts: SearchCounts
    routed_roles: frozenset[str]
    temperature: float
    stop_reason: StopReason | None
    error: str | None
    _call_slots: Slots | None
    _watched_calls: int
    _successful_calls: int

    if TYPE_CHECKING:  # defined by SearchContext

        @property
        def stopped(self) -> bool: ...

        def stop(self, reason: StopReason) -> None: ...

        async def _budget_raised(self, limit: str, before: BudgetLimits) -> bool: ...

    def _seed(self, purpose: str, key: object) -> int | None:
        # Derived from content, not call order, so concurrent runs stay reproducible.
        if self.config.seed is None:
            return None
        return zlib.crc32(f"{self.config.seed}|{purpose}|{key!r}".encode()) & 0x7FFFFFFF

    @property
    def scores_choices(self) -> bool:
        """True when a query's choices are scored from the model's distribution (one call, no samples)."""
        return self.gateway.scores_choices

    def _request(self, query: Query, n: int, purpose: str, key: object, role: str | None) -> GenerateRequest:
        choices = query.choices
        # The backend's capabilities are read only for a query with choices: this runs once per call.
        score = bool(choices) and self.gateway.scores_choices
        # Positional (keywords cost twice as much, once per call): prompt, n, max_tokens,
        # temperature, stop, seed, purpose, schema, route, choices, score_choices, logprobs, form, tools
        # (test_search.py checks each
        # field arrives where it belongs).
        request = GenerateRequest(
            query.prompt,
            1 if score else n,
            1 if score else query.max_tokens,
            self.temperature if query.temperature is None else query.temperature,
            query.stop,
            None if self.config.seed is None else self._seed(purpose, key),  # no call per request when unseeded
            purpose,
            query.schema,
            # Only a role with a model of its own is routed: the requests (and so the cache and replay
            # keys) of a run without role models stay what they were.
            role if role is not None and role in self.routed_roles else None,
            choices if choices and (score or self.gateway.follows_choices) else (),
            score,
            None,  # logprobs
            None,  # form
            query.tools,
        )
        return request if not self.bus.deltas else self._watched(request)

    def _watched(self, request: GenerateRequest) -> GenerateRequest:
        """The request, with its reply's text sent to the event bus as it is written (ThoughtDelta)."""
        call, bus, purpose = self._watched_calls, self.bus, request.purpose
        self._watched_calls += 1
        return replace(request, on_text=lambda sample, text: bus.emit(ThoughtDelta(call, purpose, sample, text)))

    async def ask(self, query: Query, n: int, purpose: str, key: object,
                  role: str | None = None) -> Answer | None:
        """Make one model call; None when the budget or a model failure stopped the search.

        role: who asks (generator, evaluator, synthesizer, brancher); a role with a model of its
        own (`routed_roles`) has the call answered by that model.
        """
        out = self.ask_now(query, n, purpose, key, role)
        return await out if type(out) is Later else out  # type: ignore[return-value]

    def ask_now(self, query: Query, n: int, purpose: str, key: object,
                role: str | None = None) -> Answer | None | Later[Answer | None]:
        """`ask`, answered at once when the model answers without waiting; otherwise a Later that
        finishes the call (await it). The operators' hot loops call this: a call answered at once
        then costs no coroutine."""
        if self.stop_reason is not None:  # self.stopped, without the property call (once per model call)
            return None
        request = self._request(query, n, purpose, key, role)
        if self._call_slots is not None:
            return Later(self._ask_later(request, self.gateway.budget.limits, None))
        try:
            out = self.gateway.start(request)
        except (BudgetExceeded, ModelError) as exc:
            # start() never waits, so the limits are still the ones the call was made under.
            return Later(self._ask_later(request, self.gateway.budget.limits, exc))
        if type(out) is Later:
            return Later(self._ask_later(request, self.gateway.budget.limits, out))
        return self._answered(request, out)  # type: ignore[arg-type]

    async def _ask_later(self, request: GenerateRequest, limits_before: BudgetLimits,
                         first: Later[Completion] | BaseException | None) -> Answer | None:
        """The rest of a call that waited or failed (first: how its first try went; None: not made
        yet): a budget the controller raises makes the call again."""
        while True:
            try:
                if isinstance(first, BaseException):
                    raise first
                if first is not None:
                    completion = await first
                elif self._call_slots is None:
                    completion = await self.gateway.generate(request)
                else:
                    async with self._call_slots:
                        completion = await self.gateway.generate(request)
                break
            except BudgetExceeded as exc:
                if await self._budget_raised(exc.limit, limits_before):
                    first, limits_before = None, self.gateway.budget.limits
                    continue  # the limit was raised: make the call after all
                self.stop(StopReason.budget(exc.limit))
                return None
            except ModelError as exc:
                self._model_failed(exc)
                return None
        return self._answered(request, completion)

    def _answered(self, request: GenerateRequest, completion: Completion) -> Answer:
        """A successful call's texts and what it cost in tokens."""
        self._successful_calls += 1
        if request.schema is not None:
            self._count_parse_failures(request, completion.texts)
        usage = completion.usage
        return list(completion.texts), usage.input_tokens + usage.output_tokens

    def _count_parse_failures(self, request: GenerateRequest, texts: Sequence[str]) -> None:
        """Count the replies to a structured request that are not the JSON object it asked for: the
        task read them with its text fallback, and how often that happens says whether the backend
        enforces schemas (a reply constrained to choices is not JSON, and is not counted)."""
        if request.schema is None or request.choices:
            return
        self.counts.parse_failures += sum(1 for text in texts if not _is_json_object(text))

    def _model_failed(self, exc: ModelError) -> None:
        if self._successful_calls == 0:
            raise exc  # nothing computed yet: a configuration problem the caller must see
        self.error = str(exc)
        self.stop(StopReason.MODEL_ERROR)

    async def ask_many(
        self, queries: Sequence[Query], n: int, purpose: str, keys: Sequence[object], role: str | None = None,
    ) -> list[Answer | None]:
        """Make several calls as one batched backend call (concurrent single calls if it cannot); role as in ask."""
        if self.stopped:
            return [None] * len(queries)
        if self.gateway.batches:
            requests = [self._request(q, n, purpose, k, role) for q, k in zip(queries, keys, strict=True)]
            try:
                if self._call_slots is None:
                    completions = await self.gateway.generate_batch(requests)
                else:
                    async with self._call_slots:
                        completions = await self.gateway.generate_batch(requests)
            except BudgetExceeded:
                pass  # the batch does not fit as a whole: the calls one by one shrink or negotiate
            except BatchRefused:
                pass  # the server cannot batch (it never will be asked again): single calls
            except ModelError as exc:
                self._model_failed(exc)
                return [None] * len(queries)
            else:
                self._successful_calls += len(completions)
                for request, completion in zip(requests, completions, strict=True):
                    self._count_parse_failures(request, completion.texts)
                return [(list(c.texts), c.usage.total) for c in completions]
        return await eager_gather(self.ask(q, n, purpose, k, role) for q, k in zip(queries, keys, strict=True))


def _is_json_object(text: str) -> bool:
    """Whether a reply is one JSON object (what a structured request asks for)."""
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False
