"""The server's HTTP side (thoughtloom.llm.serve) with a scripted model: concurrency, hang-ups, bad HTTP, failures."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest

from thoughtloom.llm.errors import ModelError
from thoughtloom.llm.serve import MAX_BODY, MAX_HEAD, OpenAIServer
from thoughtloom.llm.types import Completion, GenerateRequest, Prompt, Usage


class ScriptedModel:
    """A served model whose generate() waits until released, counting the calls in flight."""

    name = "local:scripted"
    n_ctx = 256
    chat = True

    def __init__(self, max_concurrency: int = 1) -> None:
        self.max_concurrency = max_concurrency
        self.release = asyncio.Event()
        self.in_flight = 0
        self.peak = 0
        self.started = 0
        self.cancelled = 0
        self.fail: Exception | None = None

    def prompt_tokens(self, prompt: Prompt, form: str | None = None) -> list[int]:
        return list(range(len(prompt.as_text().split())))

    async def generate(self, request: GenerateRequest) -> Completion:
        self.in_flight += 1
        self.started += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        finally:
            self.in_flight -= 1
        if self.fail is not None:
            raise self.fail
        return Completion(("ok",) * request.n, Usage(3, request.n), self.name, None, ("stop",) * request.n)


@pytest.fixture
async def model() -> ScriptedModel:
    return ScriptedModel()


async def start(model: ScriptedModel) -> OpenAIServer:
    server = OpenAIServer(model, "127.0.0.1", 0)
    await server.start()
    return server


@pytest.fixture
async def server(model: ScriptedModel) -> AsyncIterator[OpenAIServer]:
    s = await start(model)
    yield s
    await s.aclose()


async def exchange(server: OpenAIServer, raw: bytes) -> bytes:
    """Send raw bytes on a new connection; everything the server sends until it closes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(raw)
    await writer.drain()
    data = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    return data


def post(path: str, body: Any, *, close: bool = True) -> bytes:
    """A POST request's bytes (asking the server to close the connection after it, unless close=False)."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = ["Host: x", "Content-Type: application/json", f"Content-Length: {len(data)}"]
    headers += ["Connection: close"] if close else []
    return "".join(f"{line}\r\n" for line in [f"POST {path} HTTP/1.1", *headers, ""]).encode() + data


def parse(response: bytes) -> tuple[int, dict[str, Any]]:
    head, _, body = response.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


COMPLETION = {"prompt": "a b c", "max_tokens": 4}


async def test_generate_calls_run_concurrently_up_to_the_backends_max_concurrency() -> None:
    model = ScriptedModel(max_concurrency=2)
    server = await start(model)
    try:
        asks = [asyncio.create_task(exchange(server, post("/v1/completions", COMPLETION))) for _ in range(3)]
        while model.started < 2:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)
        assert (model.in_flight, model.started) == (2, 2)  # the third waits for a slot
        model.release.set()
        answers = [parse(r) for r in await asyncio.gather(*asks)]
    finally:
        await server.aclose()
    assert [status for status, _ in answers] == [200, 200, 200]
    assert model.peak == 2


async def test_the_prompts_of_a_list_are_generated_concurrently() -> None:
    model = ScriptedModel(max_concurrency=2)
    server = await start(model)
    try:
        ask = asyncio.create_task(exchange(server, post("/v1/completions", {**COMPLETION, "prompt": ["a", "b"], "n": 2})))
        while model.started < 2:
            await asyncio.sleep(0.01)
        model.release.set()
        status, body = parse(await ask)
    finally:
        await server.aclose()
    assert status == 200
    assert [c["index"] for c in body["choices"]] == [0, 1, 2, 3]
    assert body["usage"] == {"prompt_tokens": 6, "completion_tokens": 4, "total_tokens": 10}


async def test_a_client_that_hangs_up_cancels_its_generation(server: OpenAIServer, model: ScriptedModel) -> None:
    _, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(post("/v1/completions", COMPLETION))
    await writer.drain()
    while model.started < 1:
        await asyncio.sleep(0.01)
    writer.close()
    for _ in range(200):
        if model.cancelled:
            break
        await asyncio.sleep(0.01)
    assert model.cancelled == 1 and model.in_flight == 0


async def test_a_connection_carries_several_requests(server: OpenAIServer, model: ScriptedModel) -> None:
    model.release.set()
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    statuses = []
    for _ in range(2):
        writer.write(post("/v1/completions", COMPLETION, close=False))
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")))
        await reader.readexactly(length)
        statuses.append(int(head.split()[1]))
    writer.close()
    assert statuses == [200, 200]


async def test_a_body_that_is_not_json_is_a_400(server: OpenAIServer) -> None:
    status, body = parse(await exchange(server, post("/v1/completions", b"{not json")))
    assert status == 400 and body["error"]["code"] == "invalid_json"


async def test_nan_is_not_json(server: OpenAIServer) -> None:
    status, body = parse(await exchange(server, post("/v1/completions", b'{"prompt": "x", "temperature": NaN}')))
    assert status == 400 and body["error"]["code"] == "invalid_json"


async def test_a_malformed_request_line_is_a_400_and_the_connection_closes(server: OpenAIServer) -> None:
    status, body = parse(await exchange(server, b"HELLO\r\n\r\n"))
    assert status == 400 and body["error"]["message"] == "malformed request line"


async def test_a_body_past_the_limit_is_a_413(server: OpenAIServer) -> None:
    head = f"POST /v1/completions HTTP/1.1\r\nContent-Length: {MAX_BODY + 1}\r\n\r\n".encode()
    status, _ = parse(await exchange(server, head))
    assert status == 413


async def test_a_head_past_the_limit_is_a_431(server: OpenAIServer) -> None:
    status, _ = parse(await exchange(server, b"GET /v1/models HTTP/1.1\r\nX-Big: " + b"a" * (MAX_HEAD + 1) + b"\r\n\r\n"))
    assert status == 431


async def test_an_unknown_path_is_a_404_in_openais_error_shape(server: OpenAIServer) -> None:
    status, body = parse(await exchange(server, b"GET /v1/engines HTTP/1.1\r\nConnection: close\r\n\r\n"))
    assert status == 404
    assert set(body["error"]) == {"message", "type", "param", "code"}


async def test_a_model_failure_is_a_500_with_its_message_not_a_traceback(
    server: OpenAIServer, model: ScriptedModel
) -> None:
    model.fail = ModelError("local:scripted: llama_decode failed with code 1")
    model.release.set()
    status, body = parse(await exchange(server, post("/v1/completions", COMPLETION)))
    assert status == 500
    assert body["error"] == {"message": "local:scripted: llama_decode failed with code 1", "type": "server_error",
                             "param": None, "code": "model_error"}


async def test_closing_the_server_cancels_generations_in_flight(model: ScriptedModel) -> None:
    server = await start(model)
    ask = asyncio.create_task(exchange(server, post("/v1/completions", COMPLETION)))
    while model.started < 1:
        await asyncio.sleep(0.01)
    await server.aclose()
    assert await ask == b""  # closed without an answer
    assert model.cancelled == 1


async def test_closing_the_server_with_a_request_in_flight_logs_no_error(
    model: ScriptedModel, caplog: pytest.LogCaptureFixture
) -> None:
    server = await start(model)
    ask = asyncio.create_task(exchange(server, post("/v1/completions", COMPLETION)))
    while model.started < 1:
        await asyncio.sleep(0.01)
    await server.aclose()
    await ask
    for _ in range(5):
        await asyncio.sleep(0)  # the loop runs the connection's done-callbacks
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.mark.parametrize(("body", "param"), [
    ({"prompt": "x", "n": 0}, "n"),
    ({"prompt": "x", "temperature": "warm"}, "temperature"),
    ({"prompt": "x", "max_tokens": True}, "max_tokens"),
    ({"prompt": "x", "stop": 5}, "stop"),
    ({"max_tokens": 3}, "prompt"),
    ({"prompt": [1, 2, 3]}, "prompt"),
    ({"prompt": "x", "echo": True}, "echo"),
    ({"prompt": "x", "logprobs": 50}, "logprobs"),
    ({"prompt": "x", "stream": True}, "stream"),
])
async def test_bad_completion_fields_are_400s_naming_the_field(server: OpenAIServer, body: dict[str, Any],
                                                               param: str) -> None:
    status, answer = parse(await exchange(server, post("/v1/completions", body)))
    assert status == 400 and answer["error"]["param"] == param
    assert "\n" not in answer["error"]["message"]


@pytest.mark.parametrize(("body", "param"), [
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].role"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "messages[0].content"),
    ({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]}, "tools"),
    ({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2}, "top_logprobs"),
    ({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "yaml"}}, "response_format"),
])
async def test_bad_chat_fields_are_400s_naming_the_field(server: OpenAIServer, body: dict[str, Any],
                                                         param: str) -> None:
    status, answer = parse(await exchange(server, post("/v1/chat/completions", body)))
    assert status == 400 and answer["error"]["param"] == param
