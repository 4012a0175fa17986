"""Reading the examples out of Markdown files: fenced blocks, what each runs, and what it says it prints.

A block's info string says what it is: `console` (commands after `$ `, each followed by the lines
it prints), `python` (a script; a `text` block right after it is what the script prints), `bash`
(commands shown without their output), `text`, `toml`, `mermaid` (not examples). An HTML comment
`<!-- not run: REASON -->` on the line before a block says why the suite does not run it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

_FENCE = re.compile(r"^```(\S*)\s*$")
_NOT_RUN = re.compile(r"^<!--\s*not run:\s*(.*?)\s*-->\s*$")
#: Seconds as the output prints them (`16.5s`, `· 35s`): they vary with the machine.
_SECONDS = re.compile(r"\b\d+(?:\.\d+)?s\b")


@dataclass
class Command:
    """One `$ ` command of a console block and the lines it prints (what the README shows)."""

    line: str
    output: list[str] = field(default_factory=list)


@dataclass
class Block:
    """One fenced block of a Markdown file."""

    path: Path
    line: int
    info: str
    text: str
    #: Why the suite does not run it (None: it runs).
    not_run: str | None = None
    #: For a python block: the text block after it, what the script prints.
    prints: str | None = None

    @property
    def where(self) -> str:
        """FILE:LINE of the block's opening fence."""
        return f"{self.path.name}:{self.line}"

    def commands(self) -> list[Command]:
        """A console block's commands with their output lines (a `\\` at a line's end continues it)."""
        out: list[Command] = []
        pending = ""
        for raw in self.text.splitlines():
            if pending:
                pending += " " + raw.strip()
            elif raw.startswith("$ "):
                pending = raw[2:]
            elif out:
                out[-1].output.append(raw)
                continue
            if pending.endswith("\\"):
                pending = pending[:-1].rstrip()
                continue
            if pending:
                out.append(Command(pending))
                pending = ""
        return out


def blocks(path: Path) -> list[Block]:
    """Every fenced block of a Markdown file, in order, a python block's printed text attached."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    previous_end = -1  # the line index of the last block's closing fence
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if m is None:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        reason = _NOT_RUN.match(lines[i - 1]) if i > 0 else None
        block = Block(path, i + 1, m.group(1), "\n".join(lines[i + 1:end]),
                      not_run=reason.group(1) if reason else None)
        # A text block with only blank lines between it and a python block is what the script prints.
        if (block.info == "text" and found and found[-1].info == "python"
                and all(not line.strip() for line in lines[previous_end + 1:i])):
            found[-1].prints = block.text
        found.append(block)
        previous_end = end
        i = end + 1
    return found


def normalized(text: str) -> str:
    """Output with what varies from run to run made equal: seconds, trailing spaces."""
    return "\n".join(_SECONDS.sub("Ns", line.rstrip()) for line in text.strip("\n").splitlines())


def matches(expected: list[str] | str, got: str) -> bool:
    """Whether the output is the one shown: line for line, a line `...` standing for any lines and `…`
    in a line for any text."""
    want = normalized("\n".join(expected) if isinstance(expected, list) else expected).splitlines()
    have = normalized(got).splitlines()
    return _match(want, have)


def _match(want: list[str], have: list[str]) -> bool:
    if not want:
        return not have
    if want[0] == "...":
        return any(_match(want[1:], have[k:]) for k in range(len(have) + 1))
    return bool(have) and _line_matches(want[0], have[0]) and _match(want[1:], have[1:])


def _line_matches(want: str, have: str) -> bool:
    """A line as shown, where `…` stands for any text (an id, a hash, a column of seconds)."""
    if "…" not in want:
        return want == have
    return re.fullmatch(".*".join(re.escape(part) for part in want.split("…")), have) is not None
