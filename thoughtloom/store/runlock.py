"""One process at a time per run: an exclusive lock on a run of a store file, held while the run goes on.

Two `loom resume` of one run (or a resume of a run still going in another process) would both serve
its record and then both spend on the live model, each writing its own heads over the other's. The
process that records or resumes a run holds `RUN_ID.lock` beside the store file with flock(2): the
kernel drops the lock when the process ends however it ends (kill -9 included), so a killed run
never stays locked. The file is removed on release; a holder that finds its file replaced after
locking (another released and removed it meanwhile) locks the new one instead.

Where there is no flock (Windows), the lock file itself is the lock: created exclusively (O_EXCL), removed
on release. It outlives a killed process, so a holder that finds it says which file to remove when no
loom runs the run any more.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..filelocks import available as locks_available, lock
from .runs import RunError


class RunBusy(RunError):
    """The run is held by another process (one line: which, and what to do)."""


@dataclass
class RunHold:
    """An exclusive hold on one run (release it, or let the process end)."""

    path: Path
    fd: int | None
    flock: bool = True  # False: the lock file's existence is the lock (no flock here)

    def release(self) -> None:
        """Give the run up (idempotent)."""
        if self.fd is None:
            return
        if not self.flock:
            os.close(self.fd)  # first: Windows cannot remove an open file
        try:
            os.unlink(self.path)  # with flock, while still locked: a waiting locker then sees its file was replaced
        except OSError:
            pass
        if self.flock:
            os.close(self.fd)
        self.fd = None

    def __del__(self) -> None:
        self.release()


def lock_path(store_path: str | os.PathLike[str], run_id: str) -> Path:
    """The lock file of a run of the store file at `store_path`."""
    store = Path(store_path)
    return store.with_name(f"{store.name}.{run_id}.lock")


def hold_run(store: Any, run_id: str) -> RunHold | None:
    """Hold run `run_id` of `store` (a store file; None for a store without one, which one process owns).

    RunBusy when another process holds it; RunError when the lock file cannot be made.
    """
    store_path = getattr(store, "path", None)
    if store_path is None or not run_id.isalnum():
        return None
    path = lock_path(store_path, run_id)
    if not locks_available():
        return _hold_by_creating(path, run_id)
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise RunError(f"cannot lock run {run_id} ({path}): {exc.strerror or exc}") from None
        try:
            locked = lock(fd, wait=False)
        except OSError as exc:
            os.close(fd)
            raise RunError(f"cannot lock run {run_id} ({path}): {exc.strerror or exc}") from None
        if not locked:
            holder = _holder(path)
            os.close(fd)
            raise RunBusy(f"run {run_id} is in use by another loom process{holder}; wait until it ends, then "
                          "resume it")
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(path))
        except FileNotFoundError:
            same = False
        if same:
            os.ftruncate(fd, 0)
            os.write(fd, str(os.getpid()).encode())
            return RunHold(path, fd)
        os.close(fd)  # released and removed by its last holder while we waited: lock the file there now


def _hold_by_creating(path: Path, run_id: str) -> RunHold:
    """Hold the run by creating its lock file (no flock here): RunBusy, naming the file, when it exists."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600)
    except FileExistsError:
        raise RunBusy(f"run {run_id} is in use by another loom process{_holder(path)}; wait until it ends, then "
                      f"resume it (this platform has no file locks: if no loom runs it any more, remove {path})"
                      ) from None
    except OSError as exc:
        raise RunError(f"cannot lock run {run_id} ({path}): {exc.strerror or exc}") from None
    os.write(fd, str(os.getpid()).encode())
    return RunHold(path, fd, flock=False)


def _holder(path: Path) -> str:
    """ " (pid N)" from the lock file, when it says."""
    try:
        with open(path, "rb") as fh:
            text = fh.read(32).decode("ascii", "replace").strip()
    except OSError:
        return ""
    return f" (pid {text})" if text.isdigit() else ""
