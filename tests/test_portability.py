"""Away from Linux: importing thoughtloom and searching against an HTTP model need no Linux-only module.

A subprocess Python is made to lack the POSIX/Linux-only standard modules (an import hook raises
ImportError for them, as on Windows); what needs Linux (running code in the sandbox) refuses in one line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from machine import scaled
from openai_server import FakeOpenAIServer, always

from thoughtloom import filelocks
from thoughtloom.cli.main import main
from thoughtloom.grounding import sandbox
from thoughtloom.llm.limits import NO_SHARED_SLOTS
from thoughtloom.store import runlock
from thoughtloom.store.runlock import RunBusy, hold_run

ROOT = Path(__file__).parents[1]

#: Modules a Python on Windows lacks (macOS has them, but no prctl and no namespaces).
LINUX_ONLY = ("fcntl", "resource", "termios", "pty", "tty", "grp", "pwd", "syslog")

#: Run before the code under test: those modules cannot be imported, and none is loaded yet.
WITHOUT_LINUX_MODULES = f"""
import importlib.abc, sys
BLOCKED = {LINUX_ONLY!r}
class _NotHere(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None
for _name in BLOCKED:
    sys.modules.pop(_name, None)
sys.meta_path.insert(0, _NotHere())
"""


def run_without_linux_modules(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run `code` in a Python that cannot import the Linux-only modules."""
    return subprocess.run([sys.executable, "-c", WITHOUT_LINUX_MODULES + code], check=False, capture_output=True,
                          text=True, timeout=scaled(120), cwd=cwd,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "THOUGHTLOOM_STORE": str(cwd / "unused.db")})


def test_the_hook_really_hides_the_modules(tmp_path: Path) -> None:
    proc = run_without_linux_modules("import fcntl", tmp_path)
    assert proc.returncode == 1 and "No module named 'fcntl'" in proc.stderr


def test_a_stored_search_against_an_http_model_needs_no_linux_only_module(server: FakeOpenAIServer,
                                                                          tmp_path: Path) -> None:
    server.responder = always("Paris")
    store = tmp_path / "runs.db"
    proc = run_without_linux_modules(f"""
import json
from thoughtloom import solve
result = solve("What is the capital of France?", task="general", model="openai-compatible:{server.url}@m",
               store={str(store)!r})
print(json.dumps({{"answer": result.answer, "run": result.run_id, "stored": result.store_error is None,
                  "loaded": sorted(set(BLOCKED) & set(sys.modules))}}))
""", tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["answer"] and "Paris" in out["answer"]
    assert out["stored"] and out["run"] and out["loaded"] == []
    assert server.seen, "the search called the model over HTTP"
    assert store.is_file()
    assert list(tmp_path.glob("runs.db.*.lock")) == [], "the run was held by its lock file (no flock), then let go"


def test_every_module_of_thoughtloom_imports_without_linux_only_modules(tmp_path: Path) -> None:
    proc = run_without_linux_modules("""
import importlib, pkgutil, thoughtloom
failed = []
for found in pkgutil.walk_packages(thoughtloom.__path__, "thoughtloom."):
    if not found.name.endswith("__main__"):  # that one runs loom
        try:
            importlib.import_module(found.name)
        except ImportError as exc:
            failed.append(f"{found.name}: {exc}")
print(failed)
""", tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_loom_help_needs_no_linux_only_module(tmp_path: Path) -> None:
    proc = run_without_linux_modules("from thoughtloom.cli.main import main\nmain(['--help'])", tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "solve" in proc.stdout


def test_the_sandbox_without_linux_modules_refuses_in_one_line(server: FakeOpenAIServer, tmp_path: Path) -> None:
    server.responder = always("def f():\n    return 1")
    tests = tmp_path / "tests.py"
    tests.write_text("assert f() == 1\n", encoding="utf-8")
    proc = run_without_linux_modules(f"""
from thoughtloom.cli.main import main
sys.exit(main(["solve", "--task", "code", "--tests", {str(tests)!r}, "--no-store",
               "--model", "openai-compatible:{server.url}@m", "write f returning 1"]))
""", tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "loom: error: running code in the sandbox needs Linux: this Python has no fcntl and resource modules"]
    assert not server.seen, "refused before spending on the model"


# ------------------------------------------------------------ the run lock where there is no flock


@pytest.fixture
def no_flock(monkeypatch: pytest.MonkeyPatch) -> None:
    """The run lock as it works on a platform without file locks."""
    monkeypatch.setattr(runlock, "locks_available", lambda: False)


class _Store:
    def __init__(self, path: Path) -> None:
        self.path = path


def test_without_flock_a_second_holder_of_a_run_is_refused_naming_the_lock_file(no_flock: None,
                                                                                  tmp_path: Path) -> None:
    store = _Store(tmp_path / "s.db")
    hold = hold_run(store, "abc")
    assert hold is not None
    with pytest.raises(RunBusy, match=r"run abc is in use by another loom process \(pid \d+\).*s\.db\.abc\.lock"):
        hold_run(store, "abc")
    hold.release()


def test_without_flock_a_released_run_can_be_held_again(no_flock: None, tmp_path: Path) -> None:
    store = _Store(tmp_path / "s.db")
    first = hold_run(store, "abc")
    assert first is not None
    first.release()
    assert not runlock.lock_path(store.path, "abc").exists()
    again = hold_run(store, "abc")
    assert again is not None
    again.release()


def test_without_flock_a_bench_across_processes_refuses_in_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(filelocks, "available", lambda: False)
    code = main(["bench", "--tasks", "game24", "--lanes", "io", "--workers", "2", "--quiet", "--model",
                 "openai-compatible:http://127.0.0.1:9/v1@m", "--out", str(tmp_path / "out")])
    assert code == 2
    assert capsys.readouterr().err.strip().splitlines() == [f"loom: error: {NO_SHARED_SLOTS}"]
    assert not (tmp_path / "out").exists(), "refused before the run directory is made"


@pytest.mark.parametrize("task", [["--task", "math", "What is 17 * 23?"],
                                  ["--task", "humaneval", "HumanEval/0"],
                                  ["--task", "debug", "--repo", ".", "--failing-test", "tests/test_x.py::test_y",
                                   "fix it"]])
def test_off_linux_tasks_that_run_code_refuse_before_any_model_call(task: list[str], server: FakeOpenAIServer,
                                                                    monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sandbox, "sys", SimpleNamespace(platform="darwin"))  # as the sandbox sees it: macOS
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text("def test_y():\n    assert False\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    code = main(["solve", *task, "--no-store", "--quiet", "--model", f"openai-compatible:{server.url}@m"])
    assert code == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "loom: error: running code in the sandbox needs Linux (this is darwin)"]
    assert not server.seen


def test_off_linux_a_bench_of_a_code_task_refuses_before_any_model_call(server: FakeOpenAIServer,
                                                                         monkeypatch: pytest.MonkeyPatch,
                                                                         tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sandbox, "sys", SimpleNamespace(platform="darwin"))  # as the sandbox sees it: macOS
    code = main(["bench", "--tasks", "humaneval", "--lanes", "io", "--limit", "1", "--quiet", "--no-plot",
                 "--model", f"openai-compatible:{server.url}@m", "--out", str(tmp_path / "out")])
    assert code == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "loom: error: running code in the sandbox needs Linux (this is darwin)"]
    assert not server.seen, "the io lane answers without a sandbox, but its answer could not be checked"
