"""The server's HTTP side (thoughtloom.llm.serve) with a scripted model: concurrency, hang-ups, bad HTTP, failures."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest

from thoughtloom.llm.errors import ModelError
from thoughtloom.llm.serve import MAX_BODY, MAX_HEAD, OpenAIServer, ServeAccess, ServeLimits, names_this_server
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
        self.reply = "ok"

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
        return Completion((self.reply,) * request.n, Usage(3, request.n), self.name, None, ("stop",) * request.n)


@pytest.fixture
async def model() -> ScriptedModel:
    return ScriptedModel()


async def start(model: ScriptedModel, **settings: Any) -> OpenAIServer:
    server = OpenAIServer(model, "127.0.0.1", 0, **settings)
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


def own_host(server: OpenAIServer) -> str:
    """The Host header a client of the server sends."""
    return f"127.0.0.1:{server.port}"


def post(server: OpenAIServer, path: str, body: Any, *, close: bool = True, headers: Sequence[str] = (),
         method: str = "POST") -> bytes:
    """A request's bytes, Host naming the server (asking it to close the connection after it, unless close=False)."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    names = {line.split(":", 1)[0].lower() for line in headers}
    lines = [*headers, *([f"Host: {own_host(server)}"] if "host" not in names else [])]
    lines += ["Content-Type: application/json", f"Content-Length: {len(data)}"]
    lines += ["Connection: close"] if close else []
    return "".join(f"{line}\r\n" for line in [f"{method} {path} HTTP/1.1", *lines, ""]).encode() + data


def get(server: OpenAIServer, path: str, *headers: str) -> bytes:
    """A GET request's bytes (Host naming the server unless given), asking the server to close after it."""
    return post(server, path, b"", headers=headers, method="GET")


def parse(response: bytes) -> tuple[int, dict[str, Any]]:
    head, _, body = response.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


COMPLETION = {"prompt": "a b c", "max_tokens": 4}


async def test_generate_calls_run_concurrently_up_to_the_backends_max_concurrency() -> None:
    model = ScriptedModel(max_concurrency=2)
    server = await start(model)
    try:
        asks = [asyncio.create_task(exchange(server, post(server, "/v1/completions", COMPLETION))) for _ in range(3)]
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
        two = {**COMPLETION, "prompt": ["a", "b"], "n": 2}
        ask = asyncio.create_task(exchange(server, post(server, "/v1/completions", two)))
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
    writer.write(post(server, "/v1/completions", COMPLETION))
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
        writer.write(post(server, "/v1/completions", COMPLETION, close=False))
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")))
        await reader.readexactly(length)
        statuses.append(int(head.split()[1]))
    writer.close()
    assert statuses == [200, 200]


async def test_a_body_that_is_not_json_is_a_400(server: OpenAIServer) -> None:
    status, body = parse(await exchange(server, post(server, "/v1/completions", b"{not json")))
    assert status == 400 and body["error"]["code"] == "invalid_json"


async def test_nan_is_not_json(server: OpenAIServer) -> None:
    nan = b'{"prompt": "x", "temperature": NaN}'
    status, body = parse(await exchange(server, post(server, "/v1/completions", nan)))
    assert status == 400 and body["error"]["code"] == "invalid_json"


async def test_a_malformed_request_line_is_a_400_and_the_connection_closes(server: OpenAIServer) -> None:
    status, body = parse(await exchange(server, b"HELLO\r\n\r\n"))
    assert status == 400 and body["error"]["message"] == "malformed request line"


async def test_a_body_past_the_limit_is_a_413(server: OpenAIServer) -> None:
    status, _ = parse(await exchange(server, post_head(server, MAX_BODY + 1)))
    assert status == 413


async def test_a_head_past_the_limit_is_a_431(server: OpenAIServer) -> None:
    status, _ = parse(await exchange(server, b"GET /v1/models HTTP/1.1\r\nX-Big: " + b"a" * (MAX_HEAD + 1) + b"\r\n\r\n"))
    assert status == 431


async def test_an_unknown_path_is_a_404_in_openais_error_shape(server: OpenAIServer) -> None:
    status, body = parse(await exchange(server, get(server, "/v1/engines")))
    assert status == 404
    assert set(body["error"]) == {"message", "type", "param", "code"}


async def test_a_model_failure_is_a_500_with_its_message_not_a_traceback(
    server: OpenAIServer, model: ScriptedModel
) -> None:
    model.fail = ModelError("local:scripted: llama_decode failed with code 1")
    model.release.set()
    status, body = parse(await exchange(server, post(server, "/v1/completions", COMPLETION)))
    assert status == 500
    assert body["error"] == {"message": "local:scripted: llama_decode failed with code 1", "type": "server_error",
                             "param": None, "code": "model_error"}


async def test_closing_the_server_cancels_generations_in_flight(model: ScriptedModel) -> None:
    server = await start(model)
    ask = asyncio.create_task(exchange(server, post(server, "/v1/completions", COMPLETION)))
    while model.started < 1:
        await asyncio.sleep(0.01)
    await server.aclose()
    assert await ask == b""  # closed without an answer
    assert model.cancelled == 1


async def test_closing_the_server_with_a_request_in_flight_logs_no_error(
    model: ScriptedModel, caplog: pytest.LogCaptureFixture
) -> None:
    server = await start(model)
    ask = asyncio.create_task(exchange(server, post(server, "/v1/completions", COMPLETION)))
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
    status, answer = parse(await exchange(server, post(server, "/v1/completions", body)))
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
    status, answer = parse(await exchange(server, post(server, "/v1/chat/completions", body)))
    assert status == 400 and answer["error"]["param"] == param


# --- who may use the server: Host, Origin, the API key ----------------------------------------------


def one_line_error(response: bytes, status: int) -> dict[str, Any]:
    """The error of a response that must have this status and a one-line JSON body; returns its error object."""
    head, _, body = response.partition(b"\r\n\r\n")
    assert int(head.split()[1]) == status, response[:300]
    assert b"\n" not in body.rstrip(b"\n")
    error = json.loads(body)["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    return error


def header(response: bytes, name: str) -> str | None:
    """A response header's value (None when absent)."""
    head = response.partition(b"\r\n\r\n")[0].decode("latin-1")
    for line in head.split("\r\n")[1:]:
        key, _, value = line.partition(":")
        if key.lower() == name.lower():
            return value.strip()
    return None


async def test_a_request_naming_another_host_is_refused_so_dns_rebinding_reads_nothing(
    server: OpenAIServer, model: ScriptedModel
) -> None:
    # A page at http://attacker.example:PORT whose name now resolves to 127.0.0.1 sends its own name.
    response = await exchange(server, post(server, "/v1/completions", COMPLETION,
                                           headers=[f"Host: attacker.example:{server.port}"]))
    assert "attacker.example" in one_line_error(response, 421)["message"]
    assert model.started == 0


async def test_a_get_naming_another_host_is_refused_too(server: OpenAIServer) -> None:
    one_line_error(await exchange(server, get(server, "/v1/models", f"Host: attacker.example:{server.port}")), 421)


async def test_a_host_naming_another_port_is_refused(server: OpenAIServer) -> None:
    one_line_error(await exchange(server, get(server, "/v1/models", f"Host: 127.0.0.1:{server.port + 1}")), 421)


async def test_a_request_without_a_host_is_a_400(server: OpenAIServer) -> None:
    one_line_error(await exchange(server, b"GET /v1/models HTTP/1.1\r\nConnection: close\r\n\r\n"), 400)


@pytest.mark.parametrize("name", ["127.0.0.1", "localhost", "LOCALHOST", "[::1]"])
async def test_the_loopback_names_with_the_port_are_accepted(server: OpenAIServer, name: str) -> None:
    status, body = parse(await exchange(server, get(server, "/v1/models", f"Host: {name}:{server.port}")))
    assert status == 200 and body["data"][0]["id"] == "local:scripted"


@pytest.mark.parametrize(("host", "bound", "answered"), [
    ("10.1.2.3:8000", "0.0.0.0", True),  # all interfaces: any address of this machine, as clients dial it
    ("[fe80::1]:8000", "::", True),
    ("localhost:8000", "0.0.0.0", True),
    ("box.lan:8000", "0.0.0.0", False),  # a name: possibly a rebound one
    ("box.lan:8000", "box.lan", True),  # the name the user bound to
    ("10.1.2.3:8000", "box.lan", False),
    ("127.0.0.2:8000", "127.0.0.1", True),
    ("localhost", "127.0.0.1", False),  # no port: 80, which is not this server's
    ("localhost:08000", "127.0.0.1", True),
    ("localhost:8000:1", "127.0.0.1", False),
    ("[::1:8000", "::1", False),
])
def test_the_host_names_a_server_answers_for(host: str, bound: str, answered: bool) -> None:
    assert names_this_server(host, bound, 8000) is answered


async def test_two_host_headers_are_a_400(server: OpenAIServer) -> None:
    response = await exchange(server, get(server, "/v1/models", f"Host: {own_host(server)}", "Host: attacker.example"))
    one_line_error(response, 400)


async def test_a_cross_origin_post_is_refused_before_the_model_runs(server: OpenAIServer, model: ScriptedModel) -> None:
    response = await exchange(server, post(server, "/v1/completions", COMPLETION,
                                           headers=["Origin: https://some-site.example"]))
    assert "some-site.example" in one_line_error(response, 403)["message"]
    assert header(response, "Access-Control-Allow-Origin") is None
    assert model.started == 0


async def test_origin_null_is_cross_origin(server: OpenAIServer) -> None:
    # Sandboxed frames and file:// pages send "null".
    one_line_error(await exchange(server, post(server, "/v1/completions", COMPLETION, headers=["Origin: null"])), 403)


async def test_a_request_from_another_local_port_is_cross_origin(server: OpenAIServer) -> None:
    origin = f"Origin: http://127.0.0.1:{server.port + 1}"
    one_line_error(await exchange(server, post(server, "/v1/completions", COMPLETION, headers=[origin])), 403)


async def test_a_cross_site_get_without_origin_is_refused(server: OpenAIServer) -> None:
    # A <script src> or <img> on another site sends no Origin, but browsers say where it comes from.
    one_line_error(await exchange(server, get(server, "/v1/models", "Sec-Fetch-Site: cross-site")), 403)


async def test_the_servers_own_origin_is_accepted(server: OpenAIServer, model: ScriptedModel) -> None:
    model.release.set()
    origin = f"Origin: http://{own_host(server)}"
    status, _ = parse(await exchange(server, post(server, "/v1/completions", COMPLETION, headers=[origin])))
    assert status == 200


async def test_an_allowed_origin_is_answered_with_cors_headers(model: ScriptedModel) -> None:
    model.release.set()
    server = await start(model, access=ServeAccess(allow_origins=("https://app.example",)))
    try:
        response = await exchange(server, post(server, "/v1/completions", COMPLETION,
                                               headers=["Origin: https://app.example"]))
    finally:
        await server.aclose()
    assert parse(response)[0] == 200
    assert header(response, "Access-Control-Allow-Origin") == "https://app.example"
    assert header(response, "Vary") == "Origin"


async def test_a_preflight_from_an_allowed_origin_is_answered(model: ScriptedModel) -> None:
    server = await start(model, access=ServeAccess(allow_origins=("https://app.example",), api_key="k"))
    try:
        response = await exchange(server, get(
            server, "/v1/chat/completions", "Origin: https://app.example", "Access-Control-Request-Method: POST",
            "Access-Control-Request-Headers: authorization, content-type").replace(b"GET ", b"OPTIONS ", 1))
    finally:
        await server.aclose()
    assert response.startswith(b"HTTP/1.1 204 ")  # no key needed: a browser's preflight never carries one
    assert header(response, "Access-Control-Allow-Origin") == "https://app.example"
    assert "POST" in (header(response, "Access-Control-Allow-Methods") or "")
    assert header(response, "Access-Control-Allow-Headers") == "authorization, content-type"


async def test_a_preflight_from_another_origin_is_refused(model: ScriptedModel) -> None:
    server = await start(model, access=ServeAccess(allow_origins=("https://app.example",)))
    try:
        response = await exchange(server, get(
            server, "/v1/chat/completions", "Origin: https://other.example",
            "Access-Control-Request-Method: POST").replace(b"GET ", b"OPTIONS ", 1))
    finally:
        await server.aclose()
    one_line_error(response, 403)
    assert header(response, "Access-Control-Allow-Origin") is None


@pytest.mark.parametrize("authorization", [None, "Bearer wrong", "Basic s3cret-key", "Bearer s3cret-key2"])
async def test_without_the_api_key_a_request_is_a_401(model: ScriptedModel, authorization: str | None) -> None:
    server = await start(model, access=ServeAccess(api_key="s3cret-key"))
    try:
        headers = [f"Authorization: {authorization}"] if authorization else []
        response = await exchange(server, post(server, "/v1/completions", COMPLETION, headers=headers))
    finally:
        await server.aclose()
    assert one_line_error(response, 401)["code"] == "invalid_api_key"
    assert header(response, "WWW-Authenticate") == "Bearer"
    assert b"s3cret" not in response.replace(b"Bearer wrong", b"").replace(b"s3cret-key2", b"")
    assert model.started == 0


async def test_with_the_api_key_a_request_is_answered(model: ScriptedModel) -> None:
    model.release.set()
    server = await start(model, access=ServeAccess(api_key="s3cret-key"))
    try:
        response = await exchange(server, post(server, "/v1/completions", COMPLETION,
                                               headers=["Authorization: Bearer s3cret-key"]))
    finally:
        await server.aclose()
    assert parse(response)[0] == 200


# --- bounded work and memory ------------------------------------------------------------------------


async def test_connections_past_the_limit_get_a_503_with_retry_after(model: ScriptedModel) -> None:
    server = await start(model, limits=ServeLimits(max_connections=2))
    try:
        held = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(2)]
        await asyncio.sleep(0.05)
        response = await exchange(server, get(server, "/v1/models"))
        for _, writer in held:
            writer.close()
    finally:
        await server.aclose()
    assert one_line_error(response, 503)["code"] == "too_many_connections"
    assert header(response, "Retry-After") == "1"


async def test_requests_past_the_queue_get_a_503_with_retry_after(model: ScriptedModel) -> None:
    server = await start(model, limits=ServeLimits(max_queue=1))  # one generating, one waiting
    try:
        asks = [asyncio.create_task(exchange(server, post(server, "/v1/completions", COMPLETION))) for _ in range(2)]
        while model.started < 1:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)
        third = await exchange(server, post(server, "/v1/completions", COMPLETION))
        model.release.set()
        answers = [parse(r)[0] for r in await asyncio.gather(*asks)]
    finally:
        await server.aclose()
    assert one_line_error(third, 503)["code"] == "queue_full"
    assert header(third, "Retry-After") == "1"
    assert answers == [200, 200] and model.started == 2


async def send_head_then_read(server: OpenAIServer, head: bytes) -> bytes:
    """Send only a request's head and read the answer: it must come without the body ever being sent."""
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    try:
        writer.write(head)
        await writer.drain()
        return await asyncio.wait_for(reader.read(), 5)
    finally:
        writer.close()


def post_head(server: OpenAIServer, size: int) -> bytes:
    """The head of a POST announcing a body of `size` bytes."""
    return (f"POST /v1/completions HTTP/1.1\r\nHost: {own_host(server)}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {size}\r\n\r\n").encode()


async def test_oversized_bodies_are_refused_with_413_before_they_are_sent(model: ScriptedModel) -> None:
    server = await start(model, limits=ServeLimits(max_body=1000))
    try:
        answers = await asyncio.gather(*(send_head_then_read(server, post_head(server, 1001)) for _ in range(3)))
    finally:
        await server.aclose()
    for response in answers:
        assert "1,000 bytes" in one_line_error(response, 413)["message"]


async def test_a_chunked_body_is_refused_before_it_is_sent(server: OpenAIServer) -> None:
    head = (f"POST /v1/completions HTTP/1.1\r\nHost: {own_host(server)}\r\nTransfer-Encoding: chunked\r\n"
            "\r\n").encode()
    assert one_line_error(await send_head_then_read(server, head), 411)["code"] == "bad_request"


async def test_bodies_past_the_memory_budget_are_refused_with_503_before_they_are_sent(model: ScriptedModel) -> None:
    # Two requests of 600 bytes are held (the model is busy with them); a third would pass 1,500 bytes in memory.
    server = await start(model, limits=ServeLimits(max_body=1000, max_bodies=1500))
    body = json.dumps({**COMPLETION, "user": "u" * 550}).encode()
    try:
        asks = [asyncio.create_task(exchange(server, post(server, "/v1/completions", body))) for _ in range(2)]
        while model.started < 1:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)
        third = await send_head_then_read(server, post_head(server, len(body)))
        model.release.set()
        answers = [parse(r)[0] for r in await asyncio.gather(*asks)]
    finally:
        await server.aclose()
    assert one_line_error(third, 503)["code"] == "server_busy"
    assert header(third, "Retry-After") == "1"
    assert answers == [200, 200]


async def test_a_body_that_never_arrives_gives_its_bytes_back(model: ScriptedModel) -> None:
    model.release.set()
    server = await start(model, limits=ServeLimits(max_body=1000, max_bodies=1000, read_timeout_s=0.3))
    body = json.dumps({**COMPLETION, "user": "u" * 900}).encode()
    try:
        stalled = await send_head_then_read(server, post_head(server, len(body)))  # 408 at the deadline
        status, _ = parse(await exchange(server, post(server, "/v1/completions", body)))
    finally:
        await server.aclose()
    assert one_line_error(stalled, 408)["code"] == "request_timeout"
    assert status == 200  # not 503: the stalled request's reservation was given back


async def test_more_header_lines_than_the_limit_are_a_431(server: OpenAIServer) -> None:
    many = [f"X-H{i}: 1" for i in range(ServeLimits().max_headers + 1)]
    one_line_error(await exchange(server, get(server, "/v1/models", *many)), 431)


async def test_a_request_that_stops_arriving_is_a_408_at_the_read_deadline(model: ScriptedModel) -> None:
    server = await start(model, limits=ServeLimits(read_timeout_s=0.5))
    try:
        start_at = asyncio.get_running_loop().time()
        response = await send_head_then_read(server, post_head(server, 500) + b'{"prompt": "a')  # the rest never comes
        took = asyncio.get_running_loop().time() - start_at
    finally:
        await server.aclose()
    assert one_line_error(response, 408)["code"] == "request_timeout"
    assert took < 3


async def test_a_slow_client_gives_its_connection_back_at_the_read_deadline(model: ScriptedModel) -> None:
    model.release.set()
    server = await start(model, limits=ServeLimits(max_connections=1, read_timeout_s=0.5))
    try:
        _, slow = await asyncio.open_connection("127.0.0.1", server.port)
        slow.write(b"GET /v1/mod")  # and nothing more
        await asyncio.sleep(1.0)
        status, _ = parse(await exchange(server, get(server, "/v1/models")))
        slow.close()
    finally:
        await server.aclose()
    assert status == 200


# --- JSON a client can send -------------------------------------------------------------------------


async def test_json_nested_100000_deep_is_a_400(server: OpenAIServer) -> None:
    body = b'{"prompt": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    assert one_line_error(await exchange(server, post(server, "/v1/completions", body)), 400)["code"] == "invalid_json"


async def test_json_nested_deeper_than_the_limit_is_a_400_before_any_field_is_read(server: OpenAIServer) -> None:
    body = b'{"prompt": "x", "metadata": ' + b'{"a": ' * 200 + b"1" + b"}" * 200 + b"}"
    assert one_line_error(await exchange(server, post(server, "/v1/completions", body)), 400)["code"] == "invalid_json"


@pytest.mark.parametrize("body", [
    b'{"prompt": "a \\ud800 b", "max_tokens": 4}',
    b'{"prompt": "x", "model": "\\udfff"}',
    b'{"prompt": "x", "\\ud800": 1}',
    b'{"messages": [{"role": "user", "content": "\\ud800"}]}',
])
async def test_a_lone_surrogate_escape_is_a_400(server: OpenAIServer, model: ScriptedModel, body: bytes) -> None:
    model.release.set()
    path = "/v1/chat/completions" if b"messages" in body else "/v1/completions"
    response = await exchange(server, post(server, path, body))
    assert one_line_error(response, 400)["code"] == "invalid_json"
    response.decode("utf-8")  # strict: the reply holds no lone surrogate either


async def test_a_pair_of_surrogate_escapes_is_one_character(server: OpenAIServer, model: ScriptedModel) -> None:
    model.release.set()
    status, _ = parse(await exchange(server, post(server, "/v1/completions", b'{"prompt": "\\ud83d\\ude00 a"}')))
    assert status == 200


async def test_a_reply_never_carries_a_lone_surrogate(server: OpenAIServer, model: ScriptedModel) -> None:
    model.reply = "a\ud800b"
    model.release.set()
    response = await exchange(server, post(server, "/v1/completions", COMPLETION))
    status, body = parse(response)
    assert status == 200 and body["choices"][0]["text"] == "a\ufffdb"
    response.decode("utf-8")
