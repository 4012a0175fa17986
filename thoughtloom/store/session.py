"""A stored run seen from the code that runs the search: record a new run, resume one, replay one.

`loom solve` (and `asolve(store=...)`) use the same hooks in every mode, so a resumed or replayed
search is built by exactly the code that built the original:

    session = ...                                   # record_session / resume_session / replay_session
    gateway = make_gateway(session.model(spec, progress), limits, ...)
    session.attach(gateway)                         # the recording proxy (and, replaying, no retry delay)
    result = await search(..., sinks=[*sinks, *session.sinks], on_context=session.on_context)
    code = session.finish(result, code)             # final head; resume / replay say what they did

record: a new run id, a manifest, the live model. resume: the run's recorded exchanges served first
(no model call, no waiting), the rest from the live model, new heads on the same run (`prev` links
the head the run had). replay: only recorded exchanges (a request off the record is a divergence),
recorded into a memory store so the replayed graph's CID can be compared with the stored one.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ..llm.errors import ModelError
from .blocks import CID
from .manifest import Manifest, prompt_hashes
from .memory import MemoryStore
from .replay import Divergence, ReplayBackend, compare_graphs
from .runs import (
    RunError,
    RunRecorder,
    StoredRun,
    load_calls,
    load_counts,
    load_head,
    open_run,
)
from .store import BlockStore

if TYPE_CHECKING:
    from ..llm.gateway import Gateway
    from ..llm.types import Backend
    from ..search.config import SearchConfig
    from ..search.context import SearchContext
    from ..search.result import SearchResult


def _pricing(spec: str) -> Any:
    """The price list entry for a model spec, without building the backend (no key needed)."""
    from ..llm.registry import known_pricing, parse_model_spec

    try:
        return known_pricing(parse_model_spec(spec))
    except ModelError:
        return None  # a backend name recorded by the Python API: no known price


@dataclass(frozen=True, slots=True)
class ReplayVerdict:
    """What a replay found: the graph CIDs, the first diverging node, and the calls it took."""

    run_id: str
    expected: CID
    got: CID
    nodes: int
    replayed: int  # recorded exchanges served
    model_calls: int  # real model calls (always 0 for a replay)
    divergence: Divergence | None
    off_record: str | None  # the request the record did not hold, if the search asked for one
    notes: tuple[str, ...] = ()

    @property
    def identical(self) -> bool:
        """Whether the replay rebuilt exactly the recorded graph."""
        return self.expected == self.got and self.off_record is None

    def __str__(self) -> str:
        calls = f"{self.replayed} recorded calls served, {self.model_calls} model calls"
        if self.identical:
            return f"replay of run {self.run_id}: identical graph {self.got} ({self.nodes} nodes; {calls})"
        parts = [f"replay of run {self.run_id} DIVERGED: graph {self.got} instead of {self.expected}"]
        parts += [str(self.divergence)] if self.divergence is not None else []
        parts += [self.off_record] if self.off_record is not None else []
        return "; ".join([*parts, *self.notes])


#: Exit code of `loom solve` / `loom resume` when the answer was printed but the run could not be stored.
STORE_FAILED = 3


@dataclass
class RunSession:
    """One run being recorded, resumed or replayed (see the module docstring)."""

    mode: str  # "record" | "resume" | "replay"
    store: BlockStore
    store_path: str
    recorder: RunRecorder
    manifest: Manifest
    replay: ReplayBackend | None = None
    #: replay: the graph the run ended with, and the store holding it.
    expected_graph: CID | None = None
    source_store: BlockStore | None = None
    #: Where resume / replay print what they did (stdout for a text replay verdict).
    json_output: bool = False
    owns_store: bool = True
    notes: list[str] = field(default_factory=list)

    @property
    def run_id(self) -> str:
        """The run's id."""
        return self.manifest.run_id

    @property
    def sinks(self) -> list[Any]:
        """Event sinks to add to the search."""
        return [self.recorder]

    def on_context(self, ctx: SearchContext) -> None:
        """search(..., on_context=...): the recorder reads the graph through the context."""
        self.recorder.on_context(ctx)

    def check(self, task: Any, config: SearchConfig) -> None:
        """Note where the search about to run differs from the recorded one (explains divergence)."""
        if self.mode == "record":
            return
        now = config.to_dict()
        changed = [f"{k} {now.get(k)!r} (recorded {v!r})" for k, v in self.manifest.config.items() if now.get(k) != v]
        if changed:
            self.notes.append("search config differs: " + ", ".join(changed))
        if self.manifest.prompt_hashes and prompt_hashes(task) != self.manifest.prompt_hashes:
            self.notes.append("the task's prompt templates changed since the run")

    def model(self, spec: str, progress: Callable[[str], None] | None = None) -> str | Backend:
        """What make_gateway gets: the spec when recording, the replay backend otherwise."""
        if self.mode == "record":
            return spec
        assert self.replay is not None
        if self.mode == "resume":
            from ..llm.registry import make_backend

            # Built now, so a missing key or a bad spec stops the resume before anything runs.
            live = make_backend(spec, pricing=self.replay.pricing, progress=progress)
            self.replay._make_live = lambda: live
            self.replay._live = live
        return self.replay

    def attach(self, gateway: Gateway) -> None:
        """Record through the gateway; the manifest learns the backend's identity."""
        backend = gateway.backend
        if self.mode == "record":
            self.manifest.backend = backend.name
            self.manifest.max_concurrency = backend.max_concurrency
            self.manifest.supports_batch = bool(getattr(backend, "supports_batch", False))
        if self.mode == "replay":
            # Recorded transient errors are retried as before, without waiting for nothing.
            gateway.retry = replace(gateway.retry, base_delay_s=0.0, max_delay_s=0.0)
        self.recorder.attach(gateway)

    def finish(self, result: SearchResult, code: int = 0) -> int:
        """Write the final head; resume and replay report what they did. Returns the exit code
        (STORE_FAILED when the final head could not be written: see `store_failure`)."""
        try:
            if self.recorder.finish(result) is None:
                return code or STORE_FAILED
            if self.mode == "resume":
                assert self.replay is not None
                print(f"loom: run {self.run_id} resumed: {self.replay.replayed} recorded calls served from the "
                      f"store, {self.replay.live_calls} new model calls", file=sys.stderr)
            elif self.mode == "replay":
                return self._verdict(code)
            return code
        finally:
            self.close()

    def store_failure(self) -> str | None:
        """Why the run's final state is not in the store, as one line saying what to do; None when it is."""
        error = self.recorder.write_error
        if error is None:
            return None
        run = self.run_id
        if self.recorder.head is None:
            return (f"could not store run {run} in {self.store_path} ({error}); the answer above is complete; "
                    "nothing of the run was stored")
        return (f"could not store run {run} in {self.store_path} ({error}); the answer above is complete; "
                f"the store keeps the run up to its last stored call: free space, then 'loom resume {run}'")

    def verdict(self) -> ReplayVerdict:
        """replay: how the replayed graph compares with the recorded one."""
        assert self.replay is not None and self.source_store is not None and self.expected_graph is not None
        got = self.recorder.graph_cid
        assert got is not None
        return ReplayVerdict(
            run_id=self.run_id, expected=self.expected_graph, got=got, nodes=len(self.recorder._nodes.items),
            replayed=self.replay.replayed, model_calls=self.replay.live_calls,
            divergence=compare_graphs(self.source_store, self.expected_graph, self.recorder.store, got),
            off_record=self.replay.divergence, notes=tuple(self.notes),
        )

    def _verdict(self, code: int) -> int:
        verdict = self.verdict()
        print(verdict, file=sys.stderr if self.json_output else sys.stdout)
        return code if verdict.identical else 1

    def abort(self) -> None:
        """The search ended with an exception: an interrupted head if anything was stored."""
        try:
            if self.mode != "replay":
                self.recorder.abort()
        finally:
            self.close()

    def close(self) -> None:
        """Close the store if this session opened it."""
        if self.owns_store:
            self.store.close()


def record_session(store: BlockStore, store_path: str, manifest: Manifest, *, announce: bool = True,
                   owns_store: bool = True) -> RunSession:
    """A new run; `announce` prints `run <id> stored in <path>` on stderr when it is first stored."""
    def started(run_id: str) -> None:
        if announce:
            print(f"loom: run {run_id} stored in {store_path}", file=sys.stderr, flush=True)

    recorder = RunRecorder(store, manifest, on_start=started)
    return RunSession("record", store, store_path, recorder, manifest, owns_store=owns_store)


def _replay_backend(store: BlockStore, manifest: Manifest, head: dict[str, Any], calls_cid: CID,
                    **kwargs: Any) -> ReplayBackend:
    return ReplayBackend(
        load_calls(store, calls_cid), name=manifest.backend, max_concurrency=max(1, manifest.max_concurrency),
        supports_batch=manifest.supports_batch, pricing=_pricing(manifest.model), counts=load_counts(store, head),
        **kwargs,
    )


def resume_session(store: BlockStore, store_path: str, run: StoredRun, *, json_output: bool = False) -> RunSession:
    """Continue a killed or interrupted run: recorded exchanges first, then the live model."""
    backend = _replay_backend(store, run.manifest, run.head, run.calls_cid, live=lambda: None)  # set in model()
    recorder = RunRecorder(store, run.manifest, prev=run.head_cid, seq=int(run.head["seq"]) + 1, started=True)
    return RunSession("resume", store, store_path, recorder, run.manifest, replay=backend, json_output=json_output)


def replay_session(store: BlockStore, store_path: str, manifest: Manifest, head_cid: CID, *,
                   json_output: bool = False) -> RunSession:
    """Re-run a finished run from its recorded exchanges only, to compare the graph it builds."""
    from .car import walk

    head = load_head(store, head_cid)
    calls_cid = manifest.calls or head["calls"].cid
    expected = manifest.graph or head["graph"].cid
    # Every block of the graph to reproduce is read (so verified) before anything runs: a replay
    # that came out "identical" to a damaged record would vouch for blocks nobody checked.
    for _ in walk(store, [expected]):
        pass
    reason = (head.get("result") or {}).get("termination_reason")
    backend = _replay_backend(store, manifest, head, calls_cid,
                              after_recording="wall_s" if reason == "budget_wall_s" else None)
    recorder = RunRecorder(MemoryStore(), replace(manifest), started=True)
    return RunSession("replay", store, store_path, recorder, manifest, replay=backend, expected_graph=expected,
                      source_store=store, json_output=json_output)


def api_session(store: Any, *, run_id: str | None, model: Any, task: Any, problem: str, config: SearchConfig,
                budget: Any) -> RunSession:
    """asolve(store=...): record a run made through the Python API (a store object or a file path)."""
    from dataclasses import asdict

    from .manifest import code_version
    from .runs import new_run_id
    from .sqlite import SQLiteStore

    owns = isinstance(store, (str, os.PathLike))
    opened: BlockStore = SQLiteStore(store) if owns else store
    name = model if isinstance(model, str) else model.name
    version, commit = code_version()
    manifest = Manifest(
        run_id=run_id or new_run_id(), model=name, backend=name, max_concurrency=1, supports_batch=False,
        task=task.name, problem=problem, config=config.to_dict(), budget=asdict(budget) if budget else {},
        seed=config.seed, version=version, commit=commit, prompt_hashes=prompt_hashes(task),
    )
    return record_session(opened, str(getattr(opened, "path", "memory")), manifest, announce=False, owns_store=owns)


async def areplay(store: BlockStore, run: str, *, task: Any = None, config: SearchConfig | None = None,
                  controller: Any = None) -> tuple[SearchResult, ReplayVerdict]:
    """Replay a finished run in this process from its structured manifest (no `loom solve` options).

    The search is rebuilt from the manifest's task name, config and budget; pass `task`, `config`
    or `controller` when the run used ones a name cannot rebuild (or to see how a change diverges).
    """
    from ..api import make_gateway
    from ..llm.budget import BudgetLimits
    from ..search.config import SearchConfig
    from ..search.engine import search
    from ..tasks.registry import get_task

    stored = open_run(store, run)
    if stored.status != "finished":
        raise RunError(f"run {stored.run_id} is not finished ({stored.status})")
    session = replay_session(store, "", stored.manifest, stored.head_cid)
    session.owns_store = False
    m = stored.manifest
    task_obj = task if task is not None else get_task(m.task)
    cfg = config if config is not None else SearchConfig(**m.config)
    limits = BudgetLimits(**{**m.budget, "wall_s": None}) if m.budget else None
    session.check(task_obj, cfg)
    gateway = make_gateway(session.model(m.model), limits, concurrency=cfg.concurrency)
    session.attach(gateway)
    try:
        result = await search(task_obj, m.problem, gateway, cfg, sinks=session.sinks, controller=controller,
                              on_context=session.on_context)
    finally:
        await gateway.aclose()
    session.recorder.finish(result)
    return result, session.verdict()
