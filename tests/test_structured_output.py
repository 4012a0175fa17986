"""Structured output: votes ask for JSON by schema, and replies that are not the JSON asked for are counted."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator

import pytest
from openai_server import FakeOpenAIServer, Reply, Seen, completions_of, serve

from thoughtloom.api import solve
from thoughtloom.llm.fake import ScriptedBackend
from thoughtloom.llm.types import GenerateRequest
from thoughtloom.tasks.evaluation import EVALUATION_SCHEMA
from thoughtloom.tasks.general import GeneralTask, vote_schema

QUESTION = "What is six times seven?"
SMALL: dict[str, object] = {"breadth": 2, "beam": 1, "max_depth": 2, "seed": 1, "one_pass": True}


def scripted(value_reply: str, vote_reply: str = '{"choice": 1}') -> ScriptedBackend:
    """Steps numbered in order; value and vote replies as given (by the schema each request carries)."""
    counter = itertools.count(1)

    def reply(request: GenerateRequest, index: int) -> str:
        if request.schema == EVALUATION_SCHEMA:
            return value_reply
        if request.schema is not None:
            return vote_reply
        return f"The answer is {next(counter)}"

    return ScriptedBackend(responder=reply)


# --- votes ------------------------------------------------------------------------------------------


def test_a_vote_asks_for_the_chosen_number_by_json_schema() -> None:
    query = GeneralTask().vote(QUESTION, [], ["a", "b", "c"])
    assert query.schema is not None
    assert json.loads(query.schema)["properties"]["choice"] == {"enum": [1, 2, 3]}


def test_a_json_vote_counts_for_the_candidate_it_names() -> None:
    assert GeneralTask().parse_vote(QUESTION, ["a", "b", "c"], ['{"choice": 3}', '{"choice": 3}']) == [0, 0, 1.0]


def test_a_json_vote_outside_the_candidates_counts_for_none() -> None:
    assert GeneralTask().parse_vote(QUESTION, ["a", "b"], ['{"choice": 5}']) == [0, 0]


def test_a_text_vote_is_still_read_where_the_schema_is_not_enforced() -> None:
    assert GeneralTask().parse_vote(QUESTION, ["a", "b"], ["The best choice is 2"]) == [0, 1.0]


@pytest.fixture
def vote_server() -> Iterator[FakeOpenAIServer]:
    """A chat server answering steps with text and votes with {"choice": 1}."""
    counter = itertools.count(1)

    def respond(seen: Seen) -> Reply:
        n = int(seen.body.get("n") or 1)
        texts = ['{"choice": 1}' if "response_format" in seen.body else f"step {next(counter)}" for _ in range(n)]
        return Reply(200, {"id": "x", "object": "chat.completion", "created": 0, "model": "m",
                           "choices": [{"index": i, "message": {"role": "assistant", "content": text},
                                        "finish_reason": "stop"} for i, text in enumerate(texts)],
                           "usage": {"prompt_tokens": 10, "completion_tokens": 2 * n, "total_tokens": 10 + 2 * n}})

    with serve(FakeOpenAIServer(responder=respond)) as fake:
        yield fake


def test_a_vote_sends_its_schema_as_structured_output_to_a_chat_endpoint(vote_server: FakeOpenAIServer) -> None:
    solve(QUESTION, task="general", model=f"openai-compatible:{vote_server.url}@m", controller=False,
          evaluation="vote", **SMALL)
    formats = [s.body["response_format"] for s in vote_server.seen if "response_format" in s.body]
    assert formats
    assert formats[0]["json_schema"]["schema"] == json.loads(vote_schema(2))


# --- parse failures ---------------------------------------------------------------------------------


def run(backend: ScriptedBackend, **settings: object) -> object:
    return solve(QUESTION, task="general", model=backend, controller=False, **{**SMALL, **settings})


def value_calls(backend: ScriptedBackend) -> int:
    return sum(r.n for r in backend.calls if r.schema == EVALUATION_SCHEMA)


def test_structured_replies_in_json_are_no_parse_failures() -> None:
    reply = json.dumps({"reasoning": "sound", "score": 7, "is_promising": True})
    result = run(scripted(reply))
    assert result.stats.parse_failures == 0  # type: ignore[attr-defined]


def test_each_structured_reply_read_as_text_is_a_parse_failure() -> None:
    backend = scripted("Score: 7/10")
    result = run(backend)
    assert value_calls(backend) > 0
    assert result.stats.parse_failures == value_calls(backend)  # type: ignore[attr-defined]
    assert result.score is not None  # the text fallback still read the scores


def test_a_vote_read_as_text_is_a_parse_failure() -> None:
    backend = scripted("{}", vote_reply="The best choice is 1")
    result = run(backend, evaluation="vote")
    votes = sum(r.n for r in backend.calls if r.schema is not None and r.schema != EVALUATION_SCHEMA)
    assert votes > 0
    assert result.stats.parse_failures == votes  # type: ignore[attr-defined]


def test_parse_failures_are_in_the_json_stats() -> None:
    result = run(scripted("Score: 7/10"))
    assert result.to_dict()["stats"]["parse_failures"] == result.stats.parse_failures > 0  # type: ignore[attr-defined]



# --- how a schema reaches each kind of server -------------------------------------------------------

SCHEMA = {"type": "object", "properties": {"choice": {"enum": [1, 2]}}, "required": ["choice"]}


def structured(**kwargs: object) -> GenerateRequest:
    from thoughtloom.llm.types import Prompt

    return GenerateRequest(Prompt(text="Pick one."), schema=json.dumps(SCHEMA), **kwargs)  # type: ignore[arg-type]


async def ask_once(spec: str, request: GenerateRequest) -> None:
    from thoughtloom.llm.registry import make_backend

    backend = make_backend(spec, {})
    try:
        await backend.generate(request)
    finally:
        await backend.aclose()


async def test_vllm_gets_the_schema_as_guided_json_on_the_completions_endpoint(server: FakeOpenAIServer) -> None:
    await ask_once(f"vllm:{server.url}@m#completions", structured())
    assert server.seen[0].path == "/v1/completions"
    assert server.seen[0].body["guided_json"] == SCHEMA


async def test_vllm_gets_the_schema_as_guided_json_on_the_chat_endpoint(server: FakeOpenAIServer) -> None:
    await ask_once(f"vllm:{server.url}@m", structured())
    assert server.seen[0].body["guided_json"] == SCHEMA
    assert "response_format" not in server.seen[0].body


async def test_ollama_chat_gets_the_schema_as_response_format(server: FakeOpenAIServer) -> None:
    from thoughtloom.llm.registry import make_backend

    backend = make_backend("ollama:llama3.2", {"OLLAMA_HOST": server.url.removesuffix("/v1")})
    await backend.generate(structured())
    await backend.aclose()
    assert server.seen[0].body["response_format"]["json_schema"]["schema"] == SCHEMA


async def test_a_vllm_batch_of_structured_requests_carries_their_schema(server: FakeOpenAIServer) -> None:
    from thoughtloom.llm.registry import make_backend

    server.responder = completions_of(lambda prompt, i: '{"choice": 1}')
    backend = make_backend(f"vllm:{server.url}@m#completions", {})
    completions = await backend.generate_batch([structured(), structured()])  # type: ignore[attr-defined]
    await backend.aclose()
    assert len(completions) == 2
    assert len(server.seen) == 1
    assert server.seen[0].body["guided_json"] == SCHEMA


async def test_requests_with_different_schemas_are_not_batched(server: FakeOpenAIServer) -> None:
    from thoughtloom.llm.errors import BatchRefused
    from thoughtloom.llm.registry import make_backend
    from thoughtloom.llm.types import Prompt

    backend = make_backend(f"vllm:{server.url}@m#completions", {})
    with pytest.raises(BatchRefused):
        await backend.generate_batch([structured(), GenerateRequest(Prompt(text="Free text."))])  # type: ignore[attr-defined]
    await backend.aclose()
    assert server.seen == []


# --- through the embedded model ---------------------------------------------------------------------


@pytest.mark.local_model
def test_the_embedded_model_votes_in_json_through_its_grammar_with_no_parse_failures() -> None:
    from thoughtloom.llm.budget import BudgetLimits

    result = solve(QUESTION, task="general", model="local:gemma-3-270m", controller=False, evaluation="vote", one_pass=True,
                   breadth=3, beam=1, max_depth=1, seed=2, temperature=1.0, budget=BudgetLimits(tokens=4_000))
    voted = [n for n in result.graph if n.depth == 1 and n.score is not None]
    assert len(voted) >= 2, result.termination_reason  # a vote was asked (one candidate needs none)
    assert result.stats.parse_failures == 0  # the grammar made every vote {"choice": N}
    assert result.usage.cost_known and result.usage.cost_usd == 0.0  # an embedded model costs nothing, known
