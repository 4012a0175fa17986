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

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from ...grounding.citations import CitationCheck, CitationStatus, Reference, parse_reference
from ...grounding.types import Citation
from ...tasks.base import Query
from ...tasks.comparison import Comparison, compare, fact_query, fact_value
from ...tasks.research import (
    NO_PASSAGE,
    answer_key,
    claim_query,
    contains_span,
    contrast,
    contrast_query,
    contrast_verdict,
    judge_query,
    mentions,
    parse_judgements,
    question_names,
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

logger = logging.getLogger(__name__)

#: Characters of a passage kept as a piece of evidence.
EVIDENCE_CHARS = 300
#: How strongly an entity's fact, compared exactly with the other's, weighs for or against a hypothesis.
COMPARED_STRENGTH = 0.9
#: How the judge reads passages: "contrastive" (the answers' log-probabilities given the passage, in one scoring
#: pass) where the backend scores choices, else "verdicts" (the model writes SUPPORTS / CONTRADICTS per passage).
CONTRASTIVE, VERDICTS = "contrastive", "verdicts"

#: (query, purpose, node id, role) -> (reply, tokens), or None when no reply came.
Ask = Callable[[Query, str, int, str], Awaitable[tuple[str, int] | None]]


@dataclass(slots=True)
class Findings:
    """One exploration's outcome, before it is applied: evidence, and what it cost."""

    evidence: list[Evidence] = field(default_factory=list)
    tokens: int = 0
    calls: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Fact:
    """One entity's fact for a comparison question: the model's words, the value compared, and the passage."""

    entity: str
    said: str
    value: Any
    source: str | None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready record (the value as text)."""
        return {"entity": self.entity, "said": self.said, "value": None if self.value is None else str(self.value),
                "source": self.source}


@dataclass(frozen=True, slots=True)
class Compared:
    """A comparison question settled in code: each entity's fact and the answer they give (None: undecided)."""

    comparison: Comparison
    facts: tuple[Fact, ...]
    answer: str | None

    def why(self) -> str:
        """The facts compared, in one line ("Ed Wood: American; Scott Derrickson: American")."""
        return "; ".join(f"{f.entity}: {f.said}" for f in self.facts)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready record, kept with the run."""
        c = self.comparison
        return {"kind": c.kind, "fact": c.fact, "entities": list(c.entities), "answer": self.answer,
                "facts": [f.to_dict() for f in self.facts]}


def _states(comparison: Comparison, said: str, value: Any, text: str) -> bool:
    """True when a text states an entity's fact: the model's words as a span, or the same value read from it."""
    return bool(said) and (contains_span(text, said) or (value is not None and fact_value(comparison, text) == value))


def _heading(line: str) -> bool:
    return line.lstrip().startswith("#")


def _passage_lines(where: Reference, text: str) -> list[str]:
    """A passage's lines, as many as its citation names."""
    return text.split("\n")[: where.line_end - where.line_start + 1]


def _lines_said(lines: Sequence[str], states: Callable[[str], bool]) -> list[int]:
    """The indices of the lines `states` accepts, headings left out (a `# ...` line names a document and says
    nothing in it)."""
    return [i for i, line in enumerate(lines) if not _heading(line) and states(line)]


def lines_stating(ref: str, text: str, states: Callable[[str], bool]) -> list[str]:
    """The `docs:FILE:LINE[-LINE]` citations of the lines of a passage that `states` accepts, a run of such lines as
    one range; where no single line does, the fewest lines in a row that do together. A heading is no such line.
    Empty when no line does."""
    where = parse_reference(ref)
    if where is None:
        return []
    lines = _passage_lines(where, text)
    said = _lines_said(lines, states)
    if not said:
        # A statement wrapped over lines (a document with hard line breaks): the shortest run that holds it.
        runs = [list(range(i, j + 1)) for i in range(len(lines)) for j in range(i + 1, len(lines))
                if not _heading(lines[i]) and states(" ".join(lines[i: j + 1]))]
        said = min(runs, key=len, default=[])
    if not said:
        return []
    out: list[str] = []
    first = said[0]
    for i, n in enumerate(said):
        if i + 1 == len(said) or said[i + 1] != n + 1:  # the end of a run of lines in a row
            a, b = where.line_start + first, where.line_start + n
            out.append(f"docs:{where.path}:{a}" + (f"-{b}" if b != a else ""))
            first = said[i + 1] if i + 1 < len(said) else n
    return out


def line_stating(ref: str, text: str, states: Callable[[str], bool]) -> str:
    """The `docs:FILE:LINE` of the first line of a passage that `states` accepts; the passage's own when none does."""
    where = parse_reference(ref)
    if where is None:
        return ref
    said = _lines_said(_passage_lines(where, text), states)
    return f"docs:{where.path}:{where.line_start + said[0]}" if said else ref


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


def narrowed_citations(answer: str | None, cited: Sequence[str], read: Mapping[str, str]) -> tuple[str, ...]:
    """A final answer's citations narrowed to the lines that say it: a docs passage holding the answer as a span
    cites the line(s) it sits in; one that does not hold it is dropped where another passage does, kept where none
    does. A yes/no answer (no span to find) and a tool's result are cited as given."""
    if not answer or answer_key(answer) in ("yes", "no"):
        return tuple(cited)
    narrow: list[str] = []
    lacking: list[str] = []
    spans = False
    for ref in cited:
        found = cited_passage(ref, read) if ref.startswith("docs:") else None
        if not isinstance(found, Citation):
            narrow.append(ref)  # a tool's result, or a passage not read (the check says which)
        elif contains_span(found.text, answer):
            spans = True
            narrow.extend(lines_stating(ref, found.text, partial(contains_span, answer=answer)) or [ref])
        else:
            lacking.append(ref)
    return tuple(dict.fromkeys([*narrow, *([] if spans else lacking)]))


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
        #: A comparison question's facts and answer, once settled (then hypotheses are weighed by it alone).
        self.compared: Compared | None = None
        self._said_judge = False

    @property
    def judge(self) -> str:
        """How passages are judged: CONTRASTIVE where the backend scores choices, else VERDICTS."""
        return CONTRASTIVE if self.env.ctx.scores_choices else VERDICTS

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

    async def settle(self, comparison: Comparison, node_id: int,
                     first: Sequence[tuple[str, str]]) -> tuple[Compared, list[dict[str, Any]], int]:
        """A comparison question settled in code: each entity's passages (those of the question that name it, and
        a search for it), its fact asked of the model, the two facts compared exactly; the calls and tokens."""
        facts: list[Fact] = []
        calls: list[dict[str, Any]] = []
        tokens = 0
        for entity in comparison.entities:
            found = await self.env.call_tool(DOCS_TOOL, {"query": f"{entity} {comparison.fact}",
                                                         "limit": self.passages}, node_id)
            calls.append(found.to_dict())
            searched = self._read(parse_passages(found.output)) if found.ok else []
            pool = list(dict.fromkeys([*searched, *first]))
            # The entity's own passages: those naming it; its search's, when none does.
            own = [p for p in pool if mentions(p[1], entity)] or searched
            if not own:
                facts.append(Fact(entity, "", None, None))
                continue
            got = await self.ask(fact_query(comparison, entity, own), "fact", node_id, "evaluator")
            said = " ".join(got[0].split()) if got is not None else ""
            tokens += got[1] if got is not None else 0
            value = fact_value(comparison, said) if said else None
            states = partial(_states, comparison, said, value)
            # Cited: the line stating the fact (as the model said it, or the same value), else the first passage
            # naming the entity.
            source = next((line_stating(ref, text, states) for ref, text in own if states(text)), own[0][0])
            facts.append(Fact(entity, said, value, source))
        answer = compare(comparison, [f.value for f in facts])
        self.compared = Compared(comparison, tuple(facts), answer)
        return self.compared, calls, tokens

    async def gather(self, h: Hypothesis, answers: Sequence[str] = ()) -> Findings:
        """Evidence for and against one hypothesis: a settled comparison's facts, else its sums checked and
        passages judged (its answer among `answers`, the tree's), else one claim of the model's."""
        out = Findings()
        if self.compared is not None and self.compared.answer is not None:
            self._compared(h, self.compared, out)
            return out
        await self._sums(h, out)
        if DOCS_TOOL in self.env.tools:
            await self._documents(h, out, answers)
        elif not out.evidence:
            await self._claim(h, out)
        return out

    def _compared(self, h: Hypothesis, compared: Compared, out: Findings) -> None:
        """Each entity's fact, for the hypothesis when it gives the comparison's answer, else against it."""
        agrees = answer_key(h.answer or h.content) == answer_key(compared.answer)
        for fact in compared.facts:
            if fact.source is not None:
                out.evidence.append(Evidence(f"{fact.entity}: {fact.said}", agrees, COMPARED_STRENGTH, fact.source,
                                             why=f"compared exactly ({compared.why()}): {compared.answer}"))

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

    async def _documents(self, h: Hypothesis, out: Findings, answers: Sequence[str]) -> None:
        # Yes and no add nothing to a search; an entity answer's words find its passages.
        query = self.question if answer_key(h.answer) in ("yes", "no") else f"{self.question} {h.content}"
        found = await self.env.call_tool(DOCS_TOOL, {"query": query, "limit": self.passages}, h.id)
        out.calls.append(found.to_dict())
        passages = self._read(parse_passages(found.output)) if found.ok else []
        if not passages:
            return
        mine = next((a for a in answers if h.answer and answer_key(a) == answer_key(h.answer)), None)
        if self.judge == CONTRASTIVE and mine is not None and len(answers) > 1:
            await self._contrast(mine, h.id, list(answers), passages, out)
            return
        if not self._said_judge and len(answers) > 1:
            self._said_judge = True
            logger.warning("%s cannot score choices: passages are judged by the model's written verdicts, "
                           "which a small model gives for both sides of a question", self.env.ctx.gateway.backend.name)
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

    async def _contrast(self, mine: str, node_id: int, answers: list[str], passages: list[tuple[str, str]],
                        out: Findings) -> None:
        """Each passage that names an answer scored for all of them at once; it speaks for the one it lifts most
        over the no-passage scores. A passage naming none of the answers supports none and is not asked about."""
        yes_no = all(answer_key(a) in ("yes", "no") for a in answers)
        # Made by every hypothesis judged (the same call: the cache answers the repeats), so that the calls do not
        # depend on which exploration asked first, and a stored run always holds a scoring call: its replay, which
        # scores choices only when the record has one, then judges as the run did.
        base = await self.ask(contrast_query(self.question, NO_PASSAGE, answers), "contrast", node_id, "evaluator")
        if base is None:
            return
        baseline, out.tokens = base[0], out.tokens + base[1]
        for ref, text in passages:
            # Yes and no are in no passage's words: one about neither of the question's subjects says neither.
            named = answers if yes_no and self._about_question(text) else [a for a in answers
                                                                            if contains_span(text, a)]
            if not named:
                continue
            got = await self.ask(contrast_query(self.question, text, answers), "contrast", node_id, "evaluator")
            if got is None:
                return
            out.tokens += got[1]
            shares = contrast(got[0], baseline, answers)
            if shares is None:
                continue
            verdict, strength = contrast_verdict(shares, mine, named)
            if verdict == "unrelated":
                continue
            odds = ", ".join(f"{a} {p:.2f}" for a, p in shares.items())
            out.evidence.append(Evidence(" ".join(text.split())[:EVIDENCE_CHARS], verdict == "supports", strength,
                                         ref, why=f"given the passage: {odds}"))

    def _about_question(self, text: str) -> bool:
        """True when the passage names one of the question's names (capitalised words past its first), or the
        question names none."""
        names = question_names(self.question)
        return not names or any(mentions(text, name) for name in names)

    async def _claim(self, h: Hypothesis, out: Findings) -> None:
        got = await self.ask(claim_query(self.question, h.content), "claim", h.id, "evaluator")
        if got is None:
            return
        reply, out.tokens = got
        for j in parse_judgements(reply, 1)[:1]:
            if j.verdict != "unrelated" and j.strength > 0 and j.why:
                out.evidence.append(Evidence(j.why, j.verdict == "supports", j.strength, MODEL_SOURCE))
