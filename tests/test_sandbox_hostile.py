"""Hostile code in the sandbox: each attack is contained and reported, and the sandbox still works after."""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from thoughtloom.grounding.sandbox import Sandbox, SandboxLimits

ROOT = os.geteuid() == 0
# cpu_s above timeout_s so a busy loop meets the wall clock first.
LIMITS = SandboxLimits(timeout_s=2, cpu_s=5, memory_mb=256, max_output_bytes=16384, max_processes=32)


@pytest.fixture(scope="module")
def sandbox() -> Sandbox:
    """One sandbox for every attack, so each test also shows it survived the previous ones."""
    return Sandbox(LIMITS)


async def still_works(sandbox: Sandbox) -> None:
    result = await sandbox.run_python("print(6 * 7)")
    assert result.ok and result.stdout == "42\n", result


def processes_with(token: str) -> list[int]:
    """Live processes whose command line contains `token`."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                if token.encode() in f.read():
                    found.append(int(entry.name))
        except OSError:
            continue
    return [pid for pid in found if pid != os.getpid()]


async def test_infinite_loop_stops_at_the_timeout(sandbox: Sandbox) -> None:
    started = time.monotonic()
    result = await sandbox.run_python("while True:\n    pass")
    assert result.timed_out and result.stopped_reason == "timeout"
    assert time.monotonic() - started < LIMITS.timeout_s + 3
    await still_works(sandbox)


async def test_cpu_limit_stops_a_busy_loop_before_a_long_timeout(sandbox: Sandbox) -> None:
    result = await sandbox.run_python("while True:\n    pass", limits=SandboxLimits(timeout_s=10, cpu_s=1))
    assert result.stopped_reason == "cpu_limit"
    assert "CPU" in result.stop_detail
    await still_works(sandbox)


async def test_fork_bomb_is_contained_and_leaves_no_process(sandbox: Sandbox) -> None:
    token = uuid.uuid4().hex
    bomb = "import os, time\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        time.sleep(0.01)\n"
    result = await sandbox.run([sandbox.python, "-c", bomb, token])
    assert result.stopped_reason == "timeout"
    deadline = time.monotonic() + 3
    while processes_with(token) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert processes_with(token) == []
    await still_works(sandbox)


@pytest.mark.skipif(not ROOT, reason="RLIMIT_NPROC binds only when the code runs as another uid")
async def test_process_limit_holds_for_the_dropped_uid(sandbox: Sandbox) -> None:
    code = (
        "import os, time\nn = 0\n"
        "for _ in range(200):\n"
        "    try:\n        pid = os.fork()\n    except OSError:\n        break\n"
        "    if pid == 0:\n        time.sleep(5)\n        os._exit(0)\n"
        "    n += 1\n"
        "print(n)\n"
    )
    result = await sandbox.run_python(code)
    assert result.ok, result.stderr
    assert int(result.stdout) < LIMITS.max_processes
    await still_works(sandbox)


async def test_allocating_10_gb_is_a_memory_limit(sandbox: Sandbox) -> None:
    result = await sandbox.run_python("block = bytearray(10 * 1024**3)\nprint('allocated')")
    assert result.stopped_reason == "memory_limit"
    assert "MemoryError" in result.stop_detail
    assert "allocated" not in result.stdout
    await still_works(sandbox)


async def test_huge_output_is_capped_and_stopped(sandbox: Sandbox) -> None:
    result = await sandbox.run_python("while True:\n    print('x' * 1000)")
    assert result.stopped_reason == "output_limit"
    assert result.truncated
    assert len(result.stdout.encode()) <= LIMITS.max_output_bytes
    await still_works(sandbox)


async def test_huge_stderr_is_capped_too(sandbox: Sandbox) -> None:
    result = await sandbox.run_python("import sys\nwhile True:\n    sys.stderr.write('e' * 1000)")
    assert result.stopped_reason == "output_limit"
    assert len(result.stderr.encode()) <= LIMITS.max_output_bytes
    await still_works(sandbox)


async def test_writing_outside_the_workdir_does_not_reach_the_host(sandbox: Sandbox, tmp_path: Path) -> None:
    token = uuid.uuid4().hex
    repo = Path(__file__).resolve().parents[1]
    targets = [repo / f"escape-{token}.txt", Path.home() / f"escape-{token}.txt", tmp_path / f"escape-{token}.txt"]
    iso = await sandbox.isolation()
    if iso.tmp:  # the world-writable places are private to the run only when it has a mount namespace
        targets += [Path(d) / f"escape-{token}.txt" for d in ("/tmp", "/var/tmp", "/dev/shm") if os.path.isdir(d)]
    os.chmod(tmp_path, 0o777)  # even a directory anyone may write to on the host stays out of reach
    code = "import sys\nfor p in sys.argv[1:]:\n    try:\n        open(p, 'w').write('x')\n        print('wrote', p)\n    except OSError as e:\n        print('refused', p, type(e).__name__)\n"
    result = await sandbox.run_python(code, args=[str(t) for t in targets])
    assert result.exit_code == 0, result.stderr
    for target in targets:
        assert not target.exists(), f"{target} was written: {result.stdout}"
    await still_works(sandbox)


@pytest.mark.skipif(not ROOT, reason="the home directory is only out of reach when the code runs as another uid")
async def test_reading_the_home_directory_fails(sandbox: Sandbox) -> None:
    secret = Path.home() / f".thoughtloom-secret-{uuid.uuid4().hex}"
    secret.write_text("s3cret-value")
    secret.chmod(0o600)
    try:
        code = f"try:\n    print(open({str(secret)!r}).read())\nexcept OSError as e:\n    print('refused', type(e).__name__)\n"
        result = await sandbox.run_python(code)
    finally:
        secret.unlink()
    assert "s3cret-value" not in result.stdout
    assert "refused" in result.stdout
    await still_works(sandbox)


async def test_environment_secrets_are_not_inherited(sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("THOUGHTLOOM_TEST_SECRET", "hunter2-" + uuid.uuid4().hex)
    code = "import os\nprint(os.environ.get('THOUGHTLOOM_TEST_SECRET'))\nprint(open('/proc/self/environ', 'rb').read())"
    result = await sandbox.run_python(code)
    assert "hunter2" not in result.stdout + result.stderr
    assert result.stdout.startswith("None")
    await still_works(sandbox)


@pytest.fixture
def local_server() -> Iterator[int]:
    """A TCP server on 127.0.0.1 that answers 'hi' to anyone who connects."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            with conn:
                conn.sendall(b"hi")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join(2)
    server.close()


async def test_connecting_to_a_host_server_fails(sandbox: Sandbox, local_server: int) -> None:
    code = (
        "import socket, sys\n"
        "try:\n"
        "    s = socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=1)\n"
        "    print('connected', s.recv(2))\n"
        "except OSError as e:\n"
        "    print('blocked', type(e).__name__)\n"
    )
    result = await sandbox.run_python(code, args=[str(local_server)])
    if not result.network_isolated:
        assert any("network" in note for note in result.isolation_notes)
        pytest.skip("this kernel does not allow a network namespace: " + "; ".join(result.isolation_notes))
    assert "blocked" in result.stdout, result.stdout
    await still_works(sandbox)


async def test_network_can_be_allowed_explicitly(sandbox: Sandbox, local_server: int) -> None:
    code = "import socket, sys\ns = socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=2)\nprint(s.recv(2).decode())"
    result = await sandbox.run_python(code, args=[str(local_server)], limits=SandboxLimits(timeout_s=5, network=True))
    assert result.stdout.strip() == "hi", result.stderr
    assert not result.network_isolated


async def test_killing_itself_is_reported_as_a_signal(sandbox: Sandbox) -> None:
    result = await sandbox.run_python("import os, signal\nos.kill(os.getpid(), signal.SIGTERM)")
    assert result.stopped_reason == "signal"
    assert result.signal == 15
    await still_works(sandbox)


async def test_a_daemon_left_behind_is_killed(sandbox: Sandbox) -> None:
    token = uuid.uuid4().hex
    code = "import os, sys, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(30)\nprint('parent exits')"
    result = await sandbox.run([sandbox.python, "-c", code, token])
    assert result.ok
    iso = await sandbox.isolation()
    if not iso.pid:
        pytest.skip("without a PID namespace a process that calls setsid() escapes the kill")
    deadline = time.monotonic() + 3
    while processes_with(token) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert processes_with(token) == []


async def test_host_processes_are_invisible(sandbox: Sandbox) -> None:
    iso = await sandbox.isolation()
    if not iso.pid:
        pytest.skip("no PID namespace here")
    result = await sandbox.run_python("import os\nprint(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))")
    pids = [int(p) for p in result.stdout.strip("[]\n").split(", ")]
    assert pids == [1, 2]  # the sandbox's own init and the program itself


async def test_the_program_cannot_forge_its_status(sandbox: Sandbox) -> None:
    # The bootstrap reports the real exit status on a private pipe; no inherited fd may reach it.
    code = (
        "import os, sys\n"
        "for fd in range(3, 256):\n"
        "    try:\n"
        '        os.write(fd, b\'{"exit": 0, "signal": null}\\n\')\n'
        "        print('wrote', fd)\n"
        "    except OSError:\n"
        "        pass\n"
        "sys.exit(5)\n"
    )
    result = await sandbox.run_python(code)
    assert result.exit_code == 5
    assert "wrote" not in result.stdout
