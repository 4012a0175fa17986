"""An embedded model behind an OpenAI-compatible HTTP endpoint, so other tools and processes share one loaded model.

`OpenAIEndpoint` maps OpenAI's API onto the Backend's requests: `GET /v1/models`,
`POST /v1/completions` (a prompt or a list of prompts, read as plain completion text even by a
chat model) and `POST /v1/chat/completions` (messages through the model's chat template; a base
model, which has none, continues a plain transcript, `Prompt.as_text()`'s "ROLE: text" turns,
and its reply ends where it starts the next turn). Both honour the request's stop strings.
`OpenAIServer` is the HTTP/1.1 side: asyncio streams on one event loop, which owns the backend;
each connection is a task of its own, so several clients are answered at once, and a client that
goes away mid-request cancels its generation. The standard library is enough: the protocol is a
handful of JSON routes, and non-streaming replies need no framework.

`ServedSearches` adds searches served as models: a chat request naming one (`tot`, `research`, ...)
runs that search per request (thoughtloom/run/service.py builds it, through the one run path), and
its answer comes back as a chat completion, or as server-sent events when `stream` is true; the
stored run's id rides in the `X-Thoughtloom-Run-Id` header and the reply's `thoughtloom` object.

What the server cannot honour it refuses with OpenAI's error shape and a 4xx status (streaming,
tools, logit_bias, echo, ...); fields that only tune sampling (top_p, the penalties) or are
bookkeeping (user, metadata) are ignored, as unknown fields are.

A web page the user visits must not be able to use it: the Host header must name the address the
server listens on (a DNS-rebound name is refused), a request from another origin is refused unless
`ServeAccess` allows that origin, and an optional API key is checked. `ServeLimits` bounds what
clients can make it hold: connections, requests waiting for the model, body bytes (each and all
together), head size, and the time to read one request.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import math
import secrets
import socket
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, Protocol, Self, TypeVar
from urllib.parse import urlsplit

from .errors import ModelError
from .text import encodes
from .types import Completion, GenerateRequest, Message, Prompt, TokenLogprob

log = logging.getLogger(__name__)
_T = TypeVar("_T")

#: Most samples one request may ask for (OpenAI's own limit is 128; on a CPU 16 is already slow).
MAX_N = 16
#: Most alternatives reported per token (OpenAI: 5 for completions, 20 for chat).
MAX_LOGPROBS = 20
#: Most stop strings a request may give (OpenAI allows 4; thoughtloom's own tasks use more).
MAX_STOPS = 16
#: Most prompts in one completions request.
MAX_PROMPTS = 64
#: Largest request head and body read; past them the client gets 431 / 413 and the connection closes.
MAX_HEAD = 64 * 1024
MAX_BODY = 8 * 1024 * 1024
#: A request not read whole in this long (or an idle keep-alive connection) is dropped.
READ_TIMEOUT_S = 60.0
#: Deepest nesting of arrays and objects in a request body (OpenAI's requests need a handful; a JSON Schema more).
MAX_JSON_DEPTH = 100
#: Where a base model's reply to a transcript ends: where it starts the next turn.
TRANSCRIPT_TURNS = ("\nUSER:", "\nASSISTANT:", "\nSYSTEM:")
#: What a logprob that JSON cannot carry (-inf) is reported as.
MIN_LOGPROB = -9999.0
#: While a streamed search runs, a comment line goes out this often: proxies keep the connection, and a
#: client that went away is found.
KEEPALIVE_S = 10.0
#: The header a served search's stored run id is sent in.
RUN_ID_HEADER = "X-Thoughtloom-Run-Id"


@dataclass(frozen=True, slots=True)
class ServeLimits:
    """What clients can make the server hold: past a limit a request is refused, never queued without end."""

    #: Connections open at once; one more is answered 503 and closed.
    max_connections: int = 64
    #: Requests waiting for the model beyond those it is generating; one more is a 503.
    max_queue: int = 32
    #: Largest body one request may send (413, answered before the body is read).
    max_body: int = MAX_BODY
    #: Body bytes held at once over all connections; a request that would pass it is a 503 before its body is read.
    max_bodies: int = 4 * MAX_BODY
    #: Largest request head, and most header lines in it (431).
    max_head: int = MAX_HEAD
    max_headers: int = 100
    #: Time to read one request, head and body (then 408), to wait for the next on a kept-alive connection,
    #: and to hand a reply to a client that does not read it.
    read_timeout_s: float = READ_TIMEOUT_S


@dataclass(frozen=True, slots=True)
class ServeAccess:
    """Who may use the server beyond a client on this machine naming it by its address."""

    #: When set, every request but a CORS preflight needs `Authorization: Bearer <api_key>`.
    api_key: str | None = None
    #: Web origins (scheme://host[:port]) whose pages may call the server; all others are refused.
    allow_origins: tuple[str, ...] = ()


def web_origin(url: str) -> str:
    """A web origin as browsers send it (scheme://host[:port], no default port); ValueError when it is not one."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        raise ValueError(f"{url!r} is not a URL") from None
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.path not in ("", "/") \
            or parts.query or parts.fragment or parts.username or parts.password:
        raise ValueError(f"{url!r} is not a web origin; give scheme://host[:port], e.g. http://localhost:3000")
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    default = 80 if parts.scheme == "http" else 443
    return f"{parts.scheme}://{host}" + (f":{port}" if port is not None and port != default else "")


class ServedModel(Protocol):
    """What the server needs of a model: the embedded backend (LocalLlamaBackend) has all of it."""

    name: str
    n_ctx: int
    max_concurrency: int

    @property
    def chat(self) -> bool:
        """Whether the model has a chat template it is prompted through."""
        ...

    def prompt_tokens(self, prompt: Prompt, form: str | None = None) -> list[int]:
        """The tokens the model reads for a prompt in a form."""
        ...

    async def generate(self, request: GenerateRequest) -> Completion:
        """Samples for one request."""
        ...


@dataclass(frozen=True, slots=True)
class SearchAsk:
    """One request for a served search: which, the problem, and the budget it asks for (None: the server's cap)."""

    name: str
    problem: str
    tokens: int | None = None
    seconds: float | None = None
    #: The request field the token budget came from (named in an error about it).
    tokens_param: str = "thoughtloom.budget_tokens"


@dataclass(frozen=True, slots=True)
class SearchReply:
    """A served search's answer: its final text, the stored run's id (None: not stored), and what it spent."""

    answer: str
    run_id: str | None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str = "stop"
    #: The reply's `thoughtloom` object: the strategy, why the search stopped, the run id.
    details: Mapping[str, Any] = field(default_factory=dict)


class ServedSearches(Protocol):
    """Searches served as models (thoughtloom.run.service.StrategyService has all of it)."""

    @property
    def names(self) -> tuple[str, ...]:
        """The model names that run a search."""
        ...

    async def run(self, ask: SearchAsk, started: Callable[[str | None], None]) -> SearchReply:
        """Check the ask (ApiError to refuse it), search, and answer; `started(run_id)` once the run has begun."""
        ...


class ApiError(Exception):
    """A request the server refuses, as OpenAI reports it: a status and {"error": {message, type, param, code}}."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None,
                 kind: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.kind = status, message, param, code, kind

    def body(self) -> dict[str, Any]:
        """The JSON error body."""
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}


def _show(value: Any) -> str:
    """A request value quoted in an error message, kept short."""
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 60 else text[:57] + "..."


def _unsupported(param: str, what: str) -> ApiError:
    return ApiError(400, f"{what} is not supported by this server", param=param, code="unsupported_parameter")


def _integer(body: dict[str, Any], name: str, default: int | None, least: int, most: int) -> int | None:
    """A whole-number field from least to most (absent or null: the default)."""
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ApiError(400, f"{name} must be a whole number; got {_show(value)}", param=name, code="invalid_type")
    if not least <= value <= most:
        raise ApiError(400, f"{name} must be from {least} to {most}; got {value}", param=name, code="invalid_value")
    return value


def _number(body: dict[str, Any], name: str, default: float, least: float, most: float) -> float:
    """A number field from least to most (absent or null: the default)."""
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ApiError(400, f"{name} must be a number; got {_show(value)}", param=name, code="invalid_type")
    if not least <= value <= most:
        raise ApiError(400, f"{name} must be from {least:g} to {most:g}; got {value:g}", param=name,
                       code="invalid_value")
    return float(value)


def _stop(body: dict[str, Any]) -> tuple[str, ...]:
    """The stop field: a string or a list of strings."""
    value = body.get("stop")
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
        raise ApiError(400, f"stop must be a string or a list of strings; got {_show(value)}", param="stop",
                       code="invalid_type")
    if len(value) > MAX_STOPS:
        raise ApiError(400, f"stop may hold at most {MAX_STOPS} strings; got {len(value)}", param="stop",
                       code="invalid_value")
    return tuple(s for s in value if s)


def _finite(logprob: float) -> float:
    return logprob if math.isfinite(logprob) else MIN_LOGPROB


def _kept(tokens: Sequence[TokenLogprob], text: str) -> list[tuple[TokenLogprob, bytes, int]]:
    """The tokens the reply's text is made of, each with its bytes and byte offset.

    The backend reports every token it sampled: the one that completed a stop string (which the
    text does not hold) and an end-of-text token (no text) are not the reply's.
    """
    size = len(text.encode("utf-8"))
    out: list[tuple[TokenLogprob, bytes, int]] = []
    offset = 0
    for token in tokens:
        if offset >= size:
            break
        raw = token.raw or token.token.encode("utf-8")
        out.append((token, raw, offset))
        offset += len(raw)
    return out


def _text_logprobs(tokens: Sequence[TokenLogprob], text: str, prompt: str) -> dict[str, Any]:
    """Completions' logprobs object; offsets count characters from the prompt's start, as OpenAI's do."""
    kept = _kept(tokens, text)
    data = text.encode("utf-8")
    return {
        "tokens": [t.token for t, _, _ in kept],
        "token_logprobs": [_finite(t.logprob) for t, _, _ in kept],
        "top_logprobs": [{alt: _finite(lp) for alt, lp in t.top} for t, _, _ in kept],
        "text_offset": [len(prompt) + len(data[:offset].decode("utf-8", "ignore")) for _, _, offset in kept],
    }


def _chat_logprobs(tokens: Sequence[TokenLogprob], text: str) -> dict[str, Any]:
    """Chat's logprobs object: per token its text, logprob, bytes and the likeliest alternatives."""
    return {
        "content": [
            {"token": t.token, "logprob": _finite(t.logprob), "bytes": list(raw),
             "top_logprobs": [{"token": alt, "logprob": _finite(lp), "bytes": list(alt.encode("utf-8"))}
                              for alt, lp in t.top]}
            for t, raw, _ in _kept(tokens, text)
        ],
        "refusal": None,
    }


def _content(index: int, message: dict[str, Any]) -> str:
    """A message's text: a string, or a list of text parts."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if content is None and message.get("role") == "assistant" and not message.get("tool_calls"):
        return ""
    if isinstance(content, list):
        texts = []
        for part in content:
            if not (isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)):
                kind = part.get("type") if isinstance(part, dict) else None
                raise ApiError(400, f"messages[{index}].content: only text parts are supported; got {_show(kind)}",
                               param=f"messages[{index}].content", code="unsupported_content")
            texts.append(part["text"])
        return "".join(texts)
    raise ApiError(400, f"messages[{index}].content must be a string or a list of text parts; got {_show(content)}",
                   param=f"messages[{index}].content", code="invalid_type")


def _messages(body: dict[str, Any]) -> tuple[Message, ...]:
    """The chat messages of a request."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "messages must be a non-empty list of {role, content} objects", param="messages",
                       code="invalid_value" if isinstance(messages, list) else "missing_required_parameter")
    out = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise ApiError(400, f"messages[{i}] must be an object with role and content", param=f"messages[{i}]",
                           code="invalid_type")
        role = message.get("role")
        role = "system" if role == "developer" else role  # OpenAI's newer name for the system turn
        if role not in ("system", "user", "assistant"):
            raise ApiError(400, f"messages[{i}].role must be system, developer, user or assistant; got {_show(role)} "
                                "(tool calls are not supported)", param=f"messages[{i}].role", code="invalid_value")
        if message.get("tool_calls"):
            raise _unsupported(f"messages[{i}].tool_calls", "tool calling")
        out.append(Message(role, _content(i, message)))
    return tuple(out)


def _prompts(body: dict[str, Any]) -> list[str]:
    """The completions prompt: a string or a list of strings."""
    prompt = body.get("prompt")
    if prompt is None:
        raise ApiError(400, "prompt is required: a string or a list of strings", param="prompt",
                       code="missing_required_parameter")
    prompts = [prompt] if isinstance(prompt, str) else prompt
    if not isinstance(prompts, list) or not all(isinstance(p, str) for p in prompts):
        raise ApiError(400, "prompt must be a string or a list of strings (token arrays are not supported)",
                       param="prompt", code="invalid_type")
    if not 1 <= len(prompts) <= MAX_PROMPTS:
        raise ApiError(400, f"prompt must hold from 1 to {MAX_PROMPTS} strings; got {len(prompts)}", param="prompt",
                       code="invalid_value")
    return prompts


def _schema(body: dict[str, Any]) -> str | None:
    """The JSON Schema a chat reply must match (response_format), as canonical JSON text; None for free text."""
    form = body.get("response_format")
    if form is None:
        return None
    kind = form.get("type") if isinstance(form, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return '{"type":"object"}'
    if kind == "json_schema":
        spec = form.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, dict) else None
        if not isinstance(schema, dict):
            raise ApiError(400, "response_format.json_schema.schema must be a JSON Schema object",
                           param="response_format", code="invalid_value")
        return json.dumps(schema, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    raise ApiError(400, f"response_format.type must be text, json_object or json_schema; got {_show(kind)}",
                   param="response_format", code="invalid_value")


def _refuse_unsupported(body: dict[str, Any], chat: bool) -> None:
    """Refuse the fields whose meaning this server cannot honour (silently ignoring them would mislead)."""
    if body.get("stream"):
        raise _unsupported("stream", "streaming (stream: true)")
    if body.get("logit_bias"):
        raise _unsupported("logit_bias", "logit_bias")
    if chat:
        for name in ("tools", "functions"):
            if body.get(name):
                raise _unsupported(name, "tool calling")
        if body.get("tool_choice") not in (None, "none", "auto") or body.get("function_call") not in (
            None,
            "none",
            "auto",
        ):
            raise _unsupported("tool_choice", "tool calling")
        if body.get("audio") or body.get("modalities") not in (None, ["text"]):
            raise _unsupported("modalities", "output other than text")
    else:
        if body.get("echo"):
            raise _unsupported("echo", "echo")
        if body.get("suffix"):
            raise _unsupported("suffix", "suffix (insertion)")
        best_of = body.get("best_of")
        if best_of is not None and best_of != (body.get("n") or 1):
            raise _unsupported("best_of", "best_of other than n")


#: A reply's headers beyond those every reply carries.
Headers = tuple[tuple[str, str], ...]


class OpenAIEndpoint:
    """OpenAI's API over one served model and the served searches: routes, request checks, replies in OpenAI's shapes.

    `model` None serves only the searches (they run over a model served elsewhere).
    """

    def __init__(self, model: ServedModel | None, max_queue: int, searches: ServedSearches | None = None) -> None:
        self.model = model
        self.searches = searches
        #: The id clients name; the spec without "local:" is accepted too.
        self.model_id = model.name if model is not None else ""
        self._names = {model.name, model.name.removeprefix("local:")} if model is not None else set()
        self._searches = frozenset(searches.names) if searches is not None else frozenset()
        self._created = int(time.time())
        concurrency = max(1, model.max_concurrency) if model is not None else 1
        # The server issues as many generate() calls at once as the backend says it can serve;
        # the rest wait here, where a client that goes away is dropped without touching the model.
        self._slots = asyncio.Semaphore(concurrency)
        # Requests at the model (generating or waiting); past the bound a client is told to come back.
        self._admitted = 0
        self._most_admitted = concurrency + max_queue

    async def handle(self, method: str, target: str, body: bytes) -> tuple[int, dict[str, Any], Headers] | SearchStream:
        """Answer one HTTP request: (status, JSON body, headers), or a stream to send; raises only when cancelled."""
        try:
            answer = await self._route(method, target.split("?", 1)[0], body)
            return answer if isinstance(answer, SearchStream) else (200, *answer)
        except Exception as exc:
            return (*_failure(exc, f"request {method} {ascii(target)}"), ())

    async def _route(self, method: str, path: str, body: bytes) -> tuple[dict[str, Any], Headers] | SearchStream:
        routes = {"/v1/models": ("GET",), "/v1/completions": ("POST",), "/v1/chat/completions": ("POST",)}
        model_path = path.startswith("/v1/models/")
        allowed = ("GET",) if model_path else routes.get(path)
        if allowed is None:
            raise ApiError(404, f"Invalid URL ({method} {path}): this server answers /v1/models, /v1/completions "
                                "and /v1/chat/completions", code="unknown_url")
        if method not in allowed:
            raise ApiError(405, f"{path} takes {' or '.join(allowed)}, not {method}", code="method_not_allowed")
        if path == "/v1/models":
            cards = [self._model_card(self.model_id)] if self.model is not None else []
            return {"object": "list", "data": cards + [self._model_card(n) for n in sorted(self._searches)]}, ()
        if model_path:
            name = path.removeprefix("/v1/models/")
            if name not in self._searches:
                self._check_model(name)
            return self._model_card(name if name in self._searches else self.model_id), ()
        if self._admitted >= self._most_admitted:
            raise ApiError(503, f"the server is busy: {self._admitted} requests are at the model; retry shortly",
                           kind="server_error", code="queue_full")
        self._admitted += 1
        try:
            # In a thread: parsing and checking a body of megabytes takes a while, and the loop serves other clients.
            request = await asyncio.to_thread(_json_object, body)
            if request.get("model") in self._searches:
                if path == "/v1/completions":
                    raise ApiError(400, f"{request['model']} is a search: ask it through /v1/chat/completions",
                                   param="model", code="unsupported_endpoint")
                return await self.search(request)
            if path == "/v1/completions":
                return await self.completions(request), ()
            return await self.chat_completions(request), ()
        finally:
            self._admitted -= 1

    def _model_card(self, name: str) -> dict[str, Any]:
        return {"id": name, "object": "model", "created": self._created, "owned_by": "thoughtloom"}

    def _check_model(self, name: Any) -> ServedModel:
        """The served model when a request names it (or names none); a 404 otherwise."""
        if self.model is None or (name is not None and name not in self._names):
            served = ", ".join(([self.model_id] if self.model is not None else []) + sorted(self._searches))
            raise ApiError(404, f"The model {_show(name)} does not exist; this server serves {served}",
                           param="model", code="model_not_found")
        return self.model

    async def search(self, body: dict[str, Any]) -> tuple[dict[str, Any], Headers] | SearchStream:
        """POST /v1/chat/completions naming a served search: its answer, whole or as a stream of events."""
        assert self.searches is not None
        ask = _search_ask(body)
        stream = body.get("stream")
        if stream is not None and not isinstance(stream, bool):
            raise ApiError(400, f"stream must be true or false; got {_show(stream)}", param="stream",
                           code="invalid_type")
        options = body.get("stream_options")
        if options is not None and not isinstance(options, dict):
            raise ApiError(400, "stream_options must be an object", param="stream_options", code="invalid_type")
        reply_id = f"chatcmpl-{secrets.token_hex(12)}"
        if stream:
            return SearchStream(self.searches, ask, reply_id, bool((options or {}).get("include_usage")))
        reply = await self.searches.run(ask, lambda _: None)
        return {"id": reply_id, "object": "chat.completion", "created": int(time.time()), "model": ask.name,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": reply.answer, "refusal": None},
                             "logprobs": None, "finish_reason": reply.finish_reason}],
                "usage": _search_usage(reply), "thoughtloom": dict(reply.details)}, _run_header(reply.run_id)

    async def completions(self, body: dict[str, Any]) -> dict[str, Any]:
        """POST /v1/completions: one choice per sample, prompt by prompt (choice i*n+j is prompt i's sample j)."""
        self._check_model(body.get("model"))
        _refuse_unsupported(body, chat=False)
        prompts = _prompts(body)
        # Some clients send logprobs: false for none (chat's spelling).
        top = None if body.get("logprobs") is False else _integer(body, "logprobs", None, 0, MAX_LOGPROBS)
        requests = await self._requests(body, [Prompt(text=p) for p in prompts], "text", _stop(body),
                                  max_tokens=_integer(body, "max_tokens", 16, 1, 1 << 31), param="prompt", top=top)
        done = await self._generate(requests)
        n = requests[0].n
        choices = []
        for i, (completion, prompt) in enumerate(zip(done, prompts, strict=True)):
            for j, text in enumerate(completion.texts):
                logprobs = None
                if top is not None and completion.logprobs is not None:
                    logprobs = _text_logprobs(completion.logprobs[j], text, prompt)
                choices.append({"text": text, "index": i * n + j, "logprobs": logprobs,
                                "finish_reason": _reason(completion, j)})
        return {"id": f"cmpl-{secrets.token_hex(12)}", "object": "text_completion", "created": int(time.time()),
                "model": self.model_id, "choices": choices, "usage": _usage(done)}

    async def chat_completions(self, body: dict[str, Any]) -> dict[str, Any]:
        """POST /v1/chat/completions: one assistant message per sample."""
        model = self._check_model(body.get("model"))
        _refuse_unsupported(body, chat=True)
        messages = _messages(body)
        wants_logprobs = body.get("logprobs")
        if wants_logprobs is not None and not isinstance(wants_logprobs, bool):
            raise ApiError(400, f"logprobs must be true or false; got {_show(wants_logprobs)}", param="logprobs",
                           code="invalid_type")
        top = _integer(body, "top_logprobs", None, 0, MAX_LOGPROBS)
        if top is not None and not wants_logprobs:
            raise ApiError(400, "top_logprobs needs logprobs: true", param="top_logprobs", code="invalid_value")
        most = 1 << 31
        max_tokens = _integer(body, "max_completion_tokens", None, 1, most)
        if max_tokens is None:
            max_tokens = _integer(body, "max_tokens", None, 1, most)
        stop = _stop(body)
        # A chat model reads the turns through its template; a base model continues a transcript,
        # and its reply ends where it would start the next turn.
        form = "chat" if model.chat else "text"
        if form == "text":
            stop = (*stop, *TRANSCRIPT_TURNS)
        requests = await self._requests(body, [Prompt(messages=messages)], form, stop, max_tokens=max_tokens,
                                  param="messages", top=(top or 0) if wants_logprobs else None, schema=_schema(body))
        (completion,) = await self._generate(requests)
        choices = []
        for j, text in enumerate(completion.texts):
            logprobs = None
            if wants_logprobs and completion.logprobs is not None:
                logprobs = _chat_logprobs(completion.logprobs[j], text)
            choices.append({"index": j, "message": {"role": "assistant", "content": text, "refusal": None},
                            "logprobs": logprobs, "finish_reason": _reason(completion, j)})
        return {"id": f"chatcmpl-{secrets.token_hex(12)}", "object": "chat.completion", "created": int(time.time()),
                "model": self.model_id, "choices": choices, "usage": _usage([completion])}

    async def _requests(self, body: dict[str, Any], prompts: list[Prompt], form: str, stop: tuple[str, ...], *,
                        max_tokens: int | None, param: str, top: int | None, schema: str | None = None
                        ) -> list[GenerateRequest]:
        """The backend requests for a validated body; every prompt must fit the context with its reply."""
        model = self._check_model(body.get("model"))
        n = _integer(body, "n", 1, 1, MAX_N)
        temperature = _number(body, "temperature", 1.0, 0.0, 2.0)
        seed = _integer(body, "seed", None, -(1 << 63), (1 << 63) - 1)
        requests = []
        for prompt in prompts:
            # In a thread: a long prompt takes a while to tokenize, and the loop serves other clients.
            size = len(await asyncio.to_thread(model.prompt_tokens, prompt, form))
            if size == 0:
                raise ApiError(400, f"the {param} is empty", param=param, code="invalid_value")
            # Chat without max_tokens: as long as the context allows, as OpenAI does.
            wanted = max_tokens if max_tokens is not None else model.n_ctx - size
            if wanted < 1 or size + wanted > model.n_ctx:
                raise ApiError(
                    400, f"This model's maximum context length is {model.n_ctx} tokens. However, you requested "
                         f"{size + max(wanted, 0)} tokens ({size} in the {param}, {max(wanted, 0)} in the completion). "
                         f"Please reduce the length of the {param} or completion.",
                    param=param, code="context_length_exceeded")
            assert n is not None
            requests.append(GenerateRequest(prompt, n=n, max_tokens=wanted, temperature=temperature, stop=stop,
                                            seed=seed, schema=schema, logprobs=top, form=form, purpose="serve"))
        return requests

    async def _generate(self, requests: list[GenerateRequest]) -> list[Completion]:
        """The requests' completions, generated concurrently as the backend allows; one failure cancels the rest."""
        model = self._check_model(None)

        async def one(request: GenerateRequest) -> Completion:
            async with self._slots:
                return await model.generate(request)

        if len(requests) == 1:
            return [await one(requests[0])]
        try:
            async with asyncio.TaskGroup() as group:
                tasks = [group.create_task(one(r)) for r in requests]
        except ExceptionGroup as failed:
            raise failed.exceptions[0] from None  # the first failure says what went wrong
        return [t.result() for t in tasks]


def _reason(completion: Completion, index: int) -> str:
    reasons = completion.finish_reasons
    return reasons[index] if reasons is not None and index < len(reasons) else "stop"


def _usage(done: Sequence[Completion]) -> dict[str, int]:
    prompt = sum(c.usage.input_tokens for c in done)
    completion = sum(c.usage.output_tokens for c in done)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _failure(exc: Exception, what: str) -> tuple[int, dict[str, Any]]:
    """The status and JSON error body for a request that failed: its own refusal, the model's failure, or a bug."""
    if isinstance(exc, ApiError):
        return exc.status, exc.body()
    if isinstance(exc, ModelError):
        return 500, ApiError(500, str(exc), kind="server_error", code="model_error").body()
    log.error("%s failed", what, exc_info=exc)  # a bug must cost one request, not the server
    return 500, ApiError(500, f"internal error: {type(exc).__name__}: {exc}", kind="server_error").body()


#: What a served search refuses: fields whose meaning a search cannot honour (silently dropping them would mislead).
_SEARCH_UNSUPPORTED = {"tools": "tool calling", "functions": "tool calling", "logprobs": "logprobs",
                       "top_logprobs": "logprobs", "logit_bias": "logit_bias", "audio": "audio output"}


def _search_ask(body: dict[str, Any]) -> SearchAsk:
    """A served search's request: the problem (the last user turn) and the budget it asks for."""
    for name, what in _SEARCH_UNSUPPORTED.items():
        if body.get(name):
            raise ApiError(400, f"{what} is not supported by a served search", param=name,
                           code="unsupported_parameter")
    if body.get("n") not in (None, 1):
        raise ApiError(400, f"a served search gives one answer (n: 1); got n: {_show(body.get('n'))}", param="n",
                       code="invalid_value")
    if _schema(body) is not None:
        raise ApiError(400, "response_format other than text is not supported by a served search",
                       param="response_format", code="unsupported_parameter")
    users = [m.content for m in _messages(body) if m.role == "user"]
    if not users or not users[-1].strip():
        raise ApiError(400, "a served search needs the problem as a non-empty user message", param="messages",
                       code="invalid_value")
    extension = body.get("thoughtloom")
    if extension is None:
        extension = {}
    if not isinstance(extension, dict):
        raise ApiError(400, "thoughtloom must be an object such as {\"budget_tokens\": 5000}", param="thoughtloom",
                       code="invalid_type")
    unknown = sorted(set(extension) - {"budget_tokens", "budget_seconds"})
    if unknown:
        raise ApiError(400, f"thoughtloom.{unknown[0]} is not a setting; a request may set budget_tokens and "
                            "budget_seconds", param=f"thoughtloom.{unknown[0]}", code="invalid_value")
    most = 1 << 62
    param = "thoughtloom.budget_tokens"
    tokens = _integer(extension, "budget_tokens", None, 1, most)
    for name in ("max_completion_tokens", "max_tokens"):
        if tokens is None:
            tokens, param = _integer(body, name, None, 1, most), name
    seconds = extension.get("budget_seconds")
    if seconds is not None:
        seconds = _number(extension, "budget_seconds", 0.0, 1e-3, 1e12)
    return SearchAsk(str(body["model"]), users[-1], tokens, seconds, param)


def _search_usage(reply: SearchReply) -> dict[str, int]:
    return {"prompt_tokens": reply.prompt_tokens, "completion_tokens": reply.completion_tokens,
            "total_tokens": reply.prompt_tokens + reply.completion_tokens}


def _run_header(run_id: str | None) -> Headers:
    return ((RUN_ID_HEADER, run_id),) if run_id is not None else ()


class SearchStream:
    """A served search answered as server-sent events (OpenAI's chat.completion.chunk objects, then [DONE]).

    `start()` runs the search until it has begun (its run stored) and gives the head's headers, or
    raises ApiError while a plain error reply can still be sent; `frames()` then yields the events:
    the assistant's role at once, a comment every KEEPALIVE_S while the search runs, the answer, the
    finish (with the `thoughtloom` object), usage when asked, and [DONE]. `aclose()` cancels the search.
    """

    def __init__(self, searches: ServedSearches, ask: SearchAsk, reply_id: str, include_usage: bool) -> None:
        self.searches, self.ask, self.reply_id, self.include_usage = searches, ask, reply_id, include_usage
        self._created = int(time.time())
        self._run: asyncio.Task[SearchReply] | None = None

    async def start(self) -> Headers:
        """Begin the search; the head's headers once it runs (ApiError, ModelError ... when it fails first)."""
        begun: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()

        def started(run_id: str | None) -> None:
            if not begun.done():
                begun.set_result(run_id)

        self._run = asyncio.create_task(self.searches.run(self.ask, started))
        waits: set[asyncio.Future[Any]] = {self._run, begun}
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        if begun.done():
            return _run_header(begun.result())
        begun.cancel()
        return _run_header(self._run.result().run_id)  # raises what the search raised before it began

    def _chunk(self, delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
        chunk = {"id": self.reply_id, "object": "chat.completion.chunk", "created": self._created,
                 "model": self.ask.name, "choices": [{"index": 0, "delta": delta, "logprobs": None,
                                                      "finish_reason": finish}], **extra}
        return _event(chunk)

    async def frames(self) -> AsyncIterator[bytes]:
        """The events after the head, as bytes to send."""
        assert self._run is not None, "start() first"
        yield self._chunk({"role": "assistant", "content": ""})
        while not (await asyncio.wait({self._run}, timeout=KEEPALIVE_S))[0]:
            yield b": searching\n\n"
        try:
            reply = self._run.result()
        except Exception as exc:  # after the head: OpenAI's clients read an error event as the call's error
            yield _event(_failure(exc, f"search {self.ask.name}")[1])
            return
        if reply.answer:
            yield self._chunk({"content": reply.answer})
        yield self._chunk({}, reply.finish_reason, thoughtloom=dict(reply.details))
        if self.include_usage:
            yield _event({"id": self.reply_id, "object": "chat.completion.chunk", "created": self._created,
                          "model": self.ask.name, "choices": [], "usage": _search_usage(reply)})
        yield b"data: [DONE]\n\n"

    async def aclose(self) -> None:
        """Cancel the search if it still runs (the client went away, or the server closes)."""
        if self._run is not None and not self._run.done():
            self._run.cancel()
            await asyncio.wait({self._run})


def _event(data: dict[str, Any]) -> bytes:
    return b"data: " + _utf8(json.dumps(data, ensure_ascii=False)) + b"\n\n"


def _json_object(body: bytes) -> dict[str, Any]:
    """A request body as a JSON object (NaN and Infinity are not JSON), nested at most MAX_JSON_DEPTH deep."""
    def no_constant(name: str) -> Any:
        raise ValueError(f"{name} is not valid JSON")

    try:
        value = json.loads(body, parse_constant=no_constant)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(400, f"We could not parse the JSON body of your request ({exc}); send a JSON object",
                       code="invalid_json") from None
    except RecursionError:
        raise ApiError(400, f"the JSON body is nested too deeply; nest arrays and objects at most {MAX_JSON_DEPTH} "
                            "deep", code="invalid_json") from None
    if not isinstance(value, dict):
        raise ApiError(400, "the request body must be a JSON object", code="invalid_json")
    _check_json(value)
    return value


def _check_json(value: dict[str, Any]) -> None:
    """Refuse nesting past MAX_JSON_DEPTH and strings holding a lone surrogate (a \\ud800 escape), which is no text.

    Both would fail later and far from here (recursion while walking the value; UTF-8 encoding while
    tokenizing or replying); iteratively, so the check itself cannot recurse too deep.
    """
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            raise ApiError(400, f"the JSON body is nested too deeply; nest arrays and objects at most {MAX_JSON_DEPTH} "
                                "deep", code="invalid_json")
        children = item.items() if isinstance(item, dict) else enumerate(item)
        for key, child in children:
            for text in (key, child):
                if isinstance(text, str) and not text.isascii() and not encodes(text):
                    raise ApiError(400, "the JSON body holds a lone surrogate escape (such as \\ud800), which is not "
                                        "text; escape characters as UTF-16 pairs or send UTF-8", code="invalid_json")
            if isinstance(child, dict | list) and child:
                stack.append((child, depth + 1))


# --- HTTP -------------------------------------------------------------------------------------------

#: How long a refused client's unread bytes are drained before its connection closes: closing with
#: unread bytes resets the connection, and a reset can destroy the answer before the client reads it.
LINGER_S = 1.0
#: Headers a request may carry once: two of them could be read differently by us and by a proxy.
_SINGLE_HEADERS = frozenset({"host", "content-length", "transfer-encoding", "origin", "authorization"})


class _HttpError(Exception):
    """A request the server will not read further: answered with this status, then the connection closes."""

    def __init__(self, status: int, message: str, code: str, headers: Sequence[tuple[str, str]] = ()) -> None:
        super().__init__(message)
        self.status, self.code, self.headers = status, code, tuple(headers)

    def response(self) -> bytes:
        """The error as a JSON reply that closes the connection."""
        kind = "server_error" if self.status >= 500 else "invalid_request_error"
        error = ApiError(self.status, str(self), code=self.code, kind=kind)
        return _response(self.status, error.body(), False, self.headers)


@dataclass(frozen=True, slots=True)
class _Request:
    method: str
    target: str
    headers: dict[str, str]
    keep_alive: bool


class _Connection:
    """A client's byte stream with a buffer of our own, so bytes read while watching for a hang-up are kept."""

    def __init__(self, reader: asyncio.StreamReader, max_head: int) -> None:
        self.reader = reader
        self.max_head = max_head
        self.buffer = bytearray()

    async def _fill(self) -> bool:
        chunk = await self.reader.read(65536)
        self.buffer += chunk
        return bool(chunk)

    async def head(self) -> bytes | None:
        """The next request's head (without the blank line), or None when the client closed between requests."""
        while (end := self.buffer.find(b"\r\n\r\n")) < 0:
            if len(self.buffer) > self.max_head:
                raise _HttpError(431, f"the request head is larger than {self.max_head:,} bytes", "request_too_large")
            if not await self._fill():
                if self.buffer:
                    raise _HttpError(400, "the request ended inside its head", "bad_request")
                return None
        if end > self.max_head:  # its end came in the same read as the bytes past the limit
            raise _HttpError(431, f"the request head is larger than {self.max_head:,} bytes", "request_too_large")
        head = bytes(self.buffer[:end])
        del self.buffer[: end + 4]
        return head

    async def body(self, size: int) -> bytes:
        """Exactly `size` body bytes."""
        while len(self.buffer) < size:
            if not await self._fill():
                raise _HttpError(400, "the request ended inside its body", "bad_request")
        with memoryview(self.buffer) as view:
            data = bytes(view[:size])  # one copy, however large
        del self.buffer[:size]
        return data

    async def hang_up(self) -> bool:
        """True when the client closes the connection; False when it has sent more than a request head meanwhile.

        What it sends is kept for its next request, up to a head's size: past that it is left unread
        (the client waits), and the connection is no longer watched.
        """
        while len(self.buffer) <= self.max_head:
            if not await self._fill():
                return True
        return False

    async def discard(self) -> None:
        """Read and drop what the client still sends, until it closes (the caller bounds the time)."""
        self.buffer.clear()
        while await self.reader.read(65536):
            pass


def _parse_head(head: bytes, max_headers: int) -> _Request:
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[1].startswith("/"):
        raise _HttpError(400, "malformed request line", "bad_request")
    method, target, version = parts
    if version not in ("HTTP/1.1", "HTTP/1.0"):
        raise _HttpError(505, f"{_show(version)} is not supported; use HTTP/1.1", "bad_request")
    if len(lines) - 1 > max_headers:
        raise _HttpError(431, f"the request has {len(lines) - 1} header lines; at most {max_headers} are read",
                         "request_too_large")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip():
            raise _HttpError(400, "malformed header line", "bad_request")
        name = name.lower()
        if name in _SINGLE_HEADERS and name in headers:
            raise _HttpError(400, f"the request has more than one {name} header", "bad_request")
        headers[name] = value.strip()
    connection = headers.get("connection", "").lower()
    keep_alive = connection != "close" if version == "HTTP/1.1" else connection == "keep-alive"
    return _Request(method, target, headers, keep_alive)


def _utf8(text: str) -> bytes:
    """Text as UTF-8; a lone surrogate, which UTF-8 cannot carry, becomes U+FFFD rather than failing the reply."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace").encode("utf-8")


def _response(status: int, payload: dict[str, Any] | None, keep_alive: bool,
              headers: Sequence[tuple[str, str]] = ()) -> bytes:
    """A reply's bytes: a JSON body (none for 204), and the headers its status needs."""
    lines = [f"HTTP/1.1 {status} {HTTPStatus(status).phrase}"]
    body = b""
    if payload is not None:
        body = _utf8(json.dumps(payload, ensure_ascii=False))
        lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    lines.append(f"Connection: {'keep-alive' if keep_alive else 'close'}")
    if status == 503:
        lines.append("Retry-After: 1")
    if status == 401:
        lines.append("WWW-Authenticate: Bearer")
    lines += [f"{name}: {value}" for name, value in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def _ip(name: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(name)
    except ValueError:
        return None


def _host_and_port(value: str) -> tuple[str, int | None] | None:
    """A Host header's name (lower case, an IPv6 address without brackets) and port; None when it is not host[:port]."""
    value = value.lower()
    if value.startswith("["):
        name, bracket, rest = value[1:].partition("]")
        if not bracket:
            return None
    else:
        name, colon, port = value.partition(":")
        rest = colon + port
    if not rest:
        return name, None
    digits = rest[1:]
    if not rest.startswith(":") or not (digits.isascii() and digits.isdigit()) or len(digits) > 5:
        return None
    return name, int(digits)


def names_this_server(host_header: str, bound: str, port: int) -> bool:
    """Whether a Host header names a server listening on `bound`:`port`.

    Accepted: the bound name itself; for a loopback address, any loopback address and localhost; for
    all interfaces (0.0.0.0, ::), any IP address and localhost. Never another name, which is what a
    page that rebinds its own name to this machine sends. Without a port, the port must be 80.
    """
    parsed = _host_and_port(host_header)
    if parsed is None:
        return False
    name, asked = parsed
    if (80 if asked is None else asked) != port:
        return False
    bound = bound.lower().strip("[]")
    if name == bound:
        return True
    address, bound_address = _ip(name), _ip(bound)
    if bound == "localhost" or (bound_address is not None and bound_address.is_loopback):
        return name == "localhost" or (address is not None and address.is_loopback)
    if bound == "" or (bound_address is not None and bound_address.is_unspecified):
        return name == "localhost" or address is not None
    return False


class OpenAIServer:
    """The HTTP side of `OpenAIEndpoint`: HTTP/1.1 with keep-alive, one task per connection, on the running loop.

    Use as `async with OpenAIServer(model, host, port) as server:` then `await server.serve_forever()`;
    `searches` adds the searches served as models (`model` None: only them).
    `bind()` takes the address beforehand (OSError for a busy port), so a caller can fail fast
    before loading the model; connections that arrive meanwhile wait in the listen queue.
    Every request is checked before its body is read: its Host, its Origin, the API key (`access`),
    and whether its body fits (`limits`); a refused request is answered in one JSON line and its
    connection closed.
    """

    def __init__(self, model: ServedModel | None, host: str = "127.0.0.1", port: int = 8000, *,
                 access: ServeAccess = ServeAccess(), limits: ServeLimits = ServeLimits(),
                 searches: ServedSearches | None = None) -> None:
        self.endpoint = OpenAIEndpoint(model, limits.max_queue, searches)
        self.host = host
        self.port = port
        self.access = access
        self.limits = limits
        self._origins = frozenset(web_origin(o) for o in access.allow_origins)
        self._socket: socket.socket | None = None
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._open = 0  # connections being served (refused ones are not)
        self._held = 0  # body bytes reserved by requests being read or answered

    @property
    def url(self) -> str:
        """The base URL clients use, ending in /v1 (with the port actually bound when port 0 was asked)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/v1"

    def bind(self) -> None:
        """Take the address now (OSError when it cannot be had); start() then serves on it."""
        if self._socket is None:
            self._socket = socket.create_server((self.host, self.port), family=_family(self.host))
            self.port = self._socket.getsockname()[1]

    async def start(self) -> None:
        """Start accepting connections (binding first if bind() was not called)."""
        self.bind()
        self._server = await asyncio.start_server(self._serve_connection, sock=self._socket)

    async def serve_forever(self) -> None:
        """Serve until cancelled."""
        assert self._server is not None, "start() first"
        await self._server.serve_forever()

    async def aclose(self) -> None:
        """Stop accepting, end open connections (their generations are cancelled)."""
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.wait(self._connections)
        if self._server is not None:
            await self._server.wait_closed()
        elif self._socket is not None:
            self._socket.close()  # bound but never served

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _serve_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        conn = _Connection(reader, self.limits.max_head)
        try:
            if self._open >= self.limits.max_connections:
                refused: _HttpError | None = _HttpError(
                    503, f"the server has {self._open} connections open, its most; retry shortly",
                    "too_many_connections")
            else:
                self._open += 1
                try:
                    refused = await self._serve_requests(conn, writer)
                finally:
                    self._open -= 1
            if refused is not None:
                await self._refuse(conn, writer, refused)  # its slot already given back
        except (ConnectionError, TimeoutError):
            return  # a client that stalls or resets costs only its own connection
        except asyncio.CancelledError:
            # The server is closing. This task is the connection's outermost frame, and ending it
            # normally matters: Python 3.11's stream callback logs a cancelled one as an error.
            return
        finally:
            self._connections.discard(task)
            writer.close()

    async def _serve_requests(self, conn: _Connection, writer: asyncio.StreamWriter) -> _HttpError | None:
        """Answer the connection's requests one after another; the error to answer when one is refused."""
        while True:
            held = 0  # body bytes this request reserved: given back however it ends
            try:
                request: _Request | None = None
                try:
                    try:
                        async with asyncio.timeout(self.limits.read_timeout_s):
                            head = await conn.head()
                            if head is None:
                                return None
                            request = _parse_head(head, self.limits.max_headers)
                            cors, preflight = self._admit(request)
                            size = self._body_size(request, cors)
                            if self._held + size > self.limits.max_bodies:
                                raise _HttpError(503, "the server holds as many request bodies as it may; retry "
                                                      "shortly", "server_busy", cors)
                            self._held += size
                            held = size
                            if size and request.headers.get("expect", "").lower() == "100-continue":
                                writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                                await writer.drain()
                            body = await conn.body(size)
                    except TimeoutError:
                        if request is None and not conn.buffer:
                            return None  # an idle kept-alive connection: closed without a word
                        raise _HttpError(408, f"the request was not received within {self.limits.read_timeout_s:g} s",
                                         "request_timeout") from None
                except _HttpError as exc:
                    return exc
                answer: tuple[int, dict[str, Any] | None, Headers] | SearchStream | None = (
                    (204, None, ()) if preflight else await self._answer(conn, request, body))
                del body  # not held while the connection waits for its next request
                if answer is None:
                    return None  # the client went away; its generation was cancelled
                if isinstance(answer, SearchStream):
                    # The stream ends with the connection: its length is not known when its head goes out.
                    await self._watched(conn, self._send_stream(writer, answer, cors))
                    return None
                status, payload, extra = answer
                writer.write(_response(status, payload, request.keep_alive, cors + preflight + extra))
                async with asyncio.timeout(self.limits.read_timeout_s):  # a client that never reads its reply
                    await writer.drain()
            finally:
                self._held -= held
            if not request.keep_alive:
                return None

    def _admit(self, request: _Request) -> tuple[tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]]:
        """A request's CORS reply headers and, for a preflight, its answer's; raises _HttpError to refuse it.

        Checked before the body is read, so what is refused costs no more than its head.
        """
        host = request.headers.get("host")
        if host is None:
            raise _HttpError(400, "the request has no Host header; HTTP/1.1 requires one", "bad_request")
        if not names_this_server(host, self.host, self.port):
            raise _HttpError(421, f"this server does not answer for Host {_show(host)}; address it as {self.url}",
                             "invalid_host")
        origin = request.headers.get("origin")
        cors: tuple[tuple[str, str], ...] = ()
        if origin is not None and origin.lower() != f"http://{host.lower()}":
            if origin not in self._origins:
                raise _HttpError(403, f"requests from the web origin {_show(origin)} are refused; to allow its pages, "
                                      "start the server with --allow-origin ORIGIN", "origin_not_allowed")
            cors = (("Access-Control-Allow-Origin", origin), ("Vary", "Origin"))
        elif origin is None and request.headers.get("sec-fetch-site") in ("cross-site", "same-site"):
            raise _HttpError(403, "requests from other web sites are refused", "origin_not_allowed")
        if request.method == "OPTIONS" and cors and "access-control-request-method" in request.headers:
            # A browser asks before a cross-origin request: it never sends the key with this question.
            asked = request.headers.get("access-control-request-headers") or "authorization, content-type"
            preflight: tuple[tuple[str, str], ...] = (
                ("Access-Control-Allow-Methods", "GET, POST, OPTIONS"),
                ("Access-Control-Allow-Headers", asked), ("Access-Control-Max-Age", "600"))
            if request.headers.get("access-control-request-private-network", "").lower() == "true":
                preflight += (("Access-Control-Allow-Private-Network", "true"),)
            return cors, preflight
        if self.access.api_key is not None:
            scheme, _, given = request.headers.get("authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not secrets.compare_digest(given.strip().encode("latin-1"),
                                                                          self.access.api_key.encode("utf-8")):
                raise _HttpError(401, "this server needs its API key: send the header Authorization: Bearer KEY with "
                                      "the key it was started with", "invalid_api_key", cors)
        return cors, ()

    def _body_size(self, request: _Request, cors: tuple[tuple[str, str], ...]) -> int:
        """The body's announced size, refused (before any of it is read) when it cannot be taken."""
        if "transfer-encoding" in request.headers:
            raise _HttpError(411, "send the body with a Content-Length (chunked bodies are not supported)",
                             "bad_request", cors)
        length = request.headers.get("content-length", "0")
        if not (length.isascii() and length.isdigit()):
            raise _HttpError(400, f"bad Content-Length {_show(length)}", "bad_request", cors)
        if len(length) > 18 or int(length) > self.limits.max_body:
            raise _HttpError(413, f"the request body is larger than {self.limits.max_body:,} bytes",
                             "request_too_large", cors)
        return int(length)

    async def _refuse(self, conn: _Connection, writer: asyncio.StreamWriter, error: _HttpError) -> None:
        """Answer with the error and end the connection, draining what the client still sends for a moment first."""
        writer.write(error.response())
        try:
            async with asyncio.timeout(LINGER_S):
                await writer.drain()
                if writer.can_write_eof():
                    writer.write_eof()
                await conn.discard()
        except TimeoutError:
            pass

    async def _answer(self, conn: _Connection, request: _Request,
                      body: bytes) -> tuple[int, dict[str, Any], Headers] | SearchStream | None:
        """The endpoint's answer, or None when the client hung up first (then the work is cancelled)."""
        return await self._watched(conn, self.endpoint.handle(request.method, request.target, body))

    async def _watched(self, conn: _Connection, work: Coroutine[Any, Any, _T]) -> _T | None:
        """The work's result, or None when the client hung up first (then the work is cancelled)."""
        task = asyncio.create_task(work)
        gone = asyncio.create_task(conn.hang_up())
        try:
            await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
            if not task.done() and gone.exception() is None and not gone.result():
                await asyncio.wait({task})  # it sent more than a head: no longer watched, its request still answered
        finally:
            for t in (task, gone):
                t.cancel()  # no-op for the one that finished
            await asyncio.wait({task, gone})
        return None if task.cancelled() else task.result()

    async def _send_stream(self, writer: asyncio.StreamWriter, stream: SearchStream, cors: Headers) -> None:
        """Send a search's events as they come; a failure before the search begins is a plain JSON error."""
        try:
            try:
                headers = await stream.start()
            except Exception as exc:
                status, payload = _failure(exc, f"search {stream.ask.name}")
                writer.write(_response(status, payload, False, cors))
                await writer.drain()
                return
            lines = ["HTTP/1.1 200 OK", "Content-Type: text/event-stream; charset=utf-8", "Cache-Control: no-cache",
                     "Connection: close", *(f"{name}: {value}" for name, value in (*headers, *cors))]
            writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
            async for frame in stream.frames():
                writer.write(frame)
                async with asyncio.timeout(self.limits.read_timeout_s):  # a client that never reads its events
                    await writer.drain()
        finally:
            await stream.aclose()


def _family(host: str) -> socket.AddressFamily:
    """The address family a host to listen on needs (IPv6 for an address such as ::1)."""
    return socket.AF_INET6 if ":" in host else socket.AF_INET
