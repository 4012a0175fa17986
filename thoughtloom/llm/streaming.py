"""What every streaming backend shares: the text sink a request carries, coalesced deltas, a stream's limits.

A backend streams a request only when it has a listener (`GenerateRequest.on_text`) and streaming is
on for it (`stream=True`, the default; `--no-stream` or THOUGHTLOOM_STREAM=0 turn it off for servers
that cannot stream). The reply a backend returns is the same either way: the whole texts and the usage,
so the gateway charges, caches and records it as before, and a replay never needs the stream.

The stream is untrusted like any reply: `StreamGuard` refuses, in one line, a stream longer than its
request's max_tokens can be (no token is more than MAX_TOKEN_BYTES bytes) and one with more events than
tokens allowed; the backend refuses one still running at its timeout (ModelTimeout, as a reply that never came).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from .budget import MAX_TOKEN_BYTES, utf8_size
from .errors import ModelError, ModelTimeout, TransientModelError, cut_short
from .http_errors import one_line
from .text import valid_text

#: Where a streamed reply's text goes as it arrives: (sample index, the text added since the last call).
TextSink = Callable[[int, str], None]

#: Deltas are handed on at most this often per request (a token a call would flood an event log) ...
DELTA_INTERVAL_S = 0.05
#: ... or as soon as this many characters wait.
DELTA_CHARS = 400
#: Events a stream may send beyond one per token (a role, a finish reason, the usage, keep-alive comments).
SPARE_EVENTS = 64


def stream_setting(stream: bool | None, env: Mapping[str, str]) -> bool:
    """Whether backends stream: the caller's choice, else $THOUGHTLOOM_STREAM (0, false, no, off: not), else on."""
    if stream is not None:
        return stream
    return env.get("THOUGHTLOOM_STREAM", "1").strip().lower() not in ("0", "false", "no", "off")


@dataclass(slots=True)
class Deltas:
    """A request's sink, called with each sample's new text at most every `interval_s` (or `max_chars`);
    `flush` hands on what still waits (call it when the stream ends, however it ends)."""

    sink: TextSink
    interval_s: float = DELTA_INTERVAL_S
    max_chars: int = DELTA_CHARS
    clock: Callable[[], float] = time.monotonic
    _waiting: dict[int, list[str]] = field(default_factory=dict)
    _size: int = 0
    _last: float = float("-inf")  # the first piece goes at once: a watcher sees the reply start

    def add(self, sample: int, text: str) -> None:
        """Queue a sample's new text; hand the queue on when it is due."""
        if not text:
            return
        self._waiting.setdefault(sample, []).append(text)
        self._size += len(text)
        if self._size >= self.max_chars or self.clock() - self._last >= self.interval_s:
            self.flush()

    def flush(self) -> None:
        """Hand on every sample's waiting text, in sample order."""
        waiting, self._waiting, self._size = self._waiting, {}, 0
        self._last = self.clock()
        for sample in sorted(waiting):
            # Joined first: a character a server split across two events (JSON surrogate halves) is whole again.
            self.sink(sample, valid_text("".join(waiting[sample])))


@dataclass(slots=True)
class StreamGuard:
    """The limits of one streamed reply of `n` samples of at most `max_tokens` tokens, from `where`.

    Each sample's text is capped at max_tokens x MAX_TOKEN_BYTES bytes (what no honest reply exceeds) and
    the events at one per token and a few; the backend bounds the whole stream by its timeout.
    """

    where: str
    n: int
    max_tokens: int
    texts: dict[int, list[str]] = field(default_factory=dict)
    #: The samples whose end the stream said (a finish reason, a stop event).
    finished: set[int] = field(default_factory=set)
    _sizes: dict[int, int] = field(default_factory=dict)
    _events: int = 0

    @property
    def started(self) -> bool:
        """Whether any event arrived (a failure from then on cuts a reply short: see ModelError.cut_short)."""
        return self._events > 0

    def event(self) -> None:
        """Count one event of the stream (ModelError past the cap)."""
        self._events += 1
        if self._events > self.n * self.max_tokens + SPARE_EVENTS:
            raise ModelError(f"model endpoint {self.where} streamed more than {self._events - 1} events for "
                             f"{self.n} x {self.max_tokens} tokens; it does not keep to max_tokens, "
                             "so the reply was refused (try --no-stream)")

    def text(self, sample: int, text: str) -> None:
        """Add a sample's new text (ModelError for a sample index not asked for, or past the size cap)."""
        if not 0 <= sample < self.n:
            raise ModelError(f"model endpoint {self.where} streamed choice {sample} of a request for {self.n}; "
                             "check that it is an OpenAI-compatible API (or try --no-stream)")
        size = self._sizes.get(sample, 0) + utf8_size(text)
        cap = self.max_tokens * MAX_TOKEN_BYTES
        if size > cap:
            raise ModelError(f"model endpoint {self.where} streamed more than {cap:,} bytes for one reply of at most "
                             f"{self.max_tokens} tokens; the reply was refused")
        self._sizes[sample] = size
        self.texts.setdefault(sample, []).append(text)

    def joined(self) -> tuple[str, ...]:
        """The texts received, in sample order (samples that sent nothing left out); a TransientModelError
        (to retry, charged in full) when a sample that began never said it ended: the connection dropped."""
        unfinished = sorted(set(self.texts) - self.finished)
        if unfinished:
            raise cut_short(TransientModelError(
                f"model endpoint {self.where} ended its stream before reply {unfinished[0]} did (no finish "
                "reason: the connection may have dropped); retrying (or use --no-stream)"))
        return tuple("".join(self.texts[i]) for i in sorted(self.texts))


class OpenedStream:
    """The stream a `watched_stream` block opened (kept so it is closed however the block ends)."""

    def __init__(self) -> None:
        self.stream: Any = None

    def keep(self, stream: Any) -> Any:
        """Keep `stream` to close at the end of the block; returns it."""
        self.stream = stream
        return stream


@asynccontextmanager
async def watched_stream(guard: StreamGuard, deltas: Deltas, timeout_s: float, where: str,
                         sdk_error: type[Exception], map_error: Callable[[Exception], ModelError],
                         check: str) -> AsyncIterator[OpenedStream]:
    """The frame every backend reads a stream in: the whole stream within `timeout_s` (a server can keep
    one alive forever a byte at a time); the SDK's errors mapped by `map_error` as any reply's, an event
    that is not JSON said so with `check` (what to check), anything else raised as it is; an error marked
    cut short once text came; the pending deltas flushed and the stream closed however the block ends:
    finished, refused, cut off or cancelled."""
    opened = OpenedStream()
    try:
        async with asyncio.timeout(timeout_s):
            yield opened
    except TimeoutError as exc:
        raise ModelTimeout(f"model endpoint {where} was still streaming after {timeout_s:g}s; "
                           "retrying, or raise --timeout if the model is slow") from exc
    except Exception as exc:
        if isinstance(exc, ModelError):
            error = exc
        elif isinstance(exc, sdk_error):
            error = map_error(exc)
        elif isinstance(exc, ValueError):  # the SDKs let JSON decoding errors through
            error = ModelError(f"model endpoint {where} streamed an event that is not valid JSON ({one_line(exc)}); "
                               f"{check}")
        else:
            raise
        if guard.started:
            cut_short(error)
        if error is exc:
            raise
        raise error from exc
    finally:
        deltas.flush()
        if opened.stream is not None:
            await opened.stream.close()
