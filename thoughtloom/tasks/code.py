"""Code generation: each thought is a whole program, grounded by running the tests the search may see.

The search samples programs, runs the visible tests on each in a sandbox (the CodeGrounder), and
when a program fails, asks for a revision that shows the model the failing test and its error.
Passing the visible tests is not enough to stop at (two or three examples let wrong programs
through): the programs that pass are also run on probe calls made from the examples' arguments
(grounding/behaviour.py), and grouped by what they return. A program is the answer once `quorum`
samples that pass the tests behave alike and more than any other group (the vote is counted, not
asked: `tally`); until then the search samples on within its budget. The answer is the best
program: one of the largest agreeing group, else the best tested.

Benchmarks (HumanEval, MBPP) keep their hidden tests out of the search: the problem object the
search sees holds only the prompt and the visible tests; the hidden tests stay in the task's
private table and are used once, by `acheck_answer`, to score the program the search returns.
"""

from __future__ import annotations

import ast
import asyncio
import builtins
import doctest
import io
import re
import tokenize
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from ..graph import NodeKind
from ..grounding.behaviour import Behaviour, agreeing_groups, behaviour_of, probe_calls
from ..grounding.code import CodeGrounder, RunKey, extract_code
from ..grounding.once import RunOnce
from ..grounding.sandbox import Sandbox, SandboxLimits, SandboxUnavailable, check_syntax, sandbox_missing
from ..grounding.testrun import TestRun, run_tests
from ..grounding.types import Grounder, GroundingResult
from ..llm.types import Message, Prompt
from .base import ProblemError, Query, Task, Verdict, read_input_file
from .query import Sampled, Tally

#: Where a base model's completion of a function body ends (the usual HumanEval stop set).
STOP = ("\nclass ", "\ndef ", "\n#", "\nif __name__", "\nprint(", "\nassert ", "\n```")
#: Evidence lines shown to the model when asking for a revision.
FEEDBACK_LINES = 12
#: The prior score of a program before it is tested (no model call: the tests decide).
PRIOR = 0.5
#: Samples passing the visible tests that must behave alike on the probes before their program is the answer.
QUORUM = 2
#: How far its group's share of the passing samples lifts a passing program's score until a quorum agrees: to 0.6 at
#: most (0.72 once grounding boosts it), below every goal threshold, so that a lone passing program never passes for
#: the goal on its score; the agreed group scores 1.
UNAGREED_LIFT = 0.1


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
    whole_answers: ClassVar[bool] = True
    # evaluation "vote": the programs are compared by running them (`tally`), no model call.
    search_defaults: ClassVar[dict[str, Any]] = {
        "generation": "sample", "breadth": 3, "beam": 2, "max_depth": 3, "value_samples": 1, "temperature": 0.8,
        "evaluation": "vote",
    }

    tests: tuple[str, ...] = ()
    sandbox_limits: SandboxLimits = field(default_factory=lambda: SandboxLimits(timeout_s=10))
    max_tokens: int = 384
    #: Samples passing the visible tests that must agree on the probes (1: the first passing program is the answer).
    quorum: int = QUORUM
    #: Each program's run (tests, then probes), shared by the grounder and the vote so that it runs once.
    _runs: RunOnce[RunKey, TestRun] = field(default_factory=RunOnce, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        """SandboxUnavailable where programs cannot run: every answer is checked in the sandbox, so refuse first."""
        if self.quorum < 1:
            raise ValueError(f"quorum must be at least 1; got {self.quorum}")
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
        """Run the visible tests on each program, and the probes after them for the vote (one run each, kept)."""
        return [self._grounder(problem)]

    def _grounder(self, problem: CodeProblem) -> CodeGrounder:
        """The grounder of this problem's programs, sharing the task's runs with the vote."""
        return CodeGrounder(problem.visible_tests, self.sandbox(), entry_point=problem.entry_point,
                            prefix=problem.prompt, probes=self.probes(problem), runs=self._runs)

    def probes(self, problem: CodeProblem) -> tuple[str, ...]:
        """The probe calls the vote compares programs on: the visible tests' calls, changed a little."""
        return probe_calls(problem.visible_tests, problem.entry_point) if problem.entry_point else ()

    def grounded_goal(self, problem: CodeProblem, steps: Sequence[str], result: GroundingResult) -> bool:
        """With a quorum of 1, a program that passes every visible test (and there was at least one) solves the
        problem; with more, only the vote (`tally`) settles it."""
        return self.quorum == 1 and result.verified is True and result.failed == 0 and result.passed > 0

    async def tally(self, problem: CodeProblem, steps: Sequence[str], thoughts: Sequence[Sampled]) -> Tally:
        """Every program's run on the visible tests and the probes (its grounding's); the largest group of passing
        programs that behave alike (at least `quorum` samples, more than any other) is the goal and scores 1, other
        passing programs a little over the prior by their group's share (`UNAGREED_LIFT`). A program that fails
        keeps the prior (grounding then lowers it); one that does not compile scores 0."""
        grounder = self._grounder(problem)
        tests = len(problem.visible_tests)

        async def behaviour(content: str) -> Behaviour | None:
            program = grounder.program(content)
            if program is None or not check_syntax(program).ok:
                return None
            # Grounded already in a search (the engine grounds before it counts): read from the shared runs.
            return behaviour_of(await grounder.run(program), tests)

        ran = await asyncio.gather(*(behaviour(t.thought) for t in thoughts))
        weights = [t.times for t in thoughts]
        passing = [(i, b) for i, b in enumerate(ran) if b is not None and b.passes]
        groups = [[passing[j][0] for j in g] for g in agreeing_groups(
            [b.signature for _, b in passing], [weights[i] for i, _ in passing])]
        total = sum(weights[i] for i, _ in passing)
        group_of = {i: g for g in groups for i in g}

        heaviest = [sum(weights[i] for i in g) for g in groups[:2]]
        # Agreement needs something to agree on: visible tests passed or probes answered alike. With neither, every
        # program that loads "agrees" and more samples cannot be told apart: the first that loads is the answer, as
        # a lone sample's would be, instead of sampling to the end of the budget for a vote that cannot happen.
        checked = bool(problem.visible_tests or grounder.probes)
        won = bool(heaviest) and (not checked or (heaviest[0] >= self.quorum and heaviest[0] > sum(heaviest[1:])))
        agreed = frozenset(groups[0]) if won else frozenset()

        def share(i: int, ran: Behaviour | None) -> float:
            if ran is None:
                return 0.0
            if i in agreed:
                return 1.0
            if i not in group_of:
                return PRIOR
            return PRIOR + UNAGREED_LIFT * sum(weights[j] for j in group_of[i]) / total

        shares = tuple(share(i, b) for i, b in enumerate(ran))
        notes = tuple(self._note(problem, b, group_of.get(i), weights, total, len(grounder.probes))
                      for i, b in enumerate(ran))
        return Tally(shares, agreed, notes)

    @staticmethod
    def _note(problem: CodeProblem, ran: Behaviour | None, group: list[int] | None, weights: Sequence[int],
              total: int, probes: int) -> str:
        """What the count says of one program, for a person."""
        if ran is None:
            return "does not compile"
        tests = len(problem.visible_tests)
        if group is None:
            return f"fails {ran.failed} of {tests} visible tests" if ran.load_error is None else "does not load"
        if not tests and not probes:
            return "loads; no visible test and no probe to check it against"
        alike = sum(weights[j] for j in group)
        return f"passes the {tests} visible tests; {alike} of {total} passing samples behave alike on {probes} probes"

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
        """Show a failing first program's test errors and ask for a corrected one; a deeper one (a failed revision)
        is followed by new programs instead."""
        if len(steps) > 1:
            # On HumanEval 2 of 63 revisions passed the visible tests where 132 of 199 fresh samples did
            # (BENCHMARKS §23): once revised, a line of programs starts afresh.
            return None
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
        """A neutral prior, with no model call: running the tests (grounding) moves it.

        A program that does not compile (a reply cut off by its token limit) gets 0: no grounder
        can run it, so the prior would stay and rank it above every program that ran and failed a test.
        """
        return PRIOR if steps and check_syntax(steps[-1]).ok else 0.0

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

#: Bullets and words a prose example may start with: `* f(x) => y`, `for f(x) == y`, `assert f(x) => y`.
_PROSE_LEAD = re.compile(r"^\s*(?:[*\-•]\s+|for\s+|assert\s+)?", re.IGNORECASE)
#: What follows a prose example's call: an arrow, `==`, `# returns`, `should return`, then the result.
_RESULT = re.compile(r"^\s*(?:#\s*(?:=>|->|returns?:?)?|==>|=>|➞|->|==|=|should return|returns?)\s*(?P<want>\S.*?)\s*$")
#: `For num = "AB" the output should be 1.`: the arguments by the function's own parameter names.
_FOR_NAMES = re.compile(
    r"^\s*For\s+(?P<args>[A-Za-z_]\w*\s*=.+?),?\s+the\s+(?:output|result)\s+should\s+be\s+(?P<want>\S.*?)\s*$",
    re.IGNORECASE,
)
_INPUT = re.compile(r"^\s*Input\s*:\s*(?P<args>\S.*?)\s*$")
_OUTPUT = re.compile(r"^\s*Output\s*:\s*(?P<want>\S.*?)\s*$")
#: Lines an `Output:` may follow its `Input:` by.
_OUTPUT_WITHIN = 2


def docstring_tests(prompt: str, entry_point: str) -> tuple[str, ...]:
    """Asserts made from the examples in a function's docstring: doctest `>>>` lines, else the prose
    forms (`f(x) ➞ y`, `f(x) # returns y`, `For x = 1 the output should be y`, `Input:`/`Output:` pairs)."""
    tests: list[str] = []
    for example in doctest.DocTestParser().get_examples(prompt):
        # The docstring's closing quotes follow the last example's output without a blank line.
        source, want = _without_comment(example.source.strip()), example.want.split('"""')[0].split("'''")[0].strip()
        if entry_point in source and want and _is_test_expr(source, entry_point) and _is_test_expr(want, entry_point):
            tests.append(f"assert {source} == {want}")
        elif not want and _is_checked_call(source, entry_point):
            tests.append(f"assert {source}")  # `>>> f(x) == y`: the example is its own check
    if not tests:
        tests = _prose_tests(prompt, entry_point)
    return tuple(dict.fromkeys(tests))


def _prose_tests(prompt: str, entry_point: str) -> list[str]:
    """Asserts from examples written as prose (HumanEval writes a quarter of its docstrings so)."""
    params = _parameters(prompt, entry_point)
    lines = prompt.splitlines()
    tests: list[str] = []
    for i, line in enumerate(lines):
        rest = _PROSE_LEAD.sub("", line, count=1)
        if (found := _call_prefix(rest, entry_point)) is not None:
            call, after = found
            m = _RESULT.match(after)
            want = _result(m.group("want"), entry_point) if m else None
            if want is not None:
                tests.append(f"assert {call} == {want}")
            continue
        if params is None:
            continue
        if (m := _FOR_NAMES.match(line)) is not None:
            args, want = _arguments(m.group("args"), entry_point, params), _result(m.group("want"), entry_point)
        elif (m := _INPUT.match(line)) is not None:
            args, want = _arguments(m.group("args"), entry_point, params), None
            following = [ln for ln in lines[i + 1 : i + 1 + _OUTPUT_WITHIN] if ln.strip()]
            if following and (out := _OUTPUT.match(following[0])) is not None:
                want = _result(out.group("want"), entry_point)
        else:
            continue
        if args is not None and want is not None:
            tests.append(f"assert {entry_point}({args}) == {want}")
    return tests


def _call_prefix(text: str, entry_point: str) -> tuple[str, str] | None:
    """The call of the function `text` starts with, and what follows it (None: it starts with none)."""
    if not text.startswith(entry_point + "("):
        return None
    for i, ch in enumerate(text):
        if ch != ")":
            continue
        try:
            body = ast.parse(text[: i + 1], mode="eval").body
        except SyntaxError:
            continue
        # The shortest prefix that parses is the call itself: `f(g(1)) -> 2` is not cut at `f(g(1)`.
        if isinstance(body, ast.Call) and _is_test_expr(text[: i + 1], entry_point):
            return text[: i + 1], text[i + 1 :]
        return None
    return None


def _result(text: str, entry_point: str) -> str | None:
    """The value a prose example gives, read as a Python expression (None when it is not one).

    Tried in turn: the text without a `# comment` and a final period (a sentence's: `should be 1.`);
    the text; without a trailing `(explanation)`; what follows the last `=` (`f(x) -> 19 - 5 - 6 = 8`).
    `true`/`false` are the booleans.
    """
    text = text.strip()
    plain = text.split(" #")[0].strip().removesuffix(".")
    candidates = [plain, text, re.sub(r"\s*\([^()]*\)\s*$", "", plain)]
    if "=" in plain:
        candidates.append(plain.rsplit("=", 1)[1])
    for candidate in candidates:
        candidate = candidate.strip()
        candidate = {"true": "True", "false": "False"}.get(candidate.lower(), candidate)
        if candidate and _is_test_expr(candidate, entry_point):
            return candidate
    return None


def _arguments(text: str, entry_point: str, params: Sequence[str]) -> str | None:
    """The arguments of a prose example as a call's (`x = 1, k = 2` or `[1, 2], 3`), None unless they fit
    the function: every parameter by its own name, or one positional value for each parameter.

    Prose may follow the arguments (`For N = 150, the sum of digits will be 6 ...`): the longest
    run of comma-separated parts that fits is taken.
    """
    parts = text.split(",")
    for end in range(len(parts), 0, -1):
        args = ",".join(parts[:end]).strip()
        try:
            call = ast.parse(f"{entry_point}({args})", mode="eval").body
        except SyntaxError:
            continue
        if not isinstance(call, ast.Call) or not _is_test_expr(f"{entry_point}({args})", entry_point):
            continue
        named = {k.arg for k in call.keywords}
        if (not call.args and named == set(params)) or (not call.keywords and len(call.args) == len(params)):
            return args
    return None


def _parameters(prompt: str, entry_point: str) -> list[str] | None:
    """The function's parameter names, from its definition in the prompt (None: it does not parse)."""
    try:
        tree = ast.parse(prompt)
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == entry_point:
            return [a.arg for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs)]
    return None


def _without_comment(source: str) -> str:
    """A one-line doctest source without its trailing `# comment` (`f(x) # f(x) = 1 + 2x`)."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError):
        return source
    comment = next((t for t in tokens if t.type == tokenize.COMMENT), None)
    if comment is None or "\n" in source:
        return source
    return source[: comment.start[1]].rstrip()


def _is_checked_call(source: str, entry_point: str) -> bool:
    """`f(x) == y`: a comparison of a call of the function with a value."""
    try:
        body = ast.parse(source, mode="eval").body
    except SyntaxError:
        return False
    return (
        isinstance(body, ast.Compare) and len(body.ops) == 1 and isinstance(body.ops[0], ast.Eq)
        and isinstance(body.left, ast.Call) and isinstance(body.left.func, ast.Name)
        and body.left.func.id == entry_point and _is_test_expr(source, entry_point)
    )


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
