"""Choices, scoring and token logprobs on the real embedded model (llama.cpp)."""

from __future__ import annotations

import pytest

from thoughtloom.llm.budget import BudgetLimits
from thoughtloom.llm.gateway import Gateway
from thoughtloom.llm.local import LocalLlamaBackend
from thoughtloom.llm.models import GEMMA_3_270M
from thoughtloom.llm.types import GenerateRequest, Prompt, parse_choice_text
from thoughtloom.search import SearchConfig, search
from thoughtloom.tasks import get_task

pytestmark = pytest.mark.local_model

CAPITALS = Prompt(text="Country: France\nCapital: Paris\n\nCountry: Japan\nCapital: Tokyo\n\nCountry: Italy\nCapital:")
CITIES = (" Rome", " Madrid", " Oslo")


@pytest.fixture(scope="module")
def backend() -> LocalLlamaBackend:
    b = LocalLlamaBackend(embedded=GEMMA_3_270M, n_ctx=512)
    b.load()
    return b


async def test_scoring_choices_puts_the_right_answer_first(backend: LocalLlamaBackend):
    got = await backend.generate(GenerateRequest(CAPITALS, choices=CITIES, score_choices=True))
    odds = parse_choice_text(got.texts[0], CITIES)
    assert odds is not None and max(odds, key=odds.__getitem__) == " Rome"


async def test_scoring_counts_the_prompt_and_every_choice_token_and_samples_nothing(backend: LocalLlamaBackend):
    got = await backend.generate(GenerateRequest(CAPITALS, choices=CITIES, score_choices=True))
    choice_tokens = sum(len(t) for t in backend.choice_tokens(CAPITALS, CITIES))
    assert got.usage.input_tokens == backend.count_tokens(CAPITALS) + choice_tokens
    assert got.usage.output_tokens == 0


async def test_a_long_choice_is_scored_over_all_its_tokens(backend: LocalLlamaBackend):
    choices = (" Rome\n\nCountry: Spain\nCapital: Madrid", " Rome\n\nCountry: Spain\nCapital: Paris")
    got = await backend.generate(GenerateRequest(CAPITALS, choices=choices, score_choices=True))
    odds = parse_choice_text(got.texts[0], choices)
    assert odds is not None and odds[choices[0]] > odds[choices[1]]


async def test_sampling_with_choices_returns_only_choices(backend: LocalLlamaBackend):
    got = await backend.generate(GenerateRequest(CAPITALS, n=4, choices=(" Oslo", " Madrid"), max_tokens=8,
                                                 temperature=1.0, seed=5))
    assert set(got.texts) <= {" Oslo", " Madrid"}


async def test_token_logprobs_come_with_their_alternatives(backend: LocalLlamaBackend):
    got = await backend.generate(GenerateRequest(CAPITALS, max_tokens=3, temperature=0.0, logprobs=2, stop=("\n",)))
    assert got.logprobs is not None
    (tokens,) = got.logprobs
    assert "".join(t.token for t in tokens).startswith(got.texts[0])
    first = tokens[0]
    assert len(first.top) == 2 and first.top[0][1] >= first.top[1][1]
    assert first.logprob == pytest.approx(first.top[0][1])  # greedy: the chosen token is the likeliest


async def test_a_game24_search_on_the_model_scores_legal_steps_and_rejects_none():
    backend = LocalLlamaBackend(embedded=GEMMA_3_270M, n_ctx=2048)
    gateway = Gateway(backend, BudgetLimits(tokens=20_000))
    result = await search(get_task("game24"), "4 5 6 10", gateway,
                          SearchConfig(breadth=3, beam=1, max_depth=3, evaluation="prior", one_pass=True))
    assert result.stats.rejected == 0 and result.stats.max_depth == 3
    assert all(r.texts[0].startswith("{") for r in gateway.records)  # every call was a scoring call
