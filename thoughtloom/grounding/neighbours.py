"""Close this process to the other processes of its user: its environment, memory and fds in /proc.

On Linux any process of the same uid may read `/proc/PID/environ` (the API keys loom was started
with), `/proc/PID/mem`, `/proc/PID/fd/...` of a process that is "dumpable", as every process is by
default. That includes what loom itself starts: a stdio MCP server gets a filtered environment, but
could read the full one from `/proc/<loom>/environ`, and so could a program run in the sandbox where
the kernel gives it no PID namespace. `prctl(PR_SET_DUMPABLE, 0)` closes those files to every
process without CAP_SYS_PTRACE (root keeps reading them), as ssh-agent does.

The flag is the whole process's (all its threads, and children it forks without exec) and every
`exec` resets it: a program loom starts is dumpable again, with the environment it was given, and
needs nothing of its parent. So the flag is set once, explicitly, by the program's entry point
(`loom`'s main does; an application embedding thoughtloom calls `make_process_private()` itself
before it starts MCP servers or sandboxes), never as a side effect of an import.

What it costs: no core dump; a debugger or py-spy of the same user cannot attach (root's can); the
process cannot open its own `/proc/self/environ` or `/proc/self/io` (os.environ and
resource.getrusage still work, as do `/proc/self/status`, `/proc/self/fd` and `/proc/self/maps`).
To debug loom as yourself, run a command through `thoughtloom.cli.main.main(argv)` in your own
interpreter: given argv, main leaves the process as it found it.
Elsewhere than on Linux it does nothing (there is no such flag): other processes of the user read
of this one whatever that system lets them.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Callable

PR_GET_DUMPABLE = 3
PR_SET_DUMPABLE = 4


def make_process_private() -> str | None:
    """Make this process non-dumpable (Linux); None when it is or need not be (not Linux), else why not."""
    if not sys.platform.startswith("linux"):
        return None  # nothing to set; the docs say what stays readable there
    try:
        prctl = _prctl()
    except (OSError, AttributeError) as exc:  # a C library without prctl (glibc and musl have it)
        return f"no prctl in this C library: {exc}"
    if prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        return f"prctl(PR_SET_DUMPABLE, 0) failed: {os.strerror(ctypes.get_errno())}"
    return None


def process_is_private() -> bool:
    """True when this process is non-dumpable: other processes of its user cannot read its /proc files."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        return int(_prctl()(PR_GET_DUMPABLE, 0, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def _prctl() -> Callable[..., int]:
    """libc's prctl, its arguments typed as the kernel reads them (a bare int is not an unsigned long)."""
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    return prctl
