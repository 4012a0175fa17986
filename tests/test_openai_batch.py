"""Batched completions over HTTP: several prompts in one request to a real server on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from openai_server import FakeOpenAIServer, Reply, Seen
from conftest import BackendFactory

from thoughtloom.llm.errors import BatchRefused
from thoughtloom.llm.gateway import Gateway
from thoughtloom.llm.registry import make_backend
from thoughtloom.llm.types import GenerateRequest, Prompt, Usage


def batch_reply(seen: Seen) -> Reply:
    """Each prompt echoed n times (the server fans a prompt list out to this, one prompt at a time)."""
    prompts = seen.body["prompt"] if isinstance(seen.body["prompt"], list) else [seen.body["prompt"]]
    n = int(seen.body.get("n") or 1)
    choices = [{"index": i * n + j, "text": f"{p} #{j}", "finish_reason": "stop"}
               for i, p in enumerate(prompts) for j in range(n)]
    return Reply(200, {"id": "x", "object": "text_completion", "created": 0, "model": "m",
                       "choices": list(reversed(choices)),
                       "usage": {"prompt_tokens": 30, "completion_tokens": 12, "total_tokens": 42}})


def requests(*texts: str, n: int = 2, **kw) -> list[GenerateRequest]:
    return [GenerateRequest(Prompt(text=t), n=n, max_tokens=8, **kw) for t in texts]


async def test_a_batch_is_one_http_request_with_a_list_of_prompts(server: FakeOpenAIServer, backend_for: BackendFactory) -> None:
    server.responder = batch_reply
    backend = backend_for(api="completions")
    out = await backend.generate_batch(requests("aa", "bbbb", "cc"))
    assert len(server.seen) == 1 and server.seen[0].body["prompt"] == ["aa", "bbbb", "cc"]
    assert [c.texts for c in out] == [("aa #0", "aa #1"), ("bbbb #0", "bbbb #1"), ("cc #0", "cc #1")]


async def test_a_batchs_usage_is_shared_by_prompt_and_output_size_and_sums_exactly(
    server: FakeOpenAIServer, backend_for: BackendFactory,
) -> None:
    server.responder = batch_reply
    out = await backend_for(api="completions").generate_batch(requests("aa", "bbbb", "cc"))
    assert sum((c.usage for c in out), Usage()) == Usage(90, 36)  # the server reports 30 + 12 per prompt
    assert out[1].usage.input_tokens == 45  # "bbbb" is half of the prompt bytes


async def test_seeded_batches_send_one_seed_derived_from_every_request(
    server: FakeOpenAIServer, backend_for: BackendFactory,
) -> None:
    server.responder = batch_reply
    backend = backend_for(api="completions")
    reqs = [GenerateRequest(Prompt(text=t), max_tokens=8, seed=s) for t, s in (("a", 1), ("b", 2))]
    await backend.generate_batch(reqs)
    await backend.generate_batch(reqs)
    seeds = [s.body["seed"] for s in server.seen]
    assert seeds[0] == seeds[1] and isinstance(seeds[0], int)


async def test_a_server_that_answers_a_batch_wrongly_is_never_asked_to_batch_again(
    server: FakeOpenAIServer, backend_for: BackendFactory,
) -> None:
    backend = backend_for(api="completions")  # the default reply: n choices whatever the prompt list
    with pytest.raises(BatchRefused, match="2 prompts with 2 choices") as refused:
        await backend.generate_batch(requests("a", "b"))
    assert refused.value.usage == Usage(11, 6)
    assert backend.supports_batch is False
    assert len(server.seen) == 1


async def test_a_wrongly_answered_batch_is_charged_what_the_server_reported(
    server: FakeOpenAIServer, backend_for: BackendFactory,
) -> None:
    gateway = Gateway(backend_for(api="completions"))
    with pytest.raises(BatchRefused):
        await gateway.generate_batch(requests("a", "b"))
    assert gateway.budget.spent == Usage(11, 6)
    assert gateway.budget.calls == 2  # one per prompt the request carried, as for an answered batch


async def test_requests_with_different_settings_are_refused_as_a_batch_without_a_request(
    server: FakeOpenAIServer, backend_for: BackendFactory
) -> None:
    server.responder = batch_reply
    backend = backend_for(api="completions")
    mixed: Sequence[GenerateRequest] = [*requests("a"), *requests("b", n=1)]
    with pytest.raises(BatchRefused):
        await backend.generate_batch(mixed)
    assert server.seen == []


def test_chat_and_ollama_backends_do_not_batch() -> None:
    assert make_backend("openai-compatible:http://127.0.0.1:9/v1@m").supports_batch is False  # chat
    assert make_backend("openai-compatible:http://127.0.0.1:9/v1@m#completions").supports_batch is True
    assert make_backend("ollama:llama3#completions").supports_batch is False


async def test_a_search_over_http_sends_sibling_values_as_one_request(server: FakeOpenAIServer) -> None:
    from thoughtloom.search.config import SearchConfig
    from thoughtloom.search.engine import search
    from thoughtloom.tasks.registry import get_task

    def reply(seen: Seen) -> Reply:
        prompts = seen.body["prompt"] if isinstance(seen.body["prompt"], list) else [seen.body["prompt"]]
        n = int(seen.body.get("n") or 1)
        text = lambda p: "7" if "scale of 0 to 10" in p else "a step"  # noqa: E731
        choices = [{"index": i * n + j, "text": text(p), "finish_reason": "stop"}
                   for i, p in enumerate(prompts) for j in range(n)]
        return Reply(200, {"id": "x", "object": "text_completion", "created": 0, "model": "m", "choices": choices,
                           "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}})

    server.responder = reply
    backend = make_backend(f"openai-compatible:{server.url}@m#completions")
    gateway = Gateway(backend)
    config = SearchConfig(strategy="bfs", generation="propose", breadth=3, beam=1, max_depth=1, value_samples=1)
    try:
        await search(get_task("general"), "q", gateway, config)
    finally:
        await gateway.aclose()
    value_requests = [s for s in server.seen if "scale of 0 to 10" in str(s.body["prompt"])]
    assert len(value_requests) == 1 and len(value_requests[0].body["prompt"]) >= 2


async def test_a_server_that_refuses_prompt_lists_is_never_asked_to_batch_again(
    server: FakeOpenAIServer, backend_for: BackendFactory,
) -> None:
    server.script(Reply(400, {"error": {"message": "prompt must be a string", "type": "invalid_request_error"}}))
    backend = backend_for(api="completions")
    with pytest.raises(BatchRefused, match="prompt must be a string"):
        await backend.generate_batch(requests("a", "b", n=1))
    assert backend.supports_batch is False
    assert len(server.seen) == 1
