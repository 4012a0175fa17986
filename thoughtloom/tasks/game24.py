"""Game of 24: combine four numbers with + - * / to make 24.

The model proposes steps ("4 + 5 = 9 (left: 6 9 10)") and values states, with the few-shot
completion prompts of the Tree-of-Thoughts paper. Every proposed step is recomputed exactly with
fractions: wrong arithmetic or a wrong "left" list is repaired, a step using numbers that are
not there is rejected. The final expression is composed from the checked steps and scored with
the benchmark's rule (exactly the four numbers, evaluating to 24 exactly).
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Sequence
from fractions import Fraction

from ..graph import NodeKind
from ..grounding.arith import OPS, ExpressionError, evaluate, fmt, parse_number
from ..llm.types import Prompt, few_shot_messages
from .base import ProblemError, Query, Task, Verdict

Numbers = tuple[Fraction, ...]
TARGET = Fraction(24)

# The paper's propose example, plus examples with three, four and two numbers: with only the
# paper's one example, the 270M base model mostly copies its numbers (2, 8, 14) instead of the
# input's (7 of 42 proposals valid on ten sample states, against 31 of 47 with these).
PROPOSE_PROMPT = """Input: 2 8 8 14
Possible next steps:
2 + 8 = 10 (left: 8 10 14)
8 / 2 = 4 (left: 4 8 14)
14 + 2 = 16 (left: 8 8 16)
2 * 8 = 16 (left: 8 14 16)
8 - 2 = 6 (left: 6 8 14)
14 - 8 = 6 (left: 2 6 8)
14 / 2 = 7 (left: 7 8 8)
14 - 2 = 12 (left: 8 8 12)
Input: 1 3 7
Possible next steps:
1 + 3 = 4 (left: 4 7)
3 * 7 = 21 (left: 1 21)
7 - 1 = 6 (left: 3 6)
7 - 3 = 4 (left: 1 4)
3 + 7 = 10 (left: 1 10)
7 * 1 = 7 (left: 3 7)
Input: 5 9 11 12
Possible next steps:
12 - 9 = 3 (left: 3 5 11)
11 + 5 = 16 (left: 9 12 16)
9 * 5 = 45 (left: 11 12 45)
12 / 11 = 12/11 (left: 5 9 12/11)
11 - 9 = 2 (left: 2 5 12)
12 + 5 = 17 (left: 9 11 17)
Input: 4 6
Possible next steps:
4 * 6 = 24 (left: 24)
6 - 4 = 2 (left: 2)
4 + 6 = 10 (left: 10)
Input: {input}
Possible next steps:
"""

# The paper's value prompt, with a blank line after each example so that a base model also ends
# its own verdict with one and the "\n\n" stop cuts the reply short.
VALUE_PROMPT = """Evaluate if given numbers can reach 24 (sure/likely/impossible)

10 14
10 + 14 = 24
sure

11 12
11 + 12 = 23
12 - 11 = 1
11 * 12 = 132
11 / 12 = 0.91
impossible

4 4 10
4 + 4 + 10 = 8 + 10 = 18
4 * 10 - 4 = 40 - 4 = 36
(10 - 4) * 4 = 6 * 4 = 24
sure

4 9 11
9 + 11 + 4 = 20 + 4 = 24
sure

5 7 8
5 + 7 + 8 = 12 + 8 = 20
(8 - 5) * 7 = 3 * 7 = 21
I cannot obtain 24 now, but numbers are within a reasonable range
likely

5 6 6
5 + 6 + 6 = 17
(6 - 5) * 6 = 1 * 6 = 6
I cannot obtain 24 now, but numbers are within a reasonable range
likely

10 10 11
10 + 10 + 11 = 31
(11 - 10) * 10 = 10
10 10 10 are all too big
impossible

1 3 3
1 * 3 * 3 = 9
(1 + 3) * 3 = 12
1 3 3 are all too small
impossible

{input}
"""

CHAT_SYSTEM = (
    "You play the Game of 24: combine the numbers with + - * / (each number used exactly once) "
    "to reach 24. Answer only in the format shown."
)
PROPOSE_SYSTEM = CHAT_SYSTEM + " List possible next steps, one per line, as 'a op b = c (left: numbers left)'."
VALUE_SYSTEM = (
    "Evaluate if the given numbers can reach 24 with + - * /, each number used exactly once. Try a few "
    "combinations, one per line, then end with one word: sure, likely or impossible."
)


def _examples(prompt: str, split: str, cue: str) -> list[tuple[str, str]]:
    """The worked examples of a few-shot prompt as (question, answer) pairs, for its chat form."""
    body = prompt[: prompt.index("{input}")]
    out = []
    for block in re.split(split, body):
        question, _, answer = block.strip().partition("\n")
        if question and answer:  # a prompt's one-line header has no answer: it is not an example
            out.append((question, f"{cue}{answer.strip()}"))
    return out


# One source of examples for both forms: the chat turns are cut from the paper's prompts.
PROPOSE_EXAMPLES = _examples(PROPOSE_PROMPT, r"\n(?=Input: )", "")
VALUE_EXAMPLES = _examples(VALUE_PROMPT, r"\n\n", "")

# Normalized from the paper's value map (sure 20, likely 1, impossible 0.001) to [0, 1], with
# "likely" raised so that one hesitant sample does not bury a state.
VALUE_WORDS = {"sure": 1.0, "likely": 0.3, "impossible": 0.0}
VERDICTS = tuple(VALUE_WORDS)

_NUM = r"-?\d+(?:\.\d+)?(?:/\d+)?"
_STEP = re.compile(
    rf"^\s*(?:\d+[.)]\s+)?({_NUM})\s*([-+*/×x÷])\s*({_NUM})\s*=\s*({_NUM})?"
)
_LEFT = re.compile(r"\(left:\s*([^)]*)\)")
_VALUE = re.compile(r"\b(sure|likely|impossible)\b", re.IGNORECASE)
_OP_NORMAL = {"×": "*", "x": "*", "÷": "/"}


def numbers_text(numbers: Sequence[Fraction]) -> str:
    """Numbers as the prompts write them, sorted."""
    return " ".join(fmt(x) for x in sorted(numbers))


def _take(pool: list[Fraction], value: Fraction) -> Fraction | None:
    """Remove and return one number equal to value (or within 0.01 of it, for a decimal rendering
    of a fraction: the exact fraction is returned); None when there is none."""
    for i, x in enumerate(pool):
        if x == value:
            return pool.pop(i)
    for i, x in enumerate(pool):
        if x.denominator != 1 and abs(x - value) < Fraction(1, 100):
            return pool.pop(i)
    return None


class Game24(Task[Numbers]):
    """The Game of 24 with exact step checking."""

    name = "game24"
    description = 'Game of 24: four numbers, e.g. "4 5 6 10"; reach 24 with + - * /'
    programmatic_answer = True
    search_defaults = {"breadth": 5, "beam": 5, "max_depth": 3, "value_samples": 3, "evaluation": "prior"}
    free_text_steps = False  # every step is "a op b = c (left: ...)", checked exactly
    lists_choices = True  # the legal steps of the numbers left, and the value's three words

    def parse_problem(self, text: str) -> Numbers:
        """Four integers separated by spaces."""
        tokens = text.replace(",", " ").split()
        if len(tokens) != 4:
            raise ProblemError(
                f'game24 needs exactly four numbers such as "4 5 6 10"; got {len(tokens)} in {text.strip()!r}'
            )
        try:
            numbers = tuple(Fraction(int(t)) for t in tokens)
        except ValueError:
            raise ProblemError(f'game24 needs four whole numbers such as "4 5 6 10"; got {text.strip()!r}') from None
        if any(n < 0 or n > 1000 for n in numbers):
            raise ProblemError(f"game24 numbers must be between 0 and 1000; got {text.strip()!r}")
        return numbers

    def root_content(self, problem: Numbers) -> str:
        """The four numbers."""
        return numbers_text(problem)

    def describe(self, problem: Numbers) -> dict[str, object]:
        """The numbers."""
        return {"numbers": [fmt(x) for x in problem]}

    # --- state --------------------------------------------------------------------------

    def left(self, problem: Numbers, steps: Sequence[str]) -> Numbers:
        """The numbers still to combine after the (validated) steps."""
        if not steps:
            return problem
        match = _LEFT.search(steps[-1])
        assert match, f"validated step without a left list: {steps[-1]!r}"
        return tuple(parse_number(t) for t in match.group(1).split())

    def state_key(self, problem: Numbers, steps: Sequence[str]) -> Hashable:
        """The multiset of numbers left: different orders of the same steps are one state."""
        return tuple(sorted(self.left(problem, steps)))

    def is_terminal(self, problem: Numbers, steps: Sequence[str]) -> bool:
        """One number left."""
        return len(self.left(problem, steps)) <= 1

    def is_goal(self, problem: Numbers, steps: Sequence[str]) -> bool:
        """Exactly 24 left."""
        return self.left(problem, steps) == (TARGET,)

    def natural_depth(self, problem: Numbers) -> int | None:
        """Each step combines two numbers into one: three steps for four numbers."""
        return len(problem) - 1

    def quality(self, problem: Numbers, steps: Sequence[str], score: float) -> float:
        """1 for a solution, 0 for a dead end; a partial path counts in proportion to how far it got."""
        if self.is_terminal(problem, steps):
            return 1.0 if self.is_goal(problem, steps) else 0.0
        return score * len(steps) / (len(problem) - 1)

    def thought_kind(self, problem: Numbers, steps: Sequence[str]) -> NodeKind:
        """Steps are hypotheses; a step leaving one number is a candidate solution."""
        return NodeKind.SOLUTION if self.is_terminal(problem, steps) else NodeKind.HYPOTHESIS

    # --- generate -----------------------------------------------------------------------

    def propose(self, problem: Numbers, steps: Sequence[str], k: int) -> Query:
        """The paper's few-shot propose prompt on the numbers left, with every legal step as its choices."""
        numbers = self.left(problem, steps)
        left = numbers_text(numbers)
        text = PROPOSE_PROMPT.format(input=left)
        chat = few_shot_messages(PROPOSE_SYSTEM, PROPOSE_EXAMPLES, f"Input: {left}")
        return Query(
            Prompt(text=text, messages=chat),
            max_tokens=120,
            stop=("\nInput:", "\n\n"),
            choices=legal_steps(numbers),
        )

    def sample(self, problem: Numbers, steps: Sequence[str]) -> Query:
        """The propose prompt cut to one line: one next step per sample."""
        q = self.propose(problem, steps, 1)
        return Query(q.prompt, max_tokens=24, stop=("\n",), choices=q.choices)

    def parse_proposals(self, problem: Numbers, steps: Sequence[str], text: str) -> list[str]:
        """Lines that look like a step, in order, without repeats."""
        out: list[str] = []
        for line in text.splitlines():
            line = line.strip()
            if _STEP.match(line) and line not in out:
                out.append(line)
        return out

    def parse_sample(self, problem: Numbers, steps: Sequence[str], text: str) -> str | None:
        """The first step-like line."""
        found = self.parse_proposals(problem, steps, text)
        return found[0] if found else None

    # --- check --------------------------------------------------------------------------

    def validate(self, problem: Numbers, steps: Sequence[str], thought: str) -> Verdict:
        """Recompute the step exactly; repair its result and left list, or reject it."""
        m = _STEP.match(thought)
        if not m:
            return Verdict(False, thought, "not a step of the form 'a op b = c (left: ...)'")
        a_txt, op, b_txt, claimed_txt = m.groups()
        op = _OP_NORMAL.get(op, op)
        try:
            a, b = parse_number(a_txt), parse_number(b_txt)
        except (ValueError, ZeroDivisionError):
            return Verdict(False, thought, "operands are not numbers")
        pool = list(self.left(problem, steps))
        if len(pool) < 2:
            return Verdict(False, thought, "no numbers left to combine")
        exact_a = _take(pool, a)
        exact_b = _take(pool, b) if exact_a is not None else None
        if exact_a is None or exact_b is None:
            return Verdict(
                False,
                thought,
                f"uses {fmt(a)} and {fmt(b)} but the numbers left are {numbers_text(self.left(problem, steps))}",
            )
        a, b = exact_a, exact_b  # compute with the exact numbers, not their decimal renderings
        if op == "/" and b == 0:
            return Verdict(False, thought, "division by zero")
        result = OPS[op](a, b)
        pool.append(result)
        canonical = f"{fmt(a)} {op} {fmt(b)} = {fmt(result)} (left: {numbers_text(pool)})"
        notes = []
        try:
            claimed = parse_number(claimed_txt) if claimed_txt else None
        except (ValueError, ZeroDivisionError):
            claimed = None
        if claimed is None or claimed != result:
            notes.append(f"result corrected to {fmt(result)}" + (f" (model said {claimed_txt})" if claimed_txt else ""))
        left = _LEFT.search(thought)
        # A step written without its left list (as the legal steps are) is completed, not repaired.
        if left is not None and left.group(1).split() != numbers_text(pool).split():
            notes.append(f"left corrected to {numbers_text(pool)}")
        return Verdict(True, canonical, "; ".join(notes) if notes else None)

    # --- evaluate -----------------------------------------------------------------------

    def exact_value(self, problem: Numbers, steps: Sequence[str]) -> float | None:
        """One number left: 1 if it is 24, else 0. Otherwise the model values the state."""
        left = self.left(problem, steps)
        if len(left) == 1:
            return 1.0 if left[0] == TARGET else 0.0
        return None

    def value(self, problem: Numbers, steps: Sequence[str]) -> Query:
        """The paper's few-shot value prompt on the numbers left."""
        left = numbers_text(self.left(problem, steps))
        text = VALUE_PROMPT.format(input=left)
        return Query(
            Prompt(text=text, messages=few_shot_messages(VALUE_SYSTEM, VALUE_EXAMPLES, left)),
            max_tokens=64,
            stop=("\n\n",),
            choices=VERDICTS,
        )

    def parse_value(self, problem: Numbers, steps: Sequence[str], texts: Sequence[str]) -> float:
        """Mean of the samples' verdicts (the last sure/likely/impossible in each: the reasoning comes
        first); a sample without one counts 0."""
        total = 0.0
        for text in texts:
            found = _VALUE.findall(text)
            if found:
                total += VALUE_WORDS[found[-1].lower()]
        return total / max(1, len(texts))

    # --- answer -------------------------------------------------------------------------

    def compose_answer(self, problem: Numbers, steps: Sequence[str], reply: str | None) -> str | None:
        """The expression the checked steps build, if they reach 24; else None."""
        if not self.is_goal(problem, steps):
            return None
        pool: list[tuple[Fraction, str]] = [(x, fmt(x)) for x in problem]
        for step in steps:
            m = _STEP.match(step)
            assert m
            a, op, b = parse_number(m.group(1)), m.group(2), parse_number(m.group(3))
            ea = _pop_expr(pool, a)
            eb = _pop_expr(pool, b)
            pool.append((OPS[op](a, b), f"({ea} {op} {eb})"))
        expr = pool[0][1]
        if expr.startswith("(") and expr.endswith(")"):
            expr = expr[1:-1]
        return f"{expr} = 24"

    def check_answer(self, problem: Numbers, answer: str | None) -> bool | None:
        """The benchmark rule: last line, strip 'answer:', cut at '='; the four numbers, exactly 24."""
        return check_game24(problem, answer)



def legal_steps(numbers: Sequence[Fraction]) -> tuple[str, ...]:
    """Every step the numbers allow, as the prompts begin a step: "a op b = c".

    + and * once per pair (smaller operand first), - and / both ways; no division by zero. The
    left list is left out: it follows from the step (the validator writes it), and scoring its
    tokens would triple the cost of choosing a step.
    """
    out: dict[str, None] = {}
    ordered = sorted(numbers)
    for i, a in enumerate(ordered):
        for j, b in enumerate(ordered):
            if i == j:
                continue
            for op in "+-*/":
                if (op in "+*" and i > j) or (op == "/" and b == 0):
                    continue
                result = OPS[op](a, b)
                out[f"{fmt(a)} {op} {fmt(b)} = {fmt(result)}"] = None
    return tuple(out)


def _pop_expr(pool: list[tuple[Fraction, str]], value: Fraction) -> str:
    for i, (v, e) in enumerate(pool):
        if v == value:
            del pool[i]
            return e
    for i, (v, e) in enumerate(pool):
        if v.denominator != 1 and abs(v - value) < Fraction(1, 100):
            del pool[i]
            return e
    raise AssertionError(f"validated step uses {value} not in the pool")


def check_game24(problem: Sequence[Fraction | int], answer: str | None) -> bool:
    """Score an answer with the Game of 24 rule from the benchmark's README."""
    if not answer:
        return False
    line = answer.strip().splitlines()[-1] if answer.strip() else ""
    line = re.sub(r"^\s*answer\s*:", "", line, flags=re.IGNORECASE).split("=")[0].strip()
    try:
        value, used = evaluate(line)
    except (ExpressionError, ValueError, ZeroDivisionError):
        return False
    return value == TARGET and sorted(used) == sorted(Fraction(x) for x in problem)
