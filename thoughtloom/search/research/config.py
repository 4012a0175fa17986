"""Research Flow's configuration (seed 004's ResearchConfig), with its anti-patterns refused unless allowed."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from ...tasks.hops import bridge_hops_error

BRANCH_STRATEGIES: tuple[str, ...] = ("uncertainty", "contradiction", "depth_first", "breadth_first", "best_first")
EXPLORE_STRATEGIES: tuple[str, ...] = ("best_first", "depth_first", "breadth_first")
MERGE_STRATEGIES: tuple[str, ...] = ("synthesis", "weighted_vote", "best_first")
#: The seed's anti-patterns, by the name that allows one explicitly.
ANTI_PATTERNS: tuple[str, ...] = ("unbounded_branching", "no_pruning", "premature_convergence")
#: Above this many children per hypothesis the tree grows exponentially past any budget.
MAX_SANE_BRANCHES = 8
#: Below this answer confidence a flow stops before it could know it is right.
MIN_SANE_CONFIDENCE = 0.7
#: The roles a different model may play (their calls go to that model; see RunSpec.role_models).
ROLES: tuple[str, ...] = ("brancher", "evaluator", "synthesizer")


class ResearchConfigError(ValueError):
    """A research setting out of range, or one of the seed's anti-patterns not explicitly allowed."""


@dataclass(frozen=True, slots=True)
class ResearchConfig:
    """How a research flow grows, prunes, merges and stops. Defaults are the seed's."""

    #: Most children one hypothesis branches into (the question's first hypotheses included).
    max_branches: int = 5
    #: Deepest hypothesis level (the question is level 0).
    depth_limit: int = 4
    #: Most hypotheses in the tree.
    max_nodes: int = 100
    #: uncertainty: a hypothesis is branched while its confidence is below this.
    branching_threshold: float = 0.3
    #: Which explored hypotheses branch: uncertainty (confidence below the threshold), contradiction (its
    #: evidence conflicts), depth_first (the deepest uncertain one), breadth_first (every uncertain one of the
    #: shallowest level), best_first (the most promising uncertain one).
    branching_strategy: str = "uncertainty"
    #: Hypotheses whose promise falls below this are pruned.
    pruning_threshold: float = 0.2
    #: Pruning applies to hypotheses at this depth and deeper.
    prune_after_depth: int = 1
    #: Contradicting evidence at least this strong (after weighting by its source) prunes a hypothesis.
    strong_evidence: float = 0.7
    #: How hypotheses merge: synthesis (the model writes one answer), weighted_vote, best_first.
    merge_strategy: str = "synthesis"
    #: Merge when this many settled hypotheses stand at one depth.
    merge_threshold: int = 3
    #: Which hypothesis is explored next: best_first (promise), depth_first, breadth_first.
    exploration_strategy: str = "best_first"
    #: Most hypothesis explorations.
    exploration_budget: int = 50
    #: Hypotheses explored at once.
    parallel: int = 3
    #: Stop once the answer's confidence reaches this.
    confidence_threshold: float = 0.9
    #: Stop after this many insights (None: no such limit).
    insight_target: int | None = None
    #: Passages read per document search.
    passages: int = 3
    #: Follow-up searches for a bridge question's entity, named by the first passages (0: none).
    bridge_hops: int = 1
    #: Anti-patterns run anyway (see ANTI_PATTERNS).
    allow: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        def choice(name: str, options: tuple[str, ...]) -> None:
            if getattr(self, name) not in options:
                raise ResearchConfigError(f"{name} must be one of {', '.join(options)}; got {getattr(self, name)!r}")

        choice("branching_strategy", BRANCH_STRATEGIES)
        choice("exploration_strategy", EXPLORE_STRATEGIES)
        choice("merge_strategy", MERGE_STRATEGIES)
        for name in ("max_branches", "depth_limit", "max_nodes", "merge_threshold", "exploration_budget",
                     "parallel", "passages"):
            if getattr(self, name) < 1:
                raise ResearchConfigError(f"{name} must be at least 1; got {getattr(self, name)}")
        if self.merge_threshold < 2:
            raise ResearchConfigError(f"merge_threshold must be at least 2 (a merge needs two hypotheses); got "
                                      f"{self.merge_threshold}")
        if (why := bridge_hops_error(self.bridge_hops)) is not None:
            raise ResearchConfigError(why)
        if self.prune_after_depth < 0:
            raise ResearchConfigError(f"prune_after_depth must be >= 0; got {self.prune_after_depth}")
        if self.insight_target is not None and self.insight_target < 1:
            raise ResearchConfigError(f"insight_target must be at least 1; got {self.insight_target}")
        for name in ("branching_threshold", "pruning_threshold", "strong_evidence", "confidence_threshold"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ResearchConfigError(f"{name} must be between 0 and 1; got {getattr(self, name)}")
        unknown = sorted(set(self.allow) - set(ANTI_PATTERNS))
        if unknown:
            raise ResearchConfigError(f"cannot allow {unknown[0]!r}: the anti-patterns are {', '.join(ANTI_PATTERNS)}")
        why = self.anti_pattern()
        if why is not None:
            raise ResearchConfigError(why)

    def anti_pattern(self) -> str | None:
        """The first of the seed's anti-patterns this configuration falls into and does not allow, said in one line."""
        if self.max_branches > MAX_SANE_BRANCHES and "unbounded_branching" not in self.allow:
            return (f"max_branches={self.max_branches} is unbounded branching: up to {self.max_branches}^"
                    f"{self.depth_limit} hypotheses; keep it at most {MAX_SANE_BRANCHES}, or allow "
                    f"unbounded_branching explicitly")
        if self.pruning_threshold <= 0.0 and "no_pruning" not in self.allow:
            return ("pruning_threshold=0 prunes nothing, so the flow spends its budget on dead ends; use 0.2, or "
                    "allow no_pruning explicitly")
        if self.confidence_threshold < MIN_SANE_CONFIDENCE and "premature_convergence" not in self.allow:
            return (f"confidence_threshold={self.confidence_threshold} stops at an answer the flow is not sure of "
                    f"(premature convergence); use at least {MIN_SANE_CONFIDENCE}, or allow premature_convergence "
                    f"explicitly")
        return None

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form for JSON and a stored run's spec."""
        out = asdict(self)
        out["allow"] = list(self.allow)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ResearchConfig:
        """Rebuild from `to_dict`'s form (unknown keys of newer versions are ignored)."""
        names = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in names}
        if "allow" in values:
            values["allow"] = tuple(values["allow"])
        return cls(**values)
