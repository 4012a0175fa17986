"""Debugging: find why a test fails in a repository and fix it, with every fix verified by running tests.

Before the search, the failing test is run on an untouched copy of the repository: it must fail,
and its output is shown to the model. Depth 1 thoughts are hypotheses (what is wrong, where),
grounded by checking them against the reproduced failure. Deeper thoughts are fixes (a whole
corrected file), grounded by applying them to a fresh copy, running the failing test and then the
whole suite for regressions (unless `regression_tests` is off: the debugging profile's
run_regression_tests, `--no-regression-tests`). A fix that passes both is a goal. The repository
itself is never modified: the answer is the verified fix, for the user to apply.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

from ..graph import NodeKind
from ..grounding.debugging import DebuggingGrounder, GroundingSetupError
from ..grounding.files import FileRefused, read_regular, walk_files
from ..grounding.sandbox import Sandbox, SandboxLimits
from ..grounding.types import Grounder, GroundingResult, Thought
from ..llm.types import Message, Prompt
from .base import ProblemError, Query, Task, Verdict

#: Most characters of source code and failure output put into a prompt.
MAX_SOURCE_CHARS = 6000
MAX_FAILURE_CHARS = 1500
PRIOR = 0.5
_SKIP_DIRS = {".git", ".venv", "venv", "__pycache__", "node_modules", ".tox", ".mypy_cache", ".pytest_cache"}


@dataclass(frozen=True, slots=True)
class DebugProblem:
    """A repository with a failing test, and what reproducing the failure showed."""

    repo: Path
    failing_test: str
    description: str = ""
    failure: str = ""  # the failing test's output on the untouched repository
    sources: tuple[tuple[str, str], ...] = ()  # (relative path, text) of the files most likely involved

    @property
    def target(self) -> str | None:
        """The source file a fix most likely changes: the first involved file that is not a test."""
        for path, _ in self.sources:
            if not Path(path).name.startswith("test"):
                return path
        return self.sources[0][0] if self.sources else None


@dataclass
class DebugTask(Task[DebugProblem]):
    """Fix a failing test: hypotheses checked against the failure, fixes checked by the test suite."""

    name: ClassVar[str] = "debug"
    description: ClassVar[str] = "fix a failing test in a repository (--repo DIR --failing-test TEST)"
    programmatic_answer: ClassVar[bool] = True
    search_defaults: ClassVar[dict[str, Any]] = {
        "generation": "sample", "breadth": 3, "beam": 2, "max_depth": 3, "value_samples": 1, "temperature": 0.7,
    }

    repo: Path = Path(".")
    failing_test: str = ""
    test_command: Sequence[str] | None = None
    #: Extra environment for the test runs (e.g. PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 to start pytest faster).
    test_env: Mapping[str, str] | None = None
    #: Run the repository's other tests against each fix; off, a fix is judged by the failing test alone.
    regression_tests: bool = True
    sandbox_limits: SandboxLimits = field(default_factory=lambda: SandboxLimits(timeout_s=60, cpu_s=60))
    max_tokens: int = 768
    _grounder: DebuggingGrounder | None = field(default=None, repr=False)

    # --- problem ------------------------------------------------------------------------

    def parse_problem(self, text: str) -> DebugProblem:
        """The repository and failing test (the text, optional, describes the bug)."""
        repo = Path(self.repo).expanduser()
        if not repo.is_dir():
            raise ProblemError(f"--repo {self.repo} is not a directory; give the repository's folder")
        test_file = self.failing_test.split("::")[0]
        if not test_file or not (repo / test_file).is_file():
            raise ProblemError(
                f"--failing-test {self.failing_test!r}: no file {test_file!r} in {repo}; "
                "give a pytest node id relative to the repository, e.g. tests/test_x.py::test_y"
            )
        return DebugProblem(repo.resolve(), self.failing_test, text.strip())

    def root_content(self, problem: DebugProblem) -> str:
        """The problem as the graph shows it."""
        return f"{problem.failing_test} fails in {problem.repo}" + (
            f": {problem.description}" if problem.description else ""
        )

    def describe(self, problem: DebugProblem) -> dict[str, Any]:
        """The repository, the failing test and the files shown to the model."""
        return {
            "repo": str(problem.repo),
            "failing_test": problem.failing_test,
            "files": [p for p, _ in problem.sources],
        }

    def grounder(self, problem: DebugProblem) -> DebuggingGrounder:
        """The grounder for this repository (one per task: it keeps the reproduced failure)."""
        if self._grounder is None:
            try:
                command = self.test_command
                if command is not None and problem.failing_test not in command:
                    command = [*command, problem.failing_test]  # the user gave how to run tests, not which
                self._grounder = DebuggingGrounder(
                    problem.repo, problem.failing_test, Sandbox(self.sandbox_limits), test_command=command,
                    env=dict(self.test_env) if self.test_env else None, regression_tests=self.regression_tests,
                )
            except GroundingSetupError as exc:
                raise ProblemError(str(exc)) from None
        return self._grounder

    async def prepare(self, problem: DebugProblem) -> DebugProblem:
        """Reproduce the failure on an untouched copy; it must fail, and its output goes into the prompts."""
        try:
            result = await self.grounder(problem).reproduce()
        except GroundingSetupError as exc:
            raise ProblemError(str(exc)) from None
        if result.verified is not True:
            raise ProblemError(f"cannot debug {problem.failing_test}: {first_line(result.evidence)}")
        failure = (self.grounder(problem).failure_output or result.evidence)[-MAX_FAILURE_CHARS:]
        return replace(problem, failure=failure, sources=involved_sources(problem.repo, problem.failing_test, failure))

    # --- grounding ----------------------------------------------------------------------

    def grounders(self, problem: DebugProblem) -> list[Grounder]:
        """Hypotheses against the failure, fixes against the tests."""
        return [self.grounder(problem)]

    def grounded_goal(self, problem: DebugProblem, steps: Sequence[str], result: GroundingResult) -> bool:
        """A verified fix (the failing test passes, and so does the rest of the suite when it is run)."""
        return len(steps) >= 2 and result.verified is True

    # --- generate -----------------------------------------------------------------------

    def _context(self, problem: DebugProblem) -> str:
        files = "\n\n".join(f"### {path}\n```python\n{text.rstrip()}\n```" for path, text in problem.sources)
        about = f"Bug report: {problem.description}\n\n" if problem.description else ""
        return f"{about}The test {problem.failing_test} fails:\n```\n{problem.failure.strip()}\n```\n\n{files}\n\n"

    def sample(self, problem: DebugProblem, steps: Sequence[str]) -> Query:
        """Depth 1: a hypothesis about the cause. Deeper: a fix, as the whole corrected file."""
        context = self._context(problem)
        if not steps:
            text = context + "The cause of the failure, in one sentence naming the function and file:"
            request = context + "What causes this failure? Answer in one sentence that names the function and the file."
            return Query(Prompt(text=text, messages=(Message("user", request),)), max_tokens=80, stop=("\n\n",))
        return self._fix_query(problem, context + f"Hypothesis: {steps[0]}\n\n")

    def revise(self, problem: DebugProblem, steps: Sequence[str], feedback: str) -> Query | None:
        """After a failed fix: show what the tests said and ask for another fix."""
        if len(steps) < 2:
            return None  # a hypothesis that did not match the failure: sample fixes as usual
        lines = "\n".join(feedback.strip().splitlines()[:15])
        return self._fix_query(
            problem, self._context(problem) + f"Hypothesis: {steps[0]}\n\nThis attempt did not work:\n{steps[-1]}\n"
            f"The tests said:\n```\n{lines}\n```\n\n",
        )

    def _fix_query(self, problem: DebugProblem, context: str) -> Query:
        target = problem.target or "the file"
        text = f"{context}### {target} (fixed)\n```python\n"
        request = (
            f"{context}Write the whole corrected {target}. Reply with one block that starts with "
            f"```python {target}"
        )
        return Query(
            Prompt(text=text, messages=(Message("user", request),)), max_tokens=self.max_tokens, stop=("\n```",)
        )

    def parse_sample(self, problem: DebugProblem, steps: Sequence[str], text: str) -> str | None:
        """A hypothesis sentence, or a fix as a fenced block headed by the file it replaces."""
        if not steps:
            line = " ".join(text.strip().split("\n\n")[0].split())
            return line or None
        if "```" in text and re.search(r"```\w*\s+\S+\.py", text):
            return text.strip()  # the model named the file itself
        body = text.split("```python", 1)[-1].split("```")[0].strip("\n")
        if not body.strip() or problem.target is None:
            return None
        return f"```python {problem.target}\n{body}\n```"

    def validate(self, problem: DebugProblem, steps: Sequence[str], thought: str) -> Verdict:
        """Everything is kept: the grounder reports what is wrong with a fix."""
        return Verdict(True, thought)

    def state_key(self, problem: DebugProblem, steps: Sequence[str]) -> Any:
        """Thoughts that differ only in whitespace are the same state."""
        return (len(steps), " ".join(steps[-1].split())) if steps else ()

    def thought_kind(self, problem: DebugProblem, steps: Sequence[str]) -> NodeKind:
        """Hypotheses first, then code."""
        return NodeKind.HYPOTHESIS if len(steps) <= 1 else NodeKind.CODE

    def exact_value(self, problem: DebugProblem, steps: Sequence[str]) -> float | None:
        """A neutral prior, with no model call: grounding moves it."""
        return PRIOR

    def is_terminal(self, problem: DebugProblem, steps: Sequence[str]) -> bool:
        """Nothing follows a fix but a better fix, made by revision (see revise)."""
        return False

    # --- answer -------------------------------------------------------------------------

    def compose_answer(self, problem: DebugProblem, steps: Sequence[str], reply: str | None) -> str | None:
        """The best fix (or, when no fix was made, the best hypothesis)."""
        return steps[-1] if steps else None

    async def acheck_answer(self, problem: DebugProblem, answer: str | None) -> bool | None:
        """Run the fix once more: the failing test and the suite must pass (None: the answer is no fix)."""
        if answer is None or "```" not in answer:
            return None
        result = await self.grounder(problem).ground(
            Thought(self.root_content(problem), (), answer, NodeKind.CODE.value)
        )
        return result.verified is True


def first_line(text: str) -> str:
    """The first non-empty line."""
    return next((ln.strip() for ln in text.splitlines() if ln.strip()), "")


def involved_sources(repo: Path, failing_test: str, failure: str) -> tuple[tuple[str, str], ...]:
    """The repository's Python files the failure mentions (the test file first), within MAX_SOURCE_CHARS."""
    # Only regular files inside the repository, with names that are text (grounding.files): what is
    # read here is sent to the model.
    inside = (repo.resolve(),)
    files = sorted(e.rel for e in walk_files(repo, (".py",), frozenset(_SKIP_DIRS)) if e.refused is None)
    test_file = failing_test.split("::")[0]
    mentioned = [f for f in files if f != test_file and (f in failure or Path(f).name in failure)]
    chosen = [*mentioned, test_file] if mentioned else [f for f in files if f != test_file][:3] + [test_file]
    out: list[tuple[str, str]] = []
    used = 0
    for path in chosen:
        try:
            # Only the head that can be shown is read (4 bytes a character at most).
            data = read_regular(repo / path, inside=inside, max_bytes=4 * MAX_SOURCE_CHARS, head=True)
        except FileRefused:
            continue
        text = data.decode("utf-8", errors="replace")
        if used + len(text) > MAX_SOURCE_CHARS and out:
            break
        out.append((path, text[:MAX_SOURCE_CHARS]))
        used += len(text)
    return tuple(out)
