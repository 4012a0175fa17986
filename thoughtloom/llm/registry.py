"""Choose a model with one string (the CLI's --model).

Model specs:

    local                                    the default embedded model
    local:NAME                               a named embedded model (`loom models` lists them)
    local:/path/to/model.gguf                any GGUF file, run in-process by llama.cpp; chat
                                             when its metadata names an instruct model with a
                                             chat template, else completion text (#chat or
                                             #completions at the end decides)
    openai:MODEL                             api.openai.com, or OPENAI_BASE_URL when set;
                                             key from OPENAI_API_KEY
    openai-compatible:BASE_URL@MODEL         any OpenAI-compatible server (vLLM, SGLang,
                                             llama.cpp server); key from THOUGHTLOOM_API_KEY,
                                             else OPENAI_API_KEY, else none
    vllm:BASE_URL@MODEL                      a vLLM server: as openai-compatible, with reply
                                             schemas sent as vLLM's guided_json on both endpoints
    ollama:MODEL                             Ollama at OLLAMA_HOST (default http://127.0.0.1:11434)
                                             reply schemas as response_format on chat (Ollama's
                                             `format`); with #completions, as `format` on its
                                             native /api/generate
    anthropic:MODEL                          Anthropic's Messages API (ANTHROPIC_BASE_URL when set);
                                             key from ANTHROPIC_API_KEY; needs the anthropic extra

    OpenAI-style remote specs take an optional suffix choosing the endpoint: #chat (the default)
    or #completions (raw text completion, for base models), e.g.
    openai-compatible:http://127.0.0.1:8000/v1@Qwen2.5-0.5B#completions

BASE_URL must start with http:// or https:// and usually ends in /v1.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypedDict
from urllib.parse import urlsplit

from .anthropic_backend import AnthropicBackend
from .budget import FREE, Pricing
from .errors import ModelConfigError
from .models import DEFAULT_EMBEDDED, EMBEDDED_MODELS, EmbeddedModel, find_model
from .openai_backend import OpenAIBackend, SchemaParam
from .streaming import stream_setting
from .threads import threads_setting
from .types import Backend

if TYPE_CHECKING:
    from .local import LocalLlamaBackend

DEFAULT_SPEC = "local"
OPENAI_BASE_URL = "https://api.openai.com/v1"
ANTHROPIC_BASE_URL = "https://api.anthropic.com"
DEFAULT_OLLAMA_HOST = "http://127.0.0.1:11434"
# Servers that need no key still want the Authorization header, and the SDK refuses an empty key.
DUMMY_API_KEY = "none"
# Ollama ignores the key, but its docs use this one.
OLLAMA_API_KEY = "ollama"

ACCEPTED_FORMS = (
    "local, local:NAME, local:/path/to/model.gguf, openai:MODEL, openai-compatible:BASE_URL@MODEL, "
    "vllm:BASE_URL@MODEL, ollama:MODEL, anthropic:MODEL (OpenAI-style forms may end in #chat or #completions)"
)

_GPT_4O_MINI = Pricing(0.15, 0.60)
_GPT_4O = Pricing(2.50, 10.00)
_GPT_41_MINI = Pricing(0.40, 1.60)
_GPT_41 = Pricing(2.00, 8.00)

#: Dollars per million tokens (input, output) for a few well-known OpenAI models. Names match
#: exactly: snapshots are listed one by one because some are priced differently from their
#: alias (gpt-4o-2024-05-13 costs more than gpt-4o), and a wrong price is worse than none.
KNOWN_PRICES: dict[str, Pricing] = {
    "gpt-4o-mini": _GPT_4O_MINI,
    "gpt-4o-mini-2024-07-18": _GPT_4O_MINI,
    "gpt-4o": _GPT_4O,
    "gpt-4o-2024-08-06": _GPT_4O,
    "gpt-4o-2024-11-20": _GPT_4O,
    "gpt-4.1-mini": _GPT_41_MINI,
    "gpt-4.1-mini-2025-04-14": _GPT_41_MINI,
    "gpt-4.1": _GPT_41,
    "gpt-4.1-2025-04-14": _GPT_41,
}


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A parsed model spec: which provider, which model, where, and through which endpoint."""

    provider: str  # "local" | "openai" | "openai-compatible" | "vllm" | "ollama" | "anthropic"
    model: str  # local: a named embedded model or a GGUF path; remote: the model name
    base_url: str | None = None  # remote providers only
    api: str | None = None  # "chat" | "completions"; None for a local file that decides from its metadata

    @property
    def is_local(self) -> bool:
        """Whether the model runs in-process."""
        return self.provider == "local"

    @property
    def embedded(self) -> EmbeddedModel | None:
        """The named embedded model this spec runs, or None (a file or a remote model)."""
        return find_model(self.model) if self.provider == "local" else None

    @property
    def identity(self) -> str:
        """The backend name recorded in caches and manifests; includes the endpoint when not chat."""
        if self.provider == "local":
            embedded = self.embedded
            if embedded is not None:
                return f"local:{embedded.name}"
            return f"local:{self.model}" if self.api is None else f"local:{self.model}#{self.api}"
        if self.provider == "vllm":
            core = f"vllm:{self.base_url}@{self.model}"
        elif self.provider == "openai-compatible" or (self.provider == "openai" and self.base_url != OPENAI_BASE_URL):
            # Another server answers under OpenAI's model names (OPENAI_BASE_URL): its replies
            # must not share a cache or a record with api.openai.com's.
            core = f"openai-compatible:{self.base_url}@{self.model}"
        else:
            core = f"{self.provider}:{self.model}"
        # Chat templates and raw completion give different outputs, so they must not share a cache.
        return core if self.api == "chat" else f"{core}#{self.api}"


class _Timeout(TypedDict, total=False):
    """A remote backend's timeout when one is given (else the backend's own default)."""

    timeout_s: float


#: How a provider's server takes a JSON Schema for the reply (OpenAI's response_format by default).
_SCHEMA_PARAMS: dict[str, SchemaParam] = {"vllm": "guided_json", "ollama": "ollama"}


def _bad(spec: str, why: str) -> ModelConfigError:
    return ModelConfigError(f"bad model spec {spec!r}: {why}; accepted forms: {ACCEPTED_FORMS}")


def _split_api(spec: str, rest: str) -> tuple[str, str]:
    """Split an optional #chat / #completions suffix off a remote spec's body."""
    body, hash_sign, suffix = rest.rpartition("#")
    if not hash_sign:
        return rest, "chat"
    if suffix not in ("chat", "completions"):
        raise _bad(spec, f"unknown endpoint suffix #{suffix} (use #chat or #completions)")
    return body, suffix


def _check_base_url(spec: str, url: str) -> str:
    """The base URL without a trailing slash, if it is an http(s) URL with a host."""
    if not url.startswith(("http://", "https://")):
        raise _bad(spec, f"base URL {url!r} must start with http:// or https://")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number in 0..65535
    except ValueError as exc:  # e.g. "Invalid IPv6 URL", "Port out of range 0-65535"
        raise _bad(spec, f"base URL {url!r} is malformed ({exc})") from None
    if not parts.hostname:
        raise _bad(spec, f"base URL {url!r} has no host")
    return url.rstrip("/")


def _ollama_base_url(host: str) -> str:
    """Ollama's OpenAI-compatible base URL from an OLLAMA_HOST value such as 127.0.0.1:11434."""
    host = host.strip().rstrip("/")
    if "://" not in host:
        # As in Ollama's own client: a bare host means http on port 11434 unless one is given;
        # with an explicit scheme the scheme's default port applies.
        parts = urlsplit(f"http://{host}")
        port = "" if parts.port is not None else ":11434"
        host = f"http://{parts.netloc}{port}{parts.path}"
    return host if host.endswith("/v1") else f"{host}/v1"


def parse_model_spec(spec: str, env: Mapping[str, str] | None = None) -> ModelSpec:
    """Parse a model spec string (see the module docstring for the syntax)."""
    env = os.environ if env is None else env
    text = spec.strip()
    if text == "local":
        return _embedded_spec(DEFAULT_EMBEDDED)
    provider, colon, rest = text.partition(":")
    if not colon:
        raise _bad(spec, "unknown model")
    if provider == "local":
        return _local_spec(spec, rest)
    if provider == "openai":
        model, api = _split_api(spec, rest)
        if not model:
            raise _bad(spec, "openai: needs a model name, e.g. openai:gpt-4o-mini")
        # The variable the OpenAI SDK and most tools honour: a proxy or gateway in front of OpenAI.
        base_url = env.get("OPENAI_BASE_URL") or OPENAI_BASE_URL
        return ModelSpec("openai", model, _check_base_url(spec, base_url), api)
    if provider in ("openai-compatible", "vllm"):
        body, api = _split_api(spec, rest)
        # The last '@' separates the model, so a base URL may still carry user@host.
        base_url, at, model = body.rpartition("@")
        if not at or not base_url or not model:
            raise _bad(spec, f"{provider}: needs BASE_URL@MODEL, e.g. http://127.0.0.1:8000/v1@Qwen2.5-0.5B")
        return ModelSpec(provider, model, _check_base_url(spec, base_url), api)
    if provider == "ollama":
        model, api = _split_api(spec, rest)
        if not model:
            raise _bad(spec, "ollama: needs a model name, e.g. ollama:llama3.2")
        base_url = _ollama_base_url(env.get("OLLAMA_HOST") or DEFAULT_OLLAMA_HOST)
        return ModelSpec("ollama", model, _check_base_url(spec, base_url), api)
    if provider == "anthropic":
        model, api = _split_api(spec, rest)
        if not model:
            raise _bad(spec, "anthropic: needs a model name, e.g. anthropic:claude-haiku-4-5")
        if api != "chat":
            raise _bad(spec, "anthropic: has only the chat (Messages) endpoint")
        base_url = env.get("ANTHROPIC_BASE_URL") or ANTHROPIC_BASE_URL
        return ModelSpec("anthropic", model, _check_base_url(spec, base_url), api)
    raise _bad(spec, f"unknown provider {provider!r}")


def _embedded_spec(name: str) -> ModelSpec:
    model = find_model(name)
    assert model is not None
    return ModelSpec("local", model.name, None, "chat" if model.chat else "completions")


def _local_spec(spec: str, rest: str) -> ModelSpec:
    """local:NAME, or local:PATH with an optional #chat / #completions (anything else after '#' is the path's)."""
    if not rest:
        raise _bad(spec, "local: needs a model name or the path of a .gguf file")
    if find_model(rest) is not None:
        return _embedded_spec(rest)
    path, hash_sign, suffix = rest.rpartition("#")
    api = None
    if hash_sign and suffix in ("chat", "completions") and path:
        rest, api = path, suffix
    if "/" not in rest and not rest.endswith(".gguf"):
        names = ", ".join(EMBEDDED_MODELS)
        raise _bad(spec, f"no embedded model is named {rest!r} (named ones: {names}; a file needs its path)")
    return ModelSpec("local", rest, None, api)


def known_pricing(spec: ModelSpec) -> Pricing | None:
    """The price of a model: free for an embedded one, the list price of a known OpenAI model at
    api.openai.com, or None (cost unknown) for anything else."""
    if spec.is_local:
        return FREE
    if spec.provider != "openai" or spec.base_url != OPENAI_BASE_URL:
        # Behind OPENAI_BASE_URL a proxy may bill differently or serve another model under the name.
        return None
    return KNOWN_PRICES.get(spec.model)


def _api_key(spec: ModelSpec, env: Mapping[str, str]) -> tuple[str, str | None]:
    """The key for a remote spec and the environment variable it came from."""
    if spec.provider == "openai":
        key = env.get("OPENAI_API_KEY")
        if not key:
            raise ModelConfigError("OPENAI_API_KEY is not set; export it or choose another --model")
        return key, "OPENAI_API_KEY"
    if spec.provider == "ollama":
        return OLLAMA_API_KEY, None
    if spec.provider == "anthropic":
        key = env.get("ANTHROPIC_API_KEY")
        if not key:
            raise ModelConfigError("ANTHROPIC_API_KEY is not set; export it or choose another --model")
        return key, "ANTHROPIC_API_KEY"
    for var in ("THOUGHTLOOM_API_KEY", "OPENAI_API_KEY"):
        if env.get(var):
            return env[var], var
    return DUMMY_API_KEY, "THOUGHTLOOM_API_KEY"


REASONING_EFFORTS = ("low", "medium", "high")
#: Anthropic's smallest extended-thinking budget.
MIN_THINKING_TOKENS = 1024


def check_reasoning(spec: ModelSpec, reasoning_effort: str | None, thinking_tokens: int | None) -> None:
    """ModelConfigError (one line) unless the model's endpoint takes the reasoning settings given.

    An embedded model refuses them rather than ignoring them: llama.cpp has neither control, and a run
    that silently spent no effort on reasoning, or a thinking budget that bounds nothing, would be
    recorded as though it had.
    """
    if reasoning_effort is None and thinking_tokens is None:
        return
    given = "--reasoning-effort" if reasoning_effort is not None else "--thinking-tokens"
    if spec.is_local:
        raise ModelConfigError(f"{given} is for remote reasoning models; the embedded model ({spec.identity}) "
                               "takes neither it nor a thinking budget: drop it or choose another --model")
    if reasoning_effort is not None:
        if reasoning_effort not in REASONING_EFFORTS:
            raise ModelConfigError(f"--reasoning-effort {reasoning_effort!r}: use one of "
                                   f"{', '.join(REASONING_EFFORTS)}")
        if spec.provider == "anthropic":
            raise ModelConfigError("--reasoning-effort is for OpenAI-compatible models; Anthropic's take a thinking "
                                   "budget: --thinking-tokens N")
        if spec.api != "chat":
            raise ModelConfigError(f"--reasoning-effort is sent on the chat endpoint; {spec.identity} uses "
                                   "#completions")
    if thinking_tokens is not None:
        if spec.provider != "anthropic":
            raise ModelConfigError(f"--thinking-tokens is for anthropic: models; {spec.identity} takes "
                                   "--reasoning-effort low|medium|high instead")
        if not isinstance(thinking_tokens, int) or thinking_tokens < MIN_THINKING_TOKENS:
            raise ModelConfigError(f"--thinking-tokens {thinking_tokens}: Anthropic's thinking budget is at least "
                                   f"{MIN_THINKING_TOKENS} tokens")


#: How the agent's tool calls reach a model: `auto` sends them as function definitions where that is known to work
#: (OpenAI's own API, Anthropic's), `native` wherever the endpoint has a `tools` field, `text` never (a JSON reply).
TOOL_CALLING = ("auto", "native", "text")


def native_tools(spec: ModelSpec, tool_calling: str) -> bool:
    """Whether the model's backend sends tools as function definitions under `tool_calling` (see TOOL_CALLING).

    OpenAI-compatible servers take the `tools` field only when set up for it (llama.cpp's with --jinja,
    vLLM's with a tool-call parser, Ollama's for some models), so `auto` keeps the text protocol there.
    ModelConfigError (one line) for an unknown mode, or `native` for a model whose endpoint has no such field.
    """
    if tool_calling not in TOOL_CALLING:
        raise ModelConfigError(f"--tool-calling {tool_calling!r}: use one of {', '.join(TOOL_CALLING)}")
    takes = not spec.is_local and spec.api == "chat"
    if tool_calling == "native" and not takes:
        raise ModelConfigError(f"--tool-calling native: {spec.identity} has no function-calling field (the embedded "
                               "model and #completions endpoints read tools as text); use --tool-calling text or auto")
    if tool_calling == "auto":
        return takes and (spec.provider == "anthropic"
                          or (spec.provider == "openai" and spec.base_url == OPENAI_BASE_URL))
    return tool_calling == "native"


def make_backend(
    spec: str,
    env: Mapping[str, str] | None = None,
    *,
    pricing: Pricing | None = None,
    timeout_s: float | None = None,
    threads: int | str | None = None,
    progress: Callable[[str], None] | None = None,
    reasoning_effort: str | None = None,
    thinking_tokens: int | None = None,
    stream: bool | None = None,
    tool_calling: str = "auto",
) -> Backend:
    """Build the Backend a model spec names; raises ModelConfigError for bad specs or missing keys.

    pricing: the model's price when the caller knows it (else the known price list's, if any);
    timeout_s: how long one request to a remote model may take (None: the backend's default; an
    embedded model has no request to time out). threads: CPU threads an embedded model computes
    with, a number or "auto" (None: $THOUGHTLOOM_THREADS, else auto: following the load; a remote
    model ignores it). progress receives one-line messages about slow first-use steps (assembling
    the local model). reasoning_effort / thinking_tokens: a reasoning model's controls, for the
    endpoints that take them (see check_reasoning). stream: whether a reply someone watches is streamed
    (None: $THOUGHTLOOM_STREAM, else on; see thoughtloom.llm.streaming). tool_calling: how the agent's
    tool calls reach the model (see native_tools).
    """
    env = os.environ if env is None else env
    parsed = parse_model_spec(spec, env)
    check_reasoning(parsed, reasoning_effort, thinking_tokens)
    streams = stream_setting(stream, env)
    functions = native_tools(parsed, tool_calling)
    if parsed.is_local:
        return local_backend(parsed, n_threads=threads_setting(threads, env), progress=progress, stream=streams)
    assert parsed.api in ("chat", "completions")
    key, key_env = _api_key(parsed, env)
    timeout: _Timeout = {"timeout_s": timeout_s} if timeout_s is not None else {}
    if parsed.provider == "anthropic":
        return AnthropicBackend(model=parsed.model, api_key=key, base_url=parsed.base_url,
                                pricing=pricing if pricing is not None else known_pricing(parsed),
                                name=parsed.identity, key_env=key_env, thinking_tokens=thinking_tokens, stream=streams,
                                native_tools=functions, **timeout)
    return OpenAIBackend(
        model=parsed.model,
        base_url=parsed.base_url,
        api_key=key,
        api="chat" if parsed.api == "chat" else "completions",
        pricing=pricing if pricing is not None else known_pricing(parsed),
        name=parsed.identity,
        key_env=key_env,
        # Ollama's completions endpoint takes one prompt per request.
        batch=parsed.provider != "ollama",
        schema_param=_SCHEMA_PARAMS.get(parsed.provider, "response_format"),
        reasoning_effort=reasoning_effort,
        stream=streams,
        native_tools=functions,
        **timeout,
    )


def local_backend(
    spec: ModelSpec,
    *,
    n_ctx: int | None = None,
    n_threads: int | None = None,
    progress: Callable[[str], None] | None = None,
    stream: bool = True,
) -> LocalLlamaBackend:
    """The in-process backend a local spec names (n_ctx: None for the model's window; n_threads: None follows the
    load; stream: hand a watched request its tokens' text as they are decoded)."""
    if not spec.is_local:
        raise ModelConfigError(f"{spec.identity} is not an embedded model (local, local:NAME or local:PATH)")
    # Deferred: llama.cpp bindings are an optional extra and slow to import.
    from .local import LocalLlamaBackend

    embedded = spec.embedded
    if embedded is not None:
        return LocalLlamaBackend(embedded=embedded, n_ctx=n_ctx, n_threads=n_threads, progress=progress, stream=stream)
    chat = None if spec.api is None else spec.api == "chat"
    return LocalLlamaBackend(model_path=os.path.expanduser(spec.model), chat=chat, n_ctx=n_ctx, n_threads=n_threads,
                             progress=progress, stream=stream)
