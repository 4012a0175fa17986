"""Exact scoring rules of the benchmark data sets, as their papers' code scores them, one function per set."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from itertools import pairwise

from ..llm.text import loads_valid
from ..tasks.answers import after_marker, final_number, marked_span, normalize_answer, plain, token_f1

#: The answer readers these rules share with the task checkers (tasks/answers.py) are read from here too.
__all__ = [
    "KEYWORD_COUNTING_INVALID", "SET_INTERSECTION_UNPARSABLE", "SORTING_UNPARSABLE", "Score", "after_marker",
    "final_number", "hotpot_em", "hotpot_f1", "hotpot_span", "normalize_answer", "parse_counts", "parse_int_list",
    "plain", "score_game24", "score_gsm8k", "score_hotpotqa", "score_keyword_counting", "score_set_intersection",
    "score_sorting",
]


#: Errors charged for output that cannot be parsed, per the GoT benchmark's rules.
SORTING_UNPARSABLE = 300
SET_INTERSECTION_UNPARSABLE = 1000
KEYWORD_COUNTING_INVALID = 100

_LIST = re.compile(r"\[([^\[\]]*)\]")


@dataclass(frozen=True, slots=True)
class Score:
    """One answer's verdict: solved, for the GoT tasks the error count (lower is better), for
    HotpotQA the answer F1 (solved is then the exact match), and any partial credit the set's rule
    names (crosswords: the share of right letters and of right words)."""

    solved: bool
    errors: float | None = None
    f1: float | None = None
    #: (name, value in [0, 1]) partial scores, reported as means beside the success rate
    parts: tuple[tuple[str, float], ...] = ()


def crossword_board(answer: str | None) -> str:
    """The 25 cells an answer writes, as the ToT paper's test_output reads them: the text after the last
    'Output:' line, its last five lines as rows h1..., each row's first five space-separated tokens joined
    (upper-cased, '_' padding a short row); a row longer than five letters is refused (left empty)."""
    board = ["_"] * 25
    if not answer:
        return "".join(board)
    lines = answer.split("Output:\n")[-1].strip().split("\n")[-5:]
    for i, line in enumerate(lines):
        word = "".join(line.split(" ")[:5])
        word += "_" * (5 - len(word))
        if len(word) == 5:
            board[i * 5:(i + 1) * 5] = list(word.upper())
    return "".join(board)


def score_crosswords(gold: str, answer: str | None) -> Score:
    """The ToT paper's three measures: letters right of 25, words right of 10 (rows and columns), the whole board."""
    from ..tasks.crosswords import board_words  # deferred: `loom --help` imports this module

    board = crossword_board(answer)
    letters = sum(a == b for a, b in zip(board, gold, strict=False)) / 25
    words = sum(a == b for a, b in zip(board_words(board), board_words(gold), strict=False)) / 10
    return Score(board == gold, parts=(("letters", letters), ("words", words)))


def score_game24(numbers: Sequence[int], answer: str | None) -> Score:
    """Last line, strip 'answer:', cut at '='; the four numbers exactly once each, exactly 24."""
    from ..tasks.game24 import check_game24  # deferred: `loom --help` imports this module

    return Score(check_game24([Fraction(n) for n in numbers], answer))


def score_gsm8k(gold: str, answer: str | None) -> Score:
    """Exact match of the final number (commas and a trailing period ignored)."""
    want = final_number(gold)
    got = final_number(answer)
    return Score(want is not None and got == want)


def parse_int_list(text: str | None) -> list[int] | None:
    """The first bracketed list of integers in the text; None when there is none."""
    if not text:
        return None
    for m in _LIST.finditer(text):
        body = m.group(1).strip()
        if not body:
            return []
        try:
            return [int(x.strip()) for x in body.split(",") if x.strip()]
        except ValueError:
            continue
    return None


def score_sorting(unsorted: Sequence[int], answer: str | None) -> Score:
    """errors = sum_d |count_out(d) - count_gold(d)| + adjacent pairs out of order; unparsable = 300."""
    out = parse_int_list(answer)
    if out is None:
        return Score(False, SORTING_UNPARSABLE)
    gold = Counter(unsorted)
    have = Counter(out)
    errors = sum(abs(have[d] - gold[d]) for d in set(gold) | set(have))
    errors += sum(1 for a, b in pairwise(out) if a > b)
    return Score(out == sorted(unsorted), errors)


def score_set_intersection(gold: Sequence[int], answer: str | None) -> Score:
    """Each missing or extra element is one error; unparsable = 1000; solved iff sorted(out) == gold."""
    out = parse_int_list(answer)
    if out is None:
        return Score(False, SET_INTERSECTION_UNPARSABLE)
    want, have = Counter(gold), Counter(out)
    errors = sum((want - have).values()) + sum((have - want).values())
    return Score(sorted(out) == sorted(gold), errors)


def parse_counts(text: str | None) -> dict[str, int] | None:
    """The first JSON object in the text, as {country: count}; None when it is not valid."""
    if not text:
        return None
    start = text.find("{")
    end = text.find("}", start)
    if start < 0 or end < 0:
        return None
    try:
        obj = loads_valid(text[start:end + 1])
    except ValueError:
        return None
    if not isinstance(obj, dict) or not all(isinstance(v, int) and not isinstance(v, bool) for v in obj.values()):
        return None
    return {str(k): v for k, v in obj.items()}


def score_keyword_counting(gold: Sequence[str], answer: str | None) -> Score:
    """errors = sum over countries of |gold - out| (missing and extra count fully); invalid JSON = 100."""
    out = parse_counts(answer)
    if out is None:
        return Score(False, KEYWORD_COUNTING_INVALID)
    want = Counter(gold)
    errors = sum(abs(want.get(c, 0) - out.get(c, 0)) for c in set(want) | set(out))
    return Score(errors == 0, errors)


#: Answers the official HotpotQA F1 never gives partial credit.
_CLOSED_ANSWERS = ("yes", "no", "noanswer")
#: The span an answer gives (tasks/answers.marked_span): what HotpotQA's rules score.
hotpot_span = marked_span


def hotpot_em(prediction: str, gold: str) -> bool:
    """Official answer exact match: the normalized strings are equal."""
    return normalize_answer(prediction) == normalize_answer(gold)


def hotpot_f1(prediction: str, gold: str) -> float:
    """Official answer F1 over normalized whitespace tokens; 0 if yes / no / noanswer is on a side and they differ."""
    pred, want = normalize_answer(prediction), normalize_answer(gold)
    if (pred in _CLOSED_ANSWERS or want in _CLOSED_ANSWERS) and pred != want:
        return 0.0
    return token_f1(pred, want)


def score_hotpotqa(gold: str, answer: str | None) -> Score:
    """Official HotpotQA answer EM (solved) and F1 of the answer's span."""
    span = hotpot_span(answer)
    return Score(bool(span) and hotpot_em(span, gold), f1=hotpot_f1(span, gold) if span else 0.0)
