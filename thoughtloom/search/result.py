"""What a search returns: the answer, why it stopped, the best path, usage and stats."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any

from ..graph import ThoughtGraph
from ..grounding.types import GroundingResult
from ..llm.budget import Spend
from ..llm.gateway import CallRecord
from ..tasks.evaluation import Evaluation
from .agent.processors import EXTRA as AGENT_EXTRA
from .counts import SearchCounts
from .paths import ScoredPath, ScoredPaths
from .stop import StopReason
from .trace import Trace

if TYPE_CHECKING:
    from .strategies.base import Strategy

#: An evaluator's score below this on the step an answer comes from is a doubt worth saying beside
#: the answer (the default compromise threshold: lower is not even a compromise).
DOUBT_BELOW = 0.5


@dataclass(frozen=True, slots=True)
class PathStep:
    """One node of the best path."""

    id: int
    kind: str
    content: str
    score: float | None
    #: What the evaluator said of it (reasoning, verdict), when it said more than a number.
    evaluation: Evaluation | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON output."""
        return {"id": self.id, "kind": self.kind, "content": self.content, "score": self.score,
                **({"evaluation": self.evaluation.to_dict()} if self.evaluation is not None else {})}


#: The name usage per role gives the run's own model (every role without a model of its own).
MAIN_MODEL = "main"


@dataclass(frozen=True, slots=True)
class RoleUsage:
    """What the requests of one role's model were charged: tokens in and out, requests, dollars."""

    role: str
    input_tokens: int = 0
    output_tokens: int = 0
    calls: int = 0
    cost_usd: float = 0.0

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens

    def to_dict(self) -> dict[str, Any]:
        """Plain data (without the role, which names it in SearchUsage.to_dict)."""
        return {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens, "calls": self.calls,
                "cost_usd": self.cost_usd}


@dataclass(frozen=True, slots=True)
class SearchUsage:
    """What a search spent: tokens in and out, answered model calls, dollars, and the token limit."""

    input_tokens: int = 0
    output_tokens: int = 0
    calls: int = 0
    cost_usd: float = 0.0
    token_limit: int | None = None
    #: False when some model the search used has no known price: cost_usd is then a lower bound,
    #: shown as unknown (None in to_dict), never as a silent $0.
    cost_known: bool = True
    #: With roles on models of their own: what each role's model was charged, and MAIN_MODEL what the
    #: run's model was (every other call); they add up to the totals above. Empty otherwise.
    roles: tuple[RoleUsage, ...] = ()
    #: Of output_tokens, those a reasoning model spent thinking (already counted in the output).
    reasoning_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens

    def role(self, name: str) -> RoleUsage | None:
        """The usage of one role's model (MAIN_MODEL: the run's model); None when roles have no models of their own."""
        return next((r for r in self.roles if r.role == name), None)

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON output and stored runs (`roles` only when roles run on models of their own)."""
        out: dict[str, Any] = {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
                               "calls": self.calls, "cost_usd": self.cost_usd if self.cost_known else None,
                               "token_limit": self.token_limit}
        if self.roles:
            out["roles"] = {r.role: r.to_dict() for r in self.roles}
        if self.reasoning_tokens:
            out["reasoning_tokens"] = self.reasoning_tokens
        return out


def role_usage(
    input_tokens: int, output_tokens: int, calls: int, cost_usd: float,
    now: Mapping[str, Spend], before: Mapping[str, Spend], roles: Collection[str],
) -> tuple[RoleUsage, ...]:
    """Usage per role over a search: each routed role's spend between two readings of the ledger
    (`before`, `now`), and the run's model (MAIN_MODEL) the rest of the totals. Empty when no role
    has a model of its own."""
    names = sorted(set(roles) | {r for r, spend in now.items() if spend != before.get(r)})
    if not names:
        return ()
    nothing = Spend()
    spent = {r: now.get(r, nothing).minus(before.get(r, nothing)) for r in names}
    main = RoleUsage(
        MAIN_MODEL, input_tokens - sum(s.input_tokens for s in spent.values()),
        output_tokens - sum(s.output_tokens for s in spent.values()), calls - sum(s.calls for s in spent.values()),
        round(cost_usd - sum(s.cost_usd for s in spent.values()), 6),
    )
    return (main, *(RoleUsage(r, s.input_tokens, s.output_tokens, s.calls, round(s.cost_usd, 6))
                     for r, s in spent.items()))


@dataclass(frozen=True, slots=True)
class GroundingStats:
    """How many thoughts were grounded, verified, failed, and how often a grounder itself failed."""

    grounded: int = 0
    verified: int = 0
    grounding_failed: int = 0
    grounder_errors: int = 0


#: The names of what a search counts (SearchCounts), which SearchStats reports under the same names.
_COUNTED = frozenset(f.name for f in fields(SearchCounts))


@dataclass(frozen=True, slots=True)
class SearchStats:
    """The shape of a search: nodes by fate, expansions, depth reached, wall time, grounding counts."""

    nodes: int = 0
    pruned: int = 0
    rejected: int = 0
    repaired: int = 0
    duplicates: int = 0
    expansions: int = 0
    #: Expansions asked again because every proposal was rejected.
    reasks: int = 0
    #: Passes a tree search made after its first ended short of the goal (search/continuation.py).
    continuations: int = 0
    #: Replies to a structured request (a JSON schema) that were not the JSON asked for, and were
    #: read by the task's text parsing instead.
    parse_failures: int = 0
    max_depth: int = 0
    wall_s: float = 0.0
    #: None when no grounder ran.
    grounding: GroundingStats | None = None
    #: "timeout" when checking the final answer did not finish in its allowance (the answer is unchecked).
    answer_check: str | None = None

    @classmethod
    def of(
        cls, counts: SearchCounts, *, nodes: int, max_depth: int, wall_s: float, grounded: bool,
        answer_check: str | None = None,
    ) -> SearchStats:
        """The stats of a search from what it counted (each field from the count of its name); `grounded`:
        whether a grounder ran, else `grounding` is None."""
        counted = {name: getattr(counts, name) for name in _STATS_COUNTS}
        grounding = GroundingStats(**{name: getattr(counts, name) for name in _GROUNDING_COUNTS}) if grounded else None
        return cls(nodes=nodes, max_depth=max_depth, wall_s=wall_s, grounding=grounding, answer_check=answer_check,
                   **counted)

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON output: the grounding counts sit beside the others, as before wall_s."""
        out: dict[str, Any] = {k: getattr(self, k) for k in
                               ("nodes", "pruned", "rejected", "repaired", "duplicates", "expansions", "reasks",
                                "continuations", "parse_failures", "max_depth")}
        if self.grounding is not None:
            out.update(asdict(self.grounding))
        out["wall_s"] = self.wall_s
        if self.answer_check is not None:
            out["answer_check"] = self.answer_check
        return out


#: The fields of SearchStats that are counts of the same name, and GroundingStats' fields: listed once, as
#: dataclasses.fields() costs more than the rest of SearchStats.of, which runs once per search.
_STATS_COUNTS: tuple[str, ...] = tuple(f.name for f in fields(SearchStats) if f.name in _COUNTED)
_GROUNDING_COUNTS: tuple[str, ...] = tuple(f.name for f in fields(GroundingStats))


@dataclass(slots=True)
class SearchResult:
    """Everything a search found; `to_dict` is the `--json` output."""

    task: str
    problem: str
    answer: str | None
    solved: bool | None
    score: float | None
    termination_reason: StopReason
    best_path: list[PathStep]
    usage: SearchUsage
    stats: SearchStats
    config: dict[str, Any]
    model: str
    graph: ThoughtGraph = field(repr=False)
    calls: list[CallRecord] = field(default_factory=list, repr=False)
    goal_node: int | None = None
    best_node: int | None = None
    answer_node: int | None = None
    error: str | None = None
    #: The controller's report (decisions, budget requests, compromise, failures), when one ran: the
    #: built-in Controller's is a thoughtloom.control.ControlReport.
    control: Trace | None = None
    #: What grounding found, by node id (empty when no grounder ran).
    grounding: dict[int, GroundingResult] = field(default_factory=dict)
    #: The stored run's id, the store holding it and its graph's CID, when the run was recorded.
    run_id: str | None = None
    store: str | None = None
    graph_cid: str | None = None
    #: Why the run could not be stored whole (a full disk...); run_id is None when nothing was stored.
    store_error: str | None = None
    #: The research strategy's ResearchResult (answer with sources, tree, insights, metrics).
    research: Any = None
    #: The best path's total score under the configured aggregation (sum, product, min, mean).
    best_path_total: float | None = None
    #: The scored root-to-leaf paths (see all_paths and paths_found), worked out when first read.
    paths: ScoredPaths | None = field(default=None, repr=False)
    #: The strategy that ran, which reads its trace from the graph (None: the built-in one config names).
    strategy: Strategy | None = field(default=None, repr=False, compare=False)

    @property
    def all_paths(self) -> list[ScoredPath]:
        """The best root-to-leaf paths by total (at most search.paths.MAX_PATHS)."""
        return self.paths.best if self.paths is not None else []

    @property
    def paths_found(self) -> int:
        """How many root-to-leaf paths the search scored."""
        return self.paths.count if self.paths is not None else 0

    def answer_doubt(self) -> str | None:
        """The evaluator's own doubt about an unchecked answer: its record on the answer's last evaluated
        step scores it below DOUBT_BELOW or calls it not promising (the answer and the reasoning shown
        beside it must not disagree silently), or a vote the task counted never reached its quorum;
        None when there is no doubt or the answer was checked."""
        if self.answer is None or self.solved is not None:
            return None
        tallied = next((n for n in (self.graph.node(s.id) for s in reversed(self.best_path) if s.id in self.graph)
                        if AGENT_EXTRA.tally in n.extra), None)
        if tallied is not None:
            # A counted vote: doubtful when it never reached the task's quorum (the search: no goal;
            # the agent, whose vote is followed by its solution either way, says so on the vote).
            agreed = tallied.extra.get(AGENT_EXTRA.agreed, self.goal_node is not None)
            return None if agreed else f"the samples did not agree enough: {tallied.extra[AGENT_EXTRA.tally]}"
        step = next((s for s in reversed(self.best_path) if s.evaluation is not None), None)
        if step is None or step.evaluation is None:
            return None
        record = step.evaluation
        if record.is_promising is not False and record.score >= DOUBT_BELOW:
            return None
        verdict = f"scored step #{step.id} {record.score:.2f}" + (
            ", not promising" if record.is_promising is False else ""
        )
        why = " ".join(record.reasoning.split())
        return f"the evaluator {verdict}" + (f": {why}" if why else "")

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON output; the strategy's trace under its key (never in place of a key of the result's)."""
        out = {
            "task": self.task,
            "problem": self.problem,
            "model": self.model,
            "answer": self.answer,
            "solved": self.solved,
            **({"answer_doubt": doubt} if (doubt := self.answer_doubt()) is not None else {}),
            "score": self.score,
            "termination_reason": str(self.termination_reason),
            "error": self.error,
            "best_path": [s.to_dict() for s in self.best_path],
            "best_path_total": self.best_path_total,
            "all_paths": [p.to_dict(self.graph) for p in self.all_paths],
            "paths_found": self.paths_found,
            "usage": self.usage.to_dict(),
            "stats": self.stats.to_dict(),
            "config": self.config,
            **({"run_id": self.run_id, "store": self.store, "graph_cid": self.graph_cid}
               if self.run_id is not None else {}),
            **({"store_error": self.store_error} if self.store_error is not None else {}),
            **({"control": self.control.to_dict()} if self.control is not None else {}),
            **({"grounding": [{"node": n, **r.to_dict()} for n, r in self.grounding.items()]}
               if self.grounding else {}),
            **({"research": self.research.to_dict()} if self.research is not None else {}),
        }
        trace = self.trace
        if trace is not None:
            # A trace's key is its strategy's choice: one that names a key of the result's own does not replace it.
            out.setdefault(trace.key, trace.to_dict())
        return out

    @property
    def trace(self) -> Trace | None:
        """The run's strategy's trace (recursive, agent, cove, a user's TracedStrategy), read from the graph; None
        when it keeps none."""
        from .strategies.registry import trace_of

        return trace_of(self.strategy if self.strategy is not None else str(self.config.get("strategy")), self.graph)

    def recursion(self) -> dict[str, Any] | None:
        """The recursive strategy's trace as plain data: its summary and every node's goal, contract and
        verification."""
        from .strategies.recursive import RecursionTrace

        return _data(RecursionTrace.read(self.graph))

    def cove(self) -> dict[str, Any] | None:
        """CoVe's trace as plain data: the draft, each question with its own answer (None: unanswered), the
        revision."""
        from .strategies.cove import CoveTrace

        return _data(CoveTrace.read(self.graph))

    def agent(self) -> dict[str, Any] | None:
        """The agent's trace as plain data: its summary and every worked node's kind, status, result, error and
        tool calls."""
        from .agent.scheduler import AgentTrace

        return _data(AgentTrace.read(self.graph))


def _data(trace: Trace | None) -> dict[str, Any] | None:
    """A trace's plain data, or None."""
    return trace.to_dict() if trace is not None else None
