"""Domain profiles: thresholds, depth limits and search settings per domain.

A profile's hard depth is the absolute depth bound and, unless the caller sets `--depth`, the
search's depth limit; its soft depth is where the controller starts judging progress. A profile
without a hard depth (`default`) keeps the task's depth as the search's limit and soft limit, and
lets the controller go up to `depth_margin` levels deeper when the feedback handler approves
(depth negotiation). A domain's expansion allowance becomes the node circuit breaker
(expansions x 4 nodes); its beam is the search's beam.

A domain's other settings are `DomainChecks`, typed, each read by the run layer (`run/spec.py:resolve`,
`run/execute.py:spec_grounders`). Seed 000's profiles name a few more; where they live here, or why
they are not offered:

- `require_grounding` (code_generation) is the grounding policy's `unverified_factor`: a thought no
  grounder could verify keeps only that share of its score, so it cannot pass for a tested one.
- `max_strategy_branches` (strategic_planning) is the search's `breadth`: children per expansion.
- `syntax_check_early` (code_generation): not a choice; the code grounder always compiles a program
  before anything runs (grounding/code.py), and a syntax error fails it without a sandbox.
- `require_reproduction` (debugging): not a choice; the debug task cannot work without a reproduced
  failure (hypotheses are checked against its output, a fix must turn it into a pass), so it always
  reproduces the failing test first and refuses to start when the test passes (tasks/debug.py).
- `require_actionable_steps` (strategic_planning) and `validate_interfaces` (design): not offered;
  there is no planning or design task that could tell an actionable step or a valid interface from
  any other text, and a check that cannot tell would only pretend.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from ..grounding.policy import GroundingPolicy

#: Levels past the search's depth limit the controller may ask for when no hard depth is set.
DEFAULT_DEPTH_MARGIN = 3


@dataclass(frozen=True, slots=True)
class DomainChecks:
    """A domain's checks beyond thresholds and search settings: `loom profiles` shows them, a run applies them."""

    #: debug: every fix also runs the repository's other tests, and a regression fails it (None: the
    #: task's own default, which is to run them).
    run_regression_tests: bool | None = None
    #: research: a thought's claims must cite the documents of --knowledge (`[file.md:3]`) to be verified,
    #: and the profile needs --knowledge (outside the agent and research strategies, which cite through their tools).
    require_citations: bool = False
    #: research: the share of a claim's content words a passage must cover to confirm or refute it
    #: (None: the research judge's 2/3; see grounding/knowledge_check.py).
    cross_reference_threshold: float | None = None
    #: free-text tasks: each thought's claims are checked against the earlier steps of its path, and a
    #: thought that contradicts them is penalized (grounding/consistency.py).
    check_consistency: bool = False

    def __post_init__(self) -> None:
        t = self.cross_reference_threshold
        if t is not None and not 0.0 < t <= 1.0:
            raise ValueError(f"cross_reference_threshold must be in (0, 1], got {t}")

    def to_dict(self) -> dict[str, Any]:
        """Plain data for results, stored runs and `loom profiles --json`."""
        return asdict(self)

    def changed(self) -> dict[str, Any]:
        """The settings that differ from the defaults (what `loom profiles` lists for a profile)."""
        default = DomainChecks()
        return {
            f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) != getattr(default, f.name)
        }


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
    #: The domain's other checks (citations, regressions, consistency); `loom profiles` shows them.
    checks: DomainChecks = field(default_factory=DomainChecks)

    def to_dict(self) -> dict[str, Any]:
        """Plain data for `loom profiles --json`."""
        return {
            "name": self.name,
            "description": self.description,
            "acceptable_threshold": self.acceptable_threshold,
            "goal_threshold": self.goal_threshold,
            "compromise_threshold": self.compromise_threshold,
            "soft_depth": self.soft_depth,
            "hard_depth": self.hard_depth,
            "depth_margin": self.depth_margin,
            "min_progress_rate": self.min_progress_rate,
            "stagnation_threshold": self.stagnation_threshold,
            "search": dict(self.search),
            "grounding": self.grounding.to_dict(),
            "default_task": self.default_task,
            "checks": self.checks.to_dict(),
        }


def _search(beam: int, max_expansions: int, **more: Any) -> dict[str, Any]:
    return {"beam": beam, "max_nodes": max_expansions * 4, **more}


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
            # A failing test is certain evidence; partial passes still rank programs. Code must be tested
            # (the seed's require_grounding): a program no grounder could verify keeps half its score.
            grounding=GroundingPolicy(fail_factor=0.1, boost=1.2, partial_credit=0.5, unverified_factor=0.5),
            default_task="code",
        ),
        DomainProfile(
            "debugging", "bug -> causes -> tests -> fixes",
            acceptable_threshold=0.70, goal_threshold=0.90, soft_depth=6, hard_depth=12,
            min_progress_rate=0.05, stagnation_threshold=3, search=_search(5, 100),
            # A fix that breaks other tests is nearly worthless: little partial credit.
            grounding=GroundingPolicy(fail_factor=0.05, boost=1.2, partial_credit=0.2), default_task="debug",
            checks=DomainChecks(run_regression_tests=True),
        ),
        DomainProfile(
            "research_synthesis", "question -> hypotheses -> evidence -> conclusions",
            acceptable_threshold=0.60, goal_threshold=0.85, soft_depth=10, hard_depth=20,
            min_progress_rate=0.02, stagnation_threshold=5, search=_search(3, 200),
            # A lexical contradiction check is weaker evidence than a test: a milder penalty.
            grounding=GroundingPolicy(fail_factor=0.3, boost=1.1, partial_credit=0.5),
            checks=DomainChecks(require_citations=True, cross_reference_threshold=0.7),
        ),
        DomainProfile(
            "strategic_planning", "goal -> strategies -> tactics -> actions",
            acceptable_threshold=0.65, goal_threshold=0.80, soft_depth=5, hard_depth=10,
            # The seed's max_strategy_branches (3): children per expansion.
            min_progress_rate=0.04, stagnation_threshold=3, search=_search(4, 80, breadth=3),
        ),
        DomainProfile(
            "design", "requirements -> architectures -> components -> implementations",
            acceptable_threshold=0.70, goal_threshold=0.85, soft_depth=7, hard_depth=12,
            min_progress_rate=0.03, stagnation_threshold=4, search=_search(4, 120),
            checks=DomainChecks(check_consistency=True),
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
