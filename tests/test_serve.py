"""The embedded model served over OpenAI's API (thoughtloom.llm.serve), run for real and asked by OpenAI's own client."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from machine import scaled
from serving import running

from thoughtloom.llm.budget import Budget, BudgetLimits
from thoughtloom.llm.gateway import Gateway
from thoughtloom.llm.local import LocalLlamaBackend
from thoughtloom.llm.models import GEMMA_3_270M, QWEN_CODER_05B, parts_installed
from thoughtloom.llm.registry import make_backend
from thoughtloom.llm.types import GenerateRequest, Message, Prompt

pytestmark = pytest.mark.local_model

CAPITALS = "Country: France\nCapital: Paris\n\nCountry: Japan\nCapital:"
TIMES = [{"role": "user", "content": "What is 12 times 3? Reply with the number only."}]


@pytest.fixture(scope="module")
def qwen() -> LocalLlamaBackend:
    if not parts_installed(QWEN_CODER_05B):
        pytest.skip("the qwen extra is not installed")
    # One thread: the same results, and no spin-waiting when another process holds a core.
    backend = LocalLlamaBackend(embedded=QWEN_CODER_05B, n_ctx=1024)
    backend.load()
    return backend


@pytest.fixture(scope="module")
def url(qwen: LocalLlamaBackend) -> Iterator[str]:
    with running(qwen) as base:
        yield base


@pytest.fixture
def client(url: str) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=url, api_key="x", max_retries=0, timeout=scaled(120)) as c:
        yield c


MODEL = "local:qwen2.5-coder-0.5b"


def test_models_lists_the_served_model(client: openai.OpenAI) -> None:
    assert [m.id for m in client.models.list()] == [MODEL]


def test_completions_give_n_samples_cut_at_the_stop_string(client: openai.OpenAI) -> None:
    r = client.completions.create(model=MODEL, prompt=CAPITALS, n=2, max_tokens=20, temperature=0.8, stop="\n", seed=1)
    assert [c.index for c in r.choices] == [0, 1]
    assert all(c.text.strip() and "\n" not in c.text for c in r.choices)
    assert all(c.finish_reason == "stop" for c in r.choices)
    assert r.object == "text_completion" and r.id.startswith("cmpl-") and r.model == MODEL


def test_a_completion_is_the_prompt_continued_not_a_chat_reply(client: openai.OpenAI) -> None:
    r = client.completions.create(model=MODEL, prompt=CAPITALS, max_tokens=4, temperature=0, stop="\n")
    assert r.choices[0].text.strip() == "Tokyo"


def test_a_list_of_prompts_gets_one_choice_set_per_prompt(client: openai.OpenAI) -> None:
    rome = "Country: France\nCapital: Paris\n\nCountry: Italy\nCapital:"
    r = client.completions.create(model=MODEL, prompt=[CAPITALS, rome], n=2, max_tokens=4, temperature=0, stop="\n")
    assert [c.index for c in r.choices] == [0, 1, 2, 3]
    assert [c.text.strip() for c in r.choices] == ["Tokyo", "Tokyo", "Rome", "Rome"]


def test_the_same_seed_gives_the_same_text(client: openai.OpenAI) -> None:
    def ask() -> list[str]:
        r = client.completions.create(model=MODEL, prompt="def fizzbuzz(n):", n=2, max_tokens=12, temperature=1.0,
                                      seed=1234)
        return [c.text for c in r.choices]

    first = ask()
    client.completions.create(model=MODEL, prompt=CAPITALS, max_tokens=3)  # another prompt in between
    assert ask() == first


def test_completion_logprobs_cover_the_text_token_by_token(client: openai.OpenAI) -> None:
    r = client.completions.create(model=MODEL, prompt=CAPITALS, max_tokens=6, temperature=0, stop="\n", logprobs=2)
    choice = r.choices[0]
    lp = choice.logprobs
    assert lp is not None and lp.tokens and lp.token_logprobs and lp.top_logprobs and lp.text_offset
    assert "".join(lp.tokens) == choice.text
    assert len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == len(lp.tokens)
    assert all(x <= 0 for x in lp.token_logprobs)
    assert all(len(top) == 2 for top in lp.top_logprobs)
    # Offsets count from the prompt's start, as OpenAI's do.
    assert lp.text_offset[0] == len(CAPITALS)


def test_chat_logprobs_give_each_token_its_bytes_and_alternatives(client: openai.OpenAI) -> None:
    r = client.chat.completions.create(model=MODEL, messages=TIMES, max_tokens=10, temperature=0, logprobs=True,
                                       top_logprobs=3)
    choice = r.choices[0]
    assert choice.logprobs is not None and choice.logprobs.content
    content = choice.logprobs.content
    assert bytes(b for t in content for b in (t.bytes or [])) == (choice.message.content or "").encode()
    assert all(len(t.top_logprobs) == 3 and t.logprob <= 0 for t in content)


def test_usage_counts_prompt_and_completion_tokens(client: openai.OpenAI, qwen: LocalLlamaBackend) -> None:
    r = client.completions.create(model=MODEL, prompt=CAPITALS, n=2, max_tokens=5, temperature=0.5)
    assert r.usage is not None
    # The prompt is read once for all samples; every sampled token counts.
    assert r.usage.prompt_tokens == len(qwen.prompt_tokens(Prompt(text=CAPITALS), "text"))
    assert r.usage.completion_tokens == 2 * 5  # no stop: both samples run to max_tokens
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_chat_usage_counts_the_templated_prompt(client: openai.OpenAI, qwen: LocalLlamaBackend) -> None:
    r = client.chat.completions.create(model=MODEL, messages=TIMES, max_tokens=10, temperature=0)
    assert r.usage is not None
    templated = qwen.prompt_tokens(Prompt(messages=(Message("user", TIMES[0]["content"]),)), "chat")
    assert r.usage.prompt_tokens == len(templated)


def test_a_chat_completion_answers_through_the_chat_template(client: openai.OpenAI) -> None:
    r = client.chat.completions.create(model=MODEL, messages=TIMES, max_completion_tokens=10, temperature=0)
    choice = r.choices[0]
    assert choice.message.role == "assistant"
    assert (choice.message.content or "").strip() == "36"
    assert choice.finish_reason == "stop"  # its end of turn, well before max_tokens
    assert r.object == "chat.completion" and r.id.startswith("chatcmpl-")


def test_a_chat_reply_is_cut_at_the_requests_stop_string(client: openai.OpenAI) -> None:
    ask = [{"role": "user", "content": "Write three short lines about the sea."}]
    r = client.chat.completions.create(model=MODEL, messages=ask, max_tokens=80, temperature=0, stop=["\n"])
    text = r.choices[0].message.content or ""
    assert text.strip() and "\n" not in text
    assert r.choices[0].finish_reason == "stop"


def test_a_bad_request_is_a_400_with_a_one_line_message(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.completions.create(model=MODEL, prompt="x", n=40)
    error = caught.value
    assert error.status_code == 400
    assert error.param == "n" and error.type == "invalid_request_error"
    assert "\n" not in error.message and "n must be from 1 to 16" in error.message


def test_streaming_is_refused_with_a_400(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError, match="stream"):
        client.chat.completions.create(model=MODEL, messages=TIMES, stream=True)


def test_a_prompt_too_long_for_the_context_is_refused(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.completions.create(model=MODEL, prompt=CAPITALS, max_tokens=5000)
    assert caught.value.code == "context_length_exceeded"


def test_an_unknown_model_is_a_404(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError, match=MODEL):
        client.completions.create(model="gpt-4o", prompt="x", max_tokens=2)


def test_unknown_and_sampling_only_fields_are_ignored(client: openai.OpenAI) -> None:
    r = client.completions.create(model="qwen2.5-coder-0.5b", prompt=CAPITALS, max_tokens=3, top_p=0.9, user="me",
                                  extra_body={"some_new_field": {"x": 1}})
    assert r.choices[0].text


def test_a_client_that_hangs_up_does_not_wedge_the_server(client: openai.OpenAI, url: str) -> None:
    host, port = url.removeprefix("http://").removesuffix("/v1").split(":")
    body = json.dumps({"model": MODEL, "prompt": "Write a long story.", "n": 4, "max_tokens": 900}).encode()
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: %s:%s\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (host.encode(), port.encode(), len(body), body))
        time.sleep(0.5)  # generating now
    start = time.monotonic()
    r = client.completions.create(model=MODEL, prompt=CAPITALS, max_tokens=3, temperature=0, stop="\n")
    assert r.choices[0].text.strip() == "Tokyo"
    assert time.monotonic() - start < 20  # not after the abandoned 4 x 900 tokens


def test_the_loop_answers_while_the_model_generates(client: openai.OpenAI) -> None:
    done: list[str] = []
    slow = threading.Thread(target=lambda: done.append(
        client.completions.create(model=MODEL, prompt="Write a long story.", max_tokens=60).choices[0].text))
    slow.start()
    time.sleep(0.3)
    start = time.monotonic()
    client.models.list()
    assert time.monotonic() - start < 1.0
    slow.join(120)
    assert done and done[0]


def test_a_lone_surrogate_escape_in_a_prompt_is_a_400_not_a_500(client: openai.OpenAI, url: str) -> None:
    request = urllib.request.Request(f"{url}/completions", b'{"prompt": "Country: \\ud800", "max_tokens": 3}',
                                     {"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=scaled(60))
    error = json.loads(refused.value.read())["error"]
    assert refused.value.code == 400 and error["code"] == "invalid_json" and "\n" not in error["message"]
    # The model is unharmed: the next request is answered.
    r = client.completions.create(model=MODEL, prompt=CAPITALS, max_tokens=3, temperature=0, stop="\n")
    assert r.choices[0].text.strip() == "Tokyo"


async def test_thoughtloom_s_openai_backend_can_share_the_served_model(url: str) -> None:
    backend = make_backend(f"openai-compatible:{url}@{MODEL}")
    gateway = Gateway(backend, Budget(BudgetLimits(calls=2)))
    try:
        ask = Prompt(text=CAPITALS, messages=tuple(Message(**m) for m in TIMES))
        reply = await gateway.generate(GenerateRequest(ask, max_tokens=10, temperature=0.0))
    finally:
        await backend.aclose()
    assert reply.texts[0].strip() == "36"  # the chat form, through the served model's template
    assert gateway.budget.spent.input_tokens > 0


def test_loom_solve_in_another_process_runs_on_the_served_model(url: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "thoughtloom", "solve", "--task", "game24", "--model", f"openai-compatible:{url}@{MODEL}",
         "--budget-calls", "1", "--json", "--quiet", "--no-store", "4 5 6 10"],
        capture_output=True, text=True, timeout=scaled(300), check=False, cwd=Path(__file__).parents[1], env=os.environ.copy(),
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    # The one call it may make was answered (a failed call would end it with model_error).
    assert result["termination_reason"] == "budget_calls" and result["error"] is None
    assert result["usage"]["calls"] == 1 and result["usage"]["output_tokens"] > 0


def test_a_base_model_chat_continues_a_transcript_and_ends_at_the_next_turn() -> None:
    if not parts_installed(GEMMA_3_270M):
        pytest.skip("the gemma extra is not installed")
    gemma = LocalLlamaBackend(embedded=GEMMA_3_270M, n_ctx=512)
    turns = [{"role": "system", "content": "You answer with the capital city."},
             {"role": "user", "content": "France?"}, {"role": "assistant", "content": "Paris"},
             {"role": "user", "content": "Japan?"}]
    with running(gemma) as base, openai.OpenAI(base_url=base, api_key="x", max_retries=0) as c:
        r = c.chat.completions.create(model="local:gemma-3-270m", messages=turns, max_tokens=30, temperature=0)
    text = r.choices[0].message.content or ""
    assert "Tokyo" in text and "USER:" not in text
    assert r.choices[0].finish_reason == "stop"
