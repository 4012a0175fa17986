"""Gathering a hypothesis's evidence: document passages the judge reads, exact sums, or the model's own claim.

Nothing here changes the graph: a `Findings` is applied by the flow in the order explorations
started. Tool calls go through the run's Toolbox (via AgentEnv, as for agent processors) and
model calls through the flow's `ask`, which routes the evaluator's prompts to its own model.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from ...tasks.base import Query
from ...tasks.research import (
    answer_key,
    claim_query,
    judge_query,
    mentions,
    parse_judgements,
)
from ..agent.kinds import CALC_TOOL, DOCS_TOOL, arithmetic_claims, sum_error
from ..agent.processors import AgentEnv
from .records import MODEL_SOURCE, Evidence, Hypothesis

#: Characters of a passage kept as a piece of evidence.
EVIDENCE_CHARS = 300

#: (query, purpose, node id, role) -> (reply, tokens), or None when no reply came.
Ask = Callable[[Query, str, int, str], Awaitable[tuple[str, int] | None]]


@dataclass(slots=True)
class Findings:
    """One exploration's outcome, before it is applied: evidence, and what it cost."""

    evidence: list[Evidence] = field(default_factory=list)
    tokens: int = 0
    calls: list[dict[str, Any]] = field(default_factory=list)


def parse_passages(output: str) -> list[tuple[str, str]]:
    """The docs tool's answer as (docs:FILE:LINES, text) pairs."""
    out = []
    for chunk in output.strip().split("\n\n"):
        head, _, text = chunk.partition("\n")
        number, dot, ref = head.partition(". ")
        if dot and number.strip().isdigit() and ref.strip() and text.strip():
            out.append((f"docs:{ref.strip()}", text.strip()))
    return out


class Gatherer:
    """Finds evidence for the question's hypotheses with the granted tools (docs, calc) and the evaluator's prompts."""

    def __init__(self, env: AgentEnv, question: str, passages: int, ask: Ask) -> None:
        self.env = env
        self.question = question
        self.passages = passages
        self.ask = ask

    async def question_passages(self, node_id: int) -> tuple[tuple[tuple[str, str], ...], dict[str, Any] | None]:
        """The question looked up in the documents (the brancher's first material), and the call's record."""
        if DOCS_TOOL not in self.env.tools:
            return (), None
        # Twice the passages of a hypothesis's search: a question often names two things to look up.
        found = await self.env.call_tool(DOCS_TOOL, {"query": self.question, "limit": 2 * self.passages}, node_id)
        return (tuple(parse_passages(found.output)) if found.ok else ()), found.to_dict()

    async def gather(self, h: Hypothesis) -> Findings:
        """Evidence for and against one hypothesis: its sums checked, passages judged, else one claim of the model's."""
        out = Findings()
        await self._sums(h, out)
        if DOCS_TOOL in self.env.tools:
            await self._documents(h, out)
        elif not out.evidence:
            await self._claim(h, out)
        return out

    async def _sums(self, h: Hypothesis, out: Findings) -> None:
        if CALC_TOOL not in self.env.tools:
            return
        # The reason after the answer: "12 ships - 3 x 4 = 12" must not read as 12 minus 3 x 4.
        reason = h.content[len(h.answer):] if h.answer and h.content.startswith(h.answer) else h.content
        for expression, stated in arithmetic_claims(reason):
            r = await self.env.call_tool(CALC_TOOL, {"expression": f"{expression} = {stated}"}, h.id)
            out.calls.append(r.to_dict())
            why = sum_error(expression, stated)
            out.evidence.append(Evidence(why or f"{expression} = {stated} is right", why is None, 1.0,
                                         f"tool:{CALC_TOOL}"))

    async def _documents(self, h: Hypothesis, out: Findings) -> None:
        # Yes and no add nothing to a search; an entity answer's words find its passages.
        query = self.question if answer_key(h.answer) in ("yes", "no") else f"{self.question} {h.content}"
        found = await self.env.call_tool(DOCS_TOOL, {"query": query, "limit": self.passages}, h.id)
        out.calls.append(found.to_dict())
        passages = parse_passages(found.output) if found.ok else []
        if not passages:
            return
        got = await self.ask(judge_query(self.question, h.content, passages), "judge", h.id, "evaluator")
        if got is None:
            return
        reply, out.tokens = got
        for j in parse_judgements(reply, len(passages)):
            ref, text = passages[j.index - 1]
            # A passage cannot support a name it does not mention (a small judge says it does).
            if j.verdict == "unrelated" or j.strength <= 0 or (
                    j.verdict == "supports" and h.answer and not mentions(text, h.answer)):
                continue
            # What the passage says is the evidence; the judge's reason is kept beside it.
            out.evidence.append(Evidence(" ".join(text.split())[:EVIDENCE_CHARS], j.verdict == "supports",
                                         j.strength, ref, why=j.why))

    async def _claim(self, h: Hypothesis, out: Findings) -> None:
        got = await self.ask(claim_query(self.question, h.content), "claim", h.id, "evaluator")
        if got is None:
            return
        reply, out.tokens = got
        for j in parse_judgements(reply, 1)[:1]:
            if j.verdict != "unrelated" and j.strength > 0 and j.why:
                out.evidence.append(Evidence(j.why, j.verdict == "supports", j.strength, MODEL_SOURCE))
