"""Running a protocol: audit, then every (data set, problem, lane) once, streamed to disk.

Each lane gets, per problem, a fresh gateway with the protocol's budget over ONE shared backend
(so the model is loaded once and every lane pays for its tokens the same way); search lanes run
through the run layer exactly as `loom solve` would run them. Problems run
problem-major (all lanes of a problem before the next problem), so an interrupted run has
compared the lanes on the same problems. `jobs` problems may run at once, and a global limiter
caps the calls the model serves at once, across processes too when `slots_dir` is given.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..llm.budget import BudgetLimits
from ..llm.limits import ModelLimit, SharedSlots
from ..llm.types import Backend
from ..search.result import SearchResult
from ..tasks.answers import unlabelled
from ..words import counted
from .citations import support_precision
from .datasets import Dataset, Labels, Problem, load_dataset
from .lanes import (
    LANE_DEFAULTS,
    LaneError,
    LaneOutcome,
    LaneSpend,
    check_lane,
    check_lane_name,
    check_params,
    run_lane,
)
from .protocol import LanePlan, Protocol, ProtocolError, audit, code_version
from .results import MANIFEST_FILE, Record, ResultsStore

Progress = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class BenchOptions:
    """How to build a protocol from command-line style settings."""

    tasks: Sequence[str]
    lanes: Sequence[str]
    model: str = "local"
    limit: int | None = 20
    selection: str = "spread"
    ids: Sequence[str] = ()
    budget_tokens: int | None = 4000
    budget_calls: int | None = None
    budget_usd: float | None = None
    budget_seconds: float | None = None
    temperature: float = 0.7
    seed: int | None = 0
    data_dir: str | None = None
    #: lane -> parameters (e.g. {"cot_sc": {"k": 5}, "tot": {"beam": 1}})
    lane_params: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: lane -> settings that differ from the shared ones (only to build unfair protocols on purpose)
    lane_overrides: dict[str, dict[str, Any]] = field(default_factory=dict)
    declared_differences: Sequence[str] = ()
    #: the user's price of `model`, USD per million input / output tokens (both or neither)
    price_in: float | None = None
    price_out: float | None = None
    #: role -> model spec for the search lanes that have roles (generator, evaluator, synthesizer)
    role_models: dict[str, str] = field(default_factory=dict)
    #: how a user's own data sets are read and scored (--fields, --metric, --shots; datasets.Labels)
    labels: dict[str, Any] = field(default_factory=dict)


def build_protocol(opts: BenchOptions, datasets: dict[str, Dataset] | None = None) -> Protocol:
    """A frozen protocol: load the data sets, choose the problems, plan every lane."""
    if (opts.price_in is None) != (opts.price_out is None):
        raise ProtocolError("give both price_in and price_out (USD per million input and output tokens), or neither")
    labels = Labels.from_dict(opts.labels)
    datasets = datasets if datasets is not None else {t: load_dataset(t, opts.data_dir, labels) for t in opts.tasks}
    problems = {
        t: [p.id for p in datasets[t].select(opts.limit, opts.selection, opts.ids or None)] for t in opts.tasks
    }
    not_applicable: dict[str, dict[str, str]] = {}
    for lane in opts.lanes:
        check_lane_name(lane)
        for t in opts.tasks:
            try:
                check_lane(lane, datasets[t])
            except LaneError as exc:
                # Left out of this data set's run and report, with the reason (never scored as 0%).
                not_applicable.setdefault(t, {})[lane] = str(exc)
    if opts.lanes and all(lane in not_applicable.get(t, {}) for lane in opts.lanes for t in opts.tasks):
        lane = opts.lanes[0]
        raise LaneError(f"nothing to run: {not_applicable[opts.tasks[0]][lane]}")
    unknown = set(opts.lane_params) - set(opts.lanes)
    if unknown:
        raise LaneError(f"parameters given for lane {min(unknown)}, which is not in --lanes")
    plans = []
    for lane in opts.lanes:
        shared = {
            "model": opts.model, "temperature": opts.temperature, "budget_tokens": opts.budget_tokens,
            "budget_calls": opts.budget_calls, "budget_usd": opts.budget_usd, "budget_seconds": opts.budget_seconds,
            "seed": opts.seed, "problems": problems,
        }
        extra = dict(opts.lane_overrides.get(lane, {}))
        bad = set(extra) - set(shared)
        if bad:
            raise ProtocolError(f"lane {lane}: unknown setting {min(bad)!r}")
        if "problems" in extra and isinstance(extra["problems"], list):
            extra["problems"] = {t: list(extra["problems"]) for t in opts.tasks}
        params = {**LANE_DEFAULTS.get(lane, {}), **opts.lane_params.get(lane, {})}
        check_params(lane, params)
        plans.append(LanePlan(lane=lane, params=params, **{**shared, **extra}))
    return Protocol(
        tasks=list(opts.tasks), problems=problems, lanes=plans, model=opts.model, temperature=opts.temperature,
        budget_tokens=opts.budget_tokens, budget_calls=opts.budget_calls, budget_usd=opts.budget_usd,
        budget_seconds=opts.budget_seconds, seed=opts.seed, selection=opts.selection, data_dir=opts.data_dir,
        declared_differences=list(opts.declared_differences), code_version=code_version(),
        not_applicable=not_applicable, price_in=opts.price_in, price_out=opts.price_out,
        role_models=checked_role_models(opts.role_models), labels=labels.to_dict(),
    )


def checked_role_models(role_models: dict[str, str]) -> dict[str, str]:
    """Role models for a protocol: the search lanes' roles, specs that parse, pinned as a run stores them."""
    from ..run.spec import SpecError, role_model_pairs
    from ..search.config import OPERATOR_ROLES

    try:
        return dict(role_model_pairs(role_models, OPERATOR_ROLES, "the search lanes"))
    except SpecError as exc:
        raise ProtocolError(str(exc)) from None


def prepare_run_dir(protocol: Protocol, out_dir: Path, progress: Progress | None = None) -> Protocol:
    """Write the manifest, or check that a resumed run keeps the protocol it started with."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ProtocolError(
            f"cannot create the run directory {out_dir}: {exc.strerror or exc}; choose another --out"
        ) from None
    path = out_dir / MANIFEST_FILE
    if path.is_file():
        stored = Protocol.load(path)
        if stored.fingerprint() != protocol.fingerprint():
            raise ProtocolError(
                f"{out_dir} holds a run with a different protocol; "
                "resume it with the same settings or use another --out"
            )
        if stored.code_version != protocol.code_version and progress:
            progress(f"resuming a run started with code {stored.code_version} (now {protocol.code_version})")
        return stored
    tmp = path.with_suffix(".tmp")
    try:
        tmp.write_text(json.dumps(protocol.to_dict(), indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, path)  # a kill never leaves half a manifest
    except OSError as exc:
        raise ProtocolError(f"cannot write {path}: {exc.strerror or exc}; choose another --out") from None
    return protocol


def limits_of(plan: LanePlan) -> BudgetLimits:
    """The per-problem budget of a lane."""
    return BudgetLimits(tokens=plan.budget_tokens, calls=plan.budget_calls, cost_usd=plan.budget_usd,
                        wall_s=plan.budget_seconds)


async def run_one(dataset: Dataset, problem: Problem, index: int, plan: LanePlan, backend: Backend,
                  protocol: Protocol, slots: ModelLimit | None = None,
                  store: Any = None) -> tuple[Record, LaneOutcome]:
    """One lane on one problem under a fresh budget (the lane's) over the shared backend; scored exactly.

    Returns the record (what results.jsonl keeps) and the lane's whole outcome."""
    seed = protocol.seed_for(plan, index)
    started = time.monotonic()
    outcome, spend = await run_lane(plan.lane, dataset, problem, backend, limits_of(plan), params=plan.params,
                                    role_models=protocol.role_models,
                                    temperature=plan.temperature, seed=seed, slots=slots, store=store)
    wall = time.monotonic() - started
    return await record_of(dataset, problem, index, plan, protocol, outcome, spend, wall), outcome


async def record_of(dataset: Dataset, problem: Problem, index: int, plan: LanePlan, protocol: Protocol,
                    outcome: LaneOutcome, spend: LaneSpend, wall: float) -> Record:
    """The scored record of a lane's outcome on one problem."""
    seed = protocol.seed_for(plan, index)
    score = await dataset.score(problem, outcome.answer)
    # The answer as a reader wants it: without the cue's "Answer:" label, where it scores the same.
    answer = unlabelled(outcome.answer)
    if answer != outcome.answer and await dataset.score(problem, answer) != score:
        answer = outcome.answer
    any_correct = None
    if outcome.candidates:
        any_correct = False
        for cand in outcome.candidates:
            if cand is not None and (await dataset.score(problem, cand)).solved:
                any_correct = True
                break
    precision = None if outcome.cited is None else support_precision(outcome.cited, problem.supporting_facts)
    return Record(
        task=dataset.name, lane=plan.lane, problem_id=problem.id, index=index, seed=seed, answer=answer,
        solved=score.solved, errors=score.errors, any_correct=any_correct, candidates=len(outcome.candidates),
        tokens=spend.input_tokens + spend.output_tokens, input_tokens=spend.input_tokens,
        output_tokens=spend.output_tokens, calls=spend.calls, wall_s=round(wall, 3),
        stop_reason=str(outcome.stop_reason), error=outcome.error, run_id=outcome.run_id, graph=outcome.graph,
        f1=score.f1, tool_calls=outcome.tool_calls,
        citations=None if outcome.citations is None else list(outcome.citations),
        cited=None if outcome.cited is None else [list(fact) for fact in outcome.cited],
        support_precision=precision, parts=dict(score.parts) or None,
    )


@dataclass(frozen=True, slots=True)
class LaneResult:
    """One lane on one problem: its scored record, and everything the lane produced."""

    record: Record
    #: The lane's outcome: answer, candidates, the model's replies (sampling lanes) and the whole
    #: SearchResult (engine lanes: `outcome.result.graph`); None for a problem finished by an
    #: earlier run in the same directory, of which only the record is kept.
    outcome: LaneOutcome | None

    @property
    def answer(self) -> str | None:
        """The lane's one final answer."""
        return self.record.answer

    @property
    def search(self) -> SearchResult | None:
        """The SearchResult of an engine lane (graph, best path, calls, usage); None for sampling lanes."""
        return self.outcome.result if self.outcome is not None else None


@dataclass
class RunStats:
    """What one run invocation did."""

    done: int = 0
    skipped: int = 0
    records: list[Record] = field(default_factory=list)
    #: Each lane's whole result, when run_protocol was asked to keep them (keep_results).
    results: list[LaneResult] = field(default_factory=list)


async def run_protocol(
    protocol: Protocol,
    backend: Backend,
    store: ResultsStore | None,
    *,
    datasets: dict[str, Dataset] | None = None,
    jobs: int = 1,
    model_concurrency: int | None = None,
    slots_dir: Path | None = None,
    shard: tuple[int, int] = (0, 1),
    progress: Progress | None = None,
    run_store: Any = None,
    keep_results: bool = False,
) -> RunStats:
    """Run every unfinished (data set, problem, lane) of the protocol; finished ones are skipped.

    run_store: a BlockStore (or SQLite path) the search lanes record their runs in (None: not stored).
    keep_results: keep every lane's whole outcome in `stats.results` (graphs and calls included;
    off for benchmarks, whose records are what they report).
    """
    audit(protocol)
    datasets = datasets if datasets is not None else {
        t: load_dataset(t, protocol.data_dir, Labels.from_dict(protocol.labels)) for t in protocol.tasks}
    done = store.load() if store is not None else {}
    slots = SharedSlots(model_concurrency or backend.max_concurrency, slots_dir)
    stats = RunStats()
    work = work_items(protocol, datasets, shard)
    total = sum(sum(protocol.runs(d.name, p.lane) for p in protocol.lanes) for d, _, _ in work)
    gate = asyncio.Semaphore(max(1, jobs))
    started = time.monotonic()

    async def one_problem(dataset: Dataset, problem: Problem, index: int) -> None:
        async with gate:
            for plan in protocol.lanes:
                if not protocol.runs(dataset.name, plan.lane):
                    continue
                key = (dataset.name, plan.lane, problem.id)
                if key in done:
                    stats.skipped += 1
                    continue
                rec, outcome = await run_one(dataset, problem, index, plan, backend, protocol, slots, run_store)
                if store is not None:
                    store.append(rec)
                stats.records.append(rec)
                if keep_results:
                    stats.results.append(LaneResult(rec, outcome))
                stats.done += 1
                if progress:
                    progress(progress_line(rec, stats, total, time.monotonic() - started))

    await asyncio.gather(*(one_problem(d, p, i) for d, p, i in work))
    return stats


def work_items(protocol: Protocol, datasets: dict[str, Dataset],
               shard: tuple[int, int] = (0, 1)) -> list[tuple[Dataset, Problem, int]]:
    """The protocol's problems as (data set, problem, index), problem-major, the shard's share only."""
    work: list[tuple[Dataset, Problem, int]] = []
    for t in protocol.tasks:
        by_id = {p.id: p for p in datasets[t].problems}
        for index, pid in enumerate(protocol.problems[t]):
            if pid not in by_id:
                raise ProtocolError(f"data set {t} has no problem {pid!r} (the data files changed since the manifest)")
            if index % shard[1] == shard[0]:
                work.append((datasets[t], by_id[pid], index))
    return work


def progress_line(rec: Record, stats: RunStats, total: int, elapsed_s: float) -> str:
    """The one progress line of a finished unit: its mark, spend, and the run's count and ETA."""
    mark = "solved" if rec.solved else "failed"
    err = f", errors {rec.errors:g}" if rec.errors is not None else ""
    err += f", F1 {rec.f1:.2f}" if rec.f1 is not None else ""
    tools = f" · {counted(rec.tool_calls, 'tool call')}" if rec.tool_calls is not None else ""
    if rec.cited is not None:
        tools += f" · {counted(len(rec.cited), 'sentence')} cited" + (
            f", support precision {rec.support_precision:.2f}" if rec.support_precision is not None else "")
    left = total - stats.done - stats.skipped
    eta = f" · ETA {eta_text(elapsed_s, stats.done, left)}" if left else ""
    return (f"[{stats.done + stats.skipped}/{total}] {rec.task} #{rec.problem_id} {rec.lane}: {mark}"
            f"{err} · {counted(rec.tokens, 'token')} · {counted(rec.calls, 'call')}{tools} · {rec.wall_s:.1f}s{eta}")


def eta_text(elapsed_s: float, done: int, left: int) -> str:
    """Time the `left` runs should take at the pace of the `done` ones (skipped runs cost nothing), as 1h02m, 3m05s or
    12s."""
    seconds = round(elapsed_s / max(done, 1) * left)
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{seconds:02d}s" if minutes else f"{seconds}s"


@dataclass
class Comparison:
    """What compare_strategies found: every lane's results, their summaries, and the lanes left out.

    `cmp["tot"]` is that lane's LaneResult per problem (in the protocol's order): the answer, the
    record, and the lane's outcome with the whole SearchResult for engine lanes
    (`cmp["tot"][0].search.graph`). `cmp.summaries["tot"]` is its LaneSummary (success rate with
    its 95% interval, any@k, mean tokens and calls); `cmp.left_out` the lanes that do not apply, with why.
    """

    results: dict[str, list[LaneResult]]
    summaries: dict[str, Any]
    records: list[Record]
    protocol: Protocol

    def __getitem__(self, lane: str) -> list[LaneResult]:
        return self.results[lane]

    def __iter__(self) -> Any:
        return iter(self.results)

    @property
    def left_out(self) -> dict[str, str]:
        """Lanes that do not apply to the compared problems, with the one-line reason."""
        return {lane: why for reasons in self.protocol.not_applicable.values() for lane, why in reasons.items()}

    def table(self) -> str:
        """The Markdown table `loom bench` prints."""
        from .report import format_table

        return format_table(list(self.summaries.values()), self.protocol.not_applicable)


async def compare_strategies(
    problem_or_task: str | Dataset,
    lanes: Sequence[str],
    *,
    task: str | None = None,
    model: str | Backend = "local",
    budget_tokens: int | None = 4000,
    temperature: float = 0.7,
    seed: int | None = 0,
    limit: int | None = 5,
    lane_params: dict[str, dict[str, Any]] | None = None,
    data_dir: str | None = None,
    out_dir: str | os.PathLike[str] | None = None,
    threads: int | str | None = None,
) -> Comparison:
    """Compare lanes fairly: the same model, budget and problems; every lane's whole result is returned.

    problem_or_task: a data set name ("game24": `limit` problems spread by difficulty), a loaded
    Dataset, or one problem's text for `task` (default: the task `loom solve` would pick, the
    general one for a free-text question; "4 9 10 13" needs task="game24"). On the general task
    io and cot ask the question with a few-shot example and the search lanes search it; answers
    are not checked (it has no checker), so its table shows no success rate. Lanes that do not
    apply are left out (`left_out`); none applying is a LaneError. With out_dir, results stream
    there and a second call resumes (problems finished before keep only their record). threads:
    CPU threads of an embedded model named by `model`, as in solve().
    """
    from .datasets import DATASETS, given_problems
    from .report import summarize

    if isinstance(problem_or_task, Dataset):
        dataset = problem_or_task
    elif problem_or_task in DATASETS:
        dataset = load_dataset(problem_or_task, data_dir)
    else:
        dataset = given_problems(problem_or_task, task)
        limit = 1
    opts = BenchOptions(tasks=[dataset.name], lanes=list(lanes), model=model if isinstance(model, str) else model.name,
                        limit=limit, budget_tokens=budget_tokens, temperature=temperature, seed=seed,
                        lane_params=lane_params or {}, data_dir=data_dir)
    protocol = build_protocol(opts, {dataset.name: dataset})
    audit(protocol)
    store = None
    if out_dir is not None:
        prepare_run_dir(protocol, Path(out_dir))
        store = ResultsStore(out_dir)
    if isinstance(model, str):
        from ..llm.registry import make_backend

        backend: Backend = make_backend(model, threads=threads)
    else:
        backend = model
    try:
        stats = await run_protocol(protocol, backend, store, datasets={dataset.name: dataset}, keep_results=True)
    finally:
        if isinstance(model, str):
            await backend.aclose()
    records = list(store.load().values()) if store is not None else stats.records
    fresh = {(r.record.lane, r.record.problem_id): r for r in stats.results}
    ran = [lane for lane in lanes if protocol.runs(dataset.name, lane)]
    order = {pid: i for i, pid in enumerate(protocol.problems[dataset.name])}
    results = {lane: [fresh.get((lane, r.problem_id)) or LaneResult(r, None)
                      for r in sorted((r for r in records if r.lane == lane), key=lambda r: order.get(r.problem_id, 0))]
               for lane in ran}
    summaries = summarize(records, {dataset.name: dataset.spec.metric}, list(lanes),
                          {dataset.name: len(protocol.problems[dataset.name])}, protocol.not_applicable,
                          prices={p.lane: protocol.lane_pricing(p) for p in protocol.lanes})
    return Comparison(results, {s.lane: s for s in summaries}, records, protocol)
