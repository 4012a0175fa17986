"""Grounding a thought: testing it with the first grounder that can, and adjusting its score (Grounding,
a base of SearchContext).

A thought is grounded once (a re-score reuses the result), under the config's cap on groundings in
flight and within the wall-clock budget; a grounder that breaks costs one thought its check, not the
search. What grounding found is kept on the node under `EXTRA.grounding`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from ..graph import ThoughtGraph
from ..grounding.policy import GroundingPolicy
from ..grounding.types import Grounder, GroundingResult, Thought
from ..llm.gateway import Gateway
from ..llm.slots import Slots
from ..tasks.base import Task
from .counts import SearchCounts
from .events import EventBus, ThoughtGrounded
from .stop import StopReason

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class GroundingExtra:
    """The node.extra key grounding writes: what it found (GroundingResult.to_dict)."""

    grounding: str = "grounding"


EXTRA: Final = GroundingExtra()


class Grounding:
    """Testing thoughts with the search's grounders: `ground` (SearchContext sets the state)."""

    # The search's state these methods use (set by SearchContext.__init__).
    task: Task[Any]
    problem: Any
    problem_text: str
    graph: ThoughtGraph
    gateway: Gateway
    bus: EventBus
    counts: SearchCounts
    grounders: tuple[Grounder, ...]
    grounding_policy: GroundingPolicy
    #: What grounding found, by node.
    grounding: dict[int, GroundingResult]
    _grounding_slots: Slots
    _grounded_goals: set[int]
    _steps: dict[int, tuple[str, ...]]

    if TYPE_CHECKING:  # defined by SearchContext

        def stop(self, reason: StopReason) -> None: ...

    async def check(self, node_id: int) -> bool:
        """Test a thought with the first grounder that can, once (a later call reuses the result); False: the
        wall-clock budget ran out first (the grounder is cancelled, its sandbox killed, the search stopped)."""
        if node_id in self.grounding:
            return True
        budget = self.gateway.budget
        try:
            if budget.wall_left() is None:
                result = await self._run_grounder(node_id)
            else:
                # The grounding runs in a task of its own (Budget.within_wall), cancelled at the deadline.
                result = await budget.within_wall(self._run_grounder(node_id))
        except TimeoutError:
            self.stop(StopReason.BUDGET_WALL_S)
            return False
        if result is not None:
            logger.info("node %d grounded by %s: %s, %d passed, %d failed", node_id, result.grounder,
                        {True: "verified", False: "FAILED", None: "inconclusive"}[result.verified],
                        result.passed, result.failed)
        return True

    async def ground(self, node_id: int, score: float) -> float | None:
        """Test a thought (`check`) and return its score adjusted by the result; None: the wall-clock budget ran
        out before grounding finished, and the thought stays unscored."""
        if not await self.check(node_id):
            return None
        result = self.grounding.get(node_id)
        if result is None:
            # No grounder could test it: the policy may require grounding (unverified_factor).
            return self.grounding_policy.adjust(score, None)
        adjusted = self.grounding_policy.adjust(score, result)
        if self.bus:
            first = result.evidence.strip().splitlines()[0] if result.evidence.strip() else ""
            self.bus.emit(ThoughtGrounded(
                node_id, result.grounder, result.verified, result.passed, result.failed, score, adjusted, first,
            ))
        return adjusted

    async def _run_grounder(self, node_id: int) -> GroundingResult | None:
        steps = self._steps[node_id]
        node = self.graph.node(node_id)
        thought = Thought(self.problem_text, steps[:-1], steps[-1], node.kind.value)
        grounder = next((g for g in self.grounders if g.can_ground(thought)), None)
        if grounder is None:
            return None
        async with self._grounding_slots:
            try:
                # In the caller's task, start to end: search/eager.py never moves a coroutine between tasks.
                result = await grounder.ground(thought)
            except Exception as exc:
                # A grounder that breaks must cost one thought its check, not the whole search.
                self.counts.grounder_errors += 1
                logger.info("grounder %s failed on node %d: %s: %s", grounder.name, node_id, type(exc).__name__, exc)
                logger.debug("the grounder's traceback", exc_info=True)
                result = GroundingResult(
                    grounder.name, False, None, f"the grounder failed: {type(exc).__name__}: {exc}", 0.0
                )
        self.grounding[node_id] = result
        node.extra[EXTRA.grounding] = result.to_dict()
        if result.grounded and result.verified is not None:
            self.counts.grounded += 1
            if result.verified:
                self.counts.verified += 1
            else:
                self.counts.grounding_failed += 1
        if self.task.grounded_goal(self.problem, steps, result):
            self._grounded_goals.add(node_id)
        return result
