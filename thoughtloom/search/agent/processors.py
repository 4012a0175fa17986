"""What a processor is: the protocol, what it may use (AgentEnv), its typed result, what it may add, and the
registry by kind.

A processor works one node. It reads the node and the results of the nodes it depends on,
calls the model (through the search context, so the budget, the cache and the record apply) or
a tool (through the run's Toolbox), and returns a `ProcessorResult`: its status, its typed
result, an error, the tokens it spent, the tool calls it made, and the nodes and edges it wants
added. It never touches the graph itself: the scheduler applies results one at a time, in the
order the nodes started, so the graph a run builds does not depend on which call answered first.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Protocol, runtime_checkable

from ...graph import EdgeKind, Node, NodeKind
from ...tasks.agent import Context
from ...tasks.base import Query
from ...tools.base import ToolResult
from ...tools.toolbox import TOOL_CALLS, Toolbox
from ..context import SearchContext
from ..events import ToolCalled
from ..operators import EXTRA as OPERATOR_EXTRA


@dataclass(frozen=True, slots=True)
class AgentExtra:
    """The node.extra keys an agent run writes: those the scheduler writes from a ProcessorResult (status, text,
    result, error, tool calls, a vote's tally), what the node made, its own kind's name, refused edges, its
    retry, the built-in kinds' node data, the granted tools and the run's summary on the task node."""

    status: str = "status"
    text: str = "text"
    result: str = "result"
    error: str = "error"
    tool_calls: str = TOOL_CALLS
    tally: str = OPERATOR_EXTRA.tally
    #: Whether a counted vote reached its quorum.
    agreed: str = "agreed"
    made: str = "made"
    #: A node of a user's own kind: stored as its base kind with the name here.
    kind: str = "kind"
    refused_edges: str = "refused_edges"
    retried_as: str = "retried_as"
    #: A replan's retry: the failed node's id and why it failed.
    retry_of: str = "retry_of"
    feedback: str = "feedback"
    #: The built-in kinds' node data: a plan's steps, a step's number, its tool, a question's spec,
    #: a sample's number and a vote's round.
    steps: str = "steps"
    step: str = "step"
    tool: str = "tool"
    spec: str = "spec"
    sample: str = "sample"
    round: str = "round"
    #: On the task node: the granted tools' specs (so a replay runs none) and the run's counts.
    tools: str = "tools"
    agent_summary: str = "agent_summary"


EXTRA: Final = AgentExtra()


@dataclass(frozen=True, slots=True)
class NewNode:
    """A node a processor wants added.

    after: the nodes it depends on, by id, or by "@i" for the i-th node of the same result (so a
    plan can add steps that depend on each other). kind: a registered kind name; a kind that is not
    a NodeKind is stored as `base` with the name in extra[EXTRA.kind].
    """

    kind: str
    content: str
    after: tuple[int | str, ...] = ()
    base: NodeKind | None = None
    data: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class NewEdge:
    """An edge a processor wants added (or, when it exists, re-labelled: a critique's CONTRADICTION)."""

    src: int
    dst: int
    kind: EdgeKind
    weight: float | None = None


@dataclass(frozen=True, slots=True)
class ProcessorResult:
    """What working one node gave: status ("succeeded" | "failed"), result, error, cost, tool calls, graph changes,
    and for a vote its account.

    result: the node's typed result as plain data (a plan's steps, a critique's verdict, a tool's
    output); `text` is what dependent nodes read of it.
    """

    status: str
    text: str = ""
    result: Mapping[str, Any] = field(default_factory=dict)
    error: str | None = None
    cost_tokens: int = 0
    tool_calls: tuple[Mapping[str, Any], ...] = ()
    new_nodes: tuple[NewNode, ...] = ()
    new_edges: tuple[NewEdge, ...] = ()
    score: float | None = None
    #: A counted vote's account ("3 of 5 computations gave 16"), shown as the node's vote line, and
    #: whether the vote reached its quorum (an answer it did not reach carries a doubt).
    tally: str | None = None
    agreed: bool | None = None

    @property
    def ok(self) -> bool:
        """True when the node succeeded."""
        return self.status == "succeeded"


def succeeded(text: str, **kw: Any) -> ProcessorResult:
    """A successful result whose text dependents read."""
    return ProcessorResult("succeeded", text, **kw)


def failed(error: str, **kw: Any) -> ProcessorResult:
    """A failed result saying why."""
    return ProcessorResult("failed", error=error, **kw)


@runtime_checkable
class Processor(Protocol):
    """Works one node of its kind.

    A processor that calls no model (a vote) may set a class attribute `after_stop = True`: it still
    runs after a budget or a cancel has stopped the run, so work already done becomes an answer.
    """

    async def run(self, node: Node, env: AgentEnv) -> ProcessorResult:
        """Do the node's work; return what it gave (never raise for a model's or tool's failure)."""
        ...


def kind_of(node: Node) -> str:
    """The kind name a node is processed as: a registered custom kind, else its NodeKind."""
    custom = node.extra.get(EXTRA.kind)
    return custom if isinstance(custom, str) else node.kind.value


class ProcessorRegistry:
    """Processors by kind name; a user registers their own for a built-in kind or a new one."""

    def __init__(self, processors: Mapping[str, Processor] | None = None,
                 bases: Mapping[str, NodeKind] | None = None) -> None:
        self._processors: dict[str, Processor] = dict(processors or {})
        self._bases: dict[str, NodeKind] = dict(bases or {})

    def register(self, kind: str | NodeKind, processor: Processor, *, base: NodeKind | None = None) -> None:
        """Process nodes of `kind` with `processor`; a new kind is stored as `base` (default: analysis)."""
        name = kind.value if isinstance(kind, NodeKind) else str(kind)
        if not isinstance(processor, Processor):
            raise TypeError(f"a processor for {name!r} needs an async run(node, env) method")
        self._processors[name] = processor
        if name not in NodeKind._value2member_map_:
            self._bases[name] = base or NodeKind.ANALYSIS

    def copy(self) -> ProcessorRegistry:
        """An independent registry with the same processors (to extend without changing the original)."""
        return ProcessorRegistry(self._processors, self._bases)

    def get(self, kind: str) -> Processor | None:
        """The processor for a kind name, or None."""
        return self._processors.get(kind)

    def base(self, kind: str) -> NodeKind:
        """The NodeKind a kind name is stored as."""
        if kind in NodeKind._value2member_map_:
            return NodeKind(kind)
        try:
            return self._bases[kind]
        except KeyError:
            raise KeyError(f"no processor is registered for kind {kind!r}") from None

    def kinds(self) -> list[str]:
        """Registered kind names."""
        return sorted(self._processors)

    def __contains__(self, kind: object) -> bool:
        return kind in self._processors

    def update(self, items: Iterable[tuple[str, Processor]]) -> None:
        """Register several processors for built-in kinds."""
        for kind, processor in items:
            self.register(kind, processor)

def keep_grant(ctx: SearchContext, tools: Toolbox) -> None:
    """Keep the granted tools' specs on the task node, so a replay asks with the same prompts and runs no tool."""
    root = ctx.graph.node(ctx.root)
    if EXTRA.tools not in root.extra:
        root.extra[EXTRA.tools] = [t.to_dict() for t in tools.specs]


@dataclass
class AgentEnv:
    """One agent run's shared services; processors read the graph through it and never change it."""

    ctx: SearchContext
    registry: ProcessorRegistry
    tools: Toolbox
    #: Tool calls made, those that failed, and replies meant as a call (or code) that could not be read as one.
    counts: dict[str, int] = field(default_factory=lambda: {"tool_calls": 0, "tool_failures": 0,
                                                            "malformed_tool_calls": 0})

    @property
    def native_tools(self) -> bool:
        """Whether tool calls go through the endpoint's function calling (the backend declares it takes them)."""
        return self.ctx.gateway.capabilities.native_tools

    @property
    def task(self) -> str:
        """The task text."""
        return str(self.ctx.problem)

    def text(self, node_id: int) -> str:
        """What dependents read of a node: its result text, else its content."""
        node = self.ctx.graph.node(node_id)
        return str(node.extra.get(EXTRA.text) or node.content)

    def label(self, node_id: int) -> str:
        """How a node is named to the model: 'step N' for a plan step, else its kind."""
        node = self.ctx.graph.node(node_id)
        step = node.extra.get(EXTRA.step)
        return f"step {step}" if step is not None else kind_of(node)

    def dependencies(self, node_id: int) -> list[int]:
        """The nodes this one depends on (DEPENDENCY edges), in id order."""
        graph = self.ctx.graph
        return sorted(p for p in graph.parents(node_id) if graph.edge(p, node_id).kind is EdgeKind.DEPENDENCY)

    def context(self, node: Node, *, skip_input: bool = True) -> Context:
        """The results of the nodes `node` depends on (their failures said as such), for a prompt."""
        items: list[tuple[str, str]] = []
        for p in self.dependencies(node.id):
            parent = self.ctx.graph.node(p)
            if skip_input and kind_of(parent) in ("input", "plan"):
                continue
            error = parent.extra.get(EXTRA.error)
            items.append(
                (self.label(p), f"(failed: {error})" if error and not parent.extra.get(EXTRA.text) else self.text(p))
            )
        return Context(tuple(items))

    async def ask(self, query: Query, purpose: str, node_id: int) -> tuple[str, int] | None:
        """One model reply for a node (None: the budget or the model stopped the run)."""
        got = await self.ctx.ask(query, 1, purpose, ("agent", node_id, purpose))
        if got is None or not got[0]:
            return None
        texts, tokens = got
        return texts[0], tokens

    async def call_tool(self, name: str, args: dict[str, Any], node_id: int) -> ToolResult:
        """Call a granted tool for a node through the run's Toolbox (validated, timed out, capped, recorded)."""
        bus = self.ctx.bus
        if bus:
            bus.emit(ToolCalled(node_id, name, "started"))
        result = await self.tools.call(name, args)
        if bus:
            bus.emit(ToolCalled(node_id, name, result.status))
        self.counts["tool_calls"] += 1
        if not result.ok:
            self.counts["tool_failures"] += 1
        return result
