"""A tiny scripted OpenAI-compatible HTTP server on 127.0.0.1, for tests through real HTTP."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    """A scripted HTTP answer: status, JSON body, an optional delay and extra headers.

    `sse`: the raw server-sent-event lines to send instead of streaming the body (a hostile stream).
    """

    status: int = 200
    body: dict[str, Any] | None = None
    delay_s: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    sse: list[str] | None = None


@dataclass
class Seen:
    """One request the server received."""

    path: str
    body: dict[str, Any]
    headers: dict[str, str]


def error_body(message: str, code: str | None = None, param: str | None = None) -> dict[str, Any]:
    """An OpenAI-style error body."""
    return {"error": {"message": message, "type": "error", "code": code, "param": param}}


@dataclass
class FakeOpenAIServer:
    """Serves POST /v1/chat/completions and /v1/completions.

    Scripted replies are used first, in order; after that it answers every request with
    min(n, max_choices) choices, "sample {i}" (chat) or "text {i}", in reverse index order
    so clients must sort them. `max_choices = 1` is a server that ignores n, as the llama.cpp
    server and Ollama do; `usage` replaces the usage it reports (a hostile server's numbers);
    `delay_s` delays every unscripted answer; `peak_in_flight` is the most requests it was
    serving at once. A chat request that carries `tools` is answered, choice by choice, with a
    call of its first function with `tool_arguments`, as a function-calling server does.

    A request with `stream: true` is answered 200 with server-sent events: its reply's choices cut into
    pieces of `piece_chars` characters, one event each, `chunk_delay_s` apart, then the usage (when asked
    by stream_options and the reply has some) and `[DONE]`. `streamed` counts the events of text sent,
    `hung_up` the streams the client closed before their end.
    """

    replies: list[Reply] = field(default_factory=list)
    seen: list[Seen] = field(default_factory=list)
    max_choices: int = 1_000
    send_usage: bool = True
    usage: dict[str, int] | None = None
    delay_s: float = 0.0
    responder: Callable[[Seen], Reply] | None = None
    url: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock)
    in_flight: int = 0
    peak_in_flight: int = 0
    piece_chars: int = 4
    chunk_delay_s: float = 0.0
    streamed: int = 0
    hung_up: int = 0
    tool_arguments: str = "{}"

    def script(self, *replies: Reply) -> FakeOpenAIServer:
        """Answer the next requests with these replies, in order."""
        self.replies.extend(replies)
        return self

    def _fan_out(self, seen: Seen, prompts: list[Any]) -> Reply:
        """A batched completions request, answered prompt by prompt by the responder."""
        assert self.responder is not None
        replies = [self.responder(Seen(seen.path, {**seen.body, "prompt": p}, seen.headers)) for p in prompts]
        failed = next((r for r in replies if r.status != 200), None)
        return failed if failed is not None else _merge_batch(int(seen.body.get("n") or 1), replies)

    def answer(self, seen: Seen) -> Reply:
        """The reply for one request (a prompt list goes to the responder one prompt at a time)."""
        with self.lock:
            self.seen.append(seen)
            if self.replies:
                return self.replies.pop(0)
        if self.responder is not None:
            prompts = seen.body.get("prompt")
            if isinstance(prompts, list):
                return self._fan_out(seen, prompts)
            return self.responder(seen)
        n = int(seen.body.get("n") or 1)
        count = min(n, self.max_choices)
        chat = seen.path.endswith("/chat/completions")
        tools = seen.body.get("tools") if chat else None
        choices = [
            tool_call_choice(i, tools[0]["function"]["name"], self.tool_arguments)
            if tools
            else {"index": i, "message": {"role": "assistant", "content": f"sample {i}"}, "finish_reason": "stop"}
            if chat
            else {"index": i, "text": f"text {i}", "finish_reason": "stop", "logprobs": None}
            for i in reversed(range(count))
        ]
        body: dict[str, Any] = {
            "id": "x",
            "object": "chat.completion" if chat else "text_completion",
            "created": 0,
            "model": seen.body.get("model"),
            "choices": choices,
        }
        if self.usage is not None:
            body["usage"] = dict(self.usage)
        elif self.send_usage:
            body["usage"] = {"prompt_tokens": 11, "completion_tokens": 3 * count, "total_tokens": 11 + 3 * count}
        return Reply(200, body, self.delay_s)


def tool_call_choice(index: int, name: str, arguments: str, content: str | None = None) -> dict[str, Any]:
    """A chat choice that calls one function, as OpenAI's API answers a request with tools."""
    call = {"id": f"call_{index}", "type": "function", "function": {"name": name, "arguments": arguments}}
    return {"index": index, "message": {"role": "assistant", "content": content, "tool_calls": [call]},
            "finish_reason": "tool_calls"}


def completions_of(respond: Callable[[Any, int], str]) -> Callable[[Seen], Reply]:
    """A completions responder: each prompt (a batch's too) answered by `respond(GenerateRequest, sample index)`."""
    from thoughtloom.llm.types import GenerateRequest, Prompt

    def reply(seen: Seen) -> Reply:
        prompt = seen.body["prompt"]
        prompts = prompt if isinstance(prompt, list) else [prompt]
        n = int(seen.body.get("n") or 1)
        texts = [respond(GenerateRequest(prompt=Prompt(text=p)), i) for p in prompts for i in range(n)]
        return Reply(200, {"id": "x", "object": "text_completion", "created": 0, "model": "m",
                           "choices": [{"index": i, "text": t, "finish_reason": "stop"} for i, t in enumerate(texts)],
                           "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20}})

    return reply


def always(text: str) -> Callable[[Seen], Reply]:
    """A responder answering every request, chat or completion, with `text` (each of its n samples)."""
    def reply(seen: Seen) -> Reply:
        n = int(seen.body.get("n") or 1)
        chat = seen.path.endswith("/chat/completions")
        choice = {"message": {"role": "assistant", "content": text}} if chat else {"text": text}
        return Reply(200, {
            "id": "x", "object": "chat.completion" if chat else "text_completion", "created": 0, "model": "m",
            "choices": [{"index": i, **choice, "finish_reason": "stop"} for i in range(n)],
            "usage": {"prompt_tokens": 10, "completion_tokens": 10 * n, "total_tokens": 10 + 10 * n},
        })

    return reply


def _merge_batch(n: int, replies: list[Reply]) -> Reply:
    """One completions reply for a prompt list from one reply per prompt, as vLLM numbers
    choices (prompt i's sample j is index i*n + j) and sums usage."""
    choices: list[dict[str, Any]] = []
    usage = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    for i, reply in enumerate(replies):
        body = reply.body or {}
        for choice in body.get("choices", []):
            choices.append({**choice, "index": i * n + int(choice.get("index", 0))})
        for key in usage:
            usage[key] += int((body.get("usage") or {}).get(key, 0))
    first = replies[0].body or {}
    return Reply(200, {**first, "choices": choices, "usage": usage}, max(r.delay_s for r in replies))


def _sse_events(body: dict[str, Any], piece_chars: int, with_usage: bool) -> list[str]:
    """A reply body as OpenAI's stream sends it: `data:` lines of chunks, the usage chunk, `[DONE]`."""
    events: list[str] = []
    for choice in body.get("choices", []):
        index = choice.get("index", 0)
        chat = "message" in choice
        text = (choice.get("message") or {}).get("content") if chat else choice.get("text")
        text = text or ""
        for start in range(0, max(len(text), 1), piece_chars):
            piece = text[start:start + piece_chars]
            part = {"index": index, "delta": {"content": piece}} if chat else {"index": index, "text": piece}
            # The last piece of a choice says why it ended, as OpenAI's stream does.
            last = start + piece_chars >= len(text)
            part["finish_reason"] = (choice.get("finish_reason") or "stop") if last else None
            obj = "chat.completion.chunk" if chat else "text_completion"
            events.append("data: " + json.dumps({"id": "x", "object": obj, "created": 0, "model": "m",
                                                 "choices": [part]}))
    if with_usage and body.get("usage") is not None:
        events.append("data: " + json.dumps({"id": "x", "object": "chat.completion.chunk", "created": 0,
                                             "model": "m", "choices": [], "usage": body["usage"]}))
    events.append("data: [DONE]")
    return events


def _anthropic_events(body: dict[str, Any], piece_chars: int) -> list[str]:
    """A Messages API answer as its stream sends it: message_start (input usage), each block's deltas, and
    message_delta (output usage), each an `event:` line and a `data:` line."""
    def event(kind: str, data: dict[str, Any]) -> str:
        return f"event: {kind}\ndata: " + json.dumps({"type": kind, **data})

    usage = body.get("usage") or {}
    start = {**body, "content": [], "stop_reason": None,
             "usage": {"input_tokens": usage.get("input_tokens", 0), "output_tokens": 1}}
    events = [event("message_start", {"message": start})]
    for index, block in enumerate(body.get("content", [])):
        kind = block.get("type")
        field_name = "thinking" if kind == "thinking" else "text"
        text = block.get(field_name, "")
        events.append(event("content_block_start", {"index": index, "content_block": {**block, field_name: ""}}))
        for at in range(0, len(text), piece_chars):
            delta = {"type": f"{field_name}_delta", field_name: text[at:at + piece_chars]}
            events.append(event("content_block_delta", {"index": index, "delta": delta}))
        events.append(event("content_block_stop", {"index": index}))
    events.append(event("message_delta", {"delta": {"stop_reason": body.get("stop_reason"), "stop_sequence": None},
                                          "usage": {"output_tokens": usage.get("output_tokens", 0)}}))
    events.append(event("message_stop", {}))
    return events


def _handler(server: FakeOpenAIServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            if len(raw) < length:  # the client went away mid-request (a cancelled call): nothing arrived to answer
                self.close_connection = True
                return
            body = json.loads(raw or b"{}")
            with server.lock:
                server.in_flight += 1
                server.peak_in_flight = max(server.peak_in_flight, server.in_flight)
            try:
                # /v1/messages: Anthropic's Messages API, answered by a responder (tests/test_anthropic_backend.py);
                # /api/generate: Ollama's native completion, likewise (tests/test_ollama_format.py).
                if self.path not in ("/v1/chat/completions", "/v1/completions", "/v1/messages", "/api/generate"):
                    reply = Reply(404, error_body(f"no route {self.path}"))
                else:
                    reply = server.answer(Seen(self.path, body, {k.lower(): v for k, v in self.headers.items()}))
                if reply.delay_s:
                    time.sleep(reply.delay_s)
            finally:
                with server.lock:
                    server.in_flight -= 1
            if body.get("stream") and reply.status == 200:
                self._stream(reply, bool((body.get("stream_options") or {}).get("include_usage")))
                return
            data = json.dumps(reply.body or {}).encode()
            try:
                self.send_response(reply.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (timeout tests)

        def _stream(self, reply: Reply, with_usage: bool) -> None:
            """The reply as server-sent events (see FakeOpenAIServer)."""
            if reply.sse is not None:
                events = reply.sse
            elif self.path == "/v1/messages":
                events = _anthropic_events(reply.body or {}, server.piece_chars)
            else:
                events = _sse_events(reply.body or {}, server.piece_chars, with_usage)
            try:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                for event in events:
                    if server.chunk_delay_s:
                        time.sleep(server.chunk_delay_s)
                    self.wfile.write(f"{event}\n\n".encode())
                    self.wfile.flush()
                    with server.lock:
                        server.streamed += 1
            except (BrokenPipeError, ConnectionResetError):
                with server.lock:
                    server.hung_up += 1
            self.close_connection = True

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


@contextmanager
def serve(fake: FakeOpenAIServer | None = None) -> Iterator[FakeOpenAIServer]:
    """Run a scripted server on an ephemeral 127.0.0.1 port for the duration of the block."""
    fake = fake or FakeOpenAIServer()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(fake))
    httpd.daemon_threads = True
    fake.url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        httpd.shutdown()
        httpd.server_close()


def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
