"""Domain profiles (seed 000 part VI): thresholds, depth limits and search settings per domain.

Seed 000 gives each domain both a search max_depth and a depth-policy hard limit; here the hard
limit is the search's depth limit (one number, the absolute bound) and the soft limit is where
the controller starts judging progress. Seed 000's `max_expansions` becomes the node circuit
breaker (expansions x 4 nodes); its `beam_width` is our beam. The `default` profile keeps the
task's own search settings with the soft limit equal to the hard one (no depth negotiation).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class DomainProfile:
    """Thresholds and limits for one kind of problem."""

    name: str
    description: str
    acceptable_threshold: float = 0.7
    goal_threshold: float = 0.95
    compromise_threshold: float = 0.5
    soft_depth: int | None = None  # None: the same as the hard limit
    hard_depth: int | None = None  # None: the search's max_depth
    min_progress_rate: float = 0.05
    stagnation_threshold: int = 3
    #: SearchConfig fields the profile sets (the user's flags override them).
    search: dict[str, Any] = field(default_factory=dict)
    #: Seed 000's domain settings, kept for the grounders of later work and shown by `loom profiles`.
    extra: dict[str, Any] = field(default_factory=dict)


def _search(beam: int, max_expansions: int) -> dict[str, Any]:
    return {"beam": beam, "max_nodes": max_expansions * 4}


PROFILES: dict[str, DomainProfile] = {
    p.name: p
    for p in (
        DomainProfile(
            "default", "the task's own search settings; budget negotiation only",
        ),
        DomainProfile(
            "code_generation", "problem -> approaches -> implementations -> tested solutions",
            acceptable_threshold=0.75, goal_threshold=0.95, soft_depth=8, hard_depth=15,
            min_progress_rate=0.03, stagnation_threshold=4, search=_search(4, 150),
            extra={"require_grounding": True, "syntax_check_early": True},
        ),
        DomainProfile(
            "debugging", "bug -> causes -> tests -> fixes",
            acceptable_threshold=0.70, goal_threshold=0.90, soft_depth=6, hard_depth=12,
            min_progress_rate=0.05, stagnation_threshold=3, search=_search(5, 100),
            extra={"require_reproduction": True, "run_regression_tests": True},
        ),
        DomainProfile(
            "research_synthesis", "question -> hypotheses -> evidence -> conclusions",
            acceptable_threshold=0.60, goal_threshold=0.85, soft_depth=10, hard_depth=20,
            min_progress_rate=0.02, stagnation_threshold=5, search=_search(3, 200),
            extra={"require_citations": True, "cross_reference_threshold": 0.7},
        ),
        DomainProfile(
            "strategic_planning", "goal -> strategies -> tactics -> actions",
            acceptable_threshold=0.65, goal_threshold=0.80, soft_depth=5, hard_depth=10,
            min_progress_rate=0.04, stagnation_threshold=3, search=_search(4, 80),
            extra={"require_actionable_steps": True, "max_strategy_branches": 3},
        ),
        DomainProfile(
            "design", "requirements -> architectures -> components -> implementations",
            acceptable_threshold=0.70, goal_threshold=0.85, soft_depth=7, hard_depth=12,
            min_progress_rate=0.03, stagnation_threshold=4, search=_search(4, 120),
            extra={"check_consistency": True, "validate_interfaces": True},
        ),
    )
}


class UnknownProfile(ValueError):
    """No profile of that name."""


def get_profile(name: str) -> DomainProfile:
    """A profile by name; UnknownProfile lists the names there are."""
    try:
        return PROFILES[name]
    except KeyError:
        raise UnknownProfile(f"unknown profile {name!r}; choose one of: {', '.join(PROFILES)}") from None
