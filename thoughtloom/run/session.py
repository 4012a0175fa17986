"""A stored run seen from the code that runs it: record a new run, resume one, replay one.

`execute` composes a session's backend wrapper under the gateway and its recorder into the
search, the same way in every mode, so a resumed or replayed search is built by exactly the code
that built the original:

- record: a new run id and manifest (with the run's spec); the live model, recorded.
- resume: the run's recorded exchanges are served first (no model call, no waiting), the rest go
  to the live model; new heads go on the same run (`prev` links the head the run had).
- replay: only recorded exchanges (a request off the record is a divergence), recorded into a
  memory store so the replayed graph's CID can be compared with the stored one.

Nothing here prints: what resume and replay did is on the session (`replayed`, `live_calls`,
`verdict()`), and the first stored state is announced through the `on_start` callback.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ..llm.budget import Pricing
from ..llm.errors import ModelError
from ..llm.types import Backend
from ..search.agent.processors import EXTRA as AGENT_EXTRA
from ..store.blocks import CID
from ..store.manifest import Manifest, code_version, plain_options, prompt_hashes
from ..store.memory import MemoryStore
from ..store.replay import Divergence, ReplayBackend, compare_graphs
from ..store.runlock import RunHold, hold_run
from ..store.runs import (
    RunError,
    RunRecorder,
    StoredRun,
    load_calls,
    load_counts,
    load_head,
    new_run_id,
    open_run,
    reading,
)
from ..store.shapes import BOOL, MAP, NUMBER, TEXT, checked, list_of, optional, record
from ..store.store import BlockStore
from ..tools.base import ToolResult, ToolSpec
from ..tools.toolbox import TOOL_CALLS, RecordedTool, Toolbox
from .grants import GrantError, Grants, check_before_building, check_grants
from .spec import RunSpec, SpecError, model_pricing, pinned_model, role_pricing, user_scorer

if TYPE_CHECKING:
    from ..search.config import SearchConfig
    from ..search.context import SearchContext
    from ..search.result import SearchResult
    from ..tasks.base import Task


def prompt_form(identity: str) -> str | None:
    """Which prompt form a recorded backend read ("text" or "chat"), from its identity; None if unknown."""
    from ..llm.registry import parse_model_spec

    try:
        api = parse_model_spec(identity).api
    except ModelError:
        return None  # a backend object's own name (the Python API): both forms count
    return {"chat": "chat", "completions": "text"}.get(api or "")


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
    tools_replayed: int = 0  # recorded tool calls served (agent runs)
    tool_calls: int = 0  # tools actually run (always 0 for a replay)

    @property
    def identical(self) -> bool:
        """Whether the replay rebuilt exactly the recorded graph."""
        return self.expected == self.got and self.off_record is None

    def __str__(self) -> str:
        calls = f"{self.replayed} recorded calls served, {self.model_calls} model calls"
        if self.tools_replayed or self.tool_calls:
            calls += f", {self.tools_replayed} recorded tool calls served, {self.tool_calls} tool calls"
        if self.identical:
            nodes = f"{self.nodes} node{'s' * (self.nodes != 1)}"
            return f"replay of run {self.run_id}: identical graph {self.got} ({nodes}; {calls})"
        parts = [f"replay of run {self.run_id} DIVERGED: graph {self.got} instead of {self.expected}"]
        parts += [str(self.divergence)] if self.divergence is not None else []
        parts += [self.off_record] if self.off_record is not None else []
        return "; ".join([*parts, *self.notes])


@dataclass
class RunSession:
    """One run being recorded, resumed or replayed (see the module docstring)."""

    mode: str  # "record" | "resume" | "replay"
    store: BlockStore
    store_path: str | None
    recorder: RunRecorder
    manifest: Manifest
    #: resume, replay: builds the backend serving the record, over the live backend (resume) or none.
    make_replay: Callable[[Backend | None], ReplayBackend] | None = None
    replay: ReplayBackend | None = None
    #: replay: the graph the run ended with, and the store holding it.
    expected_graph: CID | None = None
    source_store: BlockStore | None = None
    owns_store: bool = False
    notes: list[str] = field(default_factory=list)
    #: resume, replay of an agent run: the tools it was granted and the tool calls its graph records.
    recorded_tools: tuple[list[ToolSpec], list[ToolResult]] | None = None
    tools: Toolbox | None = None
    #: resume, record in a store file: the run held against other processes until the session closes.
    hold: RunHold | None = None
    _verdict: ReplayVerdict | None = None

    @property
    def run_id(self) -> str:
        """The run's id."""
        return self.manifest.run_id

    @property
    def sinks(self) -> list[Any]:
        """Event sinks to add to the search."""
        return [self.recorder]

    @property
    def needs_live_model(self) -> bool:
        """Whether calls may go to a live model (not for a replay)."""
        return self.mode != "replay"

    def on_context(self, ctx: SearchContext) -> None:
        """search(..., on_context=...): the recorder reads the graph through the context."""
        self.recorder.on_context(ctx)

    def check(self, task: Task[Any], config: SearchConfig) -> None:
        """Note where the search about to run differs from the recorded one (explains divergence)."""
        if self.mode == "record":
            return
        now = config.to_dict()
        changed = [f"{k} {now.get(k)!r} (recorded {v!r})" for k, v in self.manifest.config.items() if now.get(k) != v]
        if changed:
            self.notes.append("search config differs: " + ", ".join(changed))
        # Compared by content: a task module renamed since the run changed no prompt.
        recorded = sorted(self.manifest.prompt_hashes.values())
        if recorded and sorted(prompt_hashes(task).values()) != recorded:
            self.notes.append("the task's prompt templates changed since the run")

    def wrap(self, live: Backend | None) -> Backend:
        """The backend chain below the gateway: recorded answers first (resume, replay), recording on top."""
        if self.mode == "record":
            assert live is not None
            self.manifest.backend = live.name
            self.manifest.max_concurrency = live.max_concurrency
            self.manifest.supports_batch = bool(getattr(live, "supports_batch", False))
            return self.recorder.wrap(live)
        assert self.make_replay is not None
        self.replay = self.make_replay(live if self.mode == "resume" else None)
        return self.recorder.wrap(self.replay)

    def wrap_tools(self, live: Toolbox | None) -> Toolbox | None:
        """The run's tools: recorded calls answered first (resume), or only those, with no tool running (replay)."""
        if self.mode == "record" or self.recorded_tools is None:
            self.tools = live
        elif self.mode == "replay":
            specs, calls = self.recorded_tools
            self.tools = Toolbox([RecordedTool(s) for s in specs], recorded=calls, live=False)
        elif live is not None:
            self.tools = live.with_record(self.recorded_tools[1], live=True)
        return self.tools

    @property
    def retry_delays(self) -> bool:
        """False for a replay: recorded transient errors are retried as before, without waiting for nothing."""
        return self.mode != "replay"

    def finish(self, result: SearchResult) -> None:
        """Write the final head and put the run's id, store and graph CID on the result."""
        try:
            stored = self.recorder.finish(result)
            if self.mode == "replay":
                result.graph_cid = str(self.recorder.graph_cid)
                self._verdict = self._compare()  # reads the source store, which closes below
                return
            if self.recorder.head is not None:  # at least one state of the run is in the store
                result.run_id, result.store = self.run_id, self.store_path
            if stored is not None:
                result.graph_cid = str(self.recorder.graph_cid)
            else:
                result.store_error = self.recorder.write_error or "the final state could not be written"
        finally:
            self.close()

    @property
    def replayed(self) -> int:
        """Recorded exchanges served from the store (resume, replay)."""
        return self.replay.replayed if self.replay is not None else 0

    @property
    def live_calls(self) -> int:
        """Calls that went to the live model after the record was used up (resume)."""
        return self.replay.live_calls if self.replay is not None else 0

    def verdict(self) -> ReplayVerdict:
        """replay: how the replayed graph compares with the recorded one."""
        return self._verdict if self._verdict is not None else self._compare()

    def _compare(self) -> ReplayVerdict:
        assert self.replay is not None and self.source_store is not None and self.expected_graph is not None
        got = self.recorder.graph_cid
        assert got is not None
        return ReplayVerdict(
            run_id=self.run_id, expected=self.expected_graph, got=got, nodes=self.recorder.node_count,
            replayed=self.replay.replayed, model_calls=self.replay.live_calls,
            divergence=compare_graphs(self.source_store, self.expected_graph, self.recorder.store, got),
            off_record=self.replay.divergence or self._tools_off_record(), notes=tuple(self.notes),
            tools_replayed=self.tools.replayed if self.tools is not None else 0,
            tool_calls=self.tools.live_calls if self.tools is not None else 0,
        )

    def _tools_off_record(self) -> str | None:
        if self.tools is None or not self.tools.off_record:
            return None
        return f"replay diverged: {self.tools.off_record} tool call(s) were not in the run's record"

    def abort(self) -> None:
        """The search ended with an exception: an interrupted head if anything was stored."""
        try:
            if self.mode != "replay":
                self.recorder.abort()
        finally:
            self.close()

    def close(self) -> None:
        """Give the run up, and close the store if this session opened it."""
        try:
            if self.hold is not None:
                self.hold.release()
        finally:
            if self.owns_store:
                self.store.close()


def open_block_store(store: Any) -> tuple[BlockStore, str | None, bool]:
    """A spec's store: a BlockStore as given (the caller closes it), or a SQLite file path opened here."""
    if isinstance(store, (str, os.PathLike)):
        from ..store.sqlite import SQLiteStore

        opened = SQLiteStore(store)
        return opened, str(opened.path), True
    path = getattr(store, "path", None)
    return store, (str(path) if path is not None else None), False


def record_session(spec: RunSpec, task: Task[Any], *, on_start: Callable[[str], None] | None = None) -> RunSession:
    """A new run of `spec` in `spec.store`; `on_start(run_id)` is called once its first state is stored."""
    store, path, owns = open_block_store(spec.store)
    version, commit = code_version()
    manifest = Manifest(
        run_id=spec.run_id or new_run_id(), model=spec.model_name, backend=spec.model_name, max_concurrency=1,
        supports_batch=False, task=spec.task_name, problem=spec.problem, config=spec.config.to_dict(),
        budget=asdict(spec.budget), task_options=plain_options(spec.task_options), profile=spec.profile,
        seed=spec.config.seed, version=version, commit=commit, prompt_hashes=prompt_hashes(task),
        spec=spec.to_dict(),
    )
    try:
        # Held while it runs, so `loom resume` of it from another process refuses instead of spending twice.
        hold = hold_run(store, manifest.run_id)
    except BaseException:
        if owns:
            store.close()
        raise
    recorder = RunRecorder(store, manifest, on_start=on_start)
    return RunSession("record", store, path, recorder, manifest, owns_store=owns, hold=hold)


#: A granted tool and a tool call as an agent run's nodes keep them (node.extra AGENT_EXTRA.tools, TOOL_CALLS).
TOOL_SPEC = {"name": TEXT, "description": optional(TEXT), "parameters": optional(MAP)}
TOOL_CALL = {"tool": TEXT, "status": TEXT, "args": optional(MAP), "output": optional(TEXT), "error": optional(TEXT),
             "truncated": optional(BOOL), "elapsed_s": optional(NUMBER)}
TOOLS_OF_A_NODE = {AGENT_EXTRA.tools: optional(list_of(record(TOOL_SPEC))),
                   TOOL_CALLS: optional(list_of(record(TOOL_CALL)))}


def recorded_tools(store: BlockStore, graph_cid: CID) -> tuple[list[ToolSpec], list[ToolResult]]:
    """The tools an agent run was granted (kept on its task node) and its tool calls, in node order
    (CorruptRun when a node keeps them in another shape)."""
    from ..store.runs import load_graph

    graph = load_graph(store, graph_cid).graph
    specs: list[ToolSpec] = []
    calls: list[ToolResult] = []
    with reading():
        for node in graph:
            extra = checked(node.extra, f"graph {graph_cid}: node {node.id}", TOOLS_OF_A_NODE,
                            optional_fields=TOOLS_OF_A_NODE)
            for s in extra.get(AGENT_EXTRA.tools) or ():
                checked(s, f"graph {graph_cid}: node {node.id}: a tool", {"name": TEXT})
                specs.append(ToolSpec(s["name"], s.get("description") or "", dict(s.get("parameters") or {})))
            for c in extra.get(TOOL_CALLS) or ():
                calls.append(ToolResult.from_dict(checked(c, f"graph {graph_cid}: node {node.id}: a tool call",
                                                          {"tool": TEXT, "status": TEXT})))
    return specs, calls


def spec_of(manifest: Manifest, grants: Grants, *, live: bool, cli: bool = False, model: str | None = None,
            role_models: tuple[tuple[str, str], ...] = ()) -> RunSpec:
    """The spec a stored run was made with (runs stored with `loom solve`'s options before specs: rebuilt from them),
    once `grants` names again every endpoint, file and tool it asks for (GrantError, one line, otherwise).

    The stored run is untrusted input (it may come from anyone's CAR): this is the one place resume and
    replay build a run from it. live: resume (a model is asked, tools run), else replay. cli: a refusal
    names the command line's flags (else the Python API's Grants fields). model, role_models: a fork's
    own models (the caller's choice, not the stored run's), in place of the run's before `grants` are checked.
    """
    if manifest.spec is not None:
        try:
            spec = RunSpec.from_dict(manifest.spec)
        except SpecError as exc:
            raise SpecError(f"run {manifest.run_id}: {exc}") from None
    elif manifest.cli is not None:
        from .options import spec_from_options

        check_before_building(manifest.cli, grants, cli=cli)
        spec = spec_from_options(manifest.cli)
    else:
        raise RunError(f"run {manifest.run_id} keeps neither its spec nor its options; it can be shown and exported "
                       "but not resumed or replayed")
    if "reasks" not in ((manifest.spec or {}).get("config") or {}):
        # Stored before re-asks existed: that search never asked again, so its record holds no re-ask.
        spec = replace(spec, config=replace(spec.config, reasks=0))
    if spec.model == "local" and manifest.backend.startswith("local:"):
        # Stored before `local` was pinned to a named model: the backend it recorded says which one.
        spec = replace(spec, model=manifest.backend)
    if model is not None:
        spec = replace(spec, model=pinned_model(model))
    if role_models:
        chosen = dict(role_models)
        spec = replace(spec, role_models=tuple(sorted({**dict(spec.role_models), **chosen}.items())))
    declared = (manifest.spec or {}).get("task_declared")
    if declared is not None:
        from .taskfile import declared_task

        # Text, not a grant: checked as a task file is; a custom checker in it is only a name until loaded().
        task = declared_task(declared, f"run {manifest.run_id}: task_declared")
        if task.name != spec.task:
            raise SpecError(f"run {manifest.run_id}: task_declared declares task {task.name!r}; the run ran task "
                            f"{spec.task!r}")
        spec = replace(spec, task=task)
    check_grants(spec, grants, live=live, cli=cli)
    if spec.task_file is not None and isinstance(spec.task, str) and grants.task_file is not None:
        from .taskfile import load_task

        task = load_task(grants.task_file)  # the file the user named again, never one a manifest names alone
        if task.name != spec.task:
            raise GrantError(f"{grants.task_file} declares task {task.name!r}; run {manifest.run_id} ran task "
                             f"{spec.task!r}")
        spec = replace(spec, task=task)
    if spec.scorer is not None and grants.scorer is not None:
        spec = replace(spec, scorer=user_scorer(grants.scorer))  # what the user named again, imported now
    return spec


def _replay_backend(store: BlockStore, manifest: Manifest, head: dict[str, Any], calls_cid: CID,
                    **kwargs: Any) -> Callable[[Backend | None], ReplayBackend]:
    """Read the record now (a damaged one fails before anything runs); build the backend when the run is."""
    calls, counts = load_calls(store, calls_cid), load_counts(store, head)

    roles = (manifest.spec or {}).get("role_models") or ()
    # The prices the live run had: the user's own for its model (kept in its spec), else the list's.
    given = (manifest.spec or {}).get("pricing")
    pricing = Pricing(**given) if given else None

    def make(live: Backend | None) -> ReplayBackend:
        return ReplayBackend(
            calls,
            name=manifest.backend,
            max_concurrency=max(1, manifest.max_concurrency),
            supports_batch=manifest.supports_batch,
            pricing=model_pricing(manifest.model, pricing),
            route_pricing={str(role): role_pricing(manifest.model, pricing, str(model)) for role, model in roles},
            counts=counts,
            live=live,
            form=prompt_form(manifest.backend),
            thinking_tokens=(manifest.spec or {}).get("thinking_tokens") or 0,
            **kwargs,
        )

    return make


def resume_session(store: BlockStore, store_path: str | None, run: StoredRun, grants: Grants, *,
                   cli: bool = False) -> tuple[RunSpec, RunSession]:
    """Continue a killed or interrupted run: its spec, and a session serving its recorded exchanges first.

    grants: what the caller names again of what the run asks for (see spec_of; GrantError otherwise).
    The run is held (store.runlock) until the session closes: a second resume of it refuses (RunBusy).
    """
    _resumable(run)
    spec = spec_of(run.manifest, grants, live=True, cli=cli)
    hold = hold_run(store, run.run_id)
    try:
        # Read again under the hold: another process may have resumed it since it was opened.
        held = open_run(store, run.run_id)
        if held.head_cid != run.head_cid:
            _resumable(held)
            spec = spec_of(held.manifest, grants, live=True, cli=cli)
        with reading(run.run_id):  # its record, read here before anything runs, names the run when damaged
            make = _replay_backend(store, held.manifest, held.head, held.calls_cid)
            recorder = RunRecorder(store, held.manifest, prev=held.head_cid, seq=int(held.head["seq"]) + 1,
                                   started=True)
            tools = recorded_tools(store, held.graph_cid) if spec.needs.tools else None
    except BaseException:
        if hold is not None:
            hold.release()
        raise
    return spec, RunSession("resume", store, store_path, recorder, held.manifest, make_replay=make,
                            recorded_tools=tools, hold=hold)


def _resumable(run: StoredRun) -> None:
    if run.status == "finished":
        reason = (run.result or {}).get("termination_reason", "?")
        raise RunError(f"run {run.run_id} is finished (stopped: {reason}); nothing to resume")


def replay_session(store: BlockStore, store_path: str | None, manifest: Manifest, head_cid: CID, grants: Grants, *,
                   cli: bool = False, run_id: str | None = None) -> tuple[RunSpec, RunSession]:
    """Re-run a finished run from its recorded exchanges only, to compare the graph it builds.

    grants: the files the run's task and grounding read, named again (see spec_of; GrantError otherwise).
    run_id: the id the store knows the run by, named when its record is damaged (default: the manifest's).
    """
    from ..store.car import walk
    from ..store.runs import load_graph

    spec = spec_of(manifest, grants, live=False, cli=cli)
    # The wall clock's stop is replayed from the record, not measured again.
    spec = replace(spec, budget=replace(spec.budget, wall_s=None), store=None, run_id=manifest.run_id)
    with reading(run_id or manifest.run_id):  # its record, read and checked here before anything runs
        head = load_head(store, head_cid)
        calls_cid = manifest.calls or head["calls"].cid
        expected = manifest.graph or head["graph"].cid
        # Every block of the graph to reproduce is read (so verified) and checked before anything runs:
        # a replay that came out "identical" to a damaged record would vouch for blocks nobody checked.
        for _ in walk(store, [expected]):
            pass
        load_graph(store, expected)
        reason = (head.get("result") or {}).get("termination_reason")
        make = _replay_backend(store, manifest, head, calls_cid,
                               after_recording="wall_s" if reason == "budget_wall_s" else None)
        tools = recorded_tools(store, expected) if spec.needs.tools else None
    recorder = RunRecorder(MemoryStore(), replace(manifest), started=True)
    return spec, RunSession("replay", store, store_path, recorder, manifest, make_replay=make,
                            expected_graph=expected, source_store=store, recorded_tools=tools)


def open_replay(store: BlockStore, run: str, grants: Grants) -> tuple[RunSpec, RunSession]:
    """A finished run by id or prefix, ready to replay (grants: as replay_session's)."""
    stored = open_run(store, run)
    if stored.status != "finished":
        raise RunError(f"run {stored.run_id} is not finished ({stored.status}); 'loom resume {stored.run_id}' first")
    return replay_session(store, None, stored.manifest, stored.head_cid, grants, run_id=stored.run_id)


__all__ = ["ReplayVerdict", "RunSession", "SpecError", "open_block_store", "open_replay", "record_session",
           "replay_session", "resume_session", "spec_of"]
