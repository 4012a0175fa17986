"""The research task: a question explored as a tree of hypotheses tested against evidence (loom research).

This module is the research flow's prompter and parser: the prompts the flow sends (propose
hypotheses, judge passages against a hypothesis, state a fact from the model's own knowledge,
synthesize hypotheses into one answer), each in chat and completion form, and the parsers that
read the replies into typed values. The flow that sends them is thoughtloom.search.research.
"""

from __future__ import annotations

import re
import string
from collections.abc import Sequence
from dataclasses import dataclass

from ..llm.types import parse_choice_text
from .base import ProblemError, Query, Task, few_shot_query, one_line
from .hops import PASSAGE_CHARS, name_spans, numbered
from .query import json_object, schema_text

#: Sampling temperature of the brancher: a small model sampled hotter leaves the numbered format.
BRANCH_TEMPERATURE = 0.3
#: The two hypotheses of a yes/no question. Each claims its answer, not the state of the evidence: a
#: "No" that read "the passages do not bear it out" was supported by every unrelated passage.
YES_NO = (("Yes", "Yes - the answer to the question is yes."), ("No", "No - the answer to the question is no."))


def mentions(passage: str, answer: str) -> bool:
    """True when the passage names the answer (each of its words, articles aside); yes and no are named by any
    passage."""
    key = answer_key(answer)
    if key in ("yes", "no"):
        return True
    have = set(answer_key(passage).split())
    return bool(key) and all(word in have for word in key.split())


def question_names(question: str) -> list[str]:
    """The names a question gives: runs of capitalised words, without the function words that open them ("Were
    Scott Derrickson and Ed Wood ...?" -> Scott Derrickson, Ed Wood)."""
    return list(dict.fromkeys(name for _, name in name_spans(question)))


@dataclass(frozen=True, slots=True)
class Proposal:
    """A hypothesis the brancher proposes: its statement, its short answer, and the confidence it gives it (if any)."""

    content: str
    answer: str | None = None
    confidence: float | None = None


@dataclass(frozen=True, slots=True)
class Judgement:
    """What one passage (or the model's own knowledge) says of a hypothesis."""

    index: int
    verdict: str  # "supports" | "contradicts" | "unrelated"
    strength: float
    why: str


@dataclass(frozen=True, slots=True)
class SynthesisReply:
    """A synthesizer's reply: the short answer, why, and the confidence it states (if any)."""

    answer: str
    why: str
    confidence: float | None = None



# --- proposing hypotheses -----------------------------------------------------------------------

_BRANCH_SYSTEM = (
    "You propose different possible answers to a question, as hypotheses to test. Write at most the number "
    "asked for, one per numbered line: the answer in a few words (yes or no for a yes/no question), then ' - ' "
    "and the passage it rests on. Each line gives a different answer. Use only names the passages give."
)
# Reasons that point at passages, not facts: a small model copies an example's reasons into its own lines.
_BRANCH_EXAMPLE = (
    "Question: Which company made the first Walkman?\nPassages:\n[1] The Walkman is a portable cassette player "
    "that Sony launched in 1979.\n[2] Aiwa and Panasonic later sold cassette players of their own.\nHypotheses (3):",
    "1. Sony - passage [1].\n2. Aiwa - passage [2] names it as a maker.",
)
_PROPOSAL = re.compile(r"^\s*(?:hypothesis\s*)?(\d{1,2})\s*[.):]\s*(.+?)\s*$", re.IGNORECASE)
_STATED = re.compile(r"\(?\s*confidence\s*[:=]?\s*([01](?:\.\d+)?)\s*\)?\s*\.?\s*$", re.IGNORECASE)
_SPLIT = re.compile(r"\s+[-–—]\s+|:\s+")


#: Longest answer and reason a hypothesis's reply schema allows: bounded so that where the schema is
#: enforced n hypotheses fit the query's max_tokens (40 per hypothesis) and the JSON closes.
SCHEMA_ANSWER_CHARS = 40
SCHEMA_REASON_CHARS = 50


def hypotheses_schema(n: int) -> str:
    """The reply a branch query asks for: {"hypotheses": [{"answer", "reason", "confidence"}]}, 1 to n of them."""
    item = {"type": "object", "properties": {
        "answer": {"type": "string", "minLength": 1, "maxLength": SCHEMA_ANSWER_CHARS},
        "reason": {"type": "string", "maxLength": SCHEMA_REASON_CHARS},
        "confidence": {"type": "number", "minimum": 0, "maximum": 1},
    }, "required": ["answer"]}
    return schema_text({"type": "object", "properties": {"hypotheses": {
        "type": "array", "minItems": 1, "maxItems": max(1, n), "items": item}}, "required": ["hypotheses"]})


def branch_query(question: str, n: int, *, passages: Sequence[tuple[str, str]] = (), hypothesis: str | None = None,
                 evidence: Sequence[str] = ()) -> Query:
    """Ask for n hypotheses: answers to the question (from passages), or alternatives to a hypothesis given its
    evidence."""
    parts = [f"Question: {question}"]
    if passages:
        parts.append(f"Passages:\n{numbered(passages)}")
    if hypothesis is not None:
        parts.append(f"Current hypothesis: {one_line(hypothesis, 300)}")
        shown = "\n".join(f"- {one_line(e, 300)}" for e in evidence) or "- (none found)"
        parts.append(f"Evidence so far:\n{shown}")
        parts.append(f"Alternative hypotheses ({n}):")
    else:
        parts.append(f"Hypotheses ({n}):")
    return few_shot_query(_BRANCH_SYSTEM, [_BRANCH_EXAMPLE], "\n".join(parts), max_tokens=40 * n + 20,
                          temperature=BRANCH_TEMPERATURE, schema=hypotheses_schema(n))


def proposal_of(line: str) -> Proposal | None:
    """One hypothesis as written ("Argus - why (confidence 0.7)"): its statement, short answer and stated confidence."""
    body = line.strip().strip("*").strip()
    confidence = None
    stated = _STATED.search(body)
    if stated is not None:
        confidence = min(1.0, float(stated.group(1)))
        body = body[: stated.start()].rstrip(" ,;")
    if not body:
        return None
    head = _SPLIT.split(body, maxsplit=1)[0].strip(" .\"'")
    return Proposal(body, head if head and len(head.split()) <= 8 else None, confidence)


def _json_proposal(item: object) -> Proposal | None:
    """One hypothesis of a structured reply, stated as a numbered line would state it ("answer - reason")."""
    if not isinstance(item, dict) or not isinstance(item.get("answer"), str):
        return None
    answer = " ".join(item["answer"].split()).strip(" .\"'")
    if not answer:
        return None
    reason = " ".join(str(item.get("reason") or "").split())
    stated = item.get("confidence")
    confidence = (min(1.0, max(0.0, float(stated)))
                  if isinstance(stated, (int, float)) and not isinstance(stated, bool) else None)
    return Proposal(f"{answer} - {reason}" if reason else answer, answer if len(answer.split()) <= 8 else None,
                    confidence)


def parse_proposals(text: str, n: int) -> list[Proposal]:
    """Proposals from a {"hypotheses": [...]} reply, else from numbered lines (at most n; a repeated answer
    is kept once)."""
    data = json_object(text)
    items = data.get("hypotheses") if data is not None else None
    if isinstance(items, list):
        candidates = [_json_proposal(item) for item in items]
    else:
        lines = (_PROPOSAL.match(line.strip().strip("*")) for line in text.splitlines())
        candidates = [proposal_of(m.group(2)) for m in lines if m is not None]
    out: list[Proposal] = []
    seen: set[str] = set()
    for proposal in candidates:
        key = answer_key(proposal.answer or proposal.content) if proposal is not None else ""
        if proposal is None or not key or key in seen:
            continue
        seen.add(key)
        out.append(proposal)
        if len(out) >= n:
            break
    return out


# --- judging evidence -----------------------------------------------------------------------------

_JUDGE_SYSTEM = (
    "You check a hypothesis against numbered passages. For each passage write one line: its number, then "
    "SUPPORTS, CONTRADICTS or UNRELATED, then how strongly from 0 to 1, then a few words why."
)
_JUDGE_EXAMPLE = (
    "Question: Was the Eiffel Tower finished before the Brooklyn Bridge?\nHypothesis: No - the Brooklyn Bridge "
    "opened first.\nPassages:\n[1] The Brooklyn Bridge opened on May 24, 1883.\n[2] The Eiffel Tower was finished "
    "in 1889 for the World's Fair.\n[3] Paris is the capital of France.",
    "1: SUPPORTS 0.8 the bridge opened in 1883\n2: SUPPORTS 0.8 the tower was finished in 1889, later\n"
    "3: UNRELATED 0 says nothing about either date",
)
_VERDICTS = {"supports": "supports", "support": "supports", "supported": "supports", "yes": "supports",
             "contradicts": "contradicts", "contradict": "contradicts", "refutes": "contradicts",
             "contradicted": "contradicts", "no": "contradicts", "unrelated": "unrelated", "irrelevant": "unrelated",
             "neutral": "unrelated"}
_JUDGEMENT = re.compile(
    r"^\s*(?:\[?(\d{1,2})\]?\s*[:.)-]?\s*)?\**\s*(supports?|supported|contradicts?|contradicted|refutes|unrelated|"
    r"irrelevant|neutral)\b\**\s*[:,(]?\s*([01](?:\.\d+)?)?\)?\s*[:,.-]?\s*(.*)$", re.IGNORECASE)
#: Strength of a judgement that gives none.
DEFAULT_STRENGTH = 0.6


def judge_query(question: str, hypothesis: str, passages: Sequence[tuple[str, str]]) -> Query:
    """Ask whether each passage supports or contradicts the hypothesis, and how strongly."""
    shown = numbered(passages)
    return few_shot_query(_JUDGE_SYSTEM, [_JUDGE_EXAMPLE],
                          f"Question: {question}\nHypothesis: {one_line(hypothesis, 300)}\nPassages:\n{shown}",
                          max_tokens=24 * len(passages) + 16, temperature=0.2)


def parse_judgements(text: str, count: int) -> list[Judgement]:
    """One judgement per passage number (1..count) the reply judges; an unnumbered line takes the next number."""
    out: dict[int, Judgement] = {}
    next_index = 1
    for line in text.splitlines():
        m = _JUDGEMENT.match(line.replace("*", "").strip())
        if m is None:
            continue
        index = int(m.group(1)) if m.group(1) else next_index
        next_index = index + 1
        if not 1 <= index <= count or index in out:
            continue
        strength = min(1.0, float(m.group(3))) if m.group(3) else DEFAULT_STRENGTH
        out[index] = Judgement(index, _VERDICTS[m.group(2).lower()], strength, m.group(4).strip())
    return [out[i] for i in sorted(out)]


# --- the contrastive judge ---------------------------------------------------------------------------

#: The passage a contrast is measured against: the same prompt with nothing to read.
NO_PASSAGE = "(none)"
#: Below this lead of the winning answer over the next (in probability) a passage decides nothing.
CONTRAST_MARGIN = 0.1

_CONTRAST_SYSTEM = "Answer the question from the passage alone, with one of the answers offered, exactly as written."
_CONTRAST_EXAMPLE = (
    ("Passage: The Walkman is a portable cassette player that Sony launched in 1979.\n"
     "Question: Which company made the first Walkman?\nAnswers: Sony | Aiwa"),
    "Sony",
)


def contains_span(passage: str, answer: str | None) -> bool:
    """True when the passage holds the answer as a span: its words, normalised as the official HotpotQA scorer
    does (lowercase, no punctuation or articles), in order and together."""
    key = answer_key(answer)
    return bool(key) and f" {key} " in f" {answer_key(passage)} "


def contrast_query(question: str, passage: str, answers: Sequence[str]) -> Query:
    """Ask which of the answers the passage gives, as choices the model's distribution scores in one pass."""
    query = few_shot_query(_CONTRAST_SYSTEM, [_CONTRAST_EXAMPLE], f"Passage: {one_line(passage, PASSAGE_CHARS)}\n"
                           f"Question: {question}\nAnswers: {' | '.join(answers)}", max_tokens=16, temperature=0.0)
    return Query(query.prompt, max_tokens=query.max_tokens, temperature=query.temperature, choices=tuple(answers))


def contrast(reply: str, baseline: str | None, answers: Sequence[str]) -> dict[str, float] | None:
    """Each answer's share given the passage, over its share with no passage (how much the passage, not the
    model's prior or the answer's length, moves it), renormalised; None when the reply scores nothing."""
    given = parse_choice_text(reply, answers)
    if given is None:
        return None
    prior = parse_choice_text(baseline, answers) if baseline is not None else None
    if prior is None:
        return given
    lifted = {a: given[a] / prior[a] if prior[a] > 0 else given[a] for a in answers}
    total = sum(lifted.values())
    return {a: v / total for a, v in lifted.items()} if total > 0 else given


def contrast_verdict(shares: dict[str, float], answer: str, named: Sequence[str]) -> tuple[str, float]:
    """What one passage says of `answer` among its rivals: "supports" when the passage names it and scores it
    highest, "contradicts" when it scores highest a rival it names, else "unrelated"; with the winner's lead.
    named: the answers the passage can speak for (those it holds as a span; yes and no need no span)."""
    ranked = sorted(shares.items(), key=lambda kv: -kv[1])
    (winner, top), runner = ranked[0], (ranked[1][1] if len(ranked) > 1 else 0.0)
    lead = top - runner
    if lead < CONTRAST_MARGIN or winner not in named:
        return "unrelated", 0.0
    return ("supports" if winner == answer else "contradicts"), round(lead, 4)


_CLAIM_SYSTEM = (
    "You test a hypothesis with what you know. Write one line: SUPPORTS or CONTRADICTS, how strongly from 0 to "
    "1, then the one fact you know that decides it."
)
_CLAIM_EXAMPLE = (
    "Question: Is Lisbon the capital of Portugal?\nHypothesis: Yes - Lisbon is the seat of government.",
    "SUPPORTS 0.9 Lisbon has been Portugal's capital since the 13th century",
)


def claim_query(question: str, hypothesis: str) -> Query:
    """Ask the model for one fact of its own for or against the hypothesis (evidence marked as the model's)."""
    return few_shot_query(_CLAIM_SYSTEM, [_CLAIM_EXAMPLE],
                          f"Question: {question}\nHypothesis: {one_line(hypothesis, 300)}", max_tokens=48,
                          temperature=0.2)


# --- synthesis ------------------------------------------------------------------------------------

_SYNTH_SYSTEM = (
    "You combine hypotheses about a question into one answer. Prefer the hypotheses the evidence supports. "
    "Reply with two lines: ANSWER: the answer in a few words (yes or no for a yes/no question), then WHY: one "
    "sentence that cites the evidence."
)
_SYNTH_EXAMPLE = (
    "Question: Which river is longer, the Loire or the Rhone?\nHypotheses:\n- H1 (confidence 0.86): The Loire - "
    "1,006 km against 813 km. Evidence: [docs:01-Loire.md:1] The Loire is the longest river in France, at 1,006 km.\n"
    "- H2 (confidence 0.12): The Rhone - longer counting its Swiss course. Evidence: none",
    "ANSWER: The Loire\nWHY: The Loire runs 1,006 km [docs:01-Loire.md:1], longer than the Rhone's 813 km.",
)
_ANSWER = re.compile(r"^\s*\**\s*(?:final\s+)?answer\s*\**\s*[:=]\s*\**\s*(.+?)\s*\**\s*$",
                     re.IGNORECASE | re.MULTILINE)
_WHY = re.compile(r"^\s*\**\s*(?:why|because|reason)\s*\**\s*[:=]\s*(.+)$", re.IGNORECASE | re.MULTILINE)
_CONFIDENCE = re.compile(r"confidence\s*[:=]\s*([01](?:\.\d+)?)", re.IGNORECASE)


def synthesis_query(question: str, hypotheses: Sequence[tuple[str, float, str, Sequence[str]]]) -> Query:
    """Ask for one answer from hypotheses given as (label, confidence, statement, evidence lines)."""
    rows = []
    for label, confidence, statement, evidence in hypotheses:
        shown = " ".join(one_line(e, 240) for e in evidence[:3]) or "none"
        rows.append(f"- {label} (confidence {confidence:.2f}): {one_line(statement, 240)} Evidence: {shown}")
    return few_shot_query(_SYNTH_SYSTEM, [_SYNTH_EXAMPLE], f"Question: {question}\nHypotheses:\n" + "\n".join(rows),
                          max_tokens=120, temperature=0.2)


def parse_synthesis(text: str) -> SynthesisReply | None:
    """The ANSWER and WHY lines of a synthesis reply (the first line stands for ANSWER when none is marked)."""
    body = text.strip()
    if not body:
        return None
    m = _ANSWER.search(body)
    answer = m.group(1) if m else body.splitlines()[0]
    why = _WHY.search(body)
    stated = _CONFIDENCE.search(body)
    answer = answer.strip().strip("*").strip()
    if not answer:
        return None
    return SynthesisReply(answer, why.group(1).strip() if why else "",
                          min(1.0, float(stated.group(1))) if stated else None)


_ARTICLES = re.compile(r"\b(a|an|the)\b")


def answer_key(text: str | None) -> str:
    """What two answers share when they say the same (lowercase, no punctuation or articles)."""
    if not text:
        return ""
    text = "".join(c for c in text.lower() if c not in string.punctuation)
    return " ".join(_ARTICLES.sub(" ", text).split())


class ResearchTask(Task[str]):
    """A question explored as a tree of hypotheses tested against evidence; the answer is the flow's synthesis."""

    name = "research"
    description = "a question explored as a tree of hypotheses tested against documents (loom research)"
    free_text_steps = True
    programmatic_answer = True
    search_defaults = {"strategy": "research"}

    def parse_problem(self, text: str) -> str:
        """The question itself; empty text is refused."""
        text = " ".join(text.split())
        if not text:
            raise ProblemError('the question is empty; ask one, e.g. loom research "Who wrote Dune?" --knowledge DIR')
        return text

    def compose_answer(self, problem: str, steps: Sequence[str], reply: str | None) -> str | None:
        """None: the flow's final synthesis is the answer, and a flow that found none has none."""
        return None
