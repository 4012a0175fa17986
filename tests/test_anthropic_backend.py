"""anthropic:MODEL through the official SDK, against a Messages API double on 127.0.0.1 (real HTTP)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from openai_server import FakeOpenAIServer, Reply, Seen, serve
from test_cli import assert_one_line_error, loom

from thoughtloom.api import solve
from thoughtloom.llm.anthropic_backend import AnthropicBackend
from thoughtloom.llm.errors import ModelConfigError, ModelError, TransientModelError
from thoughtloom.llm.gateway import Gateway, RetryPolicy
from thoughtloom.llm.registry import make_backend, parse_model_spec
from thoughtloom.llm.types import GenerateRequest, Message, Prompt


def message(text: str, input_tokens: int = 12, output_tokens: int = 5) -> Reply:
    """A Messages API answer with one text block."""
    return Reply(200, {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
        "content": [{"type": "text", "text": text}], "stop_reason": "end_turn", "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens},
    })


def anthropic_error(status: int, kind: str, text: str, headers: dict[str, str] | None = None) -> Reply:
    return Reply(status, {"type": "error", "error": {"type": kind, "message": text}}, headers=headers or {})


@pytest.fixture
def messages() -> Iterator[FakeOpenAIServer]:
    """A Messages API double answering every request with "hello" (scripted replies first)."""
    with serve(FakeOpenAIServer(responder=lambda seen: message("hello"))) as fake:
        yield fake


def root(server: FakeOpenAIServer) -> str:
    """The double's base URL as the Anthropic SDK takes it (it adds /v1/messages itself)."""
    return server.url.removesuffix("/v1")


@pytest.fixture
async def backend(messages: FakeOpenAIServer) -> AsyncIterator[AnthropicBackend]:
    made = make_backend("anthropic:claude-test", {"ANTHROPIC_API_KEY": "sk-ant-test",
                                                  "ANTHROPIC_BASE_URL": root(messages)})
    assert isinstance(made, AnthropicBackend)
    yield made
    await made.aclose()


def ask(**kwargs: Any) -> GenerateRequest:
    return GenerateRequest(Prompt(messages=(Message("system", "Be brief."), Message("user", "Hi?"))), **kwargs)


# --- the spec ---------------------------------------------------------------------------------------


def test_an_anthropic_spec_names_the_provider_and_model() -> None:
    spec = parse_model_spec("anthropic:claude-test", {})
    assert (spec.provider, spec.model, spec.base_url, spec.identity) == (
        "anthropic", "claude-test", "https://api.anthropic.com", "anthropic:claude-test")


def test_an_anthropic_spec_has_no_completions_endpoint() -> None:
    with pytest.raises(ModelConfigError, match="only the chat"):
        parse_model_spec("anthropic:claude-test#completions", {})


def test_a_missing_anthropic_key_names_the_variable() -> None:
    with pytest.raises(ModelConfigError, match="ANTHROPIC_API_KEY"):
        make_backend("anthropic:claude-test", {})


def test_a_missing_anthropic_key_is_a_one_line_cli_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    assert_one_line_error(loom("solve", "--model", "anthropic:claude-test", "hi"), "ANTHROPIC_API_KEY")


# --- requests and replies ---------------------------------------------------------------------------


async def test_a_request_goes_to_the_messages_endpoint_with_the_key(
        messages: FakeOpenAIServer, backend: AnthropicBackend) -> None:
    completion = await backend.generate(ask())
    assert completion.texts == ("hello",)
    seen = messages.seen[0]
    assert seen.path == "/v1/messages"
    # SDK 2.x sends the key as a bearer token; 0.x as x-api-key.
    assert "sk-ant-test" in (seen.headers.get("x-api-key"), seen.headers.get("authorization", "").removeprefix("Bearer "))


async def test_system_messages_go_to_the_system_field(messages: FakeOpenAIServer, backend: AnthropicBackend) -> None:
    await backend.generate(ask(max_tokens=40))
    body = messages.seen[0].body
    assert body["system"] == "Be brief."
    assert body["messages"] == [{"role": "user", "content": "Hi?"}]
    assert (body["model"], body["max_tokens"]) == ("claude-test", 40)


async def test_usage_is_what_the_server_reports(messages: FakeOpenAIServer, backend: AnthropicBackend) -> None:
    messages.script(message("x", input_tokens=30, output_tokens=7))
    completion = await backend.generate(ask())
    assert (completion.usage.input_tokens, completion.usage.output_tokens) == (30, 7)


async def test_a_reply_schema_is_sent_as_structured_output(
        messages: FakeOpenAIServer, backend: AnthropicBackend) -> None:
    schema = {"type": "object", "properties": {"score": {"type": "integer"}}, "required": ["score"]}
    await backend.generate(ask(schema=json.dumps(schema)))
    # Closed, as Anthropic's structured output requires of every object.
    assert messages.seen[0].body["output_config"] == {"format": {"type": "json_schema", "schema": {
        **schema, "additionalProperties": False}}}


async def test_bounds_anthropic_refuses_are_not_sent_as_schema_keywords(
        messages: FakeOpenAIServer, backend: AnthropicBackend) -> None:
    from thoughtloom.tasks.recursion.hooks import plans_schema

    await backend.generate(ask(schema=plans_schema(3)))
    sent = json.dumps(messages.seen[0].body["output_config"]["format"]["schema"])
    for refused in ('"minimum"', '"maximum"', '"minLength"', '"maxLength"', '"maxItems"'):
        assert refused not in sent
    assert '"additionalProperties": true' not in sent


async def test_a_schema_with_a_map_goes_without_structured_output(
        messages: FakeOpenAIServer, backend: AnthropicBackend) -> None:
    from thoughtloom.tasks.recursion import ChildSpec

    await backend.generate(ask(schema=ChildSpec("object[integer]").reply_schema()))
    assert "output_config" not in messages.seen[0].body


async def test_chat_form_stop_strings_are_sent_as_stop_sequences(
        messages: FakeOpenAIServer, backend: AnthropicBackend) -> None:
    await backend.generate(ask(stop=("END",), form="chat"))
    await backend.generate(ask(stop=("\n",)))
    assert messages.seen[0].body["stop_sequences"] == ["END"]
    assert "stop_sequences" not in messages.seen[1].body


async def test_the_gateway_asks_once_per_sample(messages: FakeOpenAIServer, backend: AnthropicBackend) -> None:
    gateway = Gateway(backend)
    completion = await gateway.generate(ask(n=3))
    assert completion.texts == ("hello",) * 3
    assert len(messages.seen) == 3
    assert gateway.budget.spent.input_tokens == 36


# --- errors -----------------------------------------------------------------------------------------


async def test_a_rejected_key_is_a_config_error_naming_the_variable(
        messages: FakeOpenAIServer, backend: AnthropicBackend) -> None:
    messages.script(anthropic_error(401, "authentication_error", "invalid x-api-key"))
    with pytest.raises(ModelConfigError, match="ANTHROPIC_API_KEY"):
        await backend.generate(ask())


async def test_an_overloaded_server_is_transient(messages: FakeOpenAIServer, backend: AnthropicBackend) -> None:
    messages.script(anthropic_error(529, "overloaded_error", "Overloaded"))
    with pytest.raises(TransientModelError, match="529"):
        await backend.generate(ask())
    assert len(messages.seen) == 1  # retrying is the gateway's job, not the SDK's


async def test_a_429_carries_the_servers_retry_after(messages: FakeOpenAIServer, backend: AnthropicBackend) -> None:
    messages.script(anthropic_error(429, "rate_limit_error", "slow down", {"retry-after": "3"}))
    with pytest.raises(TransientModelError) as caught:
        await backend.generate(ask())
    assert caught.value.retry_after_s == 3.0


async def test_a_bad_request_is_a_permanent_one_line_error(
        messages: FakeOpenAIServer, backend: AnthropicBackend) -> None:
    messages.script(anthropic_error(400, "invalid_request_error", "max_tokens: too large\nsee docs"))
    with pytest.raises(ModelError, match="400") as caught:
        await backend.generate(ask())
    assert not isinstance(caught.value, TransientModelError)
    assert "\n" not in str(caught.value)


async def test_the_gateway_retries_an_overloaded_server(messages: FakeOpenAIServer, backend: AnthropicBackend) -> None:
    messages.script(anthropic_error(529, "overloaded_error", "Overloaded"))
    gateway = Gateway(backend, retry=RetryPolicy(base_delay_s=0.01))
    assert (await gateway.generate(ask())).texts == ("hello",)
    assert len(messages.seen) == 2


def test_importing_the_registry_does_not_import_the_anthropic_sdk() -> None:
    code = "import sys, thoughtloom.llm.registry; print('anthropic' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# --- a whole search ---------------------------------------------------------------------------------


def general_reply(seen: Seen) -> Reply:
    """The general task's operators answered in the Messages form."""
    user = seen.body["messages"][-1]["content"]
    steps = re.findall(r"^Step \d+: (.*)$", user, re.MULTILINE)
    if "Give the single best next step" in user:
        return message(f"work out part {len(steps) + 1}")
    if "Evaluate the last step" in user:
        return message("Score: 8/10")
    return message("42")


def test_a_search_runs_on_an_anthropic_model(monkeypatch: pytest.MonkeyPatch) -> None:
    with serve(FakeOpenAIServer(responder=general_reply)) as server:
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", root(server))
        result = solve("What is six times seven?", task="general", model="anthropic:claude-test", controller=False,
                       breadth=2, beam=1, max_depth=2, value_samples=1)
    assert result.answer == "42"
    assert result.usage.calls == len(server.seen) > 2
    assert not result.usage.cost_known  # no price list for Anthropic models: unknown, not $0


async def test_without_the_sdk_an_anthropic_model_says_how_to_install_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "anthropic", None)  # what `import anthropic` meets when it is not installed
    backend = AnthropicBackend("claude-test", api_key="sk-ant-test", base_url="http://127.0.0.1:9")
    with pytest.raises(ModelConfigError, match=r"pip install 'thoughtloom\[anthropic\]'"):
        await backend.generate(ask())
