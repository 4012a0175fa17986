"""A scripted fake backend for unit tests and benchmarks: answers from rules, with set latency."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from .budget import Pricing
from .errors import ModelError
from .types import Capabilities, Completion, GenerateRequest, Prompt, Usage

Responder = Callable[[GenerateRequest, int], str]


def count_words(text: str) -> int:
    """The fake's token count: whitespace-separated words (at least 1 for any text)."""
    return max(1, len(text.split())) if text else 0


@dataclass
class Rule:
    """If `when` occurs in the prompt, answer with `replies` in turn (the last one repeats)."""

    when: str
    replies: Sequence[str]
    used: int = 0

    def next_reply(self) -> str:
        """The next scripted reply."""
        reply = self.replies[min(self.used, len(self.replies) - 1)]
        self.used += 1
        return reply


@dataclass
class ScriptedBackend:
    """A Backend whose answers are scripted: by rules matched on the prompt, or by a function.

    Rules are tried newest first, so a test can add a specific rule over a general one.
    `failures` makes the first calls raise the given exceptions (to test retries).
    """

    rules: list[Rule] = field(default_factory=list)
    responder: Responder | None = None
    default: str | None = None
    latency_s: float = 0.0
    name: str = "fake:scripted"
    max_concurrency: int = 1_000_000
    failures: list[Exception] = field(default_factory=list)
    #: Answer several requests in one generate_batch call, as a batching server would.
    supports_batch: bool = False
    #: Take score_choices requests (the rules or responder then write `choice_text(...)` replies).
    scores_choices: bool = False
    #: Be sent the choices of sampled requests (the rules or responder then keep to them).
    follows_choices: bool = False
    #: Be sent function definitions (the rules or responder then write `tool_calls_text(...)` replies).
    native_tools: bool = False
    pricing: Pricing | None = None
    calls: list[GenerateRequest] = field(default_factory=list)
    batch_sizes: list[int] = field(default_factory=list)
    in_flight: int = 0
    peak_in_flight: int = 0

    @property
    def capabilities(self) -> Capabilities:
        """What the fields above declare (a test may change them before it builds a gateway)."""
        return Capabilities(scores_choices=self.scores_choices, follows_choices=self.follows_choices,
                            native_tools=self.native_tools, pricing=self.pricing)

    def on(self, when: str, *replies: str) -> ScriptedBackend:
        """Answer prompts containing `when` with these replies in turn."""
        self.rules.append(Rule(when, replies))
        return self

    def _reply(self, request: GenerateRequest, index: int) -> str:
        text = request.prompt.as_text()
        for rule in reversed(self.rules):
            if rule.when in text:
                return rule.next_reply()
        if self.responder is not None:
            return self.responder(request, index)
        if self.default is not None:
            return self.default
        raise ModelError(f"scripted backend has no reply for prompt ending {text[-80:]!r}")

    async def generate(self, request: GenerateRequest) -> Completion:
        """Return n scripted samples after the configured latency."""
        return (await self._serve([request]))[0]

    async def generate_batch(self, requests: Sequence[GenerateRequest]) -> list[Completion]:
        """Answer several requests after one latency (only used when supports_batch is set)."""
        self.batch_sizes.append(len(requests))
        return await self._serve(requests)

    async def _serve(self, requests: Sequence[GenerateRequest]) -> list[Completion]:
        self.calls.extend(requests)
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        try:
            if self.latency_s:
                await asyncio.sleep(self.latency_s)
            if self.failures:
                raise self.failures.pop(0)
            out = []
            for r in requests:
                texts = tuple([self._reply(r, i) for i in range(r.n)])
                used = 0
                for t in texts:
                    used += min(count_words(t), r.max_tokens)
                out.append(Completion(texts, Usage(count_words(r.prompt.as_text()), used), self.name))
        finally:
            self.in_flight -= 1
        return out

    def count_tokens(self, prompt: Prompt) -> int:
        """Prompt tokens as the fake counts them (words)."""
        return count_words(prompt.as_text())

    async def aclose(self) -> None:
        """Nothing to release."""
