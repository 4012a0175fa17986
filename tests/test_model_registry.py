"""Model selection by one string: parse_model_spec and make_backend."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest

from thoughtloom.llm.budget import Pricing
from thoughtloom.llm.errors import ModelConfigError
from thoughtloom.llm.openai_backend import OpenAIBackend
from thoughtloom.llm.models import DEFAULT_EMBEDDED, QWEN_CODER_05B
from thoughtloom.llm.registry import ModelSpec, make_backend, parse_model_spec

NO_ENV: dict[str, str] = {}


# --- parsing each accepted form -----------------------------------------------------------


def test_local_is_the_default_embedded_model() -> None:
    assert parse_model_spec("local") == parse_model_spec(f"local:{DEFAULT_EMBEDDED}")


def test_local_with_a_name_is_that_embedded_model_and_its_prompt_form() -> None:
    assert parse_model_spec("local:qwen2.5-coder-0.5b") == ModelSpec("local", "qwen2.5-coder-0.5b", None, "chat")
    assert parse_model_spec("local:gemma-3-270m") == ModelSpec("local", "gemma-3-270m", None, "completions")


def test_the_gemma_name_stored_runs_recorded_is_an_alias() -> None:
    assert parse_model_spec("local:gemma-3-270m-q4_k_m").identity == "local:gemma-3-270m"


def test_local_with_a_path_is_any_gguf_file_whose_form_the_file_decides() -> None:
    assert parse_model_spec("local:/models/qwen.gguf") == ModelSpec("local", "/models/qwen.gguf", None, None)


@pytest.mark.parametrize("api", ["chat", "completions"])
def test_a_local_path_may_end_in_the_prompt_form(api: str) -> None:
    spec = parse_model_spec(f"local:/models/qwen.gguf#{api}")
    assert (spec.model, spec.api, spec.identity) == ("/models/qwen.gguf", api, f"local:/models/qwen.gguf#{api}")


def test_local_paths_are_taken_verbatim_even_with_a_hash() -> None:
    assert parse_model_spec("local:/m/a#completions.gguf").model == "/m/a#completions.gguf"


def test_openai_model_uses_api_openai_com_and_chat() -> None:
    assert parse_model_spec("openai:gpt-4o-mini") == ModelSpec(
        "openai", "gpt-4o-mini", "https://api.openai.com/v1", "chat"
    )


def test_openai_compatible_splits_base_url_and_model() -> None:
    spec = parse_model_spec("openai-compatible:http://127.0.0.1:8000/v1@Qwen/Qwen2.5-0.5B-Instruct")
    assert spec == ModelSpec("openai-compatible", "Qwen/Qwen2.5-0.5B-Instruct", "http://127.0.0.1:8000/v1", "chat")


def test_openai_compatible_takes_the_last_at_sign_as_the_model_separator() -> None:
    spec = parse_model_spec("openai-compatible:https://user@llm.example.com/v1@m")
    assert (spec.base_url, spec.model) == ("https://user@llm.example.com/v1", "m")


def test_completions_suffix_selects_the_completions_endpoint() -> None:
    spec = parse_model_spec("openai-compatible:http://127.0.0.1:8000/v1@Qwen2.5-0.5B#completions")
    assert (spec.model, spec.api) == ("Qwen2.5-0.5B", "completions")


def test_chat_suffix_selects_the_chat_endpoint() -> None:
    assert parse_model_spec("ollama:llama3.2#chat", NO_ENV).api == "chat"


def test_ollama_defaults_to_the_local_ollama_port() -> None:
    spec = parse_model_spec("ollama:llama3.2:1b", NO_ENV)
    assert spec == ModelSpec("ollama", "llama3.2:1b", "http://127.0.0.1:11434/v1", "chat")


@pytest.mark.parametrize(
    ("ollama_host", "base_url"),
    [
        ("http://gpu-box:11434", "http://gpu-box:11434/v1"),
        ("gpu-box:9999", "http://gpu-box:9999/v1"),
        ("gpu-box", "http://gpu-box:11434/v1"),
        ("https://ollama.example.com/", "https://ollama.example.com/v1"),
        ("0.0.0.0", "http://0.0.0.0:11434/v1"),
    ],
)
def test_ollama_base_url_comes_from_ollama_host(ollama_host: str, base_url: str) -> None:
    assert parse_model_spec("ollama:llama3.2", {"OLLAMA_HOST": ollama_host}).base_url == base_url


def test_surrounding_whitespace_is_ignored() -> None:
    assert parse_model_spec("  openai:gpt-4o  ").model == "gpt-4o"


# --- rejecting bad forms ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "why"),
    [
        ("gpt-4o", "unknown model"),
        ("gemini:pro", "unknown provider 'gemini'"),
        ("openai:", "needs a model name"),
        ("ollama:", "needs a model name"),
        ("local:", "needs a model name or the path"),
        ("local:qwen", "no embedded model is named 'qwen'"),
        ("openai-compatible:http://127.0.0.1:8000/v1", "needs BASE_URL@MODEL"),
        ("openai-compatible:http://127.0.0.1:8000/v1@", "needs BASE_URL@MODEL"),
        ("openai-compatible:127.0.0.1:8000/v1@m", "must start with http:// or https://"),
        ("openai-compatible:ftp://host/v1@m", "must start with http:// or https://"),
        ("openai-compatible:http:///v1@m", "has no host"),
        ("openai:gpt-4o#stream", "unknown endpoint suffix #stream"),
        ("", "unknown model"),
    ],
)
def test_bad_specs_say_what_is_wrong_and_list_the_accepted_forms(spec: str, why: str) -> None:
    with pytest.raises(ModelConfigError) as caught:
        parse_model_spec(spec, NO_ENV)
    message = str(caught.value)
    assert why in message
    assert "openai-compatible:BASE_URL@MODEL" in message
    assert "\n" not in message


# --- making backends ----------------------------------------------------------------------


def test_openai_backend_takes_its_key_from_openai_api_key() -> None:
    backend = make_backend("openai:gpt-4o-mini", {"OPENAI_API_KEY": "sk-abc"})
    assert isinstance(backend, OpenAIBackend)
    assert (backend.model, backend.base_url, backend.api_key, backend.api) == (
        "gpt-4o-mini",
        "https://api.openai.com/v1",
        "sk-abc",
        "chat",
    )
    assert backend.name == "openai:gpt-4o-mini"


def test_missing_openai_api_key_raises_a_config_error() -> None:
    with pytest.raises(ModelConfigError, match="OPENAI_API_KEY is not set; export it or choose another --model"):
        make_backend("openai:gpt-4o-mini", NO_ENV)


def test_empty_openai_api_key_counts_as_missing() -> None:
    with pytest.raises(ModelConfigError, match="OPENAI_API_KEY is not set"):
        make_backend("openai:gpt-4o-mini", {"OPENAI_API_KEY": ""})


def test_openai_compatible_prefers_thoughtloom_api_key() -> None:
    env = {"THOUGHTLOOM_API_KEY": "tl-key", "OPENAI_API_KEY": "sk-key"}
    backend = make_backend("openai-compatible:http://127.0.0.1:8000/v1@m", env)
    assert isinstance(backend, OpenAIBackend)
    assert (backend.api_key, backend.key_env) == ("tl-key", "THOUGHTLOOM_API_KEY")


def test_openai_compatible_falls_back_to_openai_api_key() -> None:
    backend = make_backend("openai-compatible:http://127.0.0.1:8000/v1@m", {"OPENAI_API_KEY": "sk-key"})
    assert isinstance(backend, OpenAIBackend)
    assert backend.api_key == "sk-key"


def test_openai_compatible_without_any_key_uses_a_dummy_key() -> None:
    backend = make_backend("openai-compatible:http://127.0.0.1:8000/v1@m", NO_ENV)
    assert isinstance(backend, OpenAIBackend)
    assert backend.api_key == "none"


def test_ollama_backend_uses_the_ollama_key_and_v1_endpoint() -> None:
    backend = make_backend("ollama:llama3.2", {"OLLAMA_HOST": "127.0.0.1:11434"})
    assert isinstance(backend, OpenAIBackend)
    assert (backend.base_url, backend.api_key, backend.name) == (
        "http://127.0.0.1:11434/v1",
        "ollama",
        "ollama:llama3.2",
    )


def test_completions_endpoint_is_part_of_the_backend_name() -> None:
    # Raw completion and chat answer differently, so they must not share cache entries.
    backend = make_backend("openai-compatible:http://127.0.0.1:8000/v1@m#completions", NO_ENV)
    assert isinstance(backend, OpenAIBackend)
    assert backend.api == "completions"
    assert backend.name == "openai-compatible:http://127.0.0.1:8000/v1@m#completions"


def test_known_openai_models_get_list_prices() -> None:
    backend = make_backend("openai:gpt-4o-mini", {"OPENAI_API_KEY": "k"})
    assert isinstance(backend, OpenAIBackend)
    assert backend.capabilities.pricing == Pricing(0.15, 0.60)


def test_unknown_models_have_no_price() -> None:
    backend = make_backend("openai:gpt-9-ultra", {"OPENAI_API_KEY": "k"})
    assert isinstance(backend, OpenAIBackend)
    assert backend.capabilities.pricing is None


def test_an_explicit_price_overrides_the_table() -> None:
    backend = make_backend("openai:gpt-4o", {"OPENAI_API_KEY": "k"}, pricing=Pricing(1.0, 2.0))
    assert isinstance(backend, OpenAIBackend)
    assert backend.capabilities.pricing == Pricing(1.0, 2.0)


def test_making_a_remote_backend_opens_no_connection() -> None:
    backend = make_backend("openai-compatible:http://127.0.0.1:1/v1@m", NO_ENV)
    assert isinstance(backend, OpenAIBackend)
    assert backend._client is None


class RecordingLocalBackend:
    """Stands in for LocalLlamaBackend: records how it was constructed."""

    def __init__(self, model_path: str | None = None, **kwargs: Any) -> None:
        self.model_path = model_path
        self.kwargs = kwargs


@pytest.fixture
def fake_local(monkeypatch: pytest.MonkeyPatch) -> None:
    """Replace thoughtloom.llm.local so no model is loaded."""
    module = types.ModuleType("thoughtloom.llm.local")
    module.LocalLlamaBackend = RecordingLocalBackend  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "thoughtloom.llm.local", module)


@pytest.mark.usefixtures("fake_local")
def test_local_makes_the_default_embedded_llama_backend() -> None:
    backend = make_backend("local", NO_ENV)
    assert isinstance(backend, RecordingLocalBackend)
    assert backend.model_path is None
    assert backend.kwargs["embedded"].name == DEFAULT_EMBEDDED


@pytest.mark.usefixtures("fake_local")
def test_a_named_local_model_is_passed_to_the_llama_backend() -> None:
    backend = make_backend("local:qwen2.5-coder-0.5b", NO_ENV)
    assert isinstance(backend, RecordingLocalBackend)
    assert backend.kwargs["embedded"] is QWEN_CODER_05B


@pytest.mark.usefixtures("fake_local")
def test_local_path_is_passed_to_the_llama_backend_with_its_form() -> None:
    backend = make_backend("local:/models/qwen.gguf#chat", NO_ENV)
    assert isinstance(backend, RecordingLocalBackend)
    assert (backend.model_path, backend.kwargs["chat"]) == ("/models/qwen.gguf", True)
