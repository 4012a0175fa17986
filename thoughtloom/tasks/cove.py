"""Chain of Verification's prompter and parsers (--strategy cove; seed 001 §1, Dhuliawala et al. 2023).

Four prompts, each in chat form (instruct models) and completion form (base models), from one
worked example each: draft an answer, plan verification questions about the facts the draft
rests on, answer one verification question (never shown the draft, so a mistake in the draft
cannot leak into its own check; a factual question is asked alone, one about numbers beside the
problem's statement, where its facts are), and revise the draft given the questions and their
answers. A question about numbers gets worked examples of arithmetic, a factual one of facts;
planned questions that share nothing with the problem or the draft are dropped, and a revision
is cut where it starts repeating the prompt. The strategy that sends them is
thoughtloom.search.strategies.cove.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ..grounding.claims import query_terms, stem
from .base import Query, few_shot_query, one_line
from .math import is_math_question
from .query import json_object, schema_text

DRAFT_TOKENS = 320
#: Tokens per planned question (one short line each).
QUESTION_TOKENS = 48
ANSWER_TOKENS = 128
REVISE_TOKENS = 320
#: Characters of the draft and of each verification answer shown in later prompts.
SHOWN_CHARS = 1200
#: Longest question the plan's reply schema allows: where it is enforced, k of them fit the plan's max_tokens.
SCHEMA_QUESTION_CHARS = 150

_DRAFT_SYSTEM = "Answer the question. Give the answer and the facts it rests on, briefly."
_PLAN_SYSTEM = (
    "You check a draft answer. Write verification questions, one per numbered line: each asks about one fact or "
    "step the draft relies on, and each makes sense on its own, without the draft. Write at most the number asked "
    "for."
)
_ANSWER_SYSTEM = "Answer the question briefly and factually, in one or two sentences."
_REVISE_SYSTEM = (
    "You revise a draft answer with verification questions that were answered independently of it. Keep what the "
    "verifications confirm, correct what they contradict, and give the final answer."
)


@dataclass(frozen=True, slots=True)
class Examples:
    """One worked example per prompt, (what is asked, the reply): a small model copies their kind of
    question, so a question about numbers gets examples that verify steps of arithmetic."""

    draft: tuple[str, str]
    plan: tuple[str, str]
    answer: tuple[str, str]
    revise: tuple[str, str]


def _plan_shot(question: str, draft: str, checks: Sequence[str]) -> tuple[str, str]:
    return (f"{question}\nDraft answer: {draft.removeprefix('Answer: ')}\nVerification questions ({len(checks)}):",
            "\n".join(f"{i}. {c}" for i, c in enumerate(checks, 1)))


_FACT_DRAFT = (
    "Question: Which river flows through the capital of the country where the Rubik's Cube was invented?",
    ("Answer: The Rubik's Cube was invented in Hungary, whose capital is Budapest; the Danube flows through "
     "Budapest."),
)
FACTS = Examples(
    draft=_FACT_DRAFT,
    plan=_plan_shot(*_FACT_DRAFT, ("In which country was the Rubik's Cube invented?", "What is the capital of Hungary?",
                                   "Which river flows through Budapest?")),
    answer=("Question: What is the capital of Hungary?", "Answer: Budapest is the capital of Hungary."),
    revise=(("Question: In which year did the first person to walk on the Moon die?\n"
             "Draft answer: Buzz Aldrin was the first person to walk on the Moon; he died in 2012.\n"
             "Verifications:\n1. Who was the first person to walk on the Moon? Neil Armstrong was the first.\n"
             "2. In which year did Neil Armstrong die? He died in 2012."),
            "Final answer: Neil Armstrong, the first person to walk on the Moon, died in 2012."),
)
_SUM_DRAFT = (
    "Question: A shop sells pens at 3 dollars each. Tom buys 4 pens and pays with a 20 dollar bill. How much change "
    "does he get?",
    "Answer: 4 pens cost 4 x 3 = 12 dollars, so the change is 20 - 12 = 8 dollars. The answer is 8.",
)
#: Invented (from no benchmark): each verification repeats the numbers it needs, so it stands alone.
ARITHMETIC = Examples(
    draft=_SUM_DRAFT,
    plan=_plan_shot(*_SUM_DRAFT, ("How much do 4 pens cost at 3 dollars each?",
                                  "How much change is left from 20 dollars after paying 12 dollars?")),
    answer=(f"Facts: {_SUM_DRAFT[0].removeprefix('Question: ')}\nQuestion: How much do 4 pens cost at 3 dollars each?",
            "Answer: 4 x 3 = 12 dollars."),
    revise=(("Question: A box holds 6 eggs. Ann buys 5 boxes and breaks 4 eggs. How many whole eggs does she have?\n"
             "Draft answer: 5 boxes hold 5 x 6 = 36 eggs; 36 - 4 = 32. The answer is 32.\n"
             "Verifications:\n1. How many eggs are in 5 boxes of 6 eggs? 5 x 6 = 30 eggs.\n"
             "2. How many eggs are left from 30 eggs after 4 break? 30 - 4 = 26 eggs."),
            "Final answer: 5 boxes hold 5 x 6 = 30 eggs; 30 - 4 = 26. The answer is 26."),
)


def examples_for(text: str) -> Examples:
    """The worked examples for a question (or a verification question): arithmetic ones for a question about numbers."""
    return ARITHMETIC if is_math_question(text) else FACTS


# "1. ...", "1) ...", "Q1: ...", "- ..." (a bullet), with markdown emphasis around it.
_ITEM = re.compile(r"^\s*(?:\*\*)?\s*(?:q(?:uestion)?\s*)?(?:\d{1,2}\s*[.):]|[-*\u2022])\s*(?:\*\*)?\s*(.+?)\s*$",
                   re.IGNORECASE)
_LABEL = re.compile(r"^\s*(?:\*\*)?\s*(?:final\s+answer|revised\s+answer|answer)\s*:\s*(?:\*\*)?\s*", re.IGNORECASE)


def draft_query(problem: str) -> Query:
    """The baseline answer, drafted with no verification."""
    return few_shot_query(_DRAFT_SYSTEM, [examples_for(problem).draft], f"Question: {problem}", DRAFT_TOKENS,
                          stop=("\n\n", "\nQuestion:"))


def questions_schema(k: int) -> str:
    """The reply a plan query asks for: {"questions": [...]}, 1 to k questions."""
    return schema_text({"type": "object", "properties": {"questions": {
        "type": "array", "minItems": 1, "maxItems": max(1, k),
        "items": {"type": "string", "minLength": 1, "maxLength": SCHEMA_QUESTION_CHARS}}}, "required": ["questions"]})


def plan_query(problem: str, draft: str, k: int) -> Query:
    """At most k verification questions about the facts and steps the draft rests on (as JSON where the
    backend enforces the schema, numbered lines elsewhere)."""
    user = f"Question: {problem}\nDraft answer: {one_line(draft, SHOWN_CHARS)}\nVerification questions ({k}):"
    return few_shot_query(_PLAN_SYSTEM, [examples_for(problem).plan], user, QUESTION_TOKENS * k + 16,
                          stop=("\n\n", "\nQuestion:"), schema=questions_schema(k))


def answer_query(question: str, problem: str) -> Query:
    """One verification question without the draft, so the draft cannot bias its check. A factual
    question is asked alone; a question about numbers is shown the problem's statement too (its facts
    are there, and a question without them is answered with invented ones), never the draft."""
    examples = examples_for(problem)
    facts = f"Facts: {problem}\n" if examples is ARITHMETIC else ""
    return few_shot_query(_ANSWER_SYSTEM, [examples.answer], f"{facts}Question: {question}", ANSWER_TOKENS,
                          stop=("\n\n", "\nQuestion:"))


def revise_query(problem: str, draft: str, checks: Sequence[tuple[str, str]]) -> Query:
    """The final answer: the draft, kept where the verifications confirm it and corrected where they do not."""
    shown = "\n".join(f"{i}. {one_line(q, 300)} {one_line(a, SHOWN_CHARS)}" for i, (q, a) in enumerate(checks, 1))
    user = f"Question: {problem}\nDraft answer: {one_line(draft, SHOWN_CHARS)}\nVerifications:\n{shown}"
    # A small model goes on from its answer to copy the prompt's verifications: they are not the answer.
    return few_shot_query(_REVISE_SYSTEM, [examples_for(problem).revise], user, REVISE_TOKENS,
                          stop=("\n\n", "\nQuestion:", "\nVerification", "\nDraft answer:"))


def parse_questions(text: str, k: int) -> list[str]:
    """The planned questions: a {"questions": [...]} reply's, else numbered or bulleted lines (else lines
    ending in '?'), each once, at most k."""
    data = json_object(text)
    listed = data.get("questions") if data is not None else None
    if isinstance(listed, list):
        items = [" ".join(q.split()) for q in listed if isinstance(q, str)]
    else:
        lines = [line for line in text.splitlines() if line.strip()]
        items = [m.group(1) for m in map(_ITEM.match, lines) if m is not None]
        if not items:
            items = [line.strip() for line in lines if line.strip().endswith("?")]
    out: list[str] = []
    for item in items:
        question = item.strip().strip("*").strip()
        if question and question.lower() not in (q.lower() for q in out):
            out.append(question)
    return out[:k]


def on_topic(question: str, problem: str, draft: str) -> bool:
    """True when a verification question shares a word or number with the problem or its draft: one that
    shares none checks something else (a small model copies the worked example's questions)."""
    def terms(text: str) -> set[str]:
        return {stem(t.removesuffix("'s")) for t in query_terms(text)}

    return bool(terms(question) & terms(f"{problem} {draft}"))


_ECHO = re.compile(r"^\s*(?:\*\*)?\s*(?:verifications?|verification questions|draft answer|question)\b", re.IGNORECASE)


def parse_revision(text: str) -> str | None:
    """The revised answer without its label, cut where the reply goes on to repeat the prompt's
    verifications, draft or question (none of which is the answer)."""
    lines = text.strip().splitlines()
    end = next((i for i, line in enumerate(lines) if _ECHO.match(line)), len(lines))
    return parse_reply("\n".join(lines[:end]))


def parse_reply(text: str) -> str | None:
    """A draft, verification answer or revision without the label it opens with ('Answer:', 'Final answer:')."""
    body = _LABEL.sub("", text.strip(), count=1).strip()
    return body or None
