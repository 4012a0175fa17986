"""Runs in the block store: the recorder that persists a search while it runs, and the readers.

Block schemas (dag-cbor, CIDv1 sha2-256; text over INLINE_LIMIT bytes goes in a raw block and is
linked instead):

- thought  {type, id, kind, depth, creator, content, parents: [link thought], edges: [edge kind]}
  A node's immutable part, written once when the node first reaches the store. Parents are the
  ones the node was created with and link their *thought* blocks, so a parent's later versions
  never change a child's CID.
- node     {type, thought: link, status, score, cost_tokens, extra, merged: [[link thought, kind]]}
  One version of a node's state; a new block whenever status, score, metadata or parents (a
  duplicate merged into it) change. `extra` is node.extra without wall-clock fields.
- chunk    {type, items: [...]}: CHUNK items of a list; lists (graph nodes, calls, timings) are
  stored as chunks so a new head rewrites only the chunks that changed.
- graph    {type, count, nodes: [link chunk of node versions, in node id order]}
  The canonical graph: no timestamps or durations anywhere below it, so the same search gives
  the same graph CID on any machine, any day. Replay reproduces exactly this CID.
- prompt   {type, text, messages: [[role, content]] | null}
- call     {type, rank, start, issued, purpose, model, prompt: link, n, max_tokens, temperature,
            stop, seed, texts, usage: [in, out], error: {kind, message} | null, batch}
  One backend exchange as the backend saw it (the gateway's cache answers are not exchanges):
  `start` is its order of being sent, `rank` its order of completing, `issued` how many
  exchanges had been sent when it completed (replay uses all three to answer in the same order).
  error kinds: model, transient (retried by the gateway), timeout (retried, charged in full),
  batch_refused (the server cannot batch), cutoff (the wall-clock budget ended it).
- calls    {type, count, chunks: [link chunk of call links]}
- timings  {type, created_at: chunked node creation times, call_duration_s: chunked}
- manifest see manifest.py
- head     {type, run, seq, prev: link head | null, status: running | finished | interrupted, at,
            manifest: link, graph: link, nodes, calls: link, counts: chunked [prompt digest, tokens],
            usage: {input_tokens, output_tokens, calls}, timings: link, result: summary | null}
  `usage` is what the gateway's ledger charged for every request sent (answered, failed, or
  cancelled after sending, charged its reservation), the same numbers as the result's usage.
  One per saved state; `prev` chains every state of the run, so every earlier node version stays
  reachable. The ref "run/<id>/head" points at the newest.

Flush policy: nothing is written until the first backend exchange is answered (a run whose first
calls fail was a configuration problem, not a run). From then on every finished exchange, answered
or failed (a batch counts as one), is followed by one flush: the call blocks, a new version of
every node whose status, score, metadata size or cost changed (checked for the nodes events named
since the last flush, and for all nodes every FULL_SCAN_EVERY flushes and at the final one), the
changed chunks, graph, timings and a new head, in one put_many transaction; then the ref moves. A
SIGKILL loses at most the calls in flight and the graph changes since the last answered call;
`loom resume` recomputes those from the recorded calls. `finish` writes the final head with the
result summary. A write that fails (a full disk) does not stop the search: the flush's blocks stay
in `_unwritten` and go out with the next flush (the encoders already link them as stored), so no
head is ever stored without every block below it; the ref stays on the last head written whole
(`head`), and `write_error` says why until a write succeeds again. Cost: about 2-3 ms and 20 KB
per answered call for a 1,000-node search on a local disk (benchmarks/engine_overhead.py's tree,
zero-latency model); nothing without a recorder.

The recorder sees the backend through RecordingBackend, a proxy the gateway calls instead of the
real backend (composed below the gateway when the run is built); it sees the graph through the SearchContext
(search(..., on_context=...)) and the
creation-time parents and merges through the event stream. A search without a recorder runs
exactly as before. It leaves Gateway.listener (the engine's BudgetSpent feed) alone: replay needs
what the backend itself saw (the sub-request left after cache hits, max_tokens as the budget shrank
it, the backend's token counts, every retried attempt, the completion order), which the gateway's
CallRecords do not keep.
"""

from __future__ import annotations

import asyncio
import enum
import hashlib
import json
import math
import os
import secrets
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..graph import CycleError, Edge, EdgeKind, NodeKind, NodeStatus, ThoughtGraph
from ..llm.errors import BatchRefused, BudgetExceeded, ModelError, ModelTimeout, TransientModelError
from ..llm.types import Backend, Completion, GenerateRequest, Message, Prompt, Usage
from ..llm.wrapper import BackendWrapper
from ..search.events import DuplicateMerged, Event, NodeAdded
from ..search.stop import StopReason
from .blocks import CID, RAW, CorruptBlock, Link, MissingBlock, codec_of, encode, link, raw
from .manifest import Manifest
from .shapes import (
    ANY,
    BOOL,
    CID_TEXT,
    COUNT,
    LINK,
    MAP,
    NUMBER,
    TEXT,
    TEXT_OR_LINK,
    WHOLE,
    BadShape,
    Shape,
    checked,
    list_of,
    one_of,
    optional,
    record,
)
from .store import BlockStore, get_obj

if TYPE_CHECKING:
    from ..search.context import SearchContext
    from ..search.result import SearchResult

#: Items per list chunk.
CHUNK = 64
#: Every this many flushes (and at the final one) every node is compared with its last stored
#: version; in between only the nodes events named. Status changes no event announces (a node
#: taken in progress, cancelled, revived by backtracking) reach the store at the next full scan.
FULL_SCAN_EVERY = 16
#: Text longer than this (UTF-8 bytes) is stored in its own raw block.
INLINE_LIMIT = 1024
#: Keys of node metadata that hold wall-clock measurements: left out of the canonical graph.
WALL_CLOCK_KEYS = frozenset({"elapsed_ms", "elapsed_s", "duration_s", "duration_ms", "wall_s", "time_s",
                             "started_at", "created_at"})
RUN_PREFIX = "run/"
_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"  # Crockford base32, lower case
_EPOCH = 1_700_000_000  # 2023-11-14: six base32 digits of seconds last until 2057

Block = tuple[CID, bytes]


class RunError(Exception):
    """A run that cannot be found, resolved or used as asked (one-line message)."""


class CorruptRun(RunError):
    """A stored run whose blocks are missing, damaged or not shaped as a run's (one line naming the run)."""

    def __init__(self, detail: str, run_id: str | None = None) -> None:
        super().__init__(f"run {run_id} cannot be read (damaged, or not written by thoughtloom): {detail}; "
                         "'loom import' of a good copy replaces it" if run_id else detail)
        self.detail = detail
        self.run_id = run_id


@contextmanager
def reading(run_id: str | None = None) -> Iterator[None]:
    """What is wrong with a run's blocks, raised as one CorruptRun naming the run (when known).

    Without a run id a missing or corrupt block keeps its own type (MissingBlock, CorruptBlock).
    """
    try:
        yield
    except BadShape as exc:
        raise CorruptRun(str(exc), run_id) from None
    except CorruptRun as exc:
        if run_id is None or exc.run_id is not None:
            raise
        raise CorruptRun(exc.detail, run_id) from None
    except (MissingBlock, CorruptBlock) as exc:
        if run_id is None:
            raise
        raise CorruptRun(str(exc), run_id) from None
    except ValueError as exc:  # a CID or multihash that does not parse, met while following a link
        raise CorruptRun(str(exc), run_id) from None


# --- ids and refs ---------------------------------------------------------------------------------


def new_run_id(now: float | None = None) -> str:
    """A short id, sortable by creation time (6 base32 digits of seconds) plus 4 random digits."""
    seconds = max(0, int((time.time() if now is None else now) - _EPOCH))
    value = (seconds << 20) | secrets.randbits(20)
    return "".join(_ALPHABET[(value >> shift) & 31] for shift in range(45, -1, -5))


def head_ref(run_id: str) -> str:
    """The ref naming a run's newest head."""
    return f"{RUN_PREFIX}{run_id}/head"


def run_ids(store: BlockStore) -> list[str]:
    """Every stored run id, oldest first."""
    return sorted(name[len(RUN_PREFIX):-len("/head")] for name in store.refs(RUN_PREFIX) if name.endswith("/head"))


#: The name of the newest run (no id can start with it: Crockford base32 has no "l").
LAST = "last"


def resolve_run(store: BlockStore, prefix: str) -> str:
    """The one run id starting with `prefix`, or the newest for `last` (RunError when none or several do)."""
    ids = run_ids(store)
    if prefix == LAST:
        if not ids:
            raise RunError("no run in the store yet (runs are stored by 'loom solve'; choose a store with --store)")
        return ids[-1]
    if prefix in ids:
        return prefix
    matches = [i for i in ids if i.startswith(prefix)] if prefix else []
    if not matches:
        raise RunError(f"no run {prefix!r} in the store (see 'loom runs')")
    if len(matches) > 1:
        raise RunError(
            f"run prefix {prefix!r} is ambiguous: {', '.join(matches[:5])}{' ...' if len(matches) > 5 else ''}"
        )
    return matches[0]


# --- encoding helpers -----------------------------------------------------------------------------


def _put(obj: dict[str, Any], blocks: list[Block]) -> Link:
    cid, data = encode(obj)
    blocks.append((cid, data))
    return link(cid)


def _text(value: str, blocks: list[Block]) -> str | Link:
    data = value.encode()
    if len(data) <= INLINE_LIMIT:
        return value
    cid, body = raw(data)
    blocks.append((cid, body))
    return link(cid)


def read_text(store: BlockStore, value: str | Link | None) -> str | None:
    """Inline text as is, linked text fetched (and verified) from its raw block (CorruptRun if it is not UTF-8 text)."""
    with reading():
        return _read_text(store, value)


def _read_text(store: BlockStore, value: str | Link | None) -> str | None:
    if isinstance(value, Link):
        if codec_of(value) != RAW:
            raise BadShape(f"text {value.cid} is not a raw block")
        try:
            return bytes(store.get(value.cid)).decode()
        except UnicodeDecodeError:
            raise BadShape(f"text {value.cid} is not UTF-8") from None
    if value is not None and not isinstance(value, str):
        raise BadShape("a text field holds no text")
    return value


def canonical(value: Any) -> Any:
    """Plain dag-cbor data from metadata: wall-clock keys dropped, enums and paths as strings."""
    if isinstance(value, dict):
        return {str(k): canonical(v) for k, v in value.items() if str(k) not in WALL_CLOCK_KEYS}
    if isinstance(value, (list, tuple)):
        return [canonical(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((canonical(v) for v in value), key=repr)
    if isinstance(value, enum.Enum):
        return canonical(value.value)
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)  # dag-cbor has no NaN or infinity
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return str(value)


def prompt_digest(prompt: Prompt) -> str:
    """A stable digest of a prompt (both forms), the key of recorded token counts."""
    payload = json.dumps([prompt.text, [[m.role, m.content] for m in prompt.messages] if prompt.messages else None],
                         ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(payload.encode()).hexdigest()


class _Chunks:
    """A list stored as chunk blocks; only chunks touched since the last encode are re-encoded."""

    def __init__(self) -> None:
        self.items: list[Any] = []
        self._links: list[Link | None] = []

    def append(self, item: Any) -> None:
        self.items.append(item)
        self._touch(len(self.items) - 1)

    def set(self, index: int, item: Any) -> None:
        if self.items[index] != item:
            self.items[index] = item
            self._touch(index)

    def _touch(self, index: int) -> None:
        c = index // CHUNK
        while len(self._links) <= c:
            self._links.append(None)
        self._links[c] = None

    def encode(self, blocks: list[Block]) -> dict[str, Any]:
        """{count, chunks: [links]}, writing the chunks that changed into `blocks`."""
        for c, known in enumerate(self._links):
            if known is None:
                self._links[c] = _put({"type": "chunk", "items": self.items[c * CHUNK:(c + 1) * CHUNK]}, blocks)
        return {"count": len(self.items), "chunks": list(self._links)}


#: A chunked list as a parent block holds it.
CHUNKED = record({"count": COUNT, "chunks": list_of(LINK)})


def read_chunks(store: BlockStore, obj: Any, item: Shape | None = None) -> list[Any]:
    """The items of a chunked list (each chunk verified on read; each item of the shape `item`, when given)."""
    with reading():
        return _read_chunks(store, obj, item)


def _read_chunks(store: BlockStore, obj: Any, item: Shape | None = None) -> list[Any]:
    checked(obj, "a chunked list", {"chunks": list_of(LINK)})
    items: list[Any] = []
    for chunk in obj["chunks"]:
        chunk_items = checked(get_obj(store, chunk.cid), f"chunk {chunk.cid}", {"items": list_of(item or ANY)},
                              kind="chunk")["items"]
        items.extend(chunk_items)
    return items


# --- recorded calls -------------------------------------------------------------------------------


def request_key(prompt: Prompt, n: int, max_tokens: int, temperature: float, stop: Sequence[str],
                seed: int | None, form: str | None = None, schema: str | None = None,
                route: str | None = None, pinned: str | None = None, choices: tuple[str, ...] = (),
                scored: bool = False, tools: str | None = None) -> tuple[Any, ...]:
    """What identifies a backend request when replaying (the purpose is not part of it).

    form: the prompt form the recorded backend read ("text": the completion text and its stops;
    "chat": the messages, which end at the end of turn); None when unknown: both forms count.
    A run is then still replayable after a change to the form its model never saw. A reply
    schema is part of the key when there is one, and so is the route (which of the run's models answered)
    and the reply's choices (and whether they were scored rather than sampled), and the function
    definitions sent with it (tools: the reply is then the model's calls).
    pinned: the form the request itself pinned (GenerateRequest.form), which the backend read
    whatever its own, with the stop strings applying in either form.
    """
    tail = (((schema,) if schema is not None else ()) + ((("route", route),) if route is not None else ())
            + ((("choices", tuple(choices), scored),) if choices else ())
            + ((("tools", tools),) if tools is not None else ()))
    if pinned is not None:
        read = prompt.as_text() if pinned == "text" else None, prompt.as_messages() if pinned == "chat" else None
        return (*read, n, max_tokens, float(temperature), tuple(stop), seed, *tail, ("form", pinned))
    if form == "text":
        return (prompt.as_text(), None, n, max_tokens, float(temperature), tuple(stop), seed, *tail)
    if form == "chat":
        return (None, prompt.as_messages(), n, max_tokens, float(temperature), (), seed, *tail)
    return (prompt.text, prompt.messages, n, max_tokens, float(temperature), tuple(stop), seed, *tail)


@dataclass(frozen=True, slots=True)
class RecordedCall:
    """One backend exchange as stored: the request, the answer (or error) and its ordering."""

    rank: int
    start: int
    issued: int
    purpose: str
    model: str
    prompt: Prompt
    n: int
    max_tokens: int
    temperature: float
    stop: tuple[str, ...]
    seed: int | None
    texts: tuple[str, ...]
    usage: Usage
    error_kind: str | None = None
    error: str | None = None
    batch: int | None = None  # size of the batch this exchange was part of (its first member's rank first)
    schema: str | None = None  # the JSON Schema the reply was asked to match
    route: str | None = None  # which of the run's models answered (a role's own model)
    pinned_form: str | None = None  # the prompt form the request pinned (GenerateRequest.form)
    choices: tuple[str, ...] = ()  # the replies allowed
    scored: bool = False  # the reply is the choices' distribution, not a sample
    tools: str | None = None  # the function definitions sent (the reply is then the model's calls)

    def key(self, form: str | None = None) -> tuple[Any, ...]:
        """The request key this exchange answers (see request_key for `form`)."""
        return request_key(self.prompt, self.n, self.max_tokens, self.temperature, self.stop, self.seed, form,
                           self.schema, self.route, self.pinned_form, self.choices, self.scored, self.tools)


def _prompt_block(prompt: Prompt, blocks: list[Block]) -> Link:
    messages = [[m.role, _text(m.content, blocks)] for m in prompt.messages] if prompt.messages else None
    text = _text(prompt.text, blocks) if prompt.text is not None else None
    return _put({"type": "prompt", "text": text, "messages": messages}, blocks)


PROMPT = {"text": optional(TEXT_OR_LINK), "messages": optional(list_of(list_of(TEXT_OR_LINK, 2)))}
CALL = {
    "rank": COUNT, "start": COUNT, "issued": COUNT, "purpose": TEXT, "model": TEXT, "prompt": LINK, "n": COUNT,
    "max_tokens": COUNT, "temperature": NUMBER, "stop": list_of(TEXT), "seed": optional(WHOLE),
    "texts": list_of(TEXT_OR_LINK), "usage": list_of(WHOLE, 2),
    "error": optional(record({"kind": TEXT, "message": TEXT})), "batch": optional(COUNT), "schema": optional(TEXT),
    "route": optional(TEXT), "form": optional(TEXT), "choices": optional(list_of(TEXT)), "scored": optional(BOOL),
    "reasoning": optional(COUNT), "tools": optional(TEXT_OR_LINK),
}
#: Call fields a run may lack (stored before they existed, or left out when unset).
CALL_OPTIONAL = ("error", "batch", "schema", "route", "form", "choices", "scored", "reasoning", "tools")


def _read_prompt(store: BlockStore, cid: CID) -> Prompt:
    obj = checked(get_obj(store, cid), f"prompt {cid}", PROMPT, kind="prompt", optional_fields=PROMPT)
    messages = obj.get("messages")
    return Prompt(
        text=_read_text(store, obj.get("text")),
        messages=(tuple(Message(role, _read_text(store, content) or "") for role, content in messages)
                  if messages else None),
    )


def load_calls(store: BlockStore, calls_cid: CID, run_id: str | None = None) -> list[RecordedCall]:
    """Every recorded exchange of a calls list, in completion (rank) order (CorruptRun naming `run_id`)."""
    with reading(run_id):
        return _load_calls(store, calls_cid)


def _load_calls(store: BlockStore, calls_cid: CID) -> list[RecordedCall]:
    out: list[RecordedCall] = []
    for item in _read_chunks(store, checked(get_obj(store, calls_cid), f"calls {calls_cid}", {}, kind="calls"), LINK):
        c = checked(get_obj(store, item.cid), f"call {item.cid}", CALL, kind="call", optional_fields=CALL_OPTIONAL)
        error = c.get("error") or {}
        out.append(RecordedCall(
            rank=c["rank"], start=c["start"], issued=c["issued"], purpose=c["purpose"], model=c["model"],
            prompt=_read_prompt(store, c["prompt"].cid), n=c["n"], max_tokens=c["max_tokens"],
            temperature=c["temperature"], stop=tuple(c["stop"]), seed=c["seed"],
            texts=tuple(_read_text(store, t) or "" for t in c["texts"]),
            usage=Usage(c["usage"][0], c["usage"][1], c.get("reasoning") or 0),
            error_kind=error.get("kind"), error=error.get("message"), batch=c.get("batch"), schema=c.get("schema"),
            route=c.get("route"), pinned_form=c.get("form"), choices=tuple(c.get("choices") or ()),
            scored=bool(c.get("scored")), tools=_read_text(store, c.get("tools")),
        ))
    out.sort(key=lambda r: r.rank)
    return out


# --- the recorder ---------------------------------------------------------------------------------


class RunRecorder:
    """Persists one search incrementally: an event sink, a backend proxy, one transaction per flush."""

    def __init__(
        self,
        store: BlockStore,
        manifest: Manifest,
        *,
        prev: CID | None = None,
        seq: int = 0,
        started: bool = False,
        on_start: Any = None,
    ) -> None:
        self.store = store
        self.manifest = manifest
        self.run_id = manifest.run_id
        #: The newest head written whole (or, resuming, the head the run continues from).
        self.head: CID | None = prev
        self.seq = seq
        self.graph_cid: CID | None = None
        self.started = started
        self._on_start = on_start
        self._manifest_link: Link | None = None
        self._ctx: SearchContext | None = None
        self._created: dict[int, tuple[int, ...]] = {}
        #: The edge kinds each thought block was written with, by node.
        self._edge_kinds: dict[int, list[str]] = {}
        self._merged: set[int] = set()
        self._dirty: set[int] = set()
        self._thoughts: list[Link] = []
        self._fps: list[tuple[Any, ...] | None] = []
        self._nodes = _Chunks()
        self._created_at = _Chunks()
        self._calls = _Chunks()
        self._durations = _Chunks()
        self._counts = _Chunks()
        self._counted: set[str] = set()
        self._pending: list[Block] = []
        self._issued = 0
        self._completed = 0
        #: Blocks linked by the encoders' state whose write failed, re-sent with the next flush.
        self._unwritten: dict[CID, bytes] = {}
        #: Why the last flush could not write (None when it could).
        self.write_error: str | None = None
        # What the gateway's ledger charged for every request recorded so far (answered, failed or
        # cancelled), for the heads written while the run goes on; `_sent` counts those requests.
        self._usage = [0, 0]
        self._sent = 0

    # --- wiring ---------------------------------------------------------------------------------

    def __call__(self, event: Event) -> None:
        """Event sink: creation-time parents, merges, and which nodes changed (read from the graph)."""
        if type(event) is NodeAdded:
            self._created[event.node_id] = event.parents
        elif type(event) is DuplicateMerged:
            self._merged.add(event.existing_id)
        else:
            node_id = getattr(event, "node_id", None)
            if node_id is not None:
                self._dirty.add(node_id)

    def on_context(self, ctx: SearchContext) -> None:
        """Read access to the search's graph (search(..., on_context=recorder.on_context))."""
        self._ctx = ctx

    @property
    def node_count(self) -> int:
        """Nodes recorded so far."""
        return len(self._nodes.items)

    def wrap(self, backend: Backend) -> RecordingBackend:
        """The recording proxy to put between the gateway and `backend`."""
        return RecordingBackend(backend, self)

    # --- what the proxy reports -----------------------------------------------------------------

    def _begin(self) -> int:
        start = self._issued
        self._issued += 1
        return start

    def _count(self, prompt: Prompt, tokens: int) -> None:
        digest = prompt_digest(prompt)
        if digest not in self._counted:
            self._counted.add(digest)
            self._counts.append([digest, tokens])

    @property
    def _gateway(self) -> Any:
        """The search's gateway (its ledger says what each request is charged)."""
        return self._ctx.gateway if self._ctx is not None else None

    def _charged(self, request: GenerateRequest, outcome: Completion | BaseException) -> None:
        """Add what the gateway's ledger charges for one request, so the head agrees with it."""
        gateway = self._gateway
        if gateway is not None:
            self._charge(gateway.charge(request, outcome))
        elif isinstance(outcome, Completion):
            self._charge(outcome.usage)

    def _charged_batch(
        self, requests: Sequence[GenerateRequest], outcome: Sequence[Completion] | BaseException
    ) -> None:
        gateway = self._gateway
        if gateway is not None:
            for usage in gateway.charge_batch(requests, outcome):
                self._charge(usage)
        elif not isinstance(outcome, BaseException):
            for completion in outcome:
                self._charge(completion.usage)

    def _charge(self, usage: Usage | None) -> None:
        if usage is not None:  # None: refused before anything was sent
            self._usage[0] += usage.input_tokens
            self._usage[1] += usage.output_tokens
            self._sent += 1

    def _exchange(self, start: int, request: GenerateRequest, completion: Completion | None,
                  error: tuple[str, str] | None, t0: float, batch: int | None = None) -> None:
        """Record one finished exchange (not yet flushed)."""
        blocks = self._pending
        usage = completion.usage if completion is not None else Usage()
        obj = {
            "type": "call", "rank": self._completed, "start": start, "issued": self._issued,
            "purpose": request.purpose,
            "model": (completion.model if completion is not None and completion.model else "") or self.manifest.backend,
            "prompt": _prompt_block(request.prompt, blocks), "n": request.n, "max_tokens": request.max_tokens,
            "temperature": float(request.temperature), "stop": list(request.stop), "seed": request.seed,
            "texts": [_text(t, blocks) for t in completion.texts] if completion is not None else [],
            "usage": [usage.input_tokens, usage.output_tokens],
            "error": {"kind": error[0], "message": error[1]} if error else None,
            "batch": batch,
            **({"schema": request.schema} if request.schema is not None else {}),
            **({"route": request.route} if request.route is not None else {}),
            **({"form": request.form} if request.form is not None else {}),
            **({"choices": list(request.choices)} if request.choices else {}),
            # Of the output tokens, the reasoning ones: only when there are some, so other records keep their form.
            **({"reasoning": usage.reasoning_tokens} if usage.reasoning_tokens else {}),
            **({"scored": True} if request.score_choices else {}),
            **({"tools": _text(request.tools, blocks)} if request.tools is not None else {}),
        }
        self._completed += 1
        self._calls.append(_put(obj, blocks))
        self._durations.append(round(time.perf_counter() - t0, 6))

    def _cut_off(self) -> bool:
        """Whether a cancelled call was ended by the wall-clock budget (rather than an interrupt)."""
        left = self._ctx.gateway.budget.wall_left() if self._ctx is not None else None
        return left is not None and left <= 0

    # --- flushing -------------------------------------------------------------------------------

    def flush(self, status: str = "running", result: dict[str, Any] | None = None,
              usage: dict[str, int] | None = None) -> CID | None:
        """Write what changed and a new head in one transaction; move the run's ref to it.

        Never raises for a store that fails to write (a full disk): it returns None, keeps the
        blocks for the next flush, and sets `write_error`; the ref keeps naming the last head
        written whole, so `loom resume` continues from there once the store can be written.
        """
        blocks, self._pending = self._pending, []
        self.started = True
        graph = self._graph(blocks, full=status != "running" or self.seq % FULL_SCAN_EVERY == 0,
                            final=status != "running")
        calls = _put({"type": "calls", **self._calls.encode(blocks)}, blocks)
        if result is not None:  # the finished run's manifest names its recorded calls
            self.manifest.calls = calls.cid
            self._manifest_link = None
        if self._manifest_link is None:
            self._manifest_link = _put(self.manifest.to_obj(), blocks)
        timings = _put({"type": "timings", "created_at": self._created_at.encode(blocks),
                        "call_duration_s": self._durations.encode(blocks)}, blocks)
        head = _put({
            "type": "head", "run": self.run_id, "seq": self.seq, "prev": link(self.head) if self.head else None,
            "status": status, "at": time.time(), "manifest": self._manifest_link, "graph": graph,
            "nodes": len(self._nodes.items), "calls": calls, "counts": self._counts.encode(blocks),
            "usage": usage or {"input_tokens": self._usage[0], "output_tokens": self._usage[1], "calls": self._sent},
            "timings": timings, "result": result,
        }, blocks)
        # Blocks of an earlier flush whose write failed go first: the encoders above link them
        # as stored, so this head is written only together with them.
        unwritten = self._unwritten
        unwritten.update(blocks)
        try:
            self.store.put_many(unwritten.items())
            self.store.set_ref(head_ref(self.run_id), head.cid)
        except Exception as exc:  # noqa: BLE001 - any store failure: nothing of this flush counts as written
            # The ref still names the last head written whole, so the run resumes from there.
            self.write_error = " ".join(str(exc).split()) or type(exc).__name__  # one line
            return None
        unwritten.clear()
        self.write_error = None
        if self.head is None and self._on_start is not None:
            self._on_start(self.run_id)
        self.head = head.cid
        self.seq += 1
        return head.cid

    def flush_started(self) -> None:
        """Flush after a failed exchange, once the run exists: a run whose first calls fail (a bad
        endpoint, a missing key) is a configuration error, not a run, and is not stored; its
        failed exchanges are written with the first answered one."""
        if self.started:
            self.flush()

    def _graph(self, blocks: list[Block], full: bool, final: bool = False) -> Link:
        """The graph block: new thoughts, and a new version of each node that changed (every node when
        `final`: a strategy may change a value inside extra in place, which the fingerprint cannot see)."""
        ctx = self._ctx
        if ctx is not None:
            graph = ctx.graph
            merged, self._merged = self._merged, set()
            fps = self._fps
            known = len(fps)
            if full:
                ids: Any = range(len(graph))
            else:  # the nodes events named, and the new ones; in id order (parents first)
                ids = sorted({*(i for i in self._dirty | merged if i < known), *range(known, len(graph))})
            self._dirty = set()
            # Every new thought first: a node may have gained a newer one as a parent since it was
            # written (an agent's retry that its dependents now wait for), and its version names it.
            for nid in range(len(fps), len(graph)):
                node = graph.node(nid)
                self._thoughts.append(self._thought(graph, node, blocks))
                self._created_at.append(node.created_at)
                fps.append(None)
            for nid in ids:
                node = graph.node(nid)
                fp = (node.status, node.score, len(node.extra), node.cost_tokens)
                if fps[nid] == fp and nid not in merged and not final:
                    continue
                fps[nid] = fp
                version = self._version(graph, node, blocks)
                if nid == len(self._nodes.items):
                    self._nodes.append(version)
                else:
                    self._nodes.set(nid, version)
        g = _put({"type": "graph", "count": len(self._nodes.items), "nodes": self._nodes.encode(blocks)}, blocks)
        self.graph_cid = g.cid
        return g

    def _thought(self, graph: ThoughtGraph, node: Any, blocks: list[Block]) -> Link:
        parents = self._created.get(node.id)
        if parents is None:  # not announced by an event: its parents now are its creation parents
            parents = tuple(graph.parents(node.id))
        kinds = [graph.edge(p, node.id).kind.value for p in parents]
        self._edge_kinds[node.id] = kinds
        return _put({
            "type": "thought", "id": node.id, "kind": node.kind.value, "depth": node.depth,
            "creator": node.creator, "content": _text(node.content, blocks),
            "parents": [self._thoughts[p] for p in parents], "edges": kinds,
        }, blocks)

    def _version(self, graph: ThoughtGraph, node: Any, blocks: list[Block]) -> Link:
        created = self._created.get(node.id)
        first = graph.parents(node.id)[:len(created)] if created is not None else graph.parents(node.id)
        later = graph.parents(node.id)[len(first):]
        version: dict[str, Any] = {
            "type": "node", "thought": self._thoughts[node.id], "status": node.status.value, "score": node.score,
            "cost_tokens": node.cost_tokens, "extra": canonical(node.extra),
            "merged": [_merged(self._thoughts[p], graph.edge(p, node.id)) for p in later],
        }
        # Edges re-labelled or weighted since the thought was written (a critique's CONTRADICTION);
        # the key is absent otherwise, so runs without such edges keep their CIDs.
        now = [graph.edge(p, node.id) for p in first]
        if any(e.weight is not None for e in now) or [e.kind.value for e in now] != self._edge_kinds.get(node.id):
            version["edges"] = [[e.kind.value, e.weight] for e in now]
        return _put(version, blocks)

    def finish(self, result: SearchResult) -> CID | None:
        """Write the final head: status finished (interrupted after Ctrl-C) and the result summary
        (None when the store could not be written: see `write_error`)."""
        status = "interrupted" if result.termination_reason == StopReason.INTERRUPTED else "finished"
        # The final head takes the run's usage from its ledger, as the result does: requests
        # cancelled at a limit may be charged after the last exchange was recorded.
        u = result.usage
        return self.flush(status, summarize(result),
                          {"input_tokens": u.input_tokens, "output_tokens": u.output_tokens, "calls": u.calls})

    def abort(self) -> None:
        """The process is going down outside the search: mark the run interrupted if it was stored."""
        if self.started:
            self.flush("interrupted")


def summarize(result: SearchResult) -> dict[str, Any]:
    """The result as stored in a finished head (plain data)."""
    return canonical({
        "answer": result.answer, "solved": result.solved, "score": result.score,
        "termination_reason": str(result.termination_reason), "error": result.error, "model": result.model,
        "best_path": [s.id for s in result.best_path], "goal_node": result.goal_node,
        "best_node": result.best_node, "answer_node": result.answer_node,
        "usage": result.usage.to_dict(), "stats": result.stats.to_dict(),
        "control": result.control.to_dict() if result.control is not None else None,
    })


def _error_kind(exc: ModelError) -> str:
    """How a failed exchange is recorded, so a replay raises the same kind of error."""
    if isinstance(exc, ModelTimeout):
        return "timeout"
    if isinstance(exc, BatchRefused):
        return "batch_refused"
    return "transient" if isinstance(exc, TransientModelError) else "model"


class RecordingBackend(BackendWrapper):
    """The backend as the gateway sees it while recording: forwards everything, records exchanges."""

    def __init__(self, inner: Backend, recorder: RunRecorder) -> None:
        super().__init__(inner)
        self.recorder = recorder

    def count_tokens(self, prompt: Prompt) -> int | None:
        """The inner backend's count, remembered so a replay reserves exactly the same."""
        tokens = self.inner.count_tokens(prompt)
        if tokens is not None:
            self.recorder._count(prompt, tokens)
        return tokens

    async def generate(self, request: GenerateRequest) -> Completion:
        """Forward one request; record and flush when it completes or fails."""
        rec = self.recorder
        start, t0 = rec._begin(), time.perf_counter()
        try:
            completion = await self.inner.generate(request)
        except asyncio.CancelledError as exc:
            # Sent and then cancelled (a limit stopped the search): charged, though not an
            # exchange a replay could serve.
            rec._charged(request, exc)
            if rec._cut_off():
                rec._exchange(start, request, None, ("cutoff", "wall-clock budget ran out during a call"), t0)
                rec.flush_started()
            raise
        except ModelError as exc:
            rec._charged(request, exc)
            rec._exchange(start, request, None, (_error_kind(exc), str(exc)), t0)
            rec.flush_started()
            raise
        except BudgetExceeded:
            raise  # a replay's emulated wall-clock stop: nothing was exchanged
        rec._charged(request, completion)
        rec._exchange(start, request, completion, None, t0)
        rec.flush()
        return completion

    async def generate_batch(self, requests: Sequence[GenerateRequest]) -> list[Completion]:
        """Forward a batch; each request is recorded as its own exchange, then one flush."""
        rec = self.recorder
        starts, t0 = [rec._begin() for _ in requests], time.perf_counter()
        try:
            completions = await self.inner.generate_batch(requests)  # type: ignore[attr-defined]
        except asyncio.CancelledError as exc:
            rec._charged_batch(requests, exc)
            if rec._cut_off():
                for s, r in zip(starts, requests, strict=True):
                    rec._exchange(s, r, None, ("cutoff", "wall-clock budget ran out during a call"), t0, len(requests))
                rec.flush_started()
            raise
        except ModelError as exc:
            rec._charged_batch(requests, exc)
            kind = _error_kind(exc)
            for s, r in zip(starts, requests, strict=True):
                rec._exchange(s, r, None, (kind, str(exc)), t0, len(requests))
            rec.flush_started()
            raise
        except BudgetExceeded:
            raise
        rec._charged_batch(requests, completions)
        for s, r, c in zip(starts, requests, completions, strict=False):
            rec._exchange(s, r, c, None, t0, len(requests))
        rec.flush()
        return completions


# --- readers --------------------------------------------------------------------------------------


@dataclass(slots=True)
class StoredRun:
    """A run as its newest head describes it."""

    run_id: str
    head_cid: CID
    head: dict[str, Any]
    manifest: Manifest

    @property
    def status(self) -> str:
        """running (or killed), finished or interrupted."""
        return str(self.head["status"])

    @property
    def graph_cid(self) -> CID:
        """The canonical graph's CID."""
        return self.head["graph"].cid

    @property
    def calls_cid(self) -> CID:
        """The recorded-calls list's CID."""
        return self.head["calls"].cid

    @property
    def result(self) -> dict[str, Any] | None:
        """The result summary (finished and interrupted runs)."""
        return self.head.get("result")

    @property
    def tokens(self) -> int:
        """Input plus output tokens of the recorded exchanges."""
        u = self.head.get("usage") or {}
        return int(u.get("input_tokens", 0)) + int(u.get("output_tokens", 0))


#: The statuses a head can have.
RUN_STATUSES = frozenset({"running", "finished", "interrupted"})
HEAD = {
    "run": TEXT, "seq": COUNT, "prev": optional(LINK), "status": one_of(RUN_STATUSES), "manifest": LINK,
    "graph": LINK, "nodes": COUNT, "calls": LINK, "counts": CHUNKED, "timings": LINK, "result": optional(MAP),
    "usage": MAP,
}
#: The head's usage: what the run was charged.
USAGE = {"input_tokens": COUNT, "output_tokens": COUNT, "calls": COUNT}
#: The result summary's fields the readers and views use (each may be absent).
SUMMARY = {
    "answer": optional(TEXT), "solved": optional(BOOL), "score": optional(NUMBER),
    "termination_reason": optional(TEXT), "error": optional(TEXT), "model": optional(TEXT),
    "best_path": list_of(COUNT), "goal_node": optional(COUNT), "best_node": optional(COUNT),
    "answer_node": optional(COUNT), "usage": MAP, "stats": MAP,
    "control": optional(record({"decisions": list_of(MAP)})),
}


def load_head(store: BlockStore, head_cid: CID) -> dict[str, Any]:
    """A head block, every field the readers use checked (CorruptRun says which is wrong)."""
    with reading():
        return _load_head(store, head_cid)


def _load_head(store: BlockStore, head_cid: CID) -> dict[str, Any]:
    what = f"head {head_cid}"
    head = checked(get_obj(store, head_cid), what, HEAD, kind="head", optional_fields=("prev", "result"))
    checked(head["usage"], f"{what}: usage", USAGE)
    if head.get("result") is not None:
        checked(head["result"], f"{what}: result", SUMMARY, optional_fields=SUMMARY)
    return head


def open_run(store: BlockStore, prefix: str) -> StoredRun:
    """The run with this id (or unique id prefix), read from its newest head (CorruptRun naming it if it cannot be)."""
    run_id = resolve_run(store, prefix)
    ref = store.get_ref(head_ref(run_id))
    assert ref is not None
    with reading(run_id):
        if not CID_TEXT.test(ref):
            raise BadShape("its head ref is not a CID")
        head_cid = ref
        head = _load_head(store, head_cid)
        if head["run"] != run_id:
            raise BadShape(f"its head {head_cid} belongs to another run")
        return StoredRun(run_id, head_cid, head,
                         Manifest.from_obj(get_obj(store, head["manifest"].cid), f"manifest {head['manifest'].cid}"))


def history(store: BlockStore, head_cid: CID) -> Iterator[tuple[CID, dict[str, Any]]]:
    """Every head of a run, newest first, following `prev`."""
    cid: CID | None = head_cid
    while cid is not None:
        head = load_head(store, cid)
        yield cid, head
        prev = head.get("prev")
        cid = prev.cid if prev is not None else None


#: One recorded prompt token count: [prompt digest, tokens].
COUNTED = Shape(lambda v: isinstance(v, list) and len(v) == 2 and TEXT.test(v[0]) and COUNT.test(v[1]),
                "a [prompt digest, tokens] pair")


def load_counts(store: BlockStore, head: dict[str, Any]) -> dict[str, int]:
    """Recorded prompt token counts by prompt digest (a head from load_head)."""
    with reading(head["run"]):
        return {digest: tokens for digest, tokens in _read_chunks(store, head["counts"], COUNTED)}


def _merged(thought: Link, edge: Edge) -> list[Any]:
    """A later parent as stored: its thought and the edge's kind (and weight, when it has one)."""
    return [thought, edge.kind.value] if edge.weight is None else [thought, edge.kind.value, edge.weight]


@dataclass(slots=True)
class StoredGraph:
    """A stored graph rebuilt as a ThoughtGraph, with each node's version CID."""

    graph: ThoughtGraph
    versions: list[CID]


#: Node statuses, node kinds and edge kinds as stored.
STATUSES = frozenset(s.value for s in NodeStatus)
KINDS = frozenset(k.value for k in NodeKind)
EDGE_KINDS = frozenset(k.value for k in EdgeKind)
WEIGHT = optional(NUMBER)
VERSION = {
    "thought": LINK, "status": one_of(STATUSES), "score": optional(NUMBER), "cost_tokens": WHOLE, "extra": MAP,
    "merged": list_of(Shape(lambda v: isinstance(v, list) and len(v) in (2, 3) and LINK.test(v[0])
                            and one_of(EDGE_KINDS).test(v[1]) and (len(v) == 2 or WEIGHT.test(v[2])),
                            "a [thought, edge kind, weight] list")),
    "edges": list_of(Shape(lambda v: isinstance(v, list) and len(v) == 2 and one_of(EDGE_KINDS).test(v[0])
                           and WEIGHT.test(v[1]), "an [edge kind, weight] pair")),
}
THOUGHT = {"id": COUNT, "kind": one_of(KINDS), "depth": COUNT, "creator": TEXT, "content": TEXT_OR_LINK,
           "parents": list_of(LINK), "edges": list_of(one_of(EDGE_KINDS))}


def load_graph(store: BlockStore, graph_cid: CID, timings: CID | None = None, run_id: str | None = None) -> StoredGraph:
    """Rebuild the ThoughtGraph a graph block describes (every block verified and checked on read; CorruptRun
    naming `run_id` when a block is missing or not shaped as a graph's)."""
    with reading(run_id):
        return _load_graph(store, graph_cid, timings)


def _load_graph(store: BlockStore, graph_cid: CID, timings: CID | None) -> StoredGraph:
    obj = checked(get_obj(store, graph_cid), f"graph {graph_cid}", {"nodes": CHUNKED}, kind="graph")
    versions = [v.cid for v in _read_chunks(store, obj["nodes"], LINK)]
    created: list[Any] = []
    if timings:
        times = checked(get_obj(store, timings), f"timings {timings}", {"created_at": CHUNKED}, kind="timings")
        created = _read_chunks(store, times["created_at"], optional(NUMBER))
    graph = ThoughtGraph()
    ids: dict[CID, int] = {}
    links: list[tuple[int, list[tuple[CID, str, float | None]]]] = []
    for vcid in versions:
        version = checked(get_obj(store, vcid), f"node {vcid}", VERSION, kind="node", optional_fields=("edges",))
        tcid = version["thought"].cid
        thought = checked(get_obj(store, tcid), f"thought {tcid}", THOUGHT, kind="thought")
        nid = thought["id"]
        if nid != len(graph):
            raise BadShape(f"graph {graph_cid}: node {nid} stored out of order")
        if len(thought["parents"]) != len(thought["edges"]):
            raise BadShape(f"thought {tcid}: its parents and their edge kinds differ in number")
        if "edges" in version and len(version["edges"]) != len(thought["edges"]):
            raise BadShape(f"node {vcid}: its edges and its thought's parents differ in number")
        node = graph.add_node(
            _read_text(store, thought["content"]) or "", NodeKind(thought["kind"]), score=version["score"],
            created_at=created[nid] if nid < len(created) and created[nid] is not None else 0.0,
            cost_tokens=version["cost_tokens"], creator=thought["creator"], extra=dict(version["extra"]),
        )
        ids[tcid] = nid
        node.depth = thought["depth"]
        node.status = NodeStatus(version["status"])
        edges: list[tuple[CID, str, float | None]] = [
            (p.cid, kind, None) for p, kind in zip(thought["parents"], thought["edges"], strict=False)]
        if "edges" in version:  # re-labelled or weighted since the thought was written
            edges = [(p, kind, weight) for (p, _, _), (kind, weight) in zip(edges, version["edges"], strict=False)]
        edges += [(m[0].cid, m[1], m[2] if len(m) > 2 else None) for m in version["merged"]]
        links.append((nid, edges))
    # Edges after every node: a later node may have been linked to an earlier one (an agent's new
    # step holding back a step that was waiting).
    for nid, edges in links:
        for parent, kind, weight in edges:
            if parent not in ids:
                raise BadShape(f"graph {graph_cid}: node {nid} names a parent {parent} that is not in the graph")
            try:
                graph.add_edge(ids[parent], nid, EdgeKind(kind), weight)
            except (CycleError, ValueError) as exc:  # a cycle, or the same parent twice
                raise BadShape(f"graph {graph_cid}: {exc}") from None
    return StoredGraph(graph, versions)
