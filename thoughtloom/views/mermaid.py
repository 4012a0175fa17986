"""The reasoning graph as a Mermaid flowchart: scores on nodes, best path highlighted (seed 001 §6.3)."""

from __future__ import annotations

from collections.abc import Iterable

from ..graph import EdgeKind, NodeStatus, ThoughtGraph

MAX_LABEL = 70

_ARROWS = {
    EdgeKind.AGGREGATION: "==>",
    EdgeKind.REFINEMENT: "-.->",
    EdgeKind.CONTRADICTION: "--x",
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
}


def _escape(text: str) -> str:
    text = " ".join(text.split())
    if len(text) > MAX_LABEL:
        text = text[: MAX_LABEL - 1] + "…"
    return (
        text.replace("&", "&amp;").replace('"', "#quot;").replace("<", "&lt;").replace(">", "&gt;")
    )


def _grounding_badge(grounding: dict) -> str:
    """✓ / ✗ / ? with the grounder's name and counts, e.g. "✗ code 2/5 passed"."""
    mark = {True: "✓", False: "✗", None: "?"}[grounding.get("verified")]
    passed, failed = grounding.get("passed", 0), grounding.get("failed", 0)
    counts = f" {passed}/{passed + failed} passed" if passed or failed else ""
    return f"{mark} {_escape(str(grounding.get('grounder', '')))}{counts}"


def to_mermaid(graph: ThoughtGraph, best_path: Iterable[int] = (), goals: Iterable[int] = ()) -> str:
    """A Mermaid `flowchart TD` of the graph; best-path nodes and edges are highlighted."""
    best = list(best_path)
    best_set = set(best)
    goal_set = set(goals)
    best_edges = set(zip(best, best[1:]))
    lines = ["flowchart TD"]
    members: dict[str, list[str]] = {name: [] for name in _CLASSES}
    for node in graph:
        label = f"{node.kind.value}: {_escape(node.content)}"
        if node.score is not None:
            label += f"<br/>score {node.score:.2f}"
        grounding = node.meta.extra.get("grounding")
        if grounding is not None:
            label += f"<br/>{_grounding_badge(grounding)}"
            if grounding.get("verified") is not None:
                (members["verified"] if grounding["verified"] else members["refuted"]).append(f"n{node.id}")
        if node.status in (NodeStatus.PRUNED, NodeStatus.FAILED, NodeStatus.CANCELLED):
            reason = node.meta.extra.get("rejected")
            label += f"<br/><i>{node.status.value}" + (f": {_escape(reason)}" if reason else "") + "</i>"
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
    for i, edge in enumerate(graph.edges):
        arrow = _ARROWS.get(edge.kind, "-->")
        label = f"|{edge.kind.value}|" if edge.kind in _ARROWS else ""
        lines.append(f"    n{edge.src} {arrow}{label} n{edge.dst}")
        if (edge.src, edge.dst) in best_edges:
            highlighted.append(i)
    for name, style in _CLASSES.items():
        lines.append(f"    classDef {name} {style}")
        if members[name]:
            lines.append(f"    class {','.join(members[name])} {name}")
    if highlighted:
        lines.append(f"    linkStyle {','.join(map(str, highlighted))} stroke:#1e7e34,stroke-width:3px")
    return "\n".join(lines) + "\n"
