"""Code generation: each thought is a whole program, grounded by running the tests the search may see.

The search samples programs, runs the visible tests on each in a sandbox (the CodeGrounder), and
when a program fails, asks for a revision that shows the model the failing test and its error.
A program that passes every visible test is a goal. The answer is the best program.

Benchmarks (HumanEval, MBPP) keep their hidden tests out of the search: the problem object the
search sees holds only the prompt and the visible tests; the hidden tests stay in the task's
private table and are used once, by `acheck_answer`, to score the program the search returns.
"""

from __future__ import annotations

import ast
import builtins
import doctest
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from ..graph import NodeKind
from ..grounding.code import CodeGrounder, extract_code
from ..grounding.sandbox import Sandbox, SandboxLimits, SandboxUnavailable, sandbox_missing
from ..grounding.testrun import run_tests
from ..grounding.types import Grounder, GroundingResult
from ..llm.types import Message, Prompt
from .base import ProblemError, Query, Task, Verdict, read_input_file

#: Where a base model's completion of a function body ends (the usual HumanEval stop set).
STOP = ("\nclass ", "\ndef ", "\n#", "\nif __name__", "\nprint(", "\nassert ", "\n```")
#: Evidence lines shown to the model when asking for a revision.
FEEDBACK_LINES = 12
#: The prior score of a program before it is tested (no model call: the tests decide).
PRIOR = 0.5


@dataclass(frozen=True, slots=True)
class CodeProblem:
    """What the search may see of a programming problem."""

    id: str
    description: str  # shown to a chat model and in results
    prompt: str  # the code a base model continues: a signature and docstring, ending where the body starts
    entry_point: str | None
    visible_tests: tuple[str, ...] = ()

    def program_from(self, text: str) -> str | None:
        """The whole program a model reply stands for (a completion of `prompt`, or full code)."""
        code = extract_code(text) if "```" in text else text
        if code is None or not code.strip():
            return None
        if self.entry_point and re.search(rf"^\s*def\s+{re.escape(self.entry_point)}\s*\(", code, re.M):
            # A full function: keep the prompt's imports, which the model may have left out.
            imports = [ln for ln in self.prompt.splitlines() if ln.startswith(("import ", "from "))]
            missing = [ln for ln in imports if ln not in code]
            return "\n".join([*missing, code.rstrip()]) + "\n"
        return (self.prompt + code).rstrip() + "\n"


@dataclass
class CodeTask(Task[CodeProblem]):
    """Write a Python function from a description and the tests it must pass (users' own problems)."""

    name: ClassVar[str] = "code"
    description: ClassVar[str] = "write a Python function; programs are run against the visible tests in a sandbox"
    programmatic_answer: ClassVar[bool] = True
    search_defaults: ClassVar[dict[str, Any]] = {
        "generation": "sample", "breadth": 3, "beam": 2, "max_depth": 3, "value_samples": 1, "temperature": 0.8,
    }

    tests: tuple[str, ...] = ()
    sandbox_limits: SandboxLimits = field(default_factory=lambda: SandboxLimits(timeout_s=10))
    max_tokens: int = 384

    def __post_init__(self) -> None:
        """SandboxUnavailable where programs cannot run: every answer is checked in the sandbox, so refuse first."""
        if (missing := sandbox_missing()) is not None:
            raise SandboxUnavailable(missing)

    # --- problem ------------------------------------------------------------------------

    def parse_problem(self, text: str) -> CodeProblem:
        """The user's description, with the function name taken from the tests."""
        text = text.strip()
        if not text:
            raise ProblemError("empty problem: describe the function to write, e.g. \"write a function add(a, b) ...\"")
        entry = entry_point_of(self.tests)
        shown = "".join(f"# {line}\n" for t in self.tests for line in t.splitlines())
        header = f"# {' '.join(text.split())}\n" + (f"# It must pass these tests:\n{shown}" if shown else "")
        prompt = header + (f"\ndef {entry}(" if entry else "\n")
        return CodeProblem("user", text, prompt, entry, tuple(self.tests))

    def root_content(self, problem: CodeProblem) -> str:
        """The problem as the graph shows it."""
        return problem.description

    def describe(self, problem: CodeProblem) -> dict[str, Any]:
        """The problem id, entry point and how many tests the search sees."""
        return {"id": problem.id, "entry_point": problem.entry_point, "visible_tests": len(problem.visible_tests)}

    def sandbox(self) -> Sandbox:
        """The sandbox that runs this task's programs (standard library only)."""
        # No installed packages: their data files (a benchmark's hidden tests) stay out of reach.
        return Sandbox(self.sandbox_limits, site_packages=False)

    # --- grounding ----------------------------------------------------------------------

    def grounders(self, problem: CodeProblem) -> list[Grounder]:
        """Run the visible tests on each program."""
        return [CodeGrounder(problem.visible_tests, self.sandbox(), entry_point=problem.entry_point,
                             prefix=problem.prompt)]

    def grounded_goal(self, problem: CodeProblem, steps: Sequence[str], result: GroundingResult) -> bool:
        """A program that passes every visible test (and there was at least one) solves the problem."""
        return result.verified is True and result.failed == 0 and result.passed > 0

    # --- generate -----------------------------------------------------------------------

    def _query(self, problem: CodeProblem, text: str, request: str) -> Query:
        messages = (
            Message("system", "You are a careful Python programmer. Reply with code only."),
            Message("user", request + "\n\nReply with the complete Python code in one ```python block."),
        )
        return Query(Prompt(text=text, messages=messages), max_tokens=self.max_tokens, stop=STOP)

    def sample(self, problem: CodeProblem, steps: Sequence[str]) -> Query:
        """One program per sample: a base model continues the prompt, a chat model writes the code."""
        request = f"{problem.description}\n\nComplete this code:\n```python\n{problem.prompt}\n```"
        if problem.visible_tests:
            request += "\n\nIt must pass:\n" + "\n".join(problem.visible_tests)
        return self._query(problem, problem.prompt, request)

    def revise(self, problem: CodeProblem, steps: Sequence[str], feedback: str) -> Query | None:
        """Show the failing program's test errors and ask for a corrected program."""
        lines = [ln for ln in feedback.strip().splitlines() if ln.strip()][:FEEDBACK_LINES]
        comment = "".join(f"# {ln}\n" for ln in lines)
        text = f"# An earlier version failed its tests:\n{comment}# Corrected version:\n{problem.prompt}"
        request = (
            f"{problem.description}\n\nThis code:\n```python\n{steps[-1].rstrip()}\n```\n"
            f"fails its tests:\n{chr(10).join(lines)}\n\nWrite a corrected version."
        )
        return self._query(problem, text, request)

    def parse_sample(self, problem: CodeProblem, steps: Sequence[str], text: str) -> str | None:
        """The program the reply stands for (None when it holds no code)."""
        return problem.program_from(text)

    def validate(self, problem: CodeProblem, steps: Sequence[str], thought: str) -> Verdict:
        """Every program is kept: the grounder reports syntax errors as evidence for a revision."""
        return Verdict(True, thought)

    def state_key(self, problem: CodeProblem, steps: Sequence[str]) -> Any:
        """Programs that differ only in whitespace are the same state."""
        return " ".join(steps[-1].split()) if steps else ""

    def thought_kind(self, problem: CodeProblem, steps: Sequence[str]) -> NodeKind:
        """Every thought is code."""
        return NodeKind.CODE

    def exact_value(self, problem: CodeProblem, steps: Sequence[str]) -> float | None:
        """A neutral prior, with no model call: running the tests (grounding) moves it."""
        return PRIOR

    # --- answer -------------------------------------------------------------------------

    def compose_answer(self, problem: CodeProblem, steps: Sequence[str], reply: str | None) -> str | None:
        """The best program."""
        return steps[-1] if steps else None

    async def acheck_answer(self, problem: CodeProblem, answer: str | None) -> bool | None:
        """Whether the returned program passes the user's tests (None when there are none)."""
        if answer is None or not problem.visible_tests:
            return None
        check = "\n".join(problem.visible_tests)
        return await passes(self.sandbox(), answer, check)


async def passes(sandbox: Sandbox, program: str, check: str, *, names: Collection[str] | None = None) -> bool:
    """True when the check code, run by the sandbox's test runner against the program, passes.

    `names`: the program's names the check may use (None: all but the builtins', see run_tests).
    """
    run = await run_tests(sandbox, program, [check], names=names)
    return run.all_passed and run.passed == 1


# --- tests the search may see ---------------------------------------------------------------

_CALL_ARROW = re.compile(
    r"^\s*(?P<call>[A-Za-z_]\w*\(.*\))\s*(?:==>|=>|➞|->|==|=|should return|returns?)\s*(?P<want>.+?)\s*$"
)


def docstring_tests(prompt: str, entry_point: str) -> tuple[str, ...]:
    """Asserts made from the examples in a function's docstring (doctest `>>>` and `f(x) ➞ y` lines)."""
    tests: list[str] = []
    for example in doctest.DocTestParser().get_examples(prompt):
        # The docstring's closing quotes follow the last example's output without a blank line.
        source, want = example.source.strip(), example.want.split('"""')[0].split("'''")[0].strip()
        if entry_point in source and want and _is_test_expr(source, entry_point) and _is_test_expr(want, entry_point):
            tests.append(f"assert {source} == {want}")
    if not tests:
        for line in prompt.splitlines():
            m = _CALL_ARROW.match(line)
            if m is None:
                continue
            call, want = m.group("call"), m.group("want")
            if (
                call.startswith(entry_point + "(")
                and _is_test_expr(call, entry_point)
                and _is_test_expr(want, entry_point)
            ):
                tests.append(f"assert {m.group('call')} == {m.group('want')}")
    return tuple(dict.fromkeys(tests))


def _is_test_expr(text: str, entry_point: str) -> bool:
    """An expression that names nothing but the function and builtins (`true` or `a` in a
    docstring's prose would make a test that fails with NameError whatever the program)."""
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        return False
    return all(
        n.id == entry_point or n.id in vars(builtins) for n in ast.walk(tree) if isinstance(n, ast.Name)
    )


def entry_point_of(tests: Sequence[str]) -> str | None:
    """The function the tests call: the first called name that the tests do not define themselves."""
    defined: set[str] = set()
    called: list[str] = []
    for test in tests:
        try:
            tree = ast.parse(test)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                defined.add(node.name)
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                called.append(node.func.id)
    for name in called:
        if name not in defined and name not in vars(builtins) and not name.startswith("test_"):
            return name
    return None


def split_tests(source: str) -> tuple[str, ...]:
    """A test file cut into tests: each top-level assert, and each `def test_*` with a call to it.

    Imports and other top-level statements are kept in front of every test.
    """
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise ProblemError(f"the tests file does not parse: line {exc.lineno}: {exc.msg}") from None
    lines = source.splitlines()

    def text(node: ast.stmt) -> str:
        return "\n".join(lines[node.lineno - 1 : node.end_lineno])

    setup = [text(n) for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    tests: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.Assert):
            tests.append(text(node))
        elif isinstance(node, ast.FunctionDef) and node.name.startswith("test"):
            tests.append(f"{text(node)}\n{node.name}()")
    if not tests:
        raise ProblemError("the tests file has no tests: write top-level `assert` lines or `def test_...()` functions")
    return tuple("\n".join([*setup, t]) if setup else t for t in tests)


def read_tests(path: str | Path) -> tuple[str, ...]:
    """The tests in a user's file (see split_tests); ProblemError when it cannot be read."""
    return split_tests(read_input_file(path, "the tests file"))
