"""The `loom` commands over stored runs: runs, show, view, export, import, resume, replay, fork.

Every command takes `--store PATH` (default: $THOUGHTLOOM_STORE, else ~/.thoughtloom/store.db).
Runs are named by id, by any unique prefix of it, or `last` (the newest). Bad input (no such run,
an ambiguous prefix, a corrupt or missing block, an unreadable CAR or manifest) is one line on
stderr and exit code 2: main() catches store_errors(). `loom resume` and `loom replay` rebuild the run's spec from its
manifest (thoughtloom.run.session) and run it through `loom solve`'s own command with a session
that serves the recorded calls; `loom fork` builds a new run from a stored one's (thoughtloom.run.fork)
and runs it the same way.
"""

from __future__ import annotations

import argparse
import os
import stat
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .common import MERMAID_FULL_HELP, add_stream_option, add_threads_option, open_store

# Only argparse work happens at import (build_parser imports this module): `loom --help` stays
# instant; the store, blocks and runs modules load inside the commands.
if TYPE_CHECKING:
    from ..store.runs import StoredRun
    from ..store.store import BlockStore


def add_store_commands(sub: Any) -> None:
    """Add runs, show, view, export, import, resume, replay and fork to loom's subparsers."""
    def store_option(p: argparse.ArgumentParser) -> None:
        p.add_argument("--store", metavar="PATH",
                       help="the run store (default: $THOUGHTLOOM_STORE, else ~/.thoughtloom/store.db)")

    p = sub.add_parser("runs", help="list stored runs", description="List stored runs, oldest first.")
    store_option(p)
    p.add_argument("--json", action="store_true", help="one JSON object per run, one per line")
    p = sub.add_parser("show", help="print a stored run's tree", description="Print a stored run's reasoning tree.")
    p.add_argument("run", metavar="RUN", help="run id, unique prefix, or last (the newest run)")
    store_option(p)
    p.add_argument("--mermaid", metavar="FILE", help="write the graph as a Mermaid flowchart")
    p.add_argument("--mermaid-full", action="store_true", help=MERMAID_FULL_HELP)
    p.add_argument("--json", action="store_true", help="print the run as one JSON object")
    p = sub.add_parser("view", help="write a stored run as one self-contained HTML page",
                       description="Write a stored run as one HTML file that needs no network: the graph by "
                                   "depth, details of a node on click, the budget and score timeline and the "
                                   "controller's decisions.")
    p.add_argument("run", metavar="RUN", help="run id, unique prefix, or last (the newest run)")
    store_option(p)
    p.add_argument("--out", metavar="FILE", help="where to write the page (default: RUN_ID.html here)")
    p = sub.add_parser(
        "export",
        help="export a run as a CAR file or its manifest as JSON",
        description="Export a run with every saved state (CARv1, for 'loom import' or 'ipfs dag import').",
    )
    p.add_argument("run", metavar="RUN", help="run id, unique prefix, or last (the newest run)")
    store_option(p)
    p.add_argument("--car", metavar="FILE", help="write the run's whole DAG to this CARv1 file")
    p.add_argument("--manifest", metavar="FILE", help="write the run's manifest as JSON (for 'loom replay FILE')")
    p = sub.add_parser("import", help="import a run from a CAR file", description="Import runs from a CARv1 file.")
    p.add_argument("file", metavar="FILE", help="a CAR file written by 'loom export'")
    store_option(p)
    for name, text in (("resume", "continue a killed or interrupted run"),
                       ("replay", "re-run a run from its recorded calls and compare the graph")):
        p = sub.add_parser(name, help=text, description=text[0].upper() + text[1:] + ".")
        p.add_argument("run", metavar="RUN" if name == "resume" else "RUN|MANIFEST",
                       help="run id, unique prefix, or last (the newest run)"
                            + (", or a manifest JSON file" if name == "replay" else ""))
        store_option(p)
        _run_output_options(p)
        if name == "resume":  # a replay asks no model
            add_threads_option(p)
            add_stream_option(p)
        add_grant_options(p, live=name == "resume")
    add_fork_command(sub, store_option)


def _run_output_options(p: argparse.ArgumentParser) -> None:
    """How resume, replay and fork print the run (as `loom solve` does)."""
    from .solve import add_events_option

    p.add_argument("--json", action="store_true", help="print the result as one JSON object")
    p.add_argument("--mermaid", metavar="FILE", help="write the reasoning graph as a Mermaid flowchart")
    p.add_argument("--mermaid-full", action="store_true", help=MERMAID_FULL_HELP)
    p.add_argument("--quiet", action="store_true", help="no live progress on stderr")
    add_events_option(p)


def add_fork_command(sub: Any, store_option: Callable[[argparse.ArgumentParser], None]) -> None:
    """Add `loom fork RUN --at NODE [settings]`: its settings default to the parent run's (None: not given)."""
    from ..search.config import EVALUATIONS
    from .common import MAX_FANOUT, add_price_options, count, number, positive_float, positive_int, unit_float

    p = sub.add_parser(
        "fork", help="continue a stored run from one of its nodes with other settings, as a new run",
        description="Continue a stored run from one of its nodes with other settings or another model, recorded "
                    "as a new run linked to its parent. The new run's graph begins with the parent's path from the "
                    "root down to NODE; its strategy starts from NODE. Every setting left out is the parent's.")
    p.add_argument("run", metavar="RUN", help="the parent run: id, unique prefix, or last (the newest run)")
    p.add_argument("--at", required=True, metavar="NODE",
                   help="the node to continue from, as 'loom show' prints it (#4 or 4), or its CID (loom show --json)")
    store_option(p)
    _run_output_options(p)
    add_threads_option(p)
    m = p.add_argument_group("model (default: the parent's, named again when it is not a named embedded one)")
    m.add_argument("--model", metavar="SPEC", help="the fork's model: a spec as 'loom solve --model' takes")
    for role in ("generator", "evaluator", "synthesizer"):
        m.add_argument(f"--{role}-model", metavar="SPEC", help=f"the model the fork's {role} runs on")
    add_price_options(m)
    m.add_argument("--timeout", type=positive_float("--timeout", 86_400), metavar="S",
                   help="seconds one request to a remote model may take")
    m.add_argument("--reasoning-effort", choices=("low", "medium", "high"), help="a reasoning model's effort")
    m.add_argument("--thinking-tokens", type=positive_int("--thinking-tokens"), metavar="N",
                   help="anthropic: extended-thinking budget per sample")
    s = p.add_argument_group("search settings (default: the parent's)")
    s.add_argument("--strategy", metavar="NAME",
                   help="the strategy that goes on from NODE: one that starts from a node (bfs, dfs, best_first)")
    for flag, kind in (("breadth", positive_int), ("beam", positive_int), ("depth", positive_int),
                       ("value-samples", positive_int), ("reasks", count)):
        s.add_argument(f"--{flag}", type=kind(f"--{flag}", MAX_FANOUT), help=f"as 'loom solve --{flag}'")
    s.add_argument("--generation", choices=("propose", "sample"), help="as 'loom solve --generation'")
    s.add_argument("--evaluation", choices=EVALUATIONS, help="as 'loom solve --evaluation'")
    s.add_argument("--prune-threshold", type=unit_float("--prune-threshold"), help="prune thoughts scoring below this")
    s.add_argument("--aggregation", choices=("sum", "product", "min", "mean"), help="path score aggregation")
    s.add_argument("--one-pass", action="store_true", default=None, help="stop after the first pass")
    s.add_argument("--max-nodes", type=positive_int("--max-nodes"), help="most nodes in the fork's graph")
    s.add_argument("--concurrency", type=positive_int("--concurrency", MAX_FANOUT), help="model calls in flight")
    s.add_argument("--temperature", type=number("--temperature", float, lambda v: 0 <= v <= 2, "between 0 and 2"),
                   help="sampling temperature (0 to 2)")
    s.add_argument("--seed", type=count("--seed"), help="seed for reproducible sampling")
    b = p.add_argument_group("budget (default: a new budget the size of the parent's)")
    b.add_argument("--budget-tokens", type=positive_int("--budget-tokens"), help="hard limit on input+output tokens")
    b.add_argument("--budget-calls", type=positive_int("--budget-calls"), help="hard limit on model calls")
    b.add_argument("--budget-usd", type=positive_float("--budget-usd"), help="hard limit in dollars")
    b.add_argument("--budget-seconds", type=positive_float("--budget-seconds", 1e9), help="hard wall-clock limit")
    c = p.add_argument_group("self-aware control (default: the parent's)")
    c.add_argument("--profile", help="another domain profile: its thresholds, checks and grounding policy")
    for flag in ("acceptable", "goal", "compromise", "min-progress"):
        c.add_argument(f"--{flag}", type=unit_float(f"--{flag}"), help=f"as 'loom solve --{flag}'")
    for flag in ("soft-depth", "hard-depth", "stagnation"):
        c.add_argument(f"--{flag}", type=positive_int(f"--{flag}", MAX_FANOUT), help=f"as 'loom solve --{flag}'")
    add_grant_options(p, live=True, models=False)


def add_grant_options(p: argparse.ArgumentParser, *, live: bool, models: bool = True) -> None:
    """What a stored run is granted again (run/grants.py): a stored run is untrusted, so its model endpoints,
    files and tools are used only when named here, exactly as the run asks (the error says what it asks).
    models: whether --model and --ROLE-model are here (loom fork has them among its settings)."""
    g = p.add_argument_group("grants (a stored run uses no endpoint, file or tool it names unless given again here)")
    if live and models:  # a replay asks no model and runs no tool
        g.add_argument("--model", metavar="SPEC", help="the run's model, when it is not a named embedded one")
        for role in ("generator", "brancher", "evaluator", "synthesizer"):  # run/options.py:ROLE_MODEL_OPTIONS
            g.add_argument(f"--{role}-model", metavar="SPEC", help=f"the model the run's {role} runs on")
        g.add_argument("--tools", metavar="LIST", help="the tools the run may call besides calc")
        g.add_argument("--allow-read", metavar="DIR", action="append", help="a folder the files tool may read")
        g.add_argument("--mcp-config", metavar="FILE", help="the MCP servers the run's mcp tools come from")
    g.add_argument("--knowledge", metavar="DIR", help="the run's folder of documents")
    g.add_argument("--knowledge-index", metavar="FILE", help="the run's search index file")
    for flag, meta in (("tests", "FILE"), ("data", "PATH"), ("repo", "DIR")):
        g.add_argument(f"--{flag}", metavar=meta, help=f"the run's --{flag}")
    g.add_argument("--test-command", metavar="CMD", help="the debug run's test command")
    g.add_argument("--task-file", metavar="FILE", help="the task file the run's task was read from")
    g.add_argument("--scorer", metavar="MODULE:FUNCTION", help="the scorer the run's thoughts were scored by")


def store_errors() -> tuple[type[Exception], ...]:
    """Errors every store command reports as one line with exit code 2."""
    from ..store.blocks import CorruptBlock, MissingBlock
    from ..store.manifest import ManifestError
    from ..store.runs import RunError
    from ..store.store import StoreError

    return (RunError, StoreError, CorruptBlock, MissingBlock, ManifestError)


# --- resume and replay: a stored run's spec and session, run by `loom solve`'s own command ---------


@dataclass
class StoredRunJob:
    """A stored run to continue or re-run: its spec, the session serving its record, and what to report."""

    spec: Any
    session: Any
    json_output: bool

    def report(self, code: int) -> int:
        """Say what resume or replay did; a replay that diverged exits 1."""
        s = self.session
        if s.mode == "record":  # a fork
            fork = self.spec.fork
            print(f"loom: run {s.run_id} forked from run {fork.run} at node #{fork.node}", file=sys.stderr)
            return code
        if s.mode == "resume":
            print(f"loom: run {s.run_id} resumed: {s.replayed} recorded calls served from the store, "
                  f"{s.live_calls} new model calls", file=sys.stderr)
            return code
        from ..views.terminal import terminal_text

        verdict = s.verdict()  # names diverging nodes by their (model-written) content
        print(terminal_text(str(verdict)), file=sys.stderr if self.json_output else sys.stdout)
        return code if verdict.identical else 1


def _solve_args(args: argparse.Namespace) -> argparse.Namespace:
    """This command's output options in the form `loom solve` reads them."""
    return argparse.Namespace(
        json=args.json,
        mermaid=args.mermaid,
        mermaid_full=args.mermaid_full,
        quiet=args.quiet,
        store=args.store,
        no_store=True,
        interactive=False,
        threads=getattr(args, "threads", None),
        no_stream=getattr(args, "no_stream", False),
    )


def _granted(args: argparse.Namespace, start: Callable[[Any], tuple[Any, Any]]) -> tuple[Any, Any]:
    """`start(grants)` with the command line's grants. When the run asks for more and a person is at the
    terminal, what it asks for is shown in full and granted on a yes; otherwise the one-line GrantError."""
    from ..run.grants import GrantError, Grants
    from ..views.terminal import terminal_text

    try:
        return start(Grants.from_options(vars(args)))
    except GrantError as exc:
        if not exc.asked or not (sys.stdin.isatty() and sys.stderr.isatty()):
            raise
        # Every value came from the stored run: escaped, so a name cannot rewrite what the terminal shows.
        shown = [terminal_text(f"  {n.what}   (as {n.flags()})") for n in exc.asked]
        sys.stderr.write("\n".join(["loom: this stored run asks for:", *shown, "Grant all of these to it? [y/N] "]))
        sys.stderr.flush()
        if sys.stdin.readline().strip().lower() not in ("y", "yes"):
            raise
        return start(Grants.of(exc.asked))


# --- commands -------------------------------------------------------------------------------------


def cmd_resume(args: argparse.Namespace) -> int:
    """Continue a killed or interrupted run to completion, recorded calls served from the store."""
    from ..run.session import resume_session
    from ..store.runs import open_run
    from .solve import cmd_solve

    store, path = open_store(args.store)
    try:
        run = open_run(store, args.run)
        spec, session = _granted(args, lambda grants: resume_session(store, str(path), run, grants, cli=True))
    except BaseException:
        store.close()
        raise
    session.owns_store = True
    print(f"loom: resuming run {run.run_id} ({run.head['usage']['calls']} recorded calls)", file=sys.stderr)
    return cmd_solve(_solve_args(args), StoredRunJob(spec, session, args.json))


def cmd_replay(args: argparse.Namespace) -> int:
    """Re-run a finished run with zero model calls; exit 1 when the graph differs."""
    from ..run.session import replay_session
    from ..store.manifest import Manifest, ManifestError
    from ..store.runs import RunError, open_run
    from .solve import cmd_solve

    store, path = open_store(args.store)
    try:
        if os.path.isfile(args.run) or args.run.endswith(".json"):
            manifest = Manifest.load_json(args.run)
            if not manifest.head or not manifest.graph:
                raise ManifestError(
                    f"{args.run} names no head and graph to reproduce (write it with 'loom export RUN --manifest FILE')"
                )
            head_cid, run_id = manifest.head, manifest.run_id
        else:
            run = open_run(store, args.run)
            if run.status != "finished":
                raise RunError(f"run {run.run_id} is not finished ({run.status}); 'loom resume {run.run_id}' first")
            manifest, head_cid, run_id = run.manifest, run.head_cid, run.run_id
        spec, session = _granted(args, lambda grants: replay_session(store, str(path), manifest, head_cid, grants,
                                                                     cli=True, run_id=run_id))
    except BaseException:
        store.close()
        raise
    session.owns_store = True
    return cmd_solve(_solve_args(args), StoredRunJob(spec, session, args.json))


def cmd_fork(args: argparse.Namespace) -> int:
    """Continue a stored run from one of its nodes with other settings, recorded as a new run linked to it."""
    from ..run.fork import Changes, open_fork
    from ..words import counted
    from .solve import cmd_solve

    changes = Changes.from_options(vars(args))  # before the store opens: a bad pair of prices costs nothing
    store, path = open_store(args.store)

    def announce(run_id: str) -> None:
        print(f"loom: run {run_id} stored in {path}", file=sys.stderr, flush=True)

    try:
        spec, session = _granted(args, lambda grants: open_fork(store, args.run, args.at, grants, changes, cli=True,
                                                                on_start=announce))
    except BaseException:
        store.close()
        raise
    session.owns_store = True
    fork = spec.fork
    print(f"loom: forking run {fork.run} at node #{fork.node} ({counted(len(fork.steps), 'thought')} copied) into "
          f"run {session.run_id}", file=sys.stderr)
    return cmd_solve(_solve_args(args), StoredRunJob(spec, session, args.json))


def _row(run: StoredRun) -> dict[str, Any]:
    from ..run.fork import parent_of

    result = run.result or {}
    return {
        "id": run.run_id, "status": run.status, "task": run.manifest.task, "problem": run.manifest.problem,
        "started": run.manifest.created_at, "answer": result.get("answer"), "solved": result.get("solved"),
        "stopped": result.get("termination_reason"), "tokens": run.tokens, "calls": run.head["usage"]["calls"],
        "nodes": run.head["nodes"], "head": run.head_cid, "graph": run.graph_cid,
        **({"parent": {"run": parent.run, "node": parent.node}} if (parent := parent_of(run.manifest.spec)) else {}),
    }


def cmd_runs(args: argparse.Namespace) -> int:
    """List stored runs: id, status, when, task, tokens, answer (or problem while unfinished)."""
    from ..store.runs import CorruptRun, open_run, run_ids
    from ..views.terminal import terminal_json, terminal_text

    store, _ = open_store(args.store)
    with store:
        ids = run_ids(store)
        if not args.json:
            print(f"{'run':<11} {'status':<11} {'started':<16} {'task':<9} {'tokens':>8}  answer / problem")
        for run_id in ids:
            try:
                row = _row(open_run(store, run_id))
            except CorruptRun as exc:  # listed as damaged; the other runs are listed as ever
                row = {"id": run_id, "status": "damaged", "error": exc.detail}
            if args.json:
                print(terminal_json(row))
                continue
            if row["status"] == "damaged":
                print(terminal_text(f"{run_id:<11} damaged     {row['error']}"))
                continue
            when = time.strftime("%Y-%m-%d %H:%M", time.localtime(row["started"]))
            text = (
                row["answer"]
                if row["answer"] is not None
                else f"({row['stopped'] or 'no answer yet'}) {row['problem']}"
            )
            # Model text, and any field of an imported run: escaped (the answer before it is cut to its column).
            if "parent" in row:
                text = f"[fork of {row['parent']['run']} #{row['parent']['node']}] {text}"
            text = terminal_text(" ".join(str(text).split()))[:70]
            print(terminal_text(f"{run_id:<11} {row['status']:<11} {when:<16} {row['task']:<9} {row['tokens']:>8,}  ")
                  + text)
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    """Print a stored run's tree (or JSON); --mermaid writes its picture."""
    from ..run.fork import forks_of, parent_of
    from ..store.runs import RunError, load_graph, open_run
    from ..views.mermaid import to_mermaid
    from ..views.terminal import terminal_json, terminal_text
    from ..words import counted

    store, _ = open_store(args.store)
    with store:
        run = open_run(store, args.run)
        stored = load_graph(store, run.graph_cid, run.head["timings"].cid, run.run_id)
        graph, result = stored.graph, run.result or {}
        best = result.get("best_path") or []
        goals = [result["goal_node"]] if result.get("goal_node") is not None else []
        if args.mermaid:
            try:
                Path(args.mermaid).write_text(to_mermaid(graph, best, goals, full=args.mermaid_full), encoding="utf-8",
                                              errors="backslashreplace")
            except OSError as exc:
                raise RunError(f"cannot write --mermaid {args.mermaid}: {exc.strerror or exc}") from None
        forks = forks_of(store, run.run_id)
        if args.json:
            print(terminal_json({
                **_row(run), "forks": [{"run": f.run, "node": f.node} for f in forks],
                "manifest": {k: v for k, v in asdict(run.manifest).items()},
                "result": result,
                "nodes": [{"id": n.id, "kind": n.kind.value, "status": n.status.value, "score": n.score,
                           "depth": n.depth, "parents": graph.parents(n.id), "content": n.content,
                           "cid": stored.versions[n.id]} for n in graph],
            }, indent=2, default=str))
            return 0
        m = run.manifest
        lines = [f"run {run.run_id} · {run.status} · {m.task} · model {m.model} · head {run.head_cid}",
                 f"problem: {' '.join(m.problem.split())[:200]}"]
        parent = parent_of(m.spec)
        if parent is not None:
            copied = {0: "", 1: ": #1 below is its path, copied"}.get(
                parent.copied, f": #1 to #{parent.copied} below are its path, copied")
            lines.append(f"forked from run {parent.run} at node #{parent.node}{copied}")
        if forks:
            lines.append(f"forks: {', '.join(f'{f.run} at #{f.node}' for f in forks)}")
        if result:
            answer = result.get("answer")
            lines.append(f"answer: {answer if answer is not None else '(none)'} · stopped: "
                         f"{result.get('termination_reason')}")
        lines.append(f"graph {run.graph_cid} · {counted(len(graph), 'node')} · "
                     f"{counted(run.head['usage']['calls'], 'call')} · {counted(run.tokens, 'token')}")
        lines.extend(_tree_lines(graph, set(best)))
        for line in lines:
            print(terminal_text(line))  # the problem, the answer and every thought may be hostile text
    return 0


def cmd_view(args: argparse.Namespace) -> int:
    """Write a stored run as one self-contained HTML page."""
    from ..store.runs import RunError, load_calls, load_graph, open_run
    from ..views.html import CallPoint, RunPicture, to_html

    store, _ = open_store(args.store)
    with store:
        run = open_run(store, args.run)
        stored = load_graph(store, run.graph_cid, run.head["timings"].cid, run.run_id)
        result = run.result or {}
        calls = [CallPoint(c.purpose, c.usage.input_tokens, c.usage.output_tokens, c.error)
                 for c in load_calls(store, run.calls_cid, run.run_id)]
        m = run.manifest
        limit = (m.budget or {}).get("tokens")
        picture = RunPicture(run.run_id, run.status, m.task, m.model, m.problem, stored.graph, result, calls,
                             int(limit) if isinstance(limit, (int, float)) else None)
        goals = [result["goal_node"]] if result.get("goal_node") is not None else []
        page = to_html(picture, result.get("best_path") or [], goals)
    out = Path(args.out or f"{run.run_id}.html")
    try:
        out.write_text(page, encoding="utf-8", errors="backslashreplace")
    except OSError as exc:
        raise RunError(f"cannot write {out}: {exc.strerror or exc}") from None
    from ..views.terminal import terminal_text

    print(terminal_text(f"wrote run {run.run_id} ({len(stored.graph)} nodes) to {out}"))  # the path is the user's
    return 0


def _tree_lines(graph: Any, best: set[int]) -> list[str]:
    """The graph as an indented tree along primary parents (other parents noted on the node)."""
    lines: list[str] = []
    roots = [n for n in graph.roots()]
    stack = [(r, 0) for r in reversed(roots)]
    while stack:
        nid, level = stack.pop()
        node = graph.node(nid)
        score = "" if node.score is None else f" [{node.score:.2f}]"
        status = "" if node.status.value == "succeeded" else f" ({node.status.value})"
        also = [p for p in graph.parents(nid)[1:]]
        extra = f" (also from {', '.join(f'#{p}' for p in also)})" if also else ""
        content = " ".join(node.content.split())
        if len(content) > 100:
            content = content[:97] + "..."
        mark = "*" if nid in best else " "
        lines.append(f"{mark} {'  ' * level}#{nid} {node.kind.value}: {content}{score}{status}{extra}")
        children = [c for c in graph.children(nid) if graph.primary_parent(c) == nid]
        stack.extend((c, level + 1) for c in reversed(children))
    return lines


def cmd_export(args: argparse.Namespace) -> int:
    """Write a run's whole DAG (every head, every node version) as CARv1, and/or its manifest."""
    from ..store.car import export_car
    from ..store.runs import RunError, open_run, reading

    if not args.car and not args.manifest:
        raise RunError("say what to export: --car FILE and/or --manifest FILE")
    store, _ = open_store(args.store)
    with store:
        run = open_run(store, args.run)
        if args.car:
            try:
                with reading(run.run_id):  # every block of the run is read, and may be missing
                    count = export_car(store, [run.head_cid], args.car)
            except OSError as exc:
                raise RunError(f"cannot write {args.car}: {exc.strerror or exc}") from None
            print(f"exported run {run.run_id}: {count} blocks (root {run.head_cid}) to {args.car}")
        if args.manifest:
            manifest = run.manifest
            manifest.head, manifest.graph = run.head_cid, run.graph_cid
            manifest.calls = manifest.calls or run.calls_cid
            try:
                Path(args.manifest).write_text(manifest.to_json() + "\n", encoding="utf-8")
            except OSError as exc:
                raise RunError(f"cannot write {args.manifest}: {exc.strerror or exc}") from None
            print(f"wrote the manifest of run {run.run_id} to {args.manifest}")
    return 0


def _car_error(file: str, exc: Exception) -> Exception:
    """The one-line error for a CAR file that cannot be imported (nothing of it is stored)."""
    from ..store.blocks import CorruptBlock, MissingBlock
    from ..store.runs import RunError

    if isinstance(exc, MissingBlock):
        return RunError(f"{file} is incomplete: {exc}; nothing imported")
    if isinstance(exc, CorruptBlock):
        return RunError(f"{file}: {exc}; nothing imported")
    return RunError(f"{file} is not a readable CAR file: {exc}")


def cmd_import(args: argparse.Namespace) -> int:
    """Import the runs of a CAR file; every block of each run is verified against its CID."""
    from ..store.blocks import CorruptBlock, MissingBlock
    from ..store.car import import_blocks, read_car, walk
    from ..store.runs import CorruptRun, RunError, head_ref, load_head

    try:
        # O_NONBLOCK: a FIFO is refused below instead of blocking the open until a writer comes.
        fd = os.open(args.file, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise RunError(f"cannot read {args.file}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise RunError(f"cannot read {args.file}: not a regular file (give a CAR file written by 'loom export')")
    with os.fdopen(fd, "rb") as car:
        found: list[tuple[str, dict[str, Any], int]] = []

        def check(view: BlockStore, roots: list[str]) -> None:
            # Every root must be a whole run before anything is written: a rejected CAR changes nothing.
            for root in roots:
                if not view.has(root):
                    raise RunError(
                        f"{args.file}: root {root} is neither in the file nor in the store; nothing imported"
                    )
                try:
                    head = load_head(view, root)
                except RunError as exc:
                    raise RunError(f"{args.file}: {exc}; nothing imported") from None
                run_id, seq = head.get("run"), head.get("seq")
                if not (isinstance(run_id, str) and run_id.isalnum() and isinstance(seq, int)
                        and isinstance(head.get("status"), str)):
                    raise RunError(f"{args.file}: block {root} is not a valid run head; nothing imported")
                found.append((root, head, sum(1 for _ in walk(view, [root]))))

        try:
            roots, blocks = read_car(car)
            items = list(blocks)  # the whole file read and verified before the store is even opened
        except OSError as exc:
            raise RunError(f"cannot read {args.file}: {exc.strerror or exc}") from None
        except (CorruptBlock, ValueError) as exc:
            raise _car_error(args.file, exc) from None
    if not roots:
        raise RunError(f"{args.file} holds no run (no roots)")
    store, path = open_store(args.store, must_exist=False)
    with store:
        try:
            import_blocks(store, roots, items, check=check)
        except (MissingBlock, CorruptBlock, ValueError) as exc:
            raise _car_error(args.file, exc) from None
        for root, head, count in found:
            run_id = str(head["run"])
            current = store.get_ref(head_ref(run_id))
            try:
                newer = current is not None and current != root and load_head(store, current)["seq"] > head["seq"]
            except (CorruptRun, MissingBlock, CorruptBlock):  # the stored state cannot be read: this verified one
                newer = False  # replaces it (its blocks stay)
            if newer:
                # An older export must not roll a run back: its states are kept, the ref is not moved.
                print(f"imported run {run_id}: {count} blocks, every CID verified; the store already had a "
                      f"newer state of it, which stays current")
            else:
                store.set_ref(head_ref(run_id), root)
                print(f"imported run {run_id} ({head['status']}): {count} blocks, every CID verified, into {path}")
    return 0


COMMANDS = {"runs": cmd_runs, "show": cmd_show, "view": cmd_view, "export": cmd_export, "import": cmd_import,
            "resume": cmd_resume, "replay": cmd_replay, "fork": cmd_fork}
