"""`loom solve` for code, HumanEval and debugging, as a user runs it: subprocesses, a scripted HTTP model,
real sandboxes, a real repository with a failing test."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from machine import scaled
from openai_server import FakeOpenAIServer, Reply, Seen
from test_code_task import HE0_CORRECT
from test_cli import assert_one_line_error, loom
from test_debugging_grounder import CALC, FAILING, FIXED_CALC, TEST_CALC


def replying(answer: Callable[[str], str]) -> Callable[[Seen], Reply]:
    """A completions responder: answer(prompt) for every choice."""

    def reply(seen: Seen) -> Reply:
        prompt = seen.body.get("prompt") or seen.body["messages"][-1]["content"]
        n = int(seen.body.get("n") or 1)
        return Reply(200, {
            "id": "x", "object": "text_completion", "created": 0, "model": "m",
            "choices": [{"index": i, "text": answer(prompt), "finish_reason": "stop"} for i in range(n)],
            "usage": {"prompt_tokens": 100, "completion_tokens": 30 * n, "total_tokens": 100 + 30 * n},
        })

    return reply


def model_spec(server: FakeOpenAIServer, answer: Callable[[str], str]) -> str:
    server.responder = replying(answer)
    return f"openai-compatible:{server.url}@scripted#completions"


def test_code_generation_against_the_users_tests(server: FakeOpenAIServer, tmp_path: Path) -> None:
    tests = tmp_path / "test_add.py"
    tests.write_text("assert add(2, 3) == 5\n")
    model = model_spec(server, lambda prompt: "a, b):\n    return a + b\n")
    proc = loom("solve", "--profile", "code_generation", "--tests", str(tests), "--model", model,
                "write a function add(a, b) that returns the sum")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("answer [checked: correct]:")
    assert "    return a + b" in proc.stdout
    assert "(code): verified 1 passed, 0 failed" in proc.stderr


def test_humaneval_problem_by_id_reports_pass_at_1(server: FakeOpenAIServer) -> None:
    model = model_spec(server, lambda prompt: HE0_CORRECT)
    proc = loom("solve", "--task", "humaneval", "--problem", "HumanEval/0", "--model", model, "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["solved"] is True and out["termination_reason"] == "goal_reached"
    assert out["grounding"][0]["grounder"] == "code" and out["grounding"][0]["verified"] is True


def test_debugging_a_real_failing_test(server: FakeOpenAIServer, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "calc.py").write_text(CALC)
    (repo / "test_calc.py").write_text(TEST_CALC)

    def answer(prompt: str) -> str:
        return FIXED_CALC if "(fixed)" in prompt else "add() in calc.py subtracts instead of adding."

    proc = loom("solve", "--profile", "debugging", "--repo", str(repo), "--failing-test", FAILING,
                "--model", model_spec(server, answer), "--breadth", "1", "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["solved"] is True and out["task"] == "debug"
    assert "return a + b" in out["answer"]
    assert (repo / "calc.py").read_text() == CALC


def test_an_unknown_humaneval_id_exits_2_with_one_line() -> None:
    assert_one_line_error(loom("solve", "--task", "humaneval", "--problem", "HumanEval/999"), "HumanEval/999")


def test_a_missing_tests_file_exits_2_with_one_line(tmp_path: Path) -> None:
    assert_one_line_error(loom("solve", "--tests", str(tmp_path / "nope.py"), "add"), "--tests", "no such file")


@pytest.mark.timeout(scaled(60))
def test_a_tests_file_that_is_a_fifo_exits_2_with_one_line(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "tests.py")
    proc = loom("solve", "--tests", str(tmp_path / "tests.py"), "add", timeout=scaled(30))
    assert_one_line_error(proc, "the tests file", "is a pipe (FIFO), not a regular file")


def test_an_option_the_task_does_not_take_exits_2(tmp_path: Path) -> None:
    tests = tmp_path / "t.py"
    tests.write_text("assert f() == 1\n")
    assert_one_line_error(loom("solve", "--task", "game24", "--tests", str(tests), "4 5 6 10"), "game24", "--tests")


def test_debugging_without_a_failing_test_exits_2(tmp_path: Path) -> None:
    assert_one_line_error(loom("solve", "--profile", "debugging", "--repo", str(tmp_path)), "--failing-test")


def test_a_test_that_does_not_fail_exits_2_saying_there_is_nothing_to_debug(tmp_path: Path) -> None:
    (tmp_path / "calc.py").write_text(FIXED_CALC)
    (tmp_path / "test_calc.py").write_text(TEST_CALC)
    proc = loom("solve", "--repo", str(tmp_path), "--failing-test", FAILING)
    assert_one_line_error(proc, "passes on the unmodified repo")


# HumanEval end to end on the embedded model is an example of the tour (docs/tour.md, run by tests/test_readme.py).


# A program that, when loaded, forks ten children of 120 MB each and waits for them.
FORKING_ADD = (
    "a, b):\n    return a + b\n\n\n"
    "import os, time\n_kids = []\n"
    "for _ in range(10):\n"
    "    _pid = os.fork()\n"
    "    if _pid == 0:\n"
    "        _block = bytearray(120 * 1024 * 1024)\n"
    "        _block[::4096] = b'1' * len(_block[::4096])\n"
    "        time.sleep(1.5)\n"
    "        os._exit(0)\n"
    "    _kids.append(_pid)\n"
    "for _pid in _kids:\n"
    "    os.waitpid(_pid, 0)\n"
)
# A program that, when loaded, writes twenty files of 60 MB each.
FILLING_ADD = (
    "a, b):\n    return a + b\n\n\n"
    "for _i in range(20):\n"
    "    with open(f'fill-{_i}.bin', 'wb') as _f:\n"
    "        for _ in range(60):\n"
    "            _f.write(b'x' * (1024 * 1024))\n"
)


def test_sandbox_memory_bounds_all_the_processes_of_a_run(server: FakeOpenAIServer, tmp_path: Path) -> None:
    tests = tmp_path / "test_add.py"
    tests.write_text("assert add(2, 3) == 5\n")
    model = model_spec(server, lambda prompt: FORKING_ADD)
    proc = loom("solve", "--profile", "code_generation", "--tests", str(tests), "--model", model,
                "--sandbox-memory", "200", "--budget-calls", "2", "--json",
                "write a function add(a, b) that returns the sum")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["grounding"] and not any(g["verified"] for g in out["grounding"])
    assert all("memory_limit" in g["evidence"] for g in out["grounding"]), out["grounding"]


def test_sandbox_disk_bounds_all_the_files_of_a_run(server: FakeOpenAIServer, tmp_path: Path) -> None:
    tests = tmp_path / "test_add.py"
    tests.write_text("assert add(2, 3) == 5\n")
    model = model_spec(server, lambda prompt: FILLING_ADD)
    proc = loom("solve", "--profile", "code_generation", "--tests", str(tests), "--model", model,
                "--sandbox-disk", "100", "--budget-calls", "2", "--json",
                "write a function add(a, b) that returns the sum")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["grounding"] and not any(g["verified"] for g in out["grounding"])
    for g in out["grounding"]:
        assert g["details"]["stopped_reason"] == "disk_limit", g
        assert "No space left on device" in g["evidence"]


def test_a_sandbox_disk_of_zero_exits_2_with_one_line() -> None:
    assert_one_line_error(loom("solve", "--task", "code", "--sandbox-disk", "0", "x"), "--sandbox-disk", "at least 1")
