"""The sandbox on ordinary programs: output, exit codes, stdin, files, copies, syntax, environment."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from machine import scaled

from thoughtloom.grounding.sandbox import Sandbox, SandboxLimits, check_syntax

ROOT = os.geteuid() == 0
LIMITS = SandboxLimits(timeout_s=5, cpu_s=5, memory_mb=512)


@pytest.fixture(scope="module")
def sandbox() -> Sandbox:
    """One sandbox for the module: its isolation is probed once."""
    return Sandbox(LIMITS)


async def test_stdout_and_exit_code_zero(sandbox: Sandbox) -> None:
    result = await sandbox.run_python("print('hello')")
    assert result.ok
    assert result.exit_code == 0 and result.signal is None
    assert result.stdout == "hello\n"
    assert result.stopped_reason is None


async def test_nonzero_exit_code_is_not_a_stop(sandbox: Sandbox) -> None:
    result = await sandbox.run_python("import sys\nprint('bye', file=sys.stderr)\nsys.exit(3)")
    assert result.exit_code == 3
    assert result.stopped_reason is None
    assert not result.ok
    assert "bye" in result.stderr


async def test_uncaught_exception_exits_1_with_traceback(sandbox: Sandbox) -> None:
    result = await sandbox.run_python("raise ValueError('boom')")
    assert result.exit_code == 1
    assert "ValueError: boom" in result.stderr


async def test_stdin_is_given_to_the_program(sandbox: Sandbox) -> None:
    result = await sandbox.run_python("import sys\nprint(sys.stdin.read().upper())", stdin="abc")
    assert result.stdout.strip() == "ABC"


async def test_no_stdin_reads_empty(sandbox: Sandbox) -> None:
    result = await sandbox.run_python("import sys\nprint(repr(sys.stdin.read()))")
    assert result.stdout.strip() == "''"


async def test_files_are_written_and_importable(sandbox: Sandbox) -> None:
    files = {"helper.py": "def twice(x):\n    return 2 * x\n", "data/in.txt": "21"}
    result = await sandbox.run_python(
        "from helper import twice\nprint(twice(int(open('data/in.txt').read())))", files=files
    )
    assert result.stdout.strip() == "42"


async def test_file_paths_outside_the_workdir_are_refused(sandbox: Sandbox) -> None:
    result = await sandbox.run_python("print(1)", files={"../escape.py": "x = 1"})
    assert result.stopped_reason == "setup_error"
    assert "inside the workdir" in result.stderr


async def test_copy_from_copies_the_tree_without_vcs_and_env_dirs(sandbox: Sandbox, tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text("VALUE = 7\n")
    for skipped in (".git", ".venv", "__pycache__", "node_modules"):
        (tmp_path / skipped).mkdir()
        (tmp_path / skipped / "junk").write_text("x")
    code = "import os, json\nfrom pkg.mod import VALUE\nprint(json.dumps([VALUE, sorted(os.listdir('.'))]))"
    result = await sandbox.run([sandbox.python, "-c", code], copy_from=tmp_path)
    value, listing = json.loads(result.stdout)
    assert value == 7
    assert listing == ["pkg"] or listing == [".tmp", "pkg"]  # .tmp only when there is no private /tmp


async def test_copy_from_leaves_the_source_untouched(sandbox: Sandbox, tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("original")
    result = await sandbox.run([sandbox.python, "-c", "open('a.txt', 'w').write('changed')"], copy_from=tmp_path)
    assert result.ok, result.stderr
    assert (tmp_path / "a.txt").read_text() == "original"


async def test_cwd_subdir_runs_inside_the_copy(sandbox: Sandbox, tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "here.txt").write_text("yes")
    result = await sandbox.run(
        [sandbox.python, "-c", "print(open('here.txt').read())"], copy_from=tmp_path, cwd_subdir="sub"
    )
    assert result.stdout.strip() == "yes"


async def test_missing_program_is_a_setup_error(sandbox: Sandbox) -> None:
    result = await sandbox.run(["no-such-program-" + uuid.uuid4().hex])
    assert result.stopped_reason == "setup_error"
    assert "cannot run" in result.stop_detail


def test_check_syntax_accepts_valid_code() -> None:
    assert check_syntax("def f(x):\n    return x\n").ok


def test_check_syntax_reports_the_line() -> None:
    check = check_syntax("x = 1\ndef f(:\n    pass\n")
    assert not check.ok
    assert check.line == 2
    assert check.error is not None and "line 2" in check.error


def test_check_syntax_reports_bad_indentation() -> None:
    check = check_syntax("def f():\nreturn 1\n")
    assert not check.ok and check.error is not None and "IndentationError" in check.error


async def test_syntax_error_is_reported_without_running(sandbox: Sandbox) -> None:
    result = await sandbox.run_python("print('ran')\nif True print(1)")
    assert result.stopped_reason == "syntax_error"
    assert result.exit_code is None
    assert "ran" not in result.stdout
    assert "line 2" in result.stderr


async def test_environment_is_minimal_and_home_is_the_workdir(sandbox: Sandbox) -> None:
    result = await sandbox.run_python("import os, json\nprint(json.dumps([dict(os.environ), os.getcwd()]))")
    env, cwd = json.loads(result.stdout)
    allowed = {"PATH", "HOME", "TMPDIR", "LANG", "LC_ALL", "PYTHONDONTWRITEBYTECODE", "PYTHONUNBUFFERED", "PYTHONIOENCODING", "PYTHONNOUSERSITE", "TERM", "NO_COLOR"}  # fmt: skip
    assert set(env) <= allowed | {"LC_CTYPE"}  # the interpreter may add LC_CTYPE for C.UTF-8
    assert env["HOME"] == cwd


async def test_extra_env_is_passed(sandbox: Sandbox) -> None:
    result = await sandbox.run([sandbox.python, "-c", "import os; print(os.environ['MY_FLAG'])"], env={"MY_FLAG": "on"})
    assert result.stdout.strip() == "on"


async def test_workdir_is_removed_after_the_run(sandbox: Sandbox) -> None:
    result = await sandbox.run_python("import os\nopen('made.txt', 'w').write('x')\nprint(os.getcwd())")
    workdir = Path(result.stdout.strip())
    assert workdir.name.startswith("thoughtloom-sbx-")
    assert not workdir.exists()


async def test_workdir_is_removed_after_a_timeout(sandbox: Sandbox) -> None:
    code = "import os, time\nprint(os.getcwd(), flush=True)\ntime.sleep(30)"
    result = await sandbox.run_python(code, limits=SandboxLimits(timeout_s=2))
    assert result.stopped_reason == "timeout"
    assert result.stdout.strip().startswith("/")
    assert not Path(result.stdout.strip()).exists()


async def test_concurrent_runs_do_not_interfere(sandbox: Sandbox) -> None:
    results = await asyncio.gather(
        *(sandbox.run_python(f"open('n', 'w').write('{i}')\nprint(open('n').read())") for i in range(6))
    )
    assert [r.stdout.strip() for r in results] == [str(i) for i in range(6)]


async def test_isolation_is_probed_once(sandbox: Sandbox) -> None:
    assert await sandbox.isolation() is await sandbox.isolation()


async def test_results_report_cpu_and_memory_use(sandbox: Sandbox) -> None:
    result = await sandbox.run_python("x = bytearray(50 * 1024 * 1024)\nx[::4096] = b'1' * len(x[::4096])")
    assert result.ok
    assert result.cpu_ms is not None and result.max_rss_kb is not None and result.max_rss_kb > 40 * 1024


@pytest.mark.skipif(not ROOT, reason="dropping to another uid needs root")
async def test_code_runs_as_the_unprivileged_uid(sandbox: Sandbox) -> None:
    result = await sandbox.run_python("import os\nprint(os.getuid(), os.getgid(), os.getgroups())")
    assert result.stdout.split()[:2] == ["65534", "65534"]
    assert result.user_isolated


@pytest.mark.skipif(not ROOT, reason="dropping to another uid needs root")
async def test_the_venv_interpreter_runs_as_the_unprivileged_uid(sandbox: Sandbox) -> None:
    # The venv's python may live under a home the sandbox uid cannot enter (here /root, 0700).
    result = await sandbox.run_python("import sys\nprint(sys.version_info[:3])")
    expected = str(tuple(sys.version_info[:3]))
    assert result.stdout.strip() == expected, result.stderr


async def test_cancelled_run_is_killed_and_cleaned_up(sandbox: Sandbox) -> None:
    token = uuid.uuid4().hex
    task = asyncio.create_task(sandbox.run([sandbox.python, "-c", "import time; time.sleep(30)", token]))
    await asyncio.sleep(1.0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.sleep(0.2)
    assert not _processes_with(token)


@pytest.mark.skipif(not Path("/usr/bin/python3").exists(), reason="needs a system python readable by every user")
async def test_without_namespaces_runs_and_reports_no_isolation() -> None:
    plain = Sandbox(LIMITS, python="/usr/bin/python3", namespaces=False)
    result = await plain.run_python("print('still runs')")
    assert result.stdout.strip() == "still runs"
    assert not result.network_isolated and not result.tmp_isolated and not result.pid_isolated
    assert any("network" in note for note in result.isolation_notes)


@pytest.mark.skipif(
    not ROOT or shutil.which("setpriv") is None, reason="needs root and setpriv to start a non-root parent"
)
def test_non_root_parent_uses_a_user_namespace(tmp_path: Path) -> None:
    # The sandbox started by an ordinary user: no uid switch, namespaces through a user namespace.
    script = (
        "import asyncio, json\n"
        "from thoughtloom.grounding.sandbox import Sandbox, SandboxLimits\n"
        "r = asyncio.run(Sandbox(SandboxLimits(timeout_s=5), python='/usr/bin/python3').run_python('print(1)'))\n"
        "print(json.dumps([r.stdout, r.user_isolated, r.network_isolated, r.isolation_notes]))\n"
    )
    proc = _as_nobody(script, home=tmp_path)
    assert proc.returncode == 0, proc.stderr
    stdout, user_isolated, network_isolated, notes = json.loads(proc.stdout)
    assert stdout == "1\n"
    assert user_isolated is False
    assert any("no user isolation" in n for n in notes)
    assert isinstance(network_isolated, bool)  # True when user namespaces are allowed (they are here)


# A program that looks for the secret argv[2] in the environment of every process it can see and
# tries to read its starter's (argv[1]): it prints whose held the secret and how the starter's went.
_NEIGHBOURS = """
import json, os, sys
holding = []
for pid in filter(str.isdigit, os.listdir('/proc')):
    try:
        with open('/proc/%s/environ' % pid, 'rb') as f:
            if sys.argv[2].encode() in f.read():
                holding.append(int(pid))
    except OSError:
        continue
try:
    open('/proc/%s/environ' % sys.argv[1], 'rb').read()
    starter = 'read'
except OSError as exc:
    starter = type(exc).__name__
print(json.dumps({'holding': holding, 'starter': starter}))
"""


@pytest.mark.skipif(
    not ROOT or shutil.which("setpriv") is None, reason="needs root and setpriv to start a non-root parent"
)
def test_a_program_without_namespaces_cannot_read_the_environment_of_the_process_that_runs_it(tmp_path: Path) -> None:
    # Before: with no PID namespace (a kernel or container that refuses them), the program ran as the
    # same user as loom and read loom's API keys in /proc/<loom>/environ.
    secret = "sk-sandbox-neighbour-77e2"
    script = (
        "import asyncio, os, sys\n"
        "from thoughtloom.grounding.sandbox import Sandbox, SandboxLimits\n"
        "from thoughtloom.grounding.neighbours import make_process_private\n"
        "assert make_process_private() is None\n"  # as loom's main does, first thing
        "box = Sandbox(SandboxLimits(timeout_s=10), python='/usr/bin/python3', namespaces=False)\n"
        f"r = asyncio.run(box.run_python(sys.argv[1], args=[str(os.getpid()), {secret!r}]))\n"
        "print(r.stdout.strip() or r.stderr)\n"
    )
    proc = _as_nobody(script, _NEIGHBOURS, home=tmp_path, env={"OPENAI_API_KEY": secret})
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout.splitlines()[-1])
    assert seen["holding"] == []
    assert seen["starter"] == "PermissionError"


@pytest.mark.skipif(
    not ROOT or shutil.which("setpriv") is None, reason="needs root and setpriv to start a non-root parent"
)
def test_a_run_without_namespaces_says_when_the_code_can_read_the_process_that_runs_it(tmp_path: Path) -> None:
    # A program embedding the sandbox that has not made itself private is told, run by run.
    script = (
        "import asyncio, json\n"
        "from thoughtloom.grounding.sandbox import Sandbox, SandboxLimits\n"
        "box = Sandbox(SandboxLimits(timeout_s=10), python='/usr/bin/python3', namespaces=False)\n"
        "print(json.dumps(asyncio.run(box.run_python('print(1)')).isolation_notes))\n"
    )
    proc = _as_nobody(script, home=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert any("this process is dumpable" in note for note in json.loads(proc.stdout)), proc.stdout


@pytest.mark.skipif(
    not ROOT or shutil.which("setpriv") is None, reason="needs root and setpriv to start a non-root parent"
)
def test_a_private_parent_gives_its_programs_the_same_isolation_as_any_other(tmp_path: Path) -> None:
    # The flag is not inherited across exec: the bootstrap still maps its user namespace and mounts its /proc.
    def isolation(private: bool) -> list[object]:
        script = (
            "import asyncio, json\n"
            "from thoughtloom.grounding.sandbox import Sandbox, SandboxLimits\n"
            "from thoughtloom.grounding.neighbours import make_process_private\n"
            f"assert {private} is False or make_process_private() is None\n"
            "r = asyncio.run(Sandbox(SandboxLimits(timeout_s=10), python='/usr/bin/python3').run_python('print(1)'))\n"
            "print(json.dumps([r.stdout, r.network_isolated, r.pid_isolated, r.tmp_isolated, r.fs_isolated]))\n"
        )
        proc = _as_nobody(script, home=tmp_path)
        assert proc.returncode == 0, proc.stderr
        return list(json.loads(proc.stdout))

    private = isolation(True)
    assert private[0] == "1\n"
    assert private == isolation(False)


def _as_nobody(script: str, *args: str, home: Path,
               env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run `script` with the system python as uid 65534 (an ordinary user starting the sandbox), this checkout first."""
    repo = str(Path(__file__).resolve().parents[1])
    base = {"PATH": "/usr/bin:/bin", "PYTHONPATH": repo, "HOME": str(home), "TMPDIR": "/tmp"}
    cmd = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c", script, *args]
    return subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=scaled(60),
                          env={**base, **(env or {})}, cwd="/tmp")


def _processes_with(token: str) -> list[int]:
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                    if token.encode() in f.read():
                        found.append(int(entry.name))
            except OSError:
                continue
    return found


async def test_an_interpreter_under_tmp_stays_usable_behind_the_private_tmp() -> None:
    # A checkout (and its .venv) under /tmp is common in CI; the private /tmp must not hide it.
    base = Path("/tmp") / f"thoughtloom-venv-{uuid.uuid4().hex[:8]}"
    try:
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(base)], check=True, timeout=scaled(120))
        box = Sandbox(SandboxLimits(timeout_s=10), python=str(base / "bin" / "python"))
        result = await box.run_python(
            f"import sys, pathlib\nprint(sys.prefix)\n"
            f"try:\n    pathlib.Path({str(base)!r}, 'x').write_text('x')\nexcept OSError:\n    print('read-only')\n"
        )
        assert result.exit_code == 0, result.stderr
        assert result.stdout.split() == [str(base), "read-only"]
        assert (await box.isolation()).tmp
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_a_programs_syntax_warnings_are_not_printed_by_the_syntax_check() -> None:
    # In a fresh interpreter: pytest itself would catch the warning before it reached stderr.
    program = "x = 1\\nif x is 1:\\n    pass\\n"
    proc = subprocess.run([sys.executable, "-c", "from thoughtloom.grounding.sandbox import check_syntax; "
                           f"assert check_syntax('{program}').ok"], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "SyntaxWarning" not in proc.stderr
