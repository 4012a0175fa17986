"""`ollama:` sends reply schemas the way Ollama honours them, checked against a local double on 127.0.0.1.

Ollama's /v1/chat/completions turns response_format {"type": "json_schema", "json_schema": {"schema": S}}
into its native `format` = S; its /v1/completions has no field for a schema, so a completion with a
schema goes to the native /api/generate with `format` (Ollama's openai/openai.go, FromChatRequest and
FromCompleteRequest). The double below checks the wire shape only: no real Ollama runs here.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from openai_server import FakeOpenAIServer, Reply, Seen

from thoughtloom.llm.errors import ModelError
from thoughtloom.llm.registry import make_backend
from thoughtloom.llm.types import GenerateRequest, Prompt

SCHEMA = {"type": "object", "properties": {"choice": {"enum": [1, 2]}}, "required": ["choice"]}


def ollama_generate(seen: Seen) -> Reply:
    """Ollama's native /api/generate answer (non-streaming), or the default OpenAI-style one."""
    if seen.path != "/api/generate":
        return Reply(200, {"id": "x", "object": "text_completion", "created": 0, "model": "m",
                           "choices": [{"index": 0, "text": "free text", "finish_reason": "stop"}],
                           "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}})
    return Reply(200, {"model": seen.body["model"], "created_at": "2026-01-01T00:00:00Z", "response": '{"choice": 2}',
                       "done": True, "done_reason": "stop", "prompt_eval_count": 12, "eval_count": 5})


def backend(server: FakeOpenAIServer, suffix: str = "#completions") -> Any:
    return make_backend(f"ollama:llama3.2{suffix}", {"OLLAMA_HOST": server.url.removesuffix("/v1")})


def structured(**kwargs: Any) -> GenerateRequest:
    return GenerateRequest(Prompt(text="Pick one."), schema=json.dumps(SCHEMA), max_tokens=16, temperature=0.5,
                           **kwargs)


async def ask(server: FakeOpenAIServer, request: GenerateRequest, suffix: str = "#completions") -> Any:
    b = backend(server, suffix)
    try:
        return await b.generate(request)
    finally:
        await b.aclose()


async def test_a_structured_completion_goes_to_ollamas_native_generate_with_the_schema_as_format(
        server: FakeOpenAIServer) -> None:
    server.responder = ollama_generate
    await ask(server, structured(stop=("\n",), seed=7))
    (seen,) = server.seen
    assert seen.path == "/api/generate"
    assert seen.body["format"] == SCHEMA
    assert seen.body["prompt"] == "Pick one." and seen.body["model"] == "llama3.2" and seen.body["stream"] is False
    assert seen.body["options"] == {"num_predict": 16, "temperature": 0.5, "stop": ["\n"], "seed": 7}


async def test_ollamas_native_reply_is_the_completion_with_its_token_counts(server: FakeOpenAIServer) -> None:
    server.responder = ollama_generate
    completion = await ask(server, structured())
    assert completion.texts == ('{"choice": 2}',)
    assert (completion.usage.input_tokens, completion.usage.output_tokens) == (12, 5)


async def test_a_completion_without_a_schema_stays_on_ollamas_openai_endpoint(server: FakeOpenAIServer) -> None:
    server.responder = ollama_generate
    completion = await ask(server, GenerateRequest(Prompt(text="Say something.")))
    assert [s.path for s in server.seen] == ["/v1/completions"]
    assert completion.texts == ("free text",)


async def test_a_structured_chat_request_sends_response_format_to_ollamas_v1(server: FakeOpenAIServer) -> None:
    await ask(server, structured(), suffix="")
    (seen,) = server.seen
    assert seen.path == "/v1/chat/completions"
    assert seen.body["response_format"] == {"type": "json_schema", "json_schema": {"name": "reply", "schema": SCHEMA}}


async def test_a_native_reply_without_a_response_text_is_a_one_line_model_error(server: FakeOpenAIServer) -> None:
    server.script(Reply(200, {"error": "model 'llama3.2' not found"}))
    with pytest.raises(ModelError, match="without a response text") as caught:
        await ask(server, structured())
    assert "\n" not in str(caught.value)


async def test_a_native_http_error_is_mapped_like_any_other(server: FakeOpenAIServer) -> None:
    server.script(Reply(404, {"error": "model 'llama3.2' not found, try pulling it first"}))
    with pytest.raises(ModelError, match="404"):
        await ask(server, structured())


def test_a_search_on_ollama_completions_reads_its_votes_from_the_native_json(
        server: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch) -> None:
    from thoughtloom.api import solve

    steps = itertools.count(1)

    def respond(seen: Seen) -> Reply:
        if seen.path == "/api/generate":
            return ollama_generate(seen)
        return Reply(200, {"id": "x", "object": "text_completion", "created": 0, "model": "m",
                           "choices": [{"index": 0, "text": f"step {next(steps)}", "finish_reason": "stop"}],
                           "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}})

    server.responder = respond
    monkeypatch.setenv("OLLAMA_HOST", server.url.removesuffix("/v1"))
    result = solve("What is six times seven?", task="general", model="ollama:llama3.2#completions",
                   controller=False, evaluation="vote", breadth=2, beam=1, max_depth=1, seed=1, one_pass=True)
    votes = [s for s in server.seen if s.path == "/api/generate"]
    assert votes and all("format" in s.body for s in votes)
    assert result.stats.parse_failures == 0
