"""An evaluator's judgement of one thought: its score, why, and whether it is worth expanding.

An evaluator asked with EVALUATION_SCHEMA replies in JSON where the backend enforces the schema
(the embedded model's grammar, an OpenAI-compatible chat endpoint's response_format), and in
free text where it does not (completion endpoints, models that ignore it). `read_evaluation`
reads either, and `judge` combines several samples into one record.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..llm.text import loads_valid

#: The reply an evaluator is asked for: reasoning first (so the score follows from it), a 0-10
#: score and a verdict. The reasoning is one line of at most 300 characters, without quotes or
#: backslashes: a grammar then cannot run it past the reply's token limit or across a stop string.
EVALUATION_SCHEMA = json.dumps({
    "type": "object",
    "properties": {
        "reasoning": {"type": "string", "pattern": '^[^\\n"\\\\]{0,300}$'},
        "score": {"enum": list(range(11))},
        "is_promising": {"type": "boolean"},
    },
    "required": ["reasoning", "score", "is_promising"],
}, separators=(",", ":"))

#: Tokens an evaluator gets: room for a sentence or two of reasoning before the score.
EVALUATION_TOKENS = 160
#: The most of a free-text reply kept as its reasoning.
MAX_REASONING_CHARS = 500


@dataclass(frozen=True, slots=True)
class Evaluation:
    """What an evaluator said of a thought: score in [0, 1], why, and whether to expand it (None: not said)."""

    score: float
    reasoning: str = ""
    is_promising: bool | None = None

    @property
    def explained(self) -> bool:
        """True when the evaluator said more than a number (a reason or a verdict), worth keeping on the node."""
        return bool(self.reasoning) or self.is_promising is not None

    def to_dict(self) -> dict[str, Any]:
        """Plain data, as kept in node.extra["evaluation"] and in --json."""
        return {"score": self.score, "reasoning": self.reasoning, "is_promising": self.is_promising}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Evaluation:
        """The record from its plain-data form."""
        return cls(float(data["score"]), str(data.get("reasoning") or ""), data.get("is_promising"))


_NUM = r"(\d+(?:\.\d+)?)"
# A number that is the end of a range ("0 to 10", "0-10") is the scale, not a score.
_NOT_A_RANGE = r"(?!\s*(?:to|-|–)\s*\d)"
# How a score is written, most explicit first: "7/10", "7 out of 10" (always tenths), "Score: 7".
_OUT_OF_TEN = re.compile(_NUM + r"\s*(?:/|out of)\s*10\b", re.IGNORECASE)
_LABELLED = re.compile(r"\b(?:score|rating|rate|rated|quality)\b\D{0,12}?" + _NUM + _NOT_A_RANGE, re.IGNORECASE)
# Else a bare number that is not a step's number ("Step 2: ..."), a percentage, a list item's
# number ("1)"), nor the end of a range ("to 10").
_BARE = re.compile(r"(?<![\d.])(?<!step )(?<!step)(?<!to )" + _NUM + r"(?![\d.]*\s*[)%])" + _NOT_A_RANGE,
                   re.IGNORECASE)
_ARITHMETIC = set("+-*/=×÷^")
_VERDICT = re.compile(
    r"\b(?:is[_ ]promising|promising|worth (?:expanding|exploring|pursuing))[\"'*]*\s*[:=]\s*[\"'*]*\s*"
    r"(true|false|yes|no)\b", re.IGNORECASE)
_PROSE_VERDICT = re.compile(r"\b(not\s+(?:\w+\s+)?|un)?promising\b", re.IGNORECASE)
_JSON_REASONING = re.compile(r'"reasoning"\s*:\s*"((?:[^"\\]|\\.)*)', re.IGNORECASE)


def read_evaluation(text: str) -> Evaluation | None:
    """One evaluator reply as an Evaluation; None when it states no score.

    JSON ({"reasoning", "score", "is_promising"}) is read first, then free text: "7/10" and
    "7 out of 10" are tenths; "Score: 7", "Rating: 7.5" or a bare number are tenths too, except
    a decimal up to 1 ("0.8"), which is already on the 0-1 scale. A bare number is the last one
    in the reply that is not a step's number, a list item's, a percentage, an operand or result
    of arithmetic ("48 / 2 = 24"), or the end of a "0 to 10" range: models give their reasons
    first and the score last.
    """
    data = _json_object(text)
    if data is not None:
        return _from_json(data)
    score = score_in(text)
    if score is None:
        return None
    return Evaluation(score, _reasoning_in(text), _verdict_in(text))


def score_in(text: str) -> float | None:
    """The score a free-text reply states, in [0, 1]; None if it states none (see read_evaluation)."""
    for m in _OUT_OF_TEN.finditer(text):
        if float(m.group(1)) <= 10:
            return float(m.group(1)) / 10.0
    for m in _LABELLED.finditer(text):
        value = _unit(m.group(1))
        if value is not None:
            return value
    for m in reversed(list(_BARE.finditer(text))):
        value = _unit(m.group(1))
        if value is not None and not _in_arithmetic(text, m.start(1), m.end(1)):
            return value
    return None


def judge(texts: Sequence[str]) -> Evaluation:
    """Several samples' replies as one Evaluation.

    The score is the mean of the samples that state one (a reply without a score does not
    count as a zero; none at all scores 0), the reasoning each distinct reason on a line, and a
    thought is promising when at least half of the samples that say so call it promising.
    """
    read = [(text, read_evaluation(text)) for text in texts]
    scored = [e for _, e in read if e is not None]
    if not scored:
        said = next((_one_line(t) for t in texts if t.strip()), "")
        return Evaluation(0.0, f"no score in the evaluator's reply: {said}" if said else "the evaluator said nothing")
    reasons = list(dict.fromkeys(e.reasoning for e in scored if e.reasoning))
    verdicts = [e.is_promising for e in scored if e.is_promising is not None]
    promising = sum(verdicts) * 2 >= len(verdicts) if verdicts else None
    return Evaluation(sum(e.score for e in scored) / len(scored), "\n".join(reasons), promising)


def _unit(number: str) -> float | None:
    """A stated score on the 0-1 scale: a decimal up to 1 as it is, else tenths up to 10; None above 10."""
    value = float(number)
    if "." in number and value <= 1.0:
        return value
    return value / 10.0 if value <= 10 else None


def _in_arithmetic(text: str, start: int, end: int) -> bool:
    """Whether the number at text[start:end] is an operand or result ("48 / 2 = 24"), not a score."""
    before, after = text[:start].rstrip()[-1:], text[end:].lstrip()[:1]
    return before in _ARITHMETIC or after in _ARITHMETIC


def _json_object(text: str) -> dict[str, Any] | None:
    """The JSON object in a reply (possibly fenced or among words); None when there is none."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        return None
    try:
        data = loads_valid(text[start:end + 1])
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def _from_json(data: dict[str, Any]) -> Evaluation | None:
    """The record in a JSON reply; None when it has no score (its other numbers are not one)."""
    raw = str(data.get("score")).strip()
    score = _unit(raw) if re.fullmatch(r"\d+(?:\.\d+)?", raw) else None
    if score is None:
        return None
    verdict = data.get("is_promising")
    if isinstance(verdict, str):
        verdict = {"true": True, "yes": True, "false": False, "no": False}.get(verdict.strip().lower())
    reasoning = data.get("reasoning")
    return Evaluation(score, _one_line(reasoning) if isinstance(reasoning, str) else "",
                      verdict if isinstance(verdict, bool) else None)


def _reasoning_in(text: str) -> str:
    """The reason a free-text reply gives: the reasoning field of a JSON reply cut short, else the reply itself."""
    m = _JSON_REASONING.search(text)
    if m is not None:
        return _one_line(m.group(1))
    # A reply that is only a number (a base model's " 7") gives no reason.
    return _one_line(text) if re.search(r"[^\W\d_]{2}", text) else ""


def _verdict_in(text: str) -> bool | None:
    """Whether a free-text reply calls the thought promising ("Promising: no", "not promising"); None: not said."""
    m = _VERDICT.search(text)
    if m is not None:
        return m.group(1).lower() in ("true", "yes")
    m = _PROSE_VERDICT.search(text)
    if m is not None:
        return m.group(1) is None
    return None


def _one_line(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_REASONING_CHARS else text[: MAX_REASONING_CHARS - 3] + "..."
