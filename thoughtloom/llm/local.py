"""Embedded models run in-process by llama.cpp: the named ones (thoughtloom.llm.models) or any GGUF file.

Base models (Gemma 3 270M) follow completion text, so they get `Prompt.as_text()` and the request's
stop strings. Instruction-tuned models (Qwen2.5-Coder) get `Prompt.as_messages()` rendered with the
GGUF's own chat template, and their reply ends at the model's end-of-turn token: the completion
form's stop strings mark the end of a few-shot pattern and would cut an instruct model's reasoning
after its first paragraph, so chat replies ignore them. A request that pins its form
(GenerateRequest.form, as `loom serve` does) is read in that form, and its stop strings apply.

The n samples of a call share one evaluation of the prompt and are decoded together, one batch
per step (llama.cpp's low-level API with one sequence per sample). On a CPU this is several times
faster than n separate completions: each step reads the weights once for all samples.
"""

from __future__ import annotations

import asyncio
import ctypes
import functools
import logging
import os
import re
import secrets
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .chat_template import ChatTemplate, Piece
from .errors import ModelConfigError, ModelError
from .models import CMAKE_ARGS, DEFAULT_EMBEDDED, EMBEDDED_MODELS, EmbeddedModel, ensure_model, model_file
from .types import Completion, GenerateRequest, Prompt, TokenLogprob, Usage, choice_text

_INSTALL_HINT = (
    f"run `bash scripts/setup.sh`, or `CMAKE_ARGS=\"{CMAKE_ARGS}\" pip install 'thoughtloom[local]'`"
)
#: A GGUF file whose name or fine-tune tag says this is instruction-tuned is prompted through its
#: chat template (when it has one); `local:PATH#chat` / `#completions` decide explicitly.
_INSTRUCT = re.compile(r"instruct|chat|(?:^|[-_ .])it(?:$|[-_ .])", re.IGNORECASE)

# Samples decoded side by side; more than this are decoded in groups.
MAX_PARALLEL = 8
# Tokens per llama_decode call while evaluating a prompt.
N_BATCH = 512
# Sampling chain of llama-cpp-python's create_completion defaults, which suit this base model.
TOP_K, TOP_P, MIN_P = 40, 0.95, 0.05

# llama.cpp logs to stderr, and llama-cpp-python's verbose=False filter uses a stale level table
# (ggml renumbered its levels), so warnings would leak into the CLI's output. Route them to a
# logger that is silent unless the application configures it.
log = logging.getLogger("thoughtloom.llama_cpp")
log.addHandler(logging.NullHandler())
log.propagate = False
_GGML_LEVELS = {1: logging.DEBUG, 2: logging.INFO, 3: logging.WARNING, 4: logging.ERROR}
_log_callback: Any = None  # kept referenced: llama.cpp calls it long after installation
_last_level = logging.DEBUG


def _install_log_callback(llama_cpp: Any) -> None:
    global _log_callback
    if _log_callback is not None:
        return

    def forward(level: int, text: bytes, _user_data: Any) -> None:
        global _last_level
        # Level 5 continues the previous message.
        _last_level = _GGML_LEVELS.get(level, _last_level if level == 5 else logging.DEBUG)
        if log.isEnabledFor(_last_level):
            log.log(_last_level, "%s", text.decode("utf-8", "replace").rstrip())

    _log_callback = llama_cpp.llama_log_callback(forward)
    llama_cpp.llama_log_set(_log_callback, ctypes.c_void_p(0))


def _import_llama_cpp() -> Any:
    try:
        import llama_cpp
    except ImportError as exc:
        raise ModelConfigError(
            f"the embedded model needs llama-cpp-python ({exc}): {_INSTALL_HINT}"
        ) from None
    _install_log_callback(llama_cpp)
    return llama_cpp


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


# Loading costs a second or two and hundreds of MB, and every backend instance (one per run, per
# CLI command, per test) wants the same weights, so the process keeps one engine per
# (path, n_ctx, n_threads). This is a resource cache, not shared program state: entries are never
# replaced, and the lock only stops two threads from loading the same file twice.
_ENGINES: dict[tuple[str, int, int], _Engine] = {}
_ENGINES_LOCK = threading.Lock()
# Named model files verified in this process (by model and cache file): once per process is enough.
_VERIFIED: set[tuple[str, str]] = set()


def embedded_model_path(model: EmbeddedModel, progress: Callable[[str], None] | None = None) -> str:
    """Path of a named embedded model's verified GGUF, assembled or downloaded on first use."""
    with _ENGINES_LOCK:
        key = (model.name, str(model_file(model)))
        if key not in _VERIFIED:
            ensure_model(model, progress)
            _VERIFIED.add(key)
        return key[1]


def _engine(path: str, n_ctx: int, n_threads: int) -> _Engine:
    key = (path, n_ctx, n_threads)
    with _ENGINES_LOCK:
        engine = _ENGINES.get(key)
        if engine is None:
            engine = _ENGINES[key] = _Engine(_import_llama_cpp(), path, n_ctx, n_threads)
        return engine


class _Engine:
    """One llama.cpp model and context, and what its KV cache holds."""

    def __init__(self, llama_cpp: Any, path: str, n_ctx: int, n_threads: int) -> None:
        ll = self.ll = llama_cpp
        ll.llama_backend_init()
        self.model = ll.llama_model_load_from_file(path.encode(), ll.llama_model_default_params())
        if not self.model:
            raise ModelConfigError(f"llama.cpp could not load {path} (not a GGUF model it supports?)")
        self.vocab = ll.llama_model_get_vocab(self.model)
        self.n_vocab = ll.llama_vocab_n_tokens(self.vocab)
        self.n_ctx = n_ctx
        # Samples share the prompt's KV cells and each adds its own tokens, so the cache holds two
        # windows: parallel samples fit unless the prompt is long (then they run in groups).
        self.kv_cells = 2 * n_ctx
        params = ll.llama_context_default_params()
        params.n_ctx = self.kv_cells
        params.n_batch = params.n_ubatch = N_BATCH
        params.n_seq_max = MAX_PARALLEL
        params.kv_unified = True  # one cell pool: a shared prompt is stored once for all samples
        params.swa_full = True  # Gemma 3's sliding-window layers must keep old cells for prefix reuse
        params.n_threads = params.n_threads_batch = n_threads
        self.ctx = ll.llama_init_from_model(self.model, params)
        if not self.ctx:
            raise ModelConfigError(f"llama.cpp could not create a {self.kv_cells}-token context for {path}")
        self.memory = ll.llama_get_memory(self.ctx)
        self.batch = ll.llama_batch_init(N_BATCH, 0, MAX_PARALLEL)
        # The prompt whose KV cells sequence 0 holds at positions 0..len-1.
        self.cached: list[int] = []
        # llama.cpp's context is not thread-safe: one decode at a time.
        self.lock = threading.Lock()

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

    def looks_instruct(self) -> bool:
        """Whether the file's metadata names an instruction-tuned model."""
        return any(_INSTRUCT.search(self.meta(k) or "") for k in ("general.finetune", "general.name"))

    def piece(self, token: int) -> bytes:
        """The bytes of one generated token (control tokens render empty)."""
        buf = ctypes.create_string_buffer(64)
        n = self.ll.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, False)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = self.ll.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, False)
        return buf.raw[:n]

    def complete(
        self,
        prompt: list[int],
        seeds: Sequence[int],
        max_tokens: int,
        temperature: float,
        stop: Sequence[str],
        cancelled: threading.Event,
        grammar: bytes | None = None,
        logprobs: int | None = None,
    ) -> Decoded:
        """One completion of `prompt` per seed (constrained by a GBNF grammar when given)."""
        # Cells per group: the prompt once plus max_tokens per sample.
        group = max(1, min(MAX_PARALLEL, (self.kv_cells - len(prompt)) // max_tokens))
        done = Decoded([], 0, [], [] if logprobs is not None else None)
        stops = [s.encode("utf-8") for s in stop if s]
        for start in range(0, len(seeds), group):
            if cancelled.is_set():
                break
            done.extend(self._complete_group(
                prompt, seeds[start : start + group], max_tokens, temperature, stops, cancelled, grammar, logprobs
            ))
        return done

    def score(self, prompt: list[int], continuations: Sequence[list[int]]) -> list[float]:
        """The log-probability of each continuation (a list of tokens) right after `prompt`."""
        first = self._log_softmax(self._load_prompt(prompt, 1))
        out = [float(first[c[0]]) for c in continuations]
        # Longer continuations: each in a sequence of its own that shares the prompt's cells,
        # MAX_PARALLEL at a time, one decode for all their tokens but the last.
        longer = [i for i, c in enumerate(continuations) if len(c) > 1]
        ll, mem, n = self.ll, self.memory, len(prompt)
        for start in range(0, len(longer), MAX_PARALLEL):
            group = longer[start : start + MAX_PARALLEL]
            for s in range(1, len(group)):
                ll.llama_memory_seq_rm(mem, s, -1, -1)
                ll.llama_memory_seq_cp(mem, 0, s, 0, n)
            self.batch.n_tokens = 0
            rows: list[list[int]] = []
            for s, i in enumerate(group):
                cont = continuations[i]
                rows.append([self._add(t, n + j, [s], True) for j, t in enumerate(cont[:-1])])
            self._decode()
            for s, i in enumerate(group):
                cont = continuations[i]
                out[i] += sum(float(self._log_softmax(row)[t]) for row, t in zip(rows[s], cont[1:]))
            for s in range(len(group)):
                ll.llama_memory_seq_rm(mem, s, n, -1)
        return out

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

    def _decode(self) -> None:
        rc = self.ll.llama_decode(self.ctx, self.batch)
        if rc != 0:
            self.cached = []  # the cache state is unknown after a failed decode
            self.ll.llama_memory_clear(self.memory, True)
            raise ModelError(f"llama_decode failed with code {rc}")

    def _add(self, token: int, pos: int, seqs: range | list[int], logits: bool) -> int:
        b = self.batch
        i = b.n_tokens
        b.token[i] = token
        b.pos[i] = pos
        b.n_seq_id[i] = len(seqs)
        for j, s in enumerate(seqs):
            b.seq_id[i][j] = s
        b.logits[i] = logits
        b.n_tokens = i + 1
        return i

    def _load_prompt(self, prompt: list[int], n_seqs: int) -> int:
        """Make sequences 0..n_seqs-1 hold the prompt; return the batch index of its last logits."""
        ll, mem = self.ll, self.memory
        common = 0
        for a, b in zip(self.cached, prompt):
            if a != b:
                break
            common += 1
        # Re-evaluate at least the last prompt token: its logits are the first sampling step's.
        common = min(common, len(prompt) - 1)
        for s in range(1, MAX_PARALLEL):
            ll.llama_memory_seq_rm(mem, s, -1, -1)
        if not ll.llama_memory_seq_rm(mem, 0, common, -1):
            ll.llama_memory_clear(mem, True)
            common = 0
        self.cached = []
        for s in range(1, n_seqs):
            ll.llama_memory_seq_cp(mem, 0, s, 0, common)
        seqs = range(n_seqs)
        last = 0
        for chunk in range(common, len(prompt), N_BATCH):
            self.batch.n_tokens = 0
            end = min(chunk + N_BATCH, len(prompt))
            for pos in range(chunk, end):
                last = self._add(prompt[pos], pos, seqs, pos == len(prompt) - 1)
            self._decode()
        self.cached = list(prompt)
        return last

    def _sampler(self, seed: int, temperature: float, grammar: bytes | None = None) -> Any:
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

    def _complete_group(
        self,
        prompt: list[int],
        seeds: Sequence[int],
        max_tokens: int,
        temperature: float,
        stops: list[bytes],
        cancelled: threading.Event,
        grammar: bytes | None = None,
        logprobs: int | None = None,
    ) -> Decoded:
        ll = self.ll
        n = len(seeds)
        logits_at = [self._load_prompt(prompt, n)] * n  # all samples start from the prompt's logits
        samplers = [self._sampler(seed, temperature, grammar) for seed in seeds]
        out = [b""] * n
        reasons = ["length"] * n
        tokens: list[list[TokenLogprob]] = [[] for _ in range(n)]
        generated = 0
        active = list(range(n))
        try:
            for step in range(max_tokens):
                if cancelled.is_set():
                    break
                self.batch.n_tokens = 0
                still: list[int] = []
                for s in active:
                    token = ll.llama_sampler_sample(samplers[s], self.ctx, logits_at[s])
                    generated += 1
                    if logprobs is not None:
                        tokens[s].append(self._token_logprob(logits_at[s], token, logprobs))
                    if ll.llama_vocab_is_eog(self.vocab, token):
                        reasons[s] = "stop"
                        continue
                    text = out[s] + self.piece(token)
                    cut = min((i for i in (text.find(x) for x in stops) if i >= 0), default=-1)
                    if cut >= 0:
                        out[s] = text[:cut]
                        reasons[s] = "stop"
                        continue
                    out[s] = text
                    if step + 1 < max_tokens:
                        logits_at[s] = self._add(token, len(prompt) + step, [s], True)
                        still.append(s)
                active = still
                if not active:
                    break
                self._decode()
        finally:
            for sampler in samplers:
                ll.llama_sampler_free(sampler)
        # A token cut off by max_tokens can end inside a UTF-8 character: drop the partial bytes.
        return Decoded([b.decode("utf-8", "ignore") for b in out], generated, reasons,
                       [tuple(t) for t in tokens] if logprobs is not None else None)


@dataclass(slots=True)
class Decoded:
    """What one engine call produced: a text, a finish reason and (when asked) token logprobs per sample."""

    texts: list[str]
    generated: int
    reasons: list[str]
    logprobs: list[tuple[TokenLogprob, ...]] | None

    def extend(self, more: Decoded) -> None:
        """Append another group's samples."""
        self.texts += more.texts
        self.generated += more.generated
        self.reasons += more.reasons
        if self.logprobs is not None and more.logprobs is not None:
            self.logprobs += more.logprobs


class LocalLlamaBackend:
    """A Backend that runs a GGUF model in-process: a named embedded model (default) or a file.

    chat: prompt with the chat template (True), with completion text (False), or decide from the
    file (None: named models say; a file is chat when it has a chat template and its metadata
    names an instruct model).
    """

    # llama.cpp's context is not thread-safe and decoding is CPU-bound: a second call in flight
    # would only queue on the lock (the n samples of one call already run in parallel).
    max_concurrency: int = 1
    #: score_choices requests are answered from the model's next-token distribution.
    scores_choices: bool = True

    def __init__(
        self,
        model_path: str | None = None,
        *,
        embedded: EmbeddedModel | None = None,
        chat: bool | None = None,
        n_ctx: int | None = None,
        n_threads: int | None = None,
        name: str | None = None,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        if n_ctx is not None and n_ctx < 16:
            raise ValueError(f"n_ctx must be >= 16, got {n_ctx}")
        if model_path is not None and embedded is not None:
            raise ValueError("give a model file or a named embedded model, not both")
        if model_path is not None and not Path(model_path).is_file():
            raise ModelConfigError(f"model file not found: {model_path}")
        if model_path is None and embedded is None:
            embedded = EMBEDDED_MODELS[DEFAULT_EMBEDDED]
        self.model_path = model_path
        self.embedded = embedded
        self.n_ctx = n_ctx or (embedded.n_ctx if embedded is not None else 4096)
        self.n_threads = n_threads or os.cpu_count() or 1
        self.name = name or (f"local:{embedded.name}" if embedded is not None else f"local:{Path(model_path or '').stem}")
        self._chat = embedded.chat if chat is None and embedded is not None else chat
        self._progress = progress
        self._engine_: _Engine | None = None
        self._template: ChatTemplate | None = None

    def _engine(self) -> _Engine:
        # Deferred to first use so that importing thoughtloom and `loom --help` stay fast.
        if self._engine_ is None:
            if self.embedded is not None:
                path = embedded_model_path(self.embedded, self._progress)
            else:
                assert self.model_path is not None
                path = self.model_path
            engine = _engine(str(Path(path).resolve()), self.n_ctx, self.n_threads)
            template = engine.chat_template()
            if self._chat is None:
                self._chat = template is not None and engine.looks_instruct()
            if self._chat and template is None:
                raise ModelConfigError(f"{self.name} has no chat template in its GGUF file; "
                                       f"use it as a base model (local:PATH#completions)")
            self._template = template if self._chat else None
            self._engine_ = engine
        return self._engine_

    @property
    def chat(self) -> bool:
        """Whether prompts go through the chat template (loads the model if that is not yet known)."""
        if self._chat is None:
            self._engine()
        return bool(self._chat)

    @property
    def prompt_form(self) -> str:
        """"chat" or "text": which form of a Prompt this backend reads (see the Backend protocol)."""
        return "chat" if self.chat else "text"

    def load(self) -> None:
        """Load the model now (otherwise it loads on the first call)."""
        self._engine()

    def prompt_tokens(self, prompt: Prompt, form: str | None = None) -> list[int]:
        """The tokens this model reads for a prompt: the chat template's rendering, or the completion text.

        form: "text" or "chat" reads that form whatever the model's own (see GenerateRequest.form).
        """
        engine = self._engine()
        if self._reads_chat(form):
            assert self._template is not None
            return engine.tokenize_pieces(self._template.pieces(prompt.as_messages()))
        return engine.tokenize(prompt.as_text())

    def _reads_chat(self, form: str | None) -> bool:
        """Whether a request of this form goes through the chat template."""
        self._engine()
        if form == "chat" and self._template is None:
            raise ModelError(f"{self.name} reads completion text (it has no chat template here); "
                             "ask it in the text form")
        return self._template is not None if form is None else form == "chat"

    def count_tokens(self, prompt: Prompt) -> int:
        """Exact prompt token count with the model's tokenizer (loads the model if needed)."""
        # Tokenizing reads only the vocabulary, never the context, so it needs no lock.
        return len(self.prompt_tokens(prompt))

    async def generate(self, request: GenerateRequest) -> Completion:
        """Return request.n samples, decoded side by side from one evaluation of the prompt."""
        engine = self._engine()
        cancelled = threading.Event()
        try:
            return await asyncio.to_thread(self._generate_blocking, engine, request, cancelled)
        except asyncio.CancelledError:
            # The worker thread cannot be killed; make it stop at the next token so the lock frees
            # quickly for the next call.
            cancelled.set()
            raise

    def _generate_blocking(
        self, engine: _Engine, request: GenerateRequest, cancelled: threading.Event
    ) -> Completion:
        prompt = self.prompt_tokens(request.prompt, request.form)
        if len(prompt) + request.max_tokens > self.n_ctx:
            raise ModelError(
                f"{self.name}: prompt of {len(prompt)} tokens plus max_tokens={request.max_tokens} "
                f"exceeds the {self.n_ctx}-token context; shorten the prompt, lower max_tokens or raise n_ctx"
            )
        if request.score_choices:
            return self._score_blocking(engine, request, prompt)
        # Chat replies end at the end-of-turn token; a task's stop strings belong to the text form.
        # A caller that pinned the form wrote its stop strings for that form, so they apply.
        stop = () if self._template is not None and request.form is None else request.stop
        # Unseeded calls get a fresh random base seed so that repeated calls differ too.
        base = request.seed if request.seed is not None else secrets.randbits(31)
        seeds = [base + i for i in range(request.n)]
        grammar = (_choice_grammar(request.choices) if request.choices
                   else _grammar(request.schema) if request.schema is not None else None)
        with engine.lock:
            try:
                done = engine.complete(prompt, seeds, request.max_tokens, request.temperature, stop, cancelled,
                                       grammar, request.logprobs)
            except ModelError as exc:
                raise ModelError(f"{self.name}: {exc}") from exc
            except Exception as exc:
                raise ModelError(f"{self.name}: generation failed: {_one_line(exc)}") from exc
        # The prompt is reported once per call, not once per sample: it is evaluated once for all
        # samples (like a hosted API's `n`), and the gateway reserves it once. Output tokens are
        # every token sampled, including an end-of-text token and one that completed a stop string.
        return Completion(tuple(done.texts), Usage(len(prompt), done.generated), self.name,
                          tuple(done.logprobs) if done.logprobs is not None else None, tuple(done.reasons))

    def choice_tokens(self, prompt: Prompt, choices: Sequence[str], form: str | None = None) -> list[list[int]]:
        """The tokens each choice adds when it is the reply to `prompt` (read in `form`, see prompt_tokens)."""
        engine = self._engine()
        if self._reads_chat(form):
            return [engine.tokenize(c, add_bos=False, special=False) or [engine.ll.llama_vocab_eos(engine.vocab)]
                    for c in choices]
        text = prompt.as_text()
        head = engine.tokenize(text)
        out = []
        for choice in choices:
            # Tokenized with the prompt, so a choice gets the tokens the model would produce there.
            whole = engine.tokenize(text + choice)
            tail = whole[len(head):] if whole[: len(head)] == head else engine.tokenize(choice, add_bos=False)
            out.append(tail or engine.tokenize(choice, add_bos=False))
        return out

    def _score_blocking(self, engine: _Engine, request: GenerateRequest, prompt: list[int]) -> Completion:
        continuations = self.choice_tokens(request.prompt, request.choices, request.form)
        if any(not c for c in continuations):
            raise ModelError(f"{self.name}: a choice is empty; every choice must have some text")
        longest = max(len(c) for c in continuations)
        if len(prompt) + longest > self.n_ctx:
            raise ModelError(f"{self.name}: prompt of {len(prompt)} tokens plus a {longest}-token choice "
                             f"exceeds the {self.n_ctx}-token context; shorten the prompt or raise n_ctx")
        with engine.lock:
            try:
                logps = engine.score(prompt, continuations)
            except ModelError as exc:
                raise ModelError(f"{self.name}: {exc}") from exc
            except Exception as exc:
                raise ModelError(f"{self.name}: scoring failed: {_one_line(exc)}") from exc
        # Every choice token is evaluated like prompt text; nothing is sampled.
        read = len(prompt) + sum(len(c) for c in continuations)
        return Completion((choice_text(dict(zip(request.choices, logps))),), Usage(read, 0), self.name, None, ("stop",))

    async def aclose(self) -> None:
        """Nothing to release: the model stays cached for the rest of the process."""


@functools.lru_cache(maxsize=64)
def _grammar(schema: str) -> bytes | None:
    """A reply schema as a llama.cpp GBNF grammar (converted once per schema); None if it cannot be expressed.

    Without a grammar the reply is generated freely: whoever asked for the schema still checks
    the reply, so an inexpressible schema costs the guarantee, not the call.
    """
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    try:
        return json_schema_to_gbnf(schema).encode("utf-8")
    except Exception as exc:  # noqa: BLE001 - the converter raises bare exceptions for schemas it cannot express
        logging.getLogger(__name__).info("reply schema not enforced: %s", _one_line(exc))
        return None


def _choice_grammar(choices: Sequence[str]) -> bytes:
    """A GBNF grammar whose only sentences are the choices."""
    def literal(text: str) -> str:
        return '"' + "".join(c if c.isalnum() or c in " +-*/=().,:;_" else f"\\x{ord(c):02x}" if ord(c) < 0x80
                             else c for c in text) + '"'

    return ("root ::= " + " | ".join(literal(c) for c in dict.fromkeys(choices))).encode("utf-8")
