"""`loom`: the command line. Imports stay inside commands so `loom --help` is instant."""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Callable
from typing import Any

DEFAULT_BUDGET_TOKENS = 20_000
#: The largest whole number a stored run can hold (DAG-CBOR encodes 64-bit integers): options past it
#: would fail to store only after the model calls were made.
MAX_STORED_INT = 2**63 - 1
#: Bounds on counts that multiply work (requests, nodes, levels); far above any useful setting.
MAX_FANOUT = 1_000


class UsageError(Exception):
    """Bad input from the user: printed as one line, exit code 2."""


def _number(name: str, cast: Callable[[str], Any], check: Callable[[Any], bool], requirement: str):
    """An argparse type: parse with `cast`, then require `check` (said as `requirement`).

    Floats must be finite: no option means anything with nan or inf (and a stored run cannot hold them).
    """
    kind = "a whole number" if cast is int else "a finite number"

    def parse(text: str) -> Any:
        try:
            value = cast(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be {kind}; got {text!r}") from None
        if cast is float and not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{name} must be {kind}; got {text}")
        if not check(value):
            raise argparse.ArgumentTypeError(f"{name} must be {requirement}; got {text}")
        return value

    return parse


def _positive_int(name: str, most: int = MAX_STORED_INT):
    return _number(name, int, lambda v: 1 <= v <= most, f"at least 1 and at most {most:,}")


def _count(name: str, most: int = MAX_STORED_INT):
    return _number(name, int, lambda v: 0 <= v <= most, f"at least 0 and at most {most:,}")


def _positive_float(name: str, most: float = 1e12):
    return _number(name, float, lambda v: 0 < v <= most, f"positive, at most {most:g}")


def _unit_float(name: str):
    return _number(name, float, lambda v: 0.0 <= v <= 1.0, "between 0 and 1")


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser for all commands."""
    parser = _Parser(
        prog="loom",
        description="Make a language model reason as a tree or graph of thoughts, under a hard budget.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    s = sub.add_parser("solve", help="search for an answer to a problem", description="Search for an answer to PROBLEM.")
    s.add_argument("problem", metavar="PROBLEM", nargs="?",
                   help='the problem text, e.g. "4 5 6 10" for --task game24 (or --problem ID for a benchmark)')
    s.add_argument("--task", help="task name (see 'loom tasks'); default: the profile's task, else general")
    s.add_argument("--problem", dest="problem_id", metavar="ID", help="a benchmark problem by id, e.g. HumanEval/0")
    s.add_argument(
        "--model", default=os.environ.get("THOUGHTLOOM_MODEL", "local"),
        help="model spec: local | local:PATH.gguf | openai:MODEL | openai-compatible:URL@MODEL | ollama:MODEL "
        "(optional #chat or #completions); default: local (env THOUGHTLOOM_MODEL)",
    )
    s.add_argument("--strategy", choices=("bfs", "dfs", "best_first", "mcts", "got", "recursive"),
                   help="search strategy (default: the task's, else bfs)")
    s.add_argument("--breadth", type=_positive_int("--breadth", MAX_FANOUT), help="thoughts generated per expansion")
    s.add_argument("--beam", type=_positive_int("--beam", MAX_FANOUT), help="thoughts kept per level (beam width)")
    s.add_argument("--depth", type=_positive_int("--depth", MAX_FANOUT), help="maximum depth in steps")
    s.add_argument("--generation", choices=("propose", "sample"), help="one propose call, or independent samples")
    s.add_argument("--evaluation", choices=("value", "vote"), help="value each thought, or vote among siblings")
    s.add_argument("--value-samples", type=_positive_int("--value-samples", MAX_FANOUT), help="samples per value call")
    s.add_argument("--prune-threshold", type=_unit_float("--prune-threshold"), help="prune thoughts scoring below this")
    s.add_argument("--aggregation", choices=("sum", "product", "min", "mean"), help="path score aggregation")
    s.add_argument("--iterations", type=_positive_int("--iterations"), help="MCTS simulations")
    s.add_argument("--max-nodes", type=_positive_int("--max-nodes"), help="circuit breaker: most nodes in the graph")
    s.add_argument("--concurrency", type=_positive_int("--concurrency", MAX_FANOUT), help="model calls in flight at once")
    s.add_argument("--temperature", type=_number("--temperature", float, lambda v: 0 <= v <= 2, "between 0 and 2"),
                   help="sampling temperature (0 to 2)")
    s.add_argument("--budget-tokens", type=_positive_int("--budget-tokens"), default=DEFAULT_BUDGET_TOKENS,
                   help=f"hard limit on input+output tokens (default {DEFAULT_BUDGET_TOKENS:,})")
    s.add_argument("--budget-calls", type=_positive_int("--budget-calls"), help="hard limit on model calls")
    s.add_argument("--budget-usd", type=_positive_float("--budget-usd"), help="hard limit in dollars (known prices only)")
    s.add_argument("--budget-seconds", type=_positive_float("--budget-seconds", 1e9), help="hard wall-clock limit")
    s.add_argument("--seed", type=_count("--seed"), help="seed for reproducible sampling (0 to 2**63-1)")
    s.add_argument("--size", type=_positive_int("--size"),
                   help="sorting, set_intersection: instance size (32/64/128 for data IDs; sorting: alone, a generated list)")
    c = s.add_argument_group("self-aware control (see 'loom profiles')")
    c.add_argument("--profile", default="default", help="domain profile: thresholds and depth limits (default: default)")
    c.add_argument("--acceptable", type=_unit_float("--acceptable"), help="quality a user would accept")
    c.add_argument("--goal", type=_unit_float("--goal"), help="quality that counts as solved")
    c.add_argument("--compromise", type=_unit_float("--compromise"), help="lowest quality offered as a compromise")
    c.add_argument("--soft-depth", type=_positive_int("--soft-depth", MAX_FANOUT), help="depth where progress is judged")
    c.add_argument("--min-progress", type=_unit_float("--min-progress"), metavar="X",
                   help="quality gain per depth below which progress counts as slowing")
    c.add_argument("--stagnation", type=_positive_int("--stagnation", MAX_FANOUT), metavar="N",
                   help="depths without improvement that count as stagnation")
    c.add_argument("--auto-approve-tokens", type=_count("--auto-approve-tokens"), default=0, metavar="N",
                   help="without a terminal: approve up to N more tokens in total (default 0: the budget is hard)")
    c.add_argument("--accept-compromise-above", type=_unit_float("--accept-compromise-above"), metavar="X",
                   help="without a terminal: accept compromises of at least this quality (default: --compromise)")
    c.add_argument("--auto-deeper", type=_count("--auto-deeper", MAX_FANOUT), default=0, metavar="N",
                   help="without a terminal: go up to N levels past the soft depth when asked (default 0)")
    c.add_argument("--interactive", action=argparse.BooleanOptionalAction, default=None,
                   help="ask at the terminal about budget, compromises and depth (default: when on a terminal)")
    g = s.add_argument_group("grounding (testing thoughts against reality)")
    g.add_argument("--tests", metavar="FILE", help="code: a file of asserts or test_ functions the program must pass")
    g.add_argument("--data", metavar="PATH", help="humaneval, mbpp: the benchmark data file")
    g.add_argument("--repo", metavar="DIR", help="debug: the repository with the failing test (never modified)")
    g.add_argument("--failing-test", metavar="TEST", help="debug: the failing test, a pytest node id relative to --repo")
    g.add_argument("--test-command", metavar="CMD", help='debug: how to run a test, e.g. "python -m pytest -q" (default)')
    g.add_argument("--knowledge", metavar="DIR", help="check claims against the .md/.txt documents in DIR")
    g.add_argument("--knowledge-index", metavar="FILE", help="keep the --knowledge search index in this SQLite file")
    g.add_argument("--sandbox-timeout", type=_positive_float("--sandbox-timeout", 86_400), metavar="S",
                   help="wall-clock seconds per sandboxed run (default: 10 for code, 60 for debug)")
    g.add_argument("--sandbox-memory", type=_positive_int("--sandbox-memory", 1 << 20), metavar="MB",
                   help="memory limit per sandboxed run, all its processes together (default 1024)")
    g.add_argument("--sandbox-disk", type=_positive_int("--sandbox-disk", 1 << 20), metavar="MB",
                   help="disk limit per sandboxed run, all its files together (default 512)")
    g.add_argument("--grounding-penalty", type=_unit_float("--grounding-penalty"), metavar="X",
                   help="score multiplier for a thought that fails grounding (default: the profile's)")
    g.add_argument("--grounding-boost", type=_number("--grounding-boost", float, lambda v: v >= 1, "at least 1"),
                   metavar="X",
                   help="score multiplier (>= 1) for a verified thought (default: the profile's)")
    s.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    s.add_argument("--mermaid", metavar="FILE", help="write the reasoning graph as a Mermaid flowchart")
    s.add_argument("--quiet", action="store_true", help="no live progress on stderr")
    s.add_argument("--store", metavar="PATH",
                   help="store the run here (default: $THOUGHTLOOM_STORE, else ~/.thoughtloom/store.db)")
    s.add_argument("--no-store", action="store_true", help="do not store the run")

    from ..eval.cli import add_bench_parser

    add_bench_parser(sub, _positive_int, _positive_float)
    from ..store.cli import add_store_commands

    add_store_commands(sub)
    sub.add_parser("tasks", help="list the tasks")
    sub.add_parser("profiles", help="list the domain profiles and their thresholds")
    parser.add_argument("--version", action="store_true", help="print the version")
    return parser


def _config_overrides(args: argparse.Namespace) -> dict[str, Any]:
    mapping = {
        "strategy": "strategy", "breadth": "breadth", "beam": "beam", "depth": "max_depth",
        "generation": "generation", "evaluation": "evaluation", "value_samples": "value_samples",
        "prune_threshold": "prune_threshold", "aggregation": "aggregation", "iterations": "mcts_iterations",
        "max_nodes": "max_nodes", "concurrency": "concurrency", "temperature": "temperature", "seed": "seed",
    }
    return {field: getattr(args, arg) for arg, field in mapping.items() if getattr(args, arg) is not None}


def _format_text(result: Any) -> str:
    from ..views.terminal import terminal_text

    lines = []
    if result.answer is not None:
        verdict = {True: "checked: correct", False: "checked: WRONG", None: "unchecked"}[result.solved]
        if "\n" in result.answer.strip():  # a program or a patch: keep its lines
            lines.append(f"answer [{verdict}]:")
            lines.extend(f"  {line}" for line in result.answer.rstrip().splitlines())
        else:
            lines.append(f"answer: {result.answer}   [{verdict}]")
    else:
        lines.append(f"no solution within budget (stopped: {result.termination_reason}); best partial path below")
    lines.append("best path:")
    for step in result.best_path:
        score = "" if step.score is None else f"  [{step.score:.2f}]"
        content = " ".join(step.content.split())  # one line per step, however the model wrapped it
        if len(content) > 160:
            content = content[:157] + "..."
        grounded = result.grounding.get(step.id)
        mark = "" if grounded is None else {True: "  ✓", False: "  ✗", None: "  ?"}[grounded.verified]
        lines.append(f"  {step.id:>4}  {step.kind:<12} {content}{score}{mark}")
        if grounded is not None and grounded.evidence.strip():
            for ev in grounded.evidence.strip().splitlines()[:3]:
                lines.append(f"{'':>20}{ev[:140]}")
    u, st = result.usage, result.stats
    limit = f" of {u['token_limit']:,}" if u.get("token_limit") else ""
    cost = f" · ${u['cost_usd']:.4f}" if u.get("cost_usd") else ""
    lines.append(
        f"stopped: {result.termination_reason} · nodes {st['nodes']} (pruned {st['pruned']}, rejected "
        f"{st['rejected']}, repaired {st['repaired']}, duplicates {st['duplicates']}) · depth {st['max_depth']} · "
        f"tokens {u['input_tokens'] + u['output_tokens']:,}{limit} (in {u['input_tokens']:,} / out "
        f"{u['output_tokens']:,}) · calls {u['calls']}{cost} · {st['wall_s']:.1f}s"
    )
    if result.grounding:
        g = st
        lines.append(
            f"grounding: {len(result.grounding)} thoughts tested · {g.get('verified', 0)} verified · "
            f"{g.get('grounding_failed', 0)} failed" + (f" · {g['grounder_errors']} grounder errors" if g.get("grounder_errors") else "")
        )
    recursion = result.recursion()
    if recursion is not None:
        r = recursion["summary"]
        errors = f"errors {r['errors']} · " if "errors" in r else ""
        lines.append(
            f"recursion: {errors}verified {str(r['verified']).lower()} · goals {r['goals']} · decompositions "
            f"{r['decompositions']} · recompositions {r['recompositions']} (failed {r['recompositions_failed']}) · "
            f"invalid plans {r['invalid_plans']} · cycles {r['cycles']} · backtracks {r['backtracks']} · "
            f"retries {r['retries']}"
        )
    if result.error:
        lines.append(f"model error: {result.error}")
    control = result.control
    if control:
        for req in control["budget_requests"]:
            answer = f"approved {req['granted']:,}" if req["approved"] else "denied"
            lines.append(f"budget request: {req['tokens']:,} more tokens -> {answer}. {req['justification']}")
        if control["compromise"]:
            c = control["compromise"]
            verdict = {True: "accepted", False: "rejected", None: "offered"}[c["accepted"]]
            lines.append(f"compromise {verdict}: {c['explanation']}")
        for act in control["actions"]:
            lines.append(f"controller: {act['mode']}: {act['action']}")
    # Answers, steps, evidence and justifications are model text or program output.
    return "\n".join(terminal_text(line) for line in lines)


def cmd_solve(args: argparse.Namespace) -> int:
    """Run one search and print its result."""
    import asyncio
    from dataclasses import replace

    from ..api import make_gateway
    from ..control.controller import ControlSettings, Controller
    from ..control.feedback import AutomaticHandler, InteractiveHandler
    from ..control.profiles import get_profile
    from ..llm.budget import BudgetLimits
    from ..search.config import SearchConfig
    from ..search.engine import search
    from ..tasks.registry import get_task
    from ..views.mermaid import to_mermaid
    from ..views.progress import ProgressDisplay
    from ..views.terminal import terminal_json, terminal_text

    _check_text_options(args)
    profile = get_profile(args.profile)
    task_name = args.task if args.task is not None else _implied_task(args, profile.default_task)
    task = get_task(task_name, _task_options(args, task_name))
    problem_text = _problem_text(args, task_name)
    # Fail fast on bad input, before loading any model.
    parsed = task.parse_problem(problem_text)
    grounders = _extra_grounders(args)
    try:
        policy = replace(
            profile.grounding,
            **{k: v for k, v in (("fail_factor", args.grounding_penalty), ("boost", args.grounding_boost)) if v is not None},
        )
    except ValueError as exc:
        raise UsageError(f"--grounding-boost: {exc}") from None
    defaults = {**task.search_defaults, **profile.search}
    if profile.hard_depth is not None:
        defaults["max_depth"] = profile.hard_depth
    try:
        config = replace(SearchConfig(**defaults), **_config_overrides(args))
        settings = ControlSettings.from_profile(
            profile, acceptable_threshold=args.acceptable, goal_threshold=args.goal,
            compromise_threshold=args.compromise, soft_depth=args.soft_depth,
            min_progress_rate=args.min_progress, stagnation_threshold=args.stagnation,
        )
    except (TypeError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    if config.strategy == "recursive" and not task.free_text_steps and task.recursion(parsed) is None:
        raise UsageError(f"task {task.name} has no decomposition for --strategy recursive (its steps have a fixed "
                         "form); use bfs, dfs, best_first, mcts or got")
    interactive = args.interactive
    if interactive is None:
        interactive = sys.stdin.isatty() and sys.stderr.isatty()
    handler = (
        InteractiveHandler()
        if interactive
        else AutomaticHandler(
            approve_tokens=max(0, args.auto_approve_tokens),
            accept_compromise_above=(
                args.accept_compromise_above if args.accept_compromise_above is not None
                else settings.compromise_threshold
            ),
            extra_depth=max(0, args.auto_deeper),
        )
    )
    controller = Controller(settings, handler, profile=profile.name)
    limits = BudgetLimits(
        tokens=args.budget_tokens, calls=args.budget_calls, cost_usd=args.budget_usd, wall_s=args.budget_seconds
    )
    if args.mermaid is not None:
        _check_writable(args.mermaid)
    if isinstance(args.model, str):
        from ..llm.registry import parse_model_spec

        parse_model_spec(args.model)  # a bad spec or URL is reported before a run is stored
    sinks = [] if args.quiet else [ProgressDisplay()]
    progress = (lambda msg: print(terminal_text(f"loom: {msg}"), file=sys.stderr)) if not args.quiet else None
    # The run store (issue 6): records this run, or serves a resumed / replayed one's calls.
    from ..store.cli import solve_session

    session = solve_session(args, task=task, task_name=task_name, problem_text=problem_text, config=config,
                            limits=limits)

    async def run() -> Any:
        model = session.model(args.model, progress) if session else args.model
        gateway = make_gateway(model, limits, concurrency=config.concurrency, progress=progress)
        if session:
            session.attach(gateway)
        try:
            return await search(task, problem_text, gateway, config, sinks=sinks + (session.sinks if session else []),
                                controller=controller, grounders=grounders, grounding_policy=policy,
                                on_context=session.on_context if session else None)
        finally:
            await gateway.aclose()

    try:
        result = asyncio.run(run())
    except BaseException:
        if session:
            session.abort()
        raise
    if args.json:
        print(terminal_json(result.to_dict(), indent=2))
    else:
        print(_format_text(result))
    code = 130 if result.termination_reason == "interrupted" else 0
    if args.mermaid is not None:  # after the result is printed: a failed write must not lose it
        path_ids = [s.id for s in result.best_path]
        picture = to_mermaid(result.graph, path_ids, [result.goal_node] if result.goal_node is not None else [])
        try:
            with open(args.mermaid, "w", encoding="utf-8") as fh:
                fh.write(picture)
        except OSError as exc:
            print(terminal_text(f"loom: error: cannot write --mermaid {args.mermaid}: {exc.strerror or exc}"),
                  file=sys.stderr)
            code = 2
    if not session:
        return code
    code = session.finish(result, code)
    failure = session.store_failure()
    if failure is not None:  # after the answer: a full disk must not cost the result
        print(terminal_text(f"loom: error: {failure}"), file=sys.stderr)
    return code


def _implied_task(args: argparse.Namespace, profile_task: str | None) -> str:
    """The task when --task is not given: from the options used, else the profile's, else general."""
    if args.repo or args.failing_test:
        return "debug"
    if args.tests:
        return "code"
    if args.problem_id:
        prefix = args.problem_id.split("/")[0].lower()
        if prefix in ("humaneval", "mbpp"):
            return prefix
    return profile_task or "general"


def _task_options(args: argparse.Namespace, task_name: str) -> Any:
    import shlex
    from pathlib import Path

    from ..grounding.sandbox import SandboxLimits
    from ..tasks.registry import TaskOptions

    for flag, value in (("--tests", args.tests), ("--data", args.data), ("--repo", args.repo)):
        if value is not None and not os.path.exists(value):
            raise UsageError(f"{flag} {value}: no such file or directory")
    sandbox = None
    if args.sandbox_timeout is not None or args.sandbox_memory is not None or args.sandbox_disk is not None:
        base = SandboxLimits(timeout_s=60, cpu_s=60) if task_name == "debug" else SandboxLimits()
        timeout = args.sandbox_timeout if args.sandbox_timeout is not None else base.timeout_s
        sandbox = replace_limits(base, timeout, args.sandbox_memory, args.sandbox_disk)
    try:
        command = tuple(shlex.split(args.test_command)) if args.test_command else None
    except ValueError as exc:
        raise UsageError(f"--test-command: {exc}") from None
    return TaskOptions(
        tests=Path(args.tests) if args.tests else None, data=Path(args.data) if args.data else None,
        repo=Path(args.repo) if args.repo else None, failing_test=args.failing_test, test_command=command,
        sandbox=sandbox, size=args.size,
    )


def replace_limits(base: Any, timeout_s: float, memory_mb: int | None, disk_mb: int | None = None) -> Any:
    """Sandbox limits with a new timeout (and CPU limit to match) and, if given, memory and disk limits."""
    from dataclasses import replace

    changes: dict[str, Any] = {"timeout_s": timeout_s, "cpu_s": max(1, int(timeout_s + 0.999))}
    if memory_mb is not None:
        changes["memory_mb"] = memory_mb
    if disk_mb is not None:
        changes["disk_mb"] = disk_mb
    return replace(base, **changes)


def _problem_text(args: argparse.Namespace, task_name: str) -> str:
    if args.problem is not None and args.problem_id is not None:
        raise UsageError("give the problem either as text or as --problem ID, not both")
    text = args.problem_id if args.problem_id is not None else args.problem
    if text is None and task_name != "debug" and not (task_name == "sorting" and args.size is not None):
        raise UsageError(f"no problem given: loom solve --task {task_name} \"PROBLEM\" (or --problem ID)")
    return text or ""


def _extra_grounders(args: argparse.Namespace) -> list[Any]:
    if args.knowledge_index and not args.knowledge:
        raise UsageError("--knowledge-index needs --knowledge DIR")
    if not args.knowledge:
        return []
    from ..grounding.knowledge import KnowledgeBase, KnowledgeBaseError
    from ..grounding.research import ResearchGrounder

    try:
        kb = KnowledgeBase.open(args.knowledge, args.knowledge_index)
    except KnowledgeBaseError as exc:
        raise UsageError(str(exc)) from None
    return [ResearchGrounder(kb)]


def _check_writable(path: str) -> None:
    if os.path.isdir(path):
        raise UsageError(f"cannot write --mermaid {path}: it is a directory; give a file name such as graph.mmd")
    if os.path.exists(path):
        if not os.access(path, os.W_OK):
            raise UsageError(f"cannot write --mermaid {path}: the file is not writable")
        return
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise UsageError(f"cannot write --mermaid {path}: directory {directory} does not exist")
    if not os.access(directory, os.W_OK):
        raise UsageError(f"cannot write --mermaid {path}: directory {directory} is not writable")


def _check_text_options(args: argparse.Namespace) -> None:
    """Every text option is non-empty and valid UTF-8 (a run stores them as text)."""
    for key, value in vars(args).items():
        if not isinstance(value, str):
            continue
        name = {"problem": "the problem", "problem_id": "--problem"}.get(key, f"--{key.replace('_', '-')}")
        if not value.strip():
            raise UsageError(f"{name} is empty; give a value or leave the option out")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            # argv bytes that are not UTF-8 arrive as lone surrogates (surrogateescape).
            raise UsageError(f"{name} is not valid UTF-8 text: {value[:60]!r}") from None


def cmd_profiles(args: argparse.Namespace) -> int:
    """List profiles with their thresholds and limits."""
    from ..control.profiles import PROFILES

    print(f"{'profile':<20}{'acceptable':>11}{'goal':>6}{'compromise':>11}{'soft':>6}{'hard':>6}{'beam':>6}"
          f"{'task':>8}{'penalty':>9}{'boost':>7}  description")
    for p in PROFILES.values():
        def show(v: object) -> str:
            return "task" if v is None else str(v)

        print(
            f"{p.name:<20}{p.acceptable_threshold:>11.2f}{p.goal_threshold:>6.2f}{p.compromise_threshold:>11.2f}"
            f"{show(p.soft_depth):>6}{show(p.hard_depth):>6}{show(p.search.get('beam')):>6}"
            f"{p.default_task or '-':>8}{p.grounding.fail_factor:>9.2f}{p.grounding.boost:>7.2f}  {p.description}"
        )
    return 0


def cmd_tasks(args: argparse.Namespace) -> int:
    """List tasks."""
    from ..tasks.registry import TASKS

    for name, (description, _) in sorted(TASKS.items()):
        print(f"{name:<10} {description}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `loom` command."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.version:
        from .. import __version__

        print(f"loom {__version__}")
        return 0
    if args.command is None:
        parser.print_help()
        return 2
    from ..llm.errors import ModelError
    from ..tasks.base import ProblemError, UnsupportedOperation
    from ..tasks.registry import UnknownTask

    from ..control.profiles import UnknownProfile
    from ..tasks.registry import TaskOptionError

    from ..eval.cli import cmd_bench

    from ..store.cli import COMMANDS as STORE_COMMANDS, store_errors

    commands = {"solve": cmd_solve, "bench": cmd_bench, "tasks": cmd_tasks, "profiles": cmd_profiles,
                **STORE_COMMANDS}
    try:
        code = commands[args.command](args)
        try:
            sys.stdout.flush()  # inside the try: a reader that went away is handled below, not at exit
        except BrokenPipeError:
            raise
        except OSError as exc:  # a full disk or a dead terminal behind stdout
            _stdout_to_devnull()
            print(f"loom: error: cannot write the output: {exc.strerror or exc}", file=sys.stderr)
            return 2
        return code
    except (UsageError, ProblemError, UnknownTask, UnknownProfile, UnsupportedOperation, ModelError,
            TaskOptionError, *store_errors()) as exc:
        from ..views.terminal import terminal_text

        print(f"loom: error: {terminal_text(str(exc))}", file=sys.stderr)  # may quote a server or a file
        return 2
    except KeyboardInterrupt:
        print("loom: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`loom runs | head`): stop quietly, as other command-line tools do.
        _stdout_to_devnull()
        return 141
    except OSError as exc:
        from ..views.terminal import terminal_text

        try:
            sys.stdout.flush()  # what was printed goes out
        except OSError:  # stdout itself failed (while printing): the exit-time flush must not fail again
            _stdout_to_devnull()
        message = f"{exc.strerror or exc}" + (f": {exc.filename}" if exc.filename else "")
        print(f"loom: error: {terminal_text(message)}", file=sys.stderr)
        return 2


def _stdout_to_devnull() -> None:
    """Send stdout (and what is still buffered for it) to /dev/null, so the exit-time flush cannot fail."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


if __name__ == "__main__":
    sys.exit(main())
