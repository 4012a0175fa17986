"""The reasoning graph as a Mermaid flowchart: scores on nodes, best path highlighted.

A big search is drawn capped (the best path, the frontier, and one "N more" node) because
Mermaid refuses a diagram over its own text and edge limits; `full=True` draws every node.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from itertools import pairwise

from ..graph import EdgeKind, NodeKind, NodeStatus, ThoughtGraph
from ..search.agent.processors import EXTRA as AGENT
from ..search.context import EXTRA as CONTEXT
from ..search.grounding_step import EXTRA as GROUNDING
from ..search.recursive.solver import EXTRA as RECURSION
from ..search.research.explorer import EXTRA as RESEARCH
from .terminal import terminal_text

MAX_LABEL = 70
#: Mermaid's defaults: a diagram's text may hold 50,000 characters (maxTextSize) and 500 edges (maxEdges).
MERMAID_MAX_TEXT = 50_000
MERMAID_MAX_EDGES = 500
#: Nodes drawn by default; a 400-node search already exceeds MERMAID_MAX_TEXT.
DEFAULT_MAX_NODES = 150

_ARROWS = {
    EdgeKind.DEPENDENCY: "-->",
    EdgeKind.AGGREGATION: "==>",
    EdgeKind.REFINEMENT: "-.->",
    EdgeKind.CONTRADICTION: "--x",
    EdgeKind.SUPPORTS: "-->",
}

_CLASSES = {
    "best": "fill:#d4edda,stroke:#1e7e34,stroke-width:3px,color:#0b2e13",
    "goal": "fill:#b8f0c4,stroke:#1e7e34,stroke-width:4px,color:#0b2e13",
    "pruned": "fill:#f1f1f1,stroke:#9a9a9a,stroke-dasharray:5 5,color:#777",
    "failed": "fill:#f8d7da,stroke:#c82333,color:#721c24",
    "cancelled": "fill:#fff3cd,stroke:#b38600,color:#6b5200",
    # Grounding outcomes draw the border only, so they combine with the classes above.
    "verified": "stroke:#0b7d3e,stroke-width:3px",
    "refuted": "stroke:#c82333,stroke-width:3px",
    # The recursive strategy: decompositions (trapezoids) and their recompositions (hexagons).
    "decomposition": "fill:#e3ecfa,stroke:#2457a6,stroke-width:2px,color:#0d2a57",
    "recomposition": "fill:#f3e8fb,stroke:#6f2da8,stroke-width:2px,color:#36104f",
    "more": "fill:#ffffff,stroke:#6c757d,stroke-dasharray:3 3,color:#495057",
}

_CLOSED = (NodeStatus.PRUNED, NodeStatus.FAILED, NodeStatus.CANCELLED)


def _recursion_badge(record: dict) -> str:
    """The contract (specs, failure policy) and the verification of a recursive node, for its label."""
    parts = []
    contract = record.get("contract")
    if contract:
        p = contract["failure_policy"]
        parts.append(f"contract: {len(contract['child_specs'])} specs, retry {p['retry']} / replan "
                     f"{p['replan']} / backtrack {p['backtrack']}")
    ver = record.get("verification")
    if ver:
        first = _escape(ver["diagnostics"][0]) if ver.get("diagnostics") else ""
        parts.append(("✓ verified" if ver["passed"] else "✗ failed") + (f": {first}" if first else ""))
    return "<br/>".join(parts)


# Mermaid entity codes (#name; or #number;) for every character that could end a quoted label,
# start a markdown string, open HTML, or be read as an entity: the text shows, nothing parses.
_MERMAID_CODES = str.maketrans({
    "#": "#35;", '"': "#quot;", "&": "#amp;", "<": "#lt;", ">": "#gt;", "`": "#96;",
    "[": "#91;", "]": "#93;", "{": "#123;", "}": "#125;", "|": "#124;",
})


def _escape(text: str) -> str:
    """Model text as a one-line Mermaid label: control characters visible, syntax and HTML inert."""
    text = terminal_text(" ".join(text.split()))
    if len(text) > MAX_LABEL:
        text = text[: MAX_LABEL - 1] + "…"
    return text.translate(_MERMAID_CODES)


def _grounding_badge(grounding: dict) -> str:
    """✓ / ✗ / ? with the grounder's name and counts, e.g. "✗ code 2/5 passed"."""
    mark = {True: "✓", False: "✗", None: "?"}[grounding.get("verified")]
    passed, failed = grounding.get("passed", 0), grounding.get("failed", 0)
    counts = f" {passed}/{passed + failed} passed" if passed or failed else ""
    return f"{mark} {_escape(str(grounding.get('grounder', '')))}{counts}"


def to_mermaid(graph: ThoughtGraph, best_path: Iterable[int] = (), goals: Iterable[int] = (), *,
               full: bool = False, max_nodes: int = DEFAULT_MAX_NODES) -> str:
    """A Mermaid `flowchart TD` of the graph, capped to fit Mermaid's limits unless `full`."""
    best, goal_list = list(best_path), list(goals)
    if full or len(graph) <= max_nodes:
        text, edges = _render(graph, None, best, goal_list)
        if full or _fits(text, edges):
            return text
    limit = min(max_nodes, len(graph))
    while True:
        keep = _kept(graph, best, goal_list, limit)
        text, edges = _render(graph, keep, best, goal_list)
        # The best path alone is the floor: it is drawn even when it cannot fit.
        if _fits(text, edges) or limit <= 1:
            return text
        limit = limit * 3 // 4


def _fits(text: str, edges: int) -> bool:
    return len(text) <= MERMAID_MAX_TEXT and edges <= MERMAID_MAX_EDGES


def _kept(graph: ThoughtGraph, best: list[int], goals: list[int], limit: int) -> set[int]:
    """The nodes a capped picture draws: the best path and goals first, then the best-scored frontier."""
    keep: set[int] = set()
    for node_id in [*best, *goals]:
        if node_id in graph:
            keep.update(graph.path_to_root(node_id))
    # The frontier: leaves still open or finished, not pruned, failed or cancelled; best scores first.
    frontier = [n for n in (graph.node(i) for i in graph.leaves()) if n.status not in _CLOSED and n.id not in keep]
    frontier.sort(key=lambda n: (n.score is None, -(n.score or 0.0), n.id))
    for node in frontier:
        path = set(graph.path_to_root(node.id)) - keep
        if len(keep) + len(path) > limit:
            continue
        keep |= path
    return keep or set(graph.roots()[:1])


def _render(graph: ThoughtGraph, keep: Collection[int] | None, best: list[int], goals: list[int]) -> tuple[str, int]:
    """The flowchart of the nodes in `keep` (None: all) and the number of edges drawn."""
    best_set = set(best)
    goal_set = set(goals)
    best_edges = set(pairwise(best))
    lines = ["flowchart TD"]
    members: dict[str, list[str]] = {name: [] for name in _CLASSES}
    for node in graph:
        if keep is not None and node.id not in keep:
            continue
        kind = node.extra.get(AGENT.kind)  # an agent node of a user's own kind
        label = f"{_escape(kind) if isinstance(kind, str) else node.kind.value}: {_escape(node.content)}"
        result = node.extra.get(AGENT.text)
        if isinstance(result, str) and result != node.content:  # what an agent step gave
            label += f"<br/>→ {_escape(result)}"
        tools = node.extra.get(AGENT.tool_calls)
        if tools:
            label += "<br/>🔧 " + ", ".join(
                f"{_escape(str(c.get('tool')))} {_escape(str(c.get('status')))}" for c in tools
            )
        hypothesis = node.extra.get(RESEARCH.hypothesis)
        if hypothesis is not None:  # research: how sure, how promising, where it stands
            label += (f"<br/>confidence {hypothesis['confidence']:.2f} · promise {hypothesis['promise']:.2f} · "
                      f"{_escape(str(hypothesis['status']))}")
        elif node.score is not None:
            label += f"<br/>score {node.score:.2f}"
        evidence = node.extra.get(RESEARCH.evidence)
        if evidence is not None:
            label += f"<br/>📄 {_escape(str(evidence.get('source')))}"
        grounding = node.extra.get(GROUNDING.grounding)
        if grounding is not None:
            label += f"<br/>{_grounding_badge(grounding)}"
            if grounding.get("verified") is not None:
                (members["verified"] if grounding["verified"] else members["refuted"]).append(f"n{node.id}")
        record = node.extra.get(RECURSION.recursion)
        if record is not None and _recursion_badge(record):
            label += f"<br/>{_recursion_badge(record)}"
        if node.status in (NodeStatus.PRUNED, NodeStatus.FAILED, NodeStatus.CANCELLED):
            reason = node.extra.get(CONTEXT.rejected) or node.extra.get(AGENT.error)
            label += f"<br/><i>{node.status.value}" + (f": {_escape(reason)}" if reason else "") + "</i>"
        if record is not None and node.kind is NodeKind.DECOMPOSITION:
            lines.append(f'    n{node.id}[/"{label}"\\]')
            members["decomposition"].append(f"n{node.id}")
        elif record is not None and record.get("mode") == "recompose":
            lines.append(f'    n{node.id}{{{{"{label}"}}}}')
            members["recomposition"].append(f"n{node.id}")
        else:
            lines.append(f'    n{node.id}["{label}"]')
        if node.id in goal_set:
            members["goal"].append(f"n{node.id}")
        elif node.id in best_set:
            members["best"].append(f"n{node.id}")
        elif node.status is NodeStatus.PRUNED:
            members["pruned"].append(f"n{node.id}")
        elif node.status is NodeStatus.FAILED:
            members["failed"].append(f"n{node.id}")
        elif node.status is NodeStatus.CANCELLED:
            members["cancelled"].append(f"n{node.id}")
    highlighted: list[int] = []
    drawn = [e for e in graph.edges if keep is None or (e.src in keep and e.dst in keep)]
    for i, edge in enumerate(drawn):
        arrow = _ARROWS.get(edge.kind, "-->")
        name = edge.kind.value + (f" {edge.weight:.2f}" if edge.weight is not None else "")
        label = f"|{name}|" if edge.kind in _ARROWS else ""
        lines.append(f"    n{edge.src} {arrow}{label} n{edge.dst}")
        if (edge.src, edge.dst) in best_edges:
            highlighted.append(i)
    hidden = len(graph) - (len(graph) if keep is None else len(keep))
    if hidden:
        lines.append(f'    more["… {hidden} more thoughts not drawn (the full graph: --mermaid-full)"]')
        members["more"].append("more")
    for name, style in _CLASSES.items():
        lines.append(f"    classDef {name} {style}")
        if members[name]:
            lines.append(f"    class {','.join(members[name])} {name}")
    if highlighted:
        lines.append(f"    linkStyle {','.join(map(str, highlighted))} stroke:#1e7e34,stroke-width:3px")
    return "\n".join(lines) + "\n", len(drawn)
