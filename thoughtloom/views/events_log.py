"""The typed event stream as JSON Lines (`--events FILE`): one event per line, for tools to read afterwards."""

from __future__ import annotations

import json
import time
from typing import TextIO

from ..search.events import Event, SearchStopped


class EventLog:
    """An event sink writing each event as one JSON object per line: its `to_dict()` plus `t`, seconds since the first.

    Model text is JSON-escaped (control characters and non-ASCII as \\u escapes), so each event is one line.
    The stream is flushed when a search stops; the caller opens it and closes it with `close`. A stream
    that cannot be written (a full disk) never stops the search: the log stops writing and `error` says why.
    """

    #: The replies' text as it is written (ThoughtDelta) goes into the log too.
    wants_deltas = True

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self._start: float | None = None
        #: Why the stream could not be written (None while it can); nothing more is written after.
        self.error: str | None = None

    def __call__(self, event: Event) -> None:
        """Write one event as a line."""
        if self.error is not None:
            return
        now = time.monotonic()
        if self._start is None:
            self._start = now
        record = {"t": round(now - self._start, 4), **event.to_dict()}
        try:
            self.stream.write(json.dumps(record, default=str) + "\n")
            if isinstance(event, SearchStopped):
                self.stream.flush()
        except OSError as exc:
            self.error = exc.strerror or str(exc)

    def close(self) -> None:
        """Close the stream (what is still buffered is written; a failure is kept in `error`)."""
        try:
            self.stream.close()
        except OSError as exc:
            self.error = self.error or exc.strerror or str(exc)
