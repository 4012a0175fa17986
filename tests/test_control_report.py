"""The lines `loom solve` prints for the controller's report: one behaviour of control_lines per test."""

from __future__ import annotations

from typing import Any

from thoughtloom.control.report import control_lines


def record(**parts: Any) -> dict[str, Any]:
    """A controller report with only the parts control_lines reads (the rest does not change the lines)."""
    return {"budget_requests": [], "compromise": None, "actions": [], **parts}


def request(**fields: Any) -> dict[str, Any]:
    return {"amount": 1200, "justification": "close to the goal.", "granted": 0, "approved": False, **fields}


def test_a_record_with_nothing_done_prints_no_lines() -> None:
    assert control_lines(record()) == []


def test_an_approved_token_request_shows_the_tokens_granted() -> None:
    lines = control_lines(record(budget_requests=[request(limit="tokens", granted=1500, approved=True)]))
    assert lines == ["budget request: 1,200 more tokens -> approved 1,500. close to the goal."]


def test_a_request_without_a_limit_is_about_tokens() -> None:
    lines = control_lines(record(budget_requests=[request(granted=1500, approved=True)]))
    assert lines == ["budget request: 1,200 more tokens -> approved 1,500. close to the goal."]


def test_an_approved_request_for_another_limit_shows_the_amount_in_its_unit() -> None:
    lines = control_lines(record(budget_requests=[
        request(limit="cost_usd", amount=0.05, granted=0.1, approved=True),
        request(limit="calls", amount=3, granted=4, approved=True),
    ]))
    assert lines == ["budget request: $0.05 more -> approved $0.10. close to the goal.",
                     "budget request: 3 more calls -> approved 4 calls. close to the goal."]


def test_a_denied_request_says_denied() -> None:
    lines = control_lines(record(budget_requests=[request(limit="wall_s", amount=30)]))
    assert lines == ["budget request: 30 more seconds -> denied. close to the goal."]


def test_the_compromise_line_says_whether_it_was_accepted_rejected_or_only_offered() -> None:
    verdicts = {True: "accepted", False: "rejected", None: "offered"}
    for accepted, verdict in verdicts.items():
        lines = control_lines(record(compromise={"explanation": "Compromise (quality 0.60).", "accepted": accepted}))
        assert lines == [f"compromise {verdict}: Compromise (quality 0.60)."]


def test_each_action_is_one_controller_line() -> None:
    lines = control_lines(record(actions=[{"mode": "depth", "action": "backtracked to depth 2", "nodes": [3]},
                                          {"mode": "prevent", "action": "widened the beam", "likelihood": 0.7}]))
    assert lines == ["controller: depth: backtracked to depth 2", "controller: prevent: widened the beam"]


def test_the_parts_come_in_order_requests_compromise_actions() -> None:
    lines = control_lines(record(
        actions=[{"mode": "depth", "action": "backtracked to depth 2"}],
        compromise={"explanation": "best so far", "accepted": True},
        budget_requests=[request(limit="calls", amount=2)],
    ))
    assert [line.split(":")[0] for line in lines] == ["budget request", "compromise accepted", "controller"]
