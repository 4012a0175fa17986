"""Run untrusted (model-generated) code in a contained subprocess and report what happened.

Each run gets a fresh working directory (removed afterwards), a minimal explicit environment
(never the parent's; without a PID namespace the code, run as the parent's user, could read the
parent's in /proc unless the parent made itself non-dumpable first, see neighbours.py: the run's
notes say so), resource limits (CPU, address space, processes, file size, no core dumps), a
wall-clock timeout that kills everything the run started, and a cap on captured output. Where
the kernel allows it the run also gets its own network namespace (no network; a private loopback
only), mount namespace and PID namespace (it sees only its own processes, and when it ends every
process it forked dies with it). In the mount namespace the run gets a new,
read-only root (an empty tmpfs) holding only what it needs: the system directories (/usr, /bin,
/lib...), the interpreter's own directories, a few device nodes, a fresh /proc, minimal /etc
files, private /tmp, /var/tmp, /dev/shm and /run/lock, and its workdir. Nothing else on the host
is there: not the project checkout, not the home directories, not /work. With
`site_packages=False` the interpreter's installed packages are hidden too (only its standard
library is visible), so a run cannot read data files that ship in packages (e.g. the hidden
tests of a benchmark). As root the code runs as an unprivileged uid (65534 by default), because
RLIMIT_NPROC and file permissions do not bind root. Memory, processes and disk are bounded per
run, not per process: a cgroup per run (runlimits.py; polling where there is none) and one tmpfs
of the disk limit's size for everything the run can write (its workdir and its private /tmp...).

How: the sandbox starts a small trusted bootstrap (`_BOOT`, run by this interpreter with -I -S)
that reads its configuration from a pipe (never argv: /proc/PID/cmdline is world-readable),
unshares the namespaces, builds the new root, forks the code as a child (with
the limits set and privileges dropped just before exec), waits for it and reports its status,
CPU time and peak memory on a private pipe the code cannot write to. Every isolation step that
fails is skipped and reported (`SandboxResult.isolation_notes`), never fatal.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import os
import shutil
import signal
import stat
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .neighbours import process_is_private
from .runlimits import CgroupUnavailable, RunCgroup, RunWatch, sweep_stale_cgroups

SANDBOX_UID = 65534  # "nobody" on Debian-like systems
MAIN_SCRIPT = "main.py"  # the file run_python writes the code to
COPY_IGNORE = (".git", ".venv", "__pycache__", "node_modules", ".pytest_cache", ".mypy_cache", ".ruff_cache")
MASKED_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")  # world-writable places outside the workdir
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")  # shared libraries, tools
DEVICES = ("null", "zero", "full", "random", "urandom")
ETC_FILES = ("ld.so.cache", "localtime", "nsswitch.conf")  # read by the dynamic linker and libc
_SITE_DIRS = ("site-packages", "dist-packages")
_MEMORY_MARKERS = ("MemoryError", "Cannot allocate memory", "std::bad_alloc", "out of memory")
_TAIL_BYTES = 4096  # how much of each stream's end is kept for diagnosis even when output is capped


@dataclass(frozen=True, slots=True)
class SandboxLimits:
    """Resource limits for one run."""

    timeout_s: float = 10.0  # wall clock
    cpu_s: int = 10  # RLIMIT_CPU (SIGXCPU at the limit, SIGKILL one second later)
    # The run's total memory: all its processes together (a cgroup, else polling), and also each
    # process's address space (RLIMIT_AS, so one huge allocation fails with MemoryError).
    memory_mb: int = 1024
    max_output_bytes: int = 65536  # per stream (stdout, stderr); the run is killed beyond it
    max_processes: int = 64  # the run's processes together (pids cgroup, else RLIMIT_NPROC per uid)
    max_file_mb: int = 64  # RLIMIT_FSIZE per file
    # The run's total disk: its workdir and private /tmp share one tmpfs of this size (RAM, so it
    # also counts toward memory_mb); without a mount namespace the workdir's size is polled.
    disk_mb: int = 512
    network: bool = False  # True: no network namespace (the run shares the host's network)


class SandboxUnavailable(RuntimeError):
    """This platform cannot run the sandbox (it needs Linux); the message says what is missing, in one line."""


def sandbox_missing() -> str | None:
    """What this platform lacks to run the sandbox (None: nothing): Linux, and its fcntl and resource modules."""
    if not sys.platform.startswith("linux"):
        return f"running code in the sandbox needs Linux (this is {sys.platform})"
    missing = []
    for name in ("fcntl", "resource"):  # the bootstrap's; this interpreter runs it
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    if missing:
        return f"running code in the sandbox needs Linux: this Python has no {' and '.join(missing)} module" + (
            "s" if len(missing) > 1 else "")
    return None


@dataclass(frozen=True, slots=True)
class SyntaxCheck:
    """Whether code compiles, and where it does not."""

    ok: bool
    error: str | None = None
    line: int | None = None


@dataclass(frozen=True, slots=True)
class Isolation:
    """Which isolation a sandbox gets on this machine (measured once per Sandbox)."""

    network: bool
    user: bool  # runs as another, unprivileged uid
    tmp: bool  # private /tmp, /var/tmp, /dev/shm, /run/lock
    pid: bool  # own PID namespace: sees only its processes, all die with the run
    uid: int  # the uid the code runs as
    fs: bool = False  # own root: sees only the workdir, the interpreter and system directories
    notes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class SandboxResult:
    """What one sandboxed run did.

    `stopped_reason` is None when the program ended by itself (any exit code), else one of
    "timeout", "cpu_limit", "memory_limit", "disk_limit", "output_limit", "signal",
    "syntax_error", "setup_error"; `stop_detail` says how it was detected. `memory_peak_kb` and
    `disk_peak_kb` are the whole run's peaks (all its processes; its files), where measured.
    """

    exit_code: int | None
    signal: int | None
    stdout: str
    stderr: str
    timed_out: bool = False
    stopped_reason: str | None = None
    stop_detail: str = ""
    elapsed_ms: int = 0
    truncated: bool = False
    network_isolated: bool = False
    user_isolated: bool = False
    tmp_isolated: bool = False
    pid_isolated: bool = False
    fs_isolated: bool = False
    isolation_notes: tuple[str, ...] = ()
    cpu_ms: int | None = None
    max_rss_kb: int | None = None
    memory_peak_kb: int | None = None
    disk_peak_kb: int | None = None

    @property
    def ok(self) -> bool:
        """True when the program ran to completion and exited 0."""
        return self.exit_code == 0 and self.stopped_reason is None

    def isolation(self) -> dict[str, bool]:
        """The isolation flags, for reports."""
        return {
            "network_isolated": self.network_isolated,
            "user_isolated": self.user_isolated,
            "tmp_isolated": self.tmp_isolated,
            "pid_isolated": self.pid_isolated,
            "fs_isolated": self.fs_isolated,
        }


def check_syntax(code: str, filename: str = MAIN_SCRIPT) -> SyntaxCheck:
    """Compile `code` without running it; report the first syntax error and its line."""
    try:
        # The program's own SyntaxWarnings ("is" with a literal, ...) would be printed on the
        # caller's stderr, between the progress lines: they are the program's business, not ours.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(code, filename, "exec", dont_inherit=True)
    except SyntaxError as exc:  # includes IndentationError and TabError
        where = f"line {exc.lineno}: " if exc.lineno else ""
        text = (exc.text or "").strip()
        shown = f" -> {text[:120]}" if text else ""
        return SyntaxCheck(False, f"{type(exc).__name__}: {where}{exc.msg}{shown}", exc.lineno)
    except (ValueError, RecursionError, MemoryError, OverflowError) as exc:  # null bytes, absurd nesting
        return SyntaxCheck(False, f"{type(exc).__name__}: {exc}", None)
    return SyntaxCheck(True)


def _syntax_result(check: SyntaxCheck) -> SandboxResult:
    return SandboxResult(
        exit_code=None,
        signal=None,
        stdout="",
        stderr=check.error or "syntax error",
        stopped_reason="syntax_error",
        stop_detail=check.error or "",
    )


class Sandbox:
    """Runs untrusted code in contained subprocesses; many runs may be in flight at once."""

    def __init__(
        self,
        limits: SandboxLimits = SandboxLimits(),
        *,
        python: str = sys.executable,
        uid: int | None = SANDBOX_UID,
        gid: int | None = None,
        base_dir: str | Path | None = None,
        namespaces: bool = True,
        site_packages: bool = True,
        cgroups: bool = True,
    ) -> None:
        """SandboxUnavailable (one line) where the sandbox cannot run: before any work that needs it starts."""
        if (missing := sandbox_missing()) is not None:
            raise SandboxUnavailable(missing)
        self.limits = limits
        self.namespaces = namespaces  # False: limits and uid only (for machines or tests without them)
        # False: the run sees the interpreter's standard library only, not its installed packages.
        self.site_packages = site_packages
        self.cgroups = cgroups  # False (or none usable here): whole-run memory is polled, not bounded
        self._no_cgroup = "cgroups disabled"  # why runs have no cgroup, when they have none
        self.python = python or "python3"
        self._root = os.geteuid() == 0
        # Only root can switch uid; a non-root sandbox runs as the current user (reported).
        self.uid = uid if (self._root and uid is not None) else None
        self.gid = (gid if gid is not None else self.uid) if self.uid is not None else None
        self.base_dir = str(base_dir) if base_dir is not None else tempfile.gettempdir()
        self._iso: Isolation | None = None
        self._binds: list[str] = []  # host paths bound read-only into the run's root
        self._hide: list[str] = []  # directories inside those that the run must not see
        self._userns = False  # a non-root sandbox gets its namespaces through a user namespace
        self._lock: asyncio.Lock | None = None
        self._lock_loop: asyncio.AbstractEventLoop | None = None

    # ---------------------------------------------------------------- public API

    check_syntax = staticmethod(check_syntax)

    async def isolation(self) -> Isolation:
        """Which isolation runs get here (probed once, by running the interpreter in the sandbox)."""
        if self._iso is not None:
            return self._iso
        loop = asyncio.get_running_loop()
        if self._lock is None or self._lock_loop is not loop:
            self._lock, self._lock_loop = asyncio.Lock(), loop
        async with self._lock:
            if self._iso is None:
                self._iso = await self._probe()
        return self._iso

    async def run_python(
        self,
        code: str,
        *,
        files: Mapping[str, str | bytes | None] | None = None,
        stdin: str | None = None,
        limits: SandboxLimits | None = None,
        args: Sequence[str] = (),
    ) -> SandboxResult:
        """Syntax-check `code`, then run it as `main.py` in a fresh workdir holding `files`."""
        check = check_syntax(code)
        if not check.ok:
            return _syntax_result(check)
        if files and MAIN_SCRIPT in files:
            raise ValueError(f"files may not contain {MAIN_SCRIPT!r}: the code is written there")
        all_files: dict[str, str | bytes | None] = {**(files or {}), MAIN_SCRIPT: code}
        # -s: no user site-packages; the script's directory (the workdir) stays importable.
        return await self.run([self.python, "-s", MAIN_SCRIPT, *args], files=all_files, stdin=stdin, limits=limits)

    async def run(
        self,
        argv: Sequence[str],
        *,
        copy_from: Path | str | None = None,
        files: Mapping[str, str | bytes | None] | None = None,
        stdin: str | None = None,
        limits: SandboxLimits | None = None,
        cwd_subdir: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> SandboxResult:
        """Run `argv` in a fresh workdir (a copy of `copy_from`, then `files`; None deletes a file)."""
        if not argv:
            raise ValueError("argv is empty")
        limits = limits or self.limits
        iso = await self.isolation()
        started = time.monotonic()
        making = asyncio.ensure_future(asyncio.to_thread(self._make_workdir, copy_from, files))
        try:
            workdir = await asyncio.shield(making)
        except asyncio.CancelledError:
            # The copy goes on in its thread whatever happens here: remove the workdir when it is made.
            making.add_done_callback(_remove_made_workdir)
            raise
        except (OSError, ValueError, shutil.Error) as exc:
            return _setup_error(f"could not prepare the workdir: {exc}", iso)
        try:
            cwd = _inside(workdir, cwd_subdir) if cwd_subdir else workdir
            return await self._execute(list(argv), workdir, cwd, stdin, limits, iso, env or {}, started)
        except ValueError as exc:
            return _setup_error(str(exc), iso)
        finally:
            # Synchronous on purpose: it must also happen when the run is being cancelled.
            _force_rmtree(workdir)

    # ---------------------------------------------------------------- workdir

    def _make_workdir(self, copy_from: Path | str | None, files: Mapping[str, str | bytes | None] | None) -> Path:
        workdir = Path(tempfile.mkdtemp(prefix="thoughtloom-sbx-", dir=self.base_dir))
        try:
            if copy_from is not None:
                src = Path(copy_from)
                if not src.is_dir():
                    raise ValueError(f"copy_from is not a directory: {src}")
                # symlinks=True: copy links as links instead of following them out of the tree.
                shutil.copytree(
                    src, workdir, symlinks=True, dirs_exist_ok=True, ignore=shutil.ignore_patterns(*COPY_IGNORE)
                )
            for rel, content in (files or {}).items():
                target = _inside(workdir, rel)
                if content is None:
                    if target.is_dir() and not target.is_symlink():
                        shutil.rmtree(target)
                    elif target.exists() or target.is_symlink():
                        target.unlink()
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                if target.is_symlink():
                    target.unlink()  # never write through a link copied from the repo
                if isinstance(content, bytes):
                    target.write_bytes(content)
                else:
                    target.write_text(content, encoding="utf-8")
            if self.uid is not None:
                _chown_tree(workdir, self.uid, self.gid if self.gid is not None else self.uid)
            os.chmod(workdir, 0o700)
        except BaseException:
            _force_rmtree(workdir)
            raise
        return workdir

    # ---------------------------------------------------------------- probe

    async def _probe(self) -> Isolation:
        """Run the interpreter once in the sandbox with every isolation requested; keep what worked."""
        notes: list[str] = []
        layout = await self._interpreter_layout(notes)
        self._binds, self._hide = _root_plan(layout, self.python, self.site_packages)
        ns = self.namespaces
        want = {"user": ns and not self._root, "net": ns, "mnt": ns, "pid": ns}
        if not ns:
            notes.append("namespaces disabled: no network, /tmp or PID isolation")
        if self.cgroups:
            sweep_stale_cgroups()  # left by a sandbox process that was killed mid-run
        workdir = await asyncio.to_thread(self._make_workdir, None, None)
        try:
            report = await self._spawn(
                [self.python, "-s", "-c", "pass"],
                workdir,
                workdir,
                None,
                SandboxLimits(timeout_s=20, max_output_bytes=8192),
                want,
                {},
                probe=True,
            )
        finally:
            _force_rmtree(workdir)
        got = report.iso or {}
        self._userns = bool(got.get("user"))
        notes.extend(report.notes)
        if self.cgroups and (report.no_cgroup or not got.get("cgroup")):
            # None can be made or joined here: later runs poll instead of trying (or failing) again.
            self.cgroups = False
            self._no_cgroup = report.no_cgroup or "its cgroup could not be joined"
            if not report.no_cgroup:
                notes.append(_polled_note(self._no_cgroup))
        if report.exec_error or report.exit_code != 0:
            why = report.exec_error or _last_line(report.stderr) or f"exit {report.exit_code}, signal {report.signal}"
            notes.append(f"the interpreter {self.python} did not run in the sandbox: {why}")
        if self.uid is not None:
            notes.append(f"code runs as uid {self.uid} (not root)")
        elif self._root:
            notes.append("code runs as root: no user isolation, and RLIMIT_NPROC does not bind root")
        else:
            notes.append(f"code runs as the current user (uid {os.getuid()}): no user isolation")
        return Isolation(
            network=bool(got.get("net")),
            user=self.uid is not None,
            tmp=bool(got.get("tmp")),
            pid=bool(got.get("pid")),
            uid=self.uid if self.uid is not None else os.getuid(),
            fs=bool(got.get("fs")),
            notes=tuple(notes),
        )

    async def _interpreter_layout(self, notes: list[str]) -> dict[str, list[str]]:
        """Where this interpreter lives: its prefixes, import path, package directories, venv file."""
        code = (
            "import sys, json, site, sysconfig, os\n"
            "base = sysconfig.get_paths(vars={'base': sys.base_prefix, 'platbase': sys.base_exec_prefix})\n"
            "cfg = os.path.join(sys.prefix, 'pyvenv.cfg')\n"
            "print(json.dumps({'prefixes': [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix],"
            " 'base': [sys.base_prefix, sys.base_exec_prefix], 'path': sys.path,"
            " 'sites': [*site.getsitepackages(), base['purelib'], base['platlib']],"
            " 'stdlib': [base['stdlib'], base['platstdlib']],"
            " 'files': [cfg] if os.path.isfile(cfg) else []}))"
        )
        try:
            proc = await asyncio.create_subprocess_exec(
                self.python, "-s", "-c", code,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL, stdin=asyncio.subprocess.DEVNULL,
                env=_base_env("/", "/tmp", self.python), cwd="/",
            )  # fmt: skip
            out, _ = await asyncio.wait_for(proc.communicate(), 20)
            layout = {k: [p for p in v if isinstance(p, str) and p] for k, v in json.loads(out).items()}
        except (OSError, ValueError, TimeoutError, AttributeError) as exc:
            notes.append(f"could not ask {self.python} for its paths: {exc}")
            layout = {}
        return layout

    # ---------------------------------------------------------------- running

    async def _execute(
        self,
        argv: list[str],
        workdir: Path,
        cwd: Path,
        stdin: str | None,
        limits: SandboxLimits,
        iso: Isolation,
        extra_env: Mapping[str, str],
        started: float,
    ) -> SandboxResult:
        want = {"user": self._userns, "net": iso.network and not limits.network, "mnt": iso.tmp, "pid": iso.pid}
        report = await self._spawn(argv, workdir, cwd, stdin, limits, want, extra_env)
        return self._result(report, limits, iso, started)

    async def _spawn(
        self,
        argv: list[str],
        workdir: Path,
        cwd: Path,
        stdin: str | None,
        limits: SandboxLimits,
        want: dict[str, bool],
        extra_env: Mapping[str, str],
        *,
        probe: bool = False,
    ) -> _Report:
        report = _Report()
        cgroup = None
        if not self.cgroups:
            report.notes.append(_polled_note(self._no_cgroup))
        else:
            try:
                # +2: the bootstrap's own processes (it and the PID namespace's init) are in it too.
                cgroup = RunCgroup.create(max(64, limits.memory_mb), max(1, limits.max_processes) + 2)
                report.notes.append(cgroup.describe())
            except CgroupUnavailable as exc:
                report.no_cgroup = str(exc)
                report.notes.append(_polled_note(report.no_cgroup))
        tmp_dir = "/tmp" if want["mnt"] else str(workdir / ".tmp")
        if not want["mnt"]:
            os.makedirs(tmp_dir, exist_ok=True)
            if self.uid is not None:
                os.chown(tmp_dir, self.uid, self.gid if self.gid is not None else self.uid)
        env = {**_base_env(str(workdir), tmp_dir, self.python), **extra_env}
        cfg = {
            "argv": argv,
            "env": env,
            "workdir": str(workdir),
            "cwd": str(cwd),
            "want": want,
            "drop": [self.uid, self.gid] if self.uid is not None else None,
            "rlimits": self._rlimits(limits, nproc=cgroup is None or cgroup.pids_dir is None or probe),
            "mask": [d for d in MASKED_DIRS if _world_writable(d)],
            "binds": self._binds,
            "hide": self._hide,
            "system": [[d, os.readlink(d) if os.path.islink(d) else None] for d in SYSTEM_DIRS if os.path.lexists(d)],
            "devices": [f"/dev/{d}" for d in DEVICES if os.path.exists(f"/dev/{d}")],
            "etc": [f"/etc/{f}" for f in ETC_FILES if os.path.isfile(f"/etc/{f}")],
            "passwd": _passwd(self.uid, self.gid),
            "disk_mb": max(1, limits.disk_mb),
            "cgroup_procs": cgroup.procs_files if cgroup is not None else [],
            "cgroup_required": not probe,  # the probe showed joining works here
            "parent_pid": os.getpid(),
        }
        watch = RunWatch(max(64, limits.memory_mb), limits.disk_mb, cgroup, None if want["mnt"] else str(workdir))
        r_fd, w_fd = os.pipe()
        cfg["status_fd"] = w_fd
        # The configuration travels on a pipe, not in argv, where any process could read it.
        cfg_r, cfg_w = os.pipe()
        cfg_data = json.dumps(cfg).encode()
        t0 = time.monotonic()
        try:
            proc = await asyncio.create_subprocess_exec(
                sys.executable or "python3", "-I", "-S", "-c", _BOOT, str(cfg_r),
                stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                pass_fds=(w_fd, cfg_r),
                start_new_session=True,  # its own process group, so a kill reaches everything
                env=_base_env(str(workdir), tmp_dir, self.python),
                cwd=str(workdir),
            )  # fmt: skip
        except OSError as exc:
            for fd in (r_fd, w_fd, cfg_r, cfg_w):
                os.close(fd)
            if cgroup is not None:
                cgroup.remove()
            report.exec_error = f"could not start the sandbox: {exc}"
            return report
        os.close(w_fd)
        os.close(cfg_r)
        try:
            await asyncio.to_thread(_write_all, cfg_w, cfg_data)
            await self._supervise(proc, stdin, limits, report, watch)
        finally:
            if proc.returncode is None:  # cancelled or failed while running: leave nothing behind
                _killpg(proc.pid)
                if cgroup is not None:
                    cgroup.kill()
                with contextlib.suppress(BaseException):
                    await asyncio.wait_for(proc.wait(), 5)
            report.elapsed_ms = int((time.monotonic() - t0) * 1000)
            _read_status(r_fd, report)
            os.close(r_fd)
            _final_limits(report, watch)
        report.returncode = proc.returncode
        if not (report.iso or {}).get("pid"):
            # Without a PID namespace, children of the run may outlive it in the process group.
            _killpg(proc.pid)
        return report

    async def _supervise(
        self,
        proc: asyncio.subprocess.Process,
        stdin: str | None,
        limits: SandboxLimits,
        report: _Report,
        watch: RunWatch,
    ) -> None:
        over_cap = asyncio.Event()
        out = _Capture(limits.max_output_bytes, over_cap)
        err = _Capture(limits.max_output_bytes, over_cap)
        assert proc.stdout is not None and proc.stderr is not None
        readers = [asyncio.create_task(out.drain(proc.stdout)), asyncio.create_task(err.drain(proc.stderr))]
        feeder = asyncio.create_task(_feed(proc, stdin)) if stdin is not None else None
        waiter = asyncio.create_task(proc.wait())
        capped = asyncio.create_task(over_cap.wait())
        limited = asyncio.create_task(watch.exceeded(proc.pid))
        try:
            done, _ = await asyncio.wait(
                {waiter, capped, limited}, timeout=limits.timeout_s, return_when=asyncio.FIRST_COMPLETED
            )
            if waiter not in done:
                if capped in done:
                    report.stopped = "output_limit"
                elif limited in done:
                    report.stopped = limited.result()
                else:
                    report.stopped = "timeout"
                report.killed = True
                _killpg(proc.pid)
                if watch.cgroup is not None:
                    watch.cgroup.kill()  # also what left the process group
                await waiter
            # Output still in flight is read until EOF, but not forever: a process that escaped
            # the group could hold the pipe open.
            await asyncio.wait(readers, timeout=2.0)
        finally:
            for task in (*readers, capped, limited, waiter, *([feeder] if feeder else [])):
                if not task.done():
                    task.cancel()
            await asyncio.gather(
                *readers, capped, limited, waiter, *([feeder] if feeder else []), return_exceptions=True
            )
        report.stdout, report.stderr = out.text(), err.text()
        report.stdout_tail, report.stderr_tail = out.tail_text(), err.tail_text()
        report.truncated = out.truncated or err.truncated
        if report.truncated and report.stopped is None and capped.done():
            report.stopped = "output_limit"

    def _rlimits(self, limits: SandboxLimits, *, nproc: bool = True) -> dict[str, list[int]]:
        """The per-process limits; RLIMIT_NPROC only when no pids cgroup bounds the run (it is per uid)."""
        mem = max(64, limits.memory_mb) * 1024 * 1024
        fsize = max(1, limits.max_file_mb) * 1024 * 1024
        procs = max(1, limits.max_processes)
        if self.uid is None and nproc:
            # RLIMIT_NPROC counts every process of the real uid, so as the current user the
            # limit has to leave room for the processes the user already runs.
            procs += _count_processes(os.getuid())
        cpu = max(1, int(limits.cpu_s))
        rlimits = {
            "RLIMIT_CORE": [0, 0],
            "RLIMIT_CPU": [cpu, cpu + 1],
            "RLIMIT_AS": [mem, mem],
            "RLIMIT_FSIZE": [fsize, fsize],
        }
        if nproc:
            rlimits["RLIMIT_NPROC"] = [procs, procs]
        return rlimits

    def _result(self, report: _Report, limits: SandboxLimits, iso: Isolation, started: float) -> SandboxResult:
        got = report.iso or {}
        notes = list(iso.notes) + [n for n in report.notes if n not in iso.notes]
        if limits.network:
            notes.append("network allowed by the limits (network=True)")
        elif not got.get("net"):
            notes.append("no network namespace: the code can reach the network")
        if not got.get("tmp"):
            notes.append("no private /tmp: the code can write to the world-writable directories it can reach")
        if not got.get("pid"):
            notes.append("no PID namespace: a process that leaves the process group can outlive the run")
            if not iso.user and not self._root and not process_is_private():
                notes.append("no PID namespace and this process is dumpable: the code, run as the same user, can "
                             "read its environment and memory in /proc (make_process_private() closes them)")
        if not got.get("fs"):
            notes.append("no private root: the code can read every host file its uid may read")
        if not got.get("disk"):
            notes.append("no run tmpfs: the workdir's size is polled (a burst between polls gets through) "
                         "and files written outside it are not counted")
        exit_code, sig = report.exit_code, report.signal
        if exit_code is None and sig is None and report.returncode is not None and not report.stopped:
            # The bootstrap died without reporting: use its own status.
            exit_code, sig = (report.returncode, None) if report.returncode >= 0 else (None, -report.returncode)
        stopped, detail = report.stopped, ""
        if stopped == "timeout":
            detail = f"wall-clock timeout after {limits.timeout_s:g}s; the process group was killed"
        elif stopped == "output_limit":
            detail = f"output over {limits.max_output_bytes} bytes; the process group was killed"
        elif stopped in ("memory_limit", "disk_limit"):
            detail = report.limit_detail
        elif report.exec_error:
            stopped, detail = "setup_error", report.exec_error
        elif report.disk_full:
            peak = (report.disk_peak_kb or 0) / 1024
            stopped = "disk_limit"
            detail = (
                f"the run's files filled its {limits.disk_mb} MB disk (peak {peak:.0f} MB); writes failed with ENOSPC"
            )
        else:
            stopped, detail = _classify_end(exit_code, sig, report, limits)
        killed = report.killed or stopped in ("timeout", "output_limit")
        return SandboxResult(
            exit_code=exit_code if not killed else None,
            signal=sig if not killed else signal.SIGKILL,
            stdout=report.stdout,
            stderr=report.stderr,
            timed_out=stopped == "timeout",
            stopped_reason=stopped,
            stop_detail=detail,
            elapsed_ms=int((time.monotonic() - started) * 1000),
            truncated=report.truncated,
            network_isolated=bool(got.get("net")) and not limits.network,
            user_isolated=self.uid is not None and bool(got.get("dropped")),
            tmp_isolated=bool(got.get("tmp")),
            pid_isolated=bool(got.get("pid")),
            fs_isolated=bool(got.get("fs")),
            isolation_notes=tuple(notes),
            cpu_ms=report.cpu_ms,
            max_rss_kb=report.max_rss_kb,
            memory_peak_kb=report.memory_peak_kb,
            disk_peak_kb=report.disk_peak_kb,
        )


# -------------------------------------------------------------------- helpers


def _polled_note(why: str) -> str:
    return (
        f"no cgroup for the run ({why}): its total memory is polled every 50 ms and the run killed above "
        "the limit (weaker: a burst between polls gets through; RLIMIT_NPROC is shared by all runs of the uid)"
    )


def _final_limits(report: _Report, watch: RunWatch) -> None:
    """After the run: a limit it crossed since the last poll, its peaks, and its cgroup removed."""
    reason = watch.check(None)
    if reason and report.stopped is None:
        report.stopped = reason  # e.g. the kernel killed a child at the memory limit and the parent exited 0
    report.memory_peak_kb = watch.peak_memory_kb
    if watch.peak_disk_kb is not None and report.disk_peak_kb is None:
        report.disk_peak_kb = watch.peak_disk_kb
    report.limit_detail = watch.detail
    if watch.cgroup is not None and not watch.cgroup.remove():
        report.notes.append(f"the run's cgroup {watch.cgroup.memory_dir} could not be removed")


@dataclass
class _Report:
    """What the bootstrap and the pipes told us about one run (internal)."""

    stdout: str = ""
    stderr: str = ""
    stdout_tail: str = ""
    stderr_tail: str = ""
    truncated: bool = False
    stopped: str | None = None
    returncode: int | None = None
    exit_code: int | None = None
    signal: int | None = None
    cpu_ms: int | None = None
    max_rss_kb: int | None = None
    exec_error: str | None = None
    iso: dict[str, bool] | None = None
    notes: list[str] = field(default_factory=list)
    elapsed_ms: int = 0
    killed: bool = False  # the sandbox killed the run (timeout, output or a whole-run limit)
    no_cgroup: str = ""  # why the run got no cgroup, if it did not
    memory_peak_kb: int | None = None
    disk_peak_kb: int | None = None
    disk_full: bool = False
    limit_detail: str = ""


class _Capture:
    """Reads a stream incrementally, keeping the first `cap` bytes and a short tail."""

    def __init__(self, cap: int, over: asyncio.Event) -> None:
        self.cap, self.over = cap, over
        self.head = bytearray()
        self.tail = bytearray()
        self.truncated = False

    async def drain(self, stream: asyncio.StreamReader) -> None:
        while chunk := await stream.read(65536):
            room = self.cap - len(self.head)
            if room > 0:
                self.head += chunk[:room]
            if len(chunk) > room:
                self.truncated = True
                self.over.set()
            self.tail = (self.tail + chunk)[-_TAIL_BYTES:]

    def text(self) -> str:
        return self.head.decode("utf-8", errors="replace")

    def tail_text(self) -> str:
        return self.tail.decode("utf-8", errors="replace")


async def _feed(proc: asyncio.subprocess.Process, data: str) -> None:
    assert proc.stdin is not None
    try:
        proc.stdin.write(data.encode("utf-8"))
        await proc.stdin.drain()
    except (BrokenPipeError, ConnectionResetError):
        pass  # the program did not read all of its input: not our failure
    finally:
        with contextlib.suppress(Exception):
            proc.stdin.close()


def _read_status(fd: int, report: _Report) -> None:
    """Parse the bootstrap's JSON lines (non-blocking: a stray writer must not hang us)."""
    os.set_blocking(fd, False)
    data = bytearray()
    with contextlib.suppress(BlockingIOError, OSError):
        while chunk := os.read(fd, 65536):
            data += chunk
            if len(data) > 1 << 20:
                break
    for line in data.decode("utf-8", errors="replace").splitlines():
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if "iso" in msg:
            report.iso = msg["iso"]
            report.notes.extend(msg.get("notes", []))
        if "exec_error" in msg:
            report.exec_error = str(msg["exec_error"])
        if "exit" in msg or "signal" in msg:
            report.exit_code, report.signal = msg.get("exit"), msg.get("signal")
            report.cpu_ms, report.max_rss_kb = msg.get("cpu_ms"), msg.get("maxrss_kb")
            report.disk_peak_kb, report.disk_full = msg.get("disk_peak_kb"), bool(msg.get("disk_full"))


def _classify_end(
    exit_code: int | None, sig: int | None, report: _Report, limits: SandboxLimits
) -> tuple[str | None, str]:
    """Why a run that ended by itself ended, when it was a limit (best effort, with the evidence)."""
    cpu_ms = report.cpu_ms or 0
    if sig == signal.SIGXCPU:
        return "cpu_limit", f"SIGXCPU after {cpu_ms / 1000:.1f}s of CPU (limit {limits.cpu_s}s)"
    if sig == signal.SIGKILL and cpu_ms >= limits.cpu_s * 1000 - 50:
        return "cpu_limit", f"SIGKILL at the hard CPU limit after {cpu_ms / 1000:.1f}s of CPU"
    if exit_code not in (0, None) or sig is not None:
        tail = report.stderr_tail
        for marker in _MEMORY_MARKERS:
            if marker in tail:
                return "memory_limit", f"{marker!r} in stderr under a {limits.memory_mb} MB address-space limit"
        rss_mb = (report.max_rss_kb or 0) / 1024
        if sig in (signal.SIGSEGV, signal.SIGKILL, signal.SIGABRT, signal.SIGBUS) and rss_mb >= limits.memory_mb / 2:
            return (
                "memory_limit",
                f"killed by {signal.Signals(sig).name} with {rss_mb:.0f} MB resident "
                f"under a {limits.memory_mb} MB limit",
            )
    if sig is not None:
        name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else str(sig)
        return "signal", f"killed by {name}"
    return None, ""


def _setup_error(message: str, iso: Isolation) -> SandboxResult:
    return SandboxResult(
        exit_code=None, signal=None, stdout="", stderr=message, stopped_reason="setup_error",
        stop_detail=message, isolation_notes=iso.notes,
    )  # fmt: skip


def _base_env(home: str, tmp: str, python: str) -> dict[str, str]:
    """The whole environment of a run: nothing is inherited from the parent."""
    bin_dir = os.path.dirname(os.path.abspath(python))
    return {
        "PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin",
        "HOME": home,
        "TMPDIR": tmp,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",  # output arrives as it is written, so a killed run still shows it
        "PYTHONIOENCODING": "utf-8",
        "PYTHONNOUSERSITE": "1",
        "TERM": "dumb",
        "NO_COLOR": "1",
    }


def _inside(root: Path, rel: str) -> Path:
    """`root/rel`, refusing absolute paths and `..` escapes."""
    p = Path(rel)
    if p.is_absolute() or ".." in p.parts or not rel.strip():
        raise ValueError(f"path must be relative and stay inside the workdir: {rel!r}")
    target = root / p
    if not target.resolve().is_relative_to(root.resolve()):
        raise ValueError(f"path escapes the workdir through a symlink: {rel!r}")
    return target


def _chown_tree(root: Path, uid: int, gid: int) -> None:
    os.lchown(root, uid, gid)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in (*dirnames, *filenames):
            os.lchown(os.path.join(dirpath, name), uid, gid)


def _force_rmtree(path: Path) -> None:
    """Remove a workdir even when the code made parts of it unreadable (as a non-root user)."""

    def retry(func: Callable[[str], object], p: str, _exc: object) -> None:
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(p), 0o700)
            os.chmod(p, 0o700)
            func(p)

    shutil.rmtree(path, onerror=retry)  # onexc is 3.12+
    if path.exists():
        shutil.rmtree(path, ignore_errors=True)


def _remove_made_workdir(making: asyncio.Future[Path]) -> None:
    """Done callback of a workdir made for a run that was cancelled meanwhile."""
    if not making.cancelled() and making.exception() is None:
        _force_rmtree(making.result())


def _killpg(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _world_writable(path: str) -> bool:
    try:
        st = os.stat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and bool(st.st_mode & stat.S_IWOTH)


def _symlink_dirs(path: str) -> list[str]:
    """The directories of every hop of a symlink chain (a venv's python points into the base install)."""
    dirs: list[str] = []
    current = os.path.abspath(path)
    for _ in range(20):
        dirs.append(os.path.dirname(current))
        if not os.path.islink(current):
            break
        target = os.readlink(current)
        current = os.path.normpath(os.path.join(os.path.dirname(current), target))
    return dirs


def _within(path: str, roots: Sequence[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def _outermost(paths: Sequence[str]) -> list[str]:
    """`paths` without those inside another one of them."""
    kept: list[str] = []
    for p in sorted(set(paths), key=lambda q: (q.count("/"), q)):
        if not _within(p, kept):
            kept.append(p)
    return sorted(kept)


def _root_plan(layout: Mapping[str, Sequence[str]], python: str, site_packages: bool) -> tuple[list[str], list[str]]:
    """What a run's root holds of the interpreter: (paths bound read-only, directories hidden in them).

    Always the base installation (standard library, shared library) and the executable's
    symlink chain; the venv file so the interpreter knows its prefix. With `site_packages` also
    the venv and every package directory on the import path, but never other import-path entries
    (an editable install points into a source checkout).
    """
    norm = lambda ps: [os.path.normpath(os.path.abspath(p)) for p in ps if p]  # noqa: E731
    sites = {p for p in norm([*layout.get("sites", []), *layout.get("path", [])]) if os.path.basename(p) in _SITE_DIRS}
    for lib in norm(layout.get("stdlib", [])):  # a base install keeps its own package directory in the stdlib's
        sites.update(os.path.join(lib, d) for d in _SITE_DIRS)
    sites = {p for p in sites if os.path.isdir(p)}
    binds = [*norm(layout.get("base", [])), *_symlink_dirs(python), *norm(layout.get("files", []))]
    if site_packages:
        binds += [*norm(layout.get("prefixes", [])), *sites]
    binds = _outermost([p for p in binds if os.path.exists(p) and not _within(p, SYSTEM_DIRS)])
    hide = [] if site_packages else _outermost([p for p in sites if _within(p, [*binds, *SYSTEM_DIRS])])
    return binds, hide


def _passwd(uid: int | None, gid: int | None) -> str:
    """The run's /etc/passwd: root, nobody and the uid the code runs as (tools look themselves up)."""
    lines = {0: "root:x:0:0:root:/root:/bin/sh", SANDBOX_UID: f"nobody:x:{SANDBOX_UID}:{SANDBOX_UID}:nobody:/:/bin/sh"}
    if uid is not None and uid not in lines:
        lines[uid] = f"sandbox:x:{uid}:{gid if gid is not None else uid}:sandbox:/:/bin/sh"
    return "\n".join(lines.values()) + "\n"


def _write_all(fd: int, data: bytes) -> None:
    """Write `data` to a pipe and close it (the reader may be gone: not our failure)."""
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    except OSError:
        pass
    finally:
        os.close(fd)


def _count_processes(uid: int) -> int:
    count = 0
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                with contextlib.suppress(OSError):
                    if entry.stat().st_uid == uid:
                        count += 1
    return count


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


# -------------------------------------------------------------------- the bootstrap

# Runs as a separate process (this interpreter, -I -S: no site, no environment, no cwd on
# sys.path) so that no namespace or privilege change ever happens in the caller's process, and
# no preexec_fn runs in a multi-threaded parent. It is trusted code; the untrusted program is
# only what it finally execs. Its configuration arrives as JSON on the fd named by argv[1] (argv
# stays free of it: the code can read /proc/1/cmdline). Protocol: JSON lines on the status fd ("iso" after the setup,
# "exec_error" if the exec failed, "exit"/"signal" with CPU and memory use at the end).
_BOOT = r"""
import ctypes, fcntl, json, os, platform, resource, shutil, signal, socket, struct, sys

cfg_fd = int(sys.argv[1])
with os.fdopen(cfg_fd, "rb") as cfg_file:
    cfg = json.loads(cfg_file.read())
status_fd = cfg["status_fd"]
os.set_inheritable(status_fd, False)  # pass_fds made it inheritable: the program must not get it
notes = []
iso = {"user": False, "net": False, "mnt": False, "pid": False, "tmp": False, "proc": False, "fs": False,
       "dropped": False, "cgroup": False, "disk": False}
CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x20000, 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS = 1, 38
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "i686": 217, "armv7l": 218}.get(platform.machine())

libc = ctypes.CDLL(None, use_errno=True)
libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
libc.unshare.argtypes = [ctypes.c_int]
libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]


def emit(obj):
    try:
        os.write(status_fd, (json.dumps(obj) + "\n").encode())
    except OSError:
        pass


def failed(what):
    notes.append(what + ": " + os.strerror(ctypes.get_errno()))
    return False


def unshare(flag, what):
    return libc.unshare(flag) == 0 or failed("unshare(" + what + ")")


def mount(src, target, fstype, flags, data, what):
    enc = lambda s: s.encode() if isinstance(s, str) else s
    ok = libc.mount(enc(src), enc(target), enc(fstype), flags, enc(data)) == 0
    return ok or failed(what)


def loopback_up():
    # A private loopback: local servers inside the run work, the host's are unreachable.
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        req = struct.pack("16sH22x", b"lo", 0)
        flags = struct.unpack("16sH22x", fcntl.ioctl(s, 0x8913, req))[1]  # SIOCGIFFLAGS
        fcntl.ioctl(s, 0x8914, struct.pack("16sH22x", b"lo", flags | 1))  # SIOCSIFFLAGS, IFF_UP
    except OSError as exc:
        notes.append("loopback not brought up: " + str(exc))
    finally:
        s.close()


def fill_workdir(path, src_fd, owner):
    # The prepared files, copied from the host workdir into the run's tmpfs (they count toward its disk).
    os.mkdir(path, 0o700)
    shutil.copytree("/proc/self/fd/%d" % src_fd, path, symlinks=True, dirs_exist_ok=True)
    if owner:
        os.lchown(path, owner[0], owner[1])
        for dirpath, dirnames, filenames in os.walk(path):
            for name in dirnames + filenames:
                os.lchown(os.path.join(dirpath, name), owner[0], owner[1])
    return os.open(path, os.O_RDONLY | os.O_DIRECTORY)


libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # the caller died: so do we
if os.getppid() != cfg["parent_pid"]:
    os._exit(111)
# Join the run's cgroups before anything else, so every process of the run is counted in them.
for path in cfg["cgroup_procs"]:
    try:
        with open(path, "w") as f:
            f.write(str(os.getpid()))
    except OSError as exc:
        notes.append("cannot join the run's cgroup %s: %s" % (path, exc))
        if cfg["cgroup_required"]:
            emit({"exec_error": "could not join the run's cgroup %s: %s" % (path, exc)})
            os._exit(125)
        break
else:
    iso["cgroup"] = bool(cfg["cgroup_procs"])
want = cfg["want"]
uid0, gid0 = os.getuid(), os.getgid()
if want["user"] and unshare(CLONE_NEWUSER, "user namespace"):
    try:
        for name, text in (("setgroups", "deny"), ("uid_map", "0 %d 1" % uid0), ("gid_map", "0 %d 1" % gid0)):
            with open("/proc/self/" + name, "w") as f:
                f.write(text)
        iso["user"] = True
    except OSError as exc:
        notes.append("user namespace maps: " + str(exc))
if want["net"] and unshare(CLONE_NEWNET, "network namespace"):
    iso["net"] = True
    loopback_up()
if want["mnt"] and unshare(CLONE_NEWNS, "mount namespace"):
    # Nothing is mounted unless the tree is private: a mount must never leak to the host.
    iso["mnt"] = mount(None, "/", None, MS_REC | MS_PRIVATE, None, "making mounts private")
if want["pid"] and unshare(CLONE_NEWPID, "pid namespace"):
    iso["pid"] = True
    child = os.fork()
    if child:
        # The outer process only waits: the child is PID 1 of the new namespace, and when it
        # exits the kernel kills every process left in the namespace.
        _, st = os.waitpid(child, 0)
        os._exit(os.waitstatus_to_exitcode(st) & 0xFF)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)

def bind(src, target, what, readonly=True, flags=MS_NOSUID | MS_NODEV, rec=0):
    # Not recursive by default: the workdir's mount point is under the new root by then.
    if os.path.isdir(src):
        os.makedirs(target, 0o755, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), 0o755, exist_ok=True)
        if not os.path.exists(target):
            os.close(os.open(target, os.O_WRONLY | os.O_CREAT, 0o644))
    if not mount(src, target, None, MS_BIND | rec, None, what):
        return False
    remount = MS_REMOUNT | MS_BIND | MS_RDONLY | flags
    return not readonly or mount(None, target, None, remount, None, "read-only " + what)


def build_root(root, wfd):
    global run_fd
    # A new root on an empty tmpfs at `root` (the workdir's path): only what the run needs,
    # read-only. All or nothing: when a step fails before the switch, the tmpfs is detached again
    # and the run goes on in the host's tree (reported: no private root, no private /tmp).
    if not mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "size=16m,mode=0755", "the new root"):
        return False
    try:
        ok = populate(root, wfd)
    except OSError as exc:
        ok = failed("building the root: %s" % exc)
    if ok:
        os.chdir(root)
        if SYS_PIVOT_ROOT is not None and libc.syscall(SYS_PIVOT_ROOT, b".", b".") == 0:
            # The old root is now stacked on the new one; detaching it leaves nothing of the host.
            if libc.umount2(b".", MNT_DETACH) == 0:
                os.chdir("/")
                return True
            failed("detaching the old root")
            emit({"exec_error": "could not leave the host's root: " + notes[-1]})
            os._exit(111)  # half-switched: never run the code
        notes.append("pivot_root unavailable: chroot instead")
        try:
            os.chroot(root)
            os.chdir("/")
            return True
        except OSError as exc:
            notes.append("chroot: %s" % exc)
            os.chdir("/")
    libc.umount2(root.encode(), MNT_DETACH)
    iso["tmp"] = iso["proc"] = iso["disk"] = False
    if run_fd is not None:  # the run's tmpfs went with the root: the workdir's size is polled instead
        os.close(run_fd)
        run_fd = None
    return False


def populate(root, wfd):
    global run_fd, work_fd
    # One tmpfs the size of the disk limit holds everything the run can write (its workdir and
    # its private /tmp, /var/tmp, ...), so the run's files are bounded in total, not per file or
    # directory. It is mounted at root/.run only long enough to bind its parts into place.
    run = root + "/.run"
    os.makedirs(run, 0o700)
    if not mount("tmpfs", run, "tmpfs", MS_NOSUID | MS_NODEV, "size=%dm,mode=0755" % cfg["disk_mb"], "the run's tmpfs"):
        return False
    run_fd = os.open(run, os.O_RDONLY | os.O_DIRECTORY)
    try:
        work_fd = fill_workdir(run + "/work", wfd, cfg["drop"])
    except (OSError, shutil.Error) as exc:
        vfs = os.fstatvfs(run_fd)
        if vfs.f_bavail * vfs.f_frsize < 65536:
            why = "the workdir's files do not fit the run's %d MB disk limit" % cfg["disk_mb"]
        else:
            why = "could not copy the workdir into the run's tmpfs: %s" % exc
        emit({"exec_error": why})
        os._exit(125)
    masked = []
    for i, d in enumerate(cfg["mask"]):  # first: an interpreter or workdir under /tmp is bound inside the private one
        part = run + "/t%d" % i
        os.mkdir(part)
        os.chmod(part, 0o1777)
        if bind(part, root + d, "private " + d, readonly=False):
            masked.append(d)
    iso["tmp"] = len(masked) == len(cfg["mask"])
    ok = True
    for d, link in cfg["system"]:
        if link is not None:
            os.symlink(link, root + d)
        else:
            ok = bind(d, root + d, "binding " + d) and ok
    for p in cfg["binds"]:
        ok = bind(p, root + p, "binding " + p) and ok
    for p in cfg["hide"]:
        hidden = mount("tmpfs", root + p, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV, "size=4k,mode=0755", "hiding " + p)
        ok = hidden and ok
    os.makedirs(root + "/dev", 0o755, exist_ok=True)
    for dev in cfg["devices"]:
        ok = bind(dev, root + dev, "binding " + dev, flags=MS_NOSUID) and ok
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                         ("stderr", "/proc/self/fd/2")):
        os.symlink(target, root + "/dev/" + name)
    os.makedirs(root + "/etc", 0o755)
    for f in cfg["etc"]:
        bind(f, root + f, "binding " + f)
    for name, text in (("passwd", cfg["passwd"]), ("group", "root:x:0:\nnogroup:x:65534:\n"),
                       ("hosts", "127.0.0.1 localhost\n::1 localhost\n")):
        with open(root + "/etc/" + name, "w") as f:
            f.write(text)
    os.makedirs(root + workdir, 0o700, exist_ok=True)
    ok = bind("/proc/self/fd/%d" % work_fd, root + workdir, "binding the workdir", readonly=False) and ok
    # The parts are bound; the tmpfs itself leaves the run's view (run_fd still measures it).
    ok = (libc.umount2(run.encode(), MNT_DETACH) == 0 or failed("detaching the run's tmpfs")) and ok
    iso["disk"] = ok
    os.makedirs(root + "/proc", 0o555)
    # A /proc of the run's own PID namespace: the code cannot see (or signal) host processes.
    iso["proc"] = mount("proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None, "private /proc")
    if not iso["proc"]:
        ok = bind("/proc", root + "/proc", "binding /proc", readonly=False, rec=MS_REC) and ok
    return mount(None, root, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, None, "read-only root") and ok


workdir = cfg["workdir"]
wfd = os.open(workdir, os.O_RDONLY | os.O_DIRECTORY)  # before a mount can hide it
run_fd = work_fd = None
if iso["mnt"]:
    iso["fs"] = build_root(workdir, wfd)
os.close(wfd)
if work_fd is not None:
    os.close(work_fd)
drop = cfg["drop"]
iso["dropped"] = bool(drop) and os.geteuid() == 0 and not iso["user"]
emit({"iso": iso, "notes": notes})

if run_fd is not None:
    # Woken by a child's exit, or every 50 ms to sample how full the run's tmpfs is.
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGCHLD])
target = os.fork()
if target == 0:
    try:
        signal.pthread_sigmask(signal.SIG_SETMASK, [])  # the program must not inherit the blocked SIGCHLD
        os.chdir(cfg["cwd"])
        for name, (soft, hard) in cfg["rlimits"].items():
            try:
                resource.setrlimit(getattr(resource, name), (soft, hard))
            except (ValueError, OSError) as exc:
                os.write(2, ("sandbox: could not set %s: %s\n" % (name, exc)).encode())
        if iso["dropped"]:
            os.setgroups([])
            os.setresgid(drop[1], drop[1], drop[1])
            os.setresuid(drop[0], drop[0], drop[0])
        libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)  # setuid binaries cannot raise privileges
        for sig in (signal.SIGPIPE, signal.SIGXFSZ):
            signal.signal(sig, signal.SIG_DFL)  # Python ignores these; the program should not inherit that
        argv = cfg["argv"]
        os.execvpe(argv[0], argv, cfg["env"])
    except BaseException as exc:
        emit({"exec_error": "cannot run %r: %s: %s" % (cfg["argv"][0], type(exc).__name__, exc)})
        try:
            os.write(2, ("sandbox: cannot run %r: %s\n" % (cfg["argv"][0], exc)).encode())
        finally:
            os._exit(127)
status = rusage = None
disk = {"peak": 0, "full": False}


def sample_disk():
    if run_fd is not None:
        vfs = os.fstatvfs(run_fd)
        disk["peak"] = max(disk["peak"], (vfs.f_blocks - vfs.f_bfree) * vfs.f_frsize)
        disk["full"] = disk["full"] or vfs.f_bavail * vfs.f_frsize < 65536  # ENOSPC was (or is about to be) hit


while True:
    sample_disk()
    try:
        pid, st, ru = os.wait4(-1, os.WNOHANG if run_fd is not None else 0)
    except ChildProcessError:
        break
    if pid == 0:
        signal.sigtimedwait([signal.SIGCHLD], 0.05)
        continue
    if pid == target:
        status, rusage = st, ru
        break
sample_disk()
if status is not None:
    out = {"exit": None, "signal": None}
    if os.WIFSIGNALED(status):
        out["signal"] = os.WTERMSIG(status)
    else:
        out["exit"] = os.WEXITSTATUS(status)
    out["cpu_ms"] = int((rusage.ru_utime + rusage.ru_stime) * 1000)
    out["maxrss_kb"] = rusage.ru_maxrss
    if run_fd is not None:
        out["disk_peak_kb"], out["disk_full"] = disk["peak"] // 1024, disk["full"]
    emit(out)
os._exit(0)
"""
