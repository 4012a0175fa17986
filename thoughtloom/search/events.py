"""The typed event stream a search emits (progress display, storage and tests consume it)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class Event:
    """Base of all events. Events are values: sinks read them and must not change them.

    Not frozen on purpose: a frozen dataclass's __init__ costs five times as much, and a
    search emits two events per thought.
    """

    type: ClassVar[str] = "event"

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form with its type name."""
        return {"type": self.type, **asdict(self)}


@dataclass(slots=True)
class SearchStarted(Event):
    type: ClassVar[str] = "search_started"
    task: str
    problem: str
    strategy: str
    token_limit: int | None


@dataclass(slots=True)
class NodeAdded(Event):
    type: ClassVar[str] = "node_added"
    node_id: int
    parents: tuple[int, ...]
    kind: str
    depth: int
    content: str
    creator: str


@dataclass(slots=True)
class ThoughtRepaired(Event):
    type: ClassVar[str] = "thought_repaired"
    node_id: int
    note: str


@dataclass(slots=True)
class ThoughtRejected(Event):
    type: ClassVar[str] = "thought_rejected"
    node_id: int
    reason: str


@dataclass(slots=True)
class DuplicateMerged(Event):
    """A thought reached a state already in the graph: linked to it instead of expanded twice."""

    type: ClassVar[str] = "duplicate_merged"
    parent_id: int
    existing_id: int


@dataclass(slots=True)
class NodeScored(Event):
    type: ClassVar[str] = "node_scored"
    node_id: int
    score: float
    path_score: float


@dataclass(slots=True)
class NodePruned(Event):
    type: ClassVar[str] = "node_pruned"
    node_id: int
    reason: str


@dataclass(slots=True)
class NodeRevived(Event):
    """A pruned thought was brought back into the search (the controller backtracked to it)."""

    type: ClassVar[str] = "node_revived"
    node_id: int


@dataclass(slots=True)
class SearchContinued(Event):
    """A pass ended short of the goal with budget left, and another starts (search/continuation.py)."""

    type: ClassVar[str] = "search_continued"
    #: How the last pass ended (max_depth, frontier_exhausted).
    ended: str
    #: Where the new pass starts from: thoughts the beam held back, more proposals for a thought, a restart.
    how: str
    frontier: tuple[int, ...]
    depth: int


@dataclass(slots=True)
class Backtracked(Event):
    type: ClassVar[str] = "backtracked"
    from_id: int
    to_id: int


@dataclass(slots=True)
class ThoughtGrounded(Event):
    """A thought was tested against reality; its score moved from `before` to `after`."""

    type: ClassVar[str] = "thought_grounded"
    node_id: int
    grounder: str
    verified: bool | None
    passed: int
    failed: int
    before: float
    after: float
    evidence: str  # the first line of the grounder's evidence


@dataclass(slots=True)
class NodeProcessed(Event):
    """agent: a node's processor finished (its tool calls named in order)."""

    type: ClassVar[str] = "node_processed"
    node_id: int
    kind: str
    status: str
    error: str | None
    tools: tuple[str, ...] = ()


@dataclass(slots=True)
class ToolCalled(Event):
    """agent: a tool call for a node started ("started") or ended (its ToolResult status)."""

    type: ClassVar[str] = "tool_called"
    node_id: int
    tool: str
    status: str


@dataclass(slots=True)
class FlowTransitioned(Event):
    """research: the flow moved from one state to another by one of its directions."""

    type: ClassVar[str] = "flow_transition"
    source: str
    direction: str
    target: str


@dataclass(slots=True)
class InsightFound(Event):
    """research: an insight (discovery, evidence, contradiction, synthesis), as it happens."""

    type: ClassVar[str] = "insight"
    kind: str
    content: str
    confidence: float
    node_id: int
    depth: int
    source: str | None = None


@dataclass(slots=True)
class GoalFound(Event):
    type: ClassVar[str] = "goal_found"
    node_id: int


@dataclass(slots=True)
class BudgetSpent(Event):
    """One model call finished (or failed): what it cost and where the budget stands."""

    type: ClassVar[str] = "budget_spent"
    purpose: str
    call_tokens: int
    spent_tokens: int
    token_limit: int | None
    calls: int
    cost_usd: float
    cached: int
    error: str | None


@dataclass(slots=True)
class ThoughtDelta(Event):
    """A model reply as it is written (a backend that streams): the text a sample gained since its last delta.

    Sent only to sinks that ask for them (`wants_deltas = True`), coalesced (about every 50 ms), and
    never stored: the reply itself arrives whole with the call. `call` numbers the search's watched
    calls from 0, so a viewer can put each call's pieces together; a call the gateway retries starts
    its text again.
    """

    type: ClassVar[str] = "thought_delta"
    call: int
    purpose: str
    sample: int
    text: str


@dataclass(slots=True)
class SearchStopped(Event):
    """The search ended; the counts are the result's (SearchStats), so a display can end on them."""

    type: ClassVar[str] = "search_stopped"
    reason: str
    best_node_id: int | None
    nodes: int
    pruned: int = 0
    rejected: int = 0
    #: The most steps any thought is from the root (the answer written from a path adds no step).
    depth: int = 0


@dataclass(slots=True)
class ControlDecision(Event):
    """The controller decided something (depth, budget, compromise, failure anticipation)."""

    type: ClassVar[str] = "control_decision"
    kind: str
    decision: str
    reason: str


EventSink = Callable[[Event], None]


@dataclass(slots=True)
class EventBus:
    """Fans events out to sinks. Falsy when nobody listens, so emitters can skip building events."""

    sinks: list[EventSink] = field(default_factory=list)
    #: indexes of the sinks that have raised: their first failure is logged in full, later ones briefly.
    failed: set[int] = field(default_factory=set)
    #: Whether a sink asks for ThoughtDelta events (an attribute `wants_deltas = True`): only then are
    #: model calls streamed to the bus.
    deltas: bool = False

    def __post_init__(self) -> None:
        self.deltas = any(getattr(sink, "wants_deltas", False) for sink in self.sinks)

    def __bool__(self) -> bool:
        return bool(self.sinks)

    def subscribe(self, sink: EventSink) -> None:
        """Add a listener."""
        self.sinks.append(sink)
        self.deltas = self.deltas or bool(getattr(sink, "wants_deltas", False))

    def emit(self, event: Event) -> None:
        """Deliver an event to every sink, in subscription order; a sink that raises is logged and skipped."""
        deltas = type(event) is ThoughtDelta
        for i, sink in enumerate(self.sinks):
            if deltas and not getattr(sink, "wants_deltas", False):
                continue  # a sink that did not ask for the text as it is written (the run recorder) never sees it
            try:
                sink(event)
            except Exception as exc:  # a user's display or logger must not end the search it watches
                if i in self.failed:
                    logger.debug("event sink %r failed again on a %s event: %r", sink, event.type, exc)
                else:
                    self.failed.add(i)
                    logger.exception("event sink %r failed on a %s event; the search goes on", sink, event.type)
