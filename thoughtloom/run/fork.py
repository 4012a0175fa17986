"""Forks: a stored run continued from one of its nodes with other settings, recorded as a new run linked to it.

`loom fork RUN --at NODE [settings]` and `thoughtloom.fork(store, RUN, NODE, ...)` build the fork here:

1. the node (an id as `loom show` prints it, `#4` or `4`, or a node CID from `loom show --json`) and the
   path from the root down to it are read from the parent's newest state (search/fork.py: ForkPoint);
2. the parent's spec is rebuilt as resume rebuilds it (session.spec_of: a stored run is untrusted, so
   every endpoint, file and tool it names is used only when the caller names it again; a model the
   caller gives the fork is the caller's own choice);
3. the settings the caller changes (Changes: model, role models, search settings, budget, profile,
   controller thresholds, reasoning controls) are laid over it and the whole is resolved again, so a
   combination that cannot work is refused as `loom solve` refuses it;
4. the fork is recorded as a new run in the same store; its spec keeps the fork point (parent run,
   node, and the copied path as plain data), so `loom show` and `loom runs` name the parent and
   `loom replay` rebuilds the fork from its own record.

The fork's budget is a new one of the parent's size (or the size given): the copied thoughts cost it nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any, NamedTuple

from ..graph import NodeKind, NodeStatus
from ..llm.budget import Pricing
from ..search.fork import ForkPoint, ForkStep
from ..search.strategies.base import Needs
from ..search.strategies.registry import built_in_strategies
from ..store.runs import RunError, StoredGraph, StoredRun, load_graph, open_run, run_ids
from ..store.store import BlockStore
from .grants import Grants, chosen, same_model
from .options import CONTROL_OPTIONS, ROLE_MODEL_OPTIONS, SEARCH_OPTIONS, pricing_of
from .session import RunSession, record_session, spec_of
from .spec import RunSpec, SpecError, resolve

#: loom fork's budget options -> BudgetLimits fields.
BUDGET_OPTIONS = {"budget_tokens": "tokens", "budget_calls": "calls", "budget_usd": "cost_usd",
                  "budget_seconds": "wall_s"}


@dataclass(frozen=True)
class Changes:
    """What a fork changes of its parent's settings; what is left out (None, empty) stays the parent's."""

    #: The fork's model spec (default: the parent's, which must then be granted again as for resume).
    model: str | None = None
    #: (role, model spec) pairs: roles moved to a model of their own.
    role_models: tuple[tuple[str, str], ...] = ()
    #: Another domain profile: its controller thresholds, checks and grounding policy (search settings stay).
    profile: str | None = None
    #: SearchConfig fields (strategy, breadth, beam, max_depth, temperature, seed, ...).
    search: Mapping[str, Any] = field(default_factory=dict)
    #: BudgetLimits fields (tokens, calls, cost_usd, wall_s).
    budget: Mapping[str, Any] = field(default_factory=dict)
    #: ControlSettings fields (acceptable_threshold, goal_threshold, ...).
    control: Mapping[str, Any] = field(default_factory=dict)
    pricing: Pricing | None = None
    model_timeout_s: float | None = None
    reasoning_effort: str | None = None
    thinking_tokens: int | None = None

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> Changes:
        """The changes `loom fork`'s flags name (names as the flags, dashes as underscores; None: not given)."""
        def given(names: Mapping[str, str]) -> dict[str, Any]:
            return {f: options[o] for o, f in names.items() if options.get(o) is not None}

        return cls(
            model=options.get("model"),
            role_models=tuple((role, options[opt]) for opt, role in ROLE_MODEL_OPTIONS.items() if options.get(opt)),
            profile=options.get("profile"), search=given(SEARCH_OPTIONS), budget=given(BUDGET_OPTIONS),
            control=given(CONTROL_OPTIONS), pricing=pricing_of(options), model_timeout_s=options.get("timeout"),
            reasoning_effort=options.get("reasoning_effort"), thinking_tokens=options.get("thinking_tokens"),
        )


def node_of(store: BlockStore, run: StoredRun, stored: StoredGraph, at: str | int) -> int:
    """The id of the node `at` names in the run's newest graph (`stored`): `#4`, `4`, or a node CID (`loom show
    --json`); RunError naming the run that has it when it is another run's."""
    count = len(stored.graph)
    text = str(at).strip()
    number = text[1:] if text.startswith("#") else text
    if number.isdigit():
        nid = int(number)
        if nid >= count:
            raise RunError(f"run {run.run_id} has no node #{nid} (its nodes are #0 to #{count - 1}; see "
                           f"'loom show {run.run_id}')")
        return nid
    if text in stored.versions:
        return stored.versions.index(text)
    owner = next((other for other in run_ids(store) if other != run.run_id and _holds(store, other, text)), None)
    if owner is not None:
        raise RunError(f"node {text} is a node of run {owner}, not of run {run.run_id}; fork run {owner}, or name "
                       f"a node of run {run.run_id} ('loom show {run.run_id}')")
    raise RunError(f"--at {text}: no such node in run {run.run_id}; name a node as 'loom show {run.run_id}' prints "
                   "it (#4) or by its CID ('loom show --json')")


def _holds(store: BlockStore, run_id: str, cid: str) -> bool:
    """Whether a run's newest graph has this node version (a damaged run has none)."""
    try:
        other = open_run(store, run_id)
        return cid in load_graph(store, other.graph_cid, None, run_id).versions
    except RunError:
        return False


def fork_point(store: BlockStore, run: StoredRun, at: str | int) -> ForkPoint:
    """The path from the root of the run's newest state down to the node `at` names (RunError, one line)."""
    stored = load_graph(store, run.graph_cid, None, run.run_id)
    nid, graph = node_of(store, run, stored, at), stored.graph
    node = graph.node(nid)
    if node.kind is NodeKind.SOLUTION:
        raise RunError(f"node #{nid} of run {run.run_id} is a final answer; fork at a thought above it "
                       f"(#{graph.primary_parent(nid)})")
    steps = []
    for step in graph.path_to_root(nid)[1:]:
        n = graph.node(step)
        if n.score is None or n.status not in (NodeStatus.SUCCEEDED, NodeStatus.PRUNED):
            raise RunError(f"node #{step} of run {run.run_id} is {n.status.value} and was never scored; fork at a "
                           "scored thought (succeeded or pruned)")
        steps.append(ForkStep(step, n.kind.value, n.content, n.score, n.creator))
    return ForkPoint(run.run_id, nid, tuple(steps))


def forked_spec(spec: RunSpec, changes: Changes, point: ForkPoint) -> RunSpec:
    """The parent's (granted) spec with the changes laid over it, resolved again, starting at the fork point."""
    searched = spec.config.strategy
    if not spec.needs.one_path:
        raise SpecError(f"run {point.run} searched with {searched}, whose thoughts are not steps of one path; a fork "
                        f"continues runs of {_declaring(lambda needs: needs.one_path)}")
    model_changed = changes.model is not None
    keep_profile = changes.profile is None
    control: Mapping[str, Any] | bool = False
    if spec.control is not None:
        # As fields laid over the profile's, so resolve checks them as it checks loom solve's (hard depth included).
        kept = {k: v for k, v in asdict(spec.control).items() if k != "profile"} if keep_profile else {}
        control = {**kept, **changes.control}
    elif changes.control:
        raise SpecError(f"run {point.run} ran without the controller; there are no thresholds to change")
    forked = resolve(
        spec.problem, task=spec.task, model=spec.model, profile=changes.profile or spec.profile,
        task_options=spec.task_options, config=spec.config, search=changes.search,
        budget=_replaced(spec.budget, changes.budget), control=control, answers=spec.answers,
        grounding=spec.grounding if keep_profile else None, checks=spec.checks if keep_profile else None,
        knowledge=spec.knowledge, knowledge_index=spec.knowledge_index, retrieval=spec.retrieval,
        tools=spec.tools, tool_limits=spec.tool_limits, mcp_config=spec.mcp_config, read_roots=spec.read_roots,
        research=spec.research, role_models=dict(spec.role_models) or None,
        pricing=changes.pricing or (None if model_changed else spec.pricing),
        model_timeout_s=changes.model_timeout_s if changes.model_timeout_s is not None else spec.model_timeout_s,
        reasoning_effort=changes.reasoning_effort or spec.reasoning_effort,
        thinking_tokens=changes.thinking_tokens or spec.thinking_tokens, scorer=spec.scorer,
    )
    strategy = forked.config.strategy
    if not forked.needs.from_node:
        which = f"--strategy {strategy}" if "strategy" in changes.search else f"run {point.run}'s strategy, {strategy},"
        able = _declaring(lambda needs: needs.from_node)
        raise SpecError(f"{which} cannot start from a node; a fork continues with one of {able} (--strategy)")
    depth = len(point.steps)
    if depth >= forked.config.max_depth:
        raise SpecError(f"node #{point.node} of run {point.run} is at depth {depth}, the search's depth limit is "
                        f"{forked.config.max_depth}; give --depth {depth + 1} or more")
    if depth + 1 >= forked.config.max_nodes:
        raise SpecError(f"node #{point.node} of run {point.run} is {depth} thoughts below the root; give "
                        f"--max-nodes above {depth + 1}")
    return replace(forked, task_file=spec.task_file, fork=point)


def _replaced(value: Any, changes: Mapping[str, Any]) -> Any:
    """A dataclass with some fields changed (their checks run again: SpecError, one line)."""
    if not changes:
        return value
    try:
        return type(value)(**{**asdict(value), **changes})
    except (TypeError, ValueError) as exc:
        raise SpecError(str(exc)) from None


def open_fork(store: BlockStore, run: str, at: str | int, grants: Grants, changes: Changes, *, cli: bool = False,
              on_start: Callable[[str], None] | None = None) -> tuple[RunSpec, RunSession]:
    """A fork of the stored run `run` (id, prefix or last) at node `at`, ready to run: its spec and the session
    recording it as a new run in `store` (RunError / SpecError / GrantError, one line, otherwise).

    grants: what the caller names again of what the parent asks for (as resume's); the models in `changes`
    are the caller's own. cli: a refusal names the command line's flags. on_start(run_id): once stored.
    """
    parent = open_run(store, run)
    point = fork_point(store, parent, at)
    granted = chosen(grants, changes.model, changes.role_models)
    if changes.model is not None and same_model(changes.model, parent.manifest.model):
        changes = replace(changes, model=None)  # the parent's own model named again (a grant, as for resume)
    spec = spec_of(parent.manifest, granted, live=True, cli=cli, model=changes.model,
                   role_models=changes.role_models)
    spec = replace(forked_spec(spec, changes, point), store=store, run_id=None)
    return spec, record_session(spec, spec.task_object(), on_start=on_start)


class Parent(NamedTuple):
    """The run and node a fork continues, and how many of its thoughts (#1 to #copied) are the parent's path."""

    run: str
    node: int
    copied: int


def parent_of(spec: Mapping[str, Any] | None) -> Parent | None:
    """The parent a stored spec was forked from (None: not a fork, or not one that reads: it is untrusted data)."""
    fork = (spec or {}).get("fork")
    if not isinstance(fork, Mapping):
        return None
    run, node, steps = fork.get("run"), fork.get("node"), fork.get("steps")
    if not isinstance(run, str) or not isinstance(node, int) or not isinstance(steps, list):
        return None
    return Parent(run, node, len(steps))


def forks_of(store: BlockStore, run_id: str) -> list[Parent]:
    """The runs forked from `run_id`, oldest first: each as (fork's run id, node it continues, thoughts copied)."""
    out = []
    for other in run_ids(store):
        try:
            parent = parent_of(open_run(store, other).manifest.spec)
        except RunError:  # a damaged run is listed by `loom runs`, not here
            continue
        if parent is not None and parent.run == run_id:
            out.append(Parent(other, parent.node, parent.copied))
    return out


__all__ = ["BUDGET_OPTIONS", "Changes", "Parent", "fork_point", "forked_spec", "forks_of", "node_of", "open_fork",
           "parent_of"]


def _declaring(need: Callable[[Needs], bool]) -> str:
    """The built-in strategies whose needs pass `need`, for an error line."""
    return ", ".join(s.name for s in built_in_strategies() if need(s.needs))
