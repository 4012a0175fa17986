"""The llama.cpp engine behind the embedded backend: one context, a prefix cache, continuous batching.

One worker thread owns the llama.cpp context. Callers submit jobs (a completion with n samples,
or the scoring of choice continuations) and wait on their futures. Each step the worker builds
one batch from every job in flight — the next token of each running sample, chunks of prompts
still being read, choice tokens being scored — and calls llama_decode once: a CPU reads the
weights once per step for all of them. Jobs join between steps, and leave at the first step
after they finish or their caller cancels them.

The KV cache is one pool of cells (kv_unified) shared by up to N_SEQ sequences. A job's prompt
is kept in a sequence of its own, and each of its samples starts from a copy of it
(llama_memory_seq_cp shares cells, it does not duplicate them). When the job ends, that prompt
sequence stays behind as a cache slot. A new job starts from the longest prefix that any slot,
or any prompt in flight, shares with its prompt, and evaluates only the rest: alternating
few-shot prompts (a search's propose and value prompts) each keep their own slot. Slots are
evicted least recently used when a job needs sequences.

A seeded request gives the same samples cold or warm, alone or batched with others: the
numbers llama.cpp computes for a token depend on nothing but the token and the cells it attends
to, in the order they sit in the pool. Three things make it so. ggml's tiled and repacked matrix
kernels pick their code path, and so their rounding, by batch size: both are off (the
GGML_CPU_TILED_MM switch, no repacked weights). Its f16 flash attention rounds by where cells sit:
the cache is q8_0, whose flash attention walks a sequence's cells one by one and skips the
others. And attention sums a sequence's cells in pool order, so a sequence's cells must sit in
position order: the pool never gets holes. A finished sequence's cells are handed to two
"graveyard" sequences instead of being freed (llama.cpp would reuse a hole for the next token,
before cells it follows); when the pool fills, the engine waits until no sample is running,
saves the prompts it keeps, clears the pool and restores them contiguously (compaction).
Without this, a logit moves by up to 0.4 between two evaluations of one prompt, and samples part
ways within a few tokens. The kernels cost about a sixth of the prompt-reading speed on the
2-core machine measured (prompt reading with q8_0 flash attention and without the tiled kernels),
far less than the prefix cache saves.
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from .chat_template import ChatTemplate, Piece
from .errors import ModelConfigError, ModelError
from .threads import ThreadPolicy
from .types import TokenLogprob

#: Rows (tokens) per llama_decode call: the running samples' next tokens, then prompt chunks.
N_BATCH = 512
#: Sequences in the context: cache slots, prompts in flight and their samples share them; the
#: last two hold dead cells (see the module docstring).
N_SEQ = 64
_GRAVES = (N_SEQ - 2, N_SEQ - 1)
#: The cell pool holds this many request windows (n_ctx each): room for several prompts in
#: flight, their samples and the cache slots. A q8_0 cache keeps it the size of the f16 cache
#: of two windows the engine used before.
WINDOWS = 4
#: Cache slots kept at most (each costs a prefix comparison per new job).
MAX_SLOTS = 32
#: An idle engine compacts its pool once this share of it was taken since the last compaction:
#: attention reads every cell up to the highest one taken (dead ones are skipped, not free), so
#: a small pool is a fast one, and a compaction costs a few milliseconds. A compaction keeps
#: slots of at most this share of the pool too.
IDLE_COMPACT = 0.25
# Sampling chain of llama-cpp-python's create_completion defaults, which suit these models.
TOP_K, TOP_P, MIN_P = 40, 0.95, 0.05

_FREE, _SLOT, _BUSY = 0, 1, 2


def one_line(exc: BaseException) -> str:
    """An exception as one line of text."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


@dataclass(slots=True)
class EngineStats:
    """What an engine has done since it was loaded (cumulative: subtract two snapshots to measure a span)."""

    #: Jobs that ended: answered, failed or cancelled.
    jobs: int = 0
    cancelled: int = 0
    failed: int = 0
    #: Prompt tokens of all jobs; of those, tokens whose cells came from the cache.
    prompt_tokens: int = 0
    prompt_reused: int = 0
    #: Prompt tokens decoded: the uncached part of each prompt, plus its last token once per
    #: group of samples (its logits are the first sampling step's).
    prompt_evaluated: int = 0
    #: Choice tokens decoded by score jobs.
    choice_tokens: int = 0
    #: Tokens sampled.
    generated: int = 0
    #: llama_decode calls, the rows they carried, the most in one call.
    decode_calls: int = 0
    decode_rows: int = 0
    max_rows: int = 0
    #: Calls that carried rows of two or more jobs, and the most jobs in one call.
    shared_calls: int = 0
    max_jobs: int = 0
    #: Seconds spent inside llama_decode.
    decode_s: float = 0.0
    #: Cache slots dropped to make room.
    evictions: int = 0
    #: Times the pool was compacted (kept sequences saved, the pool cleared, they restored).
    compactions: int = 0
    #: Times the cache was cleared after a failed decode.
    resets: int = 0
    #: CPU threads llama.cpp computes with now, and how often the thread policy changed them.
    threads: int = 0
    thread_changes: int = 0

    def snapshot(self) -> dict[str, int | float]:
        """The counters as a plain dict."""
        return asdict(self)


@dataclass(slots=True)
class Decoded:
    """What a completion job produced: per sample a text, a finish reason and (when asked) token logprobs."""

    texts: list[str]
    generated: int
    reasons: list[str]
    logprobs: list[tuple[TokenLogprob, ...]] | None


class _Seq:
    """One llama.cpp sequence id and the tokens its cells hold, at positions 0..len-1."""

    __slots__ = ("id", "state", "tokens", "used_at")

    def __init__(self, seq_id: int) -> None:
        self.id = seq_id
        self.tokens: list[int] = []
        self.state = _FREE
        self.used_at = 0


class _Sample:
    """One sample of a completion job: its sampler, sequence and text so far."""

    __slots__ = ("done", "generated", "logprobs", "out", "reason", "room", "row", "sampler", "seed", "seq", "token")

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.sampler: Any = None
        self.seq: _Seq | None = None
        self.out = b""
        self.reason = "length"
        self.logprobs: list[TokenLogprob] = []
        self.generated = 0
        self.token: int | None = None  # sampled, to be decoded next step
        self.row = -1  # batch row whose logits this sample reads next
        self.room = 0  # cells its next tokens may still take
        self.done = False


class _Choice:
    """One continuation a score job rates: its tokens, sequence and log-probability."""

    __slots__ = ("done", "logp", "seq", "tokens")

    def __init__(self, tokens: list[int]) -> None:
        self.tokens = tokens
        self.seq: _Seq | None = None
        self.logp = 0.0
        self.done = False


class Job:
    """One request to the engine; `future` resolves to a Decoded (completion) or a list of log-probabilities (score)."""

    def __init__(self, prompt: list[int], units: list[Any], *, max_tokens: int = 0, temperature: float = 0.0,
                 stops: Sequence[bytes] = (), grammar: bytes | None = None, logprobs: int | None = None,
                 on_text: Callable[[int, bytes], None] | None = None) -> None:
        self.prompt = prompt
        self.units = units
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.stops = list(stops)
        self.longest_stop = max((len(s) for s in self.stops), default=0)
        self.grammar = grammar
        self.logprobs = logprobs
        #: Called from the worker thread with a sample's index and its text so far, each time it grows.
        self.on_text = on_text
        self.future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        #: Set by the caller to stop the job at the next step.
        self.cancelled = threading.Event()
        self.seq: _Seq | None = None  # holds the prompt
        self.waiting: deque[Any] = deque(units)  # units without a sequence yet
        self.groups: list[list[Any]] = []  # units with sequences, waiting for their first row
        self.running: list[Any] = []
        self.reserved = 0  # cells promised to this job and not yet used
        self.generated = 0

    @property
    def scoring(self) -> bool:
        """Whether this job scores choices (otherwise it samples completions)."""
        return bool(self.units) and isinstance(self.units[0], _Choice)

    def cancel(self) -> None:
        """Stop the job at the next step; its future then fails with ModelError("cancelled")."""
        self.cancelled.set()

    def unit_room(self, unit: Any) -> int:
        """Cells one unit adds after the prompt's last token."""
        return len(unit.tokens) - 1 if isinstance(unit, _Choice) else self.max_tokens - 1

    def prefilled(self) -> bool:
        """Whether the prompt sequence holds everything but the prompt's last token."""
        assert self.seq is not None
        return len(self.seq.tokens) >= len(self.prompt) - 1


class Engine:
    """One llama.cpp model and context, served by a worker thread that decodes every job in flight together."""

    def __init__(self, llama_cpp: Any, path: str, n_ctx: int, threads: ThreadPolicy) -> None:
        # Read once, when ggml first multiplies: the tiled kernels' results depend on the batch
        # size (see the module docstring). setdefault: a user's own choice wins.
        os.environ.setdefault("GGML_CPU_TILED_MM", "0")
        ll = self.ll = llama_cpp
        ll.llama_backend_init()
        mparams = ll.llama_model_default_params()
        mparams.use_extra_bufts = False  # no repacked weights: their kernels also vary with the batch size
        self.model = ll.llama_model_load_from_file(path.encode(), mparams)
        if not self.model:
            raise ModelConfigError(f"llama.cpp could not load {path} (not a GGUF model it supports?)")
        self.vocab = ll.llama_model_get_vocab(self.model)
        self.n_vocab = ll.llama_vocab_n_tokens(self.vocab)
        self.n_ctx = n_ctx
        params = ll.llama_context_default_params()
        params.n_ctx = WINDOWS * n_ctx
        params.n_batch = params.n_ubatch = N_BATCH
        params.n_seq_max = N_SEQ
        params.kv_unified = True  # one cell pool: a shared prefix is stored once for every sequence
        params.swa_full = True  # Gemma 3's sliding-window layers must keep old cells for prefix reuse
        params.flash_attn_type = ll.LLAMA_FLASH_ATTN_TYPE_ENABLED
        params.type_k = params.type_v = ll.GGML_TYPE_Q8_0
        self._threads = threads
        params.n_threads = params.n_threads_batch = threads.threads(N_BATCH)
        self.ctx = ll.llama_init_from_model(self.model, params)
        if not self.ctx:
            raise ModelConfigError(f"llama.cpp could not create a {params.n_ctx}-token context for {path}")
        self.capacity = ll.llama_n_ctx(self.ctx)
        self.n_swa = ll.llama_model_n_swa(self.model)
        self.memory = ll.llama_get_memory(self.ctx)
        self.batch = ll.llama_batch_init(N_BATCH, 0, N_SEQ)
        self.stats = EngineStats(threads=params.n_threads)
        self._seqs = [_Seq(i) for i in range(N_SEQ - len(_GRAVES))]
        # Cells taken: nothing frees one but a compaction (copies share theirs), so a count is enough.
        self._used = 0
        self._kept = 0  # cells the last compaction restored
        self._clock = 0
        self._cv = threading.Condition()
        self._incoming: list[Job] = []
        self._waiting: deque[Job] = deque()
        self._active: list[Job] = []
        self._worker: threading.Thread | None = None
        self._stopping = False

    # --- tokens and metadata (the vocabulary only: safe from any thread) ------------------

    def tokenize(self, text: str, *, add_bos: bool = True, special: bool = True) -> list[int]:
        """Tokens of a text: BOS added when the model wants one; special tokens parsed when `special`."""
        data = text.encode("utf-8")
        size = len(data) + 8
        while True:
            buf = (self.ll.llama_token * size)()
            n = self.ll.llama_tokenize(self.vocab, data, len(data), buf, size, add_bos, special)
            if n >= 0:
                return list(buf[:n])
            size = -n

    def tokenize_pieces(self, pieces: Sequence[Piece]) -> list[int]:
        """Tokens of a chat prompt: template text with its special tokens, message contents as plain text."""
        tokens: list[int] = []
        bos = self.token_text(self.ll.llama_vocab_bos(self.vocab))
        # The template writes its own BOS when it wants one; otherwise the model's default applies.
        add_bos = not (pieces and pieces[0].special and bos and pieces[0].text.startswith(bos))
        for i, piece in enumerate(pieces):
            tokens += self.tokenize(piece.text, add_bos=add_bos and i == 0, special=piece.special)
        return tokens

    def token_text(self, token: int) -> str:
        """A vocabulary entry's text ('' for none)."""
        if token < 0:
            return ""
        raw = self.ll.llama_vocab_get_text(self.vocab, token)
        return raw.decode("utf-8", "replace") if raw else ""

    def meta(self, key: str) -> str | None:
        """A GGUF metadata value as text, or None when the file lacks it."""
        size = 1 << 16
        while True:
            buf = ctypes.create_string_buffer(size)
            n = self.ll.llama_model_meta_val_str(self.model, key.encode(), buf, size)
            if n < 0:
                return None
            if n < size:
                return buf.value.decode("utf-8", "replace")
            size = n + 1

    def chat_template(self) -> ChatTemplate | None:
        """The GGUF's own chat template, or None when it has none."""
        source = self.meta("tokenizer.chat_template")
        if not source:
            return None
        return ChatTemplate(source, bos_token=self.token_text(self.ll.llama_vocab_bos(self.vocab)),
                            eos_token=self.token_text(self.ll.llama_vocab_eos(self.vocab)))

    def piece(self, token: int) -> bytes:
        """The bytes of one generated token (control tokens render empty)."""
        buf = ctypes.create_string_buffer(64)
        n = self.ll.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, False)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = self.ll.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, False)
        return buf.raw[:n]

    # --- jobs -------------------------------------------------------------------------------

    def complete(self, prompt: list[int], seeds: Sequence[int], max_tokens: int, temperature: float,
                 stop: Sequence[str] = (), grammar: bytes | None = None, logprobs: int | None = None,
                 on_text: Callable[[int, bytes], None] | None = None) -> Job:
        """Submit one completion of `prompt` per seed (constrained by a GBNF grammar when given; on_text: see Job)."""
        units = [_Sample(seed) for seed in seeds]
        job = Job(prompt, units, max_tokens=max_tokens, temperature=temperature,
                  stops=[s.encode("utf-8") for s in stop if s], grammar=grammar, logprobs=logprobs, on_text=on_text)
        return self._submit(job)

    def score(self, prompt: list[int], continuations: Sequence[list[int]]) -> Job:
        """Submit the scoring of each continuation (a list of tokens): its log-probability right after `prompt`."""
        longest = max(len(c) for c in continuations)
        if longest > N_BATCH // 2:
            raise ModelError(f"a choice of {longest} tokens is longer than the {N_BATCH // 2} this engine scores")
        return self._submit(Job(prompt, [_Choice(list(c)) for c in continuations]))

    def _submit(self, job: Job) -> Job:
        if not job.prompt:
            raise ModelError("the prompt is empty")
        need = len(job.prompt) + max(job.unit_room(u) for u in job.units) + 1
        if need > self.capacity:
            raise ModelError(f"a prompt of {len(job.prompt)} tokens and its reply need {need} KV cells; "
                             f"the context holds {self.capacity}")
        with self._cv:
            if self._stopping:
                raise ModelError("the model's engine is stopped (the process is exiting)")
            self._incoming.append(job)
            if self._worker is None or not self._worker.is_alive():  # a forked child has no worker
                self._worker = threading.Thread(target=self._serve, name="thoughtloom-llama", daemon=True)
                self._worker.start()
            self._cv.notify()
        return job

    def stop(self, timeout_s: float = 30.0) -> None:
        """End the worker after the step it is in and wait for it: call before the process exits.

        A daemon worker still inside llama_decode while the interpreter exits and frees the model
        crashes the process (seen as SIGSEGV on `loom serve`'s Ctrl-C). Jobs not finished stay so.
        """
        with self._cv:
            self._stopping = True
            self._cv.notify()
        worker = self._worker
        if worker is not None and worker is not threading.current_thread():
            worker.join(timeout_s)

    def close(self) -> None:
        """Stop the worker and free the context and the weights; no call works after it.

        The engines a process caches live as long as it does; close one built on its own (a test,
        a benchmark) so that its memory goes back. A worker that did not stop in time keeps them.
        """
        self.stop()
        worker = self._worker
        if (worker is not None and worker.is_alive()) or self.ctx is None:
            return
        self.ll.llama_batch_free(self.batch)
        self.ll.llama_free(self.ctx)
        self.ll.llama_model_free(self.model)
        self.ctx = self.model = None

    # --- the worker ---------------------------------------------------------------------------

    def _serve(self) -> None:
        while True:
            with self._cv:
                idle = not self._incoming and not self._waiting and not self._active
            if idle and self._used - self._kept > IDLE_COMPACT * self.capacity:
                try:
                    self._compact(0)
                except Exception as exc:  # noqa: BLE001 - the worker must outlive any one failure
                    self._reset(ModelError(f"compacting the cache failed: {one_line(exc)}"))
            with self._cv:
                while not self._incoming and not self._waiting and not self._active and not self._stopping:
                    self._cv.wait()
                if self._stopping:
                    return
                self._waiting.extend(self._incoming)
                self._incoming.clear()
            try:
                if not self._step():
                    self._stuck()
            except ModelError as exc:
                self._reset(exc)
            except Exception as exc:  # noqa: BLE001 - the worker must outlive any one failure
                self._reset(ModelError(f"generation failed: {one_line(exc)}"))

    def _step(self) -> bool:
        """Admit what fits, build one batch, decode it and act on its logits; False if there was nothing to decode."""
        self._drop_cancelled()
        self._admit()
        self._grow_groups()
        b = self.batch
        b.n_tokens = 0
        owners: set[int] = set()
        started: list[tuple[Job, list[Any], int]] = []
        for job in self._active:
            for unit in job.running:
                if isinstance(unit, _Sample) and unit.token is not None:
                    unit.row = self._add(unit.token, [unit.seq], True)
                    unit.room -= 1
                    job.reserved -= 1
                    unit.token = None
                    owners.add(id(job))
        for job in self._active:
            while job.groups and job.prefilled():
                group = job.groups[0]
                rows = 1 + sum(len(u.tokens) - 1 for u in group if isinstance(u, _Choice))
                if b.n_tokens + rows > N_BATCH:
                    break
                job.groups.pop(0)
                started.append((job, group, self._start_group(job, group)))
                owners.add(id(job))
        for job in self._active:
            seq = job.seq
            assert seq is not None
            left = len(job.prompt) - 1 - len(seq.tokens)
            room = N_BATCH - b.n_tokens
            if left <= 0 or room <= 0:
                continue
            start = len(seq.tokens)
            for pos in range(start, start + min(left, room)):
                self._add(job.prompt[pos], [seq], False)
            taken = min(left, room)
            job.reserved -= taken
            self.stats.prompt_evaluated += taken
            owners.add(id(job))
        if b.n_tokens == 0:
            return False
        self._decode(len(owners))
        for job, group, row in started:
            self._first_logits(job, group, row)
        for job in list(self._active):
            if not job.scoring:
                for unit in job.running:
                    if unit.row >= 0 and not unit.done:
                        self._sample(job, unit)
            job.running = [u for u in job.running if not u.done]
            if not job.running and not job.groups and not job.waiting:
                self._finish(job)
        return True

    def _add(self, token: int, seqs: list[Any], logits: bool) -> int:
        """Append one token to the batch for these sequences (one shared cell); return its row."""
        b = self.batch
        i = b.n_tokens
        b.token[i] = token
        b.pos[i] = len(seqs[0].tokens)
        b.n_seq_id[i] = len(seqs)
        for j, seq in enumerate(seqs):
            b.seq_id[i][j] = seq.id
            seq.tokens.append(token)
        b.logits[i] = logits
        b.n_tokens = i + 1
        self._used += 1
        return i

    def _decode(self, jobs: int) -> None:
        stats = self.stats
        threads = self._threads.threads(self.batch.n_tokens)
        if threads != stats.threads:
            self.ll.llama_set_n_threads(self.ctx, threads, threads)
            stats.threads = threads
            stats.thread_changes += 1
        t0 = time.perf_counter()
        rc = self.ll.llama_decode(self.ctx, self.batch)
        stats.decode_s += time.perf_counter() - t0
        if rc != 0:
            raise _DecodeError(rc)
        rows = self.batch.n_tokens
        stats.decode_calls += 1
        stats.decode_rows += rows
        stats.max_rows = max(stats.max_rows, rows)
        stats.max_jobs = max(stats.max_jobs, jobs)
        if jobs > 1:
            stats.shared_calls += 1

    # --- admission: sequences, cells, the prefix cache ------------------------------------------

    def _admit(self) -> None:
        """Start waiting jobs, first come first served, while their prompt and a first group of units fit."""
        while self._waiting:
            job = self._waiting[0]
            if job.cancelled.is_set() or job.future.cancelled():
                self._waiting.popleft()
                self._count_end(cancelled=True)
                continue
            prompt = job.prompt
            source, common = self._longest_prefix(prompt)
            # The last prompt token is always evaluated: its logits are the first sampling step's.
            common = min(common, len(prompt) - 1)
            if self._reserve_overall(job) > self.capacity:
                return  # wait: the jobs in flight must always be able to finish
            fixed = len(prompt) - common  # the rest of the prompt and its last token's cell
            group = self._fit_group(job, fixed, 1, source)
            if not group:
                if self._compact(fixed + job.unit_room(job.waiting[0])):
                    continue  # dead cells are free now: try again (the prefix may sit elsewhere)
                return
            self._waiting.popleft()
            if not job.future.set_running_or_notify_cancel():
                self._count_end(cancelled=True)  # its caller gave up just now
                continue
            self._active.append(job)
            job.seq = self._take_seq()
            if common:
                self._copy(source, job.seq, 0, common)
                self.stats.prompt_reused += common
            self.stats.prompt_tokens += len(prompt)
            job.reserved = fixed + sum(job.unit_room(u) for u in group)
            self._prepare(job, group)

    def _grow_groups(self) -> None:
        """Give jobs with units still waiting (more samples than fitted at first) a group each when it fits."""
        for job in list(self._active):
            if job.waiting and not job.groups and job.prefilled():
                group = self._fit_group(job, 1, 0, None)
                if not group and self._compact(1 + job.unit_room(job.waiting[0])):
                    group = self._fit_group(job, 1, 0, None)
                if group:
                    job.reserved += 1 + sum(job.unit_room(u) for u in group)
                    self._prepare(job, group)

    def _fit_group(self, job: Job, fixed: int, extra_seqs: int, keep: _Seq | None) -> list[Any]:
        """Take sequences (evicting slots if need be) for as many waiting units as fit; [] if none does."""
        units = list(job.waiting)
        cells = self._free_cells()
        seqs = sum(s.state == _FREE for s in self._seqs)
        # Evicting slots frees sequences, not cells (they go to the graveyard until compaction).
        evictable = sum(s.state == _SLOT and s is not keep for s in self._seqs)
        count = len(units)
        while count:
            group = units[:count]
            need = fixed + sum(job.unit_room(u) for u in group)
            rows = 1 + sum(len(u.tokens) - 1 for u in group if isinstance(u, _Choice))
            if rows <= N_BATCH // 2 and need <= cells and count + extra_seqs <= seqs + evictable:
                self._evict(keep, count + extra_seqs)
                return group
            count -= 1
        return []

    def _prepare(self, job: Job, group: list[Any]) -> None:
        """Give a group of units their sequences and samplers; they start once the prompt is in."""
        for unit in group:
            job.waiting.popleft()
            unit.seq = self._take_seq()
            if isinstance(unit, _Sample):
                unit.room = job.max_tokens - 1
                try:
                    unit.sampler = self._sampler(unit.seed, job.temperature, job.grammar)
                except ModelError as exc:
                    self._fail(job, exc)
                    return
        job.groups.append(group)

    def _start_group(self, job: Job, group: list[Any]) -> int:
        """Put the prompt's last token in the batch for a group (and the prompt sequence the first time); return its
        row."""
        seq = job.seq
        assert seq is not None
        last = len(job.prompt) - 1
        for unit in group:
            self._copy(seq, unit.seq, 0, last)
        seqs = [u.seq for u in group]
        if len(seq.tokens) == last:
            seqs.insert(0, seq)  # the prompt sequence keeps the whole prompt, for the cache
        row = self._add(job.prompt[last], seqs, True)
        job.reserved -= 1
        self.stats.prompt_evaluated += 1
        for unit in group:
            if isinstance(unit, _Choice):
                for token in unit.tokens[:-1]:
                    self._add(token, [unit.seq], True)
                job.reserved -= len(unit.tokens) - 1
                self.stats.choice_tokens += len(unit.tokens) - 1
            else:
                unit.row = row
        job.running.extend(group)
        return row

    def _first_logits(self, job: Job, group: list[Any], row: int) -> None:
        """Score a group of choices: the last prompt token's row, then each choice's own rows."""
        if not job.scoring:
            return
        first = self._log_softmax(row)
        next_row = row + 1
        for unit in group:
            logp = float(first[unit.tokens[0]])
            for token in unit.tokens[1:]:
                logp += float(self._log_softmax(next_row)[token])
                next_row += 1
            unit.logp = logp
            unit.done = True
            self._release_unit(unit)

    def _longest_prefix(self, prompt: list[int]) -> tuple[_Seq | None, int]:
        """The sequence (slot or prompt in flight) sharing the longest prefix with `prompt`, and its length."""
        best, best_n = None, 0
        for seq in self._seqs:
            if seq.state == _FREE or not seq.tokens or seq.tokens[0] != prompt[0]:
                continue
            if seq.state == _BUSY and not any(j.seq is seq for j in self._active):
                continue  # a sample's sequence: its prompt part is in its job's prompt sequence too
            n = _common(seq.tokens, prompt)
            if n > best_n or (n == best_n and best is not None and seq.used_at > best.used_at):
                best, best_n = seq, n
        # A sliding-window cache drops cells a sequence no longer sees; a copy needs the window
        # before its first new token.
        if best is not None and self.n_swa > 0 and best_n > 0 and \
                self.ll.llama_memory_seq_pos_min(self.memory, best.id) > max(0, best_n - self.n_swa):
            return None, 0
        if best is not None:
            self._clock += 1
            best.used_at = self._clock
        return best, best_n

    def _reserve_overall(self, job: Job) -> int:
        """Cells the jobs in flight plus this one would need if each kept its prompt and ran one unit."""
        def one(j: Job) -> int:
            return len(j.prompt) + 1 + max(j.unit_room(u) for u in j.units)

        return sum(one(j) for j in self._active) + one(job)

    def _take_seq(self) -> _Seq:
        seq = next(s for s in self._seqs if s.state == _FREE)
        seq.state = _BUSY
        return seq

    def _free_cells(self) -> int:
        """Cells no sequence holds and no job has been promised."""
        return self.capacity - self._used - sum(j.reserved for j in self._active)

    def _evict(self, keep: _Seq | None, seqs: int) -> None:
        """Drop slots, least recently used first, until `seqs` sequences are free."""
        slots = sorted((s for s in self._seqs if s.state == _SLOT and s is not keep), key=lambda s: s.used_at)
        free = sum(s.state == _FREE for s in self._seqs)
        for slot in slots[: max(0, seqs - free)]:
            self._release(slot)
            self.stats.evictions += 1

    def _compact(self, need: int) -> bool:
        """Free the graveyard's cells without leaving holes: save the sequences worth keeping, clear the
        pool, restore them contiguously. Only while no sample holds cells (theirs would be copies of a
        prompt, restored apart). Keeps the jobs' prompts and the most recently used slots that fit
        beside `need` more cells, one per prompt family. Returns whether any cell was freed."""
        ll = self.ll
        if any(u.seq is not None and u.seq.tokens for j in self._active for u in j.units):
            return False
        before = self._used
        prompts = [j.seq for j in self._active if j.seq is not None and j.seq.tokens]
        room = min(int(IDLE_COMPACT * self.capacity),
                   self._free_cells() + self._used - need - sum(len(p.tokens) for p in prompts))
        keep: list[_Seq] = []
        for slot in sorted((s for s in self._seqs if s.state == _SLOT), key=lambda s: -s.used_at):
            n = len(slot.tokens)
            # A slot that shares most of itself with a kept one is mostly a second copy of it.
            if n > room or any(2 * _common(slot.tokens, k.tokens) >= n for k in keep):
                self.stats.evictions += 1
                continue
            keep.append(slot)
            room -= n
        saved = []
        for seq in prompts + keep:
            size = ll.llama_state_seq_get_size(self.ctx, seq.id)
            buf = (ctypes.c_uint8 * size)()
            saved.append((seq, seq.tokens, buf, ll.llama_state_seq_get_data(self.ctx, buf, size, seq.id)))
        ll.llama_memory_clear(self.memory, False)
        self._used = 0
        for seq in self._seqs:
            if seq.state == _SLOT:
                seq.state = _FREE
            seq.tokens = []
        for seq, tokens, buf, size in saved:
            if size == 0 or ll.llama_state_seq_set_data(self.ctx, buf, size, seq.id) == 0:
                if seq.state == _FREE:
                    continue  # a slot: the cache is poorer, nothing is wrong
                raise ModelError("the KV cache could not be restored after compaction")
            seq.tokens = tokens
            if seq.state == _FREE:
                seq.state = _SLOT
            self._used += len(tokens)
        self.stats.compactions += 1
        self._kept = self._used
        return self._used < before

    def _copy(self, src: _Seq | None, dst: _Seq | None, p0: int, p1: int) -> None:
        """Make dst hold src's tokens p0..p1-1 after its own p0 tokens (cells shared, not duplicated)."""
        assert src is not None and dst is not None and len(dst.tokens) == p0
        if p1 <= p0:
            return
        self.ll.llama_memory_seq_cp(self.memory, src.id, dst.id, p0, p1)
        dst.tokens += src.tokens[p0:p1]

    def _release(self, seq: _Seq | None) -> None:
        """Empty a sequence; its cells stay taken, by the graveyard, until the next compaction.

        Freed cells would be holes that llama.cpp fills with the next tokens of other sequences,
        before cells those tokens follow. Two graveyards, because llama.cpp may reuse a cell
        only one sequence holds once it falls out of that sequence's sliding window.
        """
        assert seq is not None
        ll, mem = self.ll, self.memory
        if seq.tokens:
            for grave in _GRAVES:
                ll.llama_memory_seq_cp(mem, seq.id, grave, -1, -1)
            ll.llama_memory_seq_rm(mem, seq.id, -1, -1)
        seq.tokens = []
        seq.state = _FREE

    def _keep_as_slot(self, seq: _Seq) -> None:
        """A finished job's prompt sequence becomes a cache slot (unless a slot already holds as much)."""
        for other in self._seqs:
            if other.state == _SLOT and len(other.tokens) <= len(seq.tokens) and \
                    other.tokens == seq.tokens[: len(other.tokens)]:
                self._release(other)  # covered by this one
        if not seq.tokens:
            self._release(seq)
            return
        seq.state = _SLOT
        self._clock += 1
        seq.used_at = self._clock
        slots = sorted((s for s in self._seqs if s.state == _SLOT), key=lambda s: s.used_at)
        for old in slots[: max(0, len(slots) - MAX_SLOTS)]:
            self._release(old)
            self.stats.evictions += 1

    # --- sampling ---------------------------------------------------------------------------

    def _sampler(self, seed: int, temperature: float, grammar: bytes | None) -> Any:
        ll = self.ll
        chain = ll.llama_sampler_chain_init(ll.llama_sampler_chain_default_params())
        if grammar is not None:
            # First in the chain: tokens the grammar forbids are masked before anything is sampled.
            constraint = ll.llama_sampler_init_grammar(self.vocab, grammar, b"root")
            if not constraint:
                ll.llama_sampler_free(chain)
                raise ModelError("the reply schema's grammar did not compile")
            ll.llama_sampler_chain_add(chain, constraint)
        if temperature <= 0:
            ll.llama_sampler_chain_add(chain, ll.llama_sampler_init_greedy())
        else:
            ll.llama_sampler_chain_add(chain, ll.llama_sampler_init_top_k(TOP_K))
            ll.llama_sampler_chain_add(chain, ll.llama_sampler_init_top_p(TOP_P, 1))
            ll.llama_sampler_chain_add(chain, ll.llama_sampler_init_min_p(MIN_P, 1))
            ll.llama_sampler_chain_add(chain, ll.llama_sampler_init_temp(temperature))
            ll.llama_sampler_chain_add(chain, ll.llama_sampler_init_dist(seed & 0xFFFFFFFF))
        return chain

    def _sample(self, job: Job, unit: _Sample) -> None:
        """Sample a unit's next token from its row: the text grows, or the sample ends."""
        ll = self.ll
        row, unit.row = unit.row, -1
        token = ll.llama_sampler_sample(unit.sampler, self.ctx, row)
        unit.generated += 1
        job.generated += 1
        self.stats.generated += 1
        if job.logprobs is not None:
            unit.logprobs.append(self._token_logprob(row, token, job.logprobs))
        if ll.llama_vocab_is_eog(self.vocab, token):
            self._end_sample(job, unit, "stop")
            return
        before = len(unit.out)
        text = unit.out + self.piece(token)
        if job.stops:
            # Only where the new bytes could complete a stop string.
            start = max(0, before - job.longest_stop + 1)
            cut = min((i for i in (text.find(s, start) for s in job.stops) if i >= 0), default=-1)
            if cut >= 0:
                unit.out = text[:cut]
                self._end_sample(job, unit, "stop")
                return
        unit.out = text
        if job.on_text is not None:
            job.on_text(job.units.index(unit), text)
        if unit.generated >= job.max_tokens:
            self._end_sample(job, unit, "length")
        else:
            unit.token = token

    def _end_sample(self, job: Job, unit: _Sample, reason: str) -> None:
        unit.reason = reason
        unit.done = True
        job.reserved -= unit.room  # the cells it will not take
        unit.room = 0
        self._release_unit(unit)

    def _log_softmax(self, row: int) -> Any:
        """Log-probabilities of the next token at a batch row's logits."""
        import numpy as np

        ptr = self.ll.llama_get_logits_ith(self.ctx, row)
        logits = np.ctypeslib.as_array(ptr, shape=(self.n_vocab,)).astype(np.float64)
        top = logits.max()
        return logits - (top + np.log(np.exp(logits - top).sum()))

    def _token_logprob(self, row: int, token: int, k: int) -> TokenLogprob:
        import numpy as np

        lp = self._log_softmax(row)
        best = np.argpartition(-lp, k)[:k] if 0 < k < len(lp) else np.arange(0)
        best = best[np.argsort(-lp[best])]
        raw = self.piece(token)
        return TokenLogprob(raw.decode("utf-8", "replace"), float(lp[token]),
                            tuple((self.piece(int(t)).decode("utf-8", "replace"), float(lp[t])) for t in best), raw)

    # --- endings ------------------------------------------------------------------------------

    def _finish(self, job: Job) -> None:
        """Answer a job whose units are all done; its prompt sequence becomes a cache slot."""
        self._active.remove(job)
        assert job.seq is not None
        self._keep_as_slot(job.seq)
        self._count_end()
        if job.scoring:
            job.future.set_result([u.logp for u in job.units])
            return
        units: list[_Sample] = job.units
        # A token cut off by max_tokens can end inside a UTF-8 character: drop the partial bytes.
        job.future.set_result(Decoded(
            [u.out.decode("utf-8", "ignore") for u in units], job.generated, [u.reason for u in units],
            [tuple(u.logprobs) for u in units] if job.logprobs is not None else None))

    def _drop_cancelled(self) -> None:
        for job in [j for j in self._active if j.cancelled.is_set()]:
            self._close(job)
            self._count_end(cancelled=True)
            job.future.set_exception(ModelError("cancelled"))
        if any(j.cancelled.is_set() for j in self._waiting):
            for job in [j for j in self._waiting if j.cancelled.is_set()]:
                self._waiting.remove(job)
                self._count_end(cancelled=True)
                if job.future.set_running_or_notify_cancel():
                    job.future.set_exception(ModelError("cancelled"))

    def _release_unit(self, unit: Any) -> None:
        """Free what a unit holds: its sequence (and cells) and its sampler."""
        if unit.seq is not None:
            self._release(unit.seq)
            unit.seq = None
        if isinstance(unit, _Sample) and unit.sampler is not None:
            self.ll.llama_sampler_free(unit.sampler)
            unit.sampler = None

    def _close(self, job: Job) -> None:
        """Take a job out of the batch: its units' sequences are freed, its prompt kept as a slot."""
        self._active.remove(job)
        for unit in job.units:
            self._release_unit(unit)
        if job.seq is not None:
            self._keep_as_slot(job.seq)  # the part of the prompt read so far is still a valid prefix
            job.seq = None

    def _fail(self, job: Job, exc: ModelError) -> None:
        self._close(job)
        self._count_end(failed=True)
        job.future.set_exception(exc)

    def _reset(self, exc: ModelError) -> None:
        """After a failed step: clear the cache (its state is unknown) and fail the jobs in flight."""
        self.stats.resets += 1
        self.ll.llama_memory_clear(self.memory, True)
        for seq in self._seqs:
            seq.tokens, seq.state = [], _FREE
        self._used = self._kept = 0
        active, self._active = self._active, []
        for job in active:
            for unit in job.units:
                if isinstance(unit, _Sample) and unit.sampler is not None:
                    self.ll.llama_sampler_free(unit.sampler)
                    unit.sampler = None
            self._count_end(failed=True)
            if not job.future.done():
                job.future.set_exception(exc)

    def _stuck(self) -> None:
        """A step found nothing to decode: fail what cannot progress rather than spin."""
        if self._active:
            # Every job in flight always has a row to decode or a group that fits (admission
            # keeps room for one unit of each): this is a bug, not a state to wait out.
            raise ModelError("the engine found nothing to decode for the requests in flight")
        if not self._waiting:
            return
        # Nothing in flight, and the next job does not fit an empty cache: it never will.
        job = self._waiting.popleft()
        self._count_end(failed=True)
        if job.future.set_running_or_notify_cancel():
            job.future.set_exception(ModelError(
                f"a prompt of {len(job.prompt)} tokens and its reply do not fit the {self.capacity}-cell context"))

    def _count_end(self, *, cancelled: bool = False, failed: bool = False) -> None:
        self.stats.jobs += 1
        self.stats.cancelled += cancelled
        self.stats.failed += failed


class _DecodeError(ModelError):
    """llama_decode returned an error code."""

    def __init__(self, code: int) -> None:
        super().__init__(f"llama_decode failed with code {code}")
        self.code = code


def _common(a: list[int], b: list[int]) -> int:
    """Length of the common prefix of two token lists."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo] and a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid
    return lo
