"""Domain profiles: thresholds, depth limits and search settings per domain.

A profile's hard depth is the absolute depth bound and, unless the caller sets `--depth`, the
search's depth limit; its soft depth is where the controller starts judging progress. A profile
without a hard depth (`default`) keeps the task's depth as the search's limit and soft limit, and
lets the controller go up to `depth_margin` levels deeper when the feedback handler approves
(depth negotiation). A domain's expansion allowance becomes the node circuit breaker
(expansions x 4 nodes); its beam is the search's beam.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..grounding.adjust import GroundingPolicy

#: Levels past the search's depth limit the controller may ask for when no hard depth is set.
DEFAULT_DEPTH_MARGIN = 3


@dataclass(frozen=True, slots=True)
class DomainProfile:
    """Thresholds and limits for one kind of problem."""

    name: str
    description: str
    acceptable_threshold: float = 0.7
    goal_threshold: float = 0.95
    compromise_threshold: float = 0.5
    soft_depth: int | None = None  # None: the search's depth limit
    hard_depth: int | None = None  # None: the search's depth limit + depth_margin
    #: Levels past the search's depth limit the controller may ask for when hard_depth is None.
    depth_margin: int = DEFAULT_DEPTH_MARGIN
    min_progress_rate: float = 0.05
    stagnation_threshold: int = 3
    #: SearchConfig fields the profile sets (the user's flags override them).
    search: dict[str, Any] = field(default_factory=dict)
    #: How grounding results (tests run, claims checked) move scores in this domain.
    grounding: GroundingPolicy = field(default_factory=GroundingPolicy)
    #: The task `loom solve --profile NAME` uses when no --task is given.
    default_task: str | None = None
    #: The domain's other settings.
    extra: dict[str, Any] = field(default_factory=dict)


def _search(beam: int, max_expansions: int) -> dict[str, Any]:
    return {"beam": beam, "max_nodes": max_expansions * 4}


PROFILES: dict[str, DomainProfile] = {
    p.name: p
    for p in (
        DomainProfile(
            "default", "the task's own search settings; up to 3 levels deeper when approved",
        ),
        DomainProfile(
            "code_generation", "problem -> approaches -> implementations -> tested solutions",
            acceptable_threshold=0.75, goal_threshold=0.95, soft_depth=8, hard_depth=15,
            min_progress_rate=0.03, stagnation_threshold=4, search=_search(4, 150),
            # A failing test is certain evidence; partial passes still rank programs.
            grounding=GroundingPolicy(fail_factor=0.1, boost=1.2, partial_credit=0.5), default_task="code",
            extra={"require_grounding": True, "syntax_check_early": True},
        ),
        DomainProfile(
            "debugging", "bug -> causes -> tests -> fixes",
            acceptable_threshold=0.70, goal_threshold=0.90, soft_depth=6, hard_depth=12,
            min_progress_rate=0.05, stagnation_threshold=3, search=_search(5, 100),
            # A fix that breaks other tests is nearly worthless: little partial credit.
            grounding=GroundingPolicy(fail_factor=0.05, boost=1.2, partial_credit=0.2), default_task="debug",
            extra={"require_reproduction": True, "run_regression_tests": True},
        ),
        DomainProfile(
            "research_synthesis", "question -> hypotheses -> evidence -> conclusions",
            acceptable_threshold=0.60, goal_threshold=0.85, soft_depth=10, hard_depth=20,
            min_progress_rate=0.02, stagnation_threshold=5, search=_search(3, 200),
            # A lexical contradiction check is weaker evidence than a test: a milder penalty.
            grounding=GroundingPolicy(fail_factor=0.3, boost=1.1, partial_credit=0.5),
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
