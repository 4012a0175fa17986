"""Feedback handlers: who answers the controller's requests (a person, a policy, or your code)."""

from __future__ import annotations

import asyncio
import inspect
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TextIO

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


@dataclass(slots=True)
class InteractiveHandler:
    """Asks the person at the terminal; anything but 'y' (or 'b' to backtrack) means no."""

    stdin: TextIO = field(default_factory=lambda: sys.stdin)
    stderr: TextIO = field(default_factory=lambda: sys.stderr)
    depth_step: int = 2

    async def _ask(self, lines: list[str], question: str) -> str:
        def ask() -> str:
            self.stderr.write("\r\033[K" + "".join(f"{line}\n" for line in lines) + question)
            self.stderr.flush()
            answer = self.stdin.readline()
            if not answer:
                self.stderr.write("\n")
            return answer.strip().lower()

        return await asyncio.to_thread(ask)

    async def request_budget(self, request: BudgetRequest) -> float:
        """'Best score 0.62 < 0.70 acceptable. Spend about 3,000 more tokens? [y/N]' (or calls, $, seconds)."""
        s = request.situation
        answer = await self._ask(
            [request.justification],
            f"Best score {s.best_score:.2f} < {s.acceptable_threshold:.2f} acceptable. {_more(request)}? [y/N] ",
        )
        return request.amount if answer in ("y", "yes") else 0

    async def propose_compromise(self, compromise: Compromise) -> bool:
        """'Accept this compromise? [y/N]'."""
        answer = await self._ask([compromise.explain()], "Accept this compromise? [y/N] ")
        return answer in ("y", "yes")

    async def depth_feedback(self, decision: DepthDecision, state: SearchState) -> DepthAnswer:
        """'Go N levels deeper? [y/N/b]' (b: backtrack to the best earlier depth)."""
        answer = await self._ask(
            [f"Depth {state.depth}: {decision.reason}. Suggestion: {decision.suggestion}."],
            f"Go {self.depth_step} levels deeper? [y/N/b=backtrack] ",
        )
        if answer in ("y", "yes"):
            return DepthAnswer(DepthAction.CONTINUE, self.depth_step)
        if answer in ("b", "backtrack"):
            return DepthAnswer(DepthAction.BACKTRACK)
        return DepthAnswer(DepthAction.STOP)

    async def failure_feedback(self, failure: AnticipatedFailure, state: SearchState) -> FailureAction:
        """'Likely failure: ... Abort the search? [y/N]'."""
        answer = await self._ask(
            [f"Likely failure ({failure.mode.value}, {failure.likelihood:.0%}, {failure.when}): {failure.evidence}.",
             f"If it happens: {failure.mitigation}"],
            "Abort the search now and keep the best answer so far? [y/N] ",
        )
        return FailureAction.ABORT if answer in ("y", "yes") else FailureAction.CONTINUE


def _more(request: BudgetRequest) -> str:
    """'Spend about 3,000 more tokens', 'Make about 4 more calls', 'Spend about $0.05 more', 'Take about 30 more seconds'."""
    verb = {"calls": "Make", "wall_s": "Take"}.get(request.limit, "Spend")
    return f"{verb} about {request.describe()}"


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
