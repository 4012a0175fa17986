"""What a run is: one typed, frozen RunSpec, resolved in one place from task, profile and the user's choices.

Every entry point (`loom solve`, `solve()` / `asolve()`, the search lanes of `loom bench`,
`loom resume`, `loom replay`) builds its RunSpec through `resolve`, so the same problem searched
any of these ways is the same search. The order is fixed: the task's own search defaults, then
the profile (its search settings and hard depth, its thresholds, its grounding policy), then what
the caller set explicitly. A stored run keeps its spec as plain data (`to_dict`), and `from_dict`
rebuilds it for resume and replay.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from ..control.controller import ControlSettings
from ..control.profiles import DomainChecks, DomainProfile, get_profile
from ..grounding.knowledge import RETRIEVALS
from ..grounding.policy import GroundingPolicy
from ..grounding.sandbox import SandboxLimits
from ..grounding.types import Grounder
from ..llm.budget import BudgetLimits, Pricing
from ..llm.types import Backend, capabilities_of
from ..search.config import OPERATOR_ROLES, SearchConfig
from ..search.fork import ForkPoint
from ..search.research.config import ROLES, ResearchConfig, ResearchConfigError
from ..search.scorer import Scorer, ScorerError, ThoughtScorer
from ..search.strategies.base import Needs, Strategy
from ..search.strategies.registry import (
    ChosenStrategy,
    StrategyError,
    built_in_names,
    built_in_strategies,
    needs_of,
    no_decomposition,
    strategy_named,
)
from ..tasks.base import Task
from ..tasks.general import FileTask, GeneralTask
from ..tasks.math import is_math_question
from ..tasks.registry import TaskOptions, get_task
from ..tools.toolbox import ToolLimits

#: Version of the plain-data form a stored run keeps.
SPEC_FORMAT = 1


class SpecError(ValueError):
    """A run that cannot be built as asked (a setting out of range, a combination that cannot work)."""


@dataclass(frozen=True, slots=True)
class AutoAnswers:
    """How the controller's questions are answered when nobody is asked (and always on resume and replay)."""

    #: More tokens approved in total when the controller asks for them (0: the budget stays hard).
    approve_tokens: int = 0
    #: Compromises of at least this quality are accepted (None: the compromise threshold).
    accept_compromise_above: float | None = None
    #: Levels past the soft depth approved when the depth policy asks (the search's depth limit is
    #: raised with it, never past the hard depth).
    extra_depth: int = 0
    #: More model calls, dollars and wall-clock seconds approved in total when the controller asks.
    approve_calls: int = 0
    approve_usd: float = 0.0
    approve_seconds: float = 0.0
    #: An anticipated failure the controller could not prevent aborts the run when at least this
    #: likely (None: never).
    abort_above: float | None = None

    def __post_init__(self) -> None:
        for name in ("approve_tokens", "extra_depth", "approve_calls", "approve_usd", "approve_seconds"):
            value = getattr(self, name)
            if not value >= 0 or value == float("inf"):
                raise SpecError(f"{name} must be a finite number >= 0; got {value}")
        for name in ("accept_compromise_above", "abort_above"):
            value = getattr(self, name)
            if value is not None and not 0.0 <= value <= 1.0:
                raise SpecError(f"{name} must be between 0 and 1; got {value}")


@dataclass(frozen=True)
class RunSpec:
    """Everything that decides what a run does (runtime collaborators such as event sinks are not in it)."""

    #: The task, by registry name or as an object (a custom Task; stored by its name).
    task: str | Task[Any]
    problem: str
    #: A model spec string (see thoughtloom.llm.registry) or a Backend object (stored by its name).
    model: str | Backend = "local"
    task_options: TaskOptions = field(default_factory=TaskOptions)
    config: SearchConfig = field(default_factory=SearchConfig)
    budget: BudgetLimits = field(default_factory=BudgetLimits)
    profile: str = "default"
    #: The self-aware controller's settings; None runs a plain search without a controller.
    control: ControlSettings | None = field(default_factory=ControlSettings)
    answers: AutoAnswers = field(default_factory=AutoAnswers)
    grounding: GroundingPolicy = field(default_factory=GroundingPolicy)
    #: The profile's other checks: citations required, the cross-reference threshold, consistency, regressions.
    checks: DomainChecks = field(default_factory=DomainChecks)
    #: Claims in thoughts are checked against the documents in this folder (a research grounder).
    knowledge: str | None = None
    knowledge_index: str | None = None
    #: How the knowledge base ranks passages: "bm25", or "hybrid" (bm25 and sentence embeddings; the embed extra).
    retrieval: str = "bm25"
    #: More grounders given as objects (Python only; not part of the stored form).
    grounders: tuple[Grounder, ...] = ()
    #: Tools granted to the agent strategy: calc, python, docs, files, mcp:NAME, mcp (see thoughtloom.tools).
    tools: tuple[str, ...] = ()
    tool_limits: ToolLimits = field(default_factory=ToolLimits)
    #: The MCP servers `mcp:NAME` tools come from (a JSON file with "mcpServers").
    mcp_config: str | None = None
    #: Folders the `files` tool may read.
    read_roots: tuple[str, ...] = ()
    #: The research strategy's settings (None: the defaults).
    research: ResearchConfig | None = None
    #: Roles that run on a model of their own: (role, model spec) pairs. The operators' roles are
    #: generator, evaluator and synthesizer (search.config.OPERATOR_ROLES), the research flow's
    #: brancher, evaluator and synthesizer; every other call goes to `model`.
    role_models: tuple[tuple[str, str], ...] = ()
    #: The run's model's price as the user gave it (USD per million tokens); None: the known price
    #: list's, if the model is on it. Roles on models of their own are priced from the list.
    pricing: Pricing | None = None
    #: Seconds one request to a remote model may take (None: the backend's default).
    model_timeout_s: float | None = None
    #: A reasoning model's effort (low, medium, high) on OpenAI-compatible endpoints; None: the server's default.
    reasoning_effort: str | None = None
    #: Anthropic's extended-thinking budget per sample, in tokens (at least 1024); None: no thinking.
    thinking_tokens: int | None = None
    #: How the agent's tool calls reach the model: auto, native or text (see llm.registry.native_tools).
    tool_calling: str = "auto"
    #: Where the run is recorded (a SQLite path or a BlockStore); None: not stored.
    store: Any = None
    run_id: str | None = None
    #: A stored run's task file (the absolute path its task was read from); resume and replay read it only
    #: when the caller names it again (run/grants.py). A live run's file task carries it as `source`.
    task_file: str | None = None
    #: The user's scorer, which scores the thoughts instead of the model (stored by its name; a stored run's
    #: is imported only when the caller names it again, run/grants.py).
    scorer: ThoughtScorer | None = None
    #: A fork's start: its parent run's path down to the node it continues from (search/fork.py; run/fork.py).
    fork: ForkPoint | None = None
    #: A strategy that is not built in (installed, a class reference, a user's object), named by
    #: `config.strategy`: where it comes from and its settings (a stored run's is made when it runs).
    strategy: ChosenStrategy | None = None

    @property
    def needs(self) -> Needs:
        """What the run's strategy needs (StrategyError, one line, for a stored run's strategy not installed)."""
        return self.strategy.load().needs if self.strategy is not None else needs_of(self.config.strategy)

    @property
    def task_name(self) -> str:
        """The task's registry name."""
        return self.task if isinstance(self.task, str) else self.task.name

    @property
    def model_name(self) -> str:
        """The model spec string, or the backend object's name."""
        return self.model if isinstance(self.model, str) else self.model.name

    def task_object(self) -> Task[Any]:
        """The task to search with (a fresh instance for a name)."""
        return get_task(self.task, self.task_options) if isinstance(self.task, str) else self.task

    def to_dict(self) -> dict[str, Any]:
        """The plain-data form a stored run keeps (objects by name; Python-only grounders left out)."""
        return {
            "format": SPEC_FORMAT, "task": self.task_name, "problem": self.problem, "model": self.model_name,
            "task_options": _plain(self.task_options), "config": self.config.to_dict(),
            "budget": asdict(self.budget), "profile": self.profile,
            "control": asdict(self.control) if self.control is not None else None,
            "answers": asdict(self.answers), "grounding": asdict(self.grounding), "checks": self.checks.to_dict(),
            "knowledge": self.knowledge, "knowledge_index": self.knowledge_index,
            # Only when not the default, so the stored form of every run before the option is unchanged.
            **({"retrieval": self.retrieval} if self.retrieval != "bm25" else {}),
            **({"tools": list(self.tools), "tool_limits": asdict(self.tool_limits), "mcp_config": self.mcp_config,
                "read_roots": list(self.read_roots)} if self.tools else {}),
            **({"research": self.research.to_dict()} if self.research is not None else {}),
            **({"role_models": [list(r) for r in self.role_models]} if self.role_models else {}),
            **({"pricing": asdict(self.pricing)} if self.pricing is not None else {}),
            **({"model_timeout_s": self.model_timeout_s} if self.model_timeout_s is not None else {}),
            **({"reasoning_effort": self.reasoning_effort} if self.reasoning_effort is not None else {}),
            **({"thinking_tokens": self.thinking_tokens} if self.thinking_tokens is not None else {}),
            **({"tool_calling": self.tool_calling} if self.tool_calling != "auto" else {}),
            **({"task_file": self.stored_task_file} if self.stored_task_file is not None else {}),
            # A task declared in Python: its prompts and examples make the run's requests (session.spec_of rebuilds it).
            **({"task_declared": declared} if (declared := _declared(self.task)) is not None else {}),
            **({"scorer": self.scorer.name} if self.scorer is not None else {}),
            **({"fork": self.fork.to_dict()} if self.fork is not None else {}),
            **({"strategy": self.strategy.to_dict()} if self.strategy is not None else {}),
        }

    @property
    def stored_task_file(self) -> str | None:
        """The task file a stored run names (absolute), when its task was read from one."""
        source = getattr(self.task, "source", "") if isinstance(self.task, FileTask) else ""
        return os.path.abspath(source) if source else self.task_file

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunSpec:
        """Rebuild a spec from `to_dict`'s form (unknown keys of newer versions are ignored); SpecError (one
        line) for a form that is not one, a field of the wrong type included (a received run is untrusted)."""
        _check_stored_types(data)
        try:
            options = dict(data.get("task_options") or {})
            sandbox = options.pop("sandbox", None)
            chosen: dict[str, Any] = {
                k: (Path(v) if k in ("tests", "data", "repo") else tuple(v) if k == "test_command" else v)
                for k, v in options.items() if k in _OPTION_FIELDS
            }
            task_options = TaskOptions(**chosen, sandbox=SandboxLimits(**sandbox) if sandbox else None)
            config = dict(data.get("config") or {})
            if "one_pass" not in config:
                # Stored before a tree search went on past its first pass: it made one.
                config["one_pass"] = True
            control = data.get("control")
            if control is not None and "depth_margin" not in control:
                # Stored before the controller could raise the depth limit: it kept the search's limit.
                control = {**control, "depth_margin": 0}
            return cls(
                task=data["task"], problem=data["problem"], model=data.get("model", "local"),
                task_options=task_options, config=SearchConfig(**_known(SearchConfig, config)),
                budget=BudgetLimits(**(data.get("budget") or {})), profile=data.get("profile") or "default",
                control=ControlSettings(**_known(ControlSettings, control)) if control is not None else None,
                answers=AutoAnswers(**(data.get("answers") or {})),
                grounding=GroundingPolicy(**(data.get("grounding") or {})),
                # A run stored before profiles' checks were applied ran without them.
                checks=DomainChecks(**_known(DomainChecks, data["checks"])) if data.get("checks") else _UNCHECKED,
                knowledge=data.get("knowledge"), knowledge_index=data.get("knowledge_index"),
                retrieval=data.get("retrieval") or "bm25",
                tools=tuple(data.get("tools") or ()), tool_limits=ToolLimits(**(data.get("tool_limits") or {})),
                mcp_config=data.get("mcp_config"), read_roots=tuple(data.get("read_roots") or ()),
                research=ResearchConfig.from_dict(data["research"]) if data.get("research") else None,
                role_models=tuple((str(r), str(m)) for r, m in data.get("role_models") or ()),
                pricing=Pricing(**data["pricing"]) if data.get("pricing") else None,
                model_timeout_s=data.get("model_timeout_s"), reasoning_effort=data.get("reasoning_effort"),
                thinking_tokens=data.get("thinking_tokens"), task_file=data.get("task_file"),
                tool_calling=data.get("tool_calling") or "auto",
                scorer=ThoughtScorer(data["scorer"]) if data.get("scorer") else None,
                fork=ForkPoint.from_dict(data["fork"]) if data.get("fork") is not None else None,
                strategy=ChosenStrategy.from_dict(data["strategy"]) if data.get("strategy") else None,
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise SpecError(f"not a run spec: {exc}") from None


_NONE = type(None)
#: The stored form's fields and the types they must have (the rest are checked by the dataclasses they build).
_STORED_TYPES: dict[str, tuple[type, ...]] = {
    "task": (str,), "problem": (str,), "model": (str,), "profile": (str, _NONE), "task_options": (dict, _NONE),
    "config": (dict, _NONE), "budget": (dict, _NONE), "control": (dict, _NONE), "answers": (dict, _NONE),
    "grounding": (dict, _NONE), "checks": (dict, _NONE), "knowledge": (str, _NONE), "knowledge_index": (str, _NONE),
    "retrieval": (str, _NONE),
    "tools": (list, _NONE), "tool_limits": (dict, _NONE), "mcp_config": (str, _NONE), "read_roots": (list, _NONE),
    "research": (dict, _NONE), "role_models": (list, _NONE), "pricing": (dict, _NONE),
    "model_timeout_s": (int, float, _NONE), "task_file": (str, _NONE),
    "reasoning_effort": (str, _NONE), "thinking_tokens": (int, _NONE), "scorer": (str, _NONE),
    "fork": (dict, _NONE),
    "strategy": (dict, _NONE),
    "tool_calling": (str, _NONE),
    "task_declared": (dict, _NONE),
}
#: Task options kept as paths or text, and the test command's words.
_OPTION_TYPES: dict[str, tuple[type, ...]] = {
    "tests": (str,), "data": (str,), "repo": (str,), "failing_test": (str,), "test_command": (list,),
    "size": (int,), "sandbox": (dict, _NONE), "regression_tests": (bool, _NONE),
}


def _check_stored_types(data: Any) -> None:
    """SpecError unless the stored form's fields have their types (a string is not a list of folders)."""
    def kind(value: Any) -> str:
        return "null" if value is None else type(value).__name__

    if not isinstance(data, Mapping):
        raise SpecError(f"not a run spec: a {kind(data)}")
    checks = [(name, data[name], types) for name, types in _STORED_TYPES.items() if name in data]
    options = data.get("task_options") or {}
    if isinstance(options, Mapping):
        checks += [(f"task_options.{name}", options[name], types) for name, types in _OPTION_TYPES.items()
                   if name in options]
        checks += [("task_options.test_command[]", w, (str,)) for w in options.get("test_command") or ()
                   if isinstance(options.get("test_command"), list)]
    for name in ("tools", "read_roots"):
        if isinstance(data.get(name), list):
            checks += [(f"{name}[]", item, (str,)) for item in data[name]]
    if isinstance(data.get("role_models"), list):
        for pair in data["role_models"]:
            if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(p, str) for p in pair)):
                raise SpecError(f"not a run spec: role_models must hold [role, model] pairs, not {kind(pair)}")
    for name, value, types in checks:
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            allowed = " or ".join("null" if t is _NONE else t.__name__ for t in types)
            raise SpecError(f"not a run spec: {name} must be {allowed}, not {kind(value)}")


_OPTION_FIELDS = {f.name for f in fields(TaskOptions)} - {"sandbox"}
_UNCHECKED = DomainChecks()


def _known(cls: type, data: Mapping[str, Any]) -> dict[str, Any]:
    names = {f.name for f in fields(cls) if f.init}
    return {k: v for k, v in data.items() if k in names}


def _declared(task: str | Task[Any]) -> dict[str, Any] | None:
    """A task declared in Python, as a stored run keeps it (None for a task by name or read from a file).

    A bare GeneralTask with settings of its own has no declaration a stored run could rebuild it from: refused."""
    if isinstance(task, FileTask):
        return task.declared()
    if type(task) is GeneralTask and (task.instructions or task.examples or task.prompts or task.checker):
        raise SpecError("a GeneralTask with instructions, examples, prompts or a checker cannot be stored; declare "
                        "it as thoughtloom.task(name=..., instructions=..., ...) and a stored run keeps it whole")
    return None


def _plain(options: TaskOptions) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in fields(options):
        value = getattr(options, f.name)
        if value is None:
            continue
        if isinstance(value, os.PathLike):
            value = os.path.abspath(value)  # a resumed run may start from another directory
        elif isinstance(value, tuple):
            value = list(value)
        elif isinstance(value, SandboxLimits):
            value = asdict(value)
        out[f.name] = value
    return out


def implied_task(options: TaskOptions, problem: str, profile_task: str | None,
                 strategy: str | Strategy | None = None) -> str:
    """The task when none is named: from the options given, a benchmark id's prefix, the profile, a
    question about numbers (math, unless the strategy asked for cannot search it: cove and recursive
    work in prose), else general."""
    if options.repo is not None or options.failing_test:
        return "debug"
    if options.tests is not None:
        return "code"
    prefix = problem.split("/")[0].lower() if "/" in problem else ""
    if prefix in ("humaneval", "mbpp"):
        return prefix
    if profile_task:
        return profile_task
    if is_math_question(problem) and (strategy is None or _fits(strategy, get_task("math"))):
        return "math"
    return "general"


def pinned_model(model: str | Backend) -> str | Backend:
    """The model a run stores: `local` becomes the embedded model it stands for today, so the run
    resumes on that model even after the default changes."""
    if isinstance(model, str) and model.strip() == "local":
        from ..llm.models import DEFAULT_EMBEDDED

        return f"local:{DEFAULT_EMBEDDED}"
    return model


def resolve(
    problem: str,
    *,
    task: str | Task[Any] | None = None,
    model: str | Backend = "local",
    profile: str | DomainProfile | None = None,
    task_options: TaskOptions | None = None,
    config: SearchConfig | None = None,
    search: Mapping[str, Any] | None = None,
    budget: BudgetLimits | None = None,
    control: bool | ControlSettings | Mapping[str, Any] = True,
    answers: AutoAnswers | None = None,
    grounding: GroundingPolicy | Mapping[str, Any] | None = None,
    checks: DomainChecks | Mapping[str, Any] | None = None,
    knowledge: str | os.PathLike[str] | None = None,
    knowledge_index: str | os.PathLike[str] | None = None,
    retrieval: str = "bm25",
    grounders: Sequence[Grounder] = (),
    store: Any = None,
    run_id: str | None = None,
    tools: Sequence[str] = (),
    tool_limits: ToolLimits | None = None,
    mcp_config: str | os.PathLike[str] | None = None,
    read_roots: Sequence[str | os.PathLike[str]] = (),
    research: ResearchConfig | Mapping[str, Any] | None = None,
    role_models: Mapping[str, str] | None = None,
    pricing: Pricing | None = None,
    model_timeout_s: float | None = None,
    reasoning_effort: str | None = None,
    thinking_tokens: int | None = None,
    scorer: Scorer | str | ThoughtScorer | None = None,
    tool_calling: str = "auto",
) -> RunSpec:
    """The one way to build a RunSpec: task defaults, then the profile, then the explicit settings.

    `profile`: a profile name, or a DomainProfile object (your own); None: the profile a given
    ControlSettings came from (`ControlSettings.from_profile`), else "default". `config`: the fields a
    SearchConfig was given are laid over the task's and profile's search settings (one made with
    every field replaces them); `search` sets single SearchConfig fields on top (None values ignored).
    `control`: True for the profile's thresholds, a mapping of ControlSettings fields to override some
    of them, a ControlSettings as is (its profile's search and grounding settings apply, as with
    `profile=`), or False for a plain search.
    `grounding`: a GroundingPolicy, or fields overriding the profile's. `checks`: a DomainChecks, or
    fields overriding the profile's (require_citations needs `knowledge` outside the agent and
    research strategies; run_regression_tests fills the debug task's TaskOptions.regression_tests
    when the caller left it None). `tools`,
    `tool_limits`, `mcp_config`, `read_roots`: what the agent strategy may call (thoughtloom.tools).
    `research`: the research strategy's ResearchConfig, or fields of it; `role_models`: roles that
    run on a model of their own, by model spec (the search strategies' generator, evaluator and
    synthesizer; the research strategy's brancher, evaluator and synthesizer). `reasoning_effort`,
    `thinking_tokens`: a reasoning model's controls, for every model of the run (see llm.registry.check_reasoning).
    `tool_calling`: auto, native or text, how the agent's tool calls reach every model of the run
    (see llm.registry.native_tools).
    `scorer`: a function of (thought, path), or its `module:function` / `file.py:function` reference, that
    scores the thoughts of the operator strategies instead of the model (search/scorer.py).
    Raises UnknownProfile / UnknownTask / TaskOptionError / ProblemError / SpecError with one line.
    """
    prof = _profile(profile, control)
    options = task_options or TaskOptions()
    try:
        domain = checks if isinstance(checks, DomainChecks) else replace(
            prof.checks, **{k: v for k, v in (checks or {}).items() if v is not None})
    except (TypeError, ValueError) as exc:
        raise SpecError(f"checks: {exc}") from None
    task_ref: str | Task[Any] = task if task is not None else implied_task(
        options, problem, prof.default_task, (search or {}).get("strategy"))
    if task_ref == "debug" and options.regression_tests is None and domain.run_regression_tests is not None:
        options = replace(options, regression_tests=domain.run_regression_tests)
    if isinstance(task_ref, str) and not task_ref.strip():
        raise SpecError("empty task name; choose one of the tasks 'loom tasks' lists")
    task_obj = get_task(task_ref, options) if isinstance(task_ref, str) else task_ref
    explicit = {k: v for k, v in (search or {}).items() if v is not None}
    # A strategy given as an object stands outside SearchConfig, which names it (below).
    given_strategy = explicit.pop("strategy") if not isinstance(explicit.get("strategy", ""), str) else None
    try:
        defaults = {**task_obj.search_defaults, **prof.search}
        if prof.hard_depth is not None:
            defaults["max_depth"] = prof.hard_depth
        given = config.given_fields() if config is not None else {}
        config = SearchConfig(**{**defaults, **given, **explicit})
        settings: ControlSettings | None
        if control is False:
            settings = None
        elif isinstance(control, ControlSettings):
            settings = control
        else:
            overrides: Mapping[str, Any] = control if isinstance(control, Mapping) else {}
            settings = ControlSettings.from_profile(prof, **overrides)
            if overrides.get("hard_depth") is not None and overrides["hard_depth"] < config.max_depth:
                raise SpecError(f"hard depth {overrides['hard_depth']} is below the search's depth {config.max_depth}; "
                                "the hard depth bounds how far the controller may go past it")
        if isinstance(grounding, GroundingPolicy):
            policy = grounding
        else:
            policy = replace(prof.grounding, **{k: v for k, v in (grounding or {}).items() if v is not None})
    except (TypeError, ValueError) as exc:
        raise SpecError(str(exc)) from None
    chosen, config = _chosen_strategy(given_strategy if given_strategy is not None else config.strategy, config)
    strategy = chosen.load() if chosen is not None else strategy_named(config.strategy)
    parsed = task_obj.parse_problem(problem)  # fail fast, before any model loads
    if config.strategy == "recursive" and not task_obj.free_text_steps and task_obj.recursion(parsed) is None:
        raise SpecError(no_decomposition(task_obj))
    unfit = strategy.unfit(task_obj)
    if unfit is not None:
        raise SpecError(f"--strategy {config.strategy}: {unfit}")
    if knowledge_index is not None and knowledge is None:
        raise SpecError("--knowledge-index needs --knowledge DIR")
    if retrieval not in RETRIEVALS:
        raise SpecError(f"--retrieval {retrieval}: use one of {', '.join(RETRIEVALS)}")
    if retrieval != "bm25" and knowledge is None:
        raise SpecError(f"--retrieval {retrieval} needs --knowledge DIR, the documents it ranks")
    if domain.require_citations and knowledge is None and not strategy.needs.tools:
        raise SpecError(f"profile {prof.name} requires citations: give --knowledge DIR, the folder of documents "
                        "the thoughts cite and are checked against")
    names = _tool_names(tools, config.strategy, knowledge, mcp_config, read_roots, strategy.needs)
    research_config = _research(research, config.strategy)
    roles = _role_models(role_models, config.strategy, strategy.needs)
    if scorer is not None and not strategy.needs.operators:
        raise SpecError(f"--scorer scores the thoughts of {', '.join(_operator_strategies())}; --strategy "
                        f"{config.strategy} scores its own way")
    if model_timeout_s is not None and not 0 < model_timeout_s < float("inf"):
        raise SpecError(f"the model timeout must be a positive number of seconds; got {model_timeout_s}")
    _check_model_settings(model, roles, reasoning_effort, thinking_tokens, tool_calling)
    if budget is not None and budget.cost_usd is not None:
        _check_priced(model, pricing, roles)
    return RunSpec(
        task=task_ref, problem=problem, model=pinned_model(model), task_options=options, config=config,
        budget=budget or BudgetLimits(), profile=prof.name, control=settings, answers=answers or AutoAnswers(),
        grounding=policy, checks=domain, knowledge=os.fspath(knowledge) if knowledge is not None else None,
        knowledge_index=os.fspath(knowledge_index) if knowledge_index is not None else None, retrieval=retrieval,
        grounders=tuple(grounders), store=store, run_id=run_id, tools=names,
        tool_limits=tool_limits or ToolLimits(),
        mcp_config=os.path.abspath(mcp_config) if mcp_config is not None else None,
        read_roots=tuple(os.path.abspath(r) for r in read_roots), research=research_config, role_models=roles,
        pricing=pricing, model_timeout_s=model_timeout_s, reasoning_effort=reasoning_effort,
        thinking_tokens=thinking_tokens, tool_calling=tool_calling,
        scorer=user_scorer(scorer) if scorer is not None else None, strategy=chosen,
    )


def _fits(strategy: str | Strategy, task: Task[Any]) -> bool:
    """True when the strategy (a name or an object) can search the task; SpecError for an unknown name."""
    if not isinstance(strategy, str):
        return not isinstance(strategy, Strategy) or strategy.unfit(task) is None  # a non-strategy: refused later
    try:
        return strategy_named(strategy).unfit(task) is None
    except StrategyError as exc:
        raise SpecError(str(exc)) from None


def _chosen_strategy(choice: str | Strategy, config: SearchConfig) -> tuple[ChosenStrategy | None, SearchConfig]:
    """A strategy that is not built in, made now, and the config naming it; (None, config) for a built-in one;
    SpecError (one line) for one that is unknown or cannot be made."""
    if isinstance(choice, str) and choice in built_in_names():
        return None, config
    try:
        chosen = ChosenStrategy.of(choice)
    except StrategyError as exc:
        raise SpecError(str(exc)) from None
    return chosen, config if config.strategy == chosen.name else replace(config, strategy=chosen.name)


def _operator_strategies() -> list[str]:
    """The built-in strategies whose thoughts the operators score (a user's scorer applies to them)."""
    return [s.name for s in built_in_strategies() if s.needs.operators]


def user_scorer(scorer: Scorer | str | ThoughtScorer) -> ThoughtScorer:
    """A scorer ready to call (a reference imported now); SpecError, one line, when it cannot be."""
    try:
        return ThoughtScorer.of(scorer)
    except ScorerError as exc:
        raise SpecError(str(exc)) from None


def model_pricing(model: str | Backend, given: Pricing | None = None) -> Pricing | None:
    """A model's price: the one given, a Backend object's own, or the known price list's; None: unknown."""
    if given is not None:
        return given
    if not isinstance(model, str):
        return capabilities_of(model).pricing
    from ..llm.errors import ModelError
    from ..llm.registry import known_pricing, parse_model_spec

    try:
        return known_pricing(parse_model_spec(model))
    except ModelError:
        return None  # a backend name recorded by the Python API: no known price


def role_pricing(model: str | Backend, given: Pricing | None, role_model: str) -> Pricing | None:
    """The price of a role's own model: the run's given price when it is the run's model, else the list's."""
    return model_pricing(model, given) if role_model == pinned_model(model) else model_pricing(role_model)


def _check_priced(model: str | Backend, pricing: Pricing | None, roles: Sequence[tuple[str, str]]) -> None:
    """A dollar budget is only hard when every model it pays for has a price: refuse one that has none."""
    unpriced = [] if model_pricing(model, pricing) is not None else [f"--model {_name(model)}"]
    unpriced += [f"--{role}-model {m}" for role, m in roles if role_pricing(model, pricing, m) is None]
    if unpriced:
        raise SpecError(f"--budget-usd needs a price, and {', '.join(unpriced)} has no known price; give --price-in "
                        "and --price-out (USD per million tokens, for --model) or budget in tokens (--budget-tokens)")


def _check_model_settings(model: str | Backend, roles: Sequence[tuple[str, str]], reasoning_effort: str | None,
                          thinking_tokens: int | None, tool_calling: str) -> None:
    """Refuse reasoning settings or a tool-calling mode that a model of the run cannot take, before any model
    loads (SpecError, one line)."""
    from ..llm.errors import ModelConfigError
    from ..llm.registry import TOOL_CALLING, check_reasoning, native_tools, parse_model_spec

    if tool_calling not in TOOL_CALLING:
        raise SpecError(f"--tool-calling {tool_calling!r}: use one of {', '.join(TOOL_CALLING)}")
    reasoning = reasoning_effort is not None or thinking_tokens is not None
    if not reasoning and tool_calling == "auto":
        return
    if not isinstance(model, str):
        raise SpecError("--reasoning-effort and --thinking-tokens configure a model spec; a Backend object takes "
                        "its own (OpenAIBackend(reasoning_effort=...), AnthropicBackend(thinking_tokens=...))"
                        if reasoning else
                        "--tool-calling configures a model spec; a Backend object declares its own "
                        "(OpenAIBackend(native_tools=...), AnthropicBackend(native_tools=...))")
    try:
        for spec in (model, *(m for _, m in roles)):
            parsed = parse_model_spec(spec)
            check_reasoning(parsed, reasoning_effort, thinking_tokens)
            native_tools(parsed, tool_calling)
    except ModelConfigError as exc:
        raise SpecError(str(exc)) from None


def _name(model: str | Backend) -> str:
    return model if isinstance(model, str) else model.name


def _profile(profile: str | DomainProfile | None, control: Any) -> DomainProfile:
    """The run's profile: as given, else the one the controller settings came from, else default."""
    source = control.profile if isinstance(control, ControlSettings) else None
    if isinstance(profile, DomainProfile):
        prof = profile
    else:
        prof = get_profile(profile if profile is not None else source or "default")
    if source is not None and source != prof.name:
        raise SpecError(f"the controller settings come from profile {source!r}, the run asks for profile "
                        f"{prof.name!r}; give one of them")
    return prof


def research_tools(knowledge: str | os.PathLike[str] | None) -> tuple[str, ...]:
    """What a research run is granted: the exact calculator, and document search when there are documents."""
    return ("calc", "docs") if knowledge is not None else ("calc",)


def _research(research: ResearchConfig | Mapping[str, Any] | None, strategy: str) -> ResearchConfig | None:
    """The research settings, checked (anti-patterns included); only the research strategy takes them."""
    if research is None:
        return None
    if strategy != "research":
        raise SpecError(f"research settings are for the research strategy (loom research); --strategy {strategy} "
                        "does not use them")
    if isinstance(research, ResearchConfig):
        return research
    values = {k: v for k, v in research.items() if v is not None}
    if "allow" in values:
        values["allow"] = tuple(values["allow"])
    try:
        return ResearchConfig(**values)
    except ResearchConfigError as exc:
        raise SpecError(str(exc)) from None
    except TypeError as exc:
        raise SpecError(f"not a research setting: {exc}") from None


def _role_models(role_models: Mapping[str, str] | None, strategy: str,
                 needs: Needs) -> tuple[tuple[str, str], ...]:
    """(role, model spec) pairs, checked: roles the strategy has, and specs that parse."""
    if not role_models:
        return ()
    roles = needs.roles
    if not roles:
        raise SpecError(f"--strategy {strategy} has no roles that run on a model of their own; a model per role is "
                        f"for {', '.join(_operator_strategies())} ({', '.join(OPERATOR_ROLES)}) and research "
                        f"({', '.join(ROLES)})")
    return role_model_pairs(role_models, roles, f"--strategy {strategy}")


def role_model_pairs(role_models: Mapping[str, str], roles: Sequence[str], where: str) -> tuple[tuple[str, str], ...]:
    """(role, model spec) pairs, sorted: each role one of `roles` (of `where`, for the error), each spec
    one that parses, pinned as a run stores it; SpecError (one line) otherwise."""
    from ..llm.errors import ModelConfigError
    from ..llm.registry import parse_model_spec

    out = []
    for role, model in sorted(role_models.items()):
        if role not in roles:
            raise SpecError(f"no role {role!r} in {where}; its roles are {', '.join(roles)}")
        if not isinstance(model, str) or not model.strip():
            raise SpecError(f"--{role}-model: give a model spec (see --model)")
        try:
            parse_model_spec(model)
        except (ModelConfigError, ValueError) as exc:
            raise SpecError(f"--{role}-model: {exc}") from None
        out.append((role, str(pinned_model(model))))
    return tuple(out)


def _tool_names(tools: Sequence[str], strategy: str, knowledge: Any, mcp_config: Any,
                read_roots: Sequence[Any], needs: Needs) -> tuple[str, ...]:
    """The granted tools, checked against what each needs (one-line SpecErrors)."""
    from ..tools.base import ToolConfigError
    from ..tools.registry import check_grant, parse_tool_names

    if not tools:
        return ()
    try:
        names = parse_tool_names(",".join(tools))
        if not needs.tools:
            raise SpecError("tools are called by the agent and the research flow (loom agent, loom research); "
                            f"--strategy {strategy} does not call them")
        return tuple(check_grant(names, knowledge=knowledge, read_roots=read_roots, mcp_config=mcp_config))
    except ToolConfigError as exc:
        raise SpecError(str(exc)) from None


