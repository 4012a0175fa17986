"""`loom bench`: fair comparisons of reasoning methods under one frozen protocol."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from ..eval.datasets import DATASETS, GAME24_SELECTIONS
from .common import add_price_options, add_threads_option

DEFAULT_BENCH_TOKENS = 4000
DEFAULT_OUT_ROOT = "loom-bench"


class BenchError(ValueError):
    """Bad input to `loom bench`: one line, exit 2."""


def add_bench_parser(sub: Any, positive_int: Any, positive_float: Any) -> None:
    """Register `loom bench` on the CLI's subparsers (the argument types come from cli.main)."""
    b = sub.add_parser(
        "bench", help="compare reasoning methods fairly on benchmark data",
        description="Run lanes (io, cot, cot_sc, best_of_n, react, tot, dfs, mcts, got, recursive, cove: Chain of "
        "Verification, random: the LM-free control, and agent: the "
        "agent with calc,python on GSM8K, docs over each question's own paragraphs on HotpotQA; research: Research "
        "Flow over those paragraphs, its cited sentences scored against HotpotQA's supporting facts) on benchmark "
        "problems under one frozen protocol: same model, temperature, per-problem budget, problems and seeds. "
        "A parity audit refuses unfair protocols; lanes that do not apply to a data set are left out with the "
        "reason; results stream to --out, so re-running resumes.",
    )
    b.add_argument(
        "--tasks",
        help=f"data sets, comma-separated: {', '.join(DATASETS)} (default game24), or your own "
        "as TASK:FILE: FILE is JSON Lines or CSV rows with a problem, an id and, to be scored, "
        "an answer; TASK a task (e.g. general) or a TOML task file (see docs/tasks.md)",
    )
    b.add_argument("--fields", metavar="ROLE=FIELD,...",
                   help="which fields of your rows hold the problem, the answer and the id, e.g. "
                        "problem=question,answer=gold (default: problem, answer, id)")
    b.add_argument("--metric", metavar="CHECKER",
                   help="how your rows' answers are scored: exact, numeric, f1, contains, one_of, regex or "
                        "module:function (default: the task file's checker, else exact for rows with an answer)")
    b.add_argument("--shots", metavar="FILE",
                   help="few-shot examples for your data set: rows like its own, each with its answer; a problem "
                        "that is also a shot is refused")
    b.add_argument("--lanes", help="lanes, comma-separated (default io,cot,cot_sc,tot)")
    b.add_argument("--model", help="model spec as for loom solve (default: local, env THOUGHTLOOM_MODEL)")
    b.add_argument("--limit", type=positive_int("--limit"), help="problems per data set (default 20)")
    b.add_argument("--select", choices=GAME24_SELECTIONS,
                   help="which problems --limit takes: spread (evenly through the file; default), first, hard (last)")
    b.add_argument("--ids", help="exact problem ids, comma-separated (instead of --limit/--select)")
    b.add_argument("--budget-tokens", type=positive_int("--budget-tokens"),
                   help=f"per-problem hard token limit, the same for every lane (default {DEFAULT_BENCH_TOKENS})")
    b.add_argument("--budget-calls", type=positive_int("--budget-calls"), help="per-problem call limit")
    b.add_argument("--budget-usd", type=positive_float("--budget-usd"), help="per-problem dollar limit")
    b.add_argument("--budget-seconds", type=positive_float("--budget-seconds"), help="per-problem wall-clock limit")
    add_price_options(b)
    add_threads_option(b)
    from .solve import add_role_options

    add_role_options(b, {
        "generator": "writes the search lanes' thoughts (tot, dfs, mcts, got; the other lanes run on --model)",
        "evaluator": "scores the search lanes' thoughts",
        "synthesizer": "writes the search lanes' final answers",
    })
    b.add_argument("--temperature", type=float, help="sampling temperature of every lane (default 0.7)")
    b.add_argument("--seed", type=int, help="base seed; problem i gets seed+i in every lane (default 0)")
    b.add_argument("--param", action="append", default=[], metavar="LANE.KEY=VALUE",
                   help="a lane parameter, e.g. cot_sc.k=10 or tot.beam=1 (repeatable)")
    b.add_argument("--protocol", metavar="FILE", help="a protocol JSON file (flags given here override it)")
    b.add_argument("--data-dir", metavar="DIR", help="benchmark data (default: $THOUGHTLOOM_DATA, else the cache "
                   "directory 'loom data fetch NAME' downloads into)")
    b.add_argument(
        "--out",
        metavar="DIR",
        help=f"run directory (default {DEFAULT_OUT_ROOT}/<data sets>-<protocol hash>; "
        "the same command resumes the same run)",
    )
    b.add_argument("--resume", metavar="DIR", help="continue the run in DIR exactly as its manifest says")
    b.add_argument("--jobs", type=positive_int("--jobs"), default=1, help="problems in flight at once (default 1)")
    b.add_argument("--workers", type=positive_int("--workers"),
                   help="processes sharing the run (default 1; with --executor ray: Ray workers, default one per "
                        "CPU of the cluster); the model limit below holds across them")
    b.add_argument("--model-concurrency", type=positive_int("--model-concurrency"),
                   help="model calls in flight at once, over all problems and workers (default: the backend's)")
    b.add_argument("--executor", choices=("local", "ray"), default="local",
                   help="where units run: local processes (default) or Ray workers, each (problem, lane) a unit; "
                        "the driver alone writes --out (needs the 'ray' extra)")
    b.add_argument("--ray-address", metavar="ADDR",
                   help="the Ray cluster to join (HOST:PORT or auto; default: RAY_ADDRESS, else a new local one)")
    b.add_argument("--shard", help=argparse.SUPPRESS)
    b.add_argument(
        "--store",
        metavar="PATH",
        help="record every search lane's run in this store, for 'loom show' and 'loom replay' (default: not stored)",
    )
    b.add_argument("--no-plot", action="store_true", help="skip the PNG plot")
    b.add_argument("--quiet", action="store_true", help="no per-problem progress on stderr")


def _split(text: str | None, option: str) -> list[str] | None:
    """A comma-separated option's names (None when not given); BenchError for an empty or repeated name."""
    from ..tasks.base import comma_list

    return None if text is None else comma_list(text, option, BenchError)


def _param_value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _options(args: argparse.Namespace) -> Any:
    """BenchOptions from a protocol file and the flags (flags win)."""
    from ..eval.runner import BenchOptions

    base: dict[str, Any] = {}
    lane_params: dict[str, dict[str, Any]] = {}
    overrides: dict[str, dict[str, Any]] = {}
    if args.protocol:
        from ..eval.protocol import check_fields, load_protocol_file

        data = load_protocol_file(args.protocol)
        check_fields(data, f"--protocol {args.protocol}")
        base = {k: v for k, v in data.items() if k not in ("lanes", "lane_params")}
        lane_params = {k: dict(v) for k, v in (data.get("lane_params") or {}).items()}
        lanes = []
        entries = data.get("lanes") or []
        for entry in (_split(entries, "the protocol's lanes") or []) if isinstance(entries, str) else entries:
            if isinstance(entry, str):
                lanes.append(entry)
                continue
            name = entry["lane"]
            lanes.append(name)
            if entry.get("params"):
                lane_params.setdefault(name, {}).update(entry["params"])
            extra = {k: v for k, v in entry.items() if k not in ("lane", "params")}
            if extra:
                overrides[name] = extra
        if lanes:
            base["lanes"] = lanes
    flags = {
        "tasks": _split(args.tasks, "--tasks"), "lanes": _split(args.lanes, "--lanes"), "model": args.model,
        "limit": args.limit, "selection": args.select, "ids": _split(args.ids, "--ids"),
        "budget_tokens": args.budget_tokens, "budget_calls": args.budget_calls, "budget_usd": args.budget_usd,
        "budget_seconds": args.budget_seconds, "temperature": args.temperature, "seed": args.seed,
        "data_dir": args.data_dir, "price_in": args.price_in, "price_out": args.price_out,
        "role_models": {role: model for role in ("generator", "evaluator", "synthesizer")
                        if (model := getattr(args, f"{role}_model", None))} or None,
        "labels": _labels(args) or None,
    }
    merged = {**base, **{k: v for k, v in flags.items() if v is not None}}
    _check_prices(merged)
    _check_role_models(merged)
    merged.setdefault("tasks", ["game24"])
    merged.setdefault("lanes", ["io", "cot", "cot_sc", "tot"])
    merged.setdefault("model", os.environ.get("THOUGHTLOOM_MODEL", "local"))
    if "budget_tokens" not in merged and not any(k in merged for k in ("budget_calls", "budget_usd")):
        merged["budget_tokens"] = DEFAULT_BENCH_TOKENS
    for key in ("tasks", "lanes", "ids", "declared_differences"):
        if isinstance(merged.get(key), str):
            merged[key] = _split(merged[key], f"the protocol's {key}")
    for key in ("tasks", "lanes"):
        if not merged[key]:
            raise BenchError(f"the protocol names no {key}")
    for item in args.param:
        key, eq, value = item.partition("=")
        lane, dot, name = key.partition(".")
        if not (eq and dot and lane and name):
            raise BenchError(f"--param {item!r}: write LANE.KEY=VALUE, e.g. cot_sc.k=10")
        lane_params.setdefault(lane, {})[name] = _param_value(value)
    try:
        return BenchOptions(lane_params=lane_params, lane_overrides=overrides, **merged)
    except TypeError as exc:
        raise BenchError(f"bad protocol: {exc}") from None


def _labels(args: argparse.Namespace) -> dict[str, Any]:
    """--fields, --metric and --shots as the protocol keeps them (eval/datasets.Labels)."""
    out: dict[str, Any] = {}
    if args.fields is not None:
        fields = {}
        for pair in _split(args.fields, "--fields") or []:
            role, eq, name = (part.strip() for part in pair.partition("="))
            if not (eq and role and name):
                raise BenchError(f"--fields {pair!r}: write ROLE=FIELD, e.g. problem=question,answer=gold")
            if role not in ("problem", "answer", "id"):
                raise BenchError(f"--fields {pair!r}: ROLE is problem, answer or id")
            fields[role] = name
        out["fields"] = fields
    if args.metric is not None:
        out["metric"] = args.metric
    if args.shots is not None:
        out["shots"] = args.shots
    return out


def custom_checkers(protocol: Any) -> list[str]:
    """The custom checkers (module:function) a protocol's data sets would import to score answers."""
    from ..eval.datasets import Labels, is_task_file
    from ..run.taskfile import load_task
    from ..tasks.checkers import is_reference

    labels = Labels.from_dict(protocol.labels)
    if labels.metric is not None:
        return [labels.metric] if is_reference(labels.metric) else []
    found = []
    for name in protocol.tasks:
        task = name.partition(":")[0]
        if ":" in name and is_task_file(task):
            checker = load_task(task).checker
            if checker is not None and checker.function is not None:
                found.append(checker.function)
    return found


def _check_granted(protocol: Any, args: argparse.Namespace) -> None:
    """A stored run's manifest names the checker it scores by; Python code is imported only when the user names
    it again (--metric), as a stored run's models, files and tools are (run/grants.py)."""
    wanted = custom_checkers(protocol)
    if not wanted:
        if args.metric is not None:
            raise BenchError("--resume takes --metric only to grant a custom checker; this run has none")
        return
    if args.metric != wanted[0]:
        raise BenchError(f"this run scores answers with {wanted[0]}, Python code a run directory cannot grant "
                         f"itself; name it again to run it: loom bench --resume {args.resume} --metric {wanted[0]}")


def _check_role_models(settings: dict[str, Any]) -> None:
    """The role models, from the flags or a protocol file, checked before any data is read."""
    from ..eval.protocol import ProtocolError
    from ..eval.runner import checked_role_models

    try:
        checked_role_models(settings.get("role_models") or {})
    except ProtocolError as exc:
        raise BenchError(str(exc)) from None


def _check_prices(settings: dict[str, Any]) -> None:
    """The price, from the flags or a protocol file, checked as loom solve checks it (both or neither)."""
    from ..run.options import pricing_of
    from ..run.spec import SpecError

    try:
        pricing_of(settings)
    except SpecError as exc:
        raise BenchError(str(exc)) from None


def cmd_bench(args: argparse.Namespace) -> int:
    """Audit the protocol, run (or resume) it, print the tables, write JSON, CSV and the plot."""
    from .. import filelocks
    from ..eval.datasets import DataError, Labels, load_dataset
    from ..eval.lanes import LaneError
    from ..eval.protocol import AuditError, Protocol, ProtocolError, audit
    from ..eval.ray_sweep import ExecutorError
    from ..eval.results import MANIFEST_FILE, ResultsStore
    from ..eval.runner import build_protocol, prepare_run_dir, run_protocol
    from ..llm.errors import ModelError
    from ..llm.limits import NO_SHARED_SLOTS
    from ..words import counted
    from .solve import resolved_threads

    say = (lambda msg: None) if args.quiet else (lambda msg: print(f"loom bench: {msg}", file=sys.stderr, flush=True))
    try:
        if args.temperature is not None and not 0.0 <= args.temperature <= 2.0:
            raise BenchError(f"--temperature must be in [0, 2]; got {args.temperature}")
        threads = resolved_threads(args)
        if ((args.workers or 1) > 1 or args.shard) and not filelocks.available():
            raise BenchError(NO_SHARED_SLOTS)
        if args.executor == "ray":
            _check_ray_flags(args)
        if args.resume:
            manifest = Path(args.resume) / MANIFEST_FILE
            if not manifest.is_file():
                raise BenchError(f"--resume {args.resume}: no {MANIFEST_FILE} there")
            protocol = Protocol.load(manifest)
            out = Path(args.resume)
            if args.fields is not None or args.shots is not None:
                raise BenchError("--resume runs exactly what its manifest says; leave out --fields and --shots")
            _check_granted(protocol, args)
        else:
            protocol = build_protocol(_options(args))
            out = (
                Path(args.out)
                if args.out
                else Path(DEFAULT_OUT_ROOT) / f"{_dir_name(protocol.tasks)}-{protocol.fingerprint()}"
            )
        # The audit runs before any lane and before the model loads: an unfair protocol costs nothing.
        checks = audit(protocol)
        _check_priced(protocol)
        from ..eval.report import left_out_lines

        for line in left_out_lines(protocol.not_applicable) if not args.shard else ():
            # Not progress: said even with --quiet, as the table will lack these lanes (once: not by each worker).
            print(f"loom bench: {line}", file=sys.stderr, flush=True)
        labels = Labels.from_dict(protocol.labels)
        datasets = {t: load_dataset(t, protocol.data_dir, labels) for t in protocol.tasks}
        protocol = prepare_run_dir(protocol, out, say)
        shard = _shard(args.shard)
        say(
            f"parity audit passed: {counted(len(protocol.lanes), 'lane')} share "
            f"{', '.join(c.split(':')[0] for c in checks if 'equal' in c)}"
            + (
                f"; declared to differ: {', '.join(protocol.declared_differences)}"
                if protocol.declared_differences
                else ""
            )
        )
        say(f"run directory {out} · {counted(sum(len(v) for v in protocol.problems.values()), 'problem')} x "
            f"{counted(len(protocol.lanes), 'lane')} · budget {protocol.budget_tokens or '-'} tokens per problem")
        if protocol.role_models:
            from ..eval.lanes import role_lane

            roles = ", ".join(f"{role} on {model}" for role, model in protocol.role_models.items())
            with_roles = [p.lane for p in protocol.lanes if role_lane(p.lane)]
            # Not progress: said even with --quiet, as the table's lanes ran on different models.
            print(f"loom bench: roles: {roles} in lanes {', '.join(with_roles) or '(none of these)'}; every other "
                  f"call runs on {protocol.model}", file=sys.stderr, flush=True)
        store = ResultsStore(out)
        if args.executor == "ray":
            stats = _run_on_ray(args, protocol, store, datasets, say)
            say(f"ran {stats.done}, skipped {stats.skipped} already finished")
        elif (args.workers or 1) > 1 and shard == (0, 1):
            _spawn_workers(args, out, custom_checkers(protocol))
        else:
            from ..llm.registry import make_backend

            # The user's price makes a dollar budget bind and the report's cost known.
            backend = make_backend(protocol.model, pricing=protocol.pricing, threads=threads, progress=say)

            async def go() -> Any:
                try:
                    return await run_protocol(
                        protocol, backend, store, datasets=datasets, jobs=args.jobs,
                        model_concurrency=args.model_concurrency,
                        slots_dir=out / ".slots" if ((args.workers or 1) > 1 or shard != (0, 1)) else None,
                        shard=shard, progress=say, run_store=args.store,
                    )
                finally:
                    await backend.aclose()

            import asyncio  # deferred with the rest: `loom --help` builds this parser

            stats = asyncio.run(go())
            say(f"ran {stats.done}, skipped {stats.skipped} already finished")
            if shard != (0, 1):
                return 0
    except (BenchError, DataError, LaneError, ProtocolError, AuditError, ExecutorError) as exc:
        print(f"loom: error: {exc}", file=sys.stderr)
        return 2
    except ModelError as exc:
        print(f"loom: error: {exc}", file=sys.stderr)
        return 2
    return _report(protocol, out, checks, plot=not args.no_plot, say=say)


def _check_ray_flags(args: argparse.Namespace) -> None:
    """Refuse flags of the local executor, and a missing Ray, before anything runs."""
    from ..eval.ray_sweep import import_ray

    if args.shard:
        raise BenchError("--shard is for local workers; --executor ray shares the units out itself")
    import_ray()


def _run_on_ray(args: argparse.Namespace, protocol: Any, store: Any, datasets: Any, say: Any) -> Any:
    """The protocol's unfinished units on Ray workers; this process alone writes the run directory."""
    import asyncio

    from ..eval.ray_sweep import RaySettings, run_protocol_on_ray

    settings = RaySettings(address=args.ray_address, workers=args.workers, jobs=args.jobs,
                           model_concurrency=args.model_concurrency)
    return asyncio.run(run_protocol_on_ray(protocol, store, datasets, settings, run_store=args.store,
                                           progress=say))


def _dir_name(tasks: list[str]) -> str:
    """The data sets as one folder name: a user's "TASK:path/file.jsonl" becomes "TASK_file"."""
    import re

    names = [
        name.partition(":")[0] + "_" + Path(name.partition(":")[2]).stem if ":" in name else name for name in tasks
    ]
    return re.sub(r"[^A-Za-z0-9_.+-]", "_", "+".join(names))


def _check_priced(protocol: Any) -> None:
    """A dollar budget binds only on a model with a price: refuse a lane that has one without."""
    for plan in protocol.lanes:
        if plan.budget_usd is not None and protocol.lane_pricing(plan) is None:
            raise BenchError(f"--budget-usd needs a price, and lane {plan.lane}'s model {plan.model} has no known "
                             "price; give --price-in and --price-out (USD per million tokens) or budget in tokens "
                             "(--budget-tokens) or calls (--budget-calls) instead")


def _shard(text: str | None) -> tuple[int, int]:
    if not text:
        return (0, 1)
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise BenchError(f"--shard must be I/N; got {text!r}") from None
    if not 0 <= i < n:
        raise BenchError(f"--shard must be I/N with 0 <= I < N; got {text!r}")
    return (i, n)


def _spawn_workers(args: argparse.Namespace, out: Path, granted: list[str]) -> None:
    """Run the protocol in `workers` processes, each on its share of the problems (granted: the custom
    checker the user named, which each worker's --resume must be granted again)."""
    extra = ["--quiet"] if args.quiet else []
    if args.model_concurrency:
        extra += ["--model-concurrency", str(args.model_concurrency)]
    if args.store:
        extra += ["--store", args.store]
    if granted:
        extra += ["--metric", granted[0]]
    if args.threads is not None:
        extra += ["--threads", str(args.threads)]
    import subprocess

    procs = [
        subprocess.Popen([sys.executable, "-m", "thoughtloom", "bench", "--resume", str(out), "--workers",
                          str(args.workers), "--jobs", str(args.jobs), "--shard", f"{i}/{args.workers}", *extra])
        for i in range(args.workers)
    ]
    codes = [p.wait() for p in procs]
    failed = [c for c in codes if c != 0]
    if failed:
        raise BenchError(f"{len(failed)} of {args.workers} workers failed (exit {failed[0]}); re-run to resume")


def _report(protocol: Any, out: Path, checks: list[str], *, plot: bool, say: Any) -> int:
    from ..eval.datasets import Labels, dataset_spec
    from ..eval.report import (
        PLOT_PNG,
        SUMMARY_CSV,
        SUMMARY_JSON,
        format_table,
        summarize,
        winner_lines,
        write_csv,
        write_json,
        write_plot,
    )
    from ..eval.results import ResultsStore

    records = [r for r in ResultsStore(out).load().values()
               if r.task in protocol.problems and r.problem_id in set(protocol.problems[r.task])]
    labels = Labels.from_dict(protocol.labels)
    metrics = {t: dataset_spec(t, labels).metric for t in protocol.tasks}
    planned = {t: len(v) for t, v in protocol.problems.items()}
    summaries = summarize(records, metrics, [p.lane for p in protocol.lanes], planned, protocol.not_applicable,
                          prices={p.lane: protocol.lane_pricing(p) for p in protocol.lanes})
    print(format_table(summaries, protocol.not_applicable))
    for line in winner_lines(summaries):
        print(f"\n{line}")
    write_json(out / SUMMARY_JSON, protocol.to_dict(), summaries, checks, protocol.not_applicable)
    write_csv(out / SUMMARY_CSV, summaries)
    written = [str(out / SUMMARY_JSON), str(out / SUMMARY_CSV)]
    if plot:
        title = (f"{protocol.model} · {protocol.budget_tokens} tokens/problem · T={protocol.temperature} · "
                 f"seed {protocol.seed}")
        note = write_plot(out / PLOT_PNG, summaries, title)
        if note:
            print(note)
        else:
            written.append(str(out / PLOT_PNG))
    print(f"\nwritten: {', '.join(written)}, results in {out / 'results.jsonl'}")
    return 0
