"""Insights printed as they happen (loom research), and the research result as text."""

from __future__ import annotations

import sys
from typing import Any, TextIO

from ..search.events import Event, InsightFound
from ..words import counted
from .terminal import terminal_text

#: Characters of an insight shown on its line.
INSIGHT_CHARS = 160


class InsightPrinter:
    """An event sink that prints each insight as one escaped line, clearing a progress line on a shared terminal."""

    def __init__(self, stream: TextIO | None = None, progress: TextIO | None = None) -> None:
        self.stream = stream or sys.stdout
        self.progress = progress if progress is not None else sys.stderr

    def __call__(self, event: Event) -> None:
        """Print an InsightFound event; ignore the others."""
        if not isinstance(event, InsightFound):
            return
        if self.progress.isatty() and self.stream.isatty():
            self.progress.write("\r\033[K")
            self.progress.flush()
        self.stream.write(terminal_text(insight_line(event.kind, event.content, event.confidence, event.node_id,
                                                     event.source)) + "\n")
        self.stream.flush()


def insight_line(kind: str, content: str, confidence: float, node_id: int, source: str | None) -> str:
    """`[evidence] #4 0.80 what it says · docs:file.md:3` (model text; the caller escapes it)."""
    text = " ".join(content.split())
    if len(text) > INSIGHT_CHARS:
        text = text[: INSIGHT_CHARS - 3] + "..."
    cited = f" · {source}" if source else ""
    return f"[{kind}] #{node_id} {confidence:.2f} {text}{cited}"


def research_lines(research: Any) -> list[str]:
    """The research part of a result as text: the synthesis with its sources, its verified citations and those that
    did not hold, then the metrics."""
    lines = []
    answer = research.answer
    if answer is not None:
        lines.append(
            f"synthesis ({answer.method}, confidence {answer.confidence:.2f}): {' '.join(answer.content.split())}"
        )
        lines.append("  sources: " + (", ".join(f"hypothesis #{s}" for s in answer.sources) or "none"))
        none = "none verified" if answer.checks else "none (no document or tool stands behind it)"
        lines.append("  citations: " + (", ".join(answer.citations) or none)
                     + (" (each checked against the passages read)" if answer.citations and answer.checks else ""))
        lines.extend(f"  not verified: {c.ref} ({c.status.value}: {c.reason})" for c in answer.flagged)
    s = research.statistics
    pruned = ", ".join(f"{k} {n}" for k, n in sorted(s.pruned_by.items()))
    lines.append(
        f"research: {counted(s.hypotheses_generated, 'hypothesis')} ({s.hypotheses_pruned} pruned"
        + (f": {pruned}" if pruned else "")
        + f", {s.hypotheses_merged} merged) · explored {s.explorations} · depth {s.max_depth_reached} · branch factor "
        f"{s.branch_factor:.1f} · insights {s.insights_discovered} ({s.exploration_efficiency:.1f} per exploration) · "
        f"final confidence {s.final_confidence:.2f} · stopped by {research.stopped_by} · flow {research.state}"
    )
    return lines
