"""Arithmetic in free text, checked exactly: `17 * 23 + 5 = 396` is right, `= 451` is wrong.

A thought written in words often shows its arithmetic as equations. Each `=` with a number or an
arithmetic expression on both sides, at least one side with an operator (+ - * / × ÷, parentheses
allowed), is a claim; both sides are computed as exact fractions (`grounding/arith.py`). A side
written as a decimal counts as the other side rounded to that many places (`10 / 3 = 3.33` is
right); a whole number must be exact. Numbers with thousands separators, units or currency signs,
variables, and sides that go on in words or LaTeX (`3 times 4 = 12`, `\\frac{1}{5} \\times 600 = 120`)
are not read (the claim is skipped, not failed).

No model is involved, so a wrong claim is certain: verified is False (confidence 1) when any claim
is wrong. Right arithmetic proves the arithmetic, not the step (`2 + 2 = 4, so Paris`), so, as with
the consistency check, it never boosts: verified is None (inconclusive, the score is kept) with the
claims counted as passed. A thought without claims is not grounded.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from fractions import Fraction

from .arith import ExpressionError, evaluate, fmt
from .types import GroundingResult, Thought, join_evidence, not_grounded

# What an arithmetic side may contain: digits, a decimal point, spaces, operators, parentheses.
_SIDE_CHARS = frozenset("0123456789.()+-*/×÷ \t")
_OPERATOR = re.compile(r"[0-9)]\s*[-+*/×÷]\s*[-(]*[0-9(]")
_DECIMAL = re.compile(r"\s*-?\d+\.(\d+)\s*")
#: Longer sides are not arithmetic a thought states (and would only cost time).
MAX_SIDE_CHARS = 200


@dataclass(frozen=True, slots=True)
class Equation:
    """One `left = right` claim and whether it holds."""

    left: str
    right: str
    left_value: Fraction
    right_value: Fraction
    holds: bool

    def __str__(self) -> str:
        return f"{self.left} = {self.right}"


def equations(text: str) -> list[Equation]:
    """The arithmetic claims a text makes, in order (see the module docstring for what counts)."""
    found: list[Equation] = []
    for at in (i for i, ch in enumerate(text) if ch == "="):
        if text[at - 1:at] in ("=", "<", ">", "!") or text[at + 1:at + 2] == "=":
            continue  # a comparison or a code operator, not a stated result
        start = at
        while start > 0 and text[start - 1] in _SIDE_CHARS:
            start -= 1
        end = at + 1
        while end < len(text) and text[end] in _SIDE_CHARS:
            end += 1
        # A sentence's full stop or an abbreviation's dot is not part of a number.
        while start < at and text[start] in ". \t":
            start += 1
        while end > at + 1 and text[end - 1] in ". \t":
            end -= 1
        if _runs_on(text, start - 1, text[start:start + 1]) or _runs_on(text, end, text[end - 1:end]):
            continue  # part of a longer token: 1,000, $5, x2, 8%
        if _continues(text[:start], before=True) or _continues(text[end:], before=False):
            continue  # a side goes on in words or LaTeX (`\frac{1}{5} \times 600 = 120`): not all of it is here
        left, right = _balanced(text[start:at], leading=True), _balanced(text[at + 1:end], leading=False)
        if not left or not right or len(left) > MAX_SIDE_CHARS or len(right) > MAX_SIDE_CHARS:
            continue
        if not (_OPERATOR.search(left) or _OPERATOR.search(right)):
            continue  # `x = 5`, `1 = 1`: no arithmetic to check
        try:
            left_value, _ = evaluate(left)
            right_value, _ = evaluate(right)
        except (ExpressionError, ValueError, ZeroDivisionError):
            continue
        found.append(Equation(left, right, left_value, right_value, _agree(left, left_value, right, right_value)))
    return found


def _runs_on(text: str, beside: int, edge: str) -> bool:
    """Whether a number at a side's edge runs on into the character beside it (1,000, $5, x2, 8%)."""
    if not edge.isdigit() or not 0 <= beside < len(text):
        return False
    outside = text[beside]
    if outside == ",":  # a thousands separator, not a comma between clauses
        return text[beside - 1:beside].isdigit() and text[beside + 1:beside + 2].isdigit()
    return outside.isalnum() or outside in "_$€£%'\""


#: Words and LaTeX commands that carry a calculation on past what this module reads.
_WORD_OPERATORS = frozenset({"times", "cdot", "div", "x", "of", "plus", "minus", "over", "by", "frac", "sqrt"})
_LAST_WORD = re.compile(r"\\?([A-Za-z]+)\s*$")
_FIRST_WORD = re.compile(r"\s*\\?([A-Za-z]+)")


def _continues(beside: str, *, before: bool) -> bool:
    """Whether the text beside a side carries its calculation on (an operator word, a LaTeX group)."""
    if before:
        stripped = beside.rstrip()
        if stripped.endswith("}"):
            return True
        word = _LAST_WORD.search(stripped)
    else:
        if beside.lstrip().startswith(("\\", "{")):
            return True
        word = _FIRST_WORD.match(beside)
    return word is not None and word.group(1).lower() in _WORD_OPERATORS


def _balanced(side: str, *, leading: bool) -> str:
    """A side cut to its balanced part: the left side loses unmatched `(` at its start and `)` of
    a sentence around it; the right side loses what an unmatched `)` closes."""
    side = side.strip()
    if leading:
        while side.count("(") > side.count(")") and side.startswith("("):
            side = side[1:].strip()
        while side.startswith(")"):
            side = side[1:].strip()
    else:
        while side.count(")") > side.count("(") and side.endswith(")"):
            side = side[:-1].strip()
        while side.endswith("("):
            side = side[:-1].strip()
    return side if side.count("(") == side.count(")") else ""


def _agree(left: str, left_value: Fraction, right: str, right_value: Fraction) -> bool:
    """Equal exactly, or equal to the decimal places one side is written with."""
    if left_value == right_value:
        return True
    for written, other in ((right, left_value), (left, right_value)):
        decimal = _DECIMAL.fullmatch(written)
        if decimal:
            places = len(decimal.group(1))
            value = Fraction(written.strip())
            if abs(other - value) <= Fraction(1, 2 * 10**places):
                return True
    return False


class ArithmeticGrounder:
    """Fails a thought whose stated arithmetic is wrong (right arithmetic leaves its score as it is)."""

    def __init__(self, *, name: str = "arithmetic") -> None:
        self.name = name

    def can_ground(self, thought: Thought) -> bool:
        """True when the thought states at least one equation it can check."""
        return "=" in thought.content and bool(equations(thought.content))

    async def ground(self, thought: Thought) -> GroundingResult:
        """Compute both sides of every equation exactly (synchronous: no I/O)."""
        started = time.perf_counter()
        found = equations(thought.content)
        if not found:
            return not_grounded(self.name, "arithmetic: no equation to check")
        wrong = [e for e in found if not e.holds]
        elapsed_ms = int((time.perf_counter() - started) * 1000)
        details = {"equations": [{"claim": str(e), "holds": e.holds, "left": fmt(e.left_value),
                                  "right": fmt(e.right_value)} for e in found]}
        if not wrong:
            return GroundingResult(self.name, True, None,
                                   f"arithmetic: {len(found)} equation(s), all exact (the step itself is not judged)",
                                   0.0, elapsed_ms=elapsed_ms, passed=len(found), details=details)
        lines = [f"arithmetic: {len(wrong)} of {len(found)} equation(s) wrong"]
        lines += [f"wrong: {e} (the left side is {fmt(e.left_value)}, the right side {fmt(e.right_value)})"
                  for e in wrong]
        return GroundingResult(self.name, True, False, join_evidence(lines), 1.0, elapsed_ms=elapsed_ms,
                               score=1.0 - len(wrong) / len(found), passed=len(found) - len(wrong),
                               failed=len(wrong), details=details)
