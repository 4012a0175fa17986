"""Feedback handlers: automatic policy, interactive prompts, library callbacks."""

from __future__ import annotations

import io

import pytest

from thoughtloom.control.feedback import AutomaticHandler, CallbackHandler
from thoughtloom.control.types import (
    AnticipatedFailure,
    BudgetRequest,
    BudgetSituation,
    Compromise,
    DepthAction,
    DepthAnswer,
    DepthDecision,
    FailureAction,
    FailureMode,
    SearchState,
)
from thoughtloom.views.ask import InteractiveHandler

SITUATION = BudgetSituation(900, 100, 1000, 0.62, 0.7, 0.95, 3000, None, 0.4)
REQUEST = BudgetRequest(3000, "because", SITUATION)
COMPROMISE = Compromise(3, "a plan", ("a plan",), 0.6, 0.1, ("quality slightly below target",))
DECISION = DepthDecision(DepthAction.REQUEST_FEEDBACK, "quality stagnating", "go deeper only if worth it")
STATE = SearchState(3, 6, 10, 3, 500, 1000, 500, None, [0.5, 0.5, 0.5], 9, 0, 0, [], [], 160.0)


async def test_automatic_handler_approves_up_to_its_allowance_in_total() -> None:
    handler = AutomaticHandler(approve_tokens=4000)
    assert await handler.request_budget(REQUEST) == 3000
    assert await handler.request_budget(REQUEST) == 1000
    assert await handler.request_budget(REQUEST) == 0


async def test_automatic_handler_denies_by_default() -> None:
    assert await AutomaticHandler().request_budget(REQUEST) == 0


async def test_automatic_handler_accepts_compromises_above_its_bar_only() -> None:
    assert await AutomaticHandler(accept_compromise_above=0.55).propose_compromise(COMPROMISE) is True
    assert await AutomaticHandler(accept_compromise_above=0.65).propose_compromise(COMPROMISE) is False


async def test_automatic_handler_goes_deeper_while_its_depth_allowance_lasts() -> None:
    handler = AutomaticHandler(extra_depth=3, depth_step=2)
    assert await handler.depth_feedback(DECISION, STATE) == DepthAnswer(DepthAction.CONTINUE, 2)
    assert await handler.depth_feedback(DECISION, STATE) == DepthAnswer(DepthAction.CONTINUE, 1)
    assert (await handler.depth_feedback(DECISION, STATE)).action is DepthAction.STOP


async def test_interactive_handler_asks_the_documented_budget_question() -> None:
    out = io.StringIO()
    handler = InteractiveHandler(stdin=io.StringIO("y\n"), stderr=out)
    assert await handler.request_budget(REQUEST) == 3000
    assert "Best score 0.62 < 0.70 acceptable. Spend about 3,000 more tokens? [y/N]" in out.getvalue()


async def test_interactive_handler_treats_enter_and_eof_as_no() -> None:
    assert await InteractiveHandler(stdin=io.StringIO("\n"), stderr=io.StringIO()).request_budget(REQUEST) == 0
    assert await InteractiveHandler(stdin=io.StringIO(""), stderr=io.StringIO()).propose_compromise(COMPROMISE) is False


async def test_interactive_handler_asks_to_accept_a_compromise() -> None:
    out = io.StringIO()
    assert await InteractiveHandler(stdin=io.StringIO("yes\n"), stderr=out).propose_compromise(COMPROMISE)
    assert "Accept this compromise? [y/N]" in out.getvalue()


async def test_interactive_handler_shows_model_text_in_a_question_escaped() -> None:
    out = io.StringIO()
    hostile = Compromise(3, "plan\x1b]0;pwned\x07\u202e", ("plan",), 0.6, 0.1, ("below target",))
    await InteractiveHandler(stdin=io.StringIO("\n"), stderr=out).propose_compromise(hostile)
    shown = out.getvalue().removeprefix("\r\x1b[K")  # the handler's own line clear
    assert "\x1b" not in shown and "\u202e" not in shown and "\x07" not in shown
    assert "plan\\x1b]0;pwned\\x07\\u202e" in shown


async def test_interactive_handler_can_backtrack_on_depth_feedback() -> None:
    handler = InteractiveHandler(stdin=io.StringIO("b\n"), stderr=io.StringIO())
    assert (await handler.depth_feedback(DECISION, STATE)).action is DepthAction.BACKTRACK


async def test_callback_handler_calls_sync_and_async_functions() -> None:
    async def on_compromise(c: Compromise) -> bool:
        return c.score > 0.5

    handler = CallbackHandler(on_budget=lambda r: r.tokens // 2, on_compromise=on_compromise)
    assert await handler.request_budget(REQUEST) == 1500
    assert await handler.propose_compromise(COMPROMISE) is True


async def test_callback_handler_falls_back_for_unset_questions() -> None:
    handler = CallbackHandler(fallback=AutomaticHandler(extra_depth=2))
    assert (await handler.depth_feedback(DECISION, STATE)).action is DepthAction.CONTINUE


# --- every budget limit, and anticipated failures ------------------------------------------------

CALLS = BudgetRequest(4, "because", BudgetSituation(8, 0, 8, 0.62, 0.7, 0.95, 3, None, 0.4, limit="calls"))
DOLLARS = BudgetRequest(0.05, "because", BudgetSituation(0.1, 0.0, 0.1, 0.62, 0.7, 0.95, 0.03, None, 0.4,
                                                         limit="cost_usd"))
SECONDS = BudgetRequest(30, "because", BudgetSituation(60, 0, 60, 0.62, 0.7, 0.95, 20, None, 0.4, limit="wall_s"))
FAILURE = AnticipatedFailure(FailureMode.DEPTH_EXCEEDED, 0.85, "at depth 4", "Backtrack.", "Stop at depth 4.",
                             "depth 2 of hard limit 4")


async def test_automatic_handler_keeps_an_allowance_per_limit() -> None:
    handler = AutomaticHandler(approve_tokens=100, approve_calls=6, approve_usd=0.07, approve_seconds=40)
    assert [await handler.request_budget(r) for r in (CALLS, CALLS)] == [4, 2]
    assert [await handler.request_budget(r) for r in (DOLLARS, DOLLARS)] == [0.05, pytest.approx(0.02)]
    assert [await handler.request_budget(r) for r in (SECONDS, SECONDS)] == [30, 10]
    assert await handler.request_budget(REQUEST) == 100  # tokens have their own allowance


async def test_a_token_callback_grants_nothing_of_another_limit() -> None:
    handler = CallbackHandler(on_budget=lambda r: r.tokens)  # written when only tokens were negotiated
    assert await handler.request_budget(CALLS) == 0
    assert CALLS.tokens == 0 and CALLS.amount == 4


@pytest.mark.parametrize(("request_", "question"), [
    (CALLS, "Make about 4 more calls? [y/N]"),
    (DOLLARS, "Spend about $0.05 more? [y/N]"),
    (SECONDS, "Take about 30 more seconds? [y/N]"),
])
async def test_interactive_handler_asks_in_the_limits_unit(request_: BudgetRequest, question: str) -> None:
    out = io.StringIO()
    assert await InteractiveHandler(stdin=io.StringIO("y\n"), stderr=out).request_budget(request_) == request_.amount
    assert question in out.getvalue()


async def test_interactive_handler_asks_whether_to_abort_on_a_likely_failure() -> None:
    out = io.StringIO()
    assert await InteractiveHandler(stdin=io.StringIO("y\n"), stderr=out).failure_feedback(FAILURE, STATE) is (
        FailureAction.ABORT)
    assert "Likely failure (depth_exceeded, 85%, at depth 4): depth 2 of hard limit 4." in out.getvalue()
    assert "Abort the search now and keep the best answer so far? [y/N]" in out.getvalue()
    assert await InteractiveHandler(stdin=io.StringIO("\n"), stderr=io.StringIO()).failure_feedback(FAILURE, STATE) is (
        FailureAction.CONTINUE)


async def test_callback_handler_asks_on_failure_else_its_fallback() -> None:
    assert await CallbackHandler(on_failure=lambda f, s: "abort").failure_feedback(FAILURE, STATE) is FailureAction.ABORT
    fallback = CallbackHandler(fallback=AutomaticHandler(abort_above=0.8))
    assert await fallback.failure_feedback(FAILURE, STATE) is FailureAction.ABORT
