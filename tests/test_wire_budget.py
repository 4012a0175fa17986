"""Every request on the wire is reserved, counted and slotted, whatever the server does (issue 12).

Built from the attacks: a server that ignores `n` (the llama.cpp server, Ollama), one that
reports negative or absurd usage, and calls cancelled at a limit. All through real HTTP.
"""

from __future__ import annotations

import asyncio
import logging

import pytest
from conftest import BackendFactory
from openai_server import FakeOpenAIServer

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
