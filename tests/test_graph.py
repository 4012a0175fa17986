"""The thought graph: a typed DAG of thoughts with a status state machine."""

from __future__ import annotations

import itertools
import time

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, multiple, rule

from thoughtloom.graph import (
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
    ThoughtGraph,
    UnknownNode,
)

S = NodeStatus
ALL_PAIRS = list(itertools.product(NodeStatus, NodeStatus))
LEGAL_PAIRS = [(a, b) for a, b in ALL_PAIRS if b in TRANSITIONS[a]]
ILLEGAL_PAIRS = [(a, b) for a, b in ALL_PAIRS if a is not b and b not in TRANSITIONS[a]]

# How to bring a fresh root (which starts READY) into each status by legal moves.
ROUTE_TO: dict[NodeStatus, list[NodeStatus]] = {
    S.READY: [],
    S.IN_PROGRESS: [S.IN_PROGRESS],
    S.SUCCEEDED: [S.IN_PROGRESS, S.SUCCEEDED],
    S.FAILED: [S.FAILED],
    S.CANCELLED: [S.CANCELLED],
    S.PRUNED: [S.PRUNED],
}


def node_in(graph: ThoughtGraph, status: NodeStatus) -> int:
    """A node of a graph brought into the given status by legal moves."""
    if status is S.PENDING:
        parent = graph.add_node("parent").id
        return graph.add_node("child", parents=[parent]).id
    nid = graph.add_node("node").id
    for step in ROUTE_TO[status]:
        graph.set_status(nid, step)
    return nid


def succeed(graph: ThoughtGraph, node_id: int) -> None:
    graph.set_status(node_id, S.IN_PROGRESS)
    graph.set_status(node_id, S.SUCCEEDED)


def snapshot(graph: ThoughtGraph) -> tuple:
    """Everything observable about a graph's structure."""
    return (
        len(graph),
        graph.edges,
        {n.id: (graph.parents(n.id), graph.children(n.id), n.status) for n in graph},
    )


@pytest.fixture
def diamond() -> ThoughtGraph:
    """0 -> 1, 0 -> 2, (1, 2) -> 3 (an aggregation), 3 -> 4."""
    g = ThoughtGraph()
    g.add_node("root", NodeKind.INPUT)
    g.add_node("left", parents=[0])
    g.add_node("right", NodeKind.EVIDENCE, parents=[0])
    g.add_node("merge", NodeKind.SYNTHESIS, parents=[1, 2], edge_kind=EdgeKind.AGGREGATION)
    g.add_node("answer", NodeKind.SOLUTION, parents=[3])
    return g


# --- node fields and defaults ---------------------------------------------------------------


def test_a_node_defaults_to_pending_unscored_with_fresh_bookkeeping() -> None:
    node = Node(id=7, kind=NodeKind.PLAN, content="plan", depth=2)
    assert (node.status, node.score) == (S.PENDING, None)
    assert (node.cost_tokens, node.creator, node.extra) == (0, "", {})


def test_node_extras_are_not_shared_between_nodes() -> None:
    g = ThoughtGraph()
    a, b = g.add_node("a"), g.add_node("b")
    a.extra["x"] = 1
    assert b.extra == {}


def test_a_node_records_its_creation_time() -> None:
    before = time.time()
    node = ThoughtGraph().add_node("x")
    assert before <= node.created_at <= time.time()


def test_add_node_defaults_to_a_hypothesis_root_at_depth_zero() -> None:
    node = ThoughtGraph().add_node("idea")
    assert (node.id, node.kind, node.content, node.depth, node.score) == (
        0,
        NodeKind.HYPOTHESIS,
        "idea",
        0,
        None,
    )


def test_add_node_gives_consecutive_ids_from_zero() -> None:
    g = ThoughtGraph()
    assert [g.add_node(str(i)).id for i in range(4)] == [0, 1, 2, 3]


def test_add_node_keeps_the_given_kind_score_and_bookkeeping() -> None:
    node = ThoughtGraph().add_node(
        "x", NodeKind.CODE, score=0.25, creator="generate", cost_tokens=12, created_at=5.0, extra={"k": 1}
    )
    assert (node.kind, node.score, node.creator, node.cost_tokens, node.created_at, node.extra) == (
        NodeKind.CODE, 0.25, "generate", 12, 5.0, {"k": 1}
    )


def test_add_node_returns_the_node_the_graph_stores() -> None:
    g = ThoughtGraph()
    node = g.add_node("x")
    assert g.node(node.id) is node


def test_default_edge_kind_is_elaboration() -> None:
    g = ThoughtGraph()
    g.add_node("root")
    g.add_node("child", parents=[0])
    assert g.edge(0, 1) == Edge(0, 1, EdgeKind.ELABORATION, None)


def test_len_contains_and_iter_reflect_the_nodes() -> None:
    g = ThoughtGraph()
    a, b = g.add_node("a"), g.add_node("b")
    assert len(g) == 2
    assert 0 in g and 1 in g and 2 not in g
    assert list(g) == [a, b]


# --- readiness -------------------------------------------------------------------------------


def test_a_root_is_ready() -> None:
    assert ThoughtGraph().add_node("root").status is S.READY


def test_a_child_of_a_succeeded_parent_is_ready() -> None:
    g = ThoughtGraph()
    root = g.add_node("root").id
    succeed(g, root)
    assert g.add_node("child", parents=[root]).status is S.READY


@pytest.mark.parametrize("status", [s for s in NodeStatus if s is not S.SUCCEEDED])
def test_a_child_of_a_parent_that_has_not_succeeded_is_pending(status: NodeStatus) -> None:
    g = ThoughtGraph()
    parent = node_in(g, status)
    assert g.add_node("child", parents=[parent]).status is S.PENDING


def test_a_pending_child_becomes_ready_when_its_parent_succeeds() -> None:
    g = ThoughtGraph()
    root = g.add_node("root").id
    child = g.add_node("child", parents=[root]).id
    succeed(g, root)
    assert g.node(child).status is S.READY


def test_a_child_with_several_parents_waits_until_all_have_succeeded() -> None:
    g = ThoughtGraph()
    a, b, c = (g.add_node(x).id for x in "abc")
    merge = g.add_node("merge", parents=[a, b, c], edge_kind=EdgeKind.AGGREGATION).id
    succeed(g, a)
    succeed(g, c)
    assert g.node(merge).status is S.PENDING
    succeed(g, b)
    assert g.node(merge).status is S.READY


def test_a_child_with_several_succeeded_parents_is_ready_at_once() -> None:
    g = ThoughtGraph()
    a, b = g.add_node("a").id, g.add_node("b").id
    succeed(g, a)
    succeed(g, b)
    assert g.add_node("merge", parents=[a, b]).status is S.READY


def test_a_pending_child_waits_for_a_parent_linked_later_by_add_edge() -> None:
    g = ThoughtGraph()
    a, b = g.add_node("a").id, g.add_node("b").id
    child = g.add_node("child", parents=[a]).id
    g.add_edge(b, child)
    succeed(g, a)
    assert g.node(child).status is S.PENDING
    succeed(g, b)
    assert g.node(child).status is S.READY


def test_success_does_not_touch_children_that_already_moved_on() -> None:
    g = ThoughtGraph()
    root = g.add_node("root").id
    child = g.add_node("child", parents=[root]).id
    g.set_status(child, S.CANCELLED)
    succeed(g, root)
    assert g.node(child).status is S.CANCELLED


def test_a_parent_that_fails_leaves_its_children_pending() -> None:
    g = ThoughtGraph()
    root = g.add_node("root").id
    child = g.add_node("child", parents=[root]).id
    g.set_status(root, S.FAILED)
    assert g.node(child).status is S.PENDING


# --- aggregation -----------------------------------------------------------------------------


def test_an_aggregation_lies_one_below_its_deepest_parent(diamond: ThoughtGraph) -> None:
    deep = diamond.node(4)  # depth 3
    shallow = diamond.node(0)  # depth 0
    merge = diamond.add_node("merge", parents=[shallow.id, deep.id])
    assert merge.depth == 4


def test_an_aggregation_lists_all_its_parents_in_order(diamond: ThoughtGraph) -> None:
    assert diamond.parents(3) == [1, 2]


def test_an_aggregation_records_its_edge_kind_on_every_incoming_edge(diamond: ThoughtGraph) -> None:
    assert [diamond.edge(p, 3).kind for p in (1, 2)] == [EdgeKind.AGGREGATION] * 2


def test_an_aggregation_is_a_child_of_each_parent(diamond: ThoughtGraph) -> None:
    assert 3 in diamond.children(1) and 3 in diamond.children(2)


def test_add_node_refuses_a_repeated_parent_and_leaves_the_graph_unchanged() -> None:
    g = ThoughtGraph()
    g.add_node("a")
    before = snapshot(g)
    with pytest.raises(ValueError):
        g.add_node("merge", parents=[0, 0])
    assert snapshot(g) == before


# --- status transitions ----------------------------------------------------------------------


def test_terminal_statuses_are_failed_and_cancelled() -> None:
    assert TERMINAL_STATUSES == {S.FAILED, S.CANCELLED}


def test_a_pruned_thought_can_only_be_revived_to_succeeded() -> None:
    assert TRANSITIONS[S.PRUNED] == {S.SUCCEEDED}


@pytest.mark.parametrize(("src", "dst"), LEGAL_PAIRS, ids=[f"{a.value}->{b.value}" for a, b in LEGAL_PAIRS])
def test_every_legal_transition_is_allowed(src: NodeStatus, dst: NodeStatus) -> None:
    g = ThoughtGraph()
    nid = node_in(g, src)
    assert g.node(nid).status is src
    g.set_status(nid, dst)
    assert g.node(nid).status is dst


@pytest.mark.parametrize(
    ("src", "dst"), ILLEGAL_PAIRS, ids=[f"{a.value}->{b.value}" for a, b in ILLEGAL_PAIRS]
)
def test_every_illegal_transition_raises_and_keeps_the_status(src: NodeStatus, dst: NodeStatus) -> None:
    g = ThoughtGraph()
    nid = node_in(g, src)
    with pytest.raises(IllegalTransition):
        g.set_status(nid, dst)
    assert g.node(nid).status is src


@pytest.mark.parametrize("status", list(NodeStatus))
def test_setting_the_current_status_again_is_a_no_op(status: NodeStatus) -> None:
    g = ThoughtGraph()
    nid = node_in(g, status)
    g.set_status(nid, status)
    assert g.node(nid).status is status


def test_illegal_transition_is_a_graph_error() -> None:
    assert issubclass(IllegalTransition, GraphError)


# --- add_edge --------------------------------------------------------------------------------


def test_add_edge_links_two_nodes_both_ways() -> None:
    g = ThoughtGraph()
    a, b = g.add_node("a").id, g.add_node("b").id
    edge = g.add_edge(a, b, EdgeKind.CONTRADICTION, weight=0.5)
    assert edge == Edge(a, b, EdgeKind.CONTRADICTION, 0.5)
    assert g.edges == [edge]
    assert (g.children(a), g.parents(b)) == ([b], [a])


def test_add_edge_appends_a_secondary_parent_after_the_primary() -> None:
    g = ThoughtGraph()
    a, b = g.add_node("a").id, g.add_node("b").id
    child = g.add_node("child", parents=[a]).id
    g.add_edge(b, child)
    assert g.parents(child) == [a, b]


def test_edges_list_creation_edges_by_node_then_later_links_in_order() -> None:
    g = ThoughtGraph()
    a, b = g.add_node("a").id, g.add_node("b").id
    c = g.add_node("c", parents=[a]).id
    g.add_edge(b, c, EdgeKind.REFINEMENT, weight=0.25)
    d = g.add_node("d", parents=[a, b], edge_kind=EdgeKind.AGGREGATION).id
    g.add_edge(c, d)
    assert g.edges == [
        Edge(a, c), Edge(a, d, EdgeKind.AGGREGATION), Edge(b, d, EdgeKind.AGGREGATION),
        Edge(b, c, EdgeKind.REFINEMENT, 0.25), Edge(c, d),
    ]
    assert g.edge(b, c).weight == 0.25 and g.edge(c, d).kind is EdgeKind.ELABORATION


def test_add_edge_does_not_change_depth() -> None:
    g = ThoughtGraph()
    chain = [g.add_node("0").id]
    for i in range(3):
        chain.append(g.add_node(str(i + 1), parents=[chain[-1]]).id)
    lone = g.add_node("lone").id
    g.add_edge(chain[-1], lone)
    assert g.node(lone).depth == 0


def test_add_edge_refuses_a_self_loop_and_leaves_the_graph_unchanged() -> None:
    g = ThoughtGraph()
    g.add_node("a")
    before = snapshot(g)
    with pytest.raises(CycleError):
        g.add_edge(0, 0)
    assert snapshot(g) == before


def test_add_edge_refuses_a_back_edge_and_leaves_the_graph_unchanged(diamond: ThoughtGraph) -> None:
    before = snapshot(diamond)
    with pytest.raises(CycleError):
        diamond.add_edge(4, 0)
    assert snapshot(diamond) == before


def test_add_edge_refuses_reversing_a_direct_edge() -> None:
    g = ThoughtGraph()
    g.add_node("a")
    g.add_node("b", parents=[0])
    with pytest.raises(CycleError):
        g.add_edge(1, 0)


def test_add_edge_allows_a_shortcut_that_closes_no_cycle(diamond: ThoughtGraph) -> None:
    diamond.add_edge(0, 4)
    assert diamond.parents(4) == [3, 0]


def test_add_edge_refuses_a_duplicate_edge() -> None:
    g = ThoughtGraph()
    g.add_node("a")
    g.add_node("b", parents=[0])
    with pytest.raises(ValueError):
        g.add_edge(0, 1)
    assert len(g.edges) == 1


def test_cycle_error_is_a_graph_error() -> None:
    assert issubclass(CycleError, GraphError)


# --- unknown ids -----------------------------------------------------------------------------


def test_unknown_node_is_a_graph_error_and_a_key_error() -> None:
    assert issubclass(UnknownNode, GraphError) and issubclass(UnknownNode, KeyError)


def test_add_node_with_an_unknown_parent_raises_and_adds_nothing() -> None:
    g = ThoughtGraph()
    g.add_node("a")
    with pytest.raises(UnknownNode):
        g.add_node("child", parents=[0, 99])
    assert (len(g), g.edges, g.children(0)) == (1, [], [])
    assert g.add_node("next").id == 1  # no id was used up


@pytest.mark.parametrize(("src", "dst"), [(0, 99), (99, 0)])
def test_add_edge_with_an_unknown_endpoint_raises_unknown_node(src: int, dst: int) -> None:
    g = ThoughtGraph()
    g.add_node("a")
    with pytest.raises(UnknownNode):
        g.add_edge(src, dst)
    assert g.edges == []


@pytest.mark.parametrize(
    "query",
    [
        lambda g: g.node(99),
        lambda g: g.parents(99),
        lambda g: g.children(99),
        lambda g: g.path_to_root(99),
        lambda g: g.ancestors(99),
        lambda g: g.subtree(99),
        lambda g: g.reaches(99, 0),
        lambda g: g.reaches(0, 99),
        lambda g: g.set_status(99, S.IN_PROGRESS),
    ],
    ids=[
        "node",
        "parents",
        "children",
        "path_to_root",
        "ancestors",
        "subtree",
        "reaches-src",
        "reaches-dst",
        "set_status",
    ],
)
def test_queries_on_an_unknown_id_raise_unknown_node(query) -> None:
    g = ThoughtGraph()
    g.add_node("a")
    with pytest.raises(UnknownNode):
        query(g)


# --- queries ---------------------------------------------------------------------------------


def test_parents_and_children_follow_the_edges(diamond: ThoughtGraph) -> None:
    assert [diamond.parents(n) for n in range(5)] == [[], [0], [0], [1, 2], [3]]
    assert [diamond.children(n) for n in range(5)] == [[1, 2], [3], [3], [4], []]


def test_parents_and_children_return_copies(diamond: ThoughtGraph) -> None:
    diamond.parents(3).append(0)
    diamond.children(0).clear()
    assert (diamond.parents(3), diamond.children(0)) == ([1, 2], [1, 2])


def test_parent_ids_are_the_stored_parents_first_parent_first(diamond: ThoughtGraph) -> None:
    diamond.add_edge(2, 4)
    assert [diamond.parent_ids(n) for n in range(5)] == [(), (0,), (0,), (1, 2), (3, 2)]


def test_parent_ids_of_an_unknown_node_raise(diamond: ThoughtGraph) -> None:
    with pytest.raises(UnknownNode):
        diamond.parent_ids(99)


def test_roots_are_the_nodes_without_parents(diamond: ThoughtGraph) -> None:
    diamond.add_node("second root")
    assert diamond.roots() == [0, 5]


def test_leaves_are_the_nodes_without_children(diamond: ThoughtGraph) -> None:
    diamond.add_node("side", parents=[1])
    assert diamond.leaves() == [4, 5]


def test_path_to_root_follows_the_first_parent(diamond: ThoughtGraph) -> None:
    assert diamond.path_to_root(4) == [0, 1, 3, 4]


def test_path_to_root_of_a_root_is_the_root(diamond: ThoughtGraph) -> None:
    assert diamond.path_to_root(0) == [0]


def test_ancestors_include_every_parent_branch_but_not_the_node(diamond: ThoughtGraph) -> None:
    assert diamond.ancestors(4) == {0, 1, 2, 3}
    assert diamond.ancestors(0) == set()


def test_reaches_follows_directed_paths_only(diamond: ThoughtGraph) -> None:
    assert diamond.reaches(0, 4) and diamond.reaches(2, 3)
    assert not diamond.reaches(4, 0) and not diamond.reaches(1, 2)


def test_a_node_reaches_itself(diamond: ThoughtGraph) -> None:
    assert diamond.reaches(3, 3)


def test_topological_order_puts_parents_first_stable_by_id(diamond: ThoughtGraph) -> None:
    assert diamond.topological_order() == [0, 1, 2, 3, 4]


def test_topological_order_respects_edges_added_against_id_order() -> None:
    g = ThoughtGraph()
    a, b = g.add_node("a").id, g.add_node("b").id
    g.add_edge(b, a)
    assert g.topological_order() == [b, a]


def test_by_kind_selects_nodes_of_any_given_kind(diamond: ThoughtGraph) -> None:
    assert [n.id for n in diamond.by_kind(NodeKind.SOLUTION, NodeKind.INPUT)] == [0, 4]
    assert diamond.by_kind(NodeKind.CRITIQUE) == []


def test_by_status_selects_nodes_in_any_given_status(diamond: ThoughtGraph) -> None:
    diamond.set_status(0, S.IN_PROGRESS)
    assert [n.id for n in diamond.by_status(S.IN_PROGRESS)] == [0]
    assert [n.id for n in diamond.by_status(S.PENDING, S.IN_PROGRESS)] == [0, 1, 2, 3, 4]


def test_ready_nodes_are_those_whose_parents_succeeded(diamond: ThoughtGraph) -> None:
    assert [n.id for n in diamond.ready_nodes()] == [0]
    succeed(diamond, 0)
    assert [n.id for n in diamond.ready_nodes()] == [1, 2]
    succeed(diamond, 1)
    assert [n.id for n in diamond.ready_nodes()] == [2]
    succeed(diamond, 2)
    assert [n.id for n in diamond.ready_nodes()] == [3]


def test_a_started_node_is_no_longer_ready(diamond: ThoughtGraph) -> None:
    diamond.set_status(0, S.IN_PROGRESS)
    assert diamond.ready_nodes() == []


def test_subtree_is_the_node_and_everything_it_reaches(diamond: ThoughtGraph) -> None:
    diamond.add_node("elsewhere")
    assert set(diamond.subtree(1)) == {1, 3, 4}
    assert set(diamond.subtree(4)) == {4}


# --- properties under random operation sequences --------------------------------------------


class GraphMachine(RuleBasedStateMachine):
    """Random add_node / add_edge / set_status attempts, checked against a shadow record."""

    nodes = Bundle("nodes")

    def __init__(self) -> None:
        super().__init__()
        self.graph = ThoughtGraph()
        self.creation_parents: dict[int, list[int]] = {}
        self.last_status: dict[int, NodeStatus] = {}

    def _check_moves(self) -> None:
        """Every status change since the last check (including automatic ones) is legal."""
        for node in self.graph:
            old = self.last_status.get(node.id)
            if old is not None and old is not node.status:
                assert node.status in TRANSITIONS[old], f"{node.id}: {old} -> {node.status}"
            self.last_status[node.id] = node.status

    def _add(self, parents: list[int], kind: NodeKind, edge_kind: EdgeKind):
        try:
            node = self.graph.add_node("t", kind, parents=parents, edge_kind=edge_kind)
        except ValueError:
            assert len(set(parents)) != len(parents)
            return multiple()
        self.creation_parents[node.id] = list(parents)
        assert self.graph.parents(node.id) == parents
        assert all(self.graph.edge(p, node.id).kind is edge_kind for p in parents)
        if all(self.graph.node(p).status is S.SUCCEEDED for p in parents):
            assert node.status is S.READY
        else:
            assert node.status is S.PENDING
        return node.id

    @rule(target=nodes, kind=st.sampled_from(NodeKind))
    def add_root(self, kind: NodeKind):
        return self._add([], kind, EdgeKind.ELABORATION)

    @rule(
        target=nodes,
        parents=st.lists(nodes, min_size=1, max_size=3),
        kind=st.sampled_from(NodeKind),
        edge_kind=st.sampled_from(EdgeKind),
    )
    def add_child(self, parents: list[int], kind: NodeKind, edge_kind: EdgeKind):
        return self._add(parents, kind, edge_kind)

    @rule(src=nodes, dst=nodes)
    def add_edge(self, src: int, dst: int) -> None:
        before = snapshot(self.graph)
        try:
            self.graph.add_edge(src, dst)
        except CycleError:
            assert self.graph.reaches(dst, src)
        except ValueError:
            assert src in self.graph.parents(dst)
        else:
            assert self.graph.parents(dst)[-1] == src
            return
        assert snapshot(self.graph) == before

    @rule(node=nodes, status=st.sampled_from(NodeStatus))
    def set_status(self, node: int, status: NodeStatus) -> None:
        old = self.graph.node(node).status
        try:
            self.graph.set_status(node, status)
        except IllegalTransition:
            assert status not in TRANSITIONS[old] and status is not old
            assert self.graph.node(node).status is old
            return
        assert self.graph.node(node).status is status

    @rule(node=nodes, choice=st.integers(0, 15))
    def advance(self, node: int, choice: int) -> None:
        """A legal move, favouring progress towards success, so that long lifecycles happen often."""
        legal = sorted(TRANSITIONS[self.graph.node(node).status])
        for forward in (S.IN_PROGRESS, S.SUCCEEDED):
            if forward in legal:
                legal += [forward] * 6
        if legal:
            self.graph.set_status(node, legal[choice % len(legal)])

    @rule(node=nodes)
    def run_to_success(self, node: int) -> None:
        """Work like a scheduler: run every ready node up to and including this one, parents first."""
        wanted = self.graph.ancestors(node) | {node}
        for nid in self.graph.topological_order():
            if nid in wanted and self.graph.node(nid).status in (S.READY, S.IN_PROGRESS):
                if self.graph.node(nid).status is S.READY:
                    self.graph.set_status(nid, S.IN_PROGRESS)
                    self._check_moves()
                self.graph.set_status(nid, S.SUCCEEDED)
                self._check_moves()

    @rule(offset=st.integers(0, 3), parent=nodes)
    def use_an_unknown_id(self, offset: int, parent: int) -> None:
        unknown = len(self.graph) + offset
        before = snapshot(self.graph)
        for attempt in (
            lambda: self.graph.add_node("t", parents=[parent, unknown]),
            lambda: self.graph.add_edge(parent, unknown),
            lambda: self.graph.add_edge(unknown, parent),
            lambda: self.graph.set_status(unknown, S.READY),
        ):
            with pytest.raises(UnknownNode):
                attempt()
        assert snapshot(self.graph) == before

    @invariant()
    def statuses_only_follow_transitions(self) -> None:
        self._check_moves()

    @invariant()
    def graph_stays_acyclic(self) -> None:
        order = self.graph.topological_order()
        assert sorted(order) == [n.id for n in self.graph]
        position = {n: i for i, n in enumerate(order)}
        assert all(position[e.src] < position[e.dst] for e in self.graph.edges)

    @invariant()
    def edges_and_adjacency_agree(self) -> None:
        g = self.graph
        pairs = {(e.src, e.dst) for e in g.edges}
        assert len(pairs) == len(g.edges)
        assert all(e.src in g and e.dst in g for e in g.edges)
        from_parents = {(p, n.id) for n in g for p in g.parents(n.id)}
        from_children = {(n.id, c) for n in g for c in g.children(n.id)}
        assert from_parents == pairs == from_children

    @invariant()
    def depth_is_one_below_the_deepest_creation_parent(self) -> None:
        for node in self.graph:
            parents = self.creation_parents[node.id]
            expected = 1 + max((self.graph.node(p).depth for p in parents), default=-1)
            assert node.depth == expected
            assert self.graph.parents(node.id)[: len(parents)] == parents

    @invariant()
    def no_node_waits_on_parents_that_all_succeeded(self) -> None:
        for node in self.graph.by_status(S.PENDING):
            parents = self.graph.parents(node.id)
            assert parents and not all(self.graph.node(p).status is S.SUCCEEDED for p in parents)


GraphMachine.TestCase.settings = settings(
    max_examples=60,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestGraphProperties = GraphMachine.TestCase
