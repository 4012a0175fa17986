"""The Graph-of-Thoughts paper's tasks: sorting, set intersection and keyword counting.

Each is solved by the recursive strategy the paper's way: split the input into chunks, solve the
chunks with the model, merge (programmatically by default, or by the model following the
contract's combine_instruction), and score with the paper's exact error counts
(eval/scoring.py). Instances come from the problem text, from the GoT data files by id
(--data, else got/ in the benchmark data directory that `loom data fetch` fills), or are generated from --size.
"""

from __future__ import annotations

import ast
import csv
import heapq
import io
import random
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any, ClassVar

from ..llm.types import Prompt, few_shot_messages
from .base import ProblemError, Query, Task, read_input_file
from .datadir import default_data_dir
from .recursion.contract import ChildSpec, Contract, FailurePolicy
from .recursion.hooks import Goal, Plan, RecursiveHooks, Verification

#: Errors the data README gives an unparsable output.
SORTING_UNPARSABLE = 300
INTERSECTION_UNPARSABLE = 1000
KEYWORD_INVALID = 100
#: Sizes the GoT data files hold.
DATA_SIZES = (32, 64, 128)
#: Generated sorting instances (--size N alone): the whole list is in every prompt, so far more is a mistake.
MAX_GENERATED = 10_000


def sorting_errors(output: Sequence[int] | None, unsorted: Sequence[int]) -> int:
    """The GoT sorting error count: digit-count differences plus descending adjacent pairs."""
    if output is None:
        return SORTING_UNPARSABLE
    got, gold = Counter(output), Counter(unsorted)
    count_errors = sum(abs(got[d] - gold[d]) for d in set(got) | set(gold))
    return count_errors + sum(1 for a, b in pairwise(output) if a > b)


def intersection_errors(output: Sequence[int] | None, gold: Sequence[int]) -> int:
    """The GoT set-intersection error count: each missing or extra element is one error."""
    if output is None:
        return INTERSECTION_UNPARSABLE
    return len(set(gold) - set(output)) + len(set(output) - set(gold)) + (len(output) - len(set(output)))


def keyword_errors(output: dict[str, int] | None, gold: dict[str, int]) -> int:
    """The GoT keyword-counting error count: summed count differences (missing / extra count fully)."""
    if output is None:
        return KEYWORD_INVALID
    return sum(abs(gold.get(k, 0) - output.get(k, 0)) for k in set(gold) | set(output))


def _int_list(text: str) -> list[int] | None:
    m = re.search(r"\[([^\[\]]*)\]", text)
    body = m.group(1) if m else text
    items = [x for x in re.split(r"[\s,]+", body.strip()) if x]
    if not items or not all(re.fullmatch(r"-?\d+", x) for x in items):
        return None
    return [int(x) for x in items]


def _names(text: str) -> list[str]:
    """The data's country list: `[Norway, United States, ...]` (names unquoted)."""
    return [x.strip().strip("'\"") for x in text.strip().strip("[]").split(",") if x.strip()]


def _fmt(xs: Sequence[int]) -> str:
    return "[" + ", ".join(map(str, xs)) + "]"


def find_got_file(data: Path | None, folder: str, name: str) -> Path:
    """A GoT data file: under --data (the file, its folder or the got folder), else in the benchmark data directory."""
    if data is not None:
        candidates = [data, data / name, data / folder / name]
    else:
        candidates = [default_data_dir() / "got" / folder / name]
    for c in candidates:
        if c.is_file():
            return c
    if data is not None:
        raise ProblemError(f"GoT data {name} not found at {data}; pass --data PATH (the got folder or the file)")
    # The data set's name in `loom data`: sorting_064.csv is sorting64, countries.csv keyword_counting.
    size = name.rsplit("_", 1)[-1].split(".")[0]
    dataset = f"{folder}{int(size)}" if size.isdigit() else folder
    raise ProblemError(f"GoT data {name} not found at {candidates[0]}; run `loom data fetch {dataset}` "
                       "or pass --data PATH (the got folder or the file)")


def _row(path: Path, item_id: str) -> dict[str, str]:
    for row in csv.DictReader(io.StringIO(read_input_file(path, "GoT data"), newline="")):
        if row.get("ID", row.get("id")) == item_id:
            return row
    raise ProblemError(f"no item with ID {item_id} in {path}")


def _query(header: str, shots: Sequence[tuple[str, str]], ask: str, system: str, max_tokens: int) -> Query:
    """One few-shot prompt in both forms: "Input: ... Output: ..." text for a base model, and the
    same examples as earlier chat turns for an instruct model."""
    examples = "".join(f"Input: {q}\nOutput: {a}\n\n" for q, a in shots)
    return Query(
        Prompt(text=f"{header}\n\n{examples}Input: {ask}\nOutput:",
               messages=few_shot_messages(system, [(f"Input: {q}", a) for q, a in shots], f"Input: {ask}")),
        max_tokens=max_tokens, stop=("\n\n", "\nInput"),
    )


# --- sorting -----------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class NumbersProblem:
    """A list of digits to sort (the gold answer kept when the instance came from the data)."""

    numbers: tuple[int, ...]
    item_id: str | None = None


_SORT_SHOTS = [
    ([5, 1, 0, 7, 3, 3, 9, 2], [0, 1, 2, 3, 3, 5, 7, 9]),
    ([8, 8, 1, 4, 6, 0, 2, 5, 9, 1, 3, 7], [0, 1, 1, 2, 3, 4, 5, 6, 7, 8, 8, 9]),
    ([2, 9, 4, 4, 0, 6, 1, 8], [0, 1, 2, 4, 4, 6, 8, 9]),
]


class SortingHooks(RecursiveHooks):
    """Sorting by chunks: split into sub-lists, sort each with the model, merge, count errors exactly."""

    model_plans = False
    solve_quality = 0.2
    default_policy = FailurePolicy(retry=1, replan=0, backtrack=2)

    def __init__(self, problem: NumbersProblem, leaf: int, merge: str) -> None:
        super().__init__(_fmt(problem.numbers))
        self.problem, self.leaf, self.merge = problem, leaf, merge

    def _goal(self, numbers: Sequence[int]) -> Goal:
        return Goal(f"Sort the list {_fmt(numbers)}", spec=self._spec(), payload=tuple(numbers))

    def _spec(self) -> ChildSpec:
        # No fixed length: a child that drops or repeats a digit is typed but counted as errors.
        return ChildSpec("list[integer]", minimum=0, maximum=9)

    def root_goal(self) -> Goal:
        """The whole list."""
        return self._goal(self.problem.numbers)

    def equivalent(self, a: Goal, b: Goal) -> bool:
        """Two sorting goals are one goal when they sort the same multiset."""
        return sorted(a.payload) == sorted(b.payload)

    def render(self, goal: Goal, value: Any) -> str:
        """A list as `[1, 2, 3]`."""
        return _fmt(value)

    def plans(self, goal: Goal, depth: int) -> list[Plan]:
        """Chunk splits: 16-number chunks first (the paper's), then 8; none for a list of 16 or fewer."""
        numbers: tuple[int, ...] = goal.payload
        out = []
        for quality, size in ((0.9, 16), (0.7, 8)):
            if len(numbers) <= max(size, self.leaf) or len(numbers) <= self.leaf:
                continue
            chunks = [numbers[i:i + size] for i in range(0, len(numbers), size)]
            contract = Contract(
                tuple(self._spec() for _ in chunks),
                "Merge the sorted sub-lists into one sorted list, keeping every number as often as it occurs.",
                "The result holds every input digit exactly as often as the input and never decreases (0 errors).",
                FailurePolicy(retry=1, replan=0, backtrack=1),
            )
            out.append(Plan("decompose", tuple(self._goal(c) for c in chunks), contract, quality))
        return out

    def allow_direct(self, goal: Goal, depth: int) -> bool:
        """Leaves are solved by the model; a long list may be tried directly as a last resort."""
        return True

    def spec(self, goal: Goal) -> ChildSpec:
        """Every goal's result is a list of digits."""
        return self._spec()

    def solve_query(self, goal: Goal, attempt: int, feedback: str | None) -> Query:
        """Few-shot sorting; a retry rotates the examples so it is a new prompt, not a cached reply."""
        shots = _SORT_SHOTS[attempt % len(_SORT_SHOTS):] + _SORT_SHOTS[: attempt % len(_SORT_SHOTS)]
        system = "Sort the list of digits in ascending order. Reply with the sorted list only."
        return _query("Sort each list of digits in ascending order.", [(_fmt(a), _fmt(b)) for a, b in shots],
                      _fmt(goal.payload), system, 3 * len(goal.payload) + 8)

    def parse_result(self, goal: Goal, text: str) -> Any:
        """The first list of integers in the reply."""
        return _int_list(text)

    def combine(self, goal: Goal, plan: Plan, results: Sequence[Any]) -> Any | None:
        """Merge sorted lists exactly (merge="program"); None lets the model merge."""
        if self.merge != "program":
            return None
        # heapq.merge assumes sorted inputs: an unsorted child's errors carry over, as in the paper.
        return list(heapq.merge(*results))

    def combine_query(self, goal: Goal, plan: Plan, results: Sequence[Any], feedback: str | None) -> Query:
        """Few-shot merge of sorted lists."""
        shots = [("[0, 2, 5, 9] [1, 2, 3, 8]", "[0, 1, 2, 2, 3, 5, 8, 9]"),
                 ("[1, 4, 4, 7] [0, 3, 6, 6]", "[0, 1, 3, 4, 4, 6, 6, 7]")]
        system = "Merge the sorted lists into one sorted list. Reply with the list only."
        return _query("Merge the sorted lists into one sorted list.", shots, " ".join(_fmt(r) for r in results),
                      system, 3 * len(goal.payload) + 8)

    def verify(self, goal: Goal, value: Any) -> Verification:
        """Exact: the GoT error count against the goal's own input."""
        errors = sorting_errors(value, goal.payload)
        return Verification(errors == 0, max(0.0, 1.0 - errors / max(1, len(goal.payload))),
                            (f"errors={errors}",), errors)

    def errors(self, goal: Goal, value: Any) -> int:
        """The GoT error count of a root result."""
        return sorting_errors(value, goal.payload)


class SortingTask(Task[NumbersProblem]):
    """Sort a list of digits 0-9 (GoT sorting); exact error count."""

    name: ClassVar[str] = "sorting"
    description: ClassVar[str] = (
        "sort digits 0-9 (GoT): a list, an ID from the data (--size 32/64/128), or none with --size"
    )
    search_defaults: ClassVar[dict[str, Any]] = {"strategy": "recursive", "breadth": 2, "beam": 2, "max_depth": 2,
                                                 "temperature": 0.3}

    def __init__(
        self, size: int | None = None, data: Path | None = None, leaf: int = 16, merge: str = "program"
    ) -> None:
        if merge not in ("program", "model"):
            raise ValueError(f"merge must be program or model; got {merge!r}")
        self.size, self.data, self.leaf, self.merge = size, data, leaf, merge

    def parse_problem(self, text: str) -> NumbersProblem:
        """A list of digits, an ID in the data file of --size, or nothing: a generated list of --size digits."""
        text = text.strip()
        if not text:
            if self.size is None:
                raise ProblemError(
                    "sorting needs a list of digits, an ID with --size, or --size N alone to generate one"
                )
            if self.size > MAX_GENERATED:
                raise ProblemError(f"--size {self.size:,} is too large to generate; at most {MAX_GENERATED:,} digits")
            rng = random.Random(self.size)  # the same generated instance for a size every time
            return NumbersProblem(tuple(rng.randrange(10) for _ in range(self.size)), f"generated-{self.size}")
        if re.fullmatch(r"\d+", text):
            size = self.size or 32
            if size not in DATA_SIZES:
                raise ProblemError(f"the GoT sorting data has sizes 32, 64 and 128, not {size}")
            row = _row(find_got_file(self.data, "sorting", f"sorting_{size:03d}.csv"), text)
            return NumbersProblem(tuple(ast.literal_eval(row["Unsorted"])), f"sorting_{size:03d}/{text}")
        numbers = _int_list(text)
        if numbers is None or len(numbers) < 2 or not all(0 <= x <= 9 for x in numbers):
            raise ProblemError(f'sorting takes a list of at least two digits 0-9, e.g. "[3, 1, 2]"; got {text[:60]!r}')
        if self.size is not None and len(numbers) != self.size:
            raise ProblemError(f"--size {self.size} but the list has {len(numbers)} numbers")
        return NumbersProblem(tuple(numbers))

    def root_content(self, problem: NumbersProblem) -> str:
        """The list to sort."""
        return f"Sort the list {_fmt(problem.numbers)}"

    def describe(self, problem: NumbersProblem) -> dict[str, Any]:
        """The instance's id and size."""
        return {"id": problem.item_id, "size": len(problem.numbers)}

    def recursion(self, problem: NumbersProblem) -> RecursiveHooks:
        """Chunk, sort, merge."""
        return SortingHooks(problem, self.leaf, self.merge)

    def is_goal(self, problem: NumbersProblem, steps: Sequence[str]) -> bool:
        """The last step is the sorted list."""
        return bool(steps) and _int_list(steps[-1]) == sorted(problem.numbers)

    def check_answer(self, problem: NumbersProblem, answer: str | None) -> bool | None:
        """Solved iff the output is the sorted input."""
        return answer is not None and _int_list(answer) == sorted(problem.numbers)

    def errors(self, problem: NumbersProblem, answer: str | None) -> int:
        """The GoT error count of an answer (300 when unparsable)."""
        return sorting_errors(_int_list(answer) if answer is not None else None, problem.numbers)


# --- set intersection --------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class SetsProblem:
    """Two sets of integers to intersect."""

    first: tuple[int, ...]
    second: tuple[int, ...]
    item_id: str | None = None


class IntersectionHooks(RecursiveHooks):
    """Intersect by chunks of the second set (the paper's split), union the partial results."""

    model_plans = False
    solve_quality = 0.2
    default_policy = FailurePolicy(retry=1, replan=0, backtrack=2)

    def __init__(self, problem: SetsProblem, leaf: int) -> None:
        super().__init__(f"{_fmt(problem.first)} {_fmt(problem.second)}")
        self.problem, self.leaf = problem, leaf

    def _goal(self, second: Sequence[int]) -> Goal:
        return Goal(f"Intersect {_fmt(self.problem.first)} with {_fmt(second)}", spec=self.spec(None),
                    payload=tuple(second))

    def spec(self, goal: Goal | None) -> ChildSpec:
        """Every result is a list of integers."""
        return ChildSpec("list[integer]")

    def root_goal(self) -> Goal:
        """Both whole sets."""
        return self._goal(self.problem.second)

    def equivalent(self, a: Goal, b: Goal) -> bool:
        """The same chunk of the second set is the same goal."""
        return sorted(a.payload) == sorted(b.payload)

    def render(self, goal: Goal, value: Any) -> str:
        """A list as `[1, 2, 3]`."""
        return _fmt(value)

    def plans(self, goal: Goal, depth: int) -> list[Plan]:
        """Split the second set into chunks of 16, then 8."""
        second: tuple[int, ...] = goal.payload
        out = []
        for quality, size in ((0.9, 16), (0.7, 8)):
            if len(second) <= max(size, self.leaf):
                continue
            chunks = [second[i:i + size] for i in range(0, len(second), size)]
            contract = Contract(
                tuple(self.spec(None) for _ in chunks),
                "Take the union of the partial intersections, sorted, without repeats.",
                "Every element is in both sets and no common element is missing (0 errors).",
                FailurePolicy(retry=1, replan=0, backtrack=1),
            )
            out.append(Plan("decompose", tuple(self._goal(c) for c in chunks), contract, quality))
        return out

    def solve_query(self, goal: Goal, attempt: int, feedback: str | None) -> Query:
        """Few-shot intersection."""
        shots = [([3, 8, 1, 12, 5], [5, 9, 3, 14], [3, 5]), ([20, 4, 7, 11], [11, 2, 20, 6, 7], [7, 11, 20])]
        if attempt % 2:
            shots.reverse()
        return _query(
            "Find the numbers that are in both sets.",
            [(f"{_fmt(a)} {_fmt(b)}", _fmt(c)) for a, b, c in shots],
            f"{_fmt(self.problem.first)} {_fmt(goal.payload)}",
            "List the numbers that are in both sets. Reply with the list only.",
            3 * len(goal.payload) + 8,
        )

    def parse_result(self, goal: Goal, text: str) -> Any:
        """The first list of integers (an empty list counts)."""
        if re.search(r"\[\s*\]", text.split("\n")[0]):
            return []
        return _int_list(text)

    def combine(self, goal: Goal, plan: Plan, results: Sequence[Any]) -> Any:
        """The sorted union of the partial intersections."""
        return sorted(set().union(*map(set, results)))

    def verify(self, goal: Goal, value: Any) -> Verification:
        """Exact: the intersection recomputed from the goal's own input."""
        errors = intersection_errors(value, sorted(set(self.problem.first) & set(goal.payload)))
        return Verification(
            errors == 0, max(0.0, 1.0 - errors / max(1, len(goal.payload))), (f"errors={errors}",), errors
        )

    def errors(self, goal: Goal, value: Any) -> int:
        """The GoT error count of a root result."""
        return intersection_errors(value, sorted(set(self.problem.first) & set(self.problem.second)))


class SetIntersectionTask(Task[SetsProblem]):
    """Intersect two sets (GoT set intersection); exact error count."""

    name: ClassVar[str] = "set_intersection"
    description: ClassVar[str] = "intersect two sets (GoT): \"[..] [..]\", or an ID from the data (--size 32/64/128)"
    search_defaults: ClassVar[dict[str, Any]] = {"strategy": "recursive", "breadth": 2, "beam": 2, "max_depth": 2,
                                                 "temperature": 0.3}

    def __init__(self, size: int | None = None, data: Path | None = None, leaf: int = 16) -> None:
        self.size, self.data, self.leaf = size, data, leaf

    def parse_problem(self, text: str) -> SetsProblem:
        """Two bracketed lists, or an ID in the data file of --size (default 32)."""
        text = text.strip()
        if re.fullmatch(r"\d+", text):
            size = self.size or 32
            if size not in DATA_SIZES:
                raise ProblemError(f"the GoT set intersection data has sizes 32, 64 and 128, not {size}")
            row = _row(find_got_file(self.data, "set_intersection", f"set_intersection_{size:03d}.csv"), text)
            return SetsProblem(tuple(ast.literal_eval(row["SET1"])), tuple(ast.literal_eval(row["SET2"])),
                               f"set_intersection_{size:03d}/{text}")
        lists = re.findall(r"\[[^\[\]]*\]", text)
        parsed = [_int_list(x) for x in lists]
        if len(parsed) != 2 or any(p is None for p in parsed):
            raise ProblemError(f"set_intersection takes two lists, e.g. \"[1, 5, 9] [5, 2, 9]\"; got {text[:60]!r}")
        first, second = parsed
        assert first is not None and second is not None
        if self.size is not None and (len(first), len(second)) != (self.size, self.size):
            raise ProblemError(f"--size {self.size} but the sets have {len(first)} and {len(second)} elements")
        return SetsProblem(tuple(first), tuple(second))

    def root_content(self, problem: SetsProblem) -> str:
        """Both sets."""
        return f"Intersect {_fmt(problem.first)} with {_fmt(problem.second)}"

    def recursion(self, problem: SetsProblem) -> RecursiveHooks:
        """Split the second set, intersect the chunks, union."""
        return IntersectionHooks(problem, self.leaf)

    def is_goal(self, problem: SetsProblem, steps: Sequence[str]) -> bool:
        """The last step is the exact intersection."""
        return bool(steps) and self.check_answer(problem, steps[-1]) is True

    def check_answer(self, problem: SetsProblem, answer: str | None) -> bool | None:
        """Solved iff sorted(output) is the intersection."""
        out = _int_list(answer) if answer is not None else None
        return out is not None and sorted(out) == sorted(set(problem.first) & set(problem.second))


# --- keyword counting --------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class TextProblem:
    """A text whose country mentions are counted (gold counts when it came from the data)."""

    text: str
    gold: tuple[tuple[str, int], ...] | None = None
    item_id: str | None = None


class KeywordHooks(RecursiveHooks):
    """Count per sentence group, sum the counts (the paper's split into passages)."""

    model_plans = False
    solve_quality = 0.2
    default_policy = FailurePolicy(retry=1, replan=0, backtrack=2)

    def __init__(self, problem: TextProblem, parts: int) -> None:
        super().__init__(problem.text)
        self.problem, self.parts = problem, parts

    def spec(self, goal: Goal) -> ChildSpec:
        """Every result is an object of country -> count."""
        return ChildSpec("object[integer]")

    def root_goal(self) -> Goal:
        """The whole text."""
        return Goal(
            f"Count the countries in: {self.problem.text}", spec=ChildSpec("object[integer]"), payload=self.problem.text
        )

    def equivalent(self, a: Goal, b: Goal) -> bool:
        """The same passage is the same goal."""
        return " ".join(a.payload.split()) == " ".join(b.payload.split())

    def plans(self, goal: Goal, depth: int) -> list[Plan]:
        """Split into `parts` passages of whole sentences (at the root only)."""
        if depth > 0:
            return []
        sentences = [s for s in re.split(r"(?<=[.!?])\s+", goal.payload.strip()) if s]
        if len(sentences) < 2:
            return []
        k = min(self.parts, len(sentences))
        step = -(-len(sentences) // k)
        passages = [" ".join(sentences[i:i + step]) for i in range(0, len(sentences), step)]
        contract = Contract(
            tuple(ChildSpec("object[integer]") for _ in passages),
            "Add up the counts of each country over the passages.",
            "Every count is a whole number of at least 1.",
            FailurePolicy(retry=1, replan=0, backtrack=1),
        )
        children = tuple(
            Goal(f"Count the countries in: {p}", spec=ChildSpec("object[integer]"), payload=p) for p in passages
        )
        return [Plan("decompose", children, contract, 0.9)]

    def solve_query(self, goal: Goal, attempt: int, feedback: str | None) -> Query:
        """Few-shot counting of country names as JSON."""
        shots = [("Anna flew from Spain to Italy, then back to Spain.", '{"Spain": 2, "Italy": 1}'),
                 ("The treaty between Japan and Peru was signed in Peru.", '{"Japan": 1, "Peru": 2}')]
        return _query("Count how often each country is mentioned. Reply with JSON.", shots, str(goal.payload),
                      "Count how often each country is mentioned. Reply with a JSON object only.", 120)

    def parse_result(self, goal: Goal, text: str) -> Any:
        """The first JSON object of counts."""
        return ChildSpec("object[integer]").parse(text)

    def combine(self, goal: Goal, plan: Plan, results: Sequence[Any]) -> Any:
        """Summed counts."""
        total: Counter[str] = Counter()
        for r in results:
            total.update(r)
        return dict(sorted(total.items()))

    def verify(self, goal: Goal, value: Any) -> Verification:
        """What can be checked without the gold: whole counts of at least 1 for names that occur in the text."""
        absent = [k for k in value if k.lower() not in goal.payload.lower()]
        bad = [k for k, v in value.items() if v < 1]
        ok = not absent and not bad
        diag = ("counts plausible",) if ok else (f"not in the text: {absent[:5]}; counts below 1: {bad[:5]}",)
        return Verification(ok, 0.6 if ok else 0.1, diag)

    def errors(self, goal: Goal, value: Any) -> int | None:
        """The GoT error count against the gold counts (None for a user's text without them)."""
        if self.problem.gold is None:
            return None
        return keyword_errors(value, dict(self.problem.gold))


class KeywordCountingTask(Task[TextProblem]):
    """Count the countries a text mentions (GoT keyword counting); exact error count with the data's gold."""

    name: ClassVar[str] = "keyword_counting"
    description: ClassVar[str] = "count country mentions in a text (GoT): the text, or an ID from countries.csv"
    search_defaults: ClassVar[dict[str, Any]] = {"strategy": "recursive", "breadth": 2, "beam": 2, "max_depth": 1,
                                                 "temperature": 0.3}

    def __init__(self, data: Path | None = None, parts: int = 4) -> None:
        self.data, self.parts = data, parts

    def parse_problem(self, text: str) -> TextProblem:
        """A text, or an ID in the GoT countries file."""
        text = text.strip()
        if re.fullmatch(r"\d+", text):
            row = _row(find_got_file(self.data, "keyword_counting", "countries.csv"), text)
            gold = Counter(_names(row["Countries"]))
            return TextProblem(row["Text"], tuple(sorted(gold.items())), f"countries/{text}")
        if not text:
            raise ProblemError("keyword_counting needs a text, or an ID from the GoT countries.csv")
        return TextProblem(text)

    def root_content(self, problem: TextProblem) -> str:
        """The text."""
        return problem.text

    def recursion(self, problem: TextProblem) -> RecursiveHooks:
        """Count passages, sum."""
        return KeywordHooks(problem, self.parts)

    def check_answer(self, problem: TextProblem, answer: str | None) -> bool | None:
        """Solved iff the counts equal the gold (None without gold)."""
        if problem.gold is None:
            return None
        out = ChildSpec("object[integer]").parse(answer or "")
        return out is not None and keyword_errors(out, dict(problem.gold)) == 0

