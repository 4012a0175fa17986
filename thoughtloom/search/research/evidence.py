"""Gathering a hypothesis's evidence: document passages the judge reads, exact sums, or the model's own claim.

Nothing here changes the graph: a `Findings` is applied by the flow in the order explorations
started. Tool calls go through the run's Toolbox (via AgentEnv, as for agent processors) and
model calls through the flow's `ask`, which routes the evaluator's prompts to its own model.

The final answer's citations are checked by the rule a step's evidence passes (`check_citations`):
the cited passage must be one the run's searches read (so a replay checks it the same, with no
folder), no step may have judged it against the answer, and it must name the answer (a yes/no
answer, which every passage "names", needs a step that judged the passage for it).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...grounding.citations import CitationCheck, CitationStatus, parse_reference
from ...grounding.types import Citation
from ...tasks.base import Query
from ...tasks.research import (
    answer_key,
    claim_query,
    judge_query,
    mentions,
    parse_judgements,
)
from ..agent.kinds import (
    CALC_TOOL,
    DOCS_TOOL,
    arithmetic_claims,
    follow_bridge,
    parse_passages,
    sum_error,
)
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


def cited_passage(ref: str, read: Mapping[str, str]) -> Citation | CitationStatus:
    """The passage a `docs:FILE:LINES` citation names among those read (the lines of a wider one it lies in),
    else NO_SOURCE (no passage of that file was read) or NO_LINES (none read holds those lines)."""
    cited = parse_reference(ref)
    if cited is None:
        return CitationStatus.NO_SOURCE
    status = CitationStatus.NO_SOURCE
    for key, text in read.items():
        have = parse_reference(key)
        if have is None or have.path != cited.path:
            continue
        status = CitationStatus.NO_LINES
        if have.line_start <= cited.line_start and cited.line_end <= have.line_end:
            lines = text.split("\n")[cited.line_start - have.line_start: cited.line_end - have.line_start + 1]
            return Citation(cited.path, cited.line_start, cited.line_end, "\n".join(lines))
    return status


def check_citations(answer: str | None, claim: str, cited: Sequence[str], read: Mapping[str, str],
                    judged: Sequence[Evidence]) -> tuple[CitationCheck, ...]:
    """Each citation of a final answer checked as a step's evidence is: a passage the run read (docs), not judged
    against the answer by a step, naming it (`mentions`); a yes/no or unstated answer, and a tool's result, need
    a step's judgement for it. judged: the evidence of the hypotheses that give the same answer."""
    named = bool(answer) and answer_key(answer) not in ("yes", "no")
    out: list[CitationCheck] = []
    for ref in cited:
        verdicts = [e.supports for e in judged if e.source == ref]
        passage: Citation | None = None
        if ref.startswith("docs:"):
            found = cited_passage(ref, read)
            if isinstance(found, CitationStatus):
                what = "that document" if found is CitationStatus.NO_SOURCE else "those lines"
                out.append(CitationCheck(ref, claim, found, f"no passage of {what} was read in this run"))
                continue
            passage = found
        if verdicts and not any(verdicts):
            status, reason = CitationStatus.CONTRADICTS, "a step judged it against this answer"
        elif named and passage is not None and not mentions(passage.text, answer or ""):
            status, reason = CitationStatus.UNRELATED, f"the passage does not name {answer}"
        elif not named or passage is None:
            ok = any(verdicts)
            status = CitationStatus.SUPPORTS if ok else CitationStatus.UNRELATED
            reason = "a step judged it for this answer" if ok else "no step judged it for this answer"
        else:
            status, reason = CitationStatus.SUPPORTS, f"the passage names {answer}"
        out.append(CitationCheck(ref, claim, status, reason, passage))
    return tuple(out)


class Gatherer:
    """Finds evidence for the question's hypotheses with the granted tools (docs, calc) and the evaluator's prompts."""

    def __init__(self, env: AgentEnv, question: str, passages: int, ask: Ask, bridge_hops: int = 0) -> None:
        self.env = env
        self.question = question
        self.passages = passages
        self.bridge_hops = bridge_hops
        self.ask = ask
        #: Every passage the run's searches returned, by its `docs:FILE:LINES` (what a final citation may name).
        self.read: dict[str, str] = {}

    def _read(self, passages: list[tuple[str, str]]) -> list[tuple[str, str]]:
        self.read.update(passages)
        return passages

    async def question_passages(self, node_id: int) -> tuple[tuple[tuple[str, str], ...], Findings,
                                                              list[dict[str, Any]]]:
        """The question looked up in the documents (the brancher's first material), then, for a bridge question,
        the entity its first passages name looked up with the question's other words (search.agent.kinds
        `follow_bridge`, as the agent does); the calls' records and tokens, and what the hops did."""
        if DOCS_TOOL not in self.env.tools:
            return (), Findings(), []
        # Twice the passages of a hypothesis's search: a question often names two things to look up.
        found = await self.env.call_tool(DOCS_TOOL, {"query": self.question, "limit": 2 * self.passages}, node_id)
        passages = parse_passages(found.output) if found.ok else []
        out = Findings(calls=[found.to_dict()])
        # The brancher names the bridge entity: it is the role that reads the first passages.
        bridge = await follow_bridge(self.env, self.question, passages, self.bridge_hops, node_id,
                                     lambda query: self.ask(query, "hop", node_id, "brancher"), self.passages)
        out.tokens = bridge.tokens
        for _, hop in bridge.found:
            out.calls.append(hop.to_dict())
            have = {ref for ref, _ in passages}
            passages += [p for p in (parse_passages(hop.output) if hop.ok else []) if p[0] not in have]
        return tuple(self._read(passages)), out, bridge.record

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
        passages = self._read(parse_passages(found.output)) if found.ok else []
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
