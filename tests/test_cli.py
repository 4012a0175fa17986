"""The `loom` command as a user meets it: real subprocesses, a real HTTP model server on 127.0.0.1."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from machine import scaled

from openai_server import FakeOpenAIServer, Reply, Seen, closed_port

LOOM = [sys.executable, "-m", "thoughtloom"]

# Scripted game24 replies by the numbers in the prompt's last "Input:" line.
PROPOSALS = {
    "4 5 6 10": "10 - 4 = 6 (left: 5 6 6)\n4 + 5 = 11 (left: 6 10 11)\n7 * 7 = 49 (left: 4 5 49)",
    "5 6 6": "5 * 6 = 30 (left: 6 30)",
    "6 30": "30 - 6 = 24 (left: 24)",
}


def game24_server_reply(seen: Seen) -> Reply:
    """A scripted model that knows one path to 24 for "4 5 6 10"."""
    prompt = seen.body.get("prompt") or seen.body["messages"][-1]["content"]
    n = int(seen.body.get("n") or 1)
    if prompt.startswith("Evaluate if"):
        text = "likely"
    else:
        numbers = re.findall(r"Input: ([\d ]+)\nPossible", prompt)[-1]
        text = PROPOSALS.get(numbers, "1 + 1 = 2 (left: 2)")
    return Reply(
        200,
        {
            "id": "x", "object": "text_completion", "created": 0, "model": "m",
            "choices": [{"index": i, "text": text, "finish_reason": "stop"} for i in range(n)],
            "usage": {"prompt_tokens": 100, "completion_tokens": 20 * n, "total_tokens": 100 + 20 * n},
        },
    )


def loom(*args: str, env: dict[str, str] | None = None,
         timeout: float | None = None) -> subprocess.CompletedProcess[str]:
    """Run loom in a subprocess, as a user would (timeout: default 120 s scaled to this machine)."""
    return subprocess.run(
        [*LOOM, *args], capture_output=True, text=True, timeout=scaled(120) if timeout is None else timeout,
        env={**os.environ, **(env or {})}, cwd=Path(__file__).parents[1],
    )


def assert_one_line_error(proc: subprocess.CompletedProcess[str], *fragments: str) -> None:
    """Exit 2, a single stderr line naming the problem, no traceback."""
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    for fragment in fragments:
        assert fragment in lines[0]


@pytest.fixture
def game24_model(server: FakeOpenAIServer) -> str:
    """A model spec pointing at the scripted game24 server."""
    server.responder = game24_server_reply
    return f"openai-compatible:{server.url}@scripted#completions"


def test_game24_with_three_numbers_exits_2_with_one_line() -> None:
    assert_one_line_error(loom("solve", "--task", "game24", "1 2 3"), "four numbers", "1 2 3")


def test_unknown_task_exits_2_and_lists_the_tasks() -> None:
    assert_one_line_error(loom("solve", "--task", "chess", "e4"), "unknown task 'chess'", "game24")


def test_zero_token_budget_exits_2() -> None:
    assert_one_line_error(loom("solve", "--budget-tokens", "0", "hi"), "--budget-tokens", "at least 1")


def test_unreachable_endpoint_exits_2_with_the_url() -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"
    proc = loom("solve", "--quiet", "--model", f"openai-compatible:{url}@m", "hi")
    assert_one_line_error(proc, "cannot reach", url)


def test_missing_openai_key_exits_2_naming_the_variable() -> None:
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    proc = subprocess.run([*LOOM, "solve", "--model", "openai:gpt-4o-mini", "hi"],
                          capture_output=True, text=True, env=env, timeout=scaled(60))
    assert_one_line_error(proc, "OPENAI_API_KEY")


def test_malformed_model_spec_exits_2() -> None:
    assert_one_line_error(loom("solve", "--model", "gpt4", "hi"), "gpt4")


def test_mermaid_into_missing_directory_exits_2_before_any_work(tmp_path: Path) -> None:
    proc = loom("solve", "--task", "game24", "--mermaid", str(tmp_path / "nope" / "g.mmd"), "4 5 6 10")
    assert_one_line_error(proc, "--mermaid", "does not exist")


def test_tasks_lists_every_task() -> None:
    proc = loom("tasks")
    assert proc.returncode == 0
    assert "game24" in proc.stdout and "general" in proc.stdout


def test_solve_json_has_the_documented_fields(game24_model: str) -> None:
    proc = loom("solve", "--task", "game24", "--model", game24_model, "--json", "4 5 6 10")
    assert proc.returncode == 0, proc.stderr
    out: dict[str, Any] = json.loads(proc.stdout)
    assert out["answer"] == "(5 * 6) - (10 - 4) = 24"
    assert out["solved"] is True
    assert out["termination_reason"] == "goal_reached"
    assert {"id", "kind", "content", "score"} <= set(out["best_path"][0])
    assert [s["content"] for s in out["best_path"]][-2] == "30 - 6 = 24 (left: 24)"
    assert {"input_tokens", "output_tokens", "calls", "cost_usd"} <= set(out["usage"])
    assert {"nodes", "pruned", "max_depth", "wall_s"} <= set(out["stats"])
    assert out["stats"]["repaired"] >= 1  # "4 + 5 = 11" was corrected to 9
    assert out["stats"]["rejected"] >= 1  # "7 * 7" uses numbers that are not there


def test_solve_text_output_shows_answer_path_and_stats(game24_model: str) -> None:
    proc = loom("solve", "--task", "game24", "--model", game24_model, "4 5 6 10")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("answer: (5 * 6) - (10 - 4) = 24   [checked: correct]")
    assert "best path:" in proc.stdout
    assert "stopped: goal_reached" in proc.stdout


def test_progress_goes_to_stderr_and_stops_with_the_reason(game24_model: str) -> None:
    proc = loom("solve", "--task", "game24", "--model", game24_model, "4 5 6 10")
    assert "stopped: goal_reached" in proc.stderr
    assert "nodes" in proc.stderr


def test_mermaid_file_highlights_the_best_path(game24_model: str, tmp_path: Path) -> None:
    target = tmp_path / "graph.mmd"
    proc = loom("solve", "--task", "game24", "--model", game24_model, "--quiet", "--mermaid", str(target), "4 5 6 10")
    assert proc.returncode == 0, proc.stderr
    text = target.read_text()
    assert text.startswith("flowchart TD")
    assert re.search(r"class n0,.* best", text)
    assert "class " in text and " failed" in text  # the rejected 7 * 7 step
    assert "linkStyle" in text


def test_token_budget_is_never_exceeded_from_the_cli(game24_model: str) -> None:
    proc = loom("solve", "--task", "game24", "--model", game24_model, "--json", "--budget-tokens", "500", "4 5 6 10")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["usage"]["input_tokens"] + out["usage"]["output_tokens"] <= 500
    assert out["termination_reason"] == "budget_tokens"
    assert out["answer"] is None
    assert len(out["best_path"]) >= 1


def test_help_lists_solve_options() -> None:
    proc = loom("solve", "--help")
    assert proc.returncode == 0
    for option in ("--strategy", "--breadth", "--beam", "--depth", "--budget-tokens", "--seed", "--json", "--mermaid"):
        assert option in proc.stdout


# The game24 main job end to end on the embedded model is the README's first example (tests/test_readme.py).


def test_profiles_lists_every_profile_with_its_thresholds() -> None:
    proc = loom("profiles")
    assert proc.returncode == 0
    for name in ("default", "code_generation", "debugging", "research_synthesis", "strategic_planning", "design"):
        assert name in proc.stdout
    assert "0.75" in proc.stdout  # code_generation's acceptable threshold


def test_unknown_profile_exits_2_and_lists_the_profiles() -> None:
    assert_one_line_error(loom("solve", "--profile", "poetry", "hi"), "unknown profile 'poetry'", "debugging")


def test_profile_values_are_overridden_flag_by_flag(game24_model: str) -> None:
    proc = loom("solve", "--task", "game24", "--model", game24_model, "--json", "--quiet", "--profile", "debugging",
                "--acceptable", "0.6", "--soft-depth", "2", "--depth", "4", "--hard-depth", "6", "--min-progress", "0.1",
                "--stagnation", "2", "4 5 6 10")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    control = out["control"]
    assert control["profile"] == "debugging"
    assert control["thresholds"] == {"acceptable": 0.6, "goal": 0.9, "compromise": 0.5}
    # --depth is where the search stops unless the controller is allowed deeper, up to --hard-depth
    assert control["depth_limits"] == {"soft": 2, "hard": 6, "search": 4, "search_at_start": 4}
    assert out["config"]["beam"] == 5  # from the profile


def test_inconsistent_thresholds_exit_2() -> None:
    assert_one_line_error(loom("solve", "--acceptable", "0.9", "--goal", "0.8", "hi"), "compromise <= acceptable <= goal")


def test_ctrl_c_prints_what_was_found_and_exits_130(server: FakeOpenAIServer) -> None:
    def slow(seen: Seen) -> Reply:
        # The first replies come quickly (something is found); later ones slowly, so a loaded machine
        # cannot finish the search before the Ctrl-C.
        reply = game24_server_reply(seen)
        return Reply(reply.status, reply.body, delay_s=0.3 if len(server.seen) <= 2 else 3)

    server.responder = slow
    proc = subprocess.Popen(
        [*LOOM, "solve", "--task", "game24", "--model", f"openai-compatible:{server.url}@m#completions", "--quiet",
         "4 5 6 10"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=Path(__file__).parents[1],
    )
    deadline = time.monotonic() + 30
    while len(server.seen) < 3 and time.monotonic() < deadline:  # the first replies are in
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=scaled(60))
    assert proc.returncode == 130, err
    assert "stopped: interrupted" in out
    assert "best path:" in out
    assert "Traceback" not in err


def test_a_reader_that_goes_away_gets_no_traceback() -> None:
    # `true` exits without reading long before loom starts writing: loom's writes meet a closed pipe.
    proc = subprocess.run(f"{sys.executable} -m thoughtloom profiles | true", shell=True, capture_output=True,
                          text=True, timeout=scaled(60))
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr


# --- every request on the wire is counted (issue 12) ----------------------------------------


def ignoring_n_reply(seen: Seen) -> Reply:
    """The game24 model behind a server that ignores n (llama.cpp server, Ollama): one choice a request."""
    reply = game24_server_reply(seen)
    assert reply.body is not None
    reply.body["choices"] = reply.body["choices"][:1]
    reply.body["usage"] = {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}
    return reply


def test_budget_calls_bounds_the_requests_a_server_ignoring_n_receives(server: FakeOpenAIServer) -> None:
    server.responder = ignoring_n_reply
    proc = loom("solve", "--task", "game24", "--model", f"openai-compatible:{server.url}@m#completions", "--json",
                "--budget-calls", "6", "4 5 6 10")
    assert proc.returncode == 0, proc.stderr
    assert 0 < len(server.seen) <= 6
    assert json.loads(proc.stdout)["usage"]["calls"] >= len(server.seen)  # none sent uncounted


def test_concurrency_one_means_one_request_in_flight_at_the_server(server: FakeOpenAIServer) -> None:
    def slow(seen: Seen) -> Reply:
        reply = ignoring_n_reply(seen)
        reply.delay_s = 0.02
        return reply

    server.responder = slow
    proc = loom("solve", "--task", "game24", "--model", f"openai-compatible:{server.url}@m#completions", "--quiet",
                "--concurrency", "1", "--budget-calls", "30", "4 5 6 10")
    assert proc.returncode == 0, proc.stderr
    assert len(server.seen) > 1
    assert server.peak_in_flight == 1


@pytest.fixture
def cut_at_a_limit(server: FakeOpenAIServer, tmp_path: Path) -> dict[str, Any]:
    """A search stopped by its token budget while other requests were in flight (and cancelled)."""
    def slow(seen: Seen) -> Reply:
        reply = game24_server_reply(seen)
        reply.delay_s = 0.3
        return reply

    server.responder = slow
    store = tmp_path / "runs.db"
    proc = loom("solve", "--task", "game24", "--model", f"openai-compatible:{server.url}@m#completions", "--json",
                "--strategy", "best_first", "--beam", "4", "--concurrency", "8", "--budget-tokens", "2500",
                "--store", str(store), "4 5 6 10")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    # Usually "budget_tokens" with expansions cancelled; on a loaded machine the goal may come first.
    assert out["termination_reason"] in ("budget_tokens", "goal_reached")
    return {"out": out, "store": store, "requests": len(server.seen)}


def test_json_usage_and_loom_show_agree_on_tokens_and_calls(cut_at_a_limit: dict[str, Any]) -> None:
    out, store = cut_at_a_limit["out"], cut_at_a_limit["store"]
    run = loom("runs", "--store", str(store)).stdout.splitlines()[1].split()[0]
    shown = loom("show", run, "--store", str(store))
    usage = out["usage"]
    tokens = usage["input_tokens"] + usage["output_tokens"]
    assert f"{usage['calls']} calls · {tokens:,} tokens" in shown.stdout
