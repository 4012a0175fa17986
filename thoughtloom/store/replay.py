"""Serving recorded model calls: replay (zero model calls) and resume (recorded first, then live).

ReplayBackend implements the Backend protocol over a run's recorded exchanges (see runs.py). A
request is matched by its key (prompt, n, max_tokens, temperature, stop, seed; of the prompt, the
form the recorded backend read, when its identity says which): identical
requests take the recorded exchanges with that key in the order they were originally sent. The
answers are released in the recorded completion order, because node ids are handed out in the
order completions are processed: exchange `rank` r is answered only when

1. every exchange of lower rank has been answered,
2. at least as many requests have reached the backend as had when r completed (`issued`), and
3. the event loop has run out of ready work, so whatever the previous answer set in motion has
   happened before the next answer arrives, as it had in the original run, where each answer
   came over the network long after the microseconds of work the previous one caused.

A request that matches nothing raises ModelError("replay diverged: ...") (a pure replay), or,
for resume, waits until every recorded exchange has been answered and goes to the live backend
(`live_calls` counts those; a replay's is always 0). Recorded errors are
raised again: model errors as ModelError, transient ones as TransientModelError (the gateway
retries them; the replay gateway without delay), wall-clock cut-offs as the gateway's own cut-off.
A run that stopped on its wall-clock budget is replayed without that limit; once its recorded
exchanges are used up, further requests are refused as the wall clock refused them
(`after_recording="wall_s"`). Token counts the original backend gave are served from the record,
so the budget reserves exactly what it reserved then.

If the request an answer waits for never comes (the search went another way), the waiters give up
after `stall_s` seconds without progress: a replay reports the divergence, a resume stops holding
live calls back.

compare_graphs() finds the first node (by id) whose stored version differs between two graphs.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..llm.errors import BatchRefused, BudgetExceeded, ModelError, ModelTimeout, TransientModelError
from ..llm.types import NO_CAPABILITIES, Backend, Completion, GenerateRequest, Prompt, capabilities_of
from ..llm.wrapper import BackendWrapper
from .blocks import CID
from .runs import RecordedCall, load_graph, prompt_digest, read_text, request_key
from .store import BlockStore, get_obj

#: Seconds without any progress after which a waiting answer gives up.
STALL_S = 10.0
#: Most event-loop turns spent waiting for the loop to run out of ready work before an answer.
_SETTLE_TURNS = 200


def _cut_off(message: str) -> Exception:
    # The gateway's own exception for a call the wall clock ended: it charges the call in full,
    # exactly as it did in the original run.
    from ..llm.gateway import _CutOff

    return _CutOff("wall_s", message)


class OfflineBackend:
    """What a pure replay wraps: the recorded backend's identity, and no model behind it."""

    #: It can do nothing itself: the ReplayBackend over it declares what the recorded run did.
    capabilities = NO_CAPABILITIES

    def __init__(self, name: str, max_concurrency: int) -> None:
        self.name = name
        self.max_concurrency = max_concurrency

    async def generate(self, request: GenerateRequest) -> Completion:
        """Never reached: a replay answers only from the record."""
        raise ModelError("replay has no live model")

    async def generate_batch(self, requests: Sequence[GenerateRequest]) -> list[Completion]:
        """Never reached: a replay answers only from the record."""
        raise ModelError("replay has no live model")

    def count_tokens(self, prompt: Prompt) -> int | None:
        """Unknown: the record's counts are all a replay has."""
        return None

    async def aclose(self) -> None:
        """Nothing to release."""


class ReplayBackend(BackendWrapper):
    """A Backend answering from recorded exchanges, in their recorded order (see module docstring).

    It wraps the live backend when resuming (`live`), else an OfflineBackend; the recorded
    identity (name, concurrency, batching, pricing, the roles' prices) is what the gateway sees either way.
    """

    def __init__(
        self,
        calls: Sequence[RecordedCall],
        *,
        name: str,
        max_concurrency: int,
        supports_batch: bool = False,
        pricing: Any = None,
        route_pricing: Any = None,
        counts: dict[str, int] | None = None,
        live: Backend | None = None,
        after_recording: str | None = None,
        stall_s: float = STALL_S,
        form: str | None = None,
        thinking_tokens: int = 0,
    ) -> None:
        super().__init__(live if live is not None else OfflineBackend(name, max_concurrency))
        self.resuming = live is not None
        self.name = name
        self.max_concurrency = max_concurrency
        self.supports_batch = supports_batch
        own = capabilities_of(live)
        self.capabilities = replace(
            own,
            # A run that scored choices asks for distributions again, and gets the recorded ones.
            scores_choices=any(c.scored for c in calls) or own.scores_choices,
            # A run whose samples kept to choices sends them again; one recorded without (an API that
            # ignores them, or a run from before requests had choices) does not.
            follows_choices=(any(c.choices and not c.scored for c in calls)
                             or own.follows_choices),
            # A run that sent its tools as function definitions sends them again, and reads the recorded calls.
            native_tools=any(c.tools is not None for c in calls) or own.native_tools,
            # The live run's thinking budget: the gateway bounds each answer's output by it, as it did then.
            thinking_tokens=thinking_tokens,
            pricing=pricing,
            # The prices of the roles' own models (a run with a model per role), as the live run had them.
            route_pricing=tuple(dict(route_pricing or {}).items()),
        )
        self.counts = dict(counts or {})
        self.stall_s = stall_s
        self.after_recording = after_recording
        self._order = sorted(calls, key=lambda c: c.rank)
        self._position = {id(c): i for i, c in enumerate(self._order)}
        self._queues: dict[tuple[Any, ...], deque[RecordedCall]] = {}
        # Requests are matched on the prompt form the recorded backend read (None: both forms).
        self.form = form
        for call in sorted(calls, key=lambda c: c.start):
            self._queues.setdefault(call.key(form), deque()).append(call)
        self._next = 0  # position in _order of the next exchange to answer
        self._started = 0  # requests that reached this backend
        self._event: asyncio.Event | None = None
        self._abandoned = False
        #: Exchanges answered from the record.
        self.replayed = 0
        #: Requests sent to the live backend (resume only).
        self.live_calls = 0
        #: Why the replay went off the record, if it did.
        self.divergence: str | None = None

    # --- bookkeeping ----------------------------------------------------------------------------

    @property
    def unused(self) -> int:
        """Recorded exchanges nobody asked for (yet)."""
        return sum(len(q) for q in self._queues.values())

    def _changed(self) -> asyncio.Event:
        if self._event is None:
            self._event = asyncio.Event()
        return self._event

    def _poke(self) -> None:
        event, self._event = self._event, None
        if event is not None:
            event.set()

    async def _wait_change(self) -> bool:
        """Wait for progress; False after stall_s seconds without any."""
        try:
            await asyncio.wait_for(self._changed().wait(), self.stall_s)
        except TimeoutError:
            return False
        return True

    async def _settle(self) -> None:
        """Let the work the previous answer started run until the loop has nothing else ready."""
        ready = getattr(asyncio.get_running_loop(), "_ready", None)  # CPython's ready queue
        for _ in range(_SETTLE_TURNS if ready is not None else 20):
            await asyncio.sleep(0)
            if ready is not None and not ready:
                return

    def _take(self, request: GenerateRequest) -> RecordedCall | None:
        queue = self._queues.get(self._key(request, request.schema))
        if not queue and request.schema is not None:
            # A run stored before this reply was asked for by schema (votes, plans, contracts, verdicts and
            # values asked for JSON later): the same request without one is what it recorded, and its
            # answer (free text, read by the task's text fallback) is what it got.
            queue = self._queues.get(self._key(request, None))
        return queue.popleft() if queue else None

    def _key(self, request: GenerateRequest, schema: str | None) -> tuple[Any, ...]:
        return request_key(request.prompt, request.n, request.max_tokens, request.temperature, request.stop,
                           request.seed, self.form, schema, request.route, request.form, request.choices,
                           request.score_choices, request.tools)

    async def _turn(self, call: RecordedCall, size: int) -> None:
        """Wait until this recorded exchange is the next to answer, then advance past it."""
        position = self._position[id(call)]
        while not self._abandoned:
            if self.divergence is not None:  # the replay is over: fail fast instead of waiting out the stall
                raise ModelError(self.divergence)
            if self._next == position and self._started >= call.issued:
                await self._settle()
                break
            if not await self._wait_change():
                if self.resuming:  # resume: stop holding calls back, carry on
                    self._abandoned = True
                    break
                waiting = self._order[self._next] if self._next < len(self._order) else None
                what = (f"recorded call #{waiting.rank} ({waiting.purpose}, prompt ending "
                        f"{_tail(waiting.prompt)!r}) was never asked for") if waiting else "the record ran out"
                self._diverged(f"replay diverged: {what}")
        self._next = max(self._next, position + size)
        self._poke()

    def _diverged(self, message: str) -> None:
        self.divergence = self.divergence or message
        self._poke()
        raise ModelError(message)

    def _answer(self, call: RecordedCall) -> Completion:
        if call.error_kind == "transient":
            raise TransientModelError(call.error or "transient error")
        if call.error_kind == "timeout":
            raise ModelTimeout(call.error or "timed out")
        if call.error_kind == "batch_refused":
            raise BatchRefused(call.error or "batch refused")
        if call.error_kind == "cutoff":
            raise _cut_off(call.error or "wall-clock budget ran out during a call")
        if call.error_kind is not None:
            raise ModelError(call.error or "model error")
        self.replayed += 1
        return Completion(call.texts, call.usage, call.model)

    async def _off_record(self, request: GenerateRequest) -> None:
        """A request the record does not hold: diverge, refuse as the wall clock did, or wait for live."""
        if not self.resuming:
            if self.after_recording == "wall_s" and self._next >= len(self._order):
                raise BudgetExceeded("wall_s", "wall-clock budget is used up")
            self._diverged(f"replay diverged: the search asked for a call that was not recorded "
                           f"({request.purpose}, prompt ending {_tail(request.prompt)!r})")
        while self._next < len(self._order) and not self._abandoned:
            if not await self._wait_change():
                self._abandoned = True
        self.live_calls += 1

    # --- the Backend protocol -------------------------------------------------------------------

    async def generate(self, request: GenerateRequest) -> Completion:
        """The recorded answer to this request, in its turn (or the live one, resuming)."""
        self._started += 1
        self._poke()
        call = self._take(request)
        if call is None:
            await self._off_record(request)
            return await self.inner.generate(request)
        await self._turn(call, 1)
        return self._answer(call)

    async def generate_batch(self, requests: Sequence[GenerateRequest]) -> list[Completion]:
        """Recorded answers to a batch recorded as one (its members have consecutive ranks)."""
        self._started += len(requests)
        self._poke()
        calls = [self._take(r) for r in requests]
        if any(c is None for c in calls):
            if not self.resuming or any(c is not None for c in calls):
                self._diverged("replay diverged: the search asked for a batch that was not recorded")
            await self._off_record(requests[0])
            self.live_calls += len(requests) - 1
            return await self.inner.generate_batch(requests)  # type: ignore[attr-defined]
        first = min(calls, key=lambda c: c.rank)  # type: ignore[union-attr]
        await self._turn(first, len(calls))  # type: ignore[arg-type]
        return [self._answer(c) for c in calls]  # type: ignore[arg-type]

    def count_tokens(self, prompt: Prompt) -> int | None:
        """The count the original backend gave for this prompt (the live one's when resuming)."""
        tokens = self.counts.get(prompt_digest(prompt)) if self.counts else None
        if tokens is None and self.resuming:
            return self.inner.count_tokens(prompt)
        return tokens

    async def aclose(self) -> None:
        """Close the live backend (resuming)."""
        await self.inner.aclose()


def _tail(prompt: Prompt, size: int = 60) -> str:
    text = " ".join(prompt.as_text().split())
    return text[-size:]


# --- comparing graphs -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Divergence:
    """The first node whose stored version differs between a recorded and a replayed graph."""

    node_id: int
    recorded: str  # a one-line description, or "(absent)"
    replayed: str

    def __str__(self) -> str:
        return f"first diverging node #{self.node_id}: recorded {self.recorded} vs replayed {self.replayed}"


def _describe(store: BlockStore, version_cid: CID | None) -> str:
    if version_cid is None:
        return "(absent)"
    version = get_obj(store, version_cid)
    thought = get_obj(store, version["thought"].cid)
    content = " ".join((read_text(store, thought["content"]) or "").split())
    if len(content) > 60:
        content = content[:57] + "..."
    score = "" if version["score"] is None else f", score {version['score']:.2f}"
    return f"{thought['kind']} {content!r} [{version['status']}{score}]"


def compare_graphs(recorded_store: BlockStore, recorded: CID, replayed_store: BlockStore,
                   replayed: CID) -> Divergence | None:
    """None when the graphs are identical, else the first node (by id) that differs."""
    if recorded == replayed:
        return None
    a = load_graph(recorded_store, recorded).versions
    b = load_graph(replayed_store, replayed).versions
    for i in range(max(len(a), len(b))):
        va = a[i] if i < len(a) else None
        vb = b[i] if i < len(b) else None
        if va != vb:
            return Divergence(i, _describe(recorded_store, va), _describe(replayed_store, vb))
    return None  # same versions, different chunking: cannot happen with one CHUNK size
