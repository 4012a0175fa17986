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
    """A scripted HTTP answer: status, JSON body, an optional delay and extra headers."""

    status: int = 200
    body: dict[str, Any] | None = None
    delay_s: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)


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
