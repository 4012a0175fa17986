"""Math questions answered by programs the model writes, run in the sandbox and voted on (program of thought).

A small model that reasons in prose gets sums wrong and then grades its own wrong step 10/10.
Here a thought is a short Python program that computes the answer and prints it (as PAL does);
nothing the model says about its own program counts:

- a program that does not parse is rejected; one that fails, prints nothing or runs out of time
  in the sandbox fails its grounding (`grounding/programs.py`);
- a program's score is its answer's share of all the programs sampled for the question (the
  same program sampled twice counts twice): agreement between independent samples, the check
  self-consistency makes, counted without a model; a program whose code leaves out numbers the
  question gives counts less (`vote_weight`);
- the goal is reached only when an answer has at least `quorum` votes and no other answer has
  as many; a program alone, or a partial step, never reaches it. Until then
  the search goes on sampling while budget is left (search/continuation.py);
- the answer is what the winning program printed, never a model's paraphrase of it.
"""

from __future__ import annotations

import ast
import asyncio
import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from ..graph import NodeKind
from ..grounding.programs import ProgramAnswer, ProgramGrounder, ProgramRuns, program_text
from ..grounding.types import Grounder
from ..llm.types import Message, Prompt
from .base import Query, Task, few_shot_query
from .query import Sampled, Tally, Verdict

SYSTEM = (
    "Write a short Python program that computes the answer to the question and prints only the answer. "
    "Name the quantities in variables and let Python do every calculation. For a yes/no question print "
    "yes or no. Reply with one ```python code block and nothing else."
)
#: Invented worked examples (none is from a benchmark): a sum, a word problem, a yes/no question.
EXAMPLES: tuple[tuple[str, str], ...] = (
    ("What is 12 * 7 - 9?", "print(12 * 7 - 9)"),
    (
        "A baker makes 3 trays of 12 cookies and sells 20 of them. How many cookies are left?",
        "cookies_made = 3 * 12\ncookies_sold = 20\nprint(cookies_made - cookies_sold)",
    ),
    (
        "Is 221 a prime number?",
        "n = 221\nis_prime = n > 1 and all(n % d for d in range(2, int(n ** 0.5) + 1))\n"
        "print('yes' if is_prime else 'no')",
    ),
)
#: A program long enough for a word problem; the reply stops at its closing fence.
PROGRAM_TOKENS = 320
#: Samples that must print the same answer before it is taken as the goal (weighted: see vote_weight).
QUORUM = 3
#: The least a sample's vote counts, however few of the question's numbers its program uses.
MIN_WEIGHT = 0.25

_NUMBER = re.compile(r"[-+]?(?:\d[\d,]*\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
_ARITHMETIC = re.compile(r"\d\s*(?:[-+*/^×÷%]|\*\*)\s*\(?\s*\d")
_MATH_WORDS = re.compile(
    r"\b(?:how (?:many|much|long|far|old)|total|sum|product|difference|average|mean|percent(?:age)?|"
    r"remainder|divisible|prime|factor(?:ial)?|square root|squared|cubed|times|twice|half|"
    r"per|each|cost|costs|price|profit|spends?|spent|pays?|paid|earns?|earned|ratio|fraction|multiply|divide|"
    r"subtract|add)\b",
    re.IGNORECASE,
)


def is_math_question(text: str) -> bool:
    """True for a question that is about numbers: it holds a number and either arithmetic or a
    quantity word ("how many", "total", "prime", "per" ...). What `loom solve` routes to this task."""
    if not any(ch.isdigit() for ch in text):
        return False
    return bool(_ARITHMETIC.search(text) or _MATH_WORDS.search(text))


def canonical(printed: str | None) -> str | None:
    """An answer as compared and shown: numbers without thousands separators, units or needless
    decimals ("1,200.50" -> "1200.5", "$18" -> "18", "396.0" -> "396"); True/False as yes/no."""
    if printed is None:
        return None
    text = printed.strip().strip("'\"")
    lowered = text.lower().rstrip(".")
    if lowered in ("true", "yes"):
        return "yes"
    if lowered in ("false", "no"):
        return "no"
    numbers = _NUMBER.findall(text)
    if len(numbers) == 1 and len(text) - len(numbers[0]) <= 4:  # "$18", "18 kg", "45%": the number is the answer
        try:
            value = float(numbers[0].replace(",", ""))
        except ValueError:
            return text or None
        if not math.isfinite(value):
            return text
        if value == int(value) and abs(value) < 1e15:
            return str(int(value))
        return f"{value:.6g}" if abs(value) < 1e6 else repr(value)
    return text or None


def program_query(question: str) -> Query:
    """Ask for one program that prints the question's answer (few-shot: chat turns, or completion
    text opened at a fence); the math task's thoughts and the agent's computing steps."""
    shots = "".join(f"Question: {q}\n```python\n{program}\n```\n\n" for q, program in EXAMPLES)
    text = f"{SYSTEM}\n\n{shots}Question: {question}\n```python\n"
    turns = [Message("system", SYSTEM)]
    for q, program in EXAMPLES:
        turns += [Message("user", f"Question: {q}"), Message("assistant", f"```python\n{program}\n```")]
    turns.append(Message("user", f"Question: {question}"))
    # "\n```" ends the program in both forms: after the completion's opening fence, and at a
    # chat reply's closing one (program_text reads a block whose closing fence was cut off).
    return Query(Prompt(text=text, messages=tuple(turns)), max_tokens=PROGRAM_TOKENS, stop=("\n```",))


_EXPRESSION_SYSTEM = (
    "Write one arithmetic expression that computes the answer to the question: numbers from the question, "
    "+ - * / ** and parentheses. Reply with the expression only."
)
#: The programs' word problems again, as one expression each (invented, from no benchmark).
EXPRESSION_EXAMPLES: tuple[tuple[str, str], ...] = (
    ("Question: What is 12 * 7 - 9?", "12 * 7 - 9"),
    ("Question: A baker makes 3 trays of 12 cookies and sells 20 of them. How many cookies are left?", "3 * 12 - 20"),
    ("Question: Pens cost 3 dollars each. Tom buys 4 pens and pays with a 20 dollar bill. How much change does he "
     "get?", "20 - 4 * 3"),
)


def expression_query(question: str) -> Query:
    """Ask for one arithmetic expression that computes the answer (what a calculator can be given)."""
    return few_shot_query(_EXPRESSION_SYSTEM, EXPRESSION_EXAMPLES, f"Question: {question}", max_tokens=80,
                          stop=("\n",))


def elected(votes: Mapping[str, float], quorum: float = QUORUM) -> str | None:
    """The answer with at least `quorum` votes and more than any other; None when there is none."""
    ranked = sorted(votes.items(), key=lambda kv: -kv[1])[:2]
    if ranked and ranked[0][1] >= quorum - 1e-9 and (len(ranked) == 1 or ranked[0][1] > ranked[1][1] + 1e-9):
        return ranked[0][0]
    return None


_GIVEN = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?")


def given_numbers(question: str) -> set[float]:
    """The numbers a question gives ("$1,200" is 1200; "2nd" and "9am" are not given amounts but count too)."""
    found: set[float] = set()
    for text in _GIVEN.findall(question):
        try:
            found.add(float(text.replace(",", "")))
        except ValueError:
            continue
    return found


def literals(program: str) -> set[float]:
    """The numbers written in a program's code (comments and strings left out); empty when it does not parse."""
    try:
        tree = ast.parse(program)
    except (SyntaxError, ValueError):
        return set()
    return {float(n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, int | float) and not isinstance(n.value, bool)}


def coverage(question: str, program: str) -> float:
    """The share of the question's numbers the program's code uses (a percentage may be written as a
    fraction: 20% as 0.2); 1.0 for a question that gives none."""
    given = given_numbers(question)
    if not given:
        return 1.0
    used = {round(v, 9) for v in literals(program)}
    hits = sum(1 for v in given if round(v, 9) in used or round(v / 100, 9) in used)
    return hits / len(given)


def vote_weight(question: str, program: str) -> float:
    """What one sample of a program counts in the vote: coverage squared, at least MIN_WEIGHT.

    Measured on GSM8K dev programs of the embedded model: one that uses every number of its question
    printed the right answer 20% of the time, one that leaves some out 6% (it answered part of the
    question); a strong model may print an answer it worked out itself, so no vote counts for nothing.
    """
    return max(MIN_WEIGHT, coverage(question, program) ** 2)


@dataclass(frozen=True, slots=True)
class Ballot:
    """One computed answer in a vote: the code that computed it (a program or an expression) and how
    many samples wrote that code."""

    answer: str | None
    code: str
    times: int = 1


@dataclass(frozen=True, slots=True)
class Count:
    """A vote counted: samples per answer, weighted votes per answer, all samples, and the answer a
    quorum elected (None: none)."""

    counts: Counter[str]
    votes: dict[str, float]
    total: int
    winner: str | None

    def leader(self, answers: Sequence[str | None]) -> str | None:
        """The answer with the most votes, the earliest in `answers` of a tie; None when none was given."""
        best = max(self.votes.values(), default=None)
        return next((a for a in answers if a is not None and self.votes[a] == best), None)

    def note(self, answer: str, samples: str = "samples printed") -> str:
        """How the vote went for one answer: "3 of 5 samples printed 20", with its weighted votes when they differ."""
        line = f"{self.counts[answer]} of {self.total} {samples} {answer[:60]}"
        if abs(self.votes[answer] - self.counts[answer]) < 1e-9:
            return line
        return f"{line} (votes {self.votes[answer]:.2f}: programs that leave out numbers of the question count less)"


def count_votes(question: str, ballots: Sequence[Ballot], quorum: float = QUORUM) -> Count:
    """Count the ballots, each sample weighted by `vote_weight`; the winner has `quorum` votes and more than any
    other."""
    counts: Counter[str] = Counter()
    votes: dict[str, float] = {}
    for ballot in ballots:
        if ballot.answer is not None:
            counts[ballot.answer] += ballot.times
            votes[ballot.answer] = votes.get(ballot.answer, 0.0) + ballot.times * vote_weight(question, ballot.code)
    return Count(counts, votes, sum(b.times for b in ballots), elected(votes, quorum))


class MathTask(Task[str]):
    """A question about numbers, answered by sandboxed programs the model writes and by their agreement."""

    name = "math"
    description = "a question about numbers: programs the model writes run in the sandbox, their answers voted on"
    programmatic_answer = True
    # A step is a whole program: the recursive strategy's free-text sub-goals do not apply.
    free_text_steps = False
    # One level: a program is a whole answer. Five samples a round; the vote is counted, not asked.
    search_defaults: ClassVar[dict[str, Any]] = {"breadth": 5, "beam": 5, "max_depth": 1, "generation": "sample",
                                                  "evaluation": "vote", "reasks": 1}

    def __init__(self, runs: ProgramRuns | None = None, *, quorum: int = QUORUM) -> None:
        """runs: where the programs run (None: the sandbox with PROGRAM_LIMITS); quorum: samples that must agree."""
        if quorum < 1:
            raise ValueError(f"quorum must be at least 1; got {quorum}")
        self.runs = runs if runs is not None else ProgramRuns()
        self.quorum = quorum

    def grounders(self, problem: str) -> list[Grounder]:
        """Each program run in the sandbox: one that prints no answer fails."""
        return [ProgramGrounder(self.runs)]

    def natural_depth(self, problem: str) -> int | None:
        """A program is the whole answer."""
        return 1

    def sample(self, problem: str, steps: Sequence[str]) -> Query:
        """One program that prints the answer."""
        return program_query(problem)

    def parse_sample(self, problem: str, steps: Sequence[str], text: str) -> str | None:
        """The program in the reply, without its fences."""
        return program_text(text).strip("\n") or None

    def validate(self, problem: str, steps: Sequence[str], thought: str) -> Verdict:
        """Reject a program that is not Python (it would only fail in the sandbox)."""
        try:
            ast.parse(thought)
        except (SyntaxError, ValueError) as exc:
            line = getattr(exc, "lineno", None)
            return Verdict(False, thought, f"not Python: {type(exc).__name__}" + (f" on line {line}" if line else ""))
        return Verdict(True, thought)

    def state_key(self, problem: str, steps: Sequence[str]) -> tuple[str, ...]:
        """Programs are compared as written (case and indentation matter in Python)."""
        return tuple(s.strip() for s in steps)

    def is_terminal(self, problem: str, steps: Sequence[str]) -> bool:
        """A program is a whole answer: nothing follows it."""
        return bool(steps)

    def thought_kind(self, problem: str, steps: Sequence[str]) -> NodeKind:
        """Every thought is a program."""
        return NodeKind.CODE

    async def tally(self, problem: str, steps: Sequence[str], thoughts: Sequence[Sampled]) -> Tally:
        """Run the programs; each scores its answer's share of all the samples (weighted by `vote_weight`),
        and the answer with `quorum` votes, more than any other answer, is the goal."""
        ran = await asyncio.gather(*(self.runs.run(t.thought) for t in thoughts))
        answers = [canonical(r.answer) for r in ran]
        count = count_votes(
            problem, [Ballot(a, t.thought, t.times) for a, t in zip(answers, thoughts, strict=True)], self.quorum
        )
        shares = tuple(count.votes[a] / max(1, count.total) if a is not None else 0.0 for a in answers)
        notes = tuple(
            count.note(a) if a is not None else f"no answer ({result.why_not[:80]}); {count.total} samples in all"
            for a, result in zip(answers, ran, strict=True)
        )
        return Tally(shares, frozenset(i for i, a in enumerate(answers) if a is not None and a == count.winner), notes)

    def compose_answer(self, problem: str, steps: Sequence[str], reply: str | None) -> str | None:
        """What the program printed (as `canonical` writes it); None when it printed nothing."""
        if not steps:
            return None
        ran: ProgramAnswer | None = self.runs.known(steps[-1])
        return canonical(ran.answer) if ran is not None else None
