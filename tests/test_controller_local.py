"""The controller on a real embedded model (the Gemma 3 270M base model, whose token costs the
numbers below are worked out for): a budget request under the automatic handler.

Game of 24 on "4 9 10 13" with 1,500 tokens and `--evaluation value` (the default `prior` gives
the favourite first step a full score, acceptable at once): the first propose and value calls cost
most of the budget, fewer are then left than one more expansion costs, and a depth-1 thought is worth at most
1/3 of a solution (quality = score x depth / 3), usually far less. With the acceptable bar at 0.14
the best thought is within the negotiator's near gap (0.15) of it, so the controller asks for more
tokens rather than proposing a compromise; --auto-approve-tokens answers without a terminal.

Both run `loom solve` in this process (tests/inprocess.py): the model loads once for the two.
"""

from __future__ import annotations

import json

import pytest
from inprocess import loom_here

BUDGET = 1_500
ALLOWANCE = 800


@pytest.mark.local_model
def test_embedded_model_run_asks_for_more_tokens_and_the_automatic_handler_grants_them(
        capsys: pytest.CaptureFixture[str]) -> None:
    proc = loom_here(capsys, "solve", "--task", "game24", "4 9 10 13", "--json", "--quiet",
                     "--model", "local:gemma-3-270m", "--seed", "1", "--evaluation", "value",
                     "--budget-tokens", str(BUDGET), "--auto-approve-tokens", str(ALLOWANCE),
                     "--acceptable", "0.14", "--compromise", "0")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["model"].startswith("local:")
    control = out["control"]
    requests = control["budget_requests"]
    assert requests, control["decisions"]
    first = requests[0]
    assert first["tokens"] > 0 and "< 0.14 acceptable" in first["justification"]
    assert first["situation"]["tokens_total"] == BUDGET
    assert first["situation"]["best_score"] < 0.14
    assert first["approved"] is True and 0 < first["granted"] <= ALLOWANCE
    granted = sum(r["granted"] for r in requests)
    assert granted <= ALLOWANCE
    # the hard limit rose by exactly what was granted, and spending stayed within it
    assert out["usage"]["token_limit"] == BUDGET + granted
    spent = out["usage"]["input_tokens"] + out["usage"]["output_tokens"]
    assert spent <= BUDGET + granted
    assert spent > BUDGET  # the grant was used: the search went on past the original limit
    kinds = [(d["kind"], d["decision"]) for d in control["decisions"]]
    assert kinds.index(("budget", "request_increase")) < kinds.index(("budget", "approved"))


@pytest.mark.local_model
def test_embedded_model_run_goes_one_level_past_its_depth_when_the_automatic_answers_allow_it(
        capsys: pytest.CaptureFixture[str]) -> None:
    # Game of 24 with --depth 2: a two-step thought is at most 2/3 of a solution, never acceptable,
    # and still has two numbers to combine, so at the limit the controller asks; --auto-deeper 1
    # answers, the search's limit rises from 2 to 3 (within the hard depth 2 + 3), and it goes on.
    proc = loom_here(capsys, "solve", "--task", "game24", "4 9 10 13", "--json", "--quiet",
                     "--no-store", "--model", "local:gemma-3-270m", "--seed", "1", "--depth", "2",
                     "--budget-tokens", "6000", "--auto-deeper", "1")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    control = out["control"]
    assert control["depth_limits"] == {"soft": 3, "hard": 5, "search": 3, "search_at_start": 2}, control["decisions"]
    assert ("depth", "continue_deeper") in [(d["kind"], d["decision"]) for d in control["decisions"]]
    assert out["stats"]["max_depth"] == 3
