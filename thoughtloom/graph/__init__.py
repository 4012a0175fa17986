"""The thought graph: a typed DAG of thoughts, pure data."""

from .dag import ThoughtGraph
from .types import (
    TERMINAL_STATUSES,
    TRANSITIONS,
    CycleError,
    Edge,
    EdgeKind,
    GraphError,
    IllegalTransition,
    Node,
    NodeKind,
    NodeStatus,
    UnknownNode,
)

__all__ = [
    "TERMINAL_STATUSES",
    "TRANSITIONS",
    "CycleError",
    "Edge",
    "EdgeKind",
    "GraphError",
    "IllegalTransition",
    "Node",
    "NodeKind",
    "NodeStatus",
    "ThoughtGraph",
    "UnknownNode",
]
