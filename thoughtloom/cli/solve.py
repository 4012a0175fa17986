"""`loom solve`: its options, how a result is printed, and the command itself (through the run layer)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from ..grounding.knowledge import RETRIEVALS
from ..search.config import EVALUATIONS
from ..search.operators import EXTRA as OPERATOR_EXTRA
from .common import (
    MAX_FANOUT,
    MERMAID_FULL_HELP,
    UsageError,
    add_price_options,
    add_stream_option,
    add_threads_option,
    count,
    nonnegative_float,
    number,
    positive_float,
    positive_int,
    unit_float,
)

DEFAULT_BUDGET_TOKENS = 20_000


def add_retrieval_option(group: Any) -> None:
    """--retrieval: how the --knowledge folder's passages are ranked."""
    group.add_argument("--retrieval", choices=RETRIEVALS, default="bm25",
                       help="how --knowledge passages are ranked: bm25 (full text) or hybrid (also sentence "
                            "embeddings, fused by rank; needs the embed extra: pip install 'thoughtloom[embed]')")


def add_solve_parser(sub: Any) -> None:
    """Add `loom solve` and its options to loom's subparsers."""
    s = sub.add_parser(
        "solve", help="search for an answer to a problem", description="Search for an answer to PROBLEM."
    )
    s.add_argument("problem", metavar="PROBLEM", nargs="?",
                   help='the problem text, e.g. "4 5 6 10" for --task game24 (or --problem ID for a benchmark)')
    s.add_argument(
        "--task",
        help="task name (see 'loom tasks'); default: the profile's task, else math for a question about numbers, "
        "else general",
    )
    s.add_argument("--task-file", metavar="FILE",
                   help="a task declared in a TOML file: instructions, prompts, examples, answer checker, search "
                        "defaults (see docs/tasks.md)")
    s.add_argument("--problem", dest="problem_id", metavar="ID", help="a benchmark problem by id, e.g. HumanEval/0")
    add_model_option(s)
    s.add_argument("--strategy", type=solve_strategy, metavar="NAME",
                   help="search strategy (default: the task's, else bfs): bfs, dfs, mcts, got ... (an unknown name "
                        "lists them; tree_of_thoughts and breadth_first are bfs without the beam cut; cove: Chain of "
                        "Verification), one an installed package adds, or your own class, module:Class or "
                        "file.py:Class (see docs/search.md)")
    s.add_argument("--breadth", type=positive_int("--breadth", MAX_FANOUT), help="thoughts generated per expansion")
    s.add_argument("--beam", type=positive_int("--beam", MAX_FANOUT), help="thoughts kept per level (beam width)")
    s.add_argument("--depth", type=positive_int("--depth", MAX_FANOUT),
                   help="depth in steps the search goes to (the controller may go deeper, up to --hard-depth, when "
                        "you approve)")
    s.add_argument("--generation", choices=("propose", "sample"), help="one propose call, or independent samples")
    s.add_argument("--evaluation", choices=EVALUATIONS,
                   help="value each thought, vote among siblings, or score steps by the model's own probability "
                        "among the task's valid steps (prior: no extra call)")
    s.add_argument("--scorer", metavar="MODULE:FUNCTION",
                   help="score the thoughts with your own function f(thought, path) -> score in [0, 1] (or "
                        "file.py:function) instead of the model; see docs/python.md")
    s.add_argument("--value-samples", type=positive_int("--value-samples", MAX_FANOUT), help="samples per value call")
    s.add_argument("--reasks", type=count("--reasks", MAX_FANOUT),
                   help="times an expansion whose proposals were all rejected is asked again (default 2)")
    s.add_argument("--prune-threshold", type=unit_float("--prune-threshold"), help="prune thoughts scoring below this")
    s.add_argument("--aggregation", choices=("sum", "product", "min", "mean"), help="path score aggregation")
    s.add_argument("--iterations", type=positive_int("--iterations"), help="MCTS simulations")
    s.add_argument("--one-pass", action="store_true", default=None,
                   help="bfs, dfs, best_first: stop after the first pass, as the papers do (default: go on from "
                        "the thoughts held back, then with more proposals, while budget is left)")
    add_role_options(s, {
        "generator": "writes the thoughts (generate, refine)",
        "evaluator": "scores the thoughts (value, vote)",
        "synthesizer": "merges thoughts (got) and writes the final answer",
    })
    s.add_argument("--cove-questions", type=positive_int("--cove-questions", MAX_FANOUT), metavar="N",
                   help="cove: most verification questions planned for the draft (default 3)")
    add_run_limits(s)
    s.add_argument(
        "--size",
        type=positive_int("--size"),
        help="sorting, set_intersection: instance size (32/64/128 for data IDs; sorting: alone, a generated list)",
    )
    add_control_options(s)
    g = s.add_argument_group("grounding (testing thoughts against reality)")
    g.add_argument("--tests", metavar="FILE", help="code: a file of asserts or test_ functions the program must pass")
    g.add_argument("--data", metavar="PATH", help="humaneval, mbpp: the benchmark data file")
    g.add_argument("--repo", metavar="DIR", help="debug: the repository with the failing test (never modified)")
    g.add_argument(
        "--failing-test", metavar="TEST", help="debug: the failing test, a pytest node id relative to --repo"
    )
    g.add_argument(
        "--test-command", metavar="CMD", help='debug: how to run a test, e.g. "python -m pytest -q" (default)'
    )
    g.add_argument("--no-regression-tests", action="store_true",
                   help="debug: judge a fix by the failing test alone, without running the rest of the suite")
    g.add_argument("--knowledge", metavar="DIR", help="check claims against the .md/.txt documents in DIR")
    g.add_argument("--knowledge-index", metavar="FILE", help="keep the --knowledge search index in this SQLite file")
    add_retrieval_option(g)
    g.add_argument("--sandbox-timeout", type=positive_float("--sandbox-timeout", 86_400), metavar="S",
                   help="wall-clock seconds per sandboxed run (default: 10 for code, 60 for debug)")
    g.add_argument("--sandbox-memory", type=positive_int("--sandbox-memory", 1 << 20), metavar="MB",
                   help="memory limit per sandboxed run, all its processes together (default 1024)")
    g.add_argument("--sandbox-disk", type=positive_int("--sandbox-disk", 1 << 20), metavar="MB",
                   help="disk limit per sandboxed run, all its files together (default 512)")
    g.add_argument("--grounding-penalty", type=unit_float("--grounding-penalty"), metavar="X",
                   help="score multiplier for a thought that fails grounding (default: the profile's)")
    g.add_argument("--grounding-boost", type=number("--grounding-boost", float, lambda v: v >= 1, "at least 1"),
                   metavar="X",
                   help="score multiplier (>= 1) for a verified thought (default: the profile's)")
    add_output_options(s)


def solve_strategy(name: str) -> str:
    """--strategy NAME: any strategy but those that call tools, which have commands of their own (loom agent ...)."""
    from ..search.strategies.registry import built_in_strategies

    if any(s.name == name and s.needs.tools for s in built_in_strategies()):
        raise argparse.ArgumentTypeError(f"{name} calls tools: run it with loom {name}")
    return name


def add_model_option(s: Any) -> None:
    """--model, shared by loom solve and loom agent."""
    s.add_argument(
        "--model", default=os.environ.get("THOUGHTLOOM_MODEL", "local"),
        help="model spec: local | local:NAME (loom models) | local:PATH.gguf | openai:MODEL | "
        "openai-compatible:URL@MODEL | ollama:MODEL (optional #chat or #completions); default: local, the default "
        "embedded model (env THOUGHTLOOM_MODEL)",
    )
    add_price_options(s)
    add_threads_option(s)
    add_stream_option(s)
    s.add_argument("--timeout", type=positive_float("--timeout", 86_400), metavar="S",
                   help="seconds one request to a remote model may take before it is retried (default 120)")
    s.add_argument("--reasoning-effort", choices=("low", "medium", "high"),
                   help="how hard a reasoning model thinks (OpenAI-compatible chat endpoints' reasoning_effort; "
                   "its reasoning tokens count as output tokens in the budget)")
    s.add_argument("--thinking-tokens", type=positive_int("--thinking-tokens"), metavar="N",
                   help="extended-thinking budget per sample for anthropic: models (at least 1024), on top of each "
                   "reply's max tokens; thinking is billed and budgeted as output, never part of the answer")
    s.add_argument("--tool-calling", choices=("auto", "native", "text"), default="auto",
                   help="how the agent's tool calls reach the model: native sends the tools as function definitions "
                   "(the endpoint's tools field), text asks for a JSON reply; auto (default): native on OpenAI's and "
                   "Anthropic's APIs, text elsewhere (see docs/agent.md)")


def add_role_options(s: Any, roles: dict[str, str]) -> None:
    """--ROLE-model for each role (what it does as help), shared by loom solve and loom research."""
    r = s.add_argument_group("roles on models of their own (default: --model; usage per role in the result)")
    for role, does in roles.items():
        r.add_argument(f"--{role}-model", metavar="SPEC", help=f"the model the {role} runs on: it {does}; a spec as "
                       "for --model")


def add_run_limits(s: Any) -> None:
    """Node, concurrency, sampling and budget limits, shared by loom solve and loom agent."""
    s.add_argument("--max-nodes", type=positive_int("--max-nodes"), help="circuit breaker: most nodes in the graph")
    s.add_argument(
        "--concurrency", type=positive_int("--concurrency", MAX_FANOUT), help="model calls in flight at once"
    )
    s.add_argument("--temperature", type=number("--temperature", float, lambda v: 0 <= v <= 2, "between 0 and 2"),
                   help="sampling temperature (0 to 2)")
    s.add_argument("--budget-tokens", type=positive_int("--budget-tokens"), default=DEFAULT_BUDGET_TOKENS,
                   help=f"hard limit on input+output tokens (default {DEFAULT_BUDGET_TOKENS:,})")
    s.add_argument("--budget-calls", type=positive_int("--budget-calls"), help="hard limit on model calls")
    s.add_argument(
        "--budget-usd",
        type=positive_float("--budget-usd"),
        help="hard limit in dollars (the model needs a known price or --price-in/--price-out)",
    )
    s.add_argument("--budget-seconds", type=positive_float("--budget-seconds", 1e9), help="hard wall-clock limit")
    s.add_argument("--seed", type=count("--seed"), help="seed for reproducible sampling (0 to 2**63-1)")


def add_control_options(s: Any) -> None:
    """The self-aware controller's options, shared by loom solve and loom agent."""
    c = s.add_argument_group("self-aware control (see 'loom profiles')")
    c.add_argument(
        "--profile", default="default", help="domain profile: thresholds and depth limits (default: default)"
    )
    c.add_argument("--acceptable", type=unit_float("--acceptable"), help="quality a user would accept")
    c.add_argument("--goal", type=unit_float("--goal"), help="quality that counts as solved")
    c.add_argument("--compromise", type=unit_float("--compromise"), help="lowest quality offered as a compromise")
    c.add_argument("--soft-depth", type=positive_int("--soft-depth", MAX_FANOUT),
                   help="depth where progress is judged (default: the profile's, else --depth)")
    c.add_argument("--hard-depth", type=positive_int("--hard-depth", MAX_FANOUT),
                   help="depth the controller may raise --depth to when you approve (default: the profile's, "
                        "else --depth + 3)")
    c.add_argument("--min-progress", type=unit_float("--min-progress"), metavar="X",
                   help="quality gain per depth below which progress counts as slowing")
    c.add_argument("--stagnation", type=positive_int("--stagnation", MAX_FANOUT), metavar="N",
                   help="depths without improvement that count as stagnation")
    c.add_argument("--auto-approve-tokens", type=count("--auto-approve-tokens"), default=0, metavar="N",
                   help="without a terminal: approve up to N more tokens in total (default 0: the budget is hard)")
    c.add_argument("--accept-compromise-above", type=unit_float("--accept-compromise-above"), metavar="X",
                   help="without a terminal: accept compromises of at least this quality (default: --compromise)")
    c.add_argument("--auto-approve-calls", type=count("--auto-approve-calls"), default=0, metavar="N",
                   help="without a terminal: approve up to N more model calls in total (default 0)")
    c.add_argument("--auto-approve-usd", type=nonnegative_float("--auto-approve-usd"), default=0.0, metavar="X",
                   help="without a terminal: approve up to X more dollars in total (default 0)")
    c.add_argument("--auto-approve-seconds", type=nonnegative_float("--auto-approve-seconds"), default=0.0,
                   metavar="S", help="without a terminal: approve up to S more wall-clock seconds in total (default 0)")
    c.add_argument("--auto-deeper", type=count("--auto-deeper", MAX_FANOUT), default=0, metavar="N",
                   help="without a terminal: go up to N levels past the soft depth when asked, raising the depth "
                        "limit within the hard depth (default 0)")
    c.add_argument("--auto-abort-above", type=unit_float("--auto-abort-above"), metavar="X",
                   help="without a terminal: abort when a failure the controller could not prevent is at least this "
                        "likely (default: never)")
    c.add_argument("--interactive", action=argparse.BooleanOptionalAction, default=None,
                   help="ask at the terminal about budget, compromises and depth (default: when on a terminal)")


def add_output_options(s: Any) -> None:
    """How a run is printed and stored, shared by loom solve and loom agent."""
    s.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    s.add_argument("--mermaid", metavar="FILE", help="write the reasoning graph as a Mermaid flowchart")
    s.add_argument("--mermaid-full", action="store_true", help=MERMAID_FULL_HELP)
    s.add_argument("--quiet", action="store_true", help="no live progress on stderr")
    add_events_option(s)
    s.add_argument("--store", metavar="PATH",
                   help="store the run here (default: $THOUGHTLOOM_STORE, else ~/.thoughtloom/store.db)")
    s.add_argument("--no-store", action="store_true", help="do not store the run")


def add_events_option(s: Any) -> None:
    """--events FILE: the run's typed event stream as JSON Lines (loom solve, agent, research, resume, replay)."""
    s.add_argument("--events", metavar="FILE",
                   help="write every search event (nodes, scores, grounding, tool calls, budget) as JSON Lines")


def open_events_file(path: str | None) -> Any:
    """The --events file opened for writing (None without the option); a bad path is a usage error."""
    if path is None:
        return None
    if os.path.isdir(path):
        raise UsageError(f"cannot write --events {path}: it is a directory; give a file name such as events.jsonl")
    try:
        # A lone surrogate is written as a \ud800-style escape, in JSON the same string: never a failed write.
        return open(path, "w", encoding="utf-8", errors="backslashreplace")
    except OSError as exc:
        raise UsageError(f"cannot write --events {path}: {exc.strerror or exc}") from None


def cmd_solve(args: argparse.Namespace, stored: Any = None, *, sinks: Sequence[Any] = (),
              json_view: Callable[[Any], dict[str, Any]] | None = None) -> int:
    """Run one search (or resume / replay a stored one, given as `stored`) and print its result.

    sinks: more event sinks (loom research's insight printer); json_view: what --json prints of the
    result (default: the whole result's to_dict()).
    """
    import asyncio
    from dataclasses import replace

    from ..run.execute import execute
    from ..run.options import spec_from_options
    from ..views.ask import InteractiveHandler
    from ..views.mermaid import to_mermaid
    from ..views.progress import ProgressDisplay
    from ..views.terminal import terminal_json, terminal_text

    if stored is None:
        check_text_options(args)
        spec = spec_from_options(vars(args))
        if isinstance(spec.model, str):
            from ..llm.registry import parse_model_spec

            parse_model_spec(spec.model)  # a bad spec or URL is reported before a run is stored
    else:
        spec = stored.spec
    if args.mermaid is not None:
        check_writable(args.mermaid)
    threads = resolved_threads(args)
    interactive = args.interactive if stored is None else False  # recorded answers come from the automatic policy
    if interactive is None:
        interactive = sys.stdin.isatty() and sys.stderr.isatty()
    sinks = [*sinks, *([] if args.quiet else [ProgressDisplay()])]
    events_file = open_events_file(getattr(args, "events", None))
    event_log = None
    if events_file is not None:
        from ..views.events_log import EventLog

        event_log = EventLog(events_file)
        sinks.append(event_log)
    progress = (lambda msg: print(terminal_text(f"loom: {msg}"), file=sys.stderr)) if not args.quiet else None
    store = None
    if stored is None and not args.no_store:
        store = _open_run_store(args.store)
        if store is not None:
            spec = replace(spec, store=store)

    store_path = store.path if store is not None else None

    def announce(run_id: str) -> None:
        print(f"loom: run {run_id} stored in {store_path}", file=sys.stderr, flush=True)

    try:
        result = asyncio.run(execute(
            spec, sinks=sinks, handler=InteractiveHandler() if interactive else None,
            session=stored.session if stored is not None else None, progress=progress,
            threads=threads, stream=False if getattr(args, "no_stream", False) else None,
            on_stored=announce if store is not None else None,
        ))
    finally:
        if store is not None:
            store.close()
        if event_log is not None:
            event_log.close()
    if args.json:
        print(terminal_json(json_view(result) if json_view is not None else result.to_dict(), indent=2))
    else:
        print(format_text(result))
    code = 130 if result.termination_reason == "interrupted" else 0
    if args.mermaid is not None:  # after the result is printed: a failed write must not lose it
        path_ids = [s.id for s in result.best_path]
        picture = to_mermaid(result.graph, path_ids, [result.goal_node] if result.goal_node is not None else [],
                             full=args.mermaid_full)
        try:
            with open(args.mermaid, "w", encoding="utf-8", errors="backslashreplace") as fh:
                fh.write(picture)
        except OSError as exc:
            print(terminal_text(f"loom: error: cannot write --mermaid {args.mermaid}: {exc.strerror or exc}"),
                  file=sys.stderr)
            code = 2
    if event_log is not None and event_log.error is not None:  # after the answer, which it must not cost
        kept = "the answer and the stored run are kept" if result.run_id else "the answer is kept"
        print(terminal_text(f"loom: error: cannot write --events {args.events}: {event_log.error}; {kept}, "
                            "the event stream is incomplete"), file=sys.stderr)
        code = code or 2
    if stored is not None:
        code = stored.report(code)
    if result.store_error is not None:  # after the answer: a full disk must not cost the result
        from ..run.grants import grant_flags

        print(terminal_text(f"loom: error: {store_failure(result, grant_flags(spec))}"), file=sys.stderr)
        code = code or STORE_FAILED
    return code


def resolved_threads(args: argparse.Namespace) -> int | str:
    """--threads, else $THOUGHTLOOM_THREADS, else auto: checked now, so a bad value costs no stored run."""
    from ..llm.threads import AUTO, threads_setting

    threads = threads_setting(getattr(args, "threads", None), os.environ)
    return AUTO if threads is None else threads


#: Exit code of `loom solve` / `loom resume` when the answer was printed but the run could not be stored.
STORE_FAILED = 3


def store_failure(result: Any, grants: str = "") -> str:
    """Why the run is not stored whole, as one line that says what to do (grants: the flags `loom resume`
    needs to be given again, run/grants.py)."""
    where = f" in {result.store}" if result.store else ""
    if result.run_id is None:
        return (f"could not store the run ({result.store_error}); the answer above is complete; "
                "nothing of the run was stored")
    return (f"could not store run {result.run_id}{where} ({result.store_error}); the answer above is complete; the "
            f"store keeps the run up to its last stored call: free space, then: loom resume "
            f"{' '.join([result.run_id, *([grants] if grants else [])])}")


def _open_run_store(option: str | None) -> Any:
    """The store `loom solve` records into: the one asked for (errors are the user's), else the default if it opens."""
    from ..store.store import StoreError
    from .common import open_store

    try:
        store, _ = open_store(option, must_exist=False)
    except StoreError as exc:
        if option:
            raise
        print(f"loom: warning: this run is not stored: {exc}", file=sys.stderr)
        return None
    return store


def check_writable(path: str) -> None:
    """A file loom will write after the search: it must be writable, or its directory must exist and be, now."""
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


def check_text_options(args: argparse.Namespace) -> None:
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


def format_text(result: Any) -> str:
    """A result as `loom solve` prints it: answer, best path, how it stopped, grounding, the strategy's trace,
    control."""
    from ..views.terminal import terminal_text
    from ..words import counted

    lines = []
    if result.answer is not None:
        verdict = {True: "checked: correct", False: "checked: WRONG", None: "unchecked"}[result.solved]
        if "\n" in result.answer.strip():  # a program or a patch: keep its lines
            lines.append(f"answer [{verdict}]:")
            lines.extend(f"  {line}" for line in result.answer.rstrip().splitlines())
        else:
            lines.append(f"answer: {result.answer}   [{verdict}]")
        doubt = result.answer_doubt()
        if doubt is not None:
            lines.append(f"doubt: {doubt if len(doubt) <= 200 else doubt[:197] + '...'}")
    else:
        lines.append(f"no solution within budget (stopped: {result.termination_reason}); best partial path below")
    lines.append("best path:")
    shown_tally: object = None
    for step in result.best_path:
        score = "" if step.score is None else f"  [{step.score:.2f}]"
        content = " ".join(step.content.split())  # one line per step, however the model wrapped it
        if len(content) > 160:
            content = content[:157] + "..."
        grounded = result.grounding.get(step.id)
        mark = "" if grounded is None else {True: "  ✓", False: "  ✗", None: "  ?"}[grounded.verified]
        lines.append(f"  {step.id:>4}  {step.kind:<12} {content}{score}{mark}")
        tally = result.graph.node(step.id).extra.get(OPERATOR_EXTRA.tally) if step.id in result.graph else None
        if tally and tally != shown_tally:  # an answer carries the account of the vote it came from
            lines.append(f"{'':>20}vote: {tally[:140]}")
            shown_tally = tally
        if step.evaluation is not None and step.evaluation.reasoning:
            why = " ".join(step.evaluation.reasoning.split())
            lines.append(f"{'':>20}why: {why if len(why) <= 140 else why[:137] + '...'}")
        if grounded is not None and grounded.evidence.strip():
            for ev in grounded.evidence.strip().splitlines()[:3]:
                lines.append(f"{'':>20}{ev[:140]}")
    if result.best_path_total is not None:
        listed = f", the best {len(result.all_paths)} listed by --json" if result.paths_found > len(result.all_paths) \
            else ", listed by --json"
        aggregation = result.config["aggregation"]
        # The steps' scores say how good each step looked, not whether the path got anywhere.
        caveat = ("; a partial path, not a solution" if result.answer is None
                  else "; the answer they lead to was checked wrong" if result.solved is False else "")
        lines.append(f"path score: {result.best_path_total:.2f} ({aggregation} of the steps' scores{caveat}) · "
                     f"{counted(result.paths_found, 'root-to-leaf path')} scored{listed}")
    u, st = result.usage, result.stats
    limit = f" of {u.token_limit:,}" if u.token_limit else ""
    if not u.cost_known:
        cost = " · cost unknown (no price for this model: give --price-in/--price-out)"
    else:
        cost = f" · ${u.cost_usd:.4f}" if u.cost_usd else ""
    lines.append(
        f"stopped: {result.termination_reason} · nodes {st.nodes} (pruned {st.pruned}, rejected "
        f"{st.rejected}, repaired {st.repaired}, duplicates {st.duplicates}) · depth {st.max_depth} · "
        f"tokens {u.total_tokens:,}{limit} (in {u.input_tokens:,} / out {u.output_tokens:,}"
        f"{f', reasoning {u.reasoning_tokens:,}' if u.reasoning_tokens else ''}) · calls {u.calls}"
        f"{cost} · {st.wall_s:.1f}s"
    )
    if u.roles:
        lines.append("usage per role: " + " · ".join(
            f"{r.role} {counted(r.total_tokens, 'token')}, {counted(r.calls, 'call')}"
            + (f", ${r.cost_usd:.4f}" if r.cost_usd else "")
            for r in u.roles))
    if result.grounding and st.grounding is not None:
        g = st.grounding
        lines.append(
            f"grounding: {counted(len(result.grounding), 'thought')} tested · {g.verified} verified · "
            f"{g.grounding_failed} failed"
            + (f" · {g.grounder_errors} grounder errors" if g.grounder_errors else "")
        )
    trace = result.trace
    if trace is not None:
        lines.extend(trace.lines())
    if result.research is not None:
        from ..views.insights import research_lines

        lines.extend(research_lines(result.research))
    if result.error:
        lines.append(f"model error: {result.error}")
    if result.control is not None:
        lines.extend(result.control.lines())
    # Answers, steps, evidence and justifications are model text or program output.
    return "\n".join(terminal_text(line) for line in lines)
