"""The thought graph's vocabulary: node kinds, statuses, edge kinds, nodes and edges."""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field
from typing import Any


class NodeKind(str, enum.Enum):
    """What a thought is: its role in the reasoning."""

    INPUT = "input"
    QUESTION = "question"
    HYPOTHESIS = "hypothesis"
    EVIDENCE = "evidence"
    ANALYSIS = "analysis"
    DECOMPOSITION = "decomposition"
    PLAN = "plan"
    CODE = "code"
    CRITIQUE = "critique"
    SYNTHESIS = "synthesis"
    SOLUTION = "solution"


class NodeStatus(str, enum.Enum):
    """Where a node is in its life; see TRANSITIONS for the legal moves."""

    PENDING = "pending"
    READY = "ready"
    IN_PROGRESS = "in_progress"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    PRUNED = "pruned"


class EdgeKind(str, enum.Enum):
    """How one thought relates to the next."""

    DEPENDENCY = "dependency"
    ELABORATION = "elaboration"
    REFINEMENT = "refinement"
    AGGREGATION = "aggregation"
    CONTRADICTION = "contradiction"
    SUPPORTS = "supports"


_S = NodeStatus
# A scored (succeeded) thought may still be cut by the search later, hence SUCCEEDED -> PRUNED.
# IN_PROGRESS -> READY lets an operator hand a node back after a transient failure.
# PRUNED -> SUCCEEDED revives a scored thought when the search backtracks to it.
TRANSITIONS: dict[NodeStatus, frozenset[NodeStatus]] = {
    _S.PENDING: frozenset({_S.READY, _S.CANCELLED, _S.PRUNED, _S.FAILED}),
    _S.READY: frozenset({_S.IN_PROGRESS, _S.CANCELLED, _S.PRUNED, _S.FAILED}),
    _S.IN_PROGRESS: frozenset({_S.SUCCEEDED, _S.FAILED, _S.CANCELLED, _S.READY}),
    _S.SUCCEEDED: frozenset({_S.PRUNED}),
    _S.FAILED: frozenset(),
    _S.CANCELLED: frozenset(),
    _S.PRUNED: frozenset({_S.SUCCEEDED}),
}
TERMINAL_STATUSES = frozenset(s for s, nxt in TRANSITIONS.items() if not nxt)


class GraphError(Exception):
    """Base class of errors raised by the thought graph."""


class CycleError(GraphError):
    """An edge would have closed a cycle."""


class IllegalTransition(GraphError):
    """A status change the state machine does not allow."""


class UnknownNode(GraphError, KeyError):
    """A node id that is not in the graph."""


@dataclass(slots=True)
class Node:
    """One thought: its content, where it stands, what it is worth, and how it came to be.

    The bookkeeping (created_at, cost_tokens, creator, extra) sits on the node itself rather
    than in a separate object: one object per thought is what keeps a 100,000-node graph cheap
    for the garbage collector.
    """

    id: int
    kind: NodeKind
    content: str
    depth: int
    status: NodeStatus = NodeStatus.PENDING
    score: float | None = None
    #: Wall-clock time the node was made (time.time()).
    created_at: float = field(default_factory=time.time)
    #: Tokens spent producing and scoring this thought.
    cost_tokens: int = 0
    #: Which operator (or model) made it: generate, evaluate, aggregate, refine, synthesize, input.
    creator: str = ""
    #: Anything else worth keeping: grounding evidence, rejection reasons, recursion records.
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True, frozen=True)
class Edge:
    """A directed link from src to dst."""

    src: int
    dst: int
    kind: EdgeKind = EdgeKind.ELABORATION
    weight: float | None = None
