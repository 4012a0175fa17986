"""The debugging grounder: reproduce a failing test, then check hypotheses and fixes against it.

* `reproduce()` runs the failing test on an untouched copy of the repository in the sandbox; it
  must fail (a test that passes leaves nothing to debug). The output is kept.
* A thought that proposes file edits (see `patches.py`: a unified diff, a fenced block naming
  its file, SEARCH/REPLACE blocks) is a FIX: the edits are applied to a fresh copy (paths must
  stay inside the repo), then the failing test and the whole suite run (concurrently, each in
  its own sandbox). Verified when the test now passes and the suite has no failures; the score
  is the fraction of suite tests passing. With `regression_tests=False` the suite is not run: a
  fix is verified by the failing test alone (score 1 or 0), with a lower confidence, since a
  regression elsewhere would go unseen.
* Any other thought is a HYPOTHESIS: it is verified when what it blames (function, file, class
  names, `file:line`) appears in the reproduced failure's output. That is weak evidence (the
  output shows where a failure surfaced, not always its cause), so confidence stays modest.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import re
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .patches import FileEdit, PatchError, apply_patch, parse_patch, patched_files
from .sandbox import Sandbox, SandboxLimits, SandboxResult
from .types import GroundingResult, Thought, join_evidence, not_grounded

__all__ = [
    "DebuggingGrounder",
    "GroundingSetupError",
    "PytestSummary",
    "apply_patch",
    "blamed_names",
    "classify",
    "parse_pytest_summary",
]

CONFIDENCE_BLAMES_CODE = 0.7  # a blamed name is on a traceback line pointing into non-test code
CONFIDENCE_MENTIONED = 0.6  # a blamed name appears in the failure output
CONFIDENCE_NOT_MENTIONED = 0.5  # absence from the output does not prove the hypothesis wrong
CONFIDENCE_TARGET_ONLY = 0.8  # a fix checked by the failing test alone: the rest of the suite was not run
_OUTPUT_KEPT = 12000  # characters of the reproduction output kept for matching and evidence


class GroundingSetupError(ValueError):
    """The grounder cannot work here (no pytest, no repository); the message says what to do."""


@dataclass(frozen=True, slots=True)
class PytestSummary:
    """The counts in pytest's final line ("1 failed, 2 passed in 0.05s")."""

    passed: int = 0
    failed: int = 0
    errors: int = 0
    skipped: int = 0
    line: str = ""

    @property
    def total(self) -> int:
        """Tests that ran to a verdict (skipped ones excluded)."""
        return self.passed + self.failed + self.errors

    @property
    def found(self) -> bool:
        return bool(self.line)


_SUMMARY_LINE = re.compile(
    r"\b\d+ (?:passed|failed|errors?|skipped|xfailed|xpassed|deselected)\b.*\bin [\d.]+s\b|no tests ran"
)
_COUNT = re.compile(r"(\d+) (passed|failed|errors?|skipped|xfailed|xpassed)")


def parse_pytest_summary(output: str) -> PytestSummary:
    """The last pytest summary line in `output`, parsed (all zeros when there is none)."""
    for line in reversed(output.splitlines()):
        if _SUMMARY_LINE.search(line):
            counts: dict[str, int] = {}
            for n, word in _COUNT.findall(line):
                key = "errors" if word.startswith("error") else word
                counts[key] = counts.get(key, 0) + int(n)
            return PytestSummary(
                passed=counts.get("passed", 0) + counts.get("xpassed", 0),
                failed=counts.get("failed", 0),
                errors=counts.get("errors", 0),
                skipped=counts.get("skipped", 0) + counts.get("xfailed", 0),
                line=line.strip("= ").strip(),
            )
    return PytestSummary()


def classify(text: str) -> str:
    """Whether the text is a "fix" (it proposes file edits) or a "hypothesis"."""
    return "fix" if parse_patch(text) else "hypothesis"


# ------------------------------------------------------------------ what a hypothesis blames

_CODE_EXT = "py|pyi|pyx|js|jsx|ts|tsx|mjs|c|h|cc|cpp|hpp|go|rs|java|kt|rb|php|cs|swift|toml|cfg|ini|json|ya?ml|txt|sh"
_FILE = re.compile(rf"(?<![\w/.-])((?:[\w.-]+/)*[\w-][\w.-]*\.(?:{_CODE_EXT}))(?::(\d+))?\b")
_FILE_LINE_WORDS = re.compile(r"\bline\s+(\d+)\b", re.IGNORECASE)
_BACKTICK = re.compile(r"`([^`\n]{1,80})`")
_CALL = re.compile(r"\b([A-Za-z_][\w.]*)\s*\(")
_IDENT = re.compile(r"\b([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+|[A-Za-z]*_\w+|[a-z]+[A-Z]\w*|[A-Z][a-z]+[A-Z]\w*)\b")
_NAMED = re.compile(
    r"\b(?:function|method|class|variable|attribute|parameter|argument|def)\s+`?([A-Za-z_]\w*)", re.IGNORECASE
)
_NAMED_AFTER = re.compile(r"`?\b([A-Za-z_]\w*)`?\s+(?:function|method|class)\b")
_STOP = {
    "a", "an", "and", "are", "as", "assert", "assertion", "assertionerror", "be", "bug", "but", "by", "call", "called",
    "calls", "case", "class", "code", "def", "does", "error", "errors", "exception", "expected", "fail", "failed",
    "failing", "fails", "false", "file", "fix", "for", "from", "function", "if", "import", "in", "is", "it", "its",
    "line", "list", "method", "module", "none", "not", "of", "on", "or", "pass", "passed", "print", "pytest",
    "python", "raise", "result", "return", "returns", "self", "should", "str", "test", "tests", "that", "the",
    "this", "to", "true", "value", "values", "when", "where", "which", "while", "with", "wrong", "int", "float",
    "dict", "len", "range", "type", "object", "variable", "argument", "parameter",
}  # fmt: skip


def blamed_names(text: str) -> list[str]:
    """The code names a hypothesis blames: file names (with `file:line`), identifiers, calls."""
    found: list[str] = []

    def add(name: str) -> None:
        name = name.strip().strip(".,:;()[]{}'\"")
        if len(name) >= 2 and name.lower() not in _STOP and name not in found:
            found.append(name)

    files = []
    for m in _FILE.finditer(text):
        files.append(m.group(1))
        add(f"{m.group(1)}:{m.group(2)}" if m.group(2) else m.group(1))
    for line_no in _FILE_LINE_WORDS.findall(text):
        for f in files:  # "line 3 of calc.py"
            add(f"{f}:{line_no}")
    for span in _BACKTICK.findall(text):
        span = span.strip()
        if _FILE.fullmatch(span):
            continue
        named = re.fullmatch(r"([A-Za-z_][\w.]*)\s*(?:\(.*\))?", span)
        if named:
            add(named.group(1))
    for pattern in (_CALL, _NAMED, _NAMED_AFTER, _IDENT):
        for m in pattern.finditer(text):
            token = m.group(1)
            if any(token in f or f in token for f in files):
                continue  # part of a file name already counted
            add(token)
    # A dotted name (calc.add) also blames its last part (add), which is what tracebacks show.
    dotted = [name for name in found if "." in name and not _FILE.fullmatch(name.split(":")[0])]
    for name in dotted:
        add(name.rsplit(".", 1)[1])
    return found


def _name_pattern(name: str) -> re.Pattern[str]:
    """How a blamed name shows up in pytest/traceback output."""
    if ":" in name and _FILE.fullmatch(name):
        path, line = name.rsplit(":", 1)
        base = re.escape(os.path.basename(path))
        return re.compile(rf"(?<![\w.-]){base}(?::{line}\b|\", line {line}\b)")
    if _FILE.fullmatch(name):
        return re.compile(rf"(?<![\w.-]){re.escape(os.path.basename(name))}\b")
    return re.compile(rf"(?<![\w.]){re.escape(name)}(?!\w)")


_LOCATION = re.compile(r"^\s*(?:File \"(?P<f1>[^\"]+)\", line \d+|(?P<f2>[\w./\\-]+\.\w+):\d+:)")


def _is_test_file(path: str) -> bool:
    base = os.path.basename(path)
    return base.startswith("test_") or base.endswith("_test.py") or base == "conftest.py"


# ------------------------------------------------------------------ the grounder


class DebuggingGrounder:
    """Grounds debugging thoughts (hypotheses and fixes) against a real failing test."""

    def __init__(
        self,
        repo: Path | str,
        failing_test: str,
        sandbox: Sandbox,
        *,
        test_command: Sequence[str] | None = None,
        suite_command: Sequence[str] | None = None,
        name: str = "debugging",
        limits: SandboxLimits | None = None,
        env: Mapping[str, str] | None = None,
        regression_tests: bool = True,
    ) -> None:
        self.repo = Path(repo)
        self.regression_tests = regression_tests
        if not self.repo.is_dir():
            raise GroundingSetupError(
                f"repository not found: {self.repo} (pass the directory that holds the code and tests)"
            )
        self.failing_test = failing_test
        self.sandbox = sandbox
        self.name = name
        self.limits = limits
        self.env = dict(env or {})  # extra environment for the test runs (e.g. PYTEST_ADDOPTS)
        if test_command is None:
            _require_pytest(sandbox.python)
            base = [sandbox.python, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
            self.test_command = [*base[:4], "-x", *base[4:], failing_test]
            self.suite_command = list(suite_command) if suite_command is not None else base
        else:
            self.test_command = list(test_command)
            self.suite_command = (
                list(suite_command)
                if suite_command is not None
                else [a for a in test_command if a not in (failing_test, "-x", "--exitfirst")]
            )
        self._repro: GroundingResult | None = None
        self._repro_output = ""
        self._reproduced = False
        self._lock: asyncio.Lock | None = None
        self._lock_loop: asyncio.AbstractEventLoop | None = None

    @property
    def failure_output(self) -> str:
        """The reproduced failure's output ("" before `reproduce()`)."""
        return self._repro_output

    def can_ground(self, thought: Thought) -> bool:
        """True for a fix (file edits) or a hypothesis that names code the failure output could show."""
        return bool(parse_patch(thought.content)) or bool(blamed_names(thought.content))

    async def reproduce(self) -> GroundingResult:
        """Run the failing test on the untouched repository (once; cached): it must fail."""
        if self._repro is not None:
            return self._repro
        loop = asyncio.get_running_loop()
        if self._lock is None or self._lock_loop is not loop:
            self._lock, self._lock_loop = asyncio.Lock(), loop
        async with self._lock:
            if self._repro is None:
                self._repro = await self._reproduce()
        return self._repro

    async def ground(self, thought: Thought) -> GroundingResult:
        """Ground a fix by running the tests on the patched repo, a hypothesis against the failure output."""
        repro = await self.reproduce()
        if not self._reproduced:
            return not_grounded(self.name, repro.evidence)
        edits = parse_patch(thought.content)
        if edits:
            return await self._ground_fix(edits)
        return self._ground_hypothesis(thought.content)

    # -------------------------------------------------------------- reproduction

    async def _reproduce(self) -> GroundingResult:
        started = time.monotonic()
        result = await self.sandbox.run(self.test_command, copy_from=self.repo, limits=self.limits, env=self.env)
        output = _output(result)
        self._repro_output = output[-_OUTPUT_KEPT:]
        summary = parse_pytest_summary(output)
        ran = f"ran {_show(self.test_command)} on the unmodified repo"
        details = {"exit_code": result.exit_code, "stopped_reason": result.stopped_reason, **result.isolation()}
        if result.stopped_reason == "setup_error":
            return not_grounded(self.name, f"could not run the failing test: {result.stop_detail}")
        if result.ok:
            self._reproduced = False
            evidence = join_evidence(
                [f"the test passes on the unmodified repo: nothing to debug ({ran})", summary.line]
            )
            return GroundingResult(
                grounder=self.name, grounded=True, verified=False, evidence=evidence, confidence=1.0,
                elapsed_ms=_ms(started), cost=1, details=details,
            )  # fmt: skip
        if result.exit_code in (4, 5) and result.stopped_reason is None:
            why = "no tests collected" if result.exit_code == 5 else "usage error"
            self._reproduced = False
            tail = _tail(output, 4)
            return not_grounded(
                self.name,
                join_evidence([f"pytest could not run {self.failing_test!r} ({why}, exit {result.exit_code})", tail]),
            )
        self._reproduced = True
        how = summary.line or (
            f"stopped: {result.stopped_reason} ({result.stop_detail})"
            if result.stopped_reason
            else f"exit {result.exit_code}"
        )
        evidence = join_evidence([f"reproduced: {ran}: {how}", _failure_excerpt(result)])
        return GroundingResult(
            grounder=self.name, grounded=True, verified=True, evidence=evidence, confidence=1.0,
            elapsed_ms=_ms(started), cost=1, details=details,
        )  # fmt: skip

    # -------------------------------------------------------------- hypotheses

    def _ground_hypothesis(self, content: str) -> GroundingResult:
        started = time.monotonic()
        names = blamed_names(content)
        if not names:
            return not_grounded(
                self.name, "the hypothesis names no code (function, file, line) the failure output could confirm"
            )
        output_lines = self._repro_output.splitlines()
        matched: list[str] = []
        quotes: list[str] = []
        blames_code = False
        for name in names:
            pattern = _name_pattern(name)
            hits = [line for line in output_lines if pattern.search(line)]
            if not hits:
                continue
            matched.append(name)
            for line in hits:
                loc = _LOCATION.match(line)
                if loc and not _is_test_file(loc.group("f1") or loc.group("f2") or ""):
                    blames_code = True
                if line not in quotes:
                    quotes.append(line)
        details = {"blamed": names, "matched": matched, "kind": "hypothesis"}
        if not matched:
            evidence = (f"none of what the hypothesis blames ({', '.join(names[:8])}) "
                        f"appears in the failure output of {self.failing_test}")
            return GroundingResult(
                grounder=self.name, grounded=True, verified=False, evidence=evidence,
                confidence=CONFIDENCE_NOT_MENTIONED, elapsed_ms=_ms(started), failed=1, details=details,
            )  # fmt: skip
        shown = [q.rstrip()[:200] for q in quotes[:6]]
        evidence = join_evidence([f"the failure output of {self.failing_test} mentions {', '.join(matched)}:", *shown])
        confidence = CONFIDENCE_BLAMES_CODE if blames_code else CONFIDENCE_MENTIONED
        return GroundingResult(
            grounder=self.name, grounded=True, verified=True, evidence=evidence, confidence=confidence,
            elapsed_ms=_ms(started), passed=len(matched), details=details,
        )  # fmt: skip

    # -------------------------------------------------------------- fixes

    async def _ground_fix(self, edits: list[FileEdit]) -> GroundingResult:
        started = time.monotonic()
        try:
            new_files = patched_files(self.repo, edits)
        except PatchError as exc:
            return GroundingResult(
                grounder=self.name, grounded=True, verified=False, evidence=f"the patch was not applied: {exc}",
                confidence=1.0, elapsed_ms=_ms(started), score=0.0, failed=1,
                details={"kind": "fix", "patch_error": str(exc), "files": sorted({e.path for e in edits})},
            )  # fmt: skip
        changed = sorted(new_files)
        if not self.regression_tests:
            return await self._ground_fix_target_only(new_files, changed, started)
        target, suite = await asyncio.gather(
            self.sandbox.run(self.test_command, copy_from=self.repo, files=new_files, limits=self.limits, env=self.env),
            self.sandbox.run(
                self.suite_command, copy_from=self.repo, files=new_files, limits=self.limits, env=self.env
            ),
        )
        target_passed = target.ok
        target_summary = parse_pytest_summary(_output(target))
        summary = parse_pytest_summary(_output(suite))
        suite_ran = summary.total > 0
        suite_clean = suite.ok and summary.failed == 0 and summary.errors == 0
        verified = target_passed and suite_clean
        score = summary.passed / summary.total if suite_ran else 0.0
        lines = [
            f"applied the patch to {', '.join(changed)}",
            f"failing test {self.failing_test}: {'passes now' if target_passed else 'still fails'} "
            f"({_how(target, target_summary)})",
            f"full suite ({_show(self.suite_command)}): {_how(suite, summary)}",
        ]
        if not target_passed:
            lines.append(_failure_excerpt(target, 8))
        if not suite_clean:
            lines.extend(_failed_lines(suite.stdout))
        return GroundingResult(
            grounder=self.name,
            grounded=True,
            verified=verified,
            evidence=join_evidence(lines),
            confidence=1.0 if suite_ran else 0.5,
            elapsed_ms=_ms(started),
            cost=2,
            score=score,
            passed=summary.passed,
            failed=summary.failed + summary.errors,
            details={
                "kind": "fix",
                "files_changed": changed,
                "failing_test_passed": target_passed,
                "suite": {
                    "passed": summary.passed,
                    "failed": summary.failed,
                    "errors": summary.errors,
                    "skipped": summary.skipped,
                },
                "suite_stopped_reason": suite.stopped_reason,
                **suite.isolation(),
            },
        )


    async def _ground_fix_target_only(self, new_files: dict[str, str | None], changed: list[str],
                                      started: float) -> GroundingResult:
        """A fix checked by the failing test alone (regression tests off)."""
        target = await self.sandbox.run(self.test_command, copy_from=self.repo, files=new_files, limits=self.limits,
                                        env=self.env)
        passed = target.ok
        summary = parse_pytest_summary(_output(target))
        lines = [
            f"applied the patch to {', '.join(changed)}",
            f"failing test {self.failing_test}: {'passes now' if passed else 'still fails'} ({_how(target, summary)})",
            "the rest of the suite was not run (regression tests off)",
        ]
        if not passed:
            lines.append(_failure_excerpt(target, 8))
        return GroundingResult(
            grounder=self.name, grounded=True, verified=passed, evidence=join_evidence(lines),
            confidence=CONFIDENCE_TARGET_ONLY if passed else 1.0, elapsed_ms=_ms(started), cost=1,
            score=1.0 if passed else 0.0, passed=int(passed), failed=int(not passed),
            details={"kind": "fix", "files_changed": changed, "failing_test_passed": passed, "suite": None,
                     **target.isolation()},
        )  # fmt: skip


# ------------------------------------------------------------------ helpers


def _require_pytest(python: str) -> None:
    """Raise GroundingSetupError unless `python` can import pytest."""
    same = os.path.realpath(python) == os.path.realpath(sys.executable) and python == sys.executable
    if same:
        if importlib.util.find_spec("pytest") is None:
            raise GroundingSetupError(_no_pytest(python))
        return
    try:
        ok = (
            subprocess.run([python, "-c", "import pytest"], check=False, capture_output=True, timeout=60).returncode
            == 0
        )
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    if not ok:
        raise GroundingSetupError(_no_pytest(python))


def _no_pytest(python: str) -> str:
    return (f"pytest is not importable by {python}: install it (pip install 'thoughtloom[debug]') or give another "
            "way to run a test (--test-command CMD; test_command=[...] in Python)")


def _output(result: SandboxResult) -> str:
    return result.stdout + ("\n" + result.stderr if result.stderr.strip() else "")


def _show(argv: Sequence[str]) -> str:
    shown = [os.path.basename(a) if i == 0 else a for i, a in enumerate(argv)]
    return " ".join(shown)


def _how(result: SandboxResult, summary: PytestSummary) -> str:
    if result.stopped_reason:
        return f"stopped: {result.stopped_reason}" + (f", {summary.line}" if summary.found else "")
    return summary.line or f"exit {result.exit_code}"


def _tail(output: str, n: int) -> str:
    kept = [line for line in output.strip().splitlines() if line.strip()]
    return "\n".join(kept[-n:])


def _failure_excerpt(result: SandboxResult, limit: int = 14) -> str:
    """The informative lines of a pytest failure: source marker, E lines, locations, summary."""
    # pytest reports on stdout; stderr mostly holds plugin warnings, so it is only the fallback.
    output = result.stdout if result.stdout.strip() else result.stderr
    keep = [
        line.rstrip()[:200]
        for line in output.splitlines()
        if line.startswith((">", "E ", "FAILED", "ERROR")) or _LOCATION.match(line)
    ]
    return "\n".join(keep[:limit]) if keep else _tail(output, 6)


def _failed_lines(output: str, limit: int = 5) -> list[str]:
    lines = [line.rstrip()[:200] for line in output.splitlines() if line.startswith(("FAILED ", "ERROR "))]
    return lines[:limit]


def _ms(started: float) -> int:
    return int((time.monotonic() - started) * 1000)
