"""The controller's report (control/report.py): its plain data and the lines `loom solve` prints."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from thoughtloom.control.report import (
    Anticipation,
    BudgetRequestOutcome,
    CompromiseOutcome,
    ControlAction,
    ControlReport,
    Decision,
    DepthLimits,
    Thresholds,
)
from thoughtloom.control.types import AnticipatedFailure, BudgetRequest, BudgetSituation, Compromise, FailureMode

EMPTY = ControlReport(
    profile="default", thresholds=Thresholds(0.7, 0.95, 0.5), depth_limits=DepthLimits(3, 6, 3, 3),
    goal_reached=False, acceptable_reached=False, best_quality=0.0, budget_requests=(), compromise=None,
    anticipated_failures=(), actions=(), score_history=(), decisions=(),
)
COMPROMISE = Compromise(5, "best so far", ("first", "best so far"), 0.6, 0.1, ("quality slightly below target",))


def situation(limit: str = "tokens", **fields: Any) -> BudgetSituation:
    values: dict[str, Any] = {"spent": 224, "left": 26, "total": 250, "best_score": 0.6, "acceptable_threshold": 0.7,
                              "goal_threshold": 0.95, "estimated_to_acceptable": 49, "estimated_to_goal": 171,
                              "confidence": 0.3, "limit": limit}
    return BudgetSituation(**{**values, **fields})


def request(limit: str = "tokens", amount: float = 1200, granted: float = 0) -> BudgetRequestOutcome:
    return BudgetRequestOutcome(BudgetRequest(amount, "close to the goal.", situation(limit)), granted)


def report(**parts: Any) -> ControlReport:
    return replace(EMPTY, **parts)


# --- to_dict: the plain data --json prints and a stored run keeps ------------------------------------


def test_a_full_report_is_the_plain_data_runs_have_always_stored_key_for_key_in_order() -> None:
    full = ControlReport(
        profile="default", thresholds=Thresholds(0.7, 0.95, 0.5), depth_limits=DepthLimits(6, 9, 6, 6),
        goal_reached=False, acceptable_reached=False, best_quality=0.6,
        budget_requests=(BudgetRequestOutcome(BudgetRequest(125, "Best score 0.60.", situation()), 0),),
        compromise=CompromiseOutcome(COMPROMISE, True),
        anticipated_failures=(Anticipation(2, AnticipatedFailure(
            FailureMode.QUALITY_PLATEAU, 0.7, "now", "Widen the beam.", "Offer the best.", "flat", (3, 4))),),
        actions=(ControlAction("quality_plateau", "widened the beam from 2 to 3", 0.7, ()),
                 ControlAction("depth", "backtracked to depth 1", nodes=(2,))),
        score_history=(0.3, 0.45, 0.6),
        decisions=(Decision("budget", "denied", "token budget increase denied", 224, 3, {"limit": "tokens"}),),
    )
    stored = {
        "profile": "default",
        "thresholds": {"acceptable": 0.7, "goal": 0.95, "compromise": 0.5},
        "depth_limits": {"soft": 6, "hard": 9, "search": 6, "search_at_start": 6},
        "goal_reached": False,
        "acceptable_reached": False,
        "best_quality": 0.6,
        "budget_requests": [{
            "limit": "tokens", "amount": 125, "tokens": 125, "justification": "Best score 0.60.",
            "situation": {
                "spent": 224, "left": 26, "total": 250, "best_score": 0.6, "acceptable_threshold": 0.7,
                "goal_threshold": 0.95, "estimated_to_acceptable": 49, "estimated_to_goal": 171, "confidence": 0.3,
                "limit": "tokens", "tokens_spent": 224, "tokens_left": 26, "tokens_total": 250,
                "estimated_tokens_to_acceptable": 49, "estimated_tokens_to_goal": 171,
            },
            "granted": 0, "approved": False,
        }],
        "compromise": {
            "node_id": 5, "content": "best so far", "path": ["first", "best so far"], "score": 0.6,
            "gap_to_acceptable": 0.1, "tradeoffs": ["quality slightly below target"],
            "explanation": "Compromise (quality 0.60, 0.10 below acceptable): best so far. "
                           "Trade-offs: quality slightly below target",
            "accepted": True,
        },
        "anticipated_failures": [{
            "checkpoint": 2, "mode": "quality_plateau", "likelihood": 0.7, "when": "now",
            "prevention": "Widen the beam.", "mitigation": "Offer the best.", "evidence": "flat", "nodes": [3, 4],
        }],
        "actions": [
            {"mode": "quality_plateau", "action": "widened the beam from 2 to 3", "likelihood": 0.7, "nodes": []},
            {"mode": "depth", "action": "backtracked to depth 1", "nodes": [2]},
        ],
        "score_history": [0.3, 0.45, 0.6],
        "decisions": [{"kind": "budget", "decision": "denied", "reason": "token budget increase denied",
                       "tokens_spent": 224, "depth": 3, "limit": "tokens"}],
    }
    assert json.dumps(full.to_dict()) == json.dumps(stored)


def test_a_request_about_another_limit_has_no_tokens_field() -> None:
    data = request("calls", amount=3, granted=4).to_dict()
    assert "tokens" not in data and (data["limit"], data["amount"], data["granted"]) == ("calls", 3, 4)


def test_an_action_without_likelihood_or_nodes_leaves_both_out() -> None:
    assert ControlAction("prevent", "widened the beam").to_dict() == {"mode": "prevent", "action": "widened the beam"}


def test_a_decision_carries_its_detail_after_its_own_fields() -> None:
    decision = Decision("depth", "continue_deeper", "raised", 80, 3, {"max_depth": 5})
    assert list(decision.to_dict()) == ["kind", "decision", "reason", "tokens_spent", "depth", "max_depth"]


# --- lines(): what loom solve prints ------------------------------------------------------------------


def test_a_report_with_nothing_done_prints_no_lines() -> None:
    assert EMPTY.lines() == []


def test_an_approved_token_request_shows_the_tokens_granted() -> None:
    lines = report(budget_requests=(request("tokens", granted=1500),)).lines()
    assert lines == ["budget request: 1,200 more tokens -> approved 1,500. close to the goal."]


def test_an_approved_request_for_another_limit_shows_the_amount_in_its_unit() -> None:
    lines = report(budget_requests=(request("cost_usd", amount=0.05, granted=0.1),
                                    request("calls", amount=3, granted=4))).lines()
    assert lines == ["budget request: $0.05 more -> approved $0.10. close to the goal.",
                     "budget request: 3 more calls -> approved 4 calls. close to the goal."]


def test_a_denied_request_says_denied() -> None:
    lines = report(budget_requests=(request("wall_s", amount=30),)).lines()
    assert lines == ["budget request: 30 more seconds -> denied. close to the goal."]


def test_the_compromise_line_says_whether_it_was_accepted_rejected_or_only_offered() -> None:
    verdicts = {True: "accepted", False: "rejected", None: "offered"}
    for accepted, verdict in verdicts.items():
        lines = report(compromise=CompromiseOutcome(COMPROMISE, accepted)).lines()
        assert lines == [f"compromise {verdict}: {COMPROMISE.explain()}"]


def test_each_action_is_one_controller_line() -> None:
    lines = report(actions=(ControlAction("depth", "backtracked to depth 2", nodes=(3,)),
                            ControlAction("prevent", "widened the beam", 0.7))).lines()
    assert lines == ["controller: depth: backtracked to depth 2", "controller: prevent: widened the beam"]


def test_the_parts_come_in_order_requests_compromise_actions() -> None:
    lines = report(
        actions=(ControlAction("depth", "backtracked to depth 2"),),
        compromise=CompromiseOutcome(COMPROMISE, True),
        budget_requests=(request("calls", amount=2),),
    ).lines()
    assert [line.split(":")[0] for line in lines] == ["budget request", "compromise accepted", "controller"]
