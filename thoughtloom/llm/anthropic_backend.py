"""A Backend over Anthropic's Messages API (`anthropic:MODEL`), through the official `anthropic` SDK.

The SDK is an optional extra (`pip install thoughtloom[anthropic]`) imported on first use, never
at import time, like the OpenAI backend's.
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any

from .budget import Pricing, estimate_tokens
from .errors import ModelConfigError, ModelError, ModelTimeout, ModelUnreachable
from .http_errors import MAX_CONNECT_TIMEOUT_S, one_line, status_error
from .sdk_client import LazySdkClient
from .streaming import Deltas, StreamGuard, watched_stream
from .tool_calls import ToolCall, arguments_text, read_definitions, tool_calls_text
from .types import Capabilities, Completion, GenerateRequest, Usage

if TYPE_CHECKING:
    from anthropic import AsyncAnthropic

DEFAULT_BASE_URL = "https://api.anthropic.com"
INSTALL_HINT = "pip install 'thoughtloom[anthropic]' (or pip install anthropic)"


class AnthropicBackend(LazySdkClient):
    """A Backend that calls Anthropic's Messages API: one request, one sample.

    The Messages API has no `n`: each request answers one sample and the gateway asks again for
    the rest, each request reserved, counted and slotted on its own. System messages go to the
    API's `system` field; a reply schema is sent as structured output (`output_config.format`).
    The SDK exposes no temperature or seed for Messages, so sampling is the model's own.
    """

    supports_batch = False

    def __init__(
        self,
        model: str,
        api_key: str,
        base_url: str | None = None,
        timeout_s: float = 120.0,
        max_concurrency: int = 16,
        pricing: Pricing | None = None,
        name: str | None = None,
        *,
        key_env: str | None = "ANTHROPIC_API_KEY",
        thinking_tokens: int | None = None,
        stream: bool = True,
        native_tools: bool = True,
    ) -> None:
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s}")
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
        self.model = model
        self.api_key = api_key
        self.base_url = (base_url or DEFAULT_BASE_URL).rstrip("/")
        self.timeout_s = timeout_s
        self.max_concurrency = max_concurrency
        self.name = name or f"anthropic:{model}"
        #: The environment variable the key came from, named when the server rejects it.
        self.key_env = key_env
        # thinking_tokens: extended thinking's budget per sample (0: no thinking). Anthropic wants max_tokens
        # above it, so each request asks for the reply's max_tokens plus this; the gateway reserves both as output.
        self.capabilities = Capabilities(prompt_form="chat", native_tools=native_tools,
                                         thinking_tokens=thinking_tokens or 0, pricing=pricing,
                                         streams=stream)
        self._client: AsyncAnthropic | None = None
        self._sem: asyncio.Semaphore | None = None

    async def generate(self, request: GenerateRequest) -> Completion:
        """One Messages request for one sample (the gateway asks again for the rest of request.n)."""
        client, sem = self._ensure_client()
        params = self._params(request)
        import anthropic

        async with sem:
            # A reply with tool calls is read whole: its tool_use blocks are not text to show.
            if self.capabilities.streams and request.on_text is not None and request.tools is None:
                return await self._streamed(client, params, request)
            try:
                response = await client.messages.create(**params)
            except anthropic.AnthropicError as exc:
                raise self._map_error(exc) from exc
            except ValueError as exc:
                raise ModelError(
                    f"model endpoint {self.base_url} sent a response that is not valid JSON ({one_line(exc)}); "
                    "check that the base URL is Anthropic's API (without /v1)"
                ) from exc
        blocks = getattr(response, "content", None) or ()
        # Only text blocks are the answer: thinking blocks are the model's reasoning, billed but never shown.
        text = self._reply_text("".join(getattr(block, "text", "") or ""
                                        for block in blocks if getattr(block, "type", None) == "text"))
        if request.tools is not None:
            text = self._reply_text(_tool_use_reply(blocks, text))
        usage = getattr(response, "usage", None)
        input_tokens = getattr(usage, "input_tokens", None)
        output_tokens = getattr(usage, "output_tokens", None)
        if not isinstance(input_tokens, int) or not isinstance(output_tokens, int):
            raise ModelError(
                f"model endpoint {self.base_url} reported no token usage; check that it is Anthropic's API"
            )
        # output_tokens includes the thinking, which the API does not count apart: what the reply's own text
        # does not account for was thinking (an estimate; the budget charges output_tokens as reported).
        thought = any(getattr(block, "type", None) in ("thinking", "redacted_thinking") for block in blocks)
        reasoning = max(0, output_tokens - estimate_tokens(text)) if thought else 0
        return Completion((text,), Usage(input_tokens, output_tokens, reasoning), self.name)

    async def _streamed(self, client: AsyncAnthropic, params: dict[str, Any], request: GenerateRequest) -> Completion:
        """One Messages request answered as its event stream: the text blocks' deltas handed to the request's
        sink as they come (coalesced; thinking is never shown), the whole reply returned as `generate`'s would
        be. The response is closed however the stream ends. Usage the stream does not report is estimated from
        the texts (the gateway's floor then applies, as for any server that does not count)."""
        assert request.on_text is not None
        where = f"{self.base_url} (model {self.model})"
        guard = StreamGuard(where, 1, request.max_tokens + self.capabilities.thinking_tokens)
        deltas = Deltas(request.on_text)
        input_tokens: Any = None
        output_tokens: Any = None
        thought = False
        import anthropic

        async with watched_stream(guard, deltas, self.timeout_s, where, anthropic.AnthropicError, self._map_error,
                                  "check that the base URL is Anthropic's API (without /v1)") as opened:
            stream = opened.keep(await client.messages.create(**params, stream=True))
            async for event in stream:
                guard.event()
                kind = getattr(event, "type", None)
                if kind == "message_start":
                    input_tokens = getattr(getattr(getattr(event, "message", None), "usage", None),
                                           "input_tokens", None)
                elif kind == "content_block_start":
                    block = getattr(getattr(event, "content_block", None), "type", None)
                    thought = thought or block in ("thinking", "redacted_thinking")
                elif kind == "content_block_delta":
                    delta = getattr(event, "delta", None)
                    text = getattr(delta, "text", None) if getattr(delta, "type", None) == "text_delta" else None
                    if isinstance(text, str):
                        guard.text(0, text)
                        deltas.add(0, text)
                elif kind == "message_delta":
                    # Cumulative: the last one counts the whole reply.
                    output_tokens = getattr(getattr(event, "usage", None), "output_tokens", None)
                elif kind == "message_stop":
                    guard.finished.add(0)
            guard.text(0, "")  # a reply with no text still has to have ended (joined below)
        text = self._reply_text(guard.joined()[0])
        if not isinstance(input_tokens, int):
            input_tokens = estimate_tokens("".join(m.get("content", "") for m in params["messages"])
                                           + params.get("system", ""))
        if not isinstance(output_tokens, int):
            output_tokens = estimate_tokens(text)
        reasoning = max(0, output_tokens - estimate_tokens(text)) if thought else 0
        return Completion((text,), Usage(input_tokens, output_tokens, reasoning), self.name)

    def _params(self, request: GenerateRequest) -> dict[str, Any]:
        messages = request.prompt.as_messages()
        system = "\n\n".join(m.content for m in messages if m.role == "system")
        turns = [{"role": m.role, "content": m.content} for m in messages if m.role != "system"]
        thinking = self.capabilities.thinking_tokens
        params: dict[str, Any] = {"model": self.model, "max_tokens": request.max_tokens + thinking, "messages": turns}
        if thinking:
            params["thinking"] = {"type": "enabled", "budget_tokens": thinking}
        if system:
            params["system"] = system
        # As with OpenAI's chat: completion-form stop strings would cut a chat reply short.
        if request.stop and request.form == "chat":
            params["stop_sequences"] = list(request.stop)
        if request.tools is not None:
            params["tools"] = [{"name": f.name, "description": f.description, "input_schema": f.parameters}
                               for f in read_definitions(request.tools)]
        schema = _structured_schema(request.schema) if request.schema is not None else None
        if schema is not None:
            params["output_config"] = {"format": {"type": "json_schema", "schema": schema}}
        return params

    def _ensure_client(self) -> tuple[AsyncAnthropic, asyncio.Semaphore]:
        if self._client is None or self._sem is None:
            try:
                import anthropic  # deferred: see the module docstring
            except ImportError:
                raise ModelConfigError(f"anthropic:{self.model} needs the anthropic SDK: {INSTALL_HINT}") from None
            self._client = anthropic.AsyncAnthropic(
                api_key=self.api_key,
                base_url=self.base_url,
                # Retries belong to the gateway, which charges each attempt to the budget.
                max_retries=0,
                timeout=anthropic.Timeout(self.timeout_s, connect=min(self.timeout_s, MAX_CONNECT_TIMEOUT_S)),
            )
            self._sem = asyncio.Semaphore(self.max_concurrency)
        return self._client, self._sem

    def _map_error(self, exc: Exception) -> ModelError:
        """Translate an SDK exception into a one-line thoughtloom error saying what to do."""
        import anthropic

        where = f"{self.base_url} (model {self.model})"
        if isinstance(exc, anthropic.APITimeoutError):
            return ModelTimeout(f"model endpoint {where} did not answer within {self.timeout_s:g}s; "
                                "retrying, or raise --timeout if the model is slow")
        if isinstance(exc, anthropic.APIConnectionError):
            return ModelUnreachable(f"cannot reach model endpoint {self.base_url}: {one_line(exc.__cause__ or exc)}; "
                                    "check the URL (ANTHROPIC_BASE_URL) and the network")
        if isinstance(exc, anthropic.APIStatusError):
            said = f"HTTP {exc.status_code}: {one_line(getattr(exc, 'api_message', None) or exc.message)}"
            return status_error(where, exc.status_code, said, exc.response.headers, self.key_env,
                                "check the model name")
        return ModelError(f"model endpoint {where} failed: {one_line(exc)}")


def _tool_use_reply(blocks: Any, text: str) -> str:
    """A reply's tool_use blocks (each a function name and its input) and its text, as `tool_calls_text`."""
    calls = [ToolCall(str(getattr(block, "name", None) or ""), arguments_text(getattr(block, "input", None) or {}))
             for block in blocks if getattr(block, "type", None) == "tool_use"]
    return tool_calls_text(calls, text)


def _structured_schema(text: str) -> dict[str, Any] | None:
    """A reply schema in the subset Anthropic's structured output takes, or None where it has no form for it.

    The API refuses (HTTP 400) bounds such as minimum, maxLength and maxItems and objects not closed
    by additionalProperties false; its SDK's transform_schema closes every object and moves those bounds
    into descriptions (the task's parser still checks them). A map (an object whose keys are free, as a
    contract's object[integer] value) cannot be closed: such a request goes without a schema, and its
    free-text reply is read by the task's fallback.
    """
    from anthropic import transform_schema

    schema = json.loads(text)
    return None if _has_map(schema) else transform_schema(schema)


def _has_map(schema: Any) -> bool:
    """Whether a JSON Schema holds an object whose additionalProperties is a schema of its own."""
    if isinstance(schema, dict):
        return isinstance(schema.get("additionalProperties"), dict) or any(_has_map(v) for v in schema.values())
    if isinstance(schema, list):
        return any(_has_map(v) for v in schema)
    return False
