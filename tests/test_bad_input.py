"""Bad input to `loom solve` and the top-level command: one line on stderr, exit 2, no model request.

Every case runs loom's own `main` in this process (an interpreter per case would cost a minute; a few
cases still run the real `loom` in a subprocess) against a scripted server on 127.0.0.1; the server
must see no request at all, because options are checked before the first model call. (Store and
bench input have their own tables.)
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from inprocess import loom_here
from machine import scaled
from openai_server import FakeOpenAIServer, serve
from test_cli import LOOM, assert_one_line_error, loom

NO_PROBLEM = "<no problem text>"  # in a case: the case gives its own problem, or none
NOT_UTF8 = os.fsdecode(b"\xff\xfe bad")  # what Python makes of argv bytes that are not UTF-8

# (case id, loom solve arguments, a fragment the error line must contain). {model} is the scripted
# server, {binary} a file of non-UTF-8 bytes, {dir} a directory, {missing} a path that does not exist.
SOLVE_CASES = [
    ("budget-seconds-inf", ["--budget-seconds", "inf"], "--budget-seconds must be a finite number"),
    ("budget-seconds-nan", ["--budget-seconds", "nan"], "--budget-seconds must be a finite number"),
    ("budget-seconds-negative", ["--budget-seconds", "-1"], "--budget-seconds must be positive"),
    ("budget-usd-inf", ["--budget-usd", "inf"], "--budget-usd must be a finite number"),
    ("budget-usd-nan", ["--budget-usd", "nan"], "--budget-usd must be a finite number"),
    ("budget-tokens-huge", ["--budget-tokens", "9" * 30], "--budget-tokens must be at least 1 and at most"),
    ("budget-calls-zero", ["--budget-calls", "0"], "--budget-calls must be at least 1 and at most"),
    ("grounding-boost-nan", ["--grounding-boost", "nan"], "--grounding-boost must be a finite number"),
    ("grounding-boost-inf", ["--grounding-boost", "inf"], "--grounding-boost must be a finite number"),
    ("grounding-boost-below-1", ["--grounding-boost", "0.5"], "--grounding-boost must be at least 1"),
    ("grounding-penalty-above-1", ["--grounding-penalty", "2"], "--grounding-penalty must be between 0 and 1"),
    ("grounding-penalty-nan", ["--grounding-penalty", "nan"], "--grounding-penalty must be a finite number"),
    ("temperature-nan", ["--temperature", "nan"], "--temperature must be a finite number"),
    ("temperature-negative", ["--temperature", "-1"], "--temperature must be between 0 and 2"),
    ("prune-threshold-inf", ["--prune-threshold", "inf"], "--prune-threshold must be a finite number"),
    ("sandbox-timeout-inf", ["--sandbox-timeout", "inf"], "--sandbox-timeout must be a finite number"),
    ("sandbox-timeout-huge", ["--sandbox-timeout", "1e300"], "--sandbox-timeout must be positive, at most"),
    ("sandbox-memory-huge", ["--sandbox-memory", "9" * 20], "--sandbox-memory must be at least 1 and at most"),
    ("seed-huge", ["--seed", "99999999999999999999999999999"], "--seed must be at least 0 and at most"),
    ("seed-negative", ["--seed", "-1"], "--seed must be at least 0 and at most"),
    ("seed-not-a-number", ["--seed", "abc"], "--seed must be a whole number"),
    ("breadth-huge", ["--breadth", "9" * 20], "--breadth must be at least 1 and at most 1,000"),
    ("depth-huge", ["--depth", "9" * 20], "--depth must be at least 1 and at most 1,000"),
    ("concurrency-zero", ["--concurrency", "0"], "--concurrency must be at least 1 and at most"),
    ("max-nodes-huge", ["--max-nodes", "9" * 20], "--max-nodes must be at least 1 and at most"),
    ("iterations-huge", ["--strategy", "mcts", "--iterations", "9" * 20], "--iterations must be at least 1 and at most"),
    ("auto-approve-negative", ["--auto-approve-tokens", "-5"], "--auto-approve-tokens must be at least 0 and at most"),
    ("auto-deeper-huge", ["--auto-deeper", "9" * 20], "--auto-deeper must be at least 0 and at most 1,000"),
    ("mermaid-directory", ["--mermaid", "{dir}"], "it is a directory"),
    ("mermaid-missing-directory", ["--mermaid", "{missing}/g.mmd"], "does not exist"),
    ("mermaid-empty", ["--mermaid", ""], "--mermaid is empty"),
    ("problem-not-utf8", [NOT_UTF8, NO_PROBLEM], "the problem is not valid UTF-8"),
    ("problem-id-not-utf8", ["--problem", NOT_UTF8, NO_PROBLEM], "--problem is not valid UTF-8"),
    ("problem-blank", ["   ", NO_PROBLEM], "the problem is empty"),
    ("tests-binary", ["--tests", "{binary}"], "is not UTF-8 text"),
    ("tests-directory", ["--tests", "{dir}"], "is a folder, not a regular file"),
    ("tests-dev-zero", ["--tests", "/dev/zero"], "is a device, not a regular file"),
    ("tests-missing", ["--tests", "{missing}"], "no such file or directory"),
    ("knowledge-index-directory", ["--knowledge", "{dir}", "--knowledge-index", "{dir}"], "is a directory"),
    ("model-port-out-of-range", ["--model", "openai-compatible:http://127.0.0.1:99999/v1@m"], "Port out of range"),
    ("model-malformed-ipv6", ["--model", "openai-compatible:http://[::1:8000/v1@m"], "Invalid IPv6 URL"),
    ("model-port-not-a-number", ["--model", "openai-compatible:http://127.0.0.1:abc/v1@m"], "is malformed"),
    ("model-empty", ["--model", ""], "--model is empty"),
    ("sorting-size-huge", ["--task", "sorting", "--size", "1000000000", NO_PROBLEM], "too large to generate"),
    ("task-empty", ["--task", ""], "--task is empty"),
    ("task-unknown", ["--task", "chess"], "unknown task 'chess'"),
    ("profile-empty", ["--profile", ""], "--profile is empty"),
    ("data-dev-zero", ["--task", "humaneval", "--problem", "HumanEval/0", "--data", "/dev/zero", NO_PROBLEM],
     "is a device, not a regular file"),
    ("data-binary", ["--task", "keyword_counting", "--data", "{binary}", "--problem", "1", NO_PROBLEM],
     "is not UTF-8 text"),
    ("test-command-empty", ["--task", "debug", "--repo", "{dir}", "--failing-test", "t.py::t", "--test-command", "",
                            NO_PROBLEM], "--test-command is empty"),
]

TOP_LEVEL_CASES = [
    ("unknown-command", ["nosuch"], "invalid choice: 'nosuch'"),
    ("unknown-option", ["solve", "--nosuch", "hi"], "unrecognized arguments: --nosuch"),
    ("version-with-extra-argument", ["--version", "extra"], "invalid choice: 'extra'"),
    ("tasks-with-extra-argument", ["tasks", "extra"], "unrecognized arguments: extra"),
    ("profiles-with-extra-argument", ["profiles", "extra"], "unrecognized arguments: extra"),
]


@pytest.fixture(scope="module")
def quiet_server() -> Iterator[FakeOpenAIServer]:
    """One scripted server for the whole table: every case checks it received nothing new."""
    with serve() as fake:
        yield fake


@pytest.fixture(scope="module")
def places(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A non-UTF-8 file, a directory and a missing path to point options at."""
    root = tmp_path_factory.mktemp("bad-input")
    binary = root / "binary.py"
    binary.write_bytes(b"\xff\xfe\x00\x01assert True\n")
    (root / "dir").mkdir()
    return {"binary": str(binary), "dir": str(root / "dir"), "missing": str(root / "missing")}


def _solve_refuses(quiet_server: FakeOpenAIServer, places: dict[str, str], args: list[str], fragment: str,
                   solve: Callable[..., subprocess.CompletedProcess[str]]) -> None:
    problem = [] if NO_PROBLEM in args else ["plan a picnic"]
    filled = [a.format(**places) for a in args if a != NO_PROBLEM]
    model = [] if "--model" in filled else ["--model", f"openai-compatible:{quiet_server.url}@m"]
    before = len(quiet_server.seen)
    proc = solve("solve", "--quiet", *model, *filled, *problem)
    assert_one_line_error(proc, fragment)
    assert len(quiet_server.seen) == before, "a model request was made before the option was checked"


@pytest.mark.parametrize(("args", "fragment"), [pytest.param(a, f, id=i) for i, a, f in SOLVE_CASES])
def test_bad_solve_option_is_one_line_exit_2_and_no_request(
    quiet_server: FakeOpenAIServer, places: dict[str, str], args: list[str], fragment: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _solve_refuses(quiet_server, places, args, fragment, lambda *argv: loom_here(capsys, *argv))


@pytest.mark.parametrize(("args", "fragment"), [pytest.param(a, f, id=i) for i, a, f in SOLVE_CASES
                                                if i in ("budget-seconds-inf", "problem-not-utf8", "tests-dev-zero",
                                                         "model-port-out-of-range")])
def test_bad_solve_option_from_a_real_loom_process_is_one_line_exit_2_and_no_request(
    quiet_server: FakeOpenAIServer, places: dict[str, str], args: list[str], fragment: str
) -> None:
    _solve_refuses(quiet_server, places, args, fragment, lambda *argv: loom(*argv, timeout=scaled(60)))


@pytest.mark.parametrize(("args", "fragment"), [pytest.param(a, f, id=i) for i, a, f in TOP_LEVEL_CASES])
def test_bad_top_level_input_is_one_line_exit_2(args: list[str], fragment: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert_one_line_error(loom_here(capsys, *args), fragment)


def test_bad_top_level_input_from_a_real_loom_process_is_one_line_exit_2() -> None:
    assert_one_line_error(loom("nosuch"), "invalid choice: 'nosuch'")


@pytest.mark.parametrize("command", [["tasks"], ["profiles"], ["--version"]])
def test_listing_commands_succeed_quietly(command: list[str]) -> None:
    proc = loom(*command)
    assert proc.returncode == 0 and proc.stdout and not proc.stderr


def test_mermaid_write_failing_after_the_search_still_prints_the_result(
    quiet_server: FakeOpenAIServer,
) -> None:
    proc = loom("solve", "--quiet", "--no-store", "--model", f"openai-compatible:{quiet_server.url}@m", "--depth", "1",
                "--mermaid", "/dev/full", "plan a picnic")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == ["loom: error: cannot write --mermaid /dev/full: No space left on device"]
    assert "best path:" in proc.stdout and "stopped:" in proc.stdout


def test_events_write_failing_keeps_the_answer_and_the_run_in_one_line(quiet_server: FakeOpenAIServer,
                                                                        tmp_path: Path) -> None:
    store = tmp_path / "store.db"
    proc = loom("solve", "--quiet", "--store", str(store), "--model", f"openai-compatible:{quiet_server.url}@m",
                "--depth", "1", "--events", "/dev/full", "plan a picnic")
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if "error" in line]
    assert errors == ["loom: error: cannot write --events /dev/full: No space left on device; the answer and the "
                      "stored run are kept, the event stream is incomplete"], proc.stderr
    assert "best path:" in proc.stdout and "stopped:" in proc.stdout
    runs = loom("runs", "--store", str(store))
    assert runs.returncode == 0 and " finished " in runs.stdout, runs.stdout + runs.stderr


@pytest.mark.parametrize("command", [["tasks"], ["solve", "--no-store", "--quiet", "--json", "--depth", "1", "hi"]])
def test_a_full_disk_behind_stdout_is_one_line_exit_2(quiet_server: FakeOpenAIServer, command: list[str]) -> None:
    if command[0] == "solve":
        command = [*command[:-1], "--model", f"openai-compatible:{quiet_server.url}@m", command[-1]]
    with open("/dev/full", "w") as full:
        proc = subprocess.run([*LOOM, *command], stdout=full, stderr=subprocess.PIPE, text=True, timeout=scaled(60),
                              cwd=Path(__file__).parents[1])
    assert_one_line_error(proc, "loom: error:", "No space left on device")
