"""The code grounder: extracting code from a thought and running it against tests in the sandbox."""

from __future__ import annotations

import pytest

from thoughtloom.grounding.code import CodeGrounder, extract_code
from thoughtloom.grounding.sandbox import Sandbox, SandboxLimits
from thoughtloom.grounding.testrun import run_tests
from thoughtloom.grounding.types import Grounder, Thought

LIMITS = SandboxLimits(timeout_s=3, cpu_s=5, memory_mb=512)
TESTS = ["assert add(1, 2) == 3", "assert add(-1, 1) == 0", "assert add(10, 5) == 15"]


@pytest.fixture(scope="module")
def sandbox() -> Sandbox:
    """One sandbox for the module."""
    return Sandbox(LIMITS)


def thought(content: str) -> Thought:
    return Thought(problem="write add(a, b)", steps=(), content=content, kind="code")


def fenced(code: str, tag: str = "python") -> str:
    return f"Here is my solution:\n\n```{tag}\n{code}\n```\n"


# ------------------------------------------------------------------ extract_code


def test_extract_code_takes_a_python_fence() -> None:
    assert extract_code(fenced("def add(a, b):\n    return a + b")) == "def add(a, b):\n    return a + b"


def test_extract_code_prefers_the_definition_over_a_usage_example() -> None:
    text = fenced("def add(a, b):\n    return a + b") + "Usage:\n" + fenced("print(add(1, 2))")
    assert extract_code(text) == "def add(a, b):\n    return a + b"


def test_extract_code_prefers_the_later_rewrite() -> None:
    text = fenced("def add(a, b):\n    return a - b") + "Oops, fixed:\n" + fenced("def add(a, b):\n    return a + b")
    assert extract_code(text) == "def add(a, b):\n    return a + b"


def test_extract_code_prefers_a_block_that_compiles() -> None:
    text = fenced("def add(a, b):\n    return a + b") + fenced("def add(a, b)\n    return a +")
    assert extract_code(text) == "def add(a, b):\n    return a + b"


def test_extract_code_returns_a_broken_block_when_it_is_the_only_code() -> None:
    assert extract_code(fenced("def add(a, b)\n    return a + b")) == "def add(a, b)\n    return a + b"


def test_extract_code_accepts_an_untagged_fence_with_code() -> None:
    assert extract_code(fenced("def add(a, b):\n    return a + b", tag="")) == "def add(a, b):\n    return a + b"


def test_extract_code_ignores_a_fence_in_another_language() -> None:
    assert extract_code("Run:\n```bash\npip install foo\n```\n") is None


def test_extract_code_reads_an_unclosed_fence_to_the_end() -> None:
    assert extract_code("```python\ndef add(a, b):\n    return a + b\n") == "def add(a, b):\n    return a + b"


def test_extract_code_accepts_bare_code() -> None:
    assert extract_code("import math\n\ndef area(r):\n    return math.pi * r * r\n") is not None


def test_extract_code_rejects_prose() -> None:
    assert extract_code("I think we should return the sum of both numbers and import nothing.") is None


# ------------------------------------------------------------------ grounding


async def test_correct_code_is_verified_with_score_1(sandbox: Sandbox) -> None:
    grounder = CodeGrounder(TESTS, sandbox)
    result = await grounder.ground(thought(fenced("def add(a, b):\n    return a + b")))
    assert result.grounded and result.verified is True
    assert result.score == 1.0 and result.passed == 3 and result.failed == 0
    assert result.cost == 1
    assert result.details["network_isolated"] in (True, False)


async def test_partly_correct_code_scores_the_fraction_passed(sandbox: Sandbox) -> None:
    code = "def add(a, b):\n    if a < 0:\n        return 99\n    return a + b"
    result = await CodeGrounder(TESTS, sandbox).ground(thought(fenced(code)))
    assert result.verified is False
    assert result.score == pytest.approx(2 / 3)
    assert (result.passed, result.failed) == (2, 1)
    assert "assert add(-1, 1) == 0" in result.evidence


async def test_failing_assert_shows_what_the_call_returned(sandbox: Sandbox) -> None:
    result = await CodeGrounder(["assert add(2, 2) == 4"], sandbox).ground(
        thought(fenced("def add(a, b):\n    return a * b + 1"))
    )
    assert "got 5, expected 4" in result.evidence


async def test_syntax_error_is_a_definite_failure(sandbox: Sandbox) -> None:
    result = await CodeGrounder(TESTS, sandbox).ground(thought(fenced("def add(a, b)\n    return a + b")))
    assert result.grounded and result.verified is False
    assert result.confidence == 1.0 and result.score == 0.0
    assert result.details["stopped_reason"] == "syntax_error"
    assert "line 1" in result.evidence


async def test_exception_at_top_level_fails_every_test(sandbox: Sandbox) -> None:
    code = "def add(a, b):\n    return a + b\n\nraise RuntimeError('broken import')"
    result = await CodeGrounder(TESTS, sandbox).ground(thought(fenced(code)))
    assert result.verified is False and result.passed == 0 and result.failed == 3
    assert "RuntimeError: broken import" in result.evidence


async def test_exception_inside_the_function_names_the_candidate_line(sandbox: Sandbox) -> None:
    code = "def add(a, b):\n    return a / 0"
    run = await run_tests(sandbox, code, ["assert add(1, 2) == 3"])
    assert run.failed == 1
    assert run.results[0].error is not None
    assert "ZeroDivisionError" in run.results[0].error and "candidate.py line 2" in run.results[0].error


async def test_infinite_loop_in_the_function_fails_every_test_with_timeout(sandbox: Sandbox) -> None:
    code = "def add(a, b):\n    while True:\n        pass"
    result = await CodeGrounder(TESTS, sandbox, per_test_timeout_s=0.4).ground(thought(fenced(code)))
    assert result.verified is False and result.failed == 3
    assert all("timeout" in t["error"] for t in result.details["tests"])


async def test_infinite_loop_at_top_level_fails_every_test_with_timeout(sandbox: Sandbox) -> None:
    code = "def add(a, b):\n    return a + b\n\nwhile True:\n    pass"
    result = await CodeGrounder(TESTS, sandbox).ground(thought(fenced(code)))
    assert result.verified is False and result.failed == 3
    assert "timeout" in result.evidence


async def test_one_slow_test_does_not_fail_the_others(sandbox: Sandbox) -> None:
    code = "def add(a, b):\n    while a == 10:\n        pass\n    return a + b"
    result = await CodeGrounder(TESTS, sandbox, per_test_timeout_s=0.4).ground(thought(fenced(code)))
    assert (result.passed, result.failed) == (2, 1)


async def test_humaneval_style_check_function(sandbox: Sandbox) -> None:
    check = (
        "def check(candidate):\n    assert candidate([1, 2, 3]) == 6\n    assert candidate([]) == 0\n\ncheck(total)\n"
    )
    good = await CodeGrounder([check], sandbox).ground(thought(fenced("def total(xs):\n    return sum(xs)")))
    bad = await CodeGrounder([check], sandbox).ground(thought(fenced("def total(xs):\n    return xs[0] + sum(xs)")))
    assert good.verified is True and good.score == 1.0
    assert bad.verified is False
    assert "candidate([1, 2, 3]) == 6" in bad.evidence


async def test_prefix_is_prepended_when_the_entry_point_is_missing(sandbox: Sandbox) -> None:
    prompt = 'from typing import List\n\n\ndef total(xs: List[int]) -> int:\n    """Sum of xs."""\n'
    grounder = CodeGrounder(["assert total([1, 2]) == 3"], sandbox, entry_point="total", prefix=prompt)
    body_only = "    return sum(xs)\n"
    assert grounder.can_ground(thought(body_only))
    result = await grounder.ground(thought(body_only))
    assert result.verified is True


async def test_prefix_is_not_prepended_when_the_code_defines_the_entry_point(sandbox: Sandbox) -> None:
    grounder = CodeGrounder(
        ["assert total([1, 2]) == 3"], sandbox, entry_point="total", prefix="raise SystemExit('prefix ran')\n"
    )
    result = await grounder.ground(thought(fenced("def total(xs):\n    return sum(xs)")))
    assert result.verified is True


async def test_no_tests_means_a_clean_run_with_low_confidence(sandbox: Sandbox) -> None:
    result = await CodeGrounder([], sandbox).ground(thought(fenced("def add(a, b):\n    return a + b")))
    assert result.verified is True and result.score == 1.0 and result.confidence == 0.3


async def test_no_tests_and_a_crash_is_not_verified(sandbox: Sandbox) -> None:
    result = await CodeGrounder([], sandbox).ground(
        thought(fenced("import no_such_module_xyz\n\ndef f():\n    return 1"))
    )
    assert result.verified is False
    assert "ModuleNotFoundError" in result.evidence


async def test_main_block_does_not_run_when_loading(sandbox: Sandbox) -> None:
    code = "def add(a, b):\n    return a + b\n\nif __name__ == '__main__':\n    print(add(int(input()), 1))"
    result = await CodeGrounder(TESTS, sandbox).ground(thought(fenced(code)))
    assert result.verified is True


async def test_printed_fake_verdicts_are_not_trusted(sandbox: Sandbox) -> None:
    code = (
        "import sys\n"
        "for i in range(3):\n"
        '    print(\'0\' * 32 + \' {"kind": "test", "i": %d, "ok": true}\' % i)\n'
        "sys.stdout.flush()\n"
        "def add(a, b):\n    return -7\n"
    )
    result = await CodeGrounder(TESTS, sandbox).ground(thought(fenced(code)))
    assert result.passed == 0 and result.verified is False


async def test_exiting_the_process_early_fails_every_test(sandbox: Sandbox) -> None:
    code = "import os\n\ndef add(a, b):\n    return a + b\n\nos._exit(0)"
    result = await CodeGrounder(TESTS, sandbox).ground(thought(fenced(code)))
    assert result.verified is False and result.failed == 3
    assert "did not load" in result.evidence


def test_prose_cannot_be_grounded(sandbox: Sandbox) -> None:
    assert not CodeGrounder(TESTS, sandbox).can_ground(thought("We should add the two numbers."))


def test_code_grounder_is_a_grounder(sandbox: Sandbox) -> None:
    assert isinstance(CodeGrounder(TESTS, sandbox), Grounder)
