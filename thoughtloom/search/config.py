"""Typed search configuration (the search's parameters plus the engine's circuit breakers)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from ..tasks.hops import bridge_hops_error

#: The operators' roles (search/operators.py): each may run on a model of its own (RunSpec.role_models,
#: `--evaluator-model` ...) in the strategies that use the operators (strategies/common.py:STEP_NEEDS).
OPERATOR_ROLES: tuple[str, ...] = ("generator", "evaluator", "synthesizer")
AGENT_ORDERS: tuple[str, ...] = ("breadth_first", "depth_first", "best_first")
FAILURE_POLICIES: tuple[str, ...] = ("replan", "skip", "fail")
AGGREGATIONS: tuple[str, ...] = ("sum", "product", "min", "mean")
GENERATIONS: tuple[str, ...] = ("propose", "sample")
EVALUATIONS: tuple[str, ...] = ("value", "vote", "prior")
PRIORITIES: tuple[str, ...] = ("score", "promise")


@dataclass(frozen=True, slots=True)
class SearchConfig:
    """How to search. Every field has a default that works for Game of 24 on the embedded model.

    A config remembers which fields it was given (`given`): a run lays exactly those over its
    task's and profile's search defaults, so `SearchConfig(breadth=3)` for Game of 24 keeps the
    task's `evaluation="prior"`. A config made with every field (a stored run's, or one copied by
    `dataclasses.replace`, which passes them all) is used as it is.
    """

    #: A strategy's name: a built-in one (search/strategies), an installed one, or a user's strategy's own
    #: (RunSpec.strategy says where that one comes from).
    strategy: str = "bfs"
    #: Branching factor: thoughts generated per expansion.
    breadth: int = 5
    #: Beam width: thoughts kept per level (bfs, got) or expanded at once (best_first).
    beam: int = 5
    max_depth: int = 3
    #: Thoughts scoring below this are pruned.
    prune_threshold: float = 0.0
    #: How scores combine along a path: sum, product, min or mean.
    aggregation: str = "mean"
    #: propose: one call lists several next steps; sample: `breadth` independent samples.
    generation: str = "propose"
    #: value: score each state on its own; vote: siblings compete in one vote call; prior: no
    #: call, a step scores how likely the model found it among the task's valid steps (its
    #: probability over the favourite's), where the backend can score choices, else as value.
    evaluation: str = "value"
    value_samples: int = 3
    #: Times a node whose proposals were all rejected is asked again (hotter, with a seed of its
    #: own) before it is given up; 0 gives it up at once.
    reasks: int = 2
    vote_samples: int = 5
    #: best_first ranks by the thought's own score or by its path's aggregated score (promise).
    priority: str = "score"
    mcts_iterations: int = 30
    mcts_exploration: float = 1.4
    #: got: how many top thoughts each aggregation merges, and refine rounds after it.
    aggregate_k: int = 3
    refine_rounds: int = 1
    #: recursive: most children one decomposition may have (fan-out limit).
    recursive_fanout: int = 8
    #: recursive: most tokens the calls at one recursion depth may spend (None: only the global budget).
    recursive_level_tokens: int | None = None
    #: cove: most verification questions planned for the draft (each answered in a call of its own).
    cove_questions: int = 3
    #: agent: which ready node starts first; the controller may switch it during the run.
    agent_order: str = "breadth_first"
    #: agent: what a failed node does to the nodes depending on it: replan (one retry told the
    #: error, then skip), skip (they run, told it failed), fail (they fail with it).
    on_failure: str = "replan"
    #: agent: follow-up document searches a bridge question makes for the entity its first passages name
    #: ("the director of X" -> the director's name) before it is answered; 0: one search, then the answer.
    #: The same setting as ResearchConfig.bridge_hops (tasks/hops).
    bridge_hops: int = 1
    #: Circuit breaker: the search stops adding nodes past this many.
    max_nodes: int = 2000
    #: Model calls in flight at once.
    concurrency: int = 8
    #: Groundings (sandbox runs, test suites) in flight at once; they compete for the CPU.
    grounding_concurrency: int = 2
    stop_on_goal: bool = True
    #: bfs, tree_of_thoughts, breadth_first, dfs and best_first: stop after the first pass, as the
    #: papers do, instead of going on while budget is left (search/continuation.py).
    one_pass: bool = False
    temperature: float = 0.7
    seed: int | None = None
    #: The fields given when this config was made (set by __new__, which sees the constructor's arguments).
    given: frozenset[str] = field(init=False, repr=False, compare=False)

    def __new__(cls, *args: Any, **kwargs: Any) -> SearchConfig:
        """A new config that knows which fields its caller gave (the dataclass __init__ then sets them)."""
        self = object.__new__(cls)
        object.__setattr__(self, "given", frozenset(_FIELDS[: len(args)]) | frozenset(kwargs))
        return self

    def __post_init__(self) -> None:
        def choice(name: str, options: tuple[str, ...]) -> None:
            if getattr(self, name) not in options:
                raise ValueError(f"{name} must be one of {', '.join(options)}; got {getattr(self, name)!r}")

        if not isinstance(self.strategy, str) or not self.strategy.strip():
            # Which names exist is the registry's (search/strategies/registry.py), checked where a run is resolved.
            raise ValueError(f"strategy must be a strategy's name; got {self.strategy!r}")
        choice("aggregation", AGGREGATIONS)
        choice("generation", GENERATIONS)
        choice("evaluation", EVALUATIONS)
        choice("priority", PRIORITIES)
        choice("agent_order", AGENT_ORDERS)
        choice("on_failure", FAILURE_POLICIES)
        for name in ("breadth", "beam", "max_depth", "value_samples", "vote_samples", "mcts_iterations",
                     "aggregate_k", "max_nodes", "concurrency", "grounding_concurrency", "recursive_fanout",
                     "cove_questions"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1; got {getattr(self, name)}")
        if self.recursive_level_tokens is not None and self.recursive_level_tokens < 1:
            raise ValueError(f"recursive_level_tokens must be at least 1; got {self.recursive_level_tokens}")
        if self.reasks < 0:
            raise ValueError(f"reasks must be >= 0; got {self.reasks}")
        if (why := bridge_hops_error(self.bridge_hops)) is not None:
            raise ValueError(why)
        if self.refine_rounds < 0:
            raise ValueError(f"refine_rounds must be >= 0; got {self.refine_rounds}")
        if not 0.0 <= self.prune_threshold <= 1.0:
            raise ValueError(f"prune_threshold must be in [0, 1]; got {self.prune_threshold}")
        if not 0.0 <= self.temperature <= 2.0:
            raise ValueError(f"temperature must be in [0, 2]; got {self.temperature}")

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form for JSON and manifests."""
        # Every field is a plain value (str, number, bool, None), so a shallow copy is what
        # dataclasses.asdict returns, at a tenth of its cost (it runs once per search).
        return {name: getattr(self, name) for name in _FIELDS}

    def given_fields(self) -> dict[str, Any]:
        """The fields this config was given, with their values (what a run lays over the task's defaults)."""
        return {name: getattr(self, name) for name in _FIELDS if name in self.given}


#: The settings' names, in order (`given` is bookkeeping, not a setting).
_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(SearchConfig) if f.init)
