"""OpenAIBackend against a real OpenAI-compatible HTTP server on 127.0.0.1."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
from conftest import BackendFactory
from openai_server import FakeOpenAIServer, Reply, closed_port, error_body

from thoughtloom.llm.errors import (
    ModelConfigError,
    ModelError,
    ModelUnreachable,
    TransientModelError,
)
from thoughtloom.llm.gateway import Gateway, RetryPolicy
from thoughtloom.llm.openai_backend import OpenAIBackend
from thoughtloom.llm.types import Completion, GenerateRequest, Message, Prompt, Usage

def ask(n: int = 1, **kwargs: Any) -> GenerateRequest:
    """A request with a plain-text prompt."""
    return GenerateRequest(Prompt(text="Say something."), n=n, **kwargs)


# --- happy paths --------------------------------------------------------------------------


async def test_chat_returns_n_texts_in_choice_index_order(
    server: FakeOpenAIServer, backend_for: BackendFactory
) -> None:
    backend = backend_for(api="chat")
    completion = await backend.generate(ask(n=3))
    assert completion == Completion(("sample 0", "sample 1", "sample 2"), Usage(11, 9), backend.name)
    assert [s.path for s in server.seen] == ["/v1/chat/completions"]


async def test_completions_returns_n_texts_in_choice_index_order(
    server: FakeOpenAIServer, backend_for: BackendFactory
) -> None:
    backend = backend_for(api="completions")
    completion = await backend.generate(ask(n=3))
    assert completion.texts == ("text 0", "text 1", "text 2")
    assert completion.usage == Usage(11, 9)
    assert [s.path for s in server.seen] == ["/v1/completions"]


async def test_chat_sends_messages_and_sampling_parameters(
    server: FakeOpenAIServer, backend_for: BackendFactory
) -> None:
    backend = backend_for(api="chat")
    prompt = Prompt(messages=(Message("system", "Be brief."), Message("user", "Hi")))
    await backend.generate(GenerateRequest(prompt, n=3, max_tokens=42, temperature=0.3, stop=("\n\n",), seed=7))
    body = server.seen[0].body
    assert body["model"] == "test-model"
    assert body["messages"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    assert (body["n"], body["max_tokens"], body["temperature"], body["seed"]) == (3, 42, 0.3, 7)


async def test_chat_replies_end_at_the_end_of_turn_not_at_completion_stop_strings(
    server: FakeOpenAIServer, backend_for: BackendFactory
) -> None:
    backend = backend_for(api="chat")
    await backend.generate(GenerateRequest(Prompt(messages=(Message("user", "Hi"),)), stop=("\n\n",)))
    assert "stop" not in server.seen[0].body


async def test_a_chat_request_that_pins_the_chat_form_sends_its_stop_strings(
    server: FakeOpenAIServer, backend_for: BackendFactory
) -> None:
    backend = backend_for(api="chat")
    await backend.generate(GenerateRequest(Prompt(messages=(Message("user", "Hi"),)), stop=("\n\n",), form="chat"))
    assert server.seen[0].body["stop"] == ["\n\n"]


async def test_a_reply_schema_is_sent_as_structured_output_on_chat_and_not_on_completions(
    server: FakeOpenAIServer, backend_for: BackendFactory
) -> None:
    schema = '{"properties":{"x":{"type":"integer"}},"required":["x"],"type":"object"}'
    await backend_for(api="chat").generate(GenerateRequest(Prompt(messages=(Message("user", "Hi"),)), schema=schema))
    await backend_for(api="completions").generate(GenerateRequest(Prompt(text="Hi"), schema=schema))
    chat, completions = server.seen[0].body, server.seen[1].body
    assert chat["response_format"] == {"type": "json_schema", "json_schema": {"name": "reply", "schema": {
        "properties": {"x": {"type": "integer"}}, "required": ["x"], "type": "object"}}}
    assert "response_format" not in completions


async def test_chat_wraps_a_text_prompt_in_one_user_message(
    server: FakeOpenAIServer, backend_for: BackendFactory
) -> None:
    backend = backend_for(api="chat")
    await backend.generate(ask())
    assert server.seen[0].body["messages"] == [{"role": "user", "content": "Say something."}]


async def test_completions_sends_the_prompt_as_text(
    server: FakeOpenAIServer, backend_for: BackendFactory
) -> None:
    backend = backend_for(api="completions")
    prompt = Prompt(text="Q: 2+2?\nA:", messages=(Message("user", "2+2?"),))
    await backend.generate(GenerateRequest(prompt, n=2, max_tokens=5, stop=("\n",), seed=1))
    body = server.seen[0].body
    assert body["prompt"] == "Q: 2+2?\nA:"
    assert (body["n"], body["max_tokens"], body["stop"], body["seed"]) == (2, 5, ["\n"], 1)
    assert "messages" not in body


async def test_empty_stop_and_missing_seed_are_not_sent(
    server: FakeOpenAIServer, backend_for: BackendFactory
) -> None:
    backend = backend_for()
    await backend.generate(ask(stop=(), seed=None))
    assert "stop" not in server.seen[0].body
    assert "seed" not in server.seen[0].body


async def test_api_key_is_sent_as_a_bearer_token(
    server: FakeOpenAIServer, backend_for: BackendFactory
) -> None:
    backend = backend_for(api_key="sk-secret")
    await backend.generate(ask())
    assert server.seen[0].headers["authorization"] == "Bearer sk-secret"


async def test_usage_is_estimated_from_bytes_when_the_server_reports_none(
    server: FakeOpenAIServer, backend_for: BackendFactory
) -> None:
    server.send_usage = False
    backend = backend_for(api="completions")
    completion = await backend.generate(GenerateRequest(Prompt(text="x" * 40), n=2))
    # 40 prompt bytes / 4; "text 0" and "text 1" are 6 bytes each, 6 // 4 = 1 per text.
    assert completion.usage == Usage(10, 2)


async def test_count_tokens_is_unknown_for_remote_models(backend_for: BackendFactory) -> None:
    assert backend_for().count_tokens(Prompt(text="hello")) is None


# --- servers that ignore n ----------------------------------------------------------------


async def test_a_server_ignoring_n_is_sent_one_request_and_its_fewer_texts_returned(
    server: FakeOpenAIServer, backend_for: BackendFactory
) -> None:
    server.max_choices = 1
    completion = await backend_for(api="chat").generate(ask(n=3))
    assert completion.texts == ("sample 0",)
    assert len(server.seen) == 1


def ignoring_gateway(backend: OpenAIBackend, **kwargs: Any) -> Gateway:
    return Gateway(backend, retry=RetryPolicy(base_delay_s=0.01), **kwargs)


async def test_the_gateway_asks_a_server_ignoring_n_again_for_each_missing_sample(
    server: FakeOpenAIServer, backend_for: BackendFactory
) -> None:
    server.max_choices = 1
    completion = await ignoring_gateway(backend_for(api="chat")).generate(ask(n=3))
    assert len(completion.texts) == 3
    assert len(server.seen) == 3


async def test_each_request_for_missing_samples_is_charged_and_counted(
    server: FakeOpenAIServer, backend_for: BackendFactory
) -> None:
    server.max_choices = 1
    gateway = ignoring_gateway(backend_for(api="completions"))
    completion = await gateway.generate(ask(n=3))
    assert completion.usage == Usage(3 * 11, 3 * 3)
    assert gateway.budget.spent == Usage(3 * 11, 3 * 3)
    assert gateway.budget.calls == 3


async def test_requests_for_missing_samples_use_distinct_seeds(
    server: FakeOpenAIServer, backend_for: BackendFactory
) -> None:
    server.max_choices = 1
    await ignoring_gateway(backend_for()).generate(ask(n=3, seed=100))
    assert sorted(s.body["seed"] for s in server.seen) == [100, 101, 102]


async def test_server_capping_n_is_asked_only_for_the_missing_samples(
    server: FakeOpenAIServer, backend_for: BackendFactory
) -> None:
    server.max_choices = 2
    completion = await ignoring_gateway(backend_for()).generate(ask(n=5))
    assert len(completion.texts) == 5
    assert sorted(s.body["n"] for s in server.seen) == [1, 2, 5]


async def test_server_returning_no_choices_is_a_model_error(
    server: FakeOpenAIServer, backend_for: BackendFactory
) -> None:
    server.max_choices = 0
    backend = backend_for()
    with pytest.raises(ModelError, match="no choices"):
        await backend.generate(ask(n=2))


async def test_an_endpoint_that_is_not_an_openai_api_is_a_model_error(
    server: FakeOpenAIServer, backend_for: BackendFactory
) -> None:
    server.script(Reply(200, {"status": "ok"}))
    backend = backend_for()
    with pytest.raises(ModelError, match="OpenAI-compatible API"):
        await backend.generate(ask())


# --- errors -------------------------------------------------------------------------------


async def test_429_is_transient(server: FakeOpenAIServer, backend_for: BackendFactory) -> None:
    server.script(Reply(429, error_body("Rate limit reached", code="rate_limit_exceeded")))
    backend = backend_for()
    with pytest.raises(TransientModelError, match="429"):
        await backend.generate(ask())


async def test_500_is_transient_and_not_retried_by_the_sdk(
    server: FakeOpenAIServer, backend_for: BackendFactory
) -> None:
    server.script(Reply(500, error_body("boom")))
    backend = backend_for()
    with pytest.raises(TransientModelError, match="500"):
        await backend.generate(ask())
    assert len(server.seen) == 1  # retrying is the gateway's job


async def test_401_is_a_config_error_naming_the_key_variable(
    server: FakeOpenAIServer, backend_for: BackendFactory
) -> None:
    server.script(Reply(401, error_body("Incorrect API key provided", code="invalid_api_key")))
    backend = backend_for(key_env="THOUGHTLOOM_API_KEY")
    with pytest.raises(ModelConfigError, match="THOUGHTLOOM_API_KEY") as caught:
        await backend.generate(ask())
    assert server.url in str(caught.value)


async def test_404_is_a_config_error_naming_the_model(
    server: FakeOpenAIServer, backend_for: BackendFactory
) -> None:
    server.script(Reply(404, error_body("The model `nope` does not exist", code="model_not_found")))
    backend = backend_for(model="nope")
    with pytest.raises(ModelConfigError, match="model nope"):
        await backend.generate(ask())


async def test_other_4xx_is_a_permanent_model_error(
    server: FakeOpenAIServer, backend_for: BackendFactory
) -> None:
    server.script(Reply(400, error_body("stop: too many sequences", param="stop")))
    backend = backend_for()
    with pytest.raises(ModelError) as caught:
        await backend.generate(ask())
    assert not isinstance(caught.value, TransientModelError)
    assert "too many sequences" in str(caught.value)


async def test_429_for_an_empty_account_is_not_retried(
    server: FakeOpenAIServer, backend_for: BackendFactory
) -> None:
    server.script(Reply(429, error_body("You exceeded your current quota", code="insufficient_quota")))
    backend = backend_for()
    with pytest.raises(ModelError, match="no quota") as caught:
        await backend.generate(ask())
    assert not isinstance(caught.value, TransientModelError)


async def test_timeout_is_transient(server: FakeOpenAIServer, backend_for: BackendFactory) -> None:
    server.script(Reply(200, {}, delay_s=1.0))
    backend = backend_for(timeout_s=0.2)
    with pytest.raises(TransientModelError, match="did not answer"):
        await backend.generate(ask())


async def test_connection_refused_is_unreachable() -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"
    backend = OpenAIBackend(model="m", base_url=url, api_key="k")
    with pytest.raises(ModelUnreachable) as caught:
        await backend.generate(ask())
    assert str(caught.value) == f"cannot reach model endpoint {url}: connection refused; is the server running?"
    await backend.aclose()


async def test_error_messages_are_one_line(
    server: FakeOpenAIServer, backend_for: BackendFactory
) -> None:
    server.script(Reply(400, error_body("line one\nline two\n" + "x" * 500)))
    backend = backend_for()
    with pytest.raises(ModelError) as caught:
        await backend.generate(ask())
    assert "\n" not in str(caught.value)
    assert len(str(caught.value)) < 500


async def test_a_model_refusing_max_tokens_is_retried_with_max_completion_tokens(
    server: FakeOpenAIServer, backend_for: BackendFactory
) -> None:
    refusal = "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens'."
    server.script(Reply(400, error_body(refusal, code="unsupported_parameter", param="max_tokens")))
    gateway = ignoring_gateway(backend_for(api="chat"))
    completion = await gateway.generate(ask(max_tokens=9))
    assert completion.texts == ("sample 0",)
    assert gateway.budget.calls == 2  # the refused request reached the server too
    assert server.seen[1].body["max_completion_tokens"] == 9
    assert "max_tokens" not in server.seen[1].body


# --- lifecycle ----------------------------------------------------------------------------


def test_importing_the_backend_does_not_import_openai() -> None:
    code = "import sys, thoughtloom.llm.openai_backend, thoughtloom.llm.registry; print('openai' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


async def test_the_client_is_created_on_first_call_and_closed_by_aclose(
    backend_for: BackendFactory
) -> None:
    backend = backend_for()
    assert backend._client is None
    await backend.generate(ask())
    assert backend._client is not None
    await backend.aclose()
    assert backend._client is None
    await backend.aclose()  # closing twice is harmless


# --- through the gateway ------------------------------------------------------------------


async def test_gateway_retries_a_500_then_succeeds(
    server: FakeOpenAIServer, backend_for: BackendFactory
) -> None:
    server.script(Reply(500, error_body("warming up")))
    backend = backend_for()
    gateway = Gateway(backend, retry=RetryPolicy(base_delay_s=0.01))
    completion = await gateway.generate(ask(n=2))
    assert completion.texts == ("sample 0", "sample 1")
    assert gateway.records[0].attempts == 2
    assert gateway.budget.spent == Usage(11, 6)
    assert len(server.seen) == 2
    await gateway.aclose()
