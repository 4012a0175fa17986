"""Why a search stopped: one closed set of reasons, shared by the engine, the controller and reports."""

from __future__ import annotations

from enum import StrEnum


class StopReason(StrEnum):
    """The reason a search ended; its value is the string `--json` and stored runs carry."""

    GOAL_REACHED = "goal_reached"
    #: research: the answer's confidence reached the confidence threshold.
    CONFIDENCE_REACHED = "confidence_reached"
    #: research: the flow found as many insights as the caller asked for.
    INSIGHT_TARGET = "insight_target"
    MAX_DEPTH = "max_depth"
    FRONTIER_EXHAUSTED = "frontier_exhausted"
    #: A tree search went on past its first pass (search/continuation.py) until no thought was left
    #: that could give a new one.
    SEARCH_EXHAUSTED = "search_exhausted"
    ITERATIONS = "iterations"
    MAX_NODES = "max_nodes"
    BUDGET_TOKENS = "budget_tokens"
    BUDGET_CALLS = "budget_calls"
    BUDGET_COST_USD = "budget_cost_usd"
    BUDGET_WALL_S = "budget_wall_s"
    MODEL_ERROR = "model_error"
    INTERRUPTED = "interrupted"
    COMPROMISE_ACCEPTED = "compromise_accepted"
    DEPTH_SOFT_LIMIT = "depth_soft_limit"
    #: The controller foresaw a failure it could not prevent, and the feedback handler chose to stop.
    ANTICIPATED_FAILURE = "anticipated_failure"

    @classmethod
    def budget(cls, limit: str) -> StopReason:
        """The reason for a budget limit named as the Budget names it (tokens, calls, cost_usd, wall_s)."""
        return cls(f"budget_{limit}")
