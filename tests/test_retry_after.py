"""A server's Retry-After on 429: both header forms read, capped, and waited for by the gateway."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest
from conftest import BackendFactory
from openai_server import FakeOpenAIServer, Reply, error_body

from thoughtloom.llm.errors import TransientModelError
from thoughtloom.llm.gateway import Gateway, RetryPolicy
from thoughtloom.llm.retry_after import MAX_RETRY_AFTER_S, retry_after_seconds
from thoughtloom.llm.types import GenerateRequest, Prompt

NOW = datetime(2026, 11, 24, 12, 0, 0, tzinfo=UTC)


def ask() -> GenerateRequest:
    return GenerateRequest(Prompt(text="Say something."), n=1)


def test_retry_after_in_seconds_is_read() -> None:
    assert retry_after_seconds("7", now=NOW) == 7.0


def test_retry_after_as_an_http_date_is_the_time_until_then() -> None:
    assert retry_after_seconds(format_datetime(NOW + timedelta(seconds=12), usegmt=True), now=NOW) == 12.0


def test_retry_after_in_the_past_means_no_wait() -> None:
    assert retry_after_seconds(format_datetime(NOW - timedelta(seconds=30), usegmt=True), now=NOW) == 0.0


def test_retry_after_is_capped() -> None:
    assert retry_after_seconds("3600", now=NOW) == MAX_RETRY_AFTER_S
    assert retry_after_seconds(format_datetime(NOW + timedelta(hours=2), usegmt=True), now=NOW) == MAX_RETRY_AFTER_S


def test_unreadable_retry_after_is_ignored() -> None:
    assert retry_after_seconds("soon", now=NOW) is None
    assert retry_after_seconds("nan", now=NOW) is None


async def test_a_429_carries_the_servers_retry_after(server: FakeOpenAIServer, backend_for: BackendFactory) -> None:
    server.script(Reply(429, error_body("Rate limit reached", code="rate_limit_exceeded"), headers={"Retry-After": "2"}))
    with pytest.raises(TransientModelError, match="wait 2s") as caught:
        await backend_for().generate(ask())
    assert caught.value.retry_after_s == 2.0


async def test_the_gateway_waits_as_long_as_a_429_asks_before_retrying(
    server: FakeOpenAIServer, backend_for: BackendFactory
) -> None:
    server.script(Reply(429, error_body("Rate limit reached", code="rate_limit_exceeded"), headers={"Retry-After": "1"}))
    gateway = Gateway(backend_for(), retry=RetryPolicy(base_delay_s=0.01))
    t0 = time.monotonic()
    completion = await gateway.generate(ask())
    assert time.monotonic() - t0 >= 1.0  # the backoff alone would have waited about 0.01s
    assert completion.texts == ("sample 0",)
    assert len(server.seen) == 2
    await gateway.aclose()
