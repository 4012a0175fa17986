"""The model-access vocabulary: prompts, requests, completions, usage and the Backend protocol."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar, dataclass_transform, runtime_checkable

_T = TypeVar("_T")


# The decorator of the value types every model call builds (Prompt, GenerateRequest, Usage,
# Completion, and the tasks' Query): slotted, compared and hashed by value, and immutable by
# contract rather than frozen. A frozen dataclass sets each field through object.__setattr__,
# which made building these objects about a tenth of a search's cost per thought. Nothing
# assigns to their fields after construction; `dataclasses.replace` makes a changed copy.
# A function marked `dataclass_transform` (not a bare `dataclass(...)` value) so type checkers
# see each class's generated __init__ and check every construction.
@dataclass_transform(eq_default=True, field_specifiers=(field,))
def value_type(cls: type[_T]) -> type[_T]:
    """Make `cls` a slotted, value-hashed dataclass (see above)."""
    return dataclass(slots=True, unsafe_hash=True)(cls)


@dataclass(frozen=True, slots=True)
class Message:
    """One chat message."""

    role: str  # "system" | "user" | "assistant"
    content: str


@value_type
class Prompt:
    """What to ask: completion text, chat messages, or both (the backend uses what it supports).

    Tasks fill both forms when they can: base models (the embedded one) follow few-shot
    completion text, instruction-tuned chat models follow messages.
    """

    text: str | None = None
    messages: tuple[Message, ...] | None = None

    def __post_init__(self) -> None:
        if self.text is None and not self.messages:
            raise ValueError("a Prompt needs text, messages, or both")

    def as_text(self) -> str:
        """The prompt as plain text (messages flattened when there is no text form)."""
        if self.text is not None:
            return self.text
        assert self.messages
        return "\n\n".join(f"{m.role.upper()}: {m.content}" for m in self.messages) + "\n\nASSISTANT:"

    def as_messages(self) -> tuple[Message, ...]:
        """The prompt as chat messages (text wrapped in one user message when there are none)."""
        if self.messages:
            return self.messages
        assert self.text is not None
        return (Message("user", self.text),)


def few_shot_messages(system: str, examples: Sequence[tuple[str, str]], query: str) -> tuple[Message, ...]:
    """A few-shot prompt as chat turns: each example a user turn and the assistant's answer, then the query.

    Instruct models follow examples given as earlier turns of the conversation far better than
    the same examples pasted into one user message (where a 0.5B model answers in free form).
    """
    turns = [Message("system", system)]
    for asked, answered in examples:
        turns += [Message("user", asked), Message("assistant", answered)]
    return (*turns, Message("user", query))


@value_type
class GenerateRequest:
    """One call: n samples of up to max_tokens each."""

    prompt: Prompt
    n: int = 1
    max_tokens: int = 256
    temperature: float = 0.7
    stop: tuple[str, ...] = ()
    seed: int | None = None
    # Which operator asked (generate, evaluate, ...): recorded, never part of the cache key.
    purpose: str = ""
    #: A JSON Schema (canonical JSON text) the reply must match: backends that can constrain
    #: generation (a grammar, an API's structured output) do; the others ignore it.
    schema: str | None = None
    #: Which of the run's models answers (a role name with a model of its own; None: the run's
    #: model). Part of the cache and replay keys when set.
    route: str | None = None
    #: The reply must be one of these texts (a task's valid next steps, a verdict's words).
    #: Backends that can constrain decoding (llama.cpp grammars) do (Capabilities.follows_choices); the
    #: search sends choices only to those and to backends that score them, so a request holds
    #: what goes on the wire. Part of the cache and replay keys when set.
    choices: tuple[str, ...] = ()
    #: Instead of samples, return how likely each of `choices` is as the whole reply: one text,
    #: `choice_text(probabilities)`, computed from the model's distribution in one forward pass.
    #: Only for backends whose capabilities say `scores_choices` (see Capabilities).
    score_choices: bool = False
    #: Report the log-probability of each generated token and of this many alternatives
    #: (OpenAI's `logprobs`); None: none. Such requests are answered by the backend, never the cache.
    logprobs: int | None = None
    #: Which form of the prompt the model reads, pinned by a caller that wrote its stop strings
    #: for that form (an OpenAI-compatible server's two endpoints): "text", the completion text
    #: as it is, never through a chat template; "chat", the messages through the chat template,
    #: the stop strings cutting the reply too. None: the backend's own form (`prompt_form`), where
    #: a chat reply ignores the stop strings, which tasks write for the text form. Backends that
    #: read one form only ignore it.
    form: str | None = None
    #: Function definitions the model may call (llm.tool_calls.definitions_text), sent natively to a backend
    #: whose capabilities say `native_tools`; its reply is then `tool_calls_text(...)`, the calls the model
    #: made and any text. None: no tools on the wire. Part of the cache and replay keys when set.
    tools: str | None = None
    #: Where the reply's text goes as it is written, (sample index, new text), for a backend that
    #: streams (see thoughtloom.llm.streaming); None: nobody watches, nothing is streamed. Not part of
    #: the request's value: never compared, hashed, cached or recorded.
    on_text: Callable[[int, str], None] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError(f"n must be >= 1, got {self.n}")
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if self.score_choices and (not self.choices or self.n != 1):
            raise ValueError("score_choices needs choices and n=1 (one distribution per call)")
        if self.form not in (None, "text", "chat"):
            raise ValueError(f"form must be 'text', 'chat' or None, got {self.form!r}")


@value_type
class Usage:
    """Tokens a call consumed."""

    input_tokens: int = 0
    output_tokens: int = 0
    #: Of output_tokens, how many the model spent reasoning (hidden or thinking text): a part of the
    #: output, not added to it, so a budget counts each token once.
    reasoning_tokens: int = 0

    @property
    def total(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.input_tokens + other.input_tokens, self.output_tokens + other.output_tokens,
                     self.reasoning_tokens + other.reasoning_tokens)


#: Zero usage: what a call that never reached the model used.
NO_USAGE = Usage()


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    """One generated token: its text, its log-probability, and the likeliest alternatives."""

    token: str
    logprob: float
    top: tuple[tuple[str, float], ...] = ()
    #: The token's own bytes: a token can end inside a UTF-8 character, which `token` shows as U+FFFD.
    raw: bytes = b""


@value_type
class Completion:
    """The texts a call returned, one per sample, and what they cost."""

    texts: tuple[str, ...]
    usage: Usage
    model: str = ""
    #: Per sample, per generated token, when the request asked for logprobs.
    logprobs: tuple[tuple[TokenLogprob, ...], ...] | None = None
    #: Per sample: "stop" (a stop string, the end of text or a finished choice) or "length".
    finish_reasons: tuple[str, ...] | None = None


def choice_text(logprobs: dict[str, float]) -> str:
    """The reply text of a score_choices call: each choice's log-probability, as canonical JSON (it caches and replays).

    Log-probabilities, not probabilities: a long choice's probability underflows any fixed
    number of decimals, and only the choices' relative weight matters.
    """
    import json

    return json.dumps({k: round(v, 4) for k, v in logprobs.items()}, ensure_ascii=False, separators=(",", ":"))


def parse_choice_text(text: str, choices: Sequence[str]) -> dict[str, float] | None:
    """The distribution over the choices that a score_choices reply holds (normalized to sum to 1); None if none."""
    import json
    import math

    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    logps = {c: data[c] for c in choices if isinstance(data.get(c), int | float) and math.isfinite(data[c])}
    if not logps:
        return None
    top = max(logps.values())
    weights = {c: math.exp(logps[c] - top) if c in logps else 0.0 for c in choices}
    total = sum(weights.values())
    return {c: w / total for c, w in weights.items()}


@dataclass(frozen=True, slots=True)
class Pricing:
    """Dollars per million tokens (llm.budget prices calls with it)."""

    input_per_mtok: float
    output_per_mtok: float

    def __post_init__(self) -> None:
        for name in ("input_per_mtok", "output_per_mtok"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and 0 <= value < float("inf")):
                raise ValueError(f"price {name} must be a finite number >= 0 (USD per million tokens), got {value!r}")

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        """Dollar cost of so many tokens."""
        return (input_tokens * self.input_per_mtok + output_tokens * self.output_per_mtok) / 1e6


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a backend can do and how it is billed, declared in one place (read with `capabilities_of`).

    Wrappers pass their inner backend's on; a wrapper that changes one (routing to several models,
    a replay) declares its own. The defaults are what any backend can be assumed to do.
    """

    #: Which form of a Prompt the backend sends: "text" (completion text with the request's stop
    #: strings) or "chat" (messages, ending at the end of turn); None: unknown or both. The gateway
    #: bounds an uncounted prompt by that form, and replays match on it.
    prompt_form: str | None = None
    #: Answers `score_choices` requests from the model's own distribution (GenerateRequest.score_choices).
    scores_choices: bool = False
    #: Its samples keep to GenerateRequest.choices (a grammar); a backend without it is sent no choices.
    follows_choices: bool = False
    #: Takes function definitions (GenerateRequest.tools) and answers with the model's tool calls
    #: (an endpoint's `tools` field: OpenAI-compatible chat, Anthropic messages).
    native_tools: bool = False
    #: The reasoning effort it sends a reasoning model ("low", "medium", "high"; None: the server's default).
    reasoning_effort: str | None = None
    #: Tokens a reasoning model may think per sample on top of a request's max_tokens (Anthropic's thinking
    #: budget; 0: none): the gateway reserves and bounds them as output, which they are billed as.
    thinking_tokens: int = 0
    #: Sends replies token by token as they are written.
    streams: bool = False
    #: The model's price (None: unknown, so a dollar cost is unknown, not $0).
    pricing: Pricing | None = None
    #: The price of each role's own model, when roles run on models of their own (see llm.routing).
    route_pricing: tuple[tuple[str, Pricing | None], ...] = ()


#: What a backend that declares nothing is assumed to do.
NO_CAPABILITIES = Capabilities()


def capabilities_of(backend: object) -> Capabilities:
    """A backend's declared capabilities (the defaults for one written before backends declared them)."""
    declared = getattr(backend, "capabilities", None)
    return declared if isinstance(declared, Capabilities) else NO_CAPABILITIES


@runtime_checkable
class Backend(Protocol):
    """A language model that can answer GenerateRequests."""

    #: Identity of the model, used in cache keys, records and manifests.
    name: str
    @property
    def max_concurrency(self) -> int:
        """How many calls the backend can usefully serve at once (the embedded model: 1); an attribute or a property."""
        ...

    @property
    def capabilities(self) -> Capabilities:
        """What the backend can do (see Capabilities); an attribute or a property."""
        ...

    async def generate(self, request: GenerateRequest) -> Completion:
        """Return up to request.n samples and the real token usage, as one request to the model
        (a server that ignores n returns fewer; the gateway asks again for the rest)."""
        ...

    def count_tokens(self, prompt: Prompt) -> int | None:
        """Exact prompt token count when it is cheap to know, else None."""
        ...

    async def aclose(self) -> None:
        """Release connections or model memory."""
        ...


@runtime_checkable
class BatchBackend(Backend, Protocol):
    """A Backend that can also answer several requests in one call (a completions server's
    prompt list, a batched decode). The gateway uses it only when `supports_batch` is True."""

    supports_batch: bool

    async def generate_batch(self, requests: Sequence[GenerateRequest]) -> list[Completion]:
        """One Completion per request, in order, each with its own usage."""
        ...
