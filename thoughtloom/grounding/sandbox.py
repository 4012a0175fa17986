"""Run untrusted (model-generated) code in a contained subprocess and report what happened.

Each run gets a fresh working directory (removed afterwards), a minimal explicit environment
(never the parent's), resource limits (CPU, address space, processes, file size, no core
dumps), a wall-clock timeout that kills everything the run started, and a cap on captured
output. Where the kernel allows it the run also gets its own network namespace (no network;
a private loopback only), mount namespace (a private /tmp, /var/tmp, /dev/shm, /run/lock and a
hidden home) and PID namespace (it sees only its own processes, and when it ends every process
it forked dies with it). As root the code runs as an unprivileged uid (65534 by default),
because RLIMIT_NPROC and file permissions do not bind root.

How: the sandbox starts a small trusted bootstrap (`_BOOT`, run by this interpreter with -I -S)
that unshares the namespaces, mounts the private directories, forks the code as a child (with
the limits set and privileges dropped just before exec), waits for it and reports its status,
CPU time and peak memory on a private pipe the code cannot write to. Every isolation step that
fails is skipped and reported (`SandboxResult.isolation_notes`), never fatal.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import shutil
import signal
import stat
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

SANDBOX_UID = 65534  # "nobody" on Debian-like systems
MAIN_SCRIPT = "main.py"  # the file run_python writes the code to
COPY_IGNORE = (".git", ".venv", "__pycache__", "node_modules", ".pytest_cache", ".mypy_cache", ".ruff_cache")
MASKED_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")  # world-writable places outside the workdir
_MEMORY_MARKERS = ("MemoryError", "Cannot allocate memory", "std::bad_alloc", "out of memory")
_TAIL_BYTES = 4096  # how much of each stream's end is kept for diagnosis even when output is capped


@dataclass(frozen=True, slots=True)
class SandboxLimits:
    """Resource limits for one run."""

    timeout_s: float = 10.0  # wall clock
    cpu_s: int = 10  # RLIMIT_CPU (SIGXCPU at the limit, SIGKILL one second later)
    memory_mb: int = 1024  # RLIMIT_AS (address space, so allocations fail with MemoryError)
    max_output_bytes: int = 65536  # per stream (stdout, stderr); the run is killed beyond it
    max_processes: int = 64  # RLIMIT_NPROC (binds only a non-root uid)
    max_file_mb: int = 64  # RLIMIT_FSIZE per file; also the size of each private tmpfs
    network: bool = False  # True: no network namespace (the run shares the host's network)


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
    notes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class SandboxResult:
    """What one sandboxed run did.

    `stopped_reason` is None when the program ended by itself (any exit code), else one of
    "timeout", "cpu_limit", "memory_limit", "output_limit", "signal", "syntax_error",
    "setup_error"; `stop_detail` says how it was detected.
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
    isolation_notes: tuple[str, ...] = ()
    cpu_ms: int | None = None
    max_rss_kb: int | None = None

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
        }


def check_syntax(code: str, filename: str = MAIN_SCRIPT) -> SyntaxCheck:
    """Compile `code` without running it; report the first syntax error and its line."""
    try:
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
    ) -> None:
        self.limits = limits
        self.namespaces = namespaces  # False: limits and uid only (for machines or tests without them)
        self.python = python or "python3"
        self._root = os.geteuid() == 0
        # Only root can switch uid; a non-root sandbox runs as the current user (reported).
        self.uid = uid if (self._root and uid is not None) else None
        self.gid = (gid if gid is not None else self.uid) if self.uid is not None else None
        self.base_dir = str(base_dir) if base_dir is not None else tempfile.gettempdir()
        self._iso: Isolation | None = None
        self._expose: list[tuple[str, list[str]]] = []
        self._keep: list[str] = []
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
        paths = await self._interpreter_paths(notes)
        if self.uid is not None:
            # Directories of the interpreter the sandbox uid cannot reach (e.g. under a 0700 /root):
            # in the run's mount namespace each hiding ancestor gets an empty tmpfs with only the
            # interpreter's directories bind-mounted back read-only, so the code runs this exact
            # interpreter but cannot see the rest (e.g. the rest of the home directory).
            self._expose = _exposure_plan(paths, self.uid, self.gid if self.gid is not None else self.uid, notes)
        # An interpreter (a venv) under /tmp would vanish behind the private /tmp: bound back read-only.
        self._keep = _under_masked(paths)
        ns = self.namespaces
        want = {"user": ns and not self._root, "net": ns, "mnt": ns, "pid": ns}
        if not ns:
            notes.append("namespaces disabled: no network, /tmp or PID isolation")
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
            )
        finally:
            _force_rmtree(workdir)
        got = report.iso or {}
        self._userns = bool(got.get("user"))
        notes.extend(report.notes)
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
            notes=tuple(notes),
        )

    async def _interpreter_paths(self, notes: list[str]) -> list[str]:
        """The directories this interpreter runs from: its prefixes, sys.path, its symlinks' targets."""
        code = "import sys, json; print(json.dumps([sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, *sys.path]))"
        try:
            proc = await asyncio.create_subprocess_exec(
                self.python, "-s", "-c", code,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL, stdin=asyncio.subprocess.DEVNULL,
                env=_base_env("/", "/tmp", self.python), cwd="/",
            )  # fmt: skip
            out, _ = await asyncio.wait_for(proc.communicate(), 20)
            paths = [p for p in json.loads(out) if p]
        except (OSError, ValueError, TimeoutError) as exc:
            notes.append(f"could not ask {self.python} for its paths: {exc}")
            paths = []
        return paths + _symlink_dirs(self.python)

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
    ) -> _Report:
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
            "rlimits": self._rlimits(limits),
            "mask": [d for d in MASKED_DIRS if _world_writable(d)],
            "expose": self._expose,
            "keep": self._keep,
            "tmpfs_mb": max(1, limits.max_file_mb),
            "parent_pid": os.getpid(),
        }
        r_fd, w_fd = os.pipe()
        cfg["status_fd"] = w_fd
        report = _Report()
        t0 = time.monotonic()
        try:
            proc = await asyncio.create_subprocess_exec(
                sys.executable or "python3", "-I", "-S", "-c", _BOOT, json.dumps(cfg),
                stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                pass_fds=(w_fd,),
                start_new_session=True,  # its own process group, so a kill reaches everything
                env=_base_env(str(workdir), tmp_dir, self.python),
                cwd=str(workdir),
            )  # fmt: skip
        except OSError as exc:
            os.close(r_fd)
            os.close(w_fd)
            report.exec_error = f"could not start the sandbox: {exc}"
            return report
        os.close(w_fd)
        try:
            await self._supervise(proc, stdin, limits, report)
        finally:
            if proc.returncode is None:  # cancelled or failed while running: leave nothing behind
                _killpg(proc.pid)
                with contextlib.suppress(BaseException):
                    await asyncio.wait_for(proc.wait(), 5)
            report.elapsed_ms = int((time.monotonic() - t0) * 1000)
            _read_status(r_fd, report)
            os.close(r_fd)
        report.returncode = proc.returncode
        if not (report.iso or {}).get("pid"):
            # Without a PID namespace, children of the run may outlive it in the process group.
            _killpg(proc.pid)
        return report

    async def _supervise(
        self, proc: asyncio.subprocess.Process, stdin: str | None, limits: SandboxLimits, report: _Report
    ) -> None:
        over_cap = asyncio.Event()
        out = _Capture(limits.max_output_bytes, over_cap)
        err = _Capture(limits.max_output_bytes, over_cap)
        assert proc.stdout is not None and proc.stderr is not None
        readers = [asyncio.create_task(out.drain(proc.stdout)), asyncio.create_task(err.drain(proc.stderr))]
        feeder = asyncio.create_task(_feed(proc, stdin)) if stdin is not None else None
        waiter = asyncio.create_task(proc.wait())
        capped = asyncio.create_task(over_cap.wait())
        try:
            done, _ = await asyncio.wait(
                {waiter, capped}, timeout=limits.timeout_s, return_when=asyncio.FIRST_COMPLETED
            )
            if waiter not in done:
                report.stopped = "output_limit" if capped in done else "timeout"
                _killpg(proc.pid)
                await waiter
            # Output still in flight is read until EOF, but not forever: a process that escaped
            # the group could hold the pipe open.
            await asyncio.wait(readers, timeout=2.0)
        finally:
            for task in (*readers, capped, waiter, *([feeder] if feeder else [])):
                if not task.done():
                    task.cancel()
            await asyncio.gather(*readers, capped, waiter, *([feeder] if feeder else []), return_exceptions=True)
        report.stdout, report.stderr = out.text(), err.text()
        report.stdout_tail, report.stderr_tail = out.tail_text(), err.tail_text()
        report.truncated = out.truncated or err.truncated
        if report.truncated and report.stopped is None and capped.done():
            report.stopped = "output_limit"

    def _rlimits(self, limits: SandboxLimits) -> dict[str, list[int]]:
        mem = max(64, limits.memory_mb) * 1024 * 1024
        fsize = max(1, limits.max_file_mb) * 1024 * 1024
        nproc = max(1, limits.max_processes)
        if self.uid is None:
            # RLIMIT_NPROC counts every process of the real uid, so as the current user the
            # limit has to leave room for the processes the user already runs.
            nproc += _count_processes(os.getuid())
        cpu = max(1, int(limits.cpu_s))
        return {
            "RLIMIT_CORE": [0, 0],
            "RLIMIT_CPU": [cpu, cpu + 1],
            "RLIMIT_AS": [mem, mem],
            "RLIMIT_FSIZE": [fsize, fsize],
            "RLIMIT_NPROC": [nproc, nproc],
        }

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
        exit_code, sig = report.exit_code, report.signal
        if exit_code is None and sig is None and report.returncode is not None and not report.stopped:
            # The bootstrap died without reporting: use its own status.
            exit_code, sig = (report.returncode, None) if report.returncode >= 0 else (None, -report.returncode)
        stopped, detail = report.stopped, ""
        if stopped == "timeout":
            detail = f"wall-clock timeout after {limits.timeout_s:g}s; the process group was killed"
        elif stopped == "output_limit":
            detail = f"output over {limits.max_output_bytes} bytes; the process group was killed"
        elif report.exec_error:
            stopped, detail = "setup_error", report.exec_error
        else:
            stopped, detail = _classify_end(exit_code, sig, report, limits)
        return SandboxResult(
            exit_code=exit_code if stopped not in ("timeout", "output_limit") else None,
            signal=sig if stopped not in ("timeout", "output_limit") else signal.SIGKILL,
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
            isolation_notes=tuple(notes),
            cpu_ms=report.cpu_ms,
            max_rss_kb=report.max_rss_kb,
        )


# -------------------------------------------------------------------- helpers


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
    flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    fcntl.fcntl(fd, fcntl.F_SETFL, flags | os.O_NONBLOCK)
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
                f"killed by {signal.Signals(sig).name} with {rss_mb:.0f} MB resident under a {limits.memory_mb} MB limit",
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

    def retry(func, p, _exc):  # type: ignore[no-untyped-def]
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


def _searchable(path: str, uid: int, gid: int) -> bool:
    try:
        st = os.stat(path)
    except OSError:
        return False
    if st.st_uid == uid:
        return bool(st.st_mode & stat.S_IXUSR)
    if st.st_gid == gid:
        return bool(st.st_mode & stat.S_IXGRP)
    return bool(st.st_mode & stat.S_IXOTH)


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


def _exposure_plan(paths: Sequence[str], uid: int, gid: int, notes: list[str]) -> list[tuple[str, list[str]]]:
    """Group the unreachable directories by the first ancestor that hides them from `uid`."""
    plan: dict[str, list[str]] = {}
    for p in sorted({os.path.normpath(os.path.abspath(p)) for p in paths if os.path.isdir(p)}):
        parts = Path(p).parts
        hide = None
        for i in range(2, len(parts) + 1):
            ancestor = str(Path(*parts[:i]))
            if not _searchable(ancestor, uid, gid):
                hide = ancestor
                break
        if hide is None:
            continue
        if hide == p:
            notes.append(f"{p} is not readable by uid {uid}; the code may not be able to use it")
            continue
        kept = plan.setdefault(hide, [])
        if not any(p == q or p.startswith(q + "/") for q in kept):
            kept.append(p)
    return sorted(plan.items())


def _under_masked(paths: Sequence[str]) -> list[str]:
    """The directories among `paths` that lie inside a MASKED_DIR, outermost only."""
    masks = [d for d in MASKED_DIRS if _world_writable(d)]
    normal = {os.path.normpath(os.path.abspath(p)) for p in paths}
    inside = sorted(p for p in normal if os.path.isdir(p) and any(p.startswith(m + "/") for m in masks))
    kept: list[str] = []
    for p in inside:
        if not any(p == q or p.startswith(q + "/") for q in kept):
            kept.append(p)
    return kept


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
# only what it finally execs. Protocol: JSON lines on the status fd ("iso" after the setup,
# "exec_error" if the exec failed, "exit"/"signal" with CPU and memory use at the end).
_BOOT = r"""
import ctypes, fcntl, json, os, resource, signal, socket, struct, sys

cfg = json.loads(sys.argv[1])
status_fd = cfg["status_fd"]
os.set_inheritable(status_fd, False)  # pass_fds made it inheritable: the program must not get it
notes = []
iso = {"user": False, "net": False, "mnt": False, "pid": False, "tmp": False, "proc": False, "dropped": False}
CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x20000, 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 8, 32, 4096, 16384, 1 << 18
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS = 1, 38

libc = ctypes.CDLL(None, use_errno=True)
libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
libc.unshare.argtypes = [ctypes.c_int]
libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]


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


libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # the caller died: so do we
if os.getppid() != cfg["parent_pid"]:
    os._exit(111)
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

workdir = cfg["workdir"]
wfd = os.open(workdir, os.O_RDONLY | os.O_DIRECTORY)  # before a mount can hide it
keep_fds = []
for p in cfg["keep"]:
    try:
        keep_fds.append((p, os.open(p, os.O_RDONLY | os.O_DIRECTORY)))
    except OSError as exc:
        notes.append("cannot keep %s: %s" % (p, exc))
if iso["mnt"]:
    size = "size=%dm" % cfg["tmpfs_mb"]
    masked = [d for d in cfg["mask"] if mount("tmpfs", d, "tmpfs", MS_NOSUID | MS_NODEV, size + ",mode=1777", "private " + d)]
    iso["tmp"] = len(masked) == len(cfg["mask"])
    # The interpreter's own directories under a now-private /tmp, back at their paths, read-only.
    for p, fd in keep_fds:
        os.makedirs(p, 0o755, exist_ok=True)
        if mount("/proc/self/fd/%d" % fd, p, None, MS_BIND, None, "keeping " + p):
            mount(None, p, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, None, "read-only " + p)
    for hide, paths in cfg["expose"]:
        fds = []
        for p in paths:
            try:
                fds.append((p, os.open(p, os.O_RDONLY | os.O_DIRECTORY)))
            except OSError as exc:
                notes.append("cannot expose %s: %s" % (p, exc))
        if not mount("tmpfs", hide, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755", "hiding " + hide):
            continue
        for p, fd in fds:
            os.makedirs(p, 0o755, exist_ok=True)
            if mount("/proc/self/fd/%d" % fd, p, None, MS_BIND, None, "exposing " + p):
                mount(None, p, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, None, "read-only " + p)
            os.close(fd)
        mount(None, hide, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, None, "read-only " + hide)
    # Re-attach the workdir where a private tmpfs now hides it, at the same path.
    st = os.fstat(wfd)
    try:
        cur = os.stat(workdir)
        same = (cur.st_dev, cur.st_ino) == (st.st_dev, st.st_ino)
    except OSError:
        same = False
    if not same:
        os.makedirs(workdir, 0o700, exist_ok=True)
        if not mount("/proc/self/fd/%d" % wfd, workdir, None, MS_BIND, None, "binding the workdir"):
            iso["tmp"] = False
    if iso["pid"]:
        # A /proc for the new PID namespace: the code cannot see (or signal) host processes.
        iso["proc"] = mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None, "private /proc")
os.close(wfd)
for _, fd in keep_fds:
    os.close(fd)
drop = cfg["drop"]
iso["dropped"] = bool(drop) and os.geteuid() == 0 and not iso["user"]
emit({"iso": iso, "notes": notes})

target = os.fork()
if target == 0:
    try:
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
while True:
    try:
        pid, st, ru = os.wait4(-1, 0)
    except ChildProcessError:
        break
    if pid == target:
        status, rusage = st, ru
        break
if status is not None:
    out = {"exit": None, "signal": None}
    if os.WIFSIGNALED(status):
        out["signal"] = os.WTERMSIG(status)
    else:
        out["exit"] = os.WEXITSTATUS(status)
    out["cpu_ms"] = int((rusage.ru_utime + rusage.ru_stime) * 1000)
    out["maxrss_kb"] = rusage.ru_maxrss
    emit(out)
os._exit(0)
"""
