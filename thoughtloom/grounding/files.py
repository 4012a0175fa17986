"""Reading the files and folders a user names: only regular files, only inside their folder, never too much.

Every file thoughtloom reads because a user named it (a tests file, an MCP config, benchmark data,
a document under ``--knowledge``, a file the agent's files tool opens under ``--allow-read``) is read
here, by one set of rules:

- Only a regular file is opened. A pipe (FIFO), a device (``/dev/zero``), a socket is refused from
  its `stat` before any open, and the open itself is non-blocking (O_NONBLOCK), so a file swapped
  for a pipe between the two cannot hang the process either; `fstat` on the open descriptor checks
  again.
- Inside a folder (`inside`), a path is resolved (symlinks and ``..``) and refused when it leaves
  every allowed folder; the resolved path is opened with O_NOFOLLOW and, where /proc is mounted,
  the descriptor's real path is checked again, so a folder swapped for a symlink after resolving
  is caught.
- At most `max_bytes` are read (MAX_FILE_BYTES by default): a larger file is refused, never read
  whole, so a huge file cannot take the memory.
- A file name is untrusted text: `shown` writes bytes that are not UTF-8 as ``\\xNN`` escapes, so a
  name can always be printed, stored and sent to a model; `walk_files` skips (and reports) such
  names rather than passing them on.

Every refusal is a `FileRefused` whose message is one line naming the file and why.
"""

from __future__ import annotations

import gzip
import os
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..llm.text import encodes

#: The most read of one file a user names (tests, configs, benchmark data): more is a wrong path.
MAX_FILE_BYTES = 32 * 1024 * 1024


class FileRefused(ValueError):
    """A file was not read: missing, not a regular file, outside its folder or too large; one line says which.
    `reason` says why without naming the file (for a list of skipped files)."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


def shown(path: str | bytes | os.PathLike[str] | os.PathLike[bytes]) -> str:
    """A path as text that always encodes to UTF-8: bytes that are not UTF-8 become \\xNN escapes."""
    return os.fsencode(path).decode("utf-8", errors="backslashreplace")


def size_text(n: int) -> str:
    """A byte count as a user reads it: whole MB when it is a multiple of one, else bytes."""
    return f"{n >> 20} MB" if n >= 1 << 20 and n % (1 << 20) == 0 else f"{n} bytes"


def _label(path: str | os.PathLike[str], what: str) -> str:
    return f"{what} {shown(path)}" if what else shown(path)


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a pipe (FIFO)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISDIR(mode):
        return "a folder"
    return "not a regular file"


def _is_inside(target: Path, roots: Sequence[Path]) -> bool:
    return any(target == root or target.is_relative_to(root) for root in roots)


def resolve_inside(path: str | os.PathLike[str], roots: Sequence[Path], what: str = "") -> Path:
    """The real path `path` names (symlinks and .. resolved, relative to the first root), or FileRefused when
    it leaves every root. `roots` must be resolved folders."""
    name = _label(path, what)
    if "\0" in os.fspath(path):
        raise FileRefused(f"{name}: the path contains a NUL character", "the path contains a NUL character")
    given = Path(path).expanduser()
    try:
        target = (given if given.is_absolute() else roots[0] / given).resolve()
    except (OSError, RuntimeError) as exc:  # RuntimeError: a symlink loop (Python 3.11)
        raise FileRefused(f"cannot resolve {name}: {exc}", f"cannot be resolved ({exc})") from None
    if not _is_inside(target, roots):
        allowed = ", ".join(shown(r) for r in roots)
        raise FileRefused(f"refused: {name} resolves to {shown(target)}, outside the allowed folders ({allowed})",
                          f"resolves to {shown(target)}, outside the folder")
    return target


def check_regular(path: str | os.PathLike[str], *, what: str = "", inside: Sequence[Path] = (),
                  folders: bool = False) -> tuple[Path, os.stat_result]:
    """The path to open (resolved inside `inside` when given) and its stat, when it is a regular file (or a
    folder, when `folders`); FileRefused otherwise. Nothing is opened."""
    target = resolve_inside(path, inside, what) if inside else Path(path).expanduser()
    try:
        st = os.stat(target)
    except FileNotFoundError:
        raise FileRefused(f"no such file or folder: {_label(path, what)}", "no such file") from None
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        raise _unreadable(path, what, exc) from None
    _check_kind(st, path, what, folders)
    return target, st


def _unreadable(path: str | os.PathLike[str], what: str, exc: BaseException) -> FileRefused:
    why = getattr(exc, "strerror", None) or str(exc)
    return FileRefused(f"cannot read {_label(path, what)}: {why}", f"cannot be read ({why})")


def _check_kind(st: os.stat_result, path: str | os.PathLike[str], what: str, folders: bool) -> None:
    if not (stat.S_ISREG(st.st_mode) or (folders and stat.S_ISDIR(st.st_mode))):
        kind = f"{_kind(st.st_mode)}, not a regular file"
        raise FileRefused(f"{_label(path, what)} is {kind}; name a regular file", kind)


def open_regular(path: str | os.PathLike[str], *, what: str = "", inside: Sequence[Path] = (),
                 folders: bool = False) -> tuple[int, os.stat_result]:
    """A descriptor on the regular file (or folder, when `folders`) `path` names and its fstat, opened
    without blocking; see the module docstring. The caller closes it."""
    target, _ = check_regular(path, what=what, inside=inside, folders=folders)
    # O_NONBLOCK: a file swapped for a FIFO since the stat must not block the open.
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    if inside:
        flags |= os.O_NOFOLLOW  # the last component cannot have become a symlink since it was resolved
    try:
        fd = os.open(target, flags)
    except OSError as exc:
        raise _unreadable(path, what, exc) from None
    try:
        if inside:
            _check_opened(fd, inside, _label(path, what))
        st = os.fstat(fd)
        _check_kind(st, path, what, folders)
        if stat.S_ISREG(st.st_mode):
            os.set_blocking(fd, True)  # a regular file: reads are ordinary from here on
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def _check_opened(fd: int, roots: Sequence[Path], name: str) -> None:
    """Where the open file really is (Linux: /proc/self/fd): a folder swapped for a symlink after resolving is
    caught."""
    try:
        real = Path(os.readlink(f"/proc/self/fd/{fd}"))
    except OSError:
        return  # no /proc here: resolving and O_NOFOLLOW are the check
    if not _is_inside(real, roots):
        raise FileRefused(f"refused: {name} is outside the allowed folders (it changed while being opened)",
                          "outside the folder (it changed while being opened)")


def read_regular(path: str | os.PathLike[str], *, what: str = "", max_bytes: int = MAX_FILE_BYTES,
                 inside: Sequence[Path] = (), gzipped: bool = False, head: bool = False) -> bytes:
    """The bytes of the regular file `path` (decompressed when `gzipped`), at most `max_bytes`; FileRefused
    (one line) when it is not a regular file, is outside `inside`, cannot be read or is larger (unless
    `head`: then its first `max_bytes` are the answer)."""
    fd, st = open_regular(path, what=what, inside=inside)
    too_large = FileRefused(f"{_label(path, what)} is larger than {size_text(max_bytes)}; is it the right file?",
                            f"larger than {size_text(max_bytes)}")
    with os.fdopen(fd, "rb") as fh:
        if not gzipped and not head and st.st_size > max_bytes:
            raise too_large
        try:
            # The cap bounds a decompressed stream too (a small .gz can hold gigabytes).
            data = (gzip.GzipFile(fileobj=fh) if gzipped else fh).read(max_bytes + 1)
        except (OSError, EOFError) as exc:  # gzip: BadGzipFile is an OSError, a cut file an EOFError
            raise _unreadable(path, what, exc) from None
    if len(data) > max_bytes:
        if head:
            return data[:max_bytes]
        raise too_large
    return data


def read_utf8(path: str | os.PathLike[str], *, what: str = "", max_bytes: int = MAX_FILE_BYTES,
              gzipped: bool = False) -> str:
    """A user's UTF-8 text file, read by `read_regular`'s rules; FileRefused also when it is not UTF-8."""
    data = read_regular(path, what=what, max_bytes=max_bytes, gzipped=gzipped)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FileRefused(f"{_label(path, what)} is not UTF-8 text (byte {exc.start} cannot be decoded)",
                          "not UTF-8 text") from None


@dataclass(frozen=True, slots=True)
class FolderEntry:
    """A file found in a folder: its path relative to the folder ("/"-separated, valid UTF-8, escaped when
    `refused`), where it is, and why it is not read (None: read it by `read_regular`'s rules)."""

    rel: str
    path: Path
    refused: str | None = None


def walk_files(folder: Path, suffixes: tuple[str, ...], skip: frozenset[str] = frozenset(),
               max_entries: int | None = None) -> Iterator[FolderEntry]:
    """The files under `folder` whose names end with `suffixes`, in a stable order; hidden files and folders
    and folders named in `skip` are left out, linked folders are not entered, and names that are not UTF-8
    come back refused. Past `max_entries` names listed (files and folders of any kind), the walk ends with
    one refused entry for the folder it stopped in: a tree of millions of files is not walked to its end."""
    listed = 0
    for root, dirs, files in os.walk(folder):
        base = Path(root).relative_to(folder)
        listed += len(dirs) + len(files)
        if max_entries is not None and listed > max_entries:
            yield FolderEntry(shown(base) + "/", Path(root),
                              f"the walk stopped here, past {max_entries:,} names in the folder")
            return
        kept = []
        for name in sorted(d for d in dirs if not d.startswith(".") and d not in skip):
            if encodes(name):
                kept.append(name)
            else:
                yield FolderEntry(shown(base / name) + "/", Path(root) / name, "its name is not UTF-8; rename it")
        dirs[:] = kept
        for name in sorted(files):
            if name.startswith(".") or not name.lower().endswith(suffixes):
                continue
            rel = (base / name).as_posix()
            yield FolderEntry(rel, Path(root) / name) if encodes(name) else FolderEntry(
                shown(rel), Path(root) / name, "its name is not UTF-8; rename it")
