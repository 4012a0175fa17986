"""Exclusive advisory locks on open files that the kernel drops when their process ends (flock(2)).

flock exists where `fcntl` does (Linux, macOS, the BSDs). A Python without `fcntl` (Windows) has no
such lock: `available()` says so and each caller does what it honestly can without one.
"""

from __future__ import annotations

import importlib
from types import ModuleType


def _fcntl() -> ModuleType | None:
    try:
        return importlib.import_module("fcntl")
    except ImportError:
        return None


def available() -> bool:
    """True when this platform has flock (the module is looked up per call: nothing is cached)."""
    return _fcntl() is not None


def lock(fd: int, *, wait: bool) -> bool:
    """Lock the open file `fd` exclusively; without `wait`, False when another holder has it.

    OSError when the lock cannot be taken for another reason, or when this platform has no flock.
    """
    fcntl = _fcntl()
    if fcntl is None:
        raise OSError("this platform has no file locks (no fcntl module)")
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except BlockingIOError:
        return False
    return True


def unlock(fd: int) -> None:
    """Release a lock taken with `lock` (closing the file releases it too)."""
    fcntl = _fcntl()
    if fcntl is not None:
        fcntl.flock(fd, fcntl.LOCK_UN)
