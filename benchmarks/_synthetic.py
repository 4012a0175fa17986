"""A synthetic task and fake backend shared by the benchmarks (no real model, no files).

Each propose reply lists k numbered thoughts; each value reply is a number. Prompts contain the
path so no two calls share a cache key, and every path is a distinct state, so nothing is
deduplicated: the graph is a full k-ary tree of depth max_depth.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from thoughtloom.llm.fake import ScriptedBackend
from thoughtloom.llm.types import Completion, GenerateRequest, Prompt, Usage
from thoughtloom.tasks.base import Query, Task


class SyntheticTask(Task[str]):
    """k numbered thoughts per propose call, one number per value call, no goals."""

    name = "synthetic"
    programmatic_answer = True  # no synthesis call

    def propose(self, problem: str, steps: Sequence[str], k: int) -> Query:
        return Query(Prompt(text="propose " + "/".join(steps)), max_tokens=64)

    def value(self, problem: str, steps: Sequence[str]) -> Query:
        return Query(Prompt(text="value " + "/".join(steps)), max_tokens=4)

    def parse_value(self, problem: str, steps: Sequence[str], texts: Sequence[str]) -> float:
        return sum(float(t) for t in texts) / len(texts)

    def state_key(self, problem: str, steps: Sequence[str]) -> Hashable:
        return tuple(steps)  # unique per path: siblings differ, so no duplicates are merged


def synthetic_backend(k: int, latency_s: float = 0.0, batch: bool = False) -> ScriptedBackend:
    """A ScriptedBackend that proposes k numbered thoughts and values by prompt length."""
    proposals = proposal_text(k)

    def respond(request: GenerateRequest, index: int) -> str:
        if request.purpose == "generate":
            return proposals
        return value_text(request)

    return ScriptedBackend(responder=respond, latency_s=latency_s, name="fake:synthetic", supports_batch=batch)


def proposal_text(k: int) -> str:
    """The reply to every propose call: k numbered steps."""
    return "\n".join(f"{i}. step {i}" for i in range(1, k + 1))


def value_text(request: GenerateRequest) -> str:
    """The reply to a value call: 0.1 .. 1.0, from the prompt's length (deterministic)."""
    return str((len(request.prompt.text or "") % 10 + 1) / 10)


class SyntheticBackend:
    """The cheapest honest zero-latency model: the same replies as synthetic_backend, no test hooks.

    ScriptedBackend matches rules, keeps every request and counts words, which costs more per
    call than the engine itself; this backend only builds the reply and a token count, so a
    benchmark through it measures the engine. Token counts: prompt bytes / 4, reply words.
    """

    name = "fake:synthetic-lean"
    max_concurrency = 1_000_000

    def __init__(self, k: int, batch: bool = False) -> None:
        self.supports_batch = batch
        self.calls = 0  # requests answered (a batch counts each of its requests)
        self._proposals = (proposal_text(k),)
        self._proposal_tokens = 3 * k

    def _answer(self, request: GenerateRequest) -> Completion:
        self.calls += 1
        text = request.prompt.text or ""
        if request.purpose == "generate":
            return Completion(self._proposals * request.n, Usage(len(text) // 4, self._proposal_tokens * request.n), self.name)
        return Completion((value_text(request),) * request.n, Usage(len(text) // 4, request.n), self.name)

    async def generate(self, request: GenerateRequest) -> Completion:
        """One reply per sample, at once."""
        return self._answer(request)

    async def generate_batch(self, requests: Sequence[GenerateRequest]) -> list[Completion]:
        """Every request of the batch, at once."""
        return [self._answer(r) for r in requests]

    def count_tokens(self, prompt: Prompt) -> int | None:
        """Prompt tokens as this backend counts them."""
        return len(prompt.text or "") // 4

    async def aclose(self) -> None:
        """Nothing to release."""
