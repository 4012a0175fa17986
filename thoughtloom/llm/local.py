"""Embedded models run in-process by llama.cpp: the named ones (thoughtloom.llm.models) or any GGUF file.

Base models (Gemma 3 270M) follow completion text, so they get `Prompt.as_text()` and the request's
stop strings. Instruction-tuned models (Qwen2.5-Coder) get `Prompt.as_messages()` rendered with the
GGUF's own chat template, and their reply ends at the model's end-of-turn token: the completion
form's stop strings mark the end of a few-shot pattern and would cut an instruct model's reasoning
after its first paragraph, so chat replies ignore them. A request that pins its form
(GenerateRequest.form, as `loom serve` does) is read in that form, and its stop strings apply.

Calls run on the model's engine (thoughtloom.llm.llama_engine): one worker thread decodes every
call in flight together, one batch per step, and keeps the prompts it has read in a prefix cache,
so the backend takes several calls at once (max_concurrency) and a prompt that starts like an
earlier one is read only from where they differ.
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
from dataclasses import replace
from pathlib import Path
from typing import Any

from .budget import FREE
from .chat_template import ChatTemplate
from .errors import ModelConfigError, ModelError
from .llama_engine import Engine, Job, one_line
from .models import (
    CMAKE_ARGS,
    DEFAULT_EMBEDDED,
    EMBEDDED_MODELS,
    EmbeddedModel,
    ensure_model,
    model_file,
)
from .streaming import Deltas, TextSink
from .threads import thread_policy
from .types import Capabilities, Completion, GenerateRequest, Prompt, Usage, choice_text

_INSTALL_HINT = (
    f"run `bash scripts/setup.sh`, or `CMAKE_ARGS=\"{CMAKE_ARGS}\" pip install 'thoughtloom[local]'`"
)
#: A GGUF file whose name or fine-tune tag says this is instruction-tuned is prompted through its
#: chat template (when it has one); `local:PATH#chat` / `#completions` decide explicitly.
_INSTRUCT = re.compile(r"instruct|chat|(?:^|[-_ .])it(?:$|[-_ .])", re.IGNORECASE)

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


#: How long llama.cpp's OpenMP threads spin at a barrier before they sleep (libgomp's own default,
#: 300,000 turns, is milliseconds): with a busy neighbour, threads spinning for one that was
#: descheduled made a completion 2.6x slower; this many turns cost nothing measurable when idle.
OMP_SPIN = "10000"


def _import_llama_cpp() -> Any:
    # Read by libgomp once, when llama.cpp's CPU backend loads it: setdefault leaves a user's choice.
    os.environ.setdefault("GOMP_SPINCOUNT", OMP_SPIN)
    try:
        import llama_cpp
    except ImportError as exc:
        raise ModelConfigError(
            f"the embedded model needs llama-cpp-python ({exc}): {_INSTALL_HINT}"
        ) from None
    _install_log_callback(llama_cpp)
    return llama_cpp


# Loading costs a second or two and hundreds of MB, and every backend instance (one per run, per
# CLI command, per test) wants the same weights, so the process keeps one engine per
# (path, n_ctx, thread setting; None adapts to the load). This is a resource cache, not shared
# program state: entries are never replaced, and the lock only stops two threads from loading the
# same file twice.
_ENGINES: dict[tuple[str, int, int | None], Engine] = {}
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


def _engine(path: str, n_ctx: int, n_threads: int | None) -> Engine:
    key = (path, n_ctx, n_threads)
    with _ENGINES_LOCK:
        engine = _ENGINES.get(key)
        if engine is None:
            engine = _ENGINES[key] = Engine(_import_llama_cpp(), path, n_ctx, thread_policy(n_threads))
        return engine


def _looks_instruct(engine: Engine) -> bool:
    """Whether the file's metadata names an instruction-tuned model."""
    return any(_INSTRUCT.search(engine.meta(k) or "") for k in ("general.finetune", "general.name"))


def _local_capabilities(prompt_form: str) -> Capabilities:
    # score_choices requests are answered from the model's next-token distribution, samples keep to a
    # request's choices (a grammar of them); tools go through the text protocol (no function-call format).
    # An in-process model costs no dollars, so a dollar budget holds (and a cost is never unknown).
    return Capabilities(prompt_form=prompt_form, scores_choices=True, follows_choices=True, pricing=FREE)


_CHAT_CAPABILITIES = _local_capabilities("chat")
_TEXT_CAPABILITIES = _local_capabilities("text")


class LocalLlamaBackend:
    """A Backend that runs a GGUF model in-process: a named embedded model (default) or a file.

    chat: prompt with the chat template (True), with completion text (False), or decide from the
    file (None: named models say; a file is chat when it has a chat template and its metadata
    names an instruct model). n_threads: CPU threads llama.cpp computes with; None follows the
    machine's load, decode by decode (thoughtloom.llm.threads).
    """

    # Calls in flight are decoded together by the engine's worker, one batch per step; a few
    # calls fill a batch (each brings n samples), more would only wait in its queue.
    max_concurrency: int = 8

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
        stream: bool = True,
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
        if n_threads is not None and n_threads < 1:
            raise ValueError(f"n_threads must be >= 1, got {n_threads}")
        self.n_threads = n_threads
        self.name = name or (
            f"local:{embedded.name}" if embedded is not None else f"local:{Path(model_path or '').stem}"
        )
        self._chat = embedded.chat if chat is None and embedded is not None else chat
        self._progress = progress
        #: Hand a watched request (GenerateRequest.on_text) its samples' text token by token (coalesced).
        self.stream = stream
        self._engine_: Engine | None = None
        self._template: ChatTemplate | None = None

    def _engine(self) -> Engine:
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
                self._chat = template is not None and _looks_instruct(engine)
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
    def capabilities(self) -> Capabilities:
        """What the embedded model does (knowing its prompt form loads the model if that is not yet known)."""
        known = _CHAT_CAPABILITIES if self.chat else _TEXT_CAPABILITIES
        return replace(known, streams=True) if self.stream else known

    def stop(self) -> None:
        """Stop the model's engine (its worker thread) before the process exits; no call works after it."""
        if self._engine_ is not None:
            self._engine_.stop()

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
        # Tokenizing reads only the vocabulary, never the context: it runs in the caller's thread
        # while the engine's worker decodes.
        return len(self.prompt_tokens(prompt))

    def engine_stats(self) -> dict[str, int | float]:
        """The engine's counters (prompt tokens evaluated and reused, decode calls, ...; see EngineStats).

        Cumulative since the model was loaded, and shared by every backend on the same model file,
        context size and thread count: subtract two snapshots to measure a span.
        """
        return self._engine().stats.snapshot()

    async def generate(self, request: GenerateRequest) -> Completion:
        """Return request.n samples, decoded together with any other calls in flight."""
        engine = self._engine()
        prompt = self.prompt_tokens(request.prompt, request.form)
        if len(prompt) + request.max_tokens > self.n_ctx:
            raise ModelError(
                f"{self.name}: prompt of {len(prompt)} tokens plus max_tokens={request.max_tokens} "
                f"exceeds the {self.n_ctx}-token context; shorten the prompt, lower max_tokens or raise n_ctx"
            )
        if request.score_choices:
            return await self._score(engine, request, prompt)
        # Chat replies end at the end-of-turn token; a task's stop strings belong to the text form.
        # A caller that pinned the form wrote its stop strings for that form, so they apply.
        stop = () if self._template is not None and request.form is None else request.stop
        # Unseeded calls get a fresh random base seed so that repeated calls differ too.
        base = request.seed if request.seed is not None else secrets.randbits(31)
        seeds = [base + i for i in range(request.n)]
        grammar = (_choice_grammar(request.choices) if request.choices
                   else _grammar(request.schema) if request.schema is not None else None)
        watch = _Watch(request.on_text, stop, request.n) if self.stream and request.on_text is not None else None
        try:
            done = await self._run(lambda: engine.complete(prompt, seeds, request.max_tokens, request.temperature,
                                                           stop, grammar, request.logprobs,
                                                           watch.post if watch else None), "generation")
            if watch is not None:
                watch.finish(done.texts)
        finally:
            if watch is not None:
                watch.close()
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

    async def _run(self, submit: Callable[[], Job], what: str) -> Any:
        """Submit a job to the engine and wait for it; a cancelled caller stops it at the next step."""
        try:
            job = submit()
            waiting = asyncio.wrap_future(job.future)
        except ModelError as exc:
            raise ModelError(f"{self.name}: {exc}") from None
        try:
            return await waiting
        except asyncio.CancelledError:
            job.cancel()
            raise
        except ModelError as exc:
            raise ModelError(f"{self.name}: {exc}") from None
        except Exception as exc:
            raise ModelError(f"{self.name}: {what} failed: {one_line(exc)}") from exc

    async def _score(self, engine: Engine, request: GenerateRequest, prompt: list[int]) -> Completion:
        continuations = self.choice_tokens(request.prompt, request.choices, request.form)
        if any(not c for c in continuations):
            raise ModelError(f"{self.name}: a choice is empty; every choice must have some text")
        longest = max(len(c) for c in continuations)
        if len(prompt) + longest > self.n_ctx:
            raise ModelError(f"{self.name}: prompt of {len(prompt)} tokens plus a {longest}-token choice "
                             f"exceeds the {self.n_ctx}-token context; shorten the prompt or raise n_ctx")
        logps = await self._run(lambda: engine.score(prompt, continuations), "scoring")
        # Every choice token is evaluated like prompt text; nothing is sampled.
        read = len(prompt) + sum(len(c) for c in continuations)
        return Completion(
            (choice_text(dict(zip(request.choices, logps, strict=True))),), Usage(read, 0), self.name, None, ("stop",)
        )

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
        logging.getLogger(__name__).info("reply schema not enforced: %s", one_line(exc))
        return None


def _choice_grammar(choices: Sequence[str]) -> bytes:
    """A GBNF grammar whose only sentences are the choices."""
    def literal(text: str) -> str:
        return '"' + "".join(c if c.isalnum() or c in " +-*/=().,:;_" else f"\\x{ord(c):02x}" if ord(c) < 0x80
                             else c for c in text) + '"'

    return ("root ::= " + " | ".join(literal(c) for c in dict.fromkeys(choices))).encode("utf-8")


class _Watch:
    """A watched request's text, token by token: the engine's worker thread posts each sample's bytes so far
    (`post`), and this event loop hands the new text on, coalesced. What is shown stops short of what a stop
    string may still cut and of a character not yet whole; `finish` shows the rest of the final texts."""

    def __init__(self, sink: TextSink, stop: Sequence[str], n: int) -> None:
        self.deltas = Deltas(sink)
        self.loop = asyncio.get_running_loop()
        self.hold = max((len(s.encode()) for s in stop if s), default=1) - 1
        self.shown = [""] * n
        self.open = True

    def post(self, sample: int, out: bytes) -> None:
        """In the engine's worker thread: a sample's text grew to `out`."""
        try:
            self.loop.call_soon_threadsafe(self._grown, sample, out)
        except RuntimeError:
            pass  # the loop is closed: nobody watches any more, and the worker must go on

    def _grown(self, sample: int, out: bytes) -> None:
        self._show(sample, out[: len(out) - self.hold].decode("utf-8", "ignore"))

    def _show(self, sample: int, text: str) -> None:
        shown = self.shown[sample]
        if self.open and len(text) > len(shown) and text.startswith(shown):
            self.deltas.add(sample, text[len(shown):])
            self.shown[sample] = text

    def finish(self, texts: Sequence[str]) -> None:
        """The rest of each sample's final text (what the stop strings left of the part held back)."""
        for sample, text in enumerate(texts):
            self._show(sample, text)

    def close(self) -> None:
        """Hand on what waits; text the worker decoded after a cancel is not shown."""
        self.deltas.flush()
        self.open = False
