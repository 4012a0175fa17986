"""The embedded Gemma 3 270M base model through the llama.cpp backend, run for real (completion form)."""

from __future__ import annotations

import asyncio
import sys

import pytest

from thoughtloom.llm.budget import Budget, BudgetLimits
from thoughtloom.llm.errors import BudgetExceeded, ModelConfigError, ModelError
from thoughtloom.llm.gateway import Gateway
from thoughtloom.llm.local import LocalLlamaBackend
from thoughtloom.llm.models import GEMMA_3_270M
from thoughtloom.llm.types import Backend, GenerateRequest, Prompt, Usage

pytestmark = pytest.mark.local_model

FEW_SHOT = Prompt(
    text=(
        "Country: France\nCapital: Paris\n\n"
        "Country: Japan\nCapital: Tokyo\n\n"
        "Country: Italy\nCapital: Rome\n\n"
        "Country: Germany\nCapital:"
    )
)


@pytest.fixture(scope="module")
def backend() -> LocalLlamaBackend:
    # One thread: the results are the same, and a second thread only spin-waits when another
    # process holds a core (measured 10x slower on a busy 2-core CI machine).
    b = LocalLlamaBackend(embedded=GEMMA_3_270M, n_ctx=512)
    b.load()
    return b


def test_is_a_backend(backend: LocalLlamaBackend) -> None:
    assert isinstance(backend, Backend)
    assert backend.name == "local:gemma-3-270m"
    assert backend.max_concurrency > 1  # calls in flight are decoded together
    assert backend.chat is False


async def test_few_shot_completion_returns_text_and_usage(backend: LocalLlamaBackend) -> None:
    c = await backend.generate(GenerateRequest(FEW_SHOT, max_tokens=8, temperature=0.0, stop=("\n",)))
    assert len(c.texts) == 1
    assert c.texts[0].strip()  # greedy continuation of the pattern
    assert "Berlin" in c.texts[0]
    assert c.usage.input_tokens > 0 and c.usage.output_tokens > 0
    assert c.model == "local:gemma-3-270m"


async def test_samples_differ_at_high_temperature(backend: LocalLlamaBackend) -> None:
    prompt = Prompt(text="Here is a short list of random animal names:\n1.")
    c = await backend.generate(GenerateRequest(prompt, n=3, max_tokens=6, temperature=0.9))
    assert len(c.texts) == 3
    assert len(set(c.texts)) > 1


async def test_same_seed_gives_same_text(backend: LocalLlamaBackend) -> None:
    prompt = Prompt(text="Once upon a time,")
    req = GenerateRequest(prompt, n=2, max_tokens=6, temperature=0.9, seed=1234)
    a = await backend.generate(req)
    # Another prompt in between changes the KV cache: the result must not depend on it.
    await backend.generate(GenerateRequest(FEW_SHOT, max_tokens=4, temperature=0.9))
    b = await backend.generate(req)
    assert a.texts == b.texts


async def test_count_tokens_matches_reported_input(backend: LocalLlamaBackend) -> None:
    n_tokens = backend.count_tokens(FEW_SHOT)
    c = await backend.generate(GenerateRequest(FEW_SHOT, n=2, max_tokens=4, temperature=0.5))
    # The prompt is evaluated once per call (prefix reused), so it is reported once.
    assert c.usage.input_tokens == n_tokens
    assert 0 < c.usage.output_tokens <= 2 * 4


async def test_stop_sequences_are_honoured(backend: LocalLlamaBackend) -> None:
    c = await backend.generate(GenerateRequest(FEW_SHOT, n=2, max_tokens=30, temperature=0.7, stop=("\n",)))
    for text in c.texts:
        assert "\n" not in text


async def test_prompt_longer_than_context_is_a_model_error(backend: LocalLlamaBackend) -> None:
    long = Prompt(text="one two three four " * 200)  # ~800 tokens > n_ctx=512
    with pytest.raises(ModelError, match="context"):
        await backend.generate(GenerateRequest(long, max_tokens=8))
    # Room for the prompt but not for max_tokens is refused too, before any decoding.
    n = backend.count_tokens(FEW_SHOT)
    with pytest.raises(ModelError, match="max_tokens"):
        await backend.generate(GenerateRequest(FEW_SHOT, max_tokens=512 - n + 1))


def test_missing_model_file_is_a_config_error(tmp_path) -> None:
    with pytest.raises(ModelConfigError, match="not found"):
        LocalLlamaBackend(str(tmp_path / "nope.gguf"))


async def test_gateway_never_spends_past_the_token_budget(backend: LocalLlamaBackend) -> None:
    limit = 160
    budget = Budget(BudgetLimits(tokens=limit))
    gateway = Gateway(backend, budget)
    calls = 0
    with pytest.raises(BudgetExceeded):
        for _ in range(20):
            # Short answers (stop at the line end) leave the budget partly unspent after each call,
            # so the gateway makes several calls, reserving exact prompt counts, before refusing.
            request = GenerateRequest(FEW_SHOT, n=2, max_tokens=16, temperature=0.8, stop=("\n",))
            await gateway.generate(request)
            calls += 1
            assert budget.spent.total <= limit
    assert calls >= 2
    assert 0 < budget.spent.total <= limit
    assert budget.reserved_tokens == 0
    # Every call was billed exactly what the backend reported.
    assert budget.spent == sum((r.usage for r in gateway.records), start=Usage())


async def test_repeated_prompt_reuses_the_cache_without_changing_results(backend: LocalLlamaBackend) -> None:
    req = GenerateRequest(FEW_SHOT, n=2, max_tokens=6, temperature=0.9, seed=77)
    first = await backend.generate(req)
    again = await backend.generate(req)  # only the last prompt token is evaluated this time
    assert first.texts == again.texts
    assert first.usage == again.usage


async def test_many_samples_run_in_groups(backend: LocalLlamaBackend) -> None:
    # 10 samples exceed the parallel sequences, and max_tokens=400 leaves KV room for only two
    # samples at a time in the 512-token context: both kinds of grouping run.
    c = await backend.generate(GenerateRequest(FEW_SHOT, n=10, max_tokens=400, temperature=0.8, stop=("\n",)))
    assert len(c.texts) == 10
    assert all("\n" not in t for t in c.texts)
    assert any(t.strip() for t in c.texts)


async def test_multibyte_text_survives_decoding(backend: LocalLlamaBackend) -> None:
    prompt = Prompt(
        text="English: hello\nFrench: bonjour\n\nEnglish: thank you\nFrench: merci\n\n"
        "English: coffee\nFrench: café\n\nEnglish: summer\nFrench:"
    )
    c = await backend.generate(GenerateRequest(prompt, max_tokens=8, temperature=0.0, stop=("\n",)))
    assert c.texts[0].strip()
    assert "\ufffd" not in c.texts[0]


async def test_token_logprobs_carry_the_bytes_the_text_is_made_of(backend: LocalLlamaBackend) -> None:
    c = await backend.generate(GenerateRequest(FEW_SHOT, max_tokens=6, temperature=0.0, logprobs=2))
    assert c.logprobs is not None and c.finish_reasons == ("length",)
    tokens = c.logprobs[0]
    assert len(tokens) == 6
    assert b"".join(t.raw for t in tokens).decode("utf-8", "ignore") == c.texts[0]
    assert all(len(t.top) == 2 and t.logprob <= 0 for t in tokens)


async def test_a_chat_form_request_to_a_base_model_is_a_model_error(backend: LocalLlamaBackend) -> None:
    with pytest.raises(ModelError, match="no chat template"):
        await backend.generate(GenerateRequest(FEW_SHOT, max_tokens=4, form="chat"))


async def test_cancelled_call_frees_the_model(backend: LocalLlamaBackend) -> None:
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(backend.generate(GenerateRequest(FEW_SHOT, n=4, max_tokens=400)), 0.3)
    c = await asyncio.wait_for(
        backend.generate(GenerateRequest(FEW_SHOT, max_tokens=4, temperature=0.0, stop=("\n",))), 30
    )
    assert "Berlin" in c.texts[0]


def test_missing_llama_cpp_points_to_the_setup_script(monkeypatch: pytest.MonkeyPatch) -> None:
    from thoughtloom.llm import local

    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # makes `import llama_cpp` fail
    with pytest.raises(ModelConfigError, match="scripts/setup.sh"):
        local._import_llama_cpp()
