"""`loom solve` asking its questions at a terminal, as a person meets it.

The CLI runs in a pseudo-terminal (pexpect) against the scripted OpenAI-compatible server on
127.0.0.1, so every run is the same: the general task, one thought kept per level, values rising
0.3 -> 0.45 -> 0.6 and the goal at depth 4. The server bills exactly what the gateway reserves
(prompt bytes and n x max_tokens, 160 for an evaluation), so the whole run costs 4,246 tokens; a
budget of 3,668 runs short at the depth-3 checkpoint with the best thought at 0.6, just below the
0.7 acceptable.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pexpect
import pytest
from machine import scaled
from openai_server import FakeOpenAIServer, Reply, Seen

REPO = Path(__file__).parents[1]
BUDGET = 3_668
RUN_TOKENS = 4_246  # what the whole scripted run costs (the server charges every max_tokens)
SCORES = {1: "3", 2: "4.5", 3: "6", 4: "10", 5: "10"}
BUDGET_QUESTION = re.compile(r"Best score 0\.60 < 0\.70 acceptable\. Spend about ([\d,]+) more tokens\? \[y/N\] ")
COMPROMISE_QUESTION = "Accept this compromise? [y/N] "


def general_server_reply(seen: Seen) -> Reply:
    """The general task's prompts, answered by depth: distinct steps, rising values, an answer."""
    prompt: str = seen.body["prompt"]
    n = int(seen.body.get("n") or 1)
    max_tokens = int(seen.body["max_tokens"])
    depth = len(re.findall(r"^Step \d+: ", prompt, re.MULTILINE))
    if prompt.endswith("Final answer:"):
        texts = [" merge sort"] * n
    elif prompt.endswith("on a scale of 0 to 10:"):
        texts = [f" {SCORES[depth]}"] * n
    else:
        texts = [f" idea {depth + 1}.{i}" for i in range(n)]
    prompt_tokens, completion_tokens = len(prompt.encode()), n * max_tokens
    return Reply(200, {
        "id": "x", "object": "text_completion", "created": 0, "model": "scripted",
        "choices": [{"index": i, "text": t, "finish_reason": "stop"} for i, t in enumerate(texts)],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    })


@pytest.fixture
def model(server: FakeOpenAIServer) -> str:
    server.responder = general_server_reply
    return f"openai-compatible:{server.url}@scripted#completions"


def solve_args(model: str, *extra: str) -> list[str]:
    return [
        "-m", "thoughtloom", "solve", "--task", "general", "--model", model,
        "--breadth", "2", "--beam", "1", "--depth", "5", "--value-samples", "1",
        "--budget-tokens", str(BUDGET), *extra, "sort a list",
    ]


def env() -> dict[str, str]:
    return {**os.environ, "TERM": "dumb", "PYTHONUNBUFFERED": "1"}


def spawn(args: list[str]) -> pexpect.spawn:
    return pexpect.spawn(sys.executable, args, env=env(), cwd=str(REPO), encoding="utf-8", timeout=scaled(60),
                         dimensions=(40, 250))


def last_json(text: str) -> dict[str, Any]:
    """The JSON object printed last (progress lines and the echoed answer come before it)."""
    start = text.rindex("\n{") + 1 if not text.startswith("{") else 0
    obj, _ = json.JSONDecoder().raw_decode(text[start:].replace("\r\n", "\n"))
    return obj


def test_answering_yes_raises_the_budget_and_the_run_goes_on(model: str, server: FakeOpenAIServer) -> None:
    child = spawn(solve_args(model, "--json"))
    try:
        child.expect(BUDGET_QUESTION)
        before = child.before
        asked = int(child.match.group(1).replace(",", ""))
        calls_when_asked = len(server.seen)
        assert "control: budget request_increase" in before  # the live progress showed the decision
        assert "Best score 0.60 < 0.70 acceptable;" in before  # the justification, above the question
        child.sendline("y")
        child.expect(pexpect.EOF)
        rest = child.before
    finally:
        child.close()
    assert child.exitstatus == 0, rest
    assert "control: budget approved: token limit raised by" in rest
    assert len(server.seen) > calls_when_asked  # the search went on after the answer
    out = last_json(rest)
    control = out["control"]
    assert control["budget_requests"] == [
        {**control["budget_requests"][0], "tokens": asked, "granted": asked, "approved": True}
    ]
    assert out["usage"]["token_limit"] == BUDGET + asked
    spent = out["usage"]["input_tokens"] + out["usage"]["output_tokens"]
    assert BUDGET < spent == RUN_TOKENS <= BUDGET + asked  # beyond the original limit, within the raised one
    assert out["termination_reason"] == "goal_reached" and control["goal_reached"] is True
    assert out["answer"] == "merge sort"


def test_answering_no_then_accepting_the_compromise(model: str, server: FakeOpenAIServer) -> None:
    child = spawn(solve_args(model, "--quiet"))
    try:
        child.expect(BUDGET_QUESTION)
        calls_when_asked = len(server.seen)
        child.sendline("n")
        child.expect_exact(COMPROMISE_QUESTION)
        explanation = child.before
        child.sendline("y")
        child.expect(pexpect.EOF)
        rest = child.before
    finally:
        child.close()
    assert child.exitstatus == 0, rest
    assert "Compromise (quality 0.60, 0.10 below acceptable): idea 3." in explanation
    assert "Trade-offs: quality slightly below target" in explanation
    assert len(server.seen) == calls_when_asked + 1  # only the final answer's call after the answers
    assert "stopped: compromise_accepted" in rest
    assert re.search(r"budget request: [\d,]+ more tokens -> denied\.", rest)
    assert "compromise accepted: Compromise (quality 0.60" in rest
    assert f"of {BUDGET:,}" in rest  # the limit was not raised


def test_answering_no_twice_stops_at_the_budget(model: str) -> None:
    child = spawn(solve_args(model, "--quiet", "--json"))
    try:
        child.expect(BUDGET_QUESTION)
        child.sendline("")  # Enter: the default, no
        child.expect_exact(COMPROMISE_QUESTION)
        child.sendline("n")
        child.expect(pexpect.EOF)
        rest = child.before
    finally:
        child.close()
    assert child.exitstatus == 0, rest
    assert rest.count("[y/N]") == 0  # not asked again
    out = last_json(rest)
    assert out["termination_reason"] == "budget_tokens"
    assert out["control"]["budget_requests"][0]["approved"] is False
    assert out["control"]["compromise"]["accepted"] is False
    assert out["usage"]["input_tokens"] + out["usage"]["output_tokens"] <= BUDGET


def run_without_terminal(model: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *solve_args(model, "--json", *extra)], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, env=env(), cwd=REPO, timeout=scaled(60), check=False)


def test_without_a_terminal_nothing_is_asked_and_the_automatic_policy_answers(model: str) -> None:
    proc = run_without_terminal(model)
    assert proc.returncode == 0, proc.stderr
    assert "[y/N]" not in proc.stderr + proc.stdout
    out = json.loads(proc.stdout)
    request = out["control"]["budget_requests"][0]
    assert (request["approved"], request["granted"]) == (False, 0)  # the default: the budget is hard
    assert out["termination_reason"] == "compromise_accepted"  # 0.60 clears the 0.50 compromise bar
    assert out["control"]["compromise"]["accepted"] is True
    assert out["usage"]["token_limit"] == BUDGET
    assert "control: budget denied" in proc.stderr  # the decisions still show in the progress


def test_without_a_terminal_auto_approve_grants_up_to_its_allowance(model: str) -> None:
    proc = run_without_terminal(model, "--auto-approve-tokens", "800")
    assert proc.returncode == 0, proc.stderr
    assert "[y/N]" not in proc.stderr
    out = json.loads(proc.stdout)
    [request] = out["control"]["budget_requests"]
    assert request["approved"] is True and request["granted"] == 800 < request["tokens"]
    assert out["usage"]["token_limit"] == BUDGET + 800
    assert out["termination_reason"] == "goal_reached"
    assert BUDGET < out["usage"]["input_tokens"] + out["usage"]["output_tokens"] == RUN_TOKENS <= BUDGET + 800


def test_without_a_terminal_an_allowance_used_up_denies_the_next_request(model: str) -> None:
    proc = run_without_terminal(model, "--auto-approve-tokens", "500")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    first, second = out["control"]["budget_requests"]
    assert (first["approved"], first["granted"]) == (True, 500)
    assert (second["approved"], second["granted"]) == (False, 0)  # 500 in total, all given
    assert second["situation"]["tokens_total"] == BUDGET + 500
    assert out["usage"]["token_limit"] == BUDGET + 500
    assert out["termination_reason"] == "compromise_accepted"
    assert out["usage"]["input_tokens"] + out["usage"]["output_tokens"] <= BUDGET + 500


def test_answering_yes_at_the_depth_limit_takes_the_search_deeper(model: str) -> None:
    args = ["-m", "thoughtloom", "solve", "--task", "general", "--model", model, "--breadth", "2", "--beam", "1",
            "--depth", "3", "--value-samples", "1", "--json", "sort a list"]
    child = spawn(args)
    try:
        child.expect_exact("Go 2 levels deeper? [y/N/b=backtrack] ")
        asked = child.before
        child.sendline("y")
        child.expect(pexpect.EOF)
        rest = child.before
    finally:
        child.close()
    assert child.exitstatus == 0, rest
    assert "Depth 3: depth limit 3 reached" in asked  # the reason, above the question
    out = last_json(rest)
    assert out["control"]["depth_limits"]["search"] == 5 and out["stats"]["max_depth"] == 4
    assert out["termination_reason"] == "goal_reached"
