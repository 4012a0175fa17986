"""A synthetic task and fake backend shared by the benchmarks (no real model, no files).

Each propose reply lists k numbered thoughts; each value reply is a number. Prompts contain the
path so no two calls share a cache key, and every path is a distinct state, so nothing is
deduplicated: the graph is a full k-ary tree of depth max_depth.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from thoughtloom.llm.fake import ScriptedBackend
from thoughtloom.llm.types import GenerateRequest, Prompt
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
    proposals = "\n".join(f"{i}. step {i}" for i in range(1, k + 1))

    def respond(request: GenerateRequest, index: int) -> str:
        if request.purpose == "generate":
            return proposals
        return str((len(request.prompt.text or "") % 10 + 1) / 10)  # 0.1 .. 1.0, deterministic

    return ScriptedBackend(responder=respond, latency_s=latency_s, name="fake:synthetic", supports_batch=batch)
