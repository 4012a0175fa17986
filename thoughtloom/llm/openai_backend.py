"""A Backend over any OpenAI-compatible HTTP endpoint: OpenAI, vLLM, SGLang, llama.cpp server, Ollama.

The `openai` SDK is imported on first use, never at import time: importing it costs about a
second, and most runs use the embedded model.
"""

from __future__ import annotations

import asyncio
import json
import socket
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Literal

from .budget import Pricing, estimate_tokens
from .errors import (
    BatchRefused,
    ModelConfigError,
    ModelError,
    ModelTimeout,
    ModelUnreachable,
    TransientModelError,
)
from .http_errors import MAX_CONNECT_TIMEOUT_S, one_line, status_error
from .sdk_client import LazySdkClient
from .streaming import Deltas, StreamGuard, watched_stream
from .tool_calls import ToolCall, arguments_text, read_definitions, tool_calls_text
from .types import Capabilities, Completion, GenerateRequest, Usage

if TYPE_CHECKING:
    from openai import AsyncOpenAI

Api = Literal["chat", "completions"]
#: How a reply schema reaches the server: OpenAI's response_format (chat only; OpenAI, llama.cpp's
#: server), vLLM's guided_json (both endpoints, so base models get it too), or Ollama's: response_format
#: on chat (Ollama turns its json_schema.schema into its own `format`) and, as Ollama's /v1/completions
#: has no field for a schema, a completion with a schema goes to its native /api/generate as `format`.
SchemaParam = Literal["response_format", "guided_json", "ollama"]



@dataclass(frozen=True, slots=True)
class _Sampled:
    """What one HTTP call returned: texts in choice order and the usage it cost."""

    texts: tuple[str, ...]
    usage: Usage


class OpenAIBackend(LazySdkClient):
    """A Backend that calls an OpenAI-compatible server's chat or completions endpoint.

    Every generate / generate_batch call is exactly one HTTP request, so the gateway's
    reservation, call count and concurrency slot cover each request on the wire. Servers that
    ignore `n` (the llama.cpp server, Ollama) return fewer choices than asked; the gateway asks
    again for the missing samples.
    """

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        api_key: str = "none",
        api: Api = "chat",
        timeout_s: float = 120.0,
        max_concurrency: int = 16,
        pricing: Pricing | None = None,
        name: str | None = None,
        *,
        key_env: str | None = None,
        batch: bool = True,
        schema_param: SchemaParam = "response_format",
        reasoning_effort: str | None = None,
        stream: bool = True,
        native_tools: bool | None = None,
    ) -> None:
        if api not in ("chat", "completions"):
            raise ModelConfigError(f"unknown OpenAI API {api!r}; use 'chat' or 'completions'")
        if native_tools and api != "chat":
            raise ModelConfigError("native tool calling needs the chat endpoint; the completions endpoint has no tools")
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s}")
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
        self.model = model
        # None means OpenAI itself; spelled out so OPENAI_BASE_URL in the environment cannot
        # silently redirect calls meant for api.openai.com.
        self.base_url = (base_url or "https://api.openai.com/v1").rstrip("/")
        self.api_key = api_key
        self.api: Api = api
        self.timeout_s = timeout_s
        self.max_concurrency = max_concurrency
        self.name = name or f"openai-compatible:{self.base_url}@{model}"
        self.schema_param: SchemaParam = schema_param
        #: The environment variable the key came from, named when the server rejects it.
        self.key_env = key_env
        self._client: AsyncOpenAI | None = None
        self._sem: asyncio.Semaphore | None = None
        # OpenAI's reasoning models refuse max_tokens; switched once on the first such refusal.
        self._token_param = "max_tokens"
        #: Several prompts in one completions request (OpenAI, vLLM, the llama.cpp server accept a
        #: list of prompts); chat has no such form. Switched off for good if a server answers a
        #: batch with the wrong number of choices.
        self.supports_batch = batch and api == "completions"
        self.capabilities = Capabilities(
            prompt_form="chat" if api == "chat" else "text",
            # The chat endpoint's `tools` field; None: on OpenAI's own API, where it is known to work (other
            # servers take it only when set up for it: llama.cpp's --jinja, vLLM's tool-call parser).
            native_tools=api == "chat" and (native_tools if native_tools is not None else base_url is None),
            # How hard a reasoning model thinks (low, medium, high; None: the server's default), sent on chat.
            reasoning_effort=reasoning_effort,
            streams=stream,
            pricing=pricing,
        )

    # --- Backend protocol ---------------------------------------------------------------

    async def generate(self, request: GenerateRequest) -> Completion:
        """One HTTP request for request.n samples; a server that ignores n answers fewer (the
        gateway asks again for the rest, so that each request is reserved and counted)."""
        sampled = await self._sample(request, request.n, request.seed)
        if not sampled.texts:
            raise ModelError(
                f"model {self.model} at {self.base_url} returned no choices; "
                "check that the server supports this endpoint"
            )
        return Completion(sampled.texts[: request.n], sampled.usage, self.name)

    async def generate_batch(self, requests: Sequence[GenerateRequest]) -> list[Completion]:
        """Several requests as one completions request with a list of prompts (choice i*n + j is
        prompt i's sample j). Raises BatchRefused, and never batches again, when the server refuses
        the list or answers it with the wrong number of choices: the caller sends single requests."""
        first = requests[0]
        uniform = all(
            (r.n, r.max_tokens, r.temperature, r.stop, r.schema)
            == (first.n, first.max_tokens, first.temperature, first.stop, first.schema)
            for r in requests
        )
        if not (self.supports_batch and uniform and len(requests) > 1):
            raise BatchRefused(f"{self.name} cannot answer these {len(requests)} requests as one; send them singly")
        seeds = [r.seed for r in requests]
        # One seed for the whole call, derived from every request's own: same batch, same seed.
        seed = None if all(x is None for x in seeds) else zlib.crc32(repr(seeds).encode()) & 0x7FFFFFFF
        prompts = [r.prompt.as_text() for r in requests]
        try:
            sampled = await self._sample_batch(first, prompts, seed)
        except TransientModelError:
            raise  # the gateway retries the batch
        except ModelError as exc:
            # Some servers refuse a prompt list outright; single requests say whether the server itself is at fault.
            self.supports_batch = False
            raise BatchRefused(f"{self.name} refused a list of prompts ({exc}); sending single requests") from exc
        n = first.n
        if len(sampled.texts) != n * len(requests):
            self.supports_batch = False  # this server does not batch: never ask it again
            raise BatchRefused(
                f"{self.name} answered {len(requests)} prompts with {len(sampled.texts)} choices instead of "
                f"{n * len(requests)}; sending single requests",
                usage=sampled.usage,
            )
        texts = [sampled.texts[i * n : (i + 1) * n] for i in range(len(requests))]
        usages = _split_usage(sampled.usage, prompts, texts)
        return [Completion(tuple(t), u, self.name) for t, u in zip(texts, usages, strict=True)]

    async def _sample_batch(self, request: GenerateRequest, prompts: list[str], seed: int | None) -> _Sampled:
        """One completions call for several prompts, with SDK errors mapped to thoughtloom's."""
        import openai

        client, sem = self._ensure_client()
        params: dict[str, Any] = {"model": self.model, "n": request.n, "temperature": request.temperature,
                                  "max_tokens": request.max_tokens}
        if request.stop:
            params["stop"] = list(request.stop)
        if seed is not None:
            params["seed"] = seed
        params.update(self._schema_params(request))
        async with sem:
            try:
                response = await client.completions.create(prompt=prompts, **params)
            except openai.OpenAIError as exc:
                raise self._map_error(exc) from exc
            except ValueError as exc:
                raise ModelError(
                    f"model endpoint {self.base_url} sent a response that is not valid JSON ({one_line(exc)}); "
                    "check that the base URL is an OpenAI-compatible API (usually .../v1)"
                ) from exc
        choices = _choices(response)
        texts = tuple(self._reply_text(getattr(c, "text", None) or "") for c in choices)
        return _Sampled(texts, _usage(response, "".join(prompts), texts))

    # --- calls --------------------------------------------------------------------------

    def _ensure_client(self) -> tuple[AsyncOpenAI, asyncio.Semaphore]:
        if self._client is None or self._sem is None:
            import openai  # deferred: see the module docstring

            self._client = openai.AsyncOpenAI(
                base_url=self.base_url,
                api_key=self.api_key,
                # Retries belong to the gateway, which charges each attempt to the budget.
                max_retries=0,
                timeout=openai.Timeout(self.timeout_s, connect=min(self.timeout_s, MAX_CONNECT_TIMEOUT_S)),
            )
            self._sem = asyncio.Semaphore(self.max_concurrency)
        return self._client, self._sem

    async def _sample(self, request: GenerateRequest, n: int, seed: int | None) -> _Sampled:
        """One HTTP call for n samples, with SDK errors mapped to thoughtloom's."""
        import openai

        client, sem = self._ensure_client()
        async with sem:
            try:
                return await self._post(client, request, n, seed)
            except openai.BadRequestError as exc:
                if self.api == "chat" and self._token_param == "max_tokens" and _wants_max_completion_tokens(exc):
                    # Asked again by the gateway, as a request of its own (reserved and counted).
                    self._token_param = "max_completion_tokens"
                    raise TransientModelError(
                        f"model {self.model} takes max_completion_tokens instead of max_tokens; asking again"
                    ) from exc
                raise self._map_error(exc) from exc
            except openai.OpenAIError as exc:
                raise self._map_error(exc) from exc
            except ValueError as exc:
                # The SDK lets JSON decoding errors through: the URL answers, but not as OpenAI's API.
                raise ModelError(
                    f"model endpoint {self.base_url} sent a response that is not valid JSON "
                    f"({one_line(exc)}); check that the base URL is an OpenAI-compatible API (usually .../v1)"
                ) from exc

    async def _post(self, client: AsyncOpenAI, request: GenerateRequest, n: int, seed: int | None) -> _Sampled:
        params: dict[str, Any] = {"model": self.model, "n": n, "temperature": request.temperature}
        # Stop strings end a few-shot pattern in the completion form; a chat reply ends at the
        # model's end of turn, and the same strings would cut an instruct model's reasoning short
        # (unless the caller wrote them for the chat form: GenerateRequest.form).
        if request.stop and (self.api != "chat" or request.form == "chat"):
            params["stop"] = list(request.stop)
        if seed is not None:
            params["seed"] = seed
        params.update(self._schema_params(request))
        if self.api == "chat":
            params[self._token_param] = request.max_tokens
            if self.capabilities.reasoning_effort is not None:
                params["reasoning_effort"] = self.capabilities.reasoning_effort
            messages = request.prompt.as_messages()
            sent = [{"role": m.role, "content": m.content} for m in messages]
            if request.tools is not None:  # a reply with tool calls is read whole (its deltas are not text)
                params["tools"] = _function_tools(request.tools)
            elif self.capabilities.streams and request.on_text is not None:
                return await self._streamed(request, n, "".join(m.content for m in messages), _chat_delta,
                                            lambda **more: client.chat.completions.create(
                                                messages=sent, **params, **more))  # type: ignore[arg-type]
            response = await client.chat.completions.create(
                messages=sent,  # type: ignore[arg-type]
                **params,
            )
            choices = _choices(response)
            texts = tuple(self._chat_reply(getattr(c, "message", None), request) for c in choices)
            # The function definitions are read as prompt too (a server that reports no usage is estimated so).
            prompt_text = "".join(m.content for m in messages) + (request.tools or "")
        elif request.schema is not None and self.schema_param == "ollama":
            return await self._ollama_generate(client, request, seed)
        else:
            params["max_tokens"] = request.max_tokens
            prompt_text = request.prompt.as_text()
            if self.capabilities.streams and request.on_text is not None:
                return await self._streamed(request, n, prompt_text, _text_delta,
                                            lambda **more: client.completions.create(
                                                prompt=prompt_text, **params, **more))
            response = await client.completions.create(prompt=prompt_text, **params)
            choices = _choices(response)
            texts = tuple(self._reply_text(getattr(c, "text", None) or "") for c in choices)
        return _Sampled(texts, _usage(response, prompt_text, texts))

    async def _streamed(self, request: GenerateRequest, n: int, prompt_text: str, delta_of: Callable[[Any], Any],
                        create: Callable[..., Any]) -> _Sampled:
        """One request answered as server-sent events (`stream: true`, usage in the last chunk): each choice's
        text handed to the request's sink as it comes (coalesced), the whole texts returned as a reply would
        be. The response is closed however the stream ends: finished, refused, cut off or cancelled."""
        assert request.on_text is not None
        where = f"{self.base_url} (model {self.model})"
        guard = StreamGuard(where, n, request.max_tokens)
        deltas = Deltas(request.on_text)
        usage: Any = None
        import openai

        async with watched_stream(guard, deltas, self.timeout_s, where, openai.OpenAIError, self._map_error,
                                  "check that the base URL is an OpenAI-compatible API, or use --no-stream") as opened:
            stream = opened.keep(await create(stream=True, stream_options={"include_usage": True}))
            async for chunk in stream:
                guard.event()
                usage = getattr(chunk, "usage", None) or usage
                choices = getattr(chunk, "choices", None) or []
                if not isinstance(choices, list):
                    raise ModelError(f"model endpoint {where} streamed a chunk whose choices are not a list "
                                     f"({one_line(choices)}); check the server, or use --no-stream")
                for choice in choices:
                    index, text = getattr(choice, "index", None), delta_of(choice)
                    if not isinstance(index, int):
                        raise ModelError(f"model endpoint {where} streamed a choice without an index "
                                         f"({one_line(choice)}); check the server, or use --no-stream")
                    text = text if isinstance(text, str) else ""
                    guard.text(index, text)
                    deltas.add(index, text)
                    if getattr(choice, "finish_reason", None):
                        guard.finished.add(index)
        texts = tuple(self._reply_text(t) for t in guard.joined())
        return _Sampled(texts, _usage(SimpleNamespace(usage=usage), prompt_text, texts))

    def _chat_reply(self, message: Any, request: GenerateRequest) -> str:
        """A chat choice's reply text; with function definitions sent, its calls and text as `tool_calls_text`."""
        content = getattr(message, "content", None) or ""
        if request.tools is None:
            return self._reply_text(content)
        functions = [getattr(call, "function", None) for call in getattr(message, "tool_calls", None) or ()]
        calls = [ToolCall(str(getattr(f, "name", None) or ""), _arguments(getattr(f, "arguments", None)))
                 for f in functions]
        return self._reply_text(tool_calls_text(calls, content))

    async def _ollama_generate(self, client: AsyncOpenAI, request: GenerateRequest, seed: int | None) -> _Sampled:
        """A completion with a reply schema through Ollama's native /api/generate, whose `format` takes
        the schema; the prompt and settings as Ollama's /v1/completions would pass them on. One sample:
        like /v1, it has no n, and the gateway asks again for the rest."""
        options: dict[str, Any] = {"num_predict": request.max_tokens, "temperature": request.temperature}
        if request.stop:
            options["stop"] = list(request.stop)
        if seed is not None:
            options["seed"] = seed
        prompt_text = request.prompt.as_text()
        assert request.schema is not None
        body = {"model": self.model, "prompt": prompt_text, "stream": False,
                "format": json.loads(request.schema), "options": options}
        data = await client.post(f"{self.base_url.removesuffix('/v1')}/api/generate", cast_to=object, body=body)
        text = data.get("response") if isinstance(data, dict) else None
        if not isinstance(data, dict) or not isinstance(text, str):
            raise ModelError(f"Ollama at {self.base_url.removesuffix('/v1')} answered /api/generate without a "
                             f"response text ({one_line(data)}); check that it is Ollama 0.5 or later")
        text = self._reply_text(text)
        prompt_tokens, output_tokens = data.get("prompt_eval_count"), data.get("eval_count")
        return _Sampled((text,), Usage(
            prompt_tokens if isinstance(prompt_tokens, int) else estimate_tokens(prompt_text),
            output_tokens if isinstance(output_tokens, int) else estimate_tokens(text)))

    def _schema_params(self, request: GenerateRequest) -> dict[str, Any]:
        """The request's reply schema in the form this server takes (none where it has no such form)."""
        if request.schema is None:
            return {}
        schema = json.loads(request.schema)
        if self.schema_param == "guided_json":
            return {"extra_body": {"guided_json": schema}}
        if self.api == "chat":  # structured output: OpenAI, vLLM, llama.cpp's server and Ollama honour it
            return {"response_format": {"type": "json_schema", "json_schema": {"name": "reply", "schema": schema}}}
        return {}  # OpenAI's completions endpoint has no structured output: the text is parsed

    # --- errors -------------------------------------------------------------------------

    def _map_error(self, exc: Exception) -> ModelError:
        """Translate an SDK exception into a one-line thoughtloom error saying what to do."""
        import openai

        where = f"{self.base_url} (model {self.model})"
        if isinstance(exc, openai.APITimeoutError):
            return ModelTimeout(
                f"model endpoint {where} did not answer within {self.timeout_s:g}s; "
                "retrying, or raise the timeout if the model is slow"
            )
        if isinstance(exc, openai.APIConnectionError):
            return ModelUnreachable(f"cannot reach model endpoint {self.base_url}: {_connection_reason(exc)}")
        if isinstance(exc, openai.APIStatusError):
            status = exc.status_code
            said = f"HTTP {status}: {one_line(exc.message)}"
            if status == 429 and exc.code == "insufficient_quota":
                # OpenAI signals an empty account with 429 too, but waiting will not refill it.
                return ModelError(f"model endpoint {where} says the account has no quota left ({said}); add credit")
            return status_error(where, status, said, exc.response.headers, self.key_env,
                                "check the model name, that the base URL ends in /v1, and that the server "
                                f"offers the {self.api} API (#chat or #completions)")
        return ModelError(f"model endpoint {where} failed: {type(exc).__name__}: {one_line(exc)}")


def _function_tools(definitions: str) -> list[dict[str, Any]]:
    """A request's function definitions in the chat endpoint's `tools` form."""
    return [{"type": "function", "function": {"name": f.name, "description": f.description,
                                              "parameters": f.parameters}}
            for f in read_definitions(definitions)]


def _arguments(value: Any) -> str:
    """A call's arguments as JSON text: as the server sent them (checked by the agent), or a server's object as JSON."""
    return value if isinstance(value, str) else arguments_text(value if value is not None else {})


def _choices(response: Any) -> list[Any]:
    """A response's choices in index order (servers need not return them sorted)."""
    choices = getattr(response, "choices", None)
    if not isinstance(choices, list):
        raise ModelError(
            f"the model server sent a response without a choices list ({one_line(response)}); "
            "check that the base URL is an OpenAI-compatible API (usually .../v1)"
        )
    ordered = sorted(enumerate(choices), key=lambda pair: (_index(pair[1], pair[0]), pair[0]))
    return [choice for _, choice in ordered]


def _chat_delta(choice: Any) -> Any:
    """A streamed chat choice's new text."""
    return getattr(getattr(choice, "delta", None), "content", None)


def _text_delta(choice: Any) -> Any:
    """A streamed completion choice's new text."""
    return getattr(choice, "text", None)


def _index(choice: Any, position: int) -> int:
    index = getattr(choice, "index", None)
    return index if isinstance(index, int) else position


def _usage(response: Any, prompt_text: str, texts: tuple[str, ...]) -> Usage:
    """The response's token usage, or an estimate for servers that report none."""
    usage = getattr(response, "usage", None)
    prompt_tokens = getattr(usage, "prompt_tokens", None)
    completion_tokens = getattr(usage, "completion_tokens", None)
    if not isinstance(prompt_tokens, int):
        prompt_tokens = estimate_tokens(prompt_text)
    if not isinstance(completion_tokens, int):
        completion_tokens = sum(estimate_tokens(t) for t in texts)
    # A part of completion_tokens (OpenAI counts the hidden reasoning in it), reported by reasoning models only.
    reasoning = getattr(getattr(usage, "completion_tokens_details", None), "reasoning_tokens", None)
    return Usage(prompt_tokens, completion_tokens, reasoning if isinstance(reasoning, int) and reasoning > 0 else 0)


def _split_usage(total: Usage, prompts: Sequence[str], texts: Sequence[Sequence[str]]) -> list[Usage]:
    """A batched call's usage shared among its requests: input in proportion to prompt bytes,
    output to completion bytes; the sums are exact (the last request takes the rounding)."""

    def shares(amount: int, weights: list[int]) -> list[int]:
        whole = sum(weights) or len(weights)
        parts = [amount * (w or (0 if sum(weights) else 1)) // whole for w in weights]
        parts[-1] += amount - sum(parts)
        return parts

    ins = shares(total.input_tokens, [len(p.encode()) for p in prompts])
    outs = shares(total.output_tokens, [sum(len(t.encode()) for t in ts) for ts in texts])
    return [Usage(i, o) for i, o in zip(ins, outs, strict=True)]


def _wants_max_completion_tokens(exc: Any) -> bool:
    """Whether a 400 says the model takes max_completion_tokens instead of max_tokens.

    Only the hint in the message counts: OpenAI also blames param "max_tokens" when the value
    is merely too large, and switching would not help then.
    """
    return "max_completion_tokens" in str(getattr(exc, "message", exc))


def _connection_reason(exc: BaseException) -> str:
    """Why a connection failed, from the exception chain, with what to do about it."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, ConnectionRefusedError):
            return "connection refused; is the server running?"
        if isinstance(cause, socket.gaierror):
            return "host name not found; check the URL"
        cause = cause.__cause__ or cause.__context__
    detail = exc.__cause__ or exc.__context__
    reason = one_line(detail) if detail is not None else one_line(exc)
    return f"connection failed ({reason}); check the URL and that the server is running"
