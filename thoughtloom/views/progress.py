"""Live progress on stderr, fed by the search's event stream."""

from __future__ import annotations

import sys
import time
from typing import TextIO

from rich.console import Console
from rich.control import Control, ControlType
from rich.text import Text

from ..search.events import (
    BudgetSpent,
    ControlDecision,
    Event,
    FlowTransitioned,
    GoalFound,
    InsightFound,
    NodeAdded,
    NodeProcessed,
    NodePruned,
    NodeRevived,
    NodeScored,
    SearchContinued,
    SearchStarted,
    SearchStopped,
    ThoughtDelta,
    ThoughtGrounded,
    ThoughtRejected,
    ToolCalled,
)
from .terminal import terminal_text

#: Characters of the reply being written kept for the status line (which is cut to the terminal's width).
WRITING_TAIL = 200


class ProgressDisplay:
    """An event sink that keeps one status line up to date (or prints one now and then off a terminal).

    On a terminal the status line is cut to the terminal's width, read at every redraw (a line that
    wrapped could not be redrawn in place and would leave stale copies behind).
    """

    def __init__(self, stream: TextIO | None = None, interval_s: float = 2.0) -> None:
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        # rich measures the terminal and writes the cursor controls; markup and highlighting off:
        # the text is model and program output, already escaped, never markup.
        self.console = Console(file=self.stream, force_terminal=self.tty, highlight=False, markup=False,
                               emoji=False)
        self.interval_s = 0.1 if self.tty else interval_s
        #: On a terminal the status line shows the reply being written (off one, it would be a line a token).
        self.wants_deltas = self.tty
        #: The call being written (ThoughtDelta.call), what it is for, and its latest text.
        self.writing: tuple[int, str, str] | None = None
        self.nodes = 0
        self.depth = 0
        self.max_depth = 0
        self.best: float | None = None
        self.pruned = 0
        self.rejected = 0
        self.tokens = 0
        self.limit: int | None = None
        self.calls = 0
        self.grounded = 0
        self.verified = 0
        #: agent: nodes by kind and by status, and tool calls in flight by tool.
        self.kinds: dict[str, int] = {}
        self.done: dict[str, int] = {}
        self.tools_in_flight: dict[str, int] = {}
        self.tool_calls = 0
        #: research: the flow's state and the insights found.
        self.flow: str | None = None
        self.insights = 0
        self._started = time.monotonic()
        self._last = self._started

    def __call__(self, event: Event) -> None:
        """Update counters from one event and redraw when due."""
        if isinstance(event, ThoughtDelta):
            self._written(event)
        elif isinstance(event, NodeAdded):
            self.nodes += 1
            self.depth = max(self.depth, event.depth)
            self.kinds[event.kind] = self.kinds.get(event.kind, 0) + 1
        elif isinstance(event, NodeProcessed):
            self.done[event.status] = self.done.get(event.status, 0) + 1
            if event.status != "succeeded":
                self._line(f"#{event.node_id} {event.kind} {event.status}: {event.error}")
                return
        elif isinstance(event, ToolCalled):
            if event.status == "started":
                self.tool_calls += 1
                self.tools_in_flight[event.tool] = self.tools_in_flight.get(event.tool, 0) + 1
            elif self.tools_in_flight.get(event.tool, 0) > 1:
                self.tools_in_flight[event.tool] -= 1
            else:
                self.tools_in_flight.pop(event.tool, None)
        elif isinstance(event, FlowTransitioned):
            self.flow = event.target
        elif isinstance(event, InsightFound):
            self.insights += 1
        elif isinstance(event, NodeScored):
            self.best = event.score if self.best is None else max(self.best, event.score)
        elif isinstance(event, NodePruned):
            self.pruned += 1
        elif isinstance(event, NodeRevived):
            self.pruned -= 1
        elif isinstance(event, ThoughtRejected):
            self.rejected += 1
        elif isinstance(event, BudgetSpent):
            self.tokens, self.limit, self.calls = event.spent_tokens, event.token_limit, event.calls
            self.writing = None  # a call ended: what was being written is a reply now
        elif isinstance(event, SearchStarted):
            self.limit = event.token_limit
            self._line(f"loom: {event.task} · {event.strategy} · {event.problem!r}")
            return
        elif isinstance(event, ControlDecision):
            self._line(f"control: {event.kind} {event.decision}: {event.reason}")
            return
        elif isinstance(event, ThoughtGrounded):
            self.grounded += 1
            self.verified += event.verified is True
            self._line(f"grounded #{event.node_id} ({event.grounder}): {grounding_summary(event)}")
            return
        elif isinstance(event, GoalFound):
            self._line(f"goal reached at node {event.node_id}")
            return
        elif isinstance(event, SearchContinued):
            self._line(
                f"continue ({event.ended}, budget left): {event.how}, {len(event.frontier)} at depth {event.depth}"
            )
            return
        elif isinstance(event, SearchStopped):
            # The last status line says what the result's summary says.
            self.nodes, self.pruned, self.rejected, self.depth = event.nodes, event.pruned, event.rejected, event.depth
            self._draw(force=True)
            if self.tty:
                self.stream.write("\n")
            self._line(f"stopped: {event.reason}")
            return
        self._draw()

    def _written(self, event: ThoughtDelta) -> None:
        """Follow the reply being written: the latest call's text (sample 0's; other samples are alike)."""
        if event.sample != 0:
            return
        if self.writing is None or self.writing[0] != event.call:
            self.writing = (event.call, event.purpose, "")
        # Only the end is shown: the tail of a long reply is what is moving.
        self.writing = (event.call, event.purpose, (self.writing[2] + event.text)[-WRITING_TAIL:])

    def status(self, width: int | None = None) -> str:
        """The current status line, and the end of the reply being written when a backend streams one
        (as much of its end as fits in `width` columns, when given)."""
        line = terminal_text(self._counts())
        if self.writing is None:
            return line
        _, purpose, text = self.writing
        head = f"{line} · {terminal_text(purpose or 'model')}: "
        text = terminal_text(" ".join(text.split()))
        room = len(text) if width is None else max(width - len(head), 0)
        return head + (text[-room:] if room else "")

    def _counts(self) -> str:
        """The status line's counts for the kind of search."""
        if self.flow is not None:
            return self._research_status()
        if self.done or self.tool_calls:
            return self._agent_status()
        budget = f"{self.tokens:,}" + (f"/{self.limit:,}" if self.limit else "")
        best = "-" if self.best is None else f"{self.best:.2f}"
        grounded = f" · grounded {self.grounded} ({self.verified} verified)" if self.grounded else ""
        return (
            f"nodes {self.nodes} (pruned {self.pruned}, rejected {self.rejected}) · depth {self.depth} · "
            f"best {best} · tokens {budget} · calls {self.calls}{grounded} · {time.monotonic() - self._started:.0f}s"
        )

    def _agent_status(self) -> str:
        """agent: nodes by kind and status, tools in flight, tokens and time."""
        budget = f"{self.tokens:,}" + (f"/{self.limit:,}" if self.limit else "")
        kinds = " ".join(f"{k} {n}" for k, n in sorted(self.kinds.items()))
        done = ", ".join(f"{n} {k}" for k, n in sorted(self.done.items()))
        flight = ", ".join(f"{t} x{n}" for t, n in sorted(self.tools_in_flight.items())) or "none"
        return (f"nodes {self.nodes} ({kinds}) · {done} · tools {self.tool_calls} (in flight: {flight}) · "
                f"tokens {budget} · calls {self.calls} · {time.monotonic() - self._started:.0f}s")

    def _research_status(self) -> str:
        """research: the flow's state, hypotheses and evidence so far, insights, pruned, tokens and time."""
        budget = f"{self.tokens:,}" + (f"/{self.limit:,}" if self.limit else "")
        return (f"flow {self.flow} · hypotheses {self.kinds.get('hypothesis', 0)} (pruned {self.pruned}) · evidence "
                f"{self.kinds.get('evidence', 0)} · insights {self.insights} · tools {self.tool_calls} · tokens "
                f"{budget} · calls {self.calls} · {time.monotonic() - self._started:.0f}s")

    def _draw(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last < self.interval_s:
            return
        self._last = now
        status = Text(self.status(max(self.console.width - 1, 1) if self.tty else None))
        if self.tty:
            # One column short of the width: a line that fills the last column wraps on some terminals.
            status.truncate(max(self.console.width - 1, 1), overflow="ellipsis")
            self._clear_line()
            self.console.print(status, end="", soft_wrap=True)
        else:
            self.console.print(status, soft_wrap=True)
        self.stream.flush()

    def _line(self, text: str) -> None:
        # Lines carry the problem, model text and program output: escaped, and one line each.
        if self.tty:
            self._clear_line()
        self.console.print(Text(terminal_text(text)), soft_wrap=True)
        self.stream.flush()

    def _clear_line(self) -> None:
        """Back to the first column of the status line, erased."""
        self.console.control(Control.move_to_column(0), Control((ControlType.ERASE_IN_LINE, 2)))


def grounding_summary(event: ThoughtGrounded) -> str:
    """`verified`, `FAILED` or `inconclusive`, with counts, the score change and the first evidence line."""
    verdict = {True: "verified", False: "FAILED", None: "inconclusive"}[event.verified]
    counts = f" {event.passed} passed, {event.failed} failed" if event.passed or event.failed else ""
    evidence = event.evidence if len(event.evidence) <= 100 else event.evidence[:97] + "..."
    return f"{verdict}{counts} · score {event.before:.2f} -> {event.after:.2f}" + (f" · {evidence}" if evidence else "")
