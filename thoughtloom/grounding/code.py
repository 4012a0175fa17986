"""The code-generation grounder: run the thought's code against the visible tests in a sandbox.

Grounding a code thought: extract the code (`extract_code`), prepend the problem's prefix when
the code lacks the entry point, syntax-check it (a syntax error is a definite failure), then run
it and every test in one sandboxed process (`testrun.run_tests`). The score is the fraction of
tests passed; verified means all passed. With no tests, grounding only checks that the code
loads (syntax + running its top level once, as a module): verified when that runs clean, with a
low confidence (0.3) because nothing checked the behaviour.
"""

from __future__ import annotations

import ast
import re
import time
from collections.abc import Sequence

from .behaviour import probe_test, visible_part
from .fences import fenced_blocks
from .once import RunOnce
from .sandbox import Sandbox, SandboxLimits, check_syntax
from .testrun import TestRun, default_timeouts, run_tests
from .types import GroundingResult, Thought, join_evidence, not_grounded

_PY_TAGS = {"python", "py", "python3", "py3", "ipython", "pycon"}
_CODE_WORD = re.compile(r"\b(def|class|import|return)\b")
_DEFINES = re.compile(r"^\s*(?:async\s+def|def|class)\s+\w+", re.MULTILINE)
CONFIDENCE_ALL_PASSED = 0.9  # visible tests passing is strong but not proof (hidden tests may differ)
CONFIDENCE_FAILED = 1.0  # a failing test (or a syntax error) is definite
CONFIDENCE_NO_TESTS = 0.3  # only "it loads" was checked


def _compiles(code: str) -> bool:
    return check_syntax(code).ok


def _looks_like_python(code: str) -> bool:
    return bool(_CODE_WORD.search(code)) and _compiles(code)


def extract_code(text: str) -> str | None:
    """The Python code in a thought: the best fenced block, or the whole text if it is code.

    Fenced blocks tagged python (or untagged ones that look like Python) are candidates. Blocks
    that compile beat blocks that do not (a block with a syntax error is still returned when it
    is the only code, so the error gets reported); blocks that define a function or class beat
    usage snippets; among those, the last one at least half as long as the longest wins (a
    later full rewrite beats an earlier draft, a short trailing example does not).
    """
    candidates: list[str] = []
    for info, body in ((b.info, "\n".join(b.body)) for b in fenced_blocks(text.splitlines())):
        tag = info.split()[0].lower() if info else ""
        if not body.strip():
            continue
        if tag in _PY_TAGS or (not tag and (_looks_like_python(body) or _DEFINES.search(body))):
            candidates.append(body.strip("\n"))
    if candidates:
        pool = [c for c in candidates if _compiles(c)] or candidates
        pool = [c for c in pool if _DEFINES.search(c)] or pool
        longest = max(len(c) for c in pool)
        return [c for c in pool if len(c) * 2 >= longest][-1]
    stripped = text.strip("\n")
    if stripped.strip() and _looks_like_python(stripped):
        return stripped
    return None


def defines(code: str, name: str) -> bool:
    """True when `code` defines `name` at top level (a function, class or assignment)."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return re.search(rf"^\s*(?:async\s+)?def\s+{re.escape(name)}\b", code, re.MULTILINE) is not None
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return True
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return True
    return False


#: The key a shared cache keeps a run under: the program, its tests and its probe calls.
RunKey = tuple[str, tuple[str, ...], tuple[str, ...]]


class CodeGrounder:
    """Grounds code thoughts by running them against visible tests in a sandbox.

    Probe calls (grounding/behaviour.py), when given, run after the tests in the same sandboxed
    process; their values are kept on the run for the task's vote, never counted as tests. A
    `runs` cache shared with the task makes each program run once for both.
    """

    def __init__(
        self,
        tests: Sequence[str],
        sandbox: Sandbox,
        *,
        name: str = "code",
        entry_point: str | None = None,
        prefix: str = "",
        limits: SandboxLimits | None = None,
        per_test_timeout_s: float | None = None,
        probes: Sequence[str] = (),
        runs: RunOnce[RunKey, TestRun] | None = None,
    ) -> None:
        self.tests = list(tests)
        self.sandbox = sandbox
        self.name = name
        self.entry_point = entry_point
        self.prefix = prefix
        self.limits = limits
        self.per_test_timeout_s = per_test_timeout_s
        self.probes = tuple(probes)
        self._runs = runs

    async def run(self, code: str) -> TestRun:
        """The tests, then the probes, run on `code` in one sandboxed process (once, where a cache is shared)."""
        return await self._runs.get((code, tuple(self.tests), self.probes), lambda: self._run(code)) \
            if self._runs is not None else await self._run(code)

    async def _run(self, code: str) -> TestRun:
        limits = self.limits or self.sandbox.limits
        # The load and each test keep the time they had without probes; the probes share what the run's wall
        # clock leaves.
        load_s, per_test_s = default_timeouts(limits, len(self.tests))
        return await run_tests(self.sandbox, code, [*self.tests, *(probe_test(c) for c in self.probes)],
                               limits=limits, per_test_timeout_s=self.per_test_timeout_s or per_test_s,
                               load_timeout_s=load_s)

    def can_ground(self, thought: Thought) -> bool:
        """True when the thought contains Python code."""
        return self.program(thought.content) is not None

    def program(self, content: str) -> str | None:
        """The code that will run for a thought: extracted, with the prefix when the entry point is missing."""
        code = extract_code(content)
        if code is None and self.entry_point and self.prefix:
            # An unfenced body-only completion is not Python by itself, but is after the prompt.
            body = content.strip("\n")
            if body.strip() and _CODE_WORD.search(body) and _compiles(self.prefix.rstrip("\n") + "\n" + body):
                code = body
        if code is None:
            return None
        if self.entry_point and self.prefix and not defines(code, self.entry_point):
            # A HumanEval-style completion is the body only: the prompt has the imports and signature.
            code = self.prefix.rstrip("\n") + "\n" + code if code.startswith((" ", "\t")) else self.prefix + "\n" + code
        return code

    async def ground(self, thought: Thought) -> GroundingResult:
        """Run the thought's code against the tests; score = fraction passed."""
        started = time.monotonic()
        code = self.program(thought.content)
        if code is None:
            return not_grounded(self.name, "no Python code found in the thought")
        check = check_syntax(code, "candidate.py")
        if not check.ok:
            return GroundingResult(
                grounder=self.name,
                grounded=True,
                verified=False,
                evidence=join_evidence([f"the code does not compile: {check.error}"]),
                confidence=CONFIDENCE_FAILED,
                elapsed_ms=_ms(started),
                score=0.0,
                failed=max(1, len(self.tests)),
                details={"stopped_reason": "syntax_error", "syntax_error": check.error, "line": check.line},
            )
        run = visible_part(await self.run(code), len(self.tests))
        return self._result(run, started)

    def _result(self, run: TestRun, started: float) -> GroundingResult:
        sb = run.sandbox
        details = {
            "stopped_reason": sb.stopped_reason,
            "exit_code": sb.exit_code,
            **sb.isolation(),
            "tests": [{"test": r.test[:200], "passed": r.passed, "error": r.error} for r in run.results[:20]],
        }
        if not self.tests:
            ok = run.load_error is None
            evidence = "ran the code once in the sandbox (no tests): " + (
                "it loaded cleanly" if ok else run.load_error or "it failed"
            )
            return GroundingResult(
                grounder=self.name,
                grounded=True,
                verified=ok,
                evidence=join_evidence([evidence, _stderr_tail(sb.stderr) if not ok else ""]),
                confidence=CONFIDENCE_NO_TESTS,
                elapsed_ms=_ms(started),
                cost=1,
                score=1.0 if ok else 0.0,
                passed=0,
                failed=0 if ok else 1,
                details=details,
            )
        lines = [f"ran {run.total} test(s) in the sandbox: {run.passed} passed, {run.failed} failed"]
        if run.load_error:
            lines.append(f"the code did not load: {run.load_error}")
            lines.append(_stderr_tail(sb.stderr))
        elif (first := run.first_failure()) is not None:
            lines.append(f"first failing test: {first.test.strip()[:300]}")
            lines.append(f"error: {first.error}")
        lines.extend(run.notes)
        return GroundingResult(
            grounder=self.name,
            grounded=True,
            verified=run.failed == 0,
            evidence=join_evidence(lines),
            confidence=CONFIDENCE_ALL_PASSED if run.failed == 0 else CONFIDENCE_FAILED,
            elapsed_ms=_ms(started),
            cost=1,
            score=run.passed / run.total,
            passed=run.passed,
            failed=run.failed,
            details=details,
        )


def _stderr_tail(stderr: str, lines: int = 6) -> str:
    kept = [line for line in stderr.strip().splitlines() if line.strip()][-lines:]
    return "stderr:\n" + "\n".join(kept) if kept else ""


def _ms(started: float) -> int:
    return int((time.monotonic() - started) * 1000)
