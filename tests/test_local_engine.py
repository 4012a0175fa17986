"""The embedded engine's prefix cache and continuous batching, on the real Gemma 3 270M model."""

from __future__ import annotations

import asyncio
import json

import pytest

from thoughtloom.llm.errors import ModelError
from thoughtloom.llm.local import LocalLlamaBackend
from thoughtloom.llm.models import GEMMA_3_270M
from thoughtloom.llm.types import GenerateRequest, Prompt, parse_choice_text

pytestmark = pytest.mark.local_model

CAPITALS = (
    "Country: France\nCapital: Paris\n\nCountry: Japan\nCapital: Tokyo\n\n"
    "Country: Italy\nCapital: Rome\n\nCountry: Kenya\nCapital: Nairobi\n\n"
)
FRENCH = (
    "English: hello\nFrench: bonjour\n\nEnglish: thank you\nFrench: merci\n\n"
    "English: good night\nFrench: bonne nuit\n\nEnglish: cheese\nFrench: fromage\n\n"
)


def capital(country: str) -> Prompt:
    return Prompt(text=f"{CAPITALS}Country: {country}\nCapital:")


def french(word: str) -> Prompt:
    return Prompt(text=f"{FRENCH}English: {word}\nFrench:")


@pytest.fixture(scope="module")
def backend() -> LocalLlamaBackend:
    # The engine is shared with the other Gemma tests (same file, context and threads): its
    # cache holds their prompts too, so these tests measure differences of its counters.
    b = LocalLlamaBackend(embedded=GEMMA_3_270M, n_ctx=512)
    b.load()
    return b


def counted(backend: LocalLlamaBackend) -> dict[str, float]:
    return backend.engine_stats()


def since(backend: LocalLlamaBackend, before: dict[str, float]) -> dict[str, float]:
    return {k: v - before[k] for k, v in backend.engine_stats().items()}


async def test_alternating_prompts_each_reuse_their_own_cached_prefix(backend: LocalLlamaBackend) -> None:
    await backend.generate(GenerateRequest(capital("Germany"), max_tokens=4, temperature=0.0, stop=("\n",)))
    await backend.generate(GenerateRequest(french("water"), max_tokens=4, temperature=0.0, stop=("\n",)))
    for prompt, prefix in ((capital("Spain"), CAPITALS), (french("bread"), FRENCH),
                           (capital("Peru"), CAPITALS), (french("wine"), FRENCH)):
        before = counted(backend)
        c = await backend.generate(GenerateRequest(prompt, max_tokens=4, temperature=0.0, stop=("\n",)))
        spent = since(backend, before)
        # The few-shot part came from the cache although the other prompt ran in between: only
        # the query line (and the last token, whose logits start sampling) was read.
        assert spent["prompt_reused"] >= backend.count_tokens(Prompt(text=prefix)) - 1
        assert spent["prompt_evaluated"] <= 8
        assert spent["prompt_reused"] + spent["prompt_evaluated"] >= c.usage.input_tokens


async def test_a_seeded_request_gives_the_same_samples_cold_warm_and_after_the_cache_changed() -> None:
    # An engine of its own (another context size), so that the first call is really cold; its small
    # pool fills quickly, so the other prompts force a compaction that drops the first prompt's slot.
    own = LocalLlamaBackend(embedded=GEMMA_3_270M, n_ctx=256)
    request = GenerateRequest(capital("Chile"), n=2, max_tokens=24, temperature=0.9, seed=11)
    cold = await own.generate(request)
    assert own.engine_stats()["prompt_reused"] == 0
    warm = await own.generate(request)
    assert warm.texts == cold.texts
    before = own.engine_stats()
    for country in ("Ghana", "Nepal", "Chad"):
        await own.generate(GenerateRequest(capital(country), n=3, max_tokens=30, temperature=0.9, seed=2))
    for word in ("apple", "river", "window", "summer", "garden", "music", "bridge", "forest", "cloud", "stone"):
        await own.generate(GenerateRequest(french(word), n=3, max_tokens=30, temperature=0.9, seed=1))
        if since(own, before)["compactions"]:
            break
    # The compaction kept one slot per prompt family, the most recent: Chad's, not Chile's.
    spent = since(own, before)
    assert spent["compactions"] >= 1 and spent["evictions"] >= 1
    before = own.engine_stats()
    later = await own.generate(request)
    # Its own slot is gone: it starts from another capital prompt's few-shot part.
    assert 1 < since(own, before)["prompt_evaluated"] < own.count_tokens(request.prompt)
    assert later.texts == cold.texts


async def test_concurrent_requests_are_decoded_together_with_the_samples_they_get_alone(
        backend: LocalLlamaBackend) -> None:
    requests = [GenerateRequest(capital(c), n=2, max_tokens=16, temperature=0.8, seed=5)
                for c in ("Norway", "Egypt", "Mexico", "India")]
    before = counted(backend)
    alone = [await backend.generate(r) for r in requests]
    one_by_one = since(backend, before)
    before = counted(backend)
    together = await asyncio.gather(*(backend.generate(r) for r in requests))
    batched = since(backend, before)
    assert [c.texts for c in together] == [c.texts for c in alone]
    assert batched["shared_calls"] > 0
    assert backend.engine_stats()["max_jobs"] >= 2
    # Same tokens decoded, in far fewer llama_decode calls.
    assert batched["generated"] == one_by_one["generated"]
    assert batched["decode_calls"] < 0.6 * one_by_one["decode_calls"]


async def test_each_request_in_a_mixed_batch_keeps_its_own_n_max_tokens_and_stop(backend: LocalLlamaBackend) -> None:
    story = Prompt(text="Once upon a time, in a small village by the sea,")
    requests = [
        GenerateRequest(story, n=3, max_tokens=5, temperature=0.9, seed=1),
        GenerateRequest(capital("Cuba"), n=1, max_tokens=40, temperature=0.0, stop=("\n",)),
        GenerateRequest(story, n=2, max_tokens=30, temperature=0.9, seed=2, stop=(",", ".")),
        GenerateRequest(french("moon"), n=4, max_tokens=12, temperature=0.7, seed=3, stop=("\n\n",)),
    ]
    together = await asyncio.gather(*(backend.generate(r) for r in requests))
    for request, c in zip(requests, together):
        assert len(c.texts) == request.n
        assert c.finish_reasons is not None and len(c.finish_reasons) == request.n
        assert c.usage.output_tokens <= request.n * request.max_tokens
        for text, reason in zip(c.texts, c.finish_reasons):
            assert not any(s in text for s in request.stop)
            assert reason in ("stop", "length")
    assert together[0].finish_reasons == ("length",) * 3
    assert together[0].usage.output_tokens == 15
    assert "Havana" in together[1].texts[0] and together[1].finish_reasons == ("stop",)
    alone = [await backend.generate(r) for r in requests]
    assert [c.texts for c in together] == [c.texts for c in alone]


async def test_cancelling_one_request_leaves_the_others_intact(backend: LocalLlamaBackend) -> None:
    keep = [GenerateRequest(french(w), n=2, max_tokens=30, temperature=0.8, seed=9) for w in ("sun", "rain")]
    alone = [await backend.generate(r) for r in keep]
    before = counted(backend)
    doomed = asyncio.ensure_future(backend.generate(
        GenerateRequest(Prompt(text="A long story about the sea:"), n=3, max_tokens=400, temperature=0.9)))
    others = [asyncio.ensure_future(backend.generate(r)) for r in keep]
    while since(backend, before)["decode_calls"] < 3:  # all three are in the batch
        await asyncio.sleep(0.01)
    doomed.cancel()
    with pytest.raises(asyncio.CancelledError):
        await doomed
    done = await asyncio.gather(*others)
    assert [c.texts for c in done] == [c.texts for c in alone]
    spent = since(backend, before)
    assert spent["cancelled"] == 1
    assert spent["generated"] < 3 * 400  # it stopped early
    # The engine is free for the next request.
    c = await asyncio.wait_for(backend.generate(GenerateRequest(capital("Peru"), max_tokens=4, temperature=0.0,
                                                                stop=("\n",))), 30)
    assert "Lima" in c.texts[0]


async def test_choices_grammar_and_logprobs_work_alongside_other_requests(backend: LocalLlamaBackend) -> None:
    scored = GenerateRequest(capital("Germany"), choices=(" Berlin", " Paris", " Madrid"), score_choices=True)
    constrained = GenerateRequest(french("yes"), choices=(" oui", " non"), max_tokens=8, temperature=0.9, seed=4)
    schema = json.dumps({"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}},
                         "required": ["city"]})
    structured = GenerateRequest(capital("Japan"), max_tokens=30, temperature=0.5, seed=6, schema=schema)
    logged = GenerateRequest(capital("Italy"), n=2, max_tokens=6, temperature=0.7, seed=8, logprobs=3)
    plain = GenerateRequest(Prompt(text="The weather today is"), n=2, max_tokens=20, temperature=0.9, seed=10)
    requests = [scored, constrained, structured, logged, plain]
    together = await asyncio.gather(*(backend.generate(r) for r in requests))
    alone = [await backend.generate(r) for r in requests]
    assert [c.texts for c in together] == [c.texts for c in alone]
    distribution = parse_choice_text(together[0].texts[0], scored.choices)
    assert distribution is not None and max(distribution, key=distribution.get) == " Berlin"
    assert together[1].texts[0] in constrained.choices
    assert "city" in json.loads(together[2].texts[0])
    logprobs = together[3].logprobs
    assert logprobs is not None and len(logprobs) == 2
    for sample in logprobs:
        assert 0 < len(sample) <= 6
        assert all(t.logprob <= 0 and len(t.top) == 3 for t in sample)
    assert logprobs == alone[3].logprobs


async def test_a_failed_decode_is_one_line_and_the_engine_recovers(backend: LocalLlamaBackend) -> None:
    engine = backend._engine()
    real = engine.ll

    class Failing:
        failed = False

        def __getattr__(self, name: str) -> object:
            return getattr(real, name)

        def llama_decode(self, ctx: object, batch: object) -> int:
            if not Failing.failed:
                Failing.failed = True
                return -3
            return real.llama_decode(ctx, batch)

    engine.ll = Failing()
    try:
        before = counted(backend)
        with pytest.raises(ModelError) as failure:
            await backend.generate(GenerateRequest(capital("Mali"), max_tokens=4, temperature=0.0))
        assert "\n" not in str(failure.value) and "llama_decode failed with code -3" in str(failure.value)
        assert since(backend, before)["resets"] == 1
        # The cache was cleared, not left half-written: the next request reads its prompt afresh.
        c = await backend.generate(GenerateRequest(capital("Peru"), max_tokens=4, temperature=0.0, stop=("\n",)))
        assert "Lima" in c.texts[0]
    finally:
        engine.ll = real
