"""Markdown code fences in model replies: where each block opens, its info string and its body."""

from __future__ import annotations

import re
from dataclasses import dataclass

#: An opening or closing fence: up to 3 spaces, 3+ backticks or tildes, then the info string.
FENCE = re.compile(r"^[ \t]{0,3}(`{3,}|~{3,})[ \t]*([^\n`]*)$")


@dataclass(frozen=True, slots=True)
class FencedBlock:
    """One fenced block of a text split into lines."""

    open_at: int  # index of the opening fence line
    info: str  # what follows the opening fence ("python", "python calc.py", ...)
    body: list[str]
    closed: bool  # False when the text ends inside the block (a truncated reply)


def fenced_blocks(lines: list[str]) -> list[FencedBlock]:
    """Every fenced block, in order; a closing fence uses the same character and is at least as long."""
    blocks: list[FencedBlock] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, info, open_at = m.group(1), m.group(2).strip(), i
        body: list[str] = []
        closed = False
        i += 1
        while i < len(lines):
            close = FENCE.match(lines[i])
            if (
                close
                and close.group(1)[0] == fence[0]
                and len(close.group(1)) >= len(fence)
                and not close.group(2).strip()
            ):
                closed = True
                break
            body.append(lines[i])
            i += 1
        blocks.append(FencedBlock(open_at, info, body, closed))
        i += 1
    return blocks
