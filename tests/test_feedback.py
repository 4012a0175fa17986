"""Feedback handlers: automatic policy, interactive prompts, library callbacks."""

from __future__ import annotations

import io

from thoughtloom.control.feedback import AutomaticHandler, CallbackHandler, InteractiveHandler
from thoughtloom.control.types import (
    BudgetRequest,
    BudgetSituation,
    Compromise,
    DepthAction,
    DepthAnswer,
    DepthDecision,
    SearchState,
)

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
