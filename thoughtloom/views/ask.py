"""The person at the terminal answers the controller's questions (`loom solve --interactive`)."""

from __future__ import annotations

import asyncio
import sys
from dataclasses import dataclass, field
from typing import TextIO

from ..control.types import (
    AnticipatedFailure,
    BudgetRequest,
    Compromise,
    DepthAction,
    DepthAnswer,
    DepthDecision,
    FailureAction,
    SearchState,
)
from ..words import counted
from .terminal import terminal_text


@dataclass(slots=True)
class InteractiveHandler:
    """Asks the person at the terminal; anything but 'y' (or 'b' to backtrack) means no."""

    stdin: TextIO = field(default_factory=lambda: sys.stdin)
    stderr: TextIO = field(default_factory=lambda: sys.stderr)
    depth_step: int = 2

    async def _ask(self, lines: list[str], question: str) -> str:
        def ask() -> str:
            # The lines and the question carry model text (a compromise's answer, a failure's evidence).
            shown = "".join(f"{terminal_text(line, newlines=True)}\n" for line in lines) + terminal_text(question)
            self.stderr.write("\r\033[K" + shown)
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
            f"Go {counted(self.depth_step, 'level')} deeper? [y/N/b=backtrack] ",
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
    """'Spend about 3,000 more tokens', 'Make about 4 more calls', 'Spend about $0.05 more', 'Take about 30 more
    seconds'."""
    verb = {"calls": "Make", "wall_s": "Take"}.get(request.limit, "Spend")
    return f"{verb} about {request.describe()}"
