"""Run candidate code against test snippets in one sandboxed process, one verdict per test.

A harness script (`_HARNESS`) loads the candidate as a module named `candidate` (so an
`if __name__ == "__main__":` block does not run), then executes each test snippet in a copy of
the module's namespace, under a per-test time limit (SIGALRM), catching every exception. A test
is a snippet such as `assert f(1) == 2`, or a HumanEval-style `def check(candidate): ...` plus
`check(f)`.

Results travel on stdout as lines prefixed with a random nonce the harness reads from stdin
before the candidate runs; the candidate's own output goes to stderr (Python-level writes are
capped). Limitation: the candidate runs in the same process as the harness, so a deliberately
adversarial candidate could still find the nonce (frame inspection, gc) and forge results; the
nonce stops accidental forgery (code that prints "passed"), not a determined attacker. A
candidate that exits the process or kills the harness leaves the remaining tests failed.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from .sandbox import Sandbox, SandboxLimits, SandboxResult, check_syntax

CANDIDATE_FILE = "candidate.py"


@dataclass(frozen=True, slots=True)
class TestOutcome:
    """One test's verdict."""

    __test__ = False  # not a pytest test class

    test: str
    passed: bool
    error: str | None = None


@dataclass(frozen=True, slots=True)
class TestRun:
    """The verdicts of one sandboxed run of a candidate against its tests."""

    __test__ = False

    passed: int
    failed: int
    total: int
    results: list[TestOutcome]
    sandbox: SandboxResult
    load_error: str | None = None  # why the candidate itself did not load, if it did not
    notes: list[str] = field(default_factory=list)

    @property
    def all_passed(self) -> bool:
        """True when the code loaded and every test passed."""
        return self.load_error is None and self.failed == 0

    def first_failure(self) -> TestOutcome | None:
        """The first failing test, if any."""
        return next((r for r in self.results if not r.passed), None)


def default_timeouts(limits: SandboxLimits, n_tests: int) -> tuple[float, float]:
    """(load, per-test) time limits: the run's wall clock shared by the load and each test."""
    per_test = max(0.25, limits.timeout_s / (n_tests + 1))
    load = min(limits.timeout_s, max(per_test, 1.0))
    return load, per_test


async def run_tests(
    sandbox: Sandbox,
    code: str,
    tests: Sequence[str],
    *,
    limits: SandboxLimits | None = None,
    per_test_timeout_s: float | None = None,
    files: Mapping[str, str] | None = None,
) -> TestRun:
    """Run `code` and then each test snippet in one sandboxed process; report each test."""
    tests = list(tests)
    limits = limits or sandbox.limits
    check = check_syntax(code, CANDIDATE_FILE)
    if not check.ok:
        why = f"syntax error: {check.error}"
        result = SandboxResult(
            exit_code=None, signal=None, stdout="", stderr=why, stopped_reason="syntax_error", stop_detail=why
        )
        return _all_failed(tests, why, result)
    load_s, per_test_s = default_timeouts(limits, len(tests))
    if per_test_timeout_s is not None:
        per_test_s = per_test_timeout_s
    nonce = secrets.token_hex(16)
    spec = {"tests": tests, "per_test_s": per_test_s, "load_s": load_s}
    all_files: dict[str, str | bytes | None] = {
        **(files or {}),
        CANDIDATE_FILE: code,
        "_harness.py": _HARNESS,
        "_tests.json": json.dumps(spec),
    }
    result = await sandbox.run(
        [sandbox.python, "-s", "_harness.py"], files=all_files, stdin=nonce + "\n", limits=limits
    )
    return _collect(tests, result, nonce)


def _all_failed(tests: list[str], why: str, result: SandboxResult) -> TestRun:
    outcomes = [TestOutcome(t, False, why) for t in tests]
    return TestRun(0, len(tests), len(tests), outcomes, result, load_error=why)


def _collect(tests: list[str], result: SandboxResult, nonce: str) -> TestRun:
    """Read the nonce-marked lines; fill tests that never reported with why the run ended."""
    loaded: bool | None = None
    load_error: str | None = None
    verdicts: dict[int, TestOutcome] = {}
    prefix = nonce + " "
    for line in result.stdout.splitlines():
        if not line.startswith(prefix):
            continue
        try:
            msg = json.loads(line[len(prefix) :])
        except ValueError:
            continue
        kind = msg.get("kind")
        if kind == "load" and loaded is None:
            loaded = bool(msg.get("ok"))
            load_error = None if loaded else str(msg.get("error") or "the code failed to load")
        elif (
            kind == "test" and isinstance(msg.get("i"), int) and 0 <= msg["i"] < len(tests) and msg["i"] not in verdicts
        ):
            i = msg["i"]
            ok = bool(msg.get("ok"))
            verdicts[i] = TestOutcome(tests[i], ok, None if ok else str(msg.get("error") or "failed"))
    ended = _why_ended(result)
    if loaded is None:
        load_error = f"the code did not load: {ended}"
    if load_error is not None:
        return _all_failed(tests, load_error, result)
    outcomes = [verdicts.get(i) or TestOutcome(t, False, f"did not run: {ended}") for i, t in enumerate(tests)]
    passed = sum(o.passed for o in outcomes)
    return TestRun(passed, len(tests) - passed, len(tests), outcomes, result)


def _why_ended(result: SandboxResult) -> str:
    """A short reason a run stopped before all tests reported."""
    if result.stopped_reason:
        return f"{result.stopped_reason} ({result.stop_detail})" if result.stop_detail else result.stopped_reason
    tail = [line for line in result.stderr.strip().splitlines() if line.strip()]
    last = f": {tail[-1][:200]}" if tail else ""
    return f"the process exited with code {result.exit_code} before reporting{last}"


# The harness runs inside the sandbox. Keep it dependency-free (stdlib only).
_HARNESS = r'''
import ast, json, linecache, os, signal, sys, time, traceback, types

nonce = sys.stdin.readline().strip()
_devnull = os.open(os.devnull, os.O_RDONLY)
os.dup2(_devnull, 0)
sys.stdin = open(os.devnull)
_results = os.fdopen(os.dup(1), "w", buffering=1)  # the only channel for verdicts
os.dup2(2, 1)  # anything the candidate writes to fd 1 lands on stderr instead


class _Capped:
    """The candidate's print output: kept up to a cap, the rest discarded (so it cannot flood)."""

    def __init__(self, stream, cap):
        self.stream, self.left = stream, cap

    def write(self, s):
        if self.left > 0:
            part = s[: self.left]
            self.left -= len(part)
            self.stream.write(part)
            if self.left <= 0:
                self.stream.write("\n[candidate output truncated]\n")
        return len(s)

    def flush(self):
        self.stream.flush()

    def isatty(self):
        return False


_err = sys.stderr
sys.stdout = sys.stderr = _Capped(_err, 16384)
with open("_tests.json", encoding="utf-8") as f:
    spec = json.load(f)


def report(kind, **data):
    _results.write(nonce + " " + json.dumps({"kind": kind, **data}) + "\n")
    _results.flush()


class _Timeout(BaseException):
    """Raised by the alarm; a BaseException so `except Exception` in the candidate does not swallow it."""


def _alarm(signum, frame):
    raise _Timeout()


signal.signal(signal.SIGALRM, _alarm)


def limited(seconds, fn):
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return fn()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def short(value, n=200):
    try:
        text = repr(value)
    except BaseException:
        text = "<unrepresentable>"
    return text if len(text) <= n else text[: n - 3] + "..."


def describe(exc, filename=None):
    """Type, message, and where it happened (the test line; the candidate line)."""
    text = type(exc).__name__
    msg = str(exc)
    if msg:
        text += ": " + msg[:300]
    frames = traceback.extract_tb(exc.__traceback__)
    in_test = [fr for fr in frames if fr.filename == filename]
    in_code = [fr for fr in frames if fr.filename.endswith("candidate.py")]
    if in_test and in_test[-1].line:
        text += " | at: " + in_test[-1].line.strip()[:200]
        if isinstance(exc, AssertionError) and not msg:
            got = _explain_assert(in_test[-1].line.strip(), exc.__traceback__, filename)
            if got:
                text += " | " + got
    if in_code and not isinstance(exc, AssertionError):
        text += " | candidate.py line %d" % in_code[-1].lineno
    return text


def _explain_assert(line, tb, filename):
    """For a bare `assert a == b` that failed, show what `a` and `b` evaluated to."""
    try:
        node = ast.parse(line).body[0]
    except (SyntaxError, IndexError):
        return ""
    if not (isinstance(node, ast.Assert) and isinstance(node.test, ast.Compare) and len(node.test.ops) == 1):
        return ""
    frame = None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == filename:
            frame = tb.tb_frame
        tb = tb.tb_next
    if frame is None:
        return ""
    try:
        left = limited(1.0, lambda: eval(ast.unparse(node.test.left), frame.f_globals, dict(frame.f_locals)))
        right = limited(1.0, lambda: eval(ast.unparse(node.test.comparators[0]), frame.f_globals, dict(frame.f_locals)))
    except BaseException:
        return ""
    return "got %s, expected %s" % (short(left), short(right))


module = types.ModuleType("candidate")
module.__file__ = os.path.abspath("candidate.py")
sys.modules["candidate"] = module
try:
    with open("candidate.py", encoding="utf-8") as f:
        source = f.read()
    limited(spec["load_s"], lambda: exec(compile(source, "candidate.py", "exec"), module.__dict__))
except _Timeout:
    report("load", ok=False, error="timeout: the code did not finish loading within %gs" % spec["load_s"])
    os._exit(0)
except BaseException as exc:  # SystemExit and KeyboardInterrupt too: the code must load
    report("load", ok=False, error=describe(exc))
    os._exit(0)
report("load", ok=True)

for i, test in enumerate(spec["tests"]):
    name = "<test %d>" % (i + 1)
    linecache.cache[name] = (len(test), None, test.splitlines(True), name)
    namespace = dict(module.__dict__)
    try:
        code = compile(test, name, "exec")
        limited(spec["per_test_s"], lambda: exec(code, namespace))
    except _Timeout:
        report("test", i=i, ok=False, error="timeout: the test did not finish within %gs" % spec["per_test_s"])
    except BaseException as exc:
        try:
            report("test", i=i, ok=False, error=describe(exc, name))
        except BaseException:
            report("test", i=i, ok=False, error=type(exc).__name__)
    else:
        report("test", i=i, ok=True)
report("done")
_results.flush()
os._exit(0)  # skip the candidate's atexit hooks and finalizers
'''
