"""Sibling values go out as one batched call when the backend batches, with the same outcome."""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from thoughtloom.llm.budget import BudgetLimits
from thoughtloom.llm.fake import ScriptedBackend
from thoughtloom.llm.gateway import Gateway
from thoughtloom.llm.types import GenerateRequest, Prompt
from thoughtloom.search.config import SearchConfig
from thoughtloom.search.engine import search
from thoughtloom.tasks.base import Query, Task


class Numbered(Task[str]):
    """Three numbered thoughts per propose call; a thought's value is fixed by its text."""

    name = "numbered"

    def propose(self, problem: str, steps: Sequence[str], k: int) -> Query:
        return Query(Prompt(text="propose " + "/".join(steps)), max_tokens=16)

    def value(self, problem: str, steps: Sequence[str]) -> Query:
        return Query(Prompt(text="value " + "/".join(steps)), max_tokens=4)

    def parse_value(self, problem: str, steps: Sequence[str], texts: Sequence[str]) -> float:
        return sum(float(t) for t in texts) / len(texts)

    def state_key(self, problem: str, steps: Sequence[str]) -> Hashable:
        return tuple(steps)


def respond(request: GenerateRequest, index: int) -> str:
    text = request.prompt.text or ""
    if text.startswith("propose"):
        return "1. a\n2. bb\n3. ccc"
    return f"{len(text) % 7 / 10:g}"


def backend(batch: bool) -> ScriptedBackend:
    return ScriptedBackend(responder=respond, supports_batch=batch)


CONFIG = SearchConfig(strategy="bfs", breadth=3, beam=2, max_depth=3, value_samples=1)


async def test_siblings_are_valued_in_one_batched_call() -> None:
    fake = backend(batch=True)
    result = await search(Numbered(), "p", Gateway(fake), CONFIG)
    assert fake.batch_sizes and set(fake.batch_sizes) == {3}
    assert result.usage.calls == len(fake.calls)


async def test_batching_changes_neither_the_graph_nor_the_answer() -> None:
    plain = await search(Numbered(), "p", Gateway(backend(batch=False)), CONFIG)
    batched = await search(Numbered(), "p", Gateway(backend(batch=True)), CONFIG)
    assert [(n.content, n.score, n.status) for n in batched.graph] == [(n.content, n.score, n.status) for n in plain.graph]
    assert batched.answer == plain.answer and batched.usage == plain.usage


async def test_a_batch_that_does_not_fit_the_budget_falls_back_to_single_calls() -> None:
    fake = backend(batch=True)
    gateway = Gateway(fake, BudgetLimits(tokens=22))
    # The propose call spends 7 (1 prompt + 6 output words); three values need 3 x 7 = 21 > 15 left,
    # while the single value calls, 4 tokens each, fit.
    result = await search(Numbered(), "p", gateway, CONFIG)
    assert fake.batch_sizes == []
    refused = [r for r in gateway.records if r.error and "a batch of 3 calls" in r.error]
    single_values = [r for r in gateway.records if r.purpose == "evaluate" and r.error is None]
    assert len(refused) == 3 and len(single_values) == 3
    assert result.termination_reason == "budget_tokens"
    assert gateway.budget.spent.total <= 22
