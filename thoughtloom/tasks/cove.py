"""Chain of Verification's prompter and parsers (--strategy cove; seed 001 §1, Dhuliawala et al. 2023).

Four prompts, each in chat form (instruct models) and completion form (base models), from one
worked example each: draft an answer, plan verification questions about the facts the draft
rests on, answer one verification question (the question alone: neither the draft nor the
problem is shown, so a mistake in the draft cannot leak into its own check), and revise the
draft given the questions and their answers. The strategy that sends them is
thoughtloom.search.strategies.cove.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from .base import Query, few_shot_query, one_line
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
_DRAFT_EXAMPLE = (
    "Question: Which river flows through the capital of the country where the Rubik's Cube was invented?",
    ("Answer: The Rubik's Cube was invented in Hungary, whose capital is Budapest; the Danube flows through "
     "Budapest."),
)
_PLAN_SYSTEM = (
    "You check a draft answer. Write verification questions, one per numbered line: each asks about one fact or "
    "step the draft relies on, and each makes sense on its own, without the draft. Write at most the number asked "
    "for."
)
_PLAN_EXAMPLE = (
    f"{_DRAFT_EXAMPLE[0]}\nDraft answer: {_DRAFT_EXAMPLE[1].removeprefix('Answer: ')}\nVerification questions (3):",
    ("1. In which country was the Rubik's Cube invented?\n2. What is the capital of Hungary?\n"
     "3. Which river flows through Budapest?"),
)
_ANSWER_SYSTEM = "Answer the question briefly and factually, in one or two sentences."
_ANSWER_EXAMPLE = ("Question: What is the capital of Hungary?", "Answer: Budapest is the capital of Hungary.")
_REVISE_SYSTEM = (
    "You revise a draft answer with verification questions that were answered independently of it. Keep what the "
    "verifications confirm, correct what they contradict, and give the final answer."
)
_REVISE_EXAMPLE = (
    ("Question: In which year did the first person to walk on the Moon die?\n"
     "Draft answer: Buzz Aldrin was the first person to walk on the Moon; he died in 2012.\n"
     "Verifications:\n1. Who was the first person to walk on the Moon? Neil Armstrong was the first.\n"
     "2. In which year did Neil Armstrong die? He died in 2012."),
    "Final answer: Neil Armstrong, the first person to walk on the Moon, died in 2012.",
)

# "1. ...", "1) ...", "Q1: ...", "- ..." (a bullet), with markdown emphasis around it.
_ITEM = re.compile(r"^\s*(?:\*\*)?\s*(?:q(?:uestion)?\s*)?(?:\d{1,2}\s*[.):]|[-*\u2022])\s*(?:\*\*)?\s*(.+?)\s*$",
                   re.IGNORECASE)
_LABEL = re.compile(r"^\s*(?:\*\*)?\s*(?:final\s+answer|revised\s+answer|answer)\s*:\s*(?:\*\*)?\s*", re.IGNORECASE)


def draft_query(problem: str) -> Query:
    """The baseline answer, drafted with no verification."""
    return few_shot_query(_DRAFT_SYSTEM, [_DRAFT_EXAMPLE], f"Question: {problem}", DRAFT_TOKENS,
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
    return few_shot_query(_PLAN_SYSTEM, [_PLAN_EXAMPLE], user, QUESTION_TOKENS * k + 16,
                          stop=("\n\n", "\nQuestion:"), schema=questions_schema(k))


def answer_query(question: str) -> Query:
    """One verification question on its own: no draft, no problem, so the draft cannot bias its check."""
    return few_shot_query(_ANSWER_SYSTEM, [_ANSWER_EXAMPLE], f"Question: {question}", ANSWER_TOKENS,
                          stop=("\n\n", "\nQuestion:"))


def revise_query(problem: str, draft: str, checks: Sequence[tuple[str, str]]) -> Query:
    """The final answer: the draft, kept where the verifications confirm it and corrected where they do not."""
    shown = "\n".join(f"{i}. {one_line(q, 300)} {one_line(a, SHOWN_CHARS)}" for i, (q, a) in enumerate(checks, 1))
    user = f"Question: {problem}\nDraft answer: {one_line(draft, SHOWN_CHARS)}\nVerifications:\n{shown}"
    return few_shot_query(_REVISE_SYSTEM, [_REVISE_EXAMPLE], user, REVISE_TOKENS, stop=("\n\n", "\nQuestion:"))


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


def parse_reply(text: str) -> str | None:
    """A draft, verification answer or revision without the label it opens with ('Answer:', 'Final answer:')."""
    body = _LABEL.sub("", text.strip(), count=1).strip()
    return body or None
