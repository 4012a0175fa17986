"""Streaming replies through a real OpenAI-compatible HTTP server on 127.0.0.1: deltas, budgets, cancels, limits."""

from __future__ import annotations

import asyncio
import io
import json
import time
from typing import Any

import openai  # noqa: F401 - the SDK's first import takes seconds, which the timing tests below must not measure
import pytest
from conftest import BackendFactory
from inprocess import loom_here
from openai_server import FakeOpenAIServer, Reply, always, serve
from test_anthropic_backend import message, root

from thoughtloom.api import agent, areplay, research, solve
from thoughtloom.llm.anthropic_backend import AnthropicBackend
from thoughtloom.llm.budget import BudgetLimits, least_tokens
from thoughtloom.llm.errors import BudgetExceeded, ModelError, ModelTimeout, TransientModelError
from thoughtloom.llm.gateway import Gateway, RetryPolicy
from thoughtloom.llm.registry import make_backend
from thoughtloom.llm.streaming import Deltas, StreamGuard, stream_setting
from thoughtloom.llm.types import Completion, GenerateRequest, Prompt, Usage
from thoughtloom.search.events import BudgetSpent, EventBus, ThoughtDelta
from thoughtloom.store.sqlite import SQLiteStore
from thoughtloom.views.events_log import EventLog
from thoughtloom.views.progress import ProgressDisplay

LONG = "The quick brown fox jumps over the lazy dog. " * 40
SAY = Prompt(text="Say something.")


def watched(n: int = 1, max_tokens: int = 256, prompt: Prompt = SAY,
            **kwargs: Any) -> tuple[GenerateRequest, list[tuple[int, str]]]:
    """A request with a text sink, and the list the sink fills."""
    got: list[tuple[int, str]] = []
    request = GenerateRequest(prompt, n=n, max_tokens=max_tokens,
                              on_text=lambda i, t: got.append((i, t)), **kwargs)
    return request, got


def chat_reply(text: str, usage: dict[str, int] | None = None) -> Reply:
    body: dict[str, Any] = {"id": "x", "object": "chat.completion", "created": 0, "model": "m",
                            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                         "finish_reason": "stop"}]}
    if usage is not None:
        body["usage"] = usage
    return Reply(200, body)


async def hang_up_seen(server: FakeOpenAIServer) -> None:
    """Wait (up to 2 s) until the server finds one stream's connection closed by the client."""
    for _ in range(100):
        if server.hung_up:
            break
        await asyncio.sleep(0.02)
    assert server.hung_up == 1


async def cancel_mid_stream(gateway: Gateway, server: FakeOpenAIServer) -> tuple[float, str]:
    """Start a watched call of up to 600 tokens, cancel it once 40 characters arrived, and wait for the
    server to see the hang-up: when the cancel came, and the text received before it."""
    request, got = watched(max_tokens=600)
    call = asyncio.ensure_future(gateway.generate(request))
    while sum(len(t) for _, t in got) < 40:
        await asyncio.sleep(0.01)
    received = "".join(t for _, t in got)
    started = time.monotonic()
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    await hang_up_seen(server)
    return started, received


# --- the reply is the same, the text arrives as it is written --------------------------------


async def test_a_watched_chat_request_streams_and_returns_the_whole_reply(
    server: FakeOpenAIServer, backend_for: BackendFactory
) -> None:
    server.script(chat_reply("one two three four five", {"prompt_tokens": 7, "completion_tokens": 5,
                                                         "total_tokens": 12}))
    request, got = watched()
    completion = await backend_for(api="chat").generate(request)
    assert completion.texts == ("one two three four five",)
    assert completion.usage == Usage(7, 5)
    body = server.seen[0].body
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert "".join(t for _, t in got) == "one two three four five"
    assert server.streamed > 3


async def test_n_completion_samples_stream_each_to_its_index(
    server: FakeOpenAIServer, backend_for: BackendFactory
) -> None:
    request, got = watched(n=3)
    completion = await backend_for(api="completions").generate(request)
    assert completion.texts == ("text 0", "text 1", "text 2")
    assert completion.usage == Usage(11, 9)
    assert {i: "".join(t for j, t in got if j == i) for i in range(3)} == {0: "text 0", 1: "text 1", 2: "text 2"}


async def test_an_unwatched_request_is_not_streamed(server: FakeOpenAIServer, backend_for: BackendFactory) -> None:
    await backend_for(api="chat").generate(GenerateRequest(Prompt(text="hi")))
    assert "stream" not in server.seen[0].body


async def test_stream_off_sends_a_plain_request_even_when_watched(
    server: FakeOpenAIServer, backend_for: BackendFactory
) -> None:
    request, got = watched()
    completion = await backend_for(api="chat", stream=False).generate(request)
    assert completion.texts == ("sample 0",) and "stream" not in server.seen[0].body and got == []


def test_deltas_are_coalesced_by_time_and_size() -> None:
    now = [0.0]
    got: list[tuple[int, str]] = []
    deltas = Deltas(lambda i, t: got.append((i, t)), interval_s=0.05, max_chars=10, clock=lambda: now[0])
    deltas.add(0, "ab")  # the first piece goes at once (the interval since "never" has passed)
    deltas.add(0, "cd")
    deltas.add(1, "x")
    now[0] = 0.01
    deltas.add(0, "ef")
    assert got == [(0, "ab")]
    now[0] = 0.06
    deltas.add(0, "g")
    assert got == [(0, "ab"), (0, "cdefg"), (1, "x")]
    deltas.add(0, "0123456789")  # the size cap hands it on before the interval
    deltas.add(1, "y")
    deltas.flush()
    assert got[3:] == [(0, "0123456789"), (1, "y")]


def test_the_stream_setting_follows_the_caller_then_the_environment() -> None:
    assert stream_setting(None, {}) is True
    assert stream_setting(None, {"THOUGHTLOOM_STREAM": "0"}) is False
    assert stream_setting(True, {"THOUGHTLOOM_STREAM": "off"}) is True
    assert stream_setting(False, {}) is False


# --- budgets count what went on the wire ------------------------------------------------------


async def test_a_stream_without_its_usage_chunk_is_charged_the_floor_from_its_bytes(
    server: FakeOpenAIServer, backend_for: BackendFactory
) -> None:
    server.script(chat_reply(LONG))  # no usage at all: the stream has no usage chunk
    gateway = Gateway(backend_for(api="chat"), BudgetLimits(tokens=100_000))
    request, _ = watched(max_tokens=1000)
    completion = await gateway.generate(request)
    assert completion.texts == (LONG,)
    assert gateway.budget.spent.output_tokens >= len(LONG.encode()) // 4


async def test_a_stream_whose_usage_chunk_lies_is_charged_at_least_the_floor(
    server: FakeOpenAIServer, backend_for: BackendFactory
) -> None:
    server.script(chat_reply(LONG, {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}))
    gateway = Gateway(backend_for(api="chat"), BudgetLimits(tokens=100_000))
    request, _ = watched(max_tokens=1000)
    await gateway.generate(request)
    assert gateway.budget.spent.output_tokens >= least_tokens(LONG) > 1


async def test_a_cancel_mid_stream_closes_the_response_and_counts_the_tokens_received(
    server: FakeOpenAIServer, backend_for: BackendFactory
) -> None:
    server.script(chat_reply(LONG, {"prompt_tokens": 10, "completion_tokens": 450, "total_tokens": 460}))
    server.chunk_delay_s = 0.01  # ~450 events: several seconds to send them all
    gateway = Gateway(backend_for(api="chat"), BudgetLimits(tokens=100_000))
    started, received = await cancel_mid_stream(gateway, server)
    # The response is closed: the server finds the connection gone well before its stream would end.
    assert time.monotonic() - started < 2.0
    assert server.streamed < len(LONG) // server.piece_chars
    # Counted: the tokens received, and all the server may have made before it saw the hang-up (the request's bound).
    spent = gateway.budget.spent
    assert spent.output_tokens >= least_tokens(received) and spent.output_tokens == 600
    assert gateway.budget.spent_of("calls") == 1


async def test_the_wall_clock_budget_cuts_a_stream_off(
    server: FakeOpenAIServer, backend_for: BackendFactory
) -> None:
    server.script(chat_reply(LONG))
    server.chunk_delay_s = 0.01
    gateway = Gateway(backend_for(api="chat"), BudgetLimits(wall_s=1.0), retry=RetryPolicy(max_attempts=1))
    request, got = watched(max_tokens=600)
    started = time.monotonic()
    with pytest.raises(BudgetExceeded):
        await gateway.generate(request)
    assert time.monotonic() - started < 2.5 and got  # the whole stream would take 4.5 s
    await hang_up_seen(server)
    assert gateway.budget.spent.output_tokens == 600


# --- an untrusted stream ----------------------------------------------------------------------


async def test_a_malformed_event_is_a_one_line_error(server: FakeOpenAIServer, backend_for: BackendFactory) -> None:
    chunk = {"id": "x", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": "hi"}}]}
    server.script(Reply(200, {}, sse=[f"data: {json.dumps(chunk)}", "data: {not json", "data: [DONE]"]))
    request, _ = watched()
    with pytest.raises(ModelError, match="not valid JSON") as caught:
        await backend_for(api="chat").generate(request)
    assert "\n" not in str(caught.value)


async def test_an_error_the_server_sends_mid_stream_is_a_one_line_error(
    server: FakeOpenAIServer, backend_for: BackendFactory
) -> None:
    chunk = {"id": "x", "choices": [{"index": 0, "delta": {"content": "hi"}}]}
    server.script(Reply(200, {}, sse=[f"data: {json.dumps(chunk)}",
                                      'data: {"error": {"message": "the GPU\\nfell over", "type": "server_error"}}']))
    request, got = watched()
    with pytest.raises(ModelError, match="the GPU fell over") as caught:
        await backend_for(api="chat").generate(request)
    assert "\n" not in str(caught.value) and got == [(0, "hi")]


async def test_a_stream_that_breaks_off_after_text_is_charged_its_reservation(
    server: FakeOpenAIServer, backend_for: BackendFactory
) -> None:
    # The text arrived, then garbage: the server may have made every token, whatever it says (nothing here).
    chunk = {"id": "x", "choices": [{"index": 0, "delta": {"content": LONG}}]}
    server.script(Reply(200, {}, sse=[f"data: {json.dumps(chunk)}", "data: {not json"]))
    gateway = Gateway(backend_for(api="chat"), retry=RetryPolicy(max_attempts=1))
    request, _ = watched(max_tokens=700)
    with pytest.raises(ModelError, match="not valid JSON"):
        await gateway.generate(request)
    assert gateway.budget.spent.output_tokens == 700


async def test_a_stream_that_ends_before_its_reply_did_is_an_error_to_retry(
    server: FakeOpenAIServer, backend_for: BackendFactory
) -> None:
    # The connection closes after some text, with no finish_reason and no [DONE]: not a whole reply.
    chunk = {"id": "x", "choices": [{"index": 0, "delta": {"content": "The answer is 4"}, "finish_reason": None}]}
    server.script(Reply(200, {}, sse=[f"data: {json.dumps(chunk)}"]))
    gateway = Gateway(backend_for(api="chat"), retry=RetryPolicy(max_attempts=2, base_delay_s=0.0))
    request, _ = watched(max_tokens=50)
    completion = await gateway.generate(request)  # the retry gets the whole reply
    assert completion.texts == ("sample 0",) and len(server.seen) == 2
    assert gateway.budget.spent.output_tokens >= 50  # the broken stream: its reservation


async def test_a_chunk_whose_choices_are_not_a_list_is_refused(
    server: FakeOpenAIServer, backend_for: BackendFactory
) -> None:
    server.script(Reply(200, {}, sse=['data: {"id": "x", "choices": "lots"}', "data: [DONE]"]))
    request, _ = watched()
    with pytest.raises(ModelError, match="choices are not a list"):
        await backend_for(api="chat").generate(request)


async def test_a_choice_index_that_was_not_asked_for_is_refused(
    server: FakeOpenAIServer, backend_for: BackendFactory
) -> None:
    chunk = {"id": "x", "choices": [{"index": 7, "delta": {"content": "hi"}}]}
    server.script(Reply(200, {}, sse=[f"data: {json.dumps(chunk)}", "data: [DONE]"]))
    request, _ = watched()
    with pytest.raises(ModelError, match="choice 7 of a request for 1"):
        await backend_for(api="chat").generate(request)


async def test_a_stream_longer_than_max_tokens_can_be_is_refused(
    server: FakeOpenAIServer, backend_for: BackendFactory
) -> None:
    server.script(chat_reply("x" * 2000))
    server.piece_chars = 500
    request, _ = watched(max_tokens=10)  # at most 1,280 bytes
    with pytest.raises(ModelError, match="more than 1,280 bytes"):
        await backend_for(api="chat").generate(request)


async def test_a_stream_of_endless_empty_events_is_refused() -> None:
    guard = StreamGuard("http://x", 1, 4)
    with pytest.raises(ModelError, match="streamed more than"):
        for _ in range(1000):
            guard.event()


async def test_a_stream_that_never_ends_times_out(server: FakeOpenAIServer, backend_for: BackendFactory) -> None:
    # Keep-alive comments forever: every read gets a byte, only the stream's own deadline ends it.
    server.script(Reply(200, {}, sse=[": ping"] * 10_000))
    server.chunk_delay_s = 0.01
    request, _ = watched(max_tokens=100)
    gateway = Gateway(backend_for(api="chat", timeout_s=0.5), retry=RetryPolicy(max_attempts=1))
    started = time.monotonic()
    with pytest.raises(ModelTimeout, match="still streaming after 0.5s"):
        await gateway.generate(request)
    assert time.monotonic() - started < 2.0
    assert gateway.budget.spent.output_tokens == 100  # no answer: charged its reservation, as a timeout is


async def test_a_completion_from_a_stream_equals_the_one_without(
    server: FakeOpenAIServer, backend_for: BackendFactory
) -> None:
    server.responder = always("a reply with ünïcode ✓ and more words")
    streamed, _ = watched(n=2)
    plain = GenerateRequest(Prompt(text="Say something."), n=2)
    one: Completion = await backend_for(api="chat").generate(streamed)
    two: Completion = await backend_for(api="chat").generate(plain)
    assert one == two


# --- deltas reach observers: --events, the live view; replay does without them --------------------

ANSWER = "Six times seven is forty-two, so the answer is 42."


def events_of(path: Any) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_events_carry_each_reply_as_it_is_written(capsys: pytest.CaptureFixture[str], tmp_path: Any) -> None:
    target = tmp_path / "events.jsonl"
    with serve(FakeOpenAIServer(responder=always(ANSWER))) as server:
        out = loom_here(capsys, "solve", "--model", f"openai-compatible:{server.url}@m", "--task", "general",
                        "--depth", "1", "--breadth", "1", "--quiet", "--no-store", "--events", str(target),
                        "What is six times seven?")
    assert out.returncode == 0, out.stderr
    deltas = [e for e in events_of(target) if e["type"] == "thought_delta"]
    assert deltas and all(s.body.get("stream") is True for s in server.seen)
    written: dict[tuple[int, int], str] = {}
    for event in deltas:
        assert set(event) == {"t", "type", "call", "purpose", "sample", "text"}
        key = (event["call"], event["sample"])
        written[key] = written.get(key, "") + event["text"]
    assert set(written.values()) == {ANSWER} and len({call for call, _ in written}) == len(server.seen)
    # Coalesced: far fewer events than the server sent pieces.
    assert len(deltas) < server.streamed / 2


def test_no_stream_sends_whole_requests_and_no_deltas(capsys: pytest.CaptureFixture[str], tmp_path: Any) -> None:
    target = tmp_path / "events.jsonl"
    with serve(FakeOpenAIServer(responder=always(ANSWER))) as server:
        out = loom_here(capsys, "solve", "--model", f"openai-compatible:{server.url}@m", "--task", "general",
                        "--depth", "1", "--breadth", "1", "--quiet", "--no-store", "--no-stream", "--events",
                        str(target), "What is six times seven?")
    assert out.returncode == 0, out.stderr
    assert not any(e["type"] == "thought_delta" for e in events_of(target))
    assert server.seen and not any("stream" in s.body for s in server.seen)


def test_solve_with_stream_false_sends_whole_requests_and_no_deltas() -> None:
    log = io.StringIO()
    with serve(FakeOpenAIServer(responder=always(ANSWER))) as server:
        result = solve("What is six times seven?", task="general", model=f"openai-compatible:{server.url}@m",
                       controller=False, breadth=1, max_depth=1, stream=False, sinks=[EventLog(log)])
    assert result.answer and server.seen and not any("stream" in s.body for s in server.seen)
    assert '"thought_delta"' not in log.getvalue()


def test_agent_with_stream_false_sends_whole_requests() -> None:
    with serve(FakeOpenAIServer(responder=always(ANSWER))) as server:
        asyncio.run(agent("Say what six times seven is.", tools=["calc"], model=f"openai-compatible:{server.url}@m",
                          controller=False, stream=False, budget=BudgetLimits(calls=3)))
    assert server.seen and not any("stream" in s.body for s in server.seen)


def test_research_with_stream_false_sends_whole_requests(tmp_path: Any) -> None:
    (tmp_path / "facts.md").write_text("Six times seven is forty-two.\n", encoding="utf-8")

    async def go(url: str) -> None:
        await research("What is six times seven?", knowledge=str(tmp_path), model=f"openai-compatible:{url}@m",
                       controller=False, stream=False, budget=BudgetLimits(calls=3)).result()

    with serve(FakeOpenAIServer(responder=always(ANSWER))) as server:
        asyncio.run(go(server.url))
    assert server.seen and not any("stream" in s.body for s in server.seen)


def test_a_run_recorded_while_streaming_replays_exactly_without_a_model(tmp_path: Any) -> None:
    store = str(tmp_path / "runs.db")
    log = io.StringIO()
    with serve(FakeOpenAIServer(responder=always(ANSWER))) as server:
        result = solve("What is six times seven?", task="general", model=f"openai-compatible:{server.url}@m",
                       controller=False, breadth=2, beam=1, max_depth=2, store=store, sinks=[EventLog(log)])
        live_calls = len(server.seen)
        assert all(s.body.get("stream") is True for s in server.seen)
        with SQLiteStore(store) as opened:
            replayed, verdict = asyncio.run(areplay(opened, str(result.run_id)))
    assert '"thought_delta"' in log.getvalue()
    assert verdict.identical, str(verdict)
    assert verdict.model_calls == 0 and len(server.seen) == live_calls
    assert replayed.answer == result.answer and replayed.usage == result.usage


def test_the_live_view_shows_the_end_of_the_reply_being_written() -> None:
    display = ProgressDisplay(io.StringIO())
    display(ThoughtDelta(0, "generate", 0, "first words of a long thought, "))
    display(ThoughtDelta(0, "generate", 0, "and its latest words"))
    display(ThoughtDelta(0, "generate", 1, "another sample"))
    assert display.status().endswith("· generate: first words of a long thought, and its latest words")
    width = len(display._counts() + " · generate: and its latest words")
    assert display.status(width=width).endswith(" · generate: and its latest words")
    display(BudgetSpent("generate", 10, 10, None, 1, 0.0, 0, None))
    assert "generate:" not in display.status()


def test_only_sinks_that_ask_for_deltas_get_them() -> None:
    seen: list[str] = []
    plain = EventBus([seen.append])  # type: ignore[list-item]
    assert not plain.deltas
    plain.emit(ThoughtDelta(0, "generate", 0, "x"))
    assert seen == []
    plain.subscribe(EventLog(io.StringIO()))
    assert plain.deltas


# --- Anthropic's event stream ----------------------------------------------------------------------


def anthropic_backend(server: FakeOpenAIServer, **settings: Any) -> AnthropicBackend:
    made = make_backend("anthropic:claude-test", {"ANTHROPIC_API_KEY": "k", "ANTHROPIC_BASE_URL": root(server)},
                        **settings)
    assert isinstance(made, AnthropicBackend)
    return made


async def test_an_anthropic_reply_streams_its_text_never_its_thinking() -> None:
    def answer(seen: Any) -> Reply:
        reply = message(ANSWER, input_tokens=21, output_tokens=1_200)
        assert reply.body is not None
        reply.body["content"] = [{"type": "thinking", "thinking": "SECRET THOUGHTS", "signature": "s"},
                                 *reply.body["content"]]
        return reply

    with serve(FakeOpenAIServer(responder=answer)) as server:
        backend = anthropic_backend(server, thinking_tokens=1_024)
        request, got = watched(max_tokens=300)
        streamed = await backend.generate(request)
        plain = await backend.generate(GenerateRequest(Prompt(text="Say something."), max_tokens=300))
        await backend.aclose()
    assert server.seen[0].body["stream"] is True and "stream" not in server.seen[1].body
    assert streamed == plain and streamed.texts == (ANSWER,)
    assert streamed.usage.input_tokens == 21 and streamed.usage.output_tokens == 1_200
    assert streamed.usage.reasoning_tokens > 0
    assert "".join(t for _, t in got) == ANSWER and "SECRET" not in "".join(t for _, t in got)


async def test_an_anthropic_stream_cancelled_mid_way_is_closed_and_charged() -> None:
    with serve(FakeOpenAIServer(responder=lambda seen: message(LONG, output_tokens=450))) as server:
        server.chunk_delay_s = 0.01
        gateway = Gateway(anthropic_backend(server), BudgetLimits(tokens=100_000))
        await cancel_mid_stream(gateway, server)
        await gateway.aclose()
    assert gateway.budget.spent.output_tokens == 600


# --- the embedded model's token loop --------------------------------------------------------------


@pytest.mark.local_model
async def test_the_embedded_model_streams_each_sample_and_returns_what_it_would_unwatched() -> None:
    from thoughtloom.llm.local import LocalLlamaBackend
    from thoughtloom.llm.models import GEMMA_3_270M

    backend = LocalLlamaBackend(embedded=GEMMA_3_270M, n_ctx=512)
    prompt = Prompt(text="Country: France\nCapital: Paris\n\nCountry: Japan\nCapital:")
    request, got = watched(n=2, max_tokens=24, prompt=prompt, temperature=0.8, seed=3, stop=("\n\n",))
    streamed = await backend.generate(request)
    plain = await backend.generate(GenerateRequest(prompt, 2, 24, 0.8, ("\n\n",), 3))
    assert streamed == plain
    assert [("".join(t for i, t in got if i == s)) for s in range(2)] == list(streamed.texts)
    assert len(got) > 2  # token by token (coalesced), not the reply at once


async def test_samples_a_server_sends_in_follow_up_requests_keep_their_own_index(
    server: FakeOpenAIServer, backend_for: BackendFactory
) -> None:
    server.max_choices = 1  # a server that ignores n: the gateway asks again for the rest
    request, got = watched(n=3)
    completion = await Gateway(backend_for(api="chat")).generate(request)
    assert len(server.seen) == 3 and completion.texts == ("sample 0",) * 3
    assert sorted({i for i, _ in got}) == [0, 1, 2]


async def test_an_anthropic_stream_without_message_stop_is_an_error_to_retry() -> None:
    start = {"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant", "content": [],
                                                  "model": "c", "usage": {"input_tokens": 5, "output_tokens": 1}}}
    delta = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "The answer"}}
    with serve(FakeOpenAIServer(responder=lambda seen: message("hello"))) as server:
        server.script(Reply(200, {}, sse=[f"event: message_start\ndata: {json.dumps(start)}",
                                          f"event: content_block_delta\ndata: {json.dumps(delta)}"]))
        backend = anthropic_backend(server)
        request, _ = watched(max_tokens=50)
        with pytest.raises(TransientModelError, match="ended its stream before reply 0 did") as caught:
            await backend.generate(request)
        await backend.aclose()
    assert caught.value.cut_short
