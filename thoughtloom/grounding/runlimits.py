"""Whole-run limits for sandboxed code: one cgroup per run, or polling where there is none.

setrlimit binds each process (RLIMIT_AS) or each uid across every run (RLIMIT_NPROC), so a
program that forks multiplies its memory, and one run's processes starve another's. A run
cgroup bounds all of a run's processes together: its memory (the kernel's OOM killer acts at the
limit, the sandbox then stops the whole run) and its number of processes. cgroup v2 is used when
its memory controller is available to this process, else the cgroup v1 memory and pids
hierarchies. Where neither works (not root, no controller) the run's process tree is polled for
its total resident memory and killed above the limit: weaker, because a burst between two polls
gets through and shared pages are counted once per process. Disk is bounded by the run's tmpfs
(see sandbox.py); without one, the workdir's size is polled the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
import uuid
from dataclasses import dataclass

CGROUP_PREFIX = "thoughtloom-"
POLL_S = 0.05  # how often a run is checked against its limits
_REMOVE_S = 3.0  # how long removal waits for a killed run's processes to leave its cgroup


class CgroupUnavailable(Exception):
    """No cgroup with a memory controller can be made for a run here (the message says why)."""


@dataclass
class RunCgroup:
    """One run's cgroups: made before it starts, joined by its bootstrap, removed when it ends."""

    version: int  # 1 or 2
    memory_dir: str
    pids_dir: str | None  # None: no pids controller (RLIMIT_NPROC has to do)
    memory_mb: int
    _peak: int = 0

    @classmethod
    def create(cls, memory_mb: int, max_processes: int) -> RunCgroup:
        """A fresh, uniquely named cgroup holding at most `memory_mb` and `max_processes` tasks."""
        own = _own_cgroup_dirs()
        name = f"{CGROUP_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:12]}"
        made: list[str] = []
        try:
            v2 = own.get("")
            v2_ctrls = _enable_v2(v2) if v2 else set()
            if "memory" in v2_ctrls:
                assert v2 is not None
                memory_dir = _mkdir(os.path.join(v2, name), made)
                _write(memory_dir, "memory.max", str(memory_mb * 1024 * 1024))
                _write(memory_dir, "memory.swap.max", "0", optional=True)
                _write(memory_dir, "memory.oom.group", "1", optional=True)  # the OOM killer takes the whole run
                version = 2
            elif "memory" in own:
                memory_dir = _mkdir(os.path.join(own["memory"], name), made)
                _write(memory_dir, "memory.limit_in_bytes", str(memory_mb * 1024 * 1024))
                _write(memory_dir, "memory.memsw.limit_in_bytes", str(memory_mb * 1024 * 1024), optional=True)
                version = 1
            else:
                raise CgroupUnavailable("no cgroup memory controller is available to this process")
            pids_dir = None
            if "pids" in v2_ctrls and version == 2:
                pids_dir = memory_dir
            elif "pids" in own:
                pids_dir = _mkdir(os.path.join(own["pids"], name), made)
            if pids_dir is not None:
                _write(pids_dir, "pids.max", str(max_processes))
        except (OSError, CgroupUnavailable) as exc:
            for d in reversed(made):
                with contextlib.suppress(OSError):
                    os.rmdir(d)
            raise CgroupUnavailable(str(exc)) from None
        return cls(version, memory_dir, pids_dir, memory_mb)

    @property
    def procs_files(self) -> list[str]:
        """The files a process writes its pid to, to join the run."""
        dirs = [self.memory_dir] + ([self.pids_dir] if self.pids_dir not in (None, self.memory_dir) else [])
        return [os.path.join(d, "cgroup.procs") for d in dirs if d]

    def describe(self) -> str:
        """How the run is bounded, for the isolation notes."""
        pids = " and process count" if self.pids_dir else " (process count by RLIMIT_NPROC only)"
        return f"the run's total memory{pids} bounded by its own cgroup (v{self.version})"

    def oom_kills(self) -> int:
        """How many of the run's processes the kernel killed at the memory limit so far."""
        text = _read(self.memory_dir, "memory.events" if self.version == 2 else "memory.oom_control")
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value or 0)
        return 0

    def peak_kb(self) -> int | None:
        """The run's peak memory (every process, and its files in tmpfs, which are memory too)."""
        name = "memory.peak" if self.version == 2 else "memory.max_usage_in_bytes"
        text = _read(self.memory_dir, name) or _read(self.memory_dir, "memory.current")
        with contextlib.suppress(ValueError):
            self._peak = max(self._peak, int(text.split()[0]))
        return self._peak // 1024 if self._peak else None

    def kill(self) -> None:
        """SIGKILL every process in the run's cgroups (including any that left its process group)."""
        if self.version == 2:
            _write(self.memory_dir, "cgroup.kill", "1", optional=True)
        for procs in self.procs_files:
            for pid in _read(os.path.dirname(procs), "cgroup.procs").split():
                with contextlib.suppress(OSError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)

    def remove(self) -> bool:
        """Kill what is left of the run and remove its cgroups; False if one could not be removed."""
        dirs = list(dict.fromkeys(d for d in (self.memory_dir, self.pids_dir) if d))
        deadline = time.monotonic() + _REMOVE_S
        while dirs:
            self.kill()
            for d in list(dirs):
                try:
                    os.rmdir(d)
                    dirs.remove(d)
                except FileNotFoundError:
                    dirs.remove(d)
                except OSError:
                    pass  # EBUSY: a killed process has not left yet
            if dirs and time.monotonic() > deadline:
                return False
            if dirs:
                time.sleep(0.01)
        return True


def sweep_stale_cgroups() -> int:
    """Remove run cgroups left by sandbox processes that died (e.g. SIGKILLed mid-run)."""
    removed = 0
    for parent in set(_own_cgroup_dirs().values()):
        with contextlib.suppress(OSError):
            for entry in os.scandir(parent):
                if not (entry.is_dir() and entry.name.startswith(CGROUP_PREFIX)):
                    continue
                owner = entry.name[len(CGROUP_PREFIX) :].split("-", 1)[0]
                if owner.isdigit() and not os.path.exists(f"/proc/{owner}"):
                    with contextlib.suppress(OSError):  # EBUSY: still has processes; left alone
                        os.rmdir(entry.path)
                        removed += 1
    return removed


@dataclass
class RunWatch:
    """Checks one running run against its whole-run limits, every POLL_S seconds."""

    memory_mb: int
    disk_mb: int
    cgroup: RunCgroup | None
    workdir: str | None  # polled for its size when the run has no tmpfs of the disk limit's size
    peak_memory_kb: int | None = None
    peak_disk_kb: int | None = None
    detail: str = ""

    async def exceeded(self, root_pid: int) -> str:
        """Wait until the run crosses a limit; return the stop reason ("memory_limit", "disk_limit")."""
        while True:
            if self.cgroup is not None and self.workdir is None:
                reason = self.check(root_pid)  # a few small sysfs reads
            else:
                reason = await asyncio.to_thread(self.check, root_pid)  # walks /proc or the workdir
            if reason:
                return reason
            await asyncio.sleep(POLL_S)

    def check(self, root_pid: int | None) -> str | None:
        """One look at the run: the stop reason if it is over a limit, else None (peaks updated)."""
        try:
            if self.cgroup is not None:
                self.peak_memory_kb = self.cgroup.peak_kb()
                kills = self.cgroup.oom_kills()
                if kills:
                    peak = (self.peak_memory_kb or 0) / 1024
                    self.detail = (
                        f"the run's processes (and its files in tmpfs) reached the {self.memory_mb} MB memory limit "
                        f"(peak {peak:.0f} MB); the kernel killed {kills} of them and the run was stopped"
                    )
                    return "memory_limit"
            elif root_pid is not None:
                rss = tree_rss_kb(root_pid)
                self.peak_memory_kb = max(self.peak_memory_kb or 0, rss)
                if rss > self.memory_mb * 1024:
                    self.detail = (
                        f"the run's processes together had {rss / 1024:.0f} MB resident, over the "
                        f"{self.memory_mb} MB memory limit (polled, no cgroup); the run was killed"
                    )
                    return "memory_limit"
            if self.workdir is not None:
                used = tree_disk_kb(self.workdir)
                self.peak_disk_kb = max(self.peak_disk_kb or 0, used)
                if used > self.disk_mb * 1024:
                    self.detail = (
                        f"the run's files reached {used / 1024:.0f} MB, over the {self.disk_mb} MB disk limit "
                        "(polled, no run tmpfs); the run was killed"
                    )
                    return "disk_limit"
        except OSError:
            return None  # the run is ending while we look; the final check after it decides
        return None


def tree_rss_kb(root_pid: int) -> int:
    """Resident memory of `root_pid` and all its descendants, in KB (shared pages count in each)."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    page_kb = os.sysconf("SC_PAGE_SIZE") // 1024
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                data = f.read()
        except OSError:
            continue
        fields = data[data.rfind(b")") + 2 :].split()  # the command name may hold spaces
        pid = int(entry.name)
        children.setdefault(int(fields[1]), []).append(pid)
        rss[pid] = int(fields[21]) * page_kb
    total, todo = 0, [root_pid]
    while todo:
        pid = todo.pop()
        total += rss.get(pid, 0)
        todo.extend(children.get(pid, ()))
    return total


def tree_disk_kb(root: str) -> int:
    """Space the files under `root` take, in KB (allocated blocks, so sparse files count what they use)."""
    total, todo = 0, [root]
    while todo:
        with contextlib.suppress(OSError), os.scandir(todo.pop()) as entries:
            for entry in entries:
                with contextlib.suppress(OSError):
                    st = entry.stat(follow_symlinks=False)
                    total += st.st_blocks * 512
                    if entry.is_dir(follow_symlinks=False):
                        todo.append(entry.path)
    return total // 1024


def _own_cgroup_dirs() -> dict[str, str]:
    """This process's cgroup directory per hierarchy: "" for the v2 one, "memory"/"pids" for v1."""
    mounts: dict[str, tuple[str, str]] = {}
    with contextlib.suppress(OSError), open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fields, tail = left.split(), right.split()
            if len(fields) < 5 or len(tail) < 3:
                continue
            root, point = fields[3], fields[4]
            if tail[0] == "cgroup2":
                mounts.setdefault("", (root, point))
            elif tail[0] == "cgroup":
                for ctrl in ("memory", "pids"):
                    if ctrl in tail[2].split(","):
                        mounts.setdefault(ctrl, (root, point))
    dirs: dict[str, str] = {}
    with contextlib.suppress(OSError), open("/proc/self/cgroup") as f:
        for line in f:
            parts = line.rstrip("\n").split(":", 2)
            if len(parts) != 3:
                continue
            keys = [""] if parts[0] == "0" and parts[1] == "" else [c for c in parts[1].split(",") if c in mounts]
            for key in keys:
                if key not in mounts:
                    continue
                root, point = mounts[key]
                path = parts[2]
                if root != "/" and (path == root or path.startswith(root + "/")):
                    path = path[len(root) :]
                dirs[key] = os.path.join(point, path.lstrip("/"))
    return {k: d for k, d in dirs.items() if os.path.isdir(d)}


def _enable_v2(own: str) -> set[str]:
    """The controllers a child of `own` in cgroup v2 gets (memory and pids enabled when possible)."""
    available = set(_read(own, "cgroup.controllers").split())
    enabled = set(_read(own, "cgroup.subtree_control").split())
    for ctrl in ("memory", "pids"):
        if ctrl in available and ctrl not in enabled:
            # Fails (EBUSY) in a non-root cgroup that holds processes: then v1 or polling.
            with contextlib.suppress(OSError):
                _write(own, "cgroup.subtree_control", "+" + ctrl)
                enabled.add(ctrl)
    return enabled


def _mkdir(path: str, made: list[str]) -> str:
    os.mkdir(path, 0o755)
    made.append(path)
    return path


def _read(directory: str, name: str) -> str:
    try:
        with open(os.path.join(directory, name)) as f:
            return f.read()
    except OSError:
        return ""


def _write(directory: str, name: str, value: str, *, optional: bool = False) -> None:
    path = os.path.join(directory, name)
    if optional and not os.path.exists(path):
        return
    try:
        with open(path, "w") as f:
            f.write(value)
    except OSError:
        if not optional:
            raise
