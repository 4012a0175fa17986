"""Every request on the wire is reserved, counted and slotted, whatever the server does (issue 12).

Built from the attacks: a server that ignores `n` (the llama.cpp server, Ollama), one that
reports negative, absurd or too little usage (issue 34), and calls cancelled at a limit. All
through real HTTP.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import re

import pytest
from conftest import BackendFactory
from openai_server import FakeOpenAIServer, Reply, Seen
from test_cli import loom

from thoughtloom.llm.budget import BudgetLimits
from thoughtloom.llm.errors import BudgetExceeded
from thoughtloom.llm.gateway import Gateway, RetryPolicy
from thoughtloom.llm.types import GenerateRequest, Prompt

PROMPT = "x" * 400  # a prompt bound of 408 tokens (bytes + 8)


def ask(n: int, max_tokens: int = 16) -> GenerateRequest:
    return GenerateRequest(Prompt(text=PROMPT), n=n, max_tokens=max_tokens)


def ignoring_n(server: FakeOpenAIServer, prompt_tokens: int = 400, completion_tokens: int = 16) -> None:
    """The server answers one choice whatever n is, and reports the given usage for it."""
    server.max_choices = 1
    server.usage = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                    "total_tokens": prompt_tokens + completion_tokens}


async def test_a_server_ignoring_n_never_takes_spending_past_the_token_budget(
    server: FakeOpenAIServer, backend_for: BackendFactory
) -> None:
    ignoring_n(server)
    gateway = Gateway(backend_for(api="completions"), BudgetLimits(tokens=1_000))
    completion = await gateway.generate(ask(n=5))
    assert gateway.budget.spent.total <= 1_000
    assert len(server.seen) == gateway.budget.calls == len(completion.texts) == 2  # the third did not fit


async def test_a_server_ignoring_n_never_gets_more_requests_than_the_call_budget(
    server: FakeOpenAIServer, backend_for: BackendFactory
) -> None:
    ignoring_n(server)
    gateway = Gateway(backend_for(api="completions"), BudgetLimits(calls=3))
    await gateway.generate(ask(n=8))
    with pytest.raises(BudgetExceeded):
        await gateway.generate(ask(n=8))
    assert len(server.seen) == gateway.budget.calls == 3


async def test_requests_for_missing_samples_wait_for_a_concurrency_slot(
    server: FakeOpenAIServer, backend_for: BackendFactory
) -> None:
    ignoring_n(server)
    server.delay_s = 0.05
    gateway = Gateway(backend_for(api="completions"), concurrency=1)
    await asyncio.gather(gateway.generate(ask(n=4)), gateway.generate(ask(n=4)))
    assert len(server.seen) == 8
    assert server.peak_in_flight == 1


async def test_negative_usage_does_not_bypass_the_token_budget(
    server: FakeOpenAIServer, backend_for: BackendFactory
) -> None:
    server.usage = {"prompt_tokens": -1_000, "completion_tokens": 5, "total_tokens": -995}
    gateway = Gateway(backend_for(api="completions"), BudgetLimits(tokens=2_000))
    with pytest.raises(BudgetExceeded):
        for _ in range(50):
            await gateway.generate(ask(n=1))
    assert gateway.budget.spent.total <= 2_000
    assert len(server.seen) <= 2_000 // (408 + 5)


async def test_the_ledger_never_decreases_on_a_negative_report(
    server: FakeOpenAIServer, backend_for: BackendFactory
) -> None:
    server.usage = {"prompt_tokens": -1_000, "completion_tokens": -7, "total_tokens": -1_007}
    gateway = Gateway(backend_for(api="completions"))
    before = gateway.budget.spent
    await gateway.generate(ask(n=1))
    assert gateway.budget.spent.input_tokens >= before.input_tokens + 1
    assert gateway.budget.spent.output_tokens >= before.output_tokens


async def test_absurd_usage_is_charged_at_most_the_requests_bound_with_a_warning(
    server: FakeOpenAIServer, backend_for: BackendFactory, caplog: pytest.LogCaptureFixture
) -> None:
    server.usage = {"prompt_tokens": 10**9, "completion_tokens": 10**9, "total_tokens": 2 * 10**9}
    gateway = Gateway(backend_for(api="completions"))
    with caplog.at_level(logging.WARNING, logger="thoughtloom.llm.gateway"):
        completion = await gateway.generate(ask(n=1))
    assert completion.usage.input_tokens == 408 and completion.usage.output_tokens == 16
    assert gateway.budget.spent == completion.usage
    assert "impossible usage" in caplog.text


async def test_a_request_cancelled_after_it_was_sent_is_counted_and_charged_its_reservation(
    server: FakeOpenAIServer, backend_for: BackendFactory
) -> None:
    server.delay_s = 0.5
    gateway = Gateway(backend_for(api="completions"))
    call = asyncio.ensure_future(gateway.generate(ask(n=1)))
    while not server.seen:
        await asyncio.sleep(0.01)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert gateway.budget.calls == len(server.seen) == 1
    assert gateway.budget.spent.total == 408 + 16


async def test_each_retry_is_a_request_the_call_budget_counts(
    server: FakeOpenAIServer, backend_for: BackendFactory
) -> None:
    from openai_server import Reply, error_body

    server.script(*[Reply(500, error_body("busy"))] * 3)
    gateway = Gateway(backend_for(api="completions"), BudgetLimits(calls=2), retry=RetryPolicy(base_delay_s=0.01))
    with pytest.raises(BudgetExceeded):
        await gateway.generate(ask(n=1))
    assert len(server.seen) == gateway.budget.calls == 2


# --- Usage below what the texts must cost (issue 34, point 3) ---------------------------------

REPLY = "y" * 200  # 50 tokens at 4 bytes a token


def reporting(server: FakeOpenAIServer, prompt_tokens: int | None, completion_tokens: int = 0,
              text: str = REPLY) -> None:
    """Every request is answered with `text`, and the given usage reported for it (None: no usage)."""

    def reply(seen: Seen) -> Reply:
        body = {"id": "x", "object": "text_completion", "created": 0, "model": "m",
                "choices": [{"index": 0, "text": text, "finish_reason": "stop"}]}
        if prompt_tokens is not None:
            body["usage"] = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                             "total_tokens": prompt_tokens + completion_tokens}
        return Reply(200, body)

    server.responder = reply


def traffic(server: FakeOpenAIServer) -> int:
    """What the requests the server answered cost at 4 bytes a token (prompts in, REPLY out)."""
    return sum(len(seen.body["prompt"].encode()) // 4 + len(REPLY) // 4 for seen in server.seen)


@pytest.mark.parametrize(("prompt_tokens", "completion_tokens"), [(0, 0), (1, 1)], ids=["zero", "one"])
async def test_a_server_under_reporting_usage_cannot_spend_past_the_token_budget(
    server: FakeOpenAIServer, backend_for: BackendFactory, prompt_tokens: int, completion_tokens: int
) -> None:
    reporting(server, prompt_tokens, completion_tokens)
    gateway = Gateway(backend_for(api="completions"), BudgetLimits(tokens=3_000))
    with pytest.raises(BudgetExceeded):
        for _ in range(100):
            await gateway.generate(ask(n=1, max_tokens=64))
    # Charged the estimate, not the report (the last call's max_tokens was shrunk to what was left).
    assert 0.95 * traffic(server) <= gateway.budget.spent.total <= traffic(server) <= 3_000


async def test_under_reported_usage_is_replaced_by_the_estimate_with_one_warning(
    server: FakeOpenAIServer, backend_for: BackendFactory, caplog: pytest.LogCaptureFixture
) -> None:
    reporting(server, 1, 1)
    gateway = Gateway(backend_for(api="completions"))
    with caplog.at_level(logging.WARNING, logger="thoughtloom.llm.gateway"):
        completions = [await gateway.generate(ask(n=1, max_tokens=64)) for _ in range(5)]
    assert {(c.usage.input_tokens, c.usage.output_tokens) for c in completions} == {(100, 50)}
    assert [r.usage for r in gateway.records] == [c.usage for c in completions]
    warnings = [r for r in caplog.records if "fewer than the texts must cost" in r.getMessage()]
    assert len(warnings) == 1


async def test_a_reply_holding_a_lone_surrogate_is_estimated_without_error(
    server: FakeOpenAIServer, backend_for: BackendFactory
) -> None:
    reporting(server, 0, 0, text="\ud800" * 100)  # 300 bytes as UTF-8 would write it
    gateway = Gateway(backend_for(api="completions"))
    completion = await gateway.generate(ask(n=1, max_tokens=128))
    assert completion.texts == ("\ufffd" * 100,)  # made valid where it entered, then measured
    assert (completion.usage.input_tokens, completion.usage.output_tokens) == (100, 75)


@pytest.mark.parametrize(("prompt_tokens", "completion_tokens"), [(60, 20), (300, 64), (4, 2)],
                         ids=["below the estimate", "above the estimate", "at the floor"])
async def test_an_honest_count_is_charged_as_reported(
    server: FakeOpenAIServer, backend_for: BackendFactory, caplog: pytest.LogCaptureFixture,
    prompt_tokens: int, completion_tokens: int,
) -> None:
    # A tokenizer may pack up to 128 bytes in a token: 400 prompt bytes can honestly be 4 tokens.
    reporting(server, prompt_tokens, completion_tokens)
    gateway = Gateway(backend_for(api="completions"))
    with caplog.at_level(logging.WARNING, logger="thoughtloom.llm.gateway"):
        completion = await gateway.generate(ask(n=1, max_tokens=64))
    assert (completion.usage.input_tokens, completion.usage.output_tokens) == (prompt_tokens, completion_tokens)
    assert gateway.budget.spent == completion.usage
    assert not caplog.records


def every_step(seen: Seen) -> str:
    """A game24 model that values every state "likely" and proposes every sum and product of two numbers."""
    prompt = seen.body["prompt"]
    if prompt.startswith("Evaluate if"):
        return "likely"
    numbers = [int(x) for x in re.findall(r"Input: ([\d ]+)\nPossible", prompt)[-1].split()]
    lines = []
    for i, j in itertools.combinations(range(len(numbers)), 2):
        rest = [numbers[k] for k in range(len(numbers)) if k not in (i, j)]
        for op, value in (("+", numbers[i] + numbers[j]), ("*", numbers[i] * numbers[j])):
            left = " ".join(map(str, sorted([*rest, value])))
            lines.append(f"{numbers[i]} {op} {numbers[j]} = {value} (left: {left})")
    return "\n".join(lines)


@pytest.mark.parametrize(("prompt_tokens", "completion_tokens"), [(0, 0), (1, 1)], ids=["zero", "one"])
def test_solve_stops_at_its_token_budget_and_reports_tokens_when_the_server_under_reports(
    server: FakeOpenAIServer, prompt_tokens: int, completion_tokens: int
) -> None:
    # Unchecked, this search (1 1 2 2 has no solution) ran to exhaustion: 35 requests, about 7,000
    # tokens at 4 bytes a token, through a 3,000-token budget, reporting 0 (or 92) tokens.
    sent: list[int] = []

    def reply(seen: Seen) -> Reply:
        text, n = every_step(seen), int(seen.body.get("n") or 1)
        sent.append(len(seen.body["prompt"].encode()) // 4 + n * (len(text.encode()) // 4))
        return Reply(200, {
            "id": "x", "object": "text_completion", "created": 0, "model": "m",
            "choices": [{"index": i, "text": text, "finish_reason": "stop"} for i in range(n)],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens * n,
                      "total_tokens": prompt_tokens + completion_tokens * n},
        })

    server.responder = reply
    model = f"openai-compatible:{server.url}@scripted#completions"
    proc = loom("solve", "--task", "game24", "--model", model, "--json", "--budget-tokens", "3000",
                "--concurrency", "1", "1 1 2 2")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["termination_reason"] == "budget_tokens"
    charged = out["usage"]["input_tokens"] + out["usage"]["output_tokens"]
    assert 0.9 * sum(sent) <= charged <= 3_000
    assert sum(sent) <= 3_000
    assert proc.stderr.count("fewer than the texts must cost") == 1


async def test_a_server_reporting_no_usage_is_estimated_without_a_warning(
    server: FakeOpenAIServer, backend_for: BackendFactory, caplog: pytest.LogCaptureFixture
) -> None:
    reporting(server, None, text="ok")  # 2 bytes: less than the 4 of an estimated token, still one
    gateway = Gateway(backend_for(api="completions"))
    with caplog.at_level(logging.WARNING, logger="thoughtloom.llm.gateway"):
        completion = await gateway.generate(ask(n=1))
    assert (completion.usage.input_tokens, completion.usage.output_tokens) == (100, 1)
    assert not caplog.records
