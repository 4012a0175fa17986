"""The built-in tools: an exact calculator, sandboxed Python, document search and file reading.

Each is a `Tool` (see base.py): a spec with the JSON Schema of its arguments, and an async
`call` that returns text or raises `ToolError` with one line that says what went wrong. The
Toolbox has already checked the arguments against the schema; the tools check what a schema
cannot say (a path outside the allowed folders, an expression that is not arithmetic).
"""

from __future__ import annotations

import asyncio
import os
import re
import stat
import threading
from collections.abc import Callable, Sequence
from decimal import Decimal, Inexact, localcontext
from fractions import Fraction
from pathlib import Path
from typing import Any

from thoughtloom.grounding.arith import ExpressionError, NumberTooLarge, evaluate, fmt
from thoughtloom.grounding.files import MAX_FILE_BYTES, FileRefused, open_regular, resolve_inside, shown
from thoughtloom.grounding.knowledge import KnowledgeBase
from thoughtloom.grounding.sandbox import Sandbox, SandboxLimits, SandboxResult

from .base import ToolConfigError, ToolError, ToolSpec

#: Characters of an expression the calculator reads.
MAX_EXPRESSION_CHARS = 1000
#: Significant digits of the calculator's decimal approximation of a fraction.
DECIMAL_DIGITS = 12
#: Characters of Python code the python tool runs.
MAX_CODE_CHARS = 100_000
#: Characters of stderr shown after a successful run's stdout (warnings, logging).
STDERR_TAIL_CHARS = 1000
#: Passages the docs tool returns when not told how many, and at most.
DEFAULT_PASSAGES = 5
MAX_PASSAGES = 10
#: Lines the files tool returns when not told how many, and at most.
DEFAULT_LINES = 200
MAX_LINES = 2000
#: Characters kept of one line of a file (a minified file is one huge line).
MAX_LINE_CHARS = 2000
#: Entries the files tool lists of one folder.
MAX_ENTRIES = 500
#: Bytes looked at to tell a binary file (a NUL byte) from a text file.
SNIFF_BYTES = 8192


def _one_line(text: str, limit: int = 300) -> str:
    """Text squeezed onto one line, cut at `limit` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


# ------------------------------------------------------------------------------ calc


def decimal_approximation(value: Fraction, digits: int = DECIMAL_DIGITS) -> tuple[str, bool]:
    """`value` as a decimal of at most `digits` significant digits, and whether that is exact."""
    with localcontext() as ctx:
        ctx.prec = digits
        ctx.clear_flags()
        quotient = Decimal(value.numerator) / Decimal(value.denominator)
        exact = not ctx.flags[Inexact]
    return str(quotient.normalize() if exact else quotient), exact


class CalcTool:
    """Exact arithmetic over fractions: + - * / ** and parentheses, decimals read exactly."""

    def __init__(self, name: str = "calc") -> None:
        self._spec = ToolSpec(
            name=name,
            description=(
                "Exact arithmetic with fractions (no rounding): numbers (integers, decimals such as 7.5), "
                "+ - * / ** and parentheses, e.g. 2 * 150 + 3 * 90. Answers like '10/4 = 5/2 (2.5)'."
            ),
            parameters={
                "type": "object",
                "properties": {
                    "expression": {"type": "string", "minLength": 1, "maxLength": MAX_EXPRESSION_CHARS,
                                   "description": "The arithmetic to compute, e.g. 12*7.5 or (1/3 + 1/6)^2"},
                },
                "required": ["expression"],
                "additionalProperties": False,
            },
        )

    @property
    def spec(self) -> ToolSpec:
        """The calculator's name, description and argument schema."""
        return self._spec

    async def call(self, args: dict[str, Any]) -> str:
        """The expression and its exact value (with a decimal approximation for a fraction).

        Written the way people (and small models) write sums, "2 x 150 EUR = 300 EUR" is read as
        2 * 150, and the stated 300 is checked against the exact value.
        """
        expression, stated = plain_arithmetic(str(args["expression"]))
        stopped = threading.Event()
        try:
            # In a worker thread, so that the event loop (the tool timeout, the run's deadline, other
            # calls) keeps running; every step is bounded (grounding.arith.MAX_BITS), and a cancelled
            # call stops the worker at its next step.
            return await asyncio.to_thread(self._answer, expression, stated, stopped.is_set)
        finally:
            stopped.set()

    def _answer(self, expression: str, stated: str | None, stop: Callable[[], bool]) -> str:
        try:
            value, _ = evaluate(expression, powers=True, stop=stop)
        except NumberTooLarge as exc:
            raise ToolError(f"{exc}; split it into smaller steps") from None
        except ExpressionError as exc:
            raise ToolError(f"{exc}; write numbers, + - * / ** and parentheses only") from None
        except (ValueError, ZeroDivisionError):
            raise ToolError(
                f"not an arithmetic expression: {expression!r}; write numbers, + - * / ** and parentheses only"
            ) from None
        except RecursionError:
            raise ToolError("the expression is nested too deeply; split it into steps") from None
        answer = f"{expression} = {fmt(value)}"
        if value.denominator != 1:
            approx, exact = decimal_approximation(value)
            answer += f" ({approx})" if exact else f" (≈{approx})"
        if stated is not None:
            try:
                said, _ = evaluate(stated, stop=stop)
            except (ExpressionError, ValueError, ZeroDivisionError, RecursionError):
                return answer
            answer += f"; the stated {stated} is " + ("right" if said == value else "WRONG")
        return answer


_TIMES = re.compile(r"(?<=[\d)\s])[x×](?=[\s\d(])")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}\b)")
#: Unit words and currency signs, dropped; anything else that is not arithmetic stays, to be refused.
_UNITS = re.compile(r"[A-Za-z€$£]+")
#: A name followed by "(": a function call, never dropped (sqrt(16) is not 16).
_CALL = re.compile(r"[A-Za-z_]\w*\s*\(")


def plain_arithmetic(text: str) -> tuple[str, str | None]:
    """An expression as written ("2 x 150 EUR = 300") as plain arithmetic, and the result it states, if any.

    Text with a function call or anything but numbers, operators and unit words is left as it is,
    so the evaluator refuses it rather than computing something else.
    """
    if _CALL.search(text) or re.search(r"[^\w\s+\-*/^().,=€$£×÷]", text):
        return " ".join(text.split()), None
    left, _, right = text.partition("=")

    def clean(part: str) -> str:
        part = _THOUSANDS.sub("", _TIMES.sub("*", part.replace("÷", "/")))
        return " ".join(_UNITS.sub(" ", part).split())

    stated = clean(right) if right.strip() else None
    return clean(left) or " ".join(left.split()), stated or None


# ---------------------------------------------------------------------------- python


#: What the python tool adds to a program's stdout: a note that the sandbox cut it, stderr's tail, or,
#: for a program that printed nothing, a hint (program_stdout takes them off again).
CUT_NOTE = "\n[output cut by the sandbox]"
STDERR_NOTE = "\n[stderr]\n"
NOTHING_PRINTED = "(the program printed nothing; print() the values you need)"


class PythonTool:
    """Runs a Python snippet in the sandbox (no network) and answers with what it printed."""

    def __init__(self, sandbox: Sandbox | None = None, *, name: str = "python") -> None:
        # The sandbox's own limits (time, memory, processes, output) bound each run; network off.
        self.sandbox = sandbox if sandbox is not None else Sandbox(SandboxLimits(network=False))
        self._spec = ToolSpec(
            name=name,
            description=(
                "Run a Python 3 program in a sandbox (no network, no access to your files, limited time "
                "and memory) and get what it printed. Print the results you need."
            ),
            parameters={
                "type": "object",
                "properties": {
                    "code": {"type": "string", "minLength": 1, "maxLength": MAX_CODE_CHARS,
                             "description": "A complete Python program; use print() for the output"},
                },
                "required": ["code"],
                "additionalProperties": False,
            },
        )

    @property
    def spec(self) -> ToolSpec:
        """The python tool's name, description and argument schema."""
        return self._spec

    async def call(self, args: dict[str, Any]) -> str:
        """The program's stdout (and stderr's tail) when it exits 0; ToolError with its last error line otherwise."""
        result = await self.sandbox.run_python(str(args["code"]))
        # The verdict is the sandbox's (exit status, stop reason), never anything the program printed.
        if not result.ok:
            raise ToolError(python_failure(result))
        out = result.stdout
        if result.truncated:
            out += CUT_NOTE
        err = result.stderr.strip()
        if err:
            tail = err[-STDERR_TAIL_CHARS:]
            out += f"{STDERR_NOTE}{tail}"
        return out if out.strip() else NOTHING_PRINTED


def program_stdout(output: str) -> str:
    """What the program itself printed, from the python tool's answer (its notes on cut output,
    stderr and an empty run left out)."""
    if output == NOTHING_PRINTED:
        return ""
    return output.split(STDERR_NOTE, 1)[0].removesuffix(CUT_NOTE)


def python_failure(result: SandboxResult) -> str:
    """One line saying how a sandboxed run failed: the exit status or stop reason, and its last error line."""
    lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
    last = _one_line(lines[-1]) if lines else ""
    if result.stopped_reason is not None:
        why = result.stopped_reason.replace("_", " ")
        detail = _one_line(result.stop_detail) if result.stop_detail else ""
        said = last if last and last not in detail else ""
        return "; ".join(part for part in (f"stopped: {why}", detail, said) if part)
    if result.signal is not None:
        return f"killed by signal {result.signal}" + (f": {last}" if last else "")
    return f"exit status {result.exit_code}" + (f": {last}" if last else " (nothing on stderr)")


# ------------------------------------------------------------------------------ docs


class DocsTool:
    """Full-text search over a folder of documents (an opened KnowledgeBase), with citations."""

    def __init__(self, kb: KnowledgeBase, *, name: str = "docs", owns: bool = False) -> None:
        self.kb = kb
        self._owns = owns  # closed by aclose() when the registry opened it for this tool
        self._spec = ToolSpec(
            name=name,
            description=(
                f"Search the documents in {kb.folder.name or kb.folder} by words (full-text, stemmed). "
                "Answers with the best passages, each with its file and line range."
            ),
            parameters={
                "type": "object",
                "properties": {
                    "query": {"type": "string", "minLength": 1, "maxLength": 1000,
                              "description": "Words to look for"},
                    "limit": {"type": "integer", "minimum": 1, "maximum": MAX_PASSAGES,
                              "description": f"How many passages (default {DEFAULT_PASSAGES})"},
                },
                "required": ["query"],
                "additionalProperties": False,
            },
        )

    @property
    def spec(self) -> ToolSpec:
        """The docs tool's name, description and argument schema."""
        return self._spec

    async def call(self, args: dict[str, Any]) -> str:
        """Numbered passages, best first, each headed by `file:lines`, its text after its document's title."""
        query = str(args["query"])
        limit = int(args.get("limit", DEFAULT_PASSAGES))
        # SQLite work off the event loop: the index is shared with the research grounder's threads.
        found = await asyncio.to_thread(self.kb.search, query, limit)
        if not found:
            return f"no passage matches {query!r}; try other or fewer words"
        # The title names what a later window of a document is about ("the director" of which film).
        return "\n\n".join(f"{i}. {c.ref()}\n{c.shown_text()}" for i, c in enumerate(found, 1))

    async def aclose(self) -> None:
        """Close the index when this tool opened it (a Toolbox closer)."""
        if self._owns:
            self.kb.close()


# ----------------------------------------------------------------------------- files

#: Bytes of a line read at most (MAX_LINE_CHARS characters of up to 4 bytes each).
MAX_LINE_BYTES = 4 * MAX_LINE_CHARS


def _skip_line(f: Any) -> bool:
    """Read past the rest of the current line, a block at a time, within MAX_FILE_BYTES; True if there was more."""
    skipped = False
    while f.tell() < MAX_FILE_BYTES and (block := f.readline(64 * 1024)):
        skipped = True
        if block.endswith(b"\n"):
            break
    return skipped


class FilesTool:
    """Reads text files and lists folders, only inside the allowed folders (symlinks resolved)."""

    def __init__(self, roots: Sequence[str | Path], *, name: str = "files") -> None:
        if not roots:
            raise ToolConfigError("the files tool needs at least one folder it may read")
        resolved: list[Path] = []
        for root in roots:
            path = Path(root).expanduser()
            if not path.is_dir():
                raise ToolConfigError(f"{path} is not a folder; allow reading a folder that exists")
            resolved.append(path.resolve())
        self.roots = tuple(resolved)
        shown = ", ".join(str(r) for r in self.roots)
        self._spec = ToolSpec(
            name=name,
            description=(
                f"Read a text file, or list a folder, inside {shown}. Paths are relative to {self.roots[0]}. "
                f"Long files come a part at a time: start_line and max_lines (at most {MAX_LINES})."
            ),
            parameters={
                "type": "object",
                "properties": {
                    "path": {"type": "string", "minLength": 1, "maxLength": 4096,
                             "description": "A file or folder, relative to the first allowed folder or absolute"},
                    "start_line": {"type": "integer", "minimum": 1, "description": "First line to read (default 1)"},
                    "max_lines": {"type": "integer", "minimum": 1, "maximum": MAX_LINES,
                                  "description": f"How many lines (default {DEFAULT_LINES})"},
                },
                "required": ["path"],
                "additionalProperties": False,
            },
        )

    @property
    def spec(self) -> ToolSpec:
        """The files tool's name, description and argument schema."""
        return self._spec

    async def call(self, args: dict[str, Any]) -> str:
        """The file's lines (numbered) or the folder's entries."""
        return await asyncio.to_thread(
            self._read, str(args["path"]), int(args.get("start_line", 1)), int(args.get("max_lines", DEFAULT_LINES))
        )

    def resolve(self, path: str) -> Path:
        """The real path `path` names (symlinks and .. resolved), or ToolError when it is outside the roots."""
        try:
            return resolve_inside(path, self.roots)
        except FileRefused as exc:
            raise ToolError(str(exc)) from None

    def _shown(self, target: Path) -> str:
        """A path as the model should write it back: relative to the first root when inside it (as valid text)."""
        root = self.roots[0]
        if target == root:
            return "."
        return shown(target.relative_to(root).as_posix() if target.is_relative_to(root) else target)

    def _read(self, path: str, start_line: int, max_lines: int) -> str:
        # grounding.files: only a folder or a regular file inside the roots is opened, never blocking.
        try:
            fd, st = open_regular(path, inside=self.roots, folders=True)
        except FileRefused as exc:
            raise ToolError(str(exc)) from None
        try:
            target = self.resolve(path)
            if stat.S_ISDIR(st.st_mode):
                return self._list(target, fd)
            with os.fdopen(fd, "rb", closefd=False) as f:
                return self._lines(f, target, start_line, max_lines)
        finally:
            os.close(fd)

    def _list(self, target: Path, fd: int) -> str:
        try:
            # The open folder itself (scandir duplicates the descriptor): one swapped since it was opened is not listed.
            with os.scandir(fd) as listing:
                entries = sorted(listing, key=lambda e: e.name)
        except OSError as exc:
            raise ToolError(f"cannot list {self._shown(target)}: {exc.strerror or exc}") from None
        names = []
        for entry in entries[:MAX_ENTRIES]:
            name = shown(entry.name)  # a name that is not UTF-8 is shown escaped, never passed on raw
            if entry.is_symlink():
                names.append(name + "@")  # followed only if it resolves inside the roots
            elif entry.is_dir():
                names.append(name + "/")
            else:
                names.append(name)
        head = f"{self._shown(target)}/ ({len(entries)} entries)"
        more = f"\n[{len(entries) - MAX_ENTRIES} more entries not shown]" if len(entries) > MAX_ENTRIES else ""
        return head + ("\n" + "\n".join(names) if names else "\n(empty)") + more

    def _lines(self, f: Any, target: Path, start_line: int, max_lines: int) -> str:
        """Lines start_line.. of an open file, numbered; at most MAX_FILE_BYTES of it are looked at."""
        shown = self._shown(target)
        if b"\0" in f.read(SNIFF_BYTES):
            raise ToolError(f"{shown} is a binary file; only text files can be read")
        f.seek(0)
        out: list[str] = []
        number = 0
        more = False
        while f.tell() < MAX_FILE_BYTES and (raw := f.readline(MAX_LINE_BYTES)):
            # A line longer than MAX_LINE_BYTES is skipped a block at a time, never held whole.
            cut = not raw.endswith(b"\n") and _skip_line(f)
            number += 1
            if number < start_line:
                continue
            if len(out) == max_lines:
                more = True
                break
            line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
            if cut or len(line) > MAX_LINE_CHARS:
                line = line[:MAX_LINE_CHARS] + " [line cut]"
            out.append(f"{number}\t{line}")
        unread = not more and f.tell() >= MAX_FILE_BYTES and bool(f.read(1))
        if not out:
            if number == 0:
                return f"{shown} is empty"
            if unread:
                raise ToolError(
                    f"{shown} is larger than {MAX_FILE_BYTES >> 20} MB; lines past line {number} are not read")
            raise ToolError(f"{shown} has {number} lines; start_line {start_line} is past the end")
        last = start_line + len(out) - 1
        tail = f"\n[more lines follow: start_line={last + 1}]" if more else ""
        if unread:
            tail = f"\n[the file is larger than {MAX_FILE_BYTES >> 20} MB; the rest is not read]"
        return f"{shown} lines {start_line}-{last}:\n" + "\n".join(out) + tail
