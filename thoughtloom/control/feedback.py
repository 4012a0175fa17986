"""Feedback handlers: who answers the controller's requests (a policy or your code; a person at a
terminal is asked by views.ask.InteractiveHandler)."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from .types import (
    AnticipatedFailure,
    BudgetRequest,
    Compromise,
    DepthAction,
    DepthAnswer,
    DepthDecision,
    FailureAction,
    SearchState,
)


class FeedbackHandler(Protocol):
    """Answers the controller's four questions."""

    async def request_budget(self, request: BudgetRequest) -> float:
        """How much more of `request.limit` is approved, in its unit (0 = denied)."""
        ...

    async def propose_compromise(self, compromise: Compromise) -> bool:
        """True to accept the compromise and stop the search."""
        ...

    async def depth_feedback(self, decision: DepthDecision, state: SearchState) -> DepthAnswer:
        """Continue deeper (by how much), stop, or backtrack."""
        ...

    async def failure_feedback(self, failure: AnticipatedFailure, state: SearchState) -> FailureAction:
        """A failure the controller sees coming and could not prevent: continue, or abort the search now."""
        ...


@dataclass(slots=True)
class AutomaticHandler:
    """A policy from configuration: approve up to `approve_tokens` more tokens in total (and up to
    `approve_calls` calls, `approve_usd` dollars, `approve_seconds` seconds), accept compromises
    scoring at least `accept_compromise_above`, go up to `extra_depth` levels past the soft depth
    limit in steps of `depth_step`, and abort on an anticipated failure it could not prevent that
    is at least `abort_above` likely.

    The default approves nothing, goes no deeper and never aborts, so a budget given on the command
    line stays a hard limit unless the user opts in.
    """

    approve_tokens: int = 0
    accept_compromise_above: float = 0.5
    extra_depth: int = 0
    depth_step: int = 2
    approved: int = 0
    deepened: int = 0
    approve_calls: int = 0
    approve_usd: float = 0.0
    approve_seconds: float = 0.0
    abort_above: float | None = None
    #: What was granted so far of each limit other than tokens (tokens: `approved`).
    granted: dict[str, float] = field(default_factory=dict)

    async def request_budget(self, request: BudgetRequest) -> float:
        """Grant what is left of the limit's allowance, up to the request."""
        if request.limit == "tokens":
            grant = max(0, min(request.tokens, self.approve_tokens - self.approved))
            self.approved += grant
            return grant
        allowance = {"calls": self.approve_calls, "cost_usd": self.approve_usd,
                     "wall_s": self.approve_seconds}[request.limit]
        given = self.granted.get(request.limit, 0)
        amount = max(0.0, min(request.amount, allowance - given))
        if request.limit == "calls":
            amount = int(amount)
        self.granted[request.limit] = given + amount
        return amount

    async def propose_compromise(self, compromise: Compromise) -> bool:
        """Accept if the compromise clears the configured bar."""
        return compromise.score >= self.accept_compromise_above

    async def depth_feedback(self, decision: DepthDecision, state: SearchState) -> DepthAnswer:
        """Go deeper while the allowance lasts, else stop."""
        step = min(self.depth_step, self.extra_depth - self.deepened)
        if step <= 0:
            return DepthAnswer(DepthAction.STOP)
        self.deepened += step
        return DepthAnswer(DepthAction.CONTINUE, step)

    async def failure_feedback(self, failure: AnticipatedFailure, state: SearchState) -> FailureAction:
        """Abort when the failure is at least `abort_above` likely; by default, never."""
        if self.abort_above is not None and failure.likelihood >= self.abort_above:
            return FailureAction.ABORT
        return FailureAction.CONTINUE


async def _call(fn: Callable[..., Any], *args: Any) -> Any:
    result = fn(*args)
    return await result if inspect.isawaitable(result) else result


@dataclass(slots=True)
class CallbackHandler:
    """Library users' functions (sync or async) answer; unset questions go to `fallback`."""

    on_budget: Callable[[BudgetRequest], float | Awaitable[float]] | None = None
    on_compromise: Callable[[Compromise], bool | Awaitable[bool]] | None = None
    on_depth: Callable[[DepthDecision, SearchState], DepthAnswer | Awaitable[DepthAnswer]] | None = None
    on_failure: Callable[[AnticipatedFailure, SearchState], FailureAction | Awaitable[FailureAction]] | None = None
    fallback: FeedbackHandler = field(default_factory=AutomaticHandler)

    async def request_budget(self, request: BudgetRequest) -> float:
        """Ask on_budget, else the fallback (whole tokens and calls)."""
        if self.on_budget is None:
            return await self.fallback.request_budget(request)
        granted = float(await _call(self.on_budget, request))
        return int(granted) if request.limit in ("tokens", "calls") else granted

    async def propose_compromise(self, compromise: Compromise) -> bool:
        """Ask on_compromise, else the fallback."""
        if self.on_compromise is None:
            return await self.fallback.propose_compromise(compromise)
        return bool(await _call(self.on_compromise, compromise))

    async def depth_feedback(self, decision: DepthDecision, state: SearchState) -> DepthAnswer:
        """Ask on_depth, else the fallback."""
        if self.on_depth is None:
            return await self.fallback.depth_feedback(decision, state)
        return await _call(self.on_depth, decision, state)

    async def failure_feedback(self, failure: AnticipatedFailure, state: SearchState) -> FailureAction:
        """Ask on_failure, else the fallback."""
        if self.on_failure is None:
            return await self.fallback.failure_feedback(failure, state)
        return FailureAction(await _call(self.on_failure, failure, state))
