"""How the controller's report reads as text: the lines `loom solve` prints after the result."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .types import amount_text, more_text

#: A compromise's `accepted` field as the line says it (None: offered, no answer came).
_VERDICTS: dict[bool | None, str] = {True: "accepted", False: "rejected", None: "offered"}


def control_lines(record: Mapping[str, Any]) -> list[str]:
    """One line per budget request, the compromise and each action of a report (Controller.report's dict)."""
    lines: list[str] = []
    for req in record["budget_requests"]:
        limit = req.get("limit", "tokens")
        granted = f"{req['granted']:,}" if limit == "tokens" else amount_text(limit, req["granted"])
        answer = f"approved {granted}" if req["approved"] else "denied"
        lines.append(f"budget request: {more_text(limit, req['amount'])} -> {answer}. {req['justification']}")
    compromise = record["compromise"]
    if compromise:
        lines.append(f"compromise {_VERDICTS[compromise['accepted']]}: {compromise['explanation']}")
    lines.extend(f"controller: {act['mode']}: {act['action']}" for act in record["actions"])
    return lines
