"""Find and apply the file edits a fix thought proposes.

Three forms are recognised, anywhere in the text, applied in the order they appear:

* a unified diff (`--- a/calc.py` / `+++ b/calc.py` / `@@ ... @@` hunks, fenced or not). Hunks
  are matched by their content, not their line numbers (models get those wrong): at the
  occurrence nearest the stated line, exactly, else ignoring trailing whitespace;
* a fenced block naming its file, which replaces the whole file: the path in the info string
  (```` ```python calc.py ````), on the line just before the fence (`File: calc.py`,
  `# file: calc.py`), or as a `# file: calc.py` first line inside the block;
* SEARCH/REPLACE blocks (the path on the line before, fences allowed around the block):

      calc.py
      <<<<<<< SEARCH
      return a - b
      =======
      return a + b
      >>>>>>> REPLACE

Every path must be relative and stay inside the root (no absolute paths, no `..`, no symlink
escapes); anything else raises `PatchError` and nothing is written.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .fences import FENCE as _FENCE, fenced_blocks


class PatchError(ValueError):
    """A patch that cannot be applied (bad path, missing context, nothing to apply)."""


@dataclass(frozen=True, slots=True)
class Hunk:
    """One `@@` hunk: the stated old start line (1-based, 0 if unknown) and its body lines."""

    old_start: int
    lines: tuple[str, ...]  # each starts with " ", "-" or "+"

    @property
    def old(self) -> list[str]:
        return [line[1:] for line in self.lines if line[0] in " -"]

    @property
    def new(self) -> list[str]:
        return [line[1:] for line in self.lines if line[0] in " +"]


@dataclass(frozen=True, slots=True)
class FileEdit:
    """One edit to one file: a diff (hunks), a whole-file replacement, or search/replace pairs."""

    path: str  # as written in the thought (checked when applied)
    kind: str  # "diff" | "replace" | "search_replace" | "delete"
    hunks: tuple[Hunk, ...] = ()
    content: str = ""
    search: str = ""
    replace: str = ""
    position: int = 0  # line in the thought where the edit starts, to keep the thought's order


_HUNK = re.compile(r"^@@\s*-(\d+)(?:,\d+)?\s+\+\d+(?:,\d+)?\s*@@")
# A file name with an extension that starts with a letter ("python3.11" is not a path).
_PATH_TOKEN = re.compile(r"^[\w.\-/]*[\w\-]\.[A-Za-z][A-Za-z0-9]{0,7}$|^[\w.\-]+/[\w.\-/]+$")
_FILE_LINE = re.compile(
    r"^\s*(?:[#/*>-]+\s*)?(?:\*\*|__)?(?:file(?:name)?|path)\s*:\s*(?:\*\*|__)?\s*`?(?P<path>[^`*\s]+)`?(?:\*\*|__)?\s*:?\s*$",
    re.IGNORECASE,
)
_SEARCH = "<<<<<<< SEARCH"
_DIVIDER = "======="
_REPLACE = ">>>>>>> REPLACE"


def parse_patch(text: str) -> list[FileEdit]:
    """Every file edit in `text`, in the order written; [] when the text proposes none."""
    lines = text.splitlines()
    edits = _parse_diffs(lines) + _parse_search_replace(lines) + _parse_whole_files(lines)
    return sorted(edits, key=lambda e: e.position)


def is_patch(text: str) -> bool:
    """True when the text proposes at least one file edit."""
    return bool(parse_patch(text))


def safe_path(root: Path, rel: str) -> Path:
    """`root/rel`, or PatchError when `rel` is absolute or leaves the root."""
    cleaned = rel.strip()
    p = Path(cleaned)
    if not cleaned or p.is_absolute() or cleaned.startswith("~") or re.match(r"^[A-Za-z]:[\\/]", cleaned):
        raise PatchError(f"rejected path {rel!r}: it must be relative to the repository")
    if ".." in p.parts:
        raise PatchError(f"rejected path {rel!r}: '..' would leave the repository")
    target = root / p
    if not target.resolve().is_relative_to(root.resolve()):
        raise PatchError(f"rejected path {rel!r}: it leaves the repository through a symlink")
    return target


def patched_files(root: Path, patch: str | Sequence[FileEdit]) -> dict[str, str | None]:
    """The new content of every file the patch touches (None: deleted), without writing anything."""
    edits = parse_patch(patch) if isinstance(patch, str) else list(patch)
    if not edits:
        raise PatchError(
            "no patch found (expected a unified diff, a fenced block naming its file, or SEARCH/REPLACE blocks)"
        )
    root = Path(root)
    state: dict[str, str | None] = {}
    for edit in edits:
        target = safe_path(root, edit.path)
        rel = target.relative_to(root).as_posix()
        if rel not in state:
            state[rel] = target.read_text(encoding="utf-8") if target.is_file() else None
        current = state[rel]
        if edit.kind == "replace":
            state[rel] = edit.content if edit.content.endswith("\n") else edit.content + "\n"
        elif edit.kind == "delete":
            if current is None:
                raise PatchError(f"cannot delete {rel}: no such file")
            state[rel] = None
        elif edit.kind == "diff":
            state[rel] = _apply_hunks(rel, current, edit.hunks)
        else:
            state[rel] = _apply_search_replace(rel, current, edit.search, edit.replace)
    return state


def apply_patch(workdir: Path | str, patch_text: str) -> list[str]:
    """Apply the patch in `workdir`; return the changed files (relative paths). All or nothing."""
    root = Path(workdir)
    new = patched_files(root, patch_text)
    for rel, content in new.items():
        target = root / rel
        if content is None:
            target.unlink(missing_ok=True)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content, encoding="utf-8")
    return sorted(new)


# ------------------------------------------------------------------ unified diffs


def _diff_path(header: str) -> str | None:
    path = header.split("\t")[0].strip()
    return None if path == "/dev/null" else path


def _strip_prefixes(old: str | None, new: str | None) -> tuple[str | None, str | None]:
    """Drop git's `a/` and `b/` prefixes (only when the diff uses them on both sides)."""
    if (old is None or old.startswith("a/")) and (new is None or new.startswith("b/")) and (old or new):
        return (old[2:] if old else None), (new[2:] if new else None)
    return old, new


def _parse_diffs(lines: list[str]) -> list[FileEdit]:
    edits: list[FileEdit] = []
    i = 0
    while i < len(lines):
        if not (lines[i].startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ ")):
            i += 1
            continue
        start = i
        old, new = _strip_prefixes(_diff_path(lines[i][4:]), _diff_path(lines[i + 1][4:]))
        i += 2
        hunks: list[Hunk] = []
        while i < len(lines) and lines[i].startswith("@@"):
            m = _HUNK.match(lines[i])
            old_start = int(m.group(1)) if m else 0
            i += 1
            body: list[str] = []
            blank_run = 0  # trailing blank lines may be the end of the diff, not context
            while i < len(lines):
                line = lines[i]
                if line.startswith("@@") or _FENCE.match(line):
                    break
                if line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
                    break
                if line == "":
                    body.append(" ")  # an empty context line whose leading space was stripped
                    blank_run += 1
                elif line[0] in " -+":
                    body.append(line)
                    blank_run = 0
                elif line.startswith("\\"):
                    pass  # "\ No newline at end of file"
                else:
                    break  # prose after the diff
                i += 1
            if blank_run:
                body = body[:-blank_run]
            if body:
                hunks.append(Hunk(old_start, tuple(body)))
        if new is None and old is not None:
            edits.append(FileEdit(path=old, kind="delete", position=start))
        elif new is not None and hunks:
            edits.append(FileEdit(path=new, kind="diff", hunks=tuple(hunks), position=start))
    return edits


def _split(text: str | None) -> tuple[list[str], str]:
    if not text:
        return [], "\n"
    newline = "\r\n" if "\r\n" in text else "\n"
    return text.splitlines(), newline


def _find(haystack: list[str], needle: list[str], near: int, start: int) -> int | None:
    """Where `needle` occurs in `haystack` at or after `start`, nearest to `near`; exact, then loose."""
    if not needle:
        return min(max(near, start), len(haystack))
    for norm in (lambda s: s, lambda s: s.rstrip()):
        want = [norm(s) for s in needle]
        hits = [
            k
            for k in range(start, len(haystack) - len(needle) + 1)
            if norm(haystack[k]) == want[0] and [norm(s) for s in haystack[k : k + len(needle)]] == want
        ]
        if hits:
            return min(hits, key=lambda k: abs(k - near))
    return None


def _apply_hunks(rel: str, current: str | None, hunks: Sequence[Hunk]) -> str:
    lines, newline = _split(current)
    start = 0
    offset = 0
    for number, hunk in enumerate(hunks, 1):
        old, new = hunk.old, hunk.new
        if current is None and old:
            raise PatchError(f"hunk {number} does not apply: {rel} does not exist")
        near = max(0, hunk.old_start - 1 + offset)
        at = _find(lines, old, near, start)
        if at is None:
            at = _find(lines, old, near, 0)  # hunks out of order
        if at is None:
            first = next((s for s in old if s.strip()), old[0] if old else "")
            raise PatchError(
                f"hunk {number} does not apply to {rel}: its context was not found (first line: {first.strip()[:80]!r})"
            )
        lines[at : at + len(old)] = new
        offset += len(new) - len(old)
        start = at + len(new)
    return newline.join(lines) + newline if lines else ""


# ------------------------------------------------------------------ search/replace


def _looks_like_path(token: str) -> bool:
    token = token.strip().strip("`*:'\"")
    return bool(token) and " " not in token and bool(_PATH_TOKEN.match(token))


def _parse_search_replace(lines: list[str]) -> list[FileEdit]:
    edits: list[FileEdit] = []
    path: str | None = None
    i = 0
    while i < len(lines):
        if lines[i].strip() != _SEARCH:
            i += 1
            continue
        start = i
        path = _path_before(lines, i) or path  # later blocks may reuse the file named earlier
        search: list[str] = []
        replace: list[str] = []
        i += 1
        while i < len(lines) and lines[i].strip() != _DIVIDER:
            search.append(lines[i])
            i += 1
        i += 1
        while i < len(lines) and lines[i].strip() != _REPLACE:
            replace.append(lines[i])
            i += 1
        if i >= len(lines):
            break  # an unterminated block is not an edit
        i += 1
        if path is not None:  # a block with no file named before it (or earlier) is ignored
            edits.append(
                FileEdit(
                    path=path,
                    kind="search_replace",
                    search="\n".join(search),
                    replace="\n".join(replace),
                    position=start,
                )
            )
    return edits


def _clean(token: str) -> str:
    return token.strip().strip("`*:'\"")


def _path_before(lines: list[str], i: int) -> str | None:
    """The file named just before line `i`, skipping blank lines and an opening fence."""
    k = i - 1
    while k >= 0:
        line = lines[k].strip()
        fence = _FENCE.match(lines[k])
        if not line:
            k -= 1
        elif fence:
            for token in fence.group(2).split():
                if _looks_like_path(token):
                    return _clean(token)
            k -= 1
        else:
            m = _FILE_LINE.match(line)
            if m:
                return m.group("path")
            return _clean(line) if _looks_like_path(line) else None
    return None


def _apply_search_replace(rel: str, current: str | None, search: str, replace: str) -> str:
    if current is None:
        if search.strip():
            raise PatchError(f"SEARCH block does not apply: {rel} does not exist")
        return replace + "\n"
    if not search.strip():
        raise PatchError(f"empty SEARCH block for existing file {rel}")
    if search in current:
        return current.replace(search, replace, 1)
    lines, newline = _split(current)
    old, new = search.splitlines(), replace.splitlines()
    at = _find(lines, old, 0, 0)
    if at is None:
        raise PatchError(f"SEARCH block not found in {rel} (first line: {old[0].strip()[:80]!r})")
    lines[at : at + len(old)] = new
    return newline.join(lines) + newline


# ------------------------------------------------------------------ whole files


def _parse_whole_files(lines: list[str]) -> list[FileEdit]:
    edits: list[FileEdit] = []
    for block in fenced_blocks(lines):
        body = block.body
        if not block.closed:
            continue  # a truncated block would replace a file with half of it
        if any(line.strip() == _SEARCH for line in body):
            continue
        if any(
            b.startswith("--- ") and k + 1 < len(body) and body[k + 1].startswith("+++ ") for k, b in enumerate(body)
        ):
            continue  # a diff, handled by _parse_diffs
        path = _path_for_block(lines, block.open_at, block.info, body)
        if path is not None:
            edits.append(FileEdit(path=path, kind="replace", content="\n".join(body), position=block.open_at))
    return edits


def _path_for_block(lines: list[str], open_at: int, info: str, body: list[str]) -> str | None:
    tokens = info.split()
    for token in tokens:
        token = token.removeprefix("title=").removeprefix("file=").strip("\"'")
        if _looks_like_path(token) and token.lower() not in {"python", "py", "diff"}:
            return token.strip("`*:'\"")
    back = open_at - 1
    if back >= 0 and not lines[back].strip() and back - 1 >= 0:
        back -= 1  # one blank line between the label and the fence is fine
    if back >= 0:
        m = _FILE_LINE.match(lines[back].strip())
        if m:
            return m.group("path")
    if body:
        m = re.match(r"^\s*#\s*file(?:name)?\s*:\s*(\S+)\s*$", body[0], re.IGNORECASE)
        if m:
            return m.group(1)
    return None
