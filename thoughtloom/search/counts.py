"""SearchCounts: what one search counts as it goes; its result's SearchStats are read from them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class SearchCounts:
    """Thoughts by fate, expansions and grounding outcomes, counted by the engine, strategies and operators.

    Every field but `proposed` is a field of SearchStats (or of its GroundingStats) of the same name.
    """

    #: Thoughts the model proposed, before any was rejected or merged (the controller reads it).
    proposed: int = 0
    rejected: int = 0
    repaired: int = 0
    duplicates: int = 0
    pruned: int = 0
    expansions: int = 0
    #: Expansions asked again because every proposal was rejected.
    reasks: int = 0
    #: Replies to a structured request that were not the JSON asked for.
    parse_failures: int = 0
    grounded: int = 0
    verified: int = 0
    grounding_failed: int = 0
    grounder_errors: int = 0
    #: Passes a tree search made after its first ended short of the goal.
    continuations: int = 0
