"""A run's limits bound the whole run (every process, every file), not each process or each file.

Built from the attack in issue 12: ten children of 120 MB each under a 200 MB limit, and twenty
60 MB files, must each be stopped and reported as the limit they hit; the host keeps its memory
and disk; the run's cgroups are removed; several runs at once each get their own.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from thoughtloom.grounding.sandbox import Sandbox, SandboxLimits

ROOT = os.geteuid() == 0
LIMITS = SandboxLimits(timeout_s=10, cpu_s=10, memory_mb=512, disk_mb=256)

# Ten children of 120 MB each, every page touched; the parent waits for them and exits 0.
FORK_ATTACK = """
import os, time
kids = []
for _ in range(10):
    pid = os.fork()
    if pid == 0:
        block = bytearray(120 * 1024 * 1024)
        block[::4096] = b"1" * len(block[::4096])
        time.sleep(1.5)
        os._exit(0)
    kids.append(pid)
for pid in kids:
    os.waitpid(pid, 0)
print("all children done")
"""

# Twenty files of 60 MB each, in 1 MB writes.
FILE_ATTACK = """
chunk = b"x" * (1024 * 1024)
for i in range(20):
    with open(f"fill-{i}.bin", "wb") as f:
        for _ in range(60):
            f.write(chunk)
print("wrote 1200 MB")
"""


def cgroups_available() -> bool:
    """Whether this process may create cgroups with a memory controller (root on cgroup v1 or v2)."""
    return ROOT and (os.path.isdir("/sys/fs/cgroup/memory") or _v2_has_memory())


def _v2_has_memory() -> bool:
    try:
        return "memory" in Path("/sys/fs/cgroup/cgroup.controllers").read_text().split()
    except OSError:
        return False


def run_cgroup_dirs(text: str) -> list[Path]:
    """The run's own cgroup directories, from the /proc/self/cgroup text the run printed."""
    found = []
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3 or "thoughtloom-" not in parts[2]:
            continue
        if parts[1]:  # cgroup v1: one hierarchy per controller
            base = Path("/sys/fs/cgroup") / parts[1]
        else:  # cgroup v2: the unified hierarchy (hybrid or pure)
            base = Path("/sys/fs/cgroup/unified") if Path("/sys/fs/cgroup/unified").is_dir() else Path("/sys/fs/cgroup")
        found.append(base / parts[2].strip().lstrip("/"))
    return found


@pytest.fixture(scope="module")
def sandbox() -> Sandbox:
    """One sandbox for the module: each test also shows it survived the previous attacks."""
    return Sandbox(LIMITS)


async def still_works(sandbox: Sandbox) -> None:
    result = await sandbox.run_python("print(6 * 7)")
    assert result.ok and result.stdout == "42\n", result


@pytest.fixture
def host_disk_growth() -> Iterator[list[int]]:
    """Samples how much the host's temporary file system grows while the test runs (max, bytes)."""
    base = Path(os.environ.get("TMPDIR", "/tmp"))
    start = shutil.disk_usage(base).used
    peak = [0]
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], shutil.disk_usage(base).used - start)
            time.sleep(0.02)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    yield peak
    stop.set()
    thread.join(2)


@pytest.mark.skipif(not cgroups_available(), reason="needs root and a cgroup memory controller")
async def test_ten_children_of_120_mb_are_stopped_at_a_200_mb_run_total(sandbox: Sandbox) -> None:
    limits = SandboxLimits(timeout_s=10, cpu_s=10, memory_mb=200)
    result = await sandbox.run_python(FORK_ATTACK, limits=limits)
    assert result.stopped_reason == "memory_limit", result
    assert not result.ok
    assert "all children done" not in result.stdout
    assert result.memory_peak_kb is not None and result.memory_peak_kb <= 200 * 1024
    assert "200 MB" in result.stop_detail
    await still_works(sandbox)


async def test_without_cgroups_the_fork_attack_is_stopped_by_polling() -> None:
    polled = Sandbox(LIMITS, cgroups=False)
    limits = SandboxLimits(timeout_s=10, cpu_s=10, memory_mb=200)
    result = await polled.run_python(FORK_ATTACK, limits=limits)
    assert result.stopped_reason == "memory_limit", result
    assert "all children done" not in result.stdout
    assert result.memory_peak_kb is not None and result.memory_peak_kb > 200 * 1024
    assert any("polled" in note for note in result.isolation_notes)
    await still_works(polled)


async def test_twenty_60_mb_files_stop_at_the_disk_limit(sandbox: Sandbox, host_disk_growth: list[int]) -> None:
    result = await sandbox.run_python(FILE_ATTACK, limits=SandboxLimits(timeout_s=20, cpu_s=20, disk_mb=100))
    assert result.stopped_reason == "disk_limit", result
    assert "wrote 1200 MB" not in result.stdout
    assert result.disk_peak_kb is not None and 90 * 1024 <= result.disk_peak_kb <= 100 * 1024
    assert host_disk_growth[0] < 500 * 1024 * 1024  # the attack wrote 1.2 GB to the host before
    await still_works(sandbox)


@pytest.mark.skipif(not Path("/usr/bin/python3").exists(), reason="needs a system python readable by every user")
async def test_without_a_mount_namespace_the_file_attack_is_stopped_by_polling(host_disk_growth: list[int]) -> None:
    plain = Sandbox(LIMITS, python="/usr/bin/python3", namespaces=False)
    result = await plain.run_python(FILE_ATTACK, limits=SandboxLimits(timeout_s=20, cpu_s=20, disk_mb=100))
    assert result.stopped_reason == "disk_limit", result
    assert "wrote 1200 MB" not in result.stdout
    assert "polled" in result.stop_detail
    assert host_disk_growth[0] < 500 * 1024 * 1024
    assert any("no run tmpfs" in note for note in result.isolation_notes)


async def test_a_program_that_swallows_enospc_is_still_reported_at_the_disk_limit(sandbox: Sandbox) -> None:
    indented = FILE_ATTACK.replace("\n", "\n    ")
    code = f"try:\n{indented}\nexcept OSError as e:\n    print('caught', e.errno)\n"
    result = await sandbox.run_python(code, limits=SandboxLimits(timeout_s=20, cpu_s=20, disk_mb=64))
    assert result.exit_code == 0 and "caught 28" in result.stdout, result
    assert result.stopped_reason == "disk_limit"
    assert not result.ok
    await still_works(sandbox)


async def test_the_private_tmp_shares_the_run_disk_limit(sandbox: Sandbox) -> None:
    # Files split across the workdir and /tmp together meet one limit, not one each.
    iso = await sandbox.isolation()
    if not iso.tmp:
        pytest.skip("no private /tmp here")
    code = (
        "import errno\nchunk = b'x' * (1024 * 1024)\nwritten = 0\n"
        "try:\n"
        "    for path in ('here.bin', '/tmp/there.bin', '/dev/shm/shm.bin'):\n"
        "        with open(path, 'wb') as f:\n"
        "            for _ in range(30):\n"
        "                f.write(chunk)\n"
        "                written += 1\n"
        "except OSError as e:\n"
        "    print('stopped', e.errno)\n"
        "print(written)\n"
    )
    result = await sandbox.run_python(code, limits=SandboxLimits(timeout_s=10, disk_mb=50))
    assert "stopped 28" in result.stdout, result
    assert int(result.stdout.split()[-1]) <= 50  # 90 MB were attempted; one tmpfs of 50 MB for all
    assert result.stopped_reason == "disk_limit"


async def test_workdir_files_larger_than_the_disk_limit_are_a_setup_error(sandbox: Sandbox) -> None:
    if not (await sandbox.isolation()).tmp:
        pytest.skip("no run tmpfs here")
    result = await sandbox.run_python("print('ran')", files={"big.bin": b"\0" * (3 * 1024 * 1024)},
                                      limits=SandboxLimits(disk_mb=2))  # fmt: skip
    assert result.stopped_reason == "setup_error"
    assert "disk limit" in result.stop_detail
    assert "ran" not in result.stdout


@pytest.mark.skipif(not cgroups_available(), reason="needs root and a cgroup memory controller")
async def test_each_run_has_its_own_cgroup_and_it_is_removed_afterwards(sandbox: Sandbox) -> None:
    code = "import time\nprint(open('/proc/self/cgroup').read())\ntime.sleep(0.5)"
    results = await asyncio.gather(*(sandbox.run_python(code) for _ in range(4)))
    dirs = [run_cgroup_dirs(r.stdout) for r in results]
    assert all(dirs), [r.stdout for r in results]
    flat = [d for ds in dirs for d in ds]
    assert len(set(flat)) == len(flat)  # no two runs share a cgroup
    assert not [d for d in flat if d.exists()]


@pytest.mark.skipif(not cgroups_available(), reason="needs root and a cgroup memory controller")
async def test_cgroups_are_removed_after_a_memory_stop_a_timeout_and_a_cancel(sandbox: Sandbox) -> None:
    report = "print(open('/proc/self/cgroup').read(), flush=True)\n"
    oom = await sandbox.run_python(report + FORK_ATTACK, limits=SandboxLimits(timeout_s=10, memory_mb=200))
    slow = await sandbox.run_python(report + "import time\ntime.sleep(30)", limits=SandboxLimits(timeout_s=1))
    assert oom.stopped_reason == "memory_limit" and slow.stopped_reason == "timeout"
    dirs = run_cgroup_dirs(oom.stdout) + run_cgroup_dirs(slow.stdout)
    assert len(dirs) >= 2
    assert not [d for d in dirs if d.exists()]
    before = set(_our_cgroups())
    task = asyncio.create_task(sandbox.run_python("import time\ntime.sleep(30)"))
    await asyncio.sleep(1.0)
    assert set(_our_cgroups()) - before  # the cancelled run had one
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert set(_our_cgroups()) == before


def _our_cgroups() -> list[Path]:
    """The run cgroups this test process has right now (named after its pid)."""
    found: list[Path] = []
    for root in (Path("/sys/fs/cgroup"),):
        for path in root.rglob(f"thoughtloom-{os.getpid()}-*"):
            found.append(path)
    return found


@pytest.mark.skipif(not cgroups_available(), reason="needs root and a cgroup memory controller")
async def test_one_run_at_its_memory_limit_does_not_stop_another(sandbox: Sandbox) -> None:
    attack = sandbox.run_python(FORK_ATTACK, limits=SandboxLimits(timeout_s=10, memory_mb=200))
    normal = sandbox.run_python("import time\nb = bytearray(150 * 1024 * 1024)\ntime.sleep(1)\nprint('fine')",
                                limits=SandboxLimits(timeout_s=10, memory_mb=300))  # fmt: skip
    stopped, fine = await asyncio.gather(attack, normal)
    assert stopped.stopped_reason == "memory_limit"
    assert fine.ok and fine.stdout == "fine\n", fine


@pytest.mark.skipif(not cgroups_available(), reason="needs root and a cgroup pids controller")
async def test_the_process_limit_is_per_run_not_shared_by_concurrent_runs(sandbox: Sandbox) -> None:
    # Before: RLIMIT_NPROC counted every process of uid 65534, so one run's children starved another's.
    code = (
        "import os, time\nn = 0\n"
        "for _ in range(12):\n"
        "    try:\n        pid = os.fork()\n    except OSError:\n        break\n"
        "    if pid == 0:\n        time.sleep(2)\n        os._exit(0)\n"
        "    n += 1\n"
        "print(n)\n"
    )
    limits = SandboxLimits(timeout_s=10, max_processes=16)
    results = await asyncio.gather(*(sandbox.run_python(code, limits=limits) for _ in range(3)))
    assert [r.stdout.strip() for r in results] == ["12", "12", "12"], results


@pytest.mark.skipif(not cgroups_available(), reason="needs root and a cgroup memory controller")
async def test_cgroups_left_by_a_killed_sandbox_process_are_removed_by_the_next_sandbox() -> None:
    dead = _dead_pid()
    parents = [Path("/sys/fs/cgroup") / ctrl / path.lstrip("/") for ctrl, path in _v1_paths().items()]
    assert parents, "expected a cgroup v1 memory hierarchy on this machine"
    leaked = [p / f"thoughtloom-{dead}-0123456789ab" for p in parents]
    for d in leaked:
        d.mkdir()
    try:
        result = await Sandbox(LIMITS).run_python("print('ok')")
        assert result.ok
        assert not [d for d in leaked if d.exists()]
    finally:
        for d in leaked:
            if d.exists():
                d.rmdir()


def _dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def _v1_paths() -> dict[str, str]:
    """This process's cgroup path in the v1 memory and pids hierarchies."""
    found = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, ctrls, path = line.split(":", 2)
        for ctrl in ("memory", "pids"):
            if ctrl in ctrls.split(",") and (Path("/sys/fs/cgroup") / ctrl).is_dir():
                found[ctrl] = path
    return found
