"""The flat form of a run: `loom solve`'s option names and values, resolved into a RunSpec.

`loom solve` hands its parsed options here, and so do runs stored before runs kept their spec
(their manifests keep these options), so both go through one mapping and then `resolve`.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..grounding.sandbox import SandboxLimits
from ..llm.budget import BudgetLimits, Pricing
from ..tasks.base import Task
from ..tasks.registry import TaskOptions
from ..tools.toolbox import ToolLimits
from .spec import AutoAnswers, RunSpec, SpecError, implied_task, resolve

#: Option name -> SearchConfig field.
SEARCH_OPTIONS = {
    "strategy": "strategy", "breadth": "breadth", "beam": "beam", "depth": "max_depth",
    "generation": "generation", "evaluation": "evaluation", "value_samples": "value_samples",
    "reasks": "reasks", "cove_questions": "cove_questions",
    "prune_threshold": "prune_threshold", "aggregation": "aggregation", "iterations": "mcts_iterations",
    "max_nodes": "max_nodes", "concurrency": "concurrency", "temperature": "temperature", "seed": "seed",
    "one_pass": "one_pass",
    # loom agent's names for the scheduler's settings
    "parallel": "beam", "order": "agent_order", "on_failure": "on_failure", "bridge_hops": "bridge_hops",
}
#: loom research's option name -> ResearchConfig field.
RESEARCH_OPTIONS = {
    "max_branches": "max_branches", "depth_limit": "depth_limit", "max_hypotheses": "max_nodes",
    "branching": "branching_strategy", "branching_threshold": "branching_threshold",
    "pruning_threshold": "pruning_threshold", "prune_after_depth": "prune_after_depth",
    "strong_evidence": "strong_evidence", "merge": "merge_strategy", "merge_threshold": "merge_threshold",
    "explore": "exploration_strategy", "exploration_budget": "exploration_budget", "research_parallel": "parallel",
    "confidence_threshold": "confidence_threshold", "insight_target": "insight_target", "passages": "passages",
    "bridge_hops": "bridge_hops", "allow": "allow",
}
#: loom solve's and loom research's option name -> the role whose model it names.
ROLE_MODEL_OPTIONS = {"generator_model": "generator", "brancher_model": "brancher", "evaluator_model": "evaluator",
                      "synthesizer_model": "synthesizer"}
#: Option name -> ControlSettings field.
CONTROL_OPTIONS = {
    "acceptable": "acceptable_threshold", "goal": "goal_threshold", "compromise": "compromise_threshold",
    "soft_depth": "soft_depth", "hard_depth": "hard_depth", "min_progress": "min_progress_rate",
    "stagnation": "stagnation_threshold",
}


def sandbox_limits(task_name: str, timeout_s: float | None, memory_mb: int | None,
                   disk_mb: int | None = None) -> SandboxLimits | None:
    """Sandbox limits from the timeout, memory and disk options (None when none is given)."""
    if timeout_s is None and memory_mb is None and disk_mb is None:
        return None
    base = SandboxLimits(timeout_s=60, cpu_s=60) if task_name == "debug" else SandboxLimits()
    timeout = timeout_s if timeout_s is not None else base.timeout_s
    changes: dict[str, Any] = {"timeout_s": timeout, "cpu_s": max(1, int(timeout + 0.999))}
    if memory_mb is not None:
        changes["memory_mb"] = memory_mb
    if disk_mb is not None:
        changes["disk_mb"] = disk_mb
    return replace(base, **changes)


def task_options(options: Mapping[str, Any], task_name: str) -> TaskOptions:
    """The options a task takes (files must exist; the test command must parse)."""
    for key in ("tests", "data", "repo"):
        value = options.get(key)
        if value is not None and not os.path.exists(value):
            raise SpecError(f"--{key} {value}: no such file or directory")
    try:
        command = tuple(shlex.split(options["test_command"])) if options.get("test_command") else None
    except ValueError as exc:
        raise SpecError(f"--test-command: {exc}") from None

    def path(key: str) -> Path | None:
        return Path(options[key]) if options.get(key) else None

    return TaskOptions(
        tests=path("tests"), data=path("data"), repo=path("repo"), failing_test=options.get("failing_test"),
        test_command=command, size=options.get("size"),
        regression_tests=False if options.get("no_regression_tests") else None,
        sandbox=sandbox_limits(task_name, options.get("sandbox_timeout"), options.get("sandbox_memory"),
                               options.get("sandbox_disk")),
    )


def problem_text(options: Mapping[str, Any], task_name: str) -> str:
    """The problem: its text or a benchmark id (not both; none only where the task makes its own)."""
    text, problem_id = options.get("problem"), options.get("problem_id")
    if text is not None and problem_id is not None:
        raise SpecError("give the problem either as text or as --problem ID, not both")
    chosen = problem_id if problem_id is not None else text
    if chosen is None and task_name != "debug" and not (task_name == "sorting" and options.get("size") is not None):
        raise SpecError(f"no problem given: loom solve --task {task_name} \"PROBLEM\" (or --problem ID)")
    return chosen or ""


def spec_from_options(options: Mapping[str, Any]) -> RunSpec:
    """A RunSpec from `loom solve`'s options (names as its flags, dashes as underscores)."""
    from ..control.profiles import get_profile

    profile = get_profile(options.get("profile") or "default")
    given_task = options.get("task")
    preliminary = TaskOptions(
        tests=Path(options["tests"]) if options.get("tests") else None,
        repo=Path(options["repo"]) if options.get("repo") else None, failing_test=options.get("failing_test"),
    )
    task_name = given_task if given_task is not None else implied_task(
        preliminary, options.get("problem_id") or options.get("problem") or "", profile.default_task,
        options.get("strategy"))
    task_ref: str | Task[Any] = task_name
    if options.get("task_file"):
        from .taskfile import load_task

        if given_task is not None:
            raise SpecError("give --task NAME or --task-file FILE, not both")
        task_ref = load_task(options["task_file"])
        task_name = task_ref.name
    budget = BudgetLimits(tokens=options.get("budget_tokens"), calls=options.get("budget_calls"),
                          cost_usd=options.get("budget_usd"), wall_s=options.get("budget_seconds"))
    accept = options.get("accept_compromise_above")
    return resolve(
        problem_text(options, task_name), task=task_ref, model=options.get("model") or "local",
        profile=profile.name, task_options=task_options(options, task_name),
        # Two names may set one field (--beam, and loom agent's --parallel): the one given wins.
        search={field: options[opt] for opt, field in SEARCH_OPTIONS.items() if options.get(opt) is not None},
        budget=budget,
        control={field: options.get(opt) for opt, field in CONTROL_OPTIONS.items()},
        answers=AutoAnswers(approve_tokens=max(0, options.get("auto_approve_tokens") or 0),
                            accept_compromise_above=accept, extra_depth=max(0, options.get("auto_deeper") or 0),
                            approve_calls=max(0, options.get("auto_approve_calls") or 0),
                            approve_usd=max(0.0, options.get("auto_approve_usd") or 0.0),
                            approve_seconds=max(0.0, options.get("auto_approve_seconds") or 0.0),
                            abort_above=options.get("auto_abort_above")),
        grounding={"fail_factor": options.get("grounding_penalty"), "boost": options.get("grounding_boost")},
        knowledge=options.get("knowledge"), knowledge_index=options.get("knowledge_index"),
        retrieval=options.get("retrieval") or "bm25",
        tools=tool_names(options.get("tools")), tool_limits=_tool_limits(options), mcp_config=options.get("mcp_config"),
        read_roots=tuple(options.get("allow_read") or ()),
        research=_research(options, task_name),
        role_models={role: options[opt] for opt, role in ROLE_MODEL_OPTIONS.items() if options.get(opt)} or None,
        pricing=pricing_of(options), model_timeout_s=options.get("timeout"),
        reasoning_effort=options.get("reasoning_effort"), thinking_tokens=options.get("thinking_tokens"),
        scorer=options.get("scorer"), tool_calling=options.get("tool_calling") or "auto",
    )


def pricing_of(options: Mapping[str, Any]) -> Pricing | None:
    """--price-in and --price-out as a Pricing (both or neither; loom solve's and loom bench's)."""
    price_in, price_out = options.get("price_in"), options.get("price_out")
    if price_in is None and price_out is None:
        return None
    if price_in is None or price_out is None:
        raise SpecError("give both --price-in and --price-out (USD per million input and output tokens)")
    return Pricing(price_in, price_out)


def _research(options: Mapping[str, Any], task_name: str) -> dict[str, Any] | None:
    """loom research's settings as ResearchConfig fields (the research task always has them, defaults or not)."""
    research = task_name == "research" or options.get("strategy") == "research"
    # An option both take (--bridge-hops) is the agent's search setting outside a research run.
    given = {field: options[opt] for opt, field in RESEARCH_OPTIONS.items()
             if options.get(opt) is not None and (research or opt not in SEARCH_OPTIONS)}
    if given or research:
        return given
    return None


def tool_names(value: Any) -> tuple[str, ...]:
    """--tools as given: "calc,python" (or a list of such), split but not checked: an empty or repeated
    name is refused where the names are parsed (tools.registry.parse_tool_names)."""
    if not value:
        return ()
    parts = value if isinstance(value, (list, tuple)) else [value]
    return tuple(n.strip() for part in parts for n in str(part).split(","))


def _tool_limits(options: Mapping[str, Any]) -> ToolLimits:
    given = {f: options.get(o) for o, f in (("tool_timeout", "timeout_s"), ("tool_output_cap", "output_cap"),
                                             ("tool_concurrency", "concurrency"))}
    return ToolLimits(**{k: v for k, v in given.items() if v is not None})
