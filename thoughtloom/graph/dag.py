"""ThoughtGraph: a typed DAG of thoughts with a status state machine. Pure data, no I/O."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from .types import (
    TRANSITIONS,
    CycleError,
    Edge,
    EdgeKind,
    IllegalTransition,
    Node,
    NodeKind,
    NodeStatus,
    UnknownNode,
)

_NO_CHILDREN: tuple[int, ...] = ()


class ThoughtGraph:
    """A directed acyclic graph of thoughts; every mutation keeps it acyclic."""

    __slots__ = ("_children", "_in_kinds", "_late", "_next_id", "_nodes", "_parents")

    def __init__(self) -> None:
        self._nodes: dict[int, Node] = {}
        # Parents as tuples (a tuple of ints drops out of the garbage collector's tracking; they
        # rarely change) and children lists only for nodes that have children (most are leaves):
        # large graphs then cost the collector about a third less.
        self._parents: dict[int, tuple[int, ...]] = {}
        self._children: dict[int, list[int]] = {}
        # Edges are stored by their head: for each node, the edges in from its parents, aligned
        # with _parents. A node's usual single unweighted edge is stored as its kind alone (a
        # shared enum member): no tuple key or object per edge for the garbage collector to
        # scan. Edge objects are made on demand.
        self._in_kinds: dict[int, EdgeKind | list[Edge | EdgeKind]] = {}
        # Edges added after their head node was created (merges), in the order they were added.
        self._late: list[tuple[int, int]] = []
        self._next_id = 0

    # --- construction -------------------------------------------------------------------

    def add_node(
        self,
        content: str,
        kind: NodeKind = NodeKind.HYPOTHESIS,
        parents: Sequence[int] = (),
        edge_kind: EdgeKind = EdgeKind.ELABORATION,
        score: float | None = None,
        creator: str = "",
        cost_tokens: int = 0,
        created_at: float | None = None,
        extra: dict[str, Any] | None = None,
    ) -> Node:
        """Add a node below the given parents (possibly several: an aggregation).

        created_at defaults to now; extra (the node's own dict from then on) to an empty one.
        """
        nodes = self._nodes
        single = len(parents) == 1
        if single:  # the common case, without the generic checks' overhead
            (only,) = parents
            parent = nodes.get(only)
            if parent is None:
                raise UnknownNode(only)
            depth = parent.depth + 1
            ready = parent.status is NodeStatus.SUCCEEDED
        else:
            for p in parents:
                if p not in nodes:
                    raise UnknownNode(p)
            if len(set(parents)) != len(parents):
                raise ValueError(f"duplicate parent in {list(parents)}")
            depth = 1 + max((nodes[p].depth for p in parents), default=-1)
            ready = all(nodes[p].status is NodeStatus.SUCCEEDED for p in parents)
        nid = self._next_id
        self._next_id = nid + 1
        node = Node(
            nid, kind, content, depth, NodeStatus.READY if ready else NodeStatus.PENDING, score,
            time.time() if created_at is None else created_at, cost_tokens, creator,
            {} if extra is None else extra,
        )
        nodes[nid] = node
        self._parents[nid] = parents if type(parents) is tuple else tuple(parents)
        # Edges into a brand-new node cannot close a cycle: no check needed.
        children = self._children
        if single:  # this runs once per thought: one parent's children without the loop
            siblings = children.get(only)
            if siblings is None:
                children[only] = [nid]
            else:
                siblings.append(nid)
            self._in_kinds[nid] = edge_kind
            return node
        for p in parents:
            self._add_child(p, nid)
        self._in_kinds[nid] = [edge_kind] * len(parents)
        return node

    def add_edge(
        self, src: int, dst: int, kind: EdgeKind = EdgeKind.ELABORATION, weight: float | None = None
    ) -> Edge:
        """Link two existing nodes; raises CycleError if dst already reaches src."""
        if src not in self._nodes:
            raise UnknownNode(src)
        if dst not in self._nodes:
            raise UnknownNode(dst)
        if src == dst or self.reaches(dst, src):
            raise CycleError(f"edge {src}->{dst} would close a cycle")
        if src in self._parents[dst]:
            raise ValueError(f"edge {src}->{dst} already exists")
        edge = Edge(src, dst, kind, weight)
        kinds = self._in_kinds.get(dst)
        if kinds is None:
            kinds = []
        elif not isinstance(kinds, list):
            kinds = [kinds]
        kinds.append(edge if weight is not None else kind)
        self._in_kinds[dst] = kinds[0] if len(kinds) == 1 and not isinstance(kinds[0], Edge) else kinds
        self._parents[dst] += (src,)
        self._add_child(src, dst)
        self._late.append((src, dst))
        return edge

    def set_edge(self, src: int, dst: int, kind: EdgeKind, weight: float | None = None) -> Edge:
        """Re-label an existing edge (a critique turns the edge from what it judged into a CONTRADICTION)."""
        parents = self._parents.get(dst, ())
        if src not in parents:
            raise KeyError((src, dst))
        edge = Edge(src, dst, kind, weight)
        value: Edge | EdgeKind = edge if weight is not None else kind
        kinds = self._in_kinds[dst]
        if isinstance(kinds, list):
            kinds[parents.index(src)] = value
        elif isinstance(value, Edge):
            self._in_kinds[dst] = [value]
        else:
            self._in_kinds[dst] = value
        return edge

    def _add_child(self, parent: int, child: int) -> None:
        children = self._children.get(parent)
        if children is None:
            self._children[parent] = [child]
        else:
            children.append(child)

    def set_status(self, node_id: int, status: NodeStatus) -> None:
        """Move a node to a new status; illegal moves raise IllegalTransition."""
        try:
            node = self._nodes[node_id]
        except KeyError:
            raise UnknownNode(node_id) from None
        if status is node.status:
            return
        if status not in TRANSITIONS[node.status]:
            raise IllegalTransition(f"node {node_id}: {node.status.value} -> {status.value}")
        node.status = status
        if status is NodeStatus.SUCCEEDED:
            # Children waiting on this node become ready once all their parents succeeded.
            for c in self._children.get(node_id, _NO_CHILDREN):
                child = self._nodes[c]
                if child.status is NodeStatus.PENDING and all(
                    self._nodes[p].status is NodeStatus.SUCCEEDED for p in self._parents[c]
                ):
                    child.status = NodeStatus.READY

    def succeed(self, node_id: int) -> None:
        """Mark a node succeeded, passing through ready and in_progress when it has not reached them."""
        try:  # node(), inline: this runs once per scored thought
            node = self._nodes[node_id]
        except KeyError:
            raise UnknownNode(node_id) from None
        # The hot path of every scored thought: ready -> in_progress -> succeeded and
        # in_progress -> succeeded are legal, and a childless node wakes nobody.
        if (node.status is NodeStatus.READY or node.status is NodeStatus.IN_PROGRESS) and node_id not in self._children:
            node.status = NodeStatus.SUCCEEDED
            return
        if node.status is NodeStatus.PENDING:
            self.set_status(node_id, NodeStatus.READY)
        if node.status is NodeStatus.READY:
            self.set_status(node_id, NodeStatus.IN_PROGRESS)
        self.set_status(node_id, NodeStatus.SUCCEEDED)

    # --- queries ------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._nodes)

    def __contains__(self, node_id: object) -> bool:
        return node_id in self._nodes

    def __iter__(self) -> Iterator[Node]:
        return iter(self._nodes.values())

    def node(self, node_id: int) -> Node:
        """The node with this id."""
        try:
            return self._nodes[node_id]
        except KeyError:
            raise UnknownNode(node_id) from None

    @property
    def edges(self) -> list[Edge]:
        """Every edge: those each node was made with, in node order, then later links in the order made."""
        late = set(self._late)
        made = [self.edge(p, n) for n, ps in self._parents.items() for p in ps if (p, n) not in late]
        return made + [self.edge(s, d) for s, d in self._late]

    def edge(self, src: int, dst: int) -> Edge:
        """The edge src->dst."""
        parents = self._parents.get(dst, ())
        if src not in parents:
            raise KeyError((src, dst))
        kinds = self._in_kinds[dst]
        e = kinds[parents.index(src)] if isinstance(kinds, list) else kinds
        return e if isinstance(e, Edge) else Edge(src, dst, e)

    def parents(self, node_id: int) -> list[int]:
        """Ids of the node's parents, first (primary) parent first."""
        self.node(node_id)
        return list(self._parents[node_id])

    def parent_ids(self, node_id: int) -> tuple[int, ...]:
        """Ids of the node's parents as stored, first (primary) parent first: a tuple, so no copy is made."""
        try:
            return self._parents[node_id]
        except KeyError:
            raise UnknownNode(node_id) from None

    def primary_parent(self, node_id: int) -> int | None:
        """The first parent (the one paths follow), or None for a root."""
        try:
            parents = self._parents[node_id]
        except KeyError:
            raise UnknownNode(node_id) from None
        return parents[0] if parents else None

    def children(self, node_id: int) -> list[int]:
        """Ids of the node's children, oldest first."""
        self.node(node_id)
        return list(self._children.get(node_id, _NO_CHILDREN))

    def roots(self) -> list[int]:
        """Nodes without parents."""
        return [n for n, ps in self._parents.items() if not ps]

    def leaves(self) -> list[int]:
        """Nodes without children."""
        return [n for n in self._nodes if n not in self._children]

    def path_to_root(self, node_id: int) -> list[int]:
        """Ids from a root down to this node, following each node's primary parent."""
        self.node(node_id)
        path = [node_id]
        parents = self._parents
        while parents[path[-1]]:
            path.append(parents[path[-1]][0])
        path.reverse()
        return path

    def ancestors(self, node_id: int) -> set[int]:
        """Every node that reaches this one."""
        seen: set[int] = set()
        stack = list(self.parents(node_id))
        while stack:
            n = stack.pop()
            if n not in seen:
                seen.add(n)
                stack.extend(self._parents[n])
        return seen

    def reaches(self, src: int, dst: int) -> bool:
        """True if a directed path leads from src to dst."""
        self.node(src)
        self.node(dst)
        if src == dst:
            return True
        seen = {src}
        stack = [src]
        children = self._children
        while stack:
            for c in children.get(stack.pop(), _NO_CHILDREN):
                if c == dst:
                    return True
                if c not in seen:
                    seen.add(c)
                    stack.append(c)
        return False

    def topological_order(self) -> list[int]:
        """All node ids, every parent before its children (Kahn's algorithm, stable by id)."""
        indegree = {n: len(ps) for n, ps in self._parents.items()}
        queue = deque(n for n, d in indegree.items() if d == 0)
        order: list[int] = []
        while queue:
            n = queue.popleft()
            order.append(n)
            for c in self._children.get(n, _NO_CHILDREN):
                indegree[c] -= 1
                if indegree[c] == 0:
                    queue.append(c)
        return order

    def by_kind(self, *kinds: NodeKind) -> list[Node]:
        """Nodes of any of the given kinds."""
        wanted = set(kinds)
        return [n for n in self._nodes.values() if n.kind in wanted]

    def by_status(self, *statuses: NodeStatus) -> list[Node]:
        """Nodes in any of the given statuses."""
        wanted = set(statuses)
        return [n for n in self._nodes.values() if n.status in wanted]

    def ready_nodes(self) -> list[Node]:
        """Nodes whose parents have all succeeded and which nobody has started."""
        return self.by_status(NodeStatus.READY)

    def subtree(self, node_id: int) -> Iterable[int]:
        """The node and everything it reaches."""
        self.node(node_id)
        seen = {node_id}
        stack = [node_id]
        while stack:
            for c in self._children.get(stack.pop(), _NO_CHILDREN):
                if c not in seen:
                    seen.add(c)
                    stack.append(c)
        return seen
