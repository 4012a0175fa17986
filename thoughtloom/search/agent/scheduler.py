"""The dependency-ready scheduler: the `agent` strategy.

A node is ready when every node it depends on (its DEPENDENCY parents; other edge kinds do not
count) has succeeded, or has failed under a policy that lets its dependents go on. Ready nodes
start in the order the strategy picks (breadth-first, depth-first, or best-first by score; the
controller may switch it mid-run through `ctx.order`), as many at once as `config.beam` allows,
each model call under the gateway's concurrency limit and each tool call under the Toolbox's.

Results are applied in the order the nodes started, never in the order they finished: node ids,
and so the graph and its CID, come out the same in a replay, whatever the timing.

When a node fails, `config.on_failure` says what happens to the nodes that depend on it:
- "fail": they fail too (their own dependents with them), and the run ends with what succeeded;
- "skip": they run anyway, told the step failed and why;
- "replan": the node is tried again once as a new node of the same kind, told the error (its
  dependents wait for the new one); if that fails as well, its dependents go on as under "skip".
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

from ...graph import EdgeKind, Node, NodeStatus, ThoughtGraph
from ...graph.types import CycleError
from ...tools.toolbox import Toolbox
from ...words import counted
from ..context import SearchContext
from ..events import NodeProcessed, NodeScored
from ..stop import StopReason
from ..strategies.base import BuiltinStrategy, Needs, root_record
from .kinds import default_processors
from .processors import (
    EXTRA,
    AgentEnv,
    NewNode,
    ProcessorRegistry,
    ProcessorResult,
    failed,
    keep_grant,
    kind_of,
)

_S = NodeStatus


def _priority(order: str, node: Node) -> tuple[Any, ...]:
    """Sort key: smaller runs first."""
    if order == "depth_first":
        return (-node.depth, node.id)
    if order == "best_first":
        return (-(node.score if node.score is not None else 0.5), node.depth, node.id)
    return (node.depth, node.id)


class Scheduler:
    """Runs processors over the graph until nothing is ready and nothing runs, or the run stops."""

    def __init__(self, ctx: SearchContext, registry: ProcessorRegistry, tools: Toolbox) -> None:
        self.ctx = ctx
        self.env = AgentEnv(ctx, registry, tools)
        self.registry = registry
        self.policy = ctx.config.on_failure
        self.parallel = ctx.config.beam
        self._running: dict[int, asyncio.Task[ProcessorResult]] = {}
        self.counts: dict[str, int] = {"processed": 0, "succeeded": 0, "failed": 0, "replanned": 0,
                                       "cancelled": 0, "refused_edges": 0}

    # --- readiness ------------------------------------------------------------------------------

    def _settled(self, node_id: int) -> bool:
        """True when a dependency no longer holds its dependents back."""
        node = self.ctx.graph.node(node_id)
        if node.status is _S.SUCCEEDED:
            return True
        # A retried node's dependents also depend on its retry, which holds them until it settles.
        return node.status is _S.FAILED and self.policy != "fail"

    def ready(self) -> list[Node]:
        """Pending nodes whose dependencies have all settled, in the order the strategy picks."""
        graph = self.ctx.graph
        out = []
        for node in graph.by_status(_S.PENDING, _S.READY):
            if node.id in self._running:
                continue
            if all(self._settled(p) for p in self.env.dependencies(node.id)):
                out.append(node)
        order = self.ctx.order or "breadth_first"
        return sorted(out, key=lambda n: _priority(order, n))

    # --- the loop ---------------------------------------------------------------------------------

    async def run(self) -> None:
        """Start ready nodes, apply results in start order, until done or stopped."""
        ctx = self.ctx
        queue: list[int] = []  # started, not yet applied, in start order
        root = ctx.graph.node(ctx.root)
        if "status" not in root.extra:  # the engine made the task node succeeded; it is worked first
            self._running[root.id] = asyncio.ensure_future(self._process(root))
            queue.append(root.id)
        try:
            while True:
                ready = self.ready() if not ctx.stopped else [n for n in self.ready() if self._after_stop(n)]
                for node in ready[: max(0, self.parallel - len(queue))]:
                    self._start(node)
                    queue.append(node.id)
                if not queue:
                    break
                head = queue.pop(0)
                task = self._running[head]
                # wait(), not `await task`: a cancel of this run must reach this loop even when the
                # step it interrupts ends normally (a call that returns what it had).
                await asyncio.wait({task})
                del self._running[head]
                result = task.result()
                self._apply(head, result)
                if ctx.stopped:
                    continue  # apply what is already running; start only what needs no model
                await ctx.checkpoint()
        finally:
            for task in self._running.values():
                task.cancel()
            if self._running:
                await asyncio.gather(*self._running.values(), return_exceptions=True)

    def _after_stop(self, node: Node) -> bool:
        """True for a node whose processor needs no model call (a vote): it still runs once the run has stopped,
        so what the computations already gave still becomes an answer."""
        return bool(getattr(self.registry.get(kind_of(node)), "after_stop", False))

    def _start(self, node: Node) -> None:
        graph = self.ctx.graph
        if node.status is _S.PENDING:
            graph.set_status(node.id, _S.READY)
        graph.set_status(node.id, _S.IN_PROGRESS)
        self._running[node.id] = asyncio.ensure_future(self._process(node))

    async def _process(self, node: Node) -> ProcessorResult:
        kind = kind_of(node)
        processor = self.registry.get(kind)
        if processor is None:
            return failed(f"no processor is registered for kind {kind!r}")
        try:
            return await processor.run(node, self.env)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a user's processor bug fails its node, not the run
            return failed(f"the {kind} processor raised {type(exc).__name__}: {exc}")

    # --- applying a result -------------------------------------------------------------------------

    def _apply(self, node_id: int, result: ProcessorResult) -> None:
        ctx, graph = self.ctx, self.ctx.graph
        node = graph.node(node_id)
        node.cost_tokens += result.cost_tokens
        extra = node.extra
        extra[EXTRA.status] = result.status
        if result.text:
            extra[EXTRA.text] = result.text
        if result.result:
            extra[EXTRA.result] = dict(result.result)
        if result.error is not None:
            extra[EXTRA.error] = result.error
        if result.tool_calls:
            extra.setdefault(EXTRA.tool_calls, []).extend(dict(c) for c in result.tool_calls)
        if result.tally is not None:
            extra[EXTRA.tally] = result.tally
            if result.agreed is not None:
                extra[EXTRA.agreed] = result.agreed
        self.counts["processed"] += 1
        if result.ok:
            if node.status is not _S.SUCCEEDED:  # the task node starts succeeded (the engine's root)
                graph.set_status(node_id, _S.SUCCEEDED)
            self.counts["succeeded"] += 1
            if result.score is not None:
                node.score = result.score
                if ctx.bus:
                    ctx.bus.emit(NodeScored(node_id, result.score, result.score))
            added = self._add_nodes(node, result.new_nodes)
            self._wire_dependents(node_id, added)
            for edge in result.new_edges:
                self._add_edge(edge.src, edge.dst, edge.kind, edge.weight)
            if added or result.new_edges:  # what this node's work made, kept with it
                extra[EXTRA.made] = {"nodes": added,
                                 "edges": [[e.src, e.dst, e.kind.value] for e in result.new_edges]}
            if kind_of(node) == "solution":
                ctx.answers[node_id] = result.text
                if node_id not in ctx.goals:
                    ctx.goals.append(node_id)
        elif node_id == ctx.root:
            self.counts["failed"] += 1
            ctx.error = f"the task node failed: {result.error}"
        else:
            graph.set_status(node_id, _S.FAILED)
            self.counts["failed"] += 1
            self._on_failure(node, result)
        if ctx.bus:
            ctx.bus.emit(NodeProcessed(node_id, kind_of(node), result.status, result.error,
                                       tuple(str(c.get("tool")) for c in result.tool_calls)))

    def _add_nodes(self, parent: Node, new: Iterable[NewNode], creator: str | None = None) -> list[int]:
        """Add a result's nodes (made by `parent`'s work, or `creator`); "@i" dependencies name earlier nodes of the
        same result."""
        ctx, graph = self.ctx, self.ctx.graph
        creator = creator or f"agent:{kind_of(parent)}"
        ids: list[int] = []
        for spec in new:
            after = [ids[int(a[1:])] if isinstance(a, str) else int(a) for a in spec.after] or [parent.id]
            base = spec.base or self.registry.base(spec.kind)
            steps = ctx.steps(after[0]) + (spec.content,)
            nid = ctx.add_thought(after, spec.content, creator, kind=base,
                                  edge_kind=EdgeKind.DEPENDENCY, steps=steps)
            if nid is None:  # max_nodes: the run stops adding
                break
            extra = graph.node(nid).extra
            if spec.kind != base.value:
                extra[EXTRA.kind] = spec.kind
            extra.update(spec.data)
            ids.append(nid)
        return ids

    def _wire_dependents(self, node_id: int, added: list[int]) -> None:
        """Nodes that depend on `node_id` and have not started also wait for what it added (the sinks of it)."""
        if not added:
            return
        graph = self.ctx.graph
        inner = set(added)
        sinks = [n for n in added if not any(c in inner for c in graph.children(n))]
        for child in list(graph.children(node_id)):
            # Not started: pending, or ready (the graph marks a node ready once its parents succeeded).
            if child in inner or child in self._running or graph.node(child).status not in (_S.PENDING, _S.READY):
                continue
            if graph.edge(node_id, child).kind is not EdgeKind.DEPENDENCY:
                continue
            for s in sinks:
                self._add_edge(s, child, EdgeKind.DEPENDENCY)

    def _add_edge(self, src: int, dst: int, kind: EdgeKind, weight: float | None = None) -> None:
        graph = self.ctx.graph
        try:
            if src in graph.parents(dst):
                graph.set_edge(src, dst, kind, weight)  # a critique re-labels the edge it judged
            else:
                graph.add_edge(src, dst, kind, weight)
        except (CycleError, ValueError) as exc:
            self.counts["refused_edges"] += 1
            graph.node(dst).extra.setdefault(EXTRA.refused_edges, []).append(f"{src}->{dst} {kind.value}: {exc}")

    def _on_failure(self, node: Node, result: ProcessorResult) -> None:
        ctx, graph = self.ctx, self.ctx.graph
        if self.policy == "replan" and EXTRA.retry_of not in node.extra and not ctx.stopped:
            parents = [p for p in graph.parents(node.id) if graph.edge(p, node.id).kind is EdgeKind.DEPENDENCY]
            keep = {k: v for k, v in node.extra.items()
                    if k not in (EXTRA.kind, EXTRA.status, EXTRA.text, EXTRA.result, EXTRA.error, EXTRA.tool_calls,
                                 EXTRA.refused_edges)}
            retry = NewNode(kind_of(node), node.content, tuple(parents or [node.id]),
                            data={**keep, EXTRA.retry_of: node.id, EXTRA.feedback: result.error or "the step failed"})
            added = self._add_nodes(node, [retry], creator="agent:replan")
            if added:
                nid = added[0]
                node.extra[EXTRA.retried_as] = nid
                self._add_edge(node.id, nid, EdgeKind.REFINEMENT)
                self._wire_dependents(node.id, [nid])  # its dependents wait for the retry
                self.counts["replanned"] += 1
                return
        if self.policy == "fail":
            self._fail_dependents(node.id)

    def _fail_dependents(self, node_id: int) -> None:
        graph = self.ctx.graph
        for child in graph.children(node_id):
            c = graph.node(child)
            if c.status in (_S.PENDING, _S.READY) and graph.edge(node_id, child).kind is EdgeKind.DEPENDENCY:
                c.extra[EXTRA.error] = f"cancelled: node {node_id}, which it depends on, failed"
                graph.set_status(child, _S.CANCELLED)
                self.counts["cancelled"] += 1
                self._fail_dependents(child)


async def run_agent(ctx: SearchContext) -> None:
    """The agent strategy: work the graph from the task node with the registered processors and the run's tools."""
    registry = ctx.strategy_inputs.get(ProcessorRegistry)
    if registry is None:
        registry = default_processors()
    tools = ctx.tools if ctx.tools is not None else Toolbox()
    if ctx.order is None:
        ctx.order = ctx.config.agent_order
    keep_grant(ctx, tools)
    scheduler = Scheduler(ctx, registry, tools)
    try:
        await scheduler.run()
    finally:
        # Also when the wall budget cancels the run mid-step: the steps already worked are the run's record.
        summary = {**scheduler.counts, **scheduler.env.counts, "order": ctx.order}
        ctx.graph.node(ctx.root).extra[EXTRA.agent_summary] = summary
    if ctx.stop_reason is None:
        ctx.stop(StopReason.GOAL_REACHED if ctx.goals else StopReason.FRONTIER_EXHAUSTED)


#: The keys of a worked node's extra the trace shows, in this order, when it has them.
_SHOWN = (EXTRA.text, EXTRA.error, EXTRA.result, EXTRA.tool_calls)


@dataclass(frozen=True, slots=True)
class AgentStep:
    """One node the agent worked: id, kind, status, the step, the nodes it waited for, and what came of it
    (`shown`: its text, error, result and tool calls, those it has)."""

    node: int
    kind: str
    status: str
    step: str
    after: tuple[int, ...]
    shown: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        """Plain data."""
        return {"node": self.node, "kind": self.kind, "status": self.status, "step": self.step,
                "after": list(self.after), **self.shown}


@dataclass(frozen=True, slots=True)
class AgentTrace:
    """The agent's trace: its summary (counts, order) and every node it worked, the task node first."""

    key: ClassVar[str] = "agent"
    summary: dict[str, Any]
    nodes: tuple[AgentStep, ...]

    @classmethod
    def read(cls, graph: ThoughtGraph) -> AgentTrace | None:
        """The trace an agent run left on the graph, or None."""
        summary = root_record(graph, EXTRA.agent_summary)
        if summary is None:
            return None
        return cls(summary, tuple(
            AgentStep(n.id, n.extra.get(EXTRA.kind, n.kind.value), n.status.value, n.content,
                      tuple(p for p in graph.parents(n.id) if graph.edge(p, n.id).kind is EdgeKind.DEPENDENCY),
                      {k: n.extra[k] for k in _SHOWN if k in n.extra})
            for n in graph))

    def to_dict(self) -> dict[str, Any]:
        """Plain data: the summary and the nodes."""
        return {"summary": self.summary, "nodes": [n.to_dict() for n in self.nodes]}

    def lines(self) -> list[str]:
        """The summary's counts, then each step that failed or was cancelled, with its error."""
        a = self.summary
        out = [f"agent: {counted(a['processed'], 'step')} worked ({a['succeeded']} succeeded, {a['failed']} failed, "
               f"{a['replanned']} replanned, {a['cancelled']} cancelled) · tool calls {a['tool_calls']} "
               f"({a['tool_failures']} failed, {a['malformed_tool_calls']} malformed replies) · order {a['order']}"]
        out.extend(f"  #{n.node} {n.kind} {n.status}: {n.shown.get('error', '')}" for n in self.nodes[1:]
                   if n.status in ("failed", "cancelled"))
        return out


#: The agent runs on its own task (the run layer checks it), with the tools it is granted.
STRATEGIES = (BuiltinStrategy("agent", run_agent, Needs(tools=True), trace=AgentTrace.read),)
