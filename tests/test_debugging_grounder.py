"""The debugging grounder on a small real repository, and the patch formats it applies."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from thoughtloom.grounding.debugging import (
    DebuggingGrounder,
    GroundingSetupError,
    blamed_names,
    classify,
    parse_pytest_summary,
)
from thoughtloom.grounding.patches import PatchError, apply_patch, parse_patch
from thoughtloom.grounding.sandbox import Sandbox, SandboxLimits
from thoughtloom.grounding.types import Grounder, Thought

CALC = """\
def add(a, b):
    return a - b


def sub(a, b):
    return a - b


def mul(a, b):
    return a * b
"""
FIXED_CALC = CALC.replace("    return a - b\n\n\ndef sub", "    return a + b\n\n\ndef sub")
TEST_CALC = """\
from calc import add, mul, sub


def test_add():
    assert add(2, 3) == 5


def test_sub():
    assert sub(5, 3) == 2


def test_mul():
    assert mul(2, 3) == 6
"""
FAILING = "test_calc.py::test_add"
# The venv's plugins (hypothesis, asyncio, timeout) cost ~1 s per pytest start and play no part here.
FAST = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
DIFF_FIX = """\
The subtraction in add should be an addition:

```diff
--- a/calc.py
+++ b/calc.py
@@ -1,2 +1,2 @@
 def add(a, b):
-    return a - b
+    return a + b
```
"""


def whole_file(content: str, path: str = "calc.py") -> str:
    return f"Replace the file.\n\nFile: {path}\n```python\n{content}```\n"


def thought(content: str) -> Thought:
    return Thought(problem="test_add fails", steps=(), content=content)


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A git-less repository: calc.py with a bug in add, three tests of which test_add fails."""
    root = tmp_path_factory.mktemp("repo")
    (root / "calc.py").write_text(CALC)
    (root / "test_calc.py").write_text(TEST_CALC)
    return root


@pytest.fixture(scope="module")
def grounder(repo: Path) -> DebuggingGrounder:
    """One grounder for the module, so the failure is reproduced once."""
    return DebuggingGrounder(repo, FAILING, Sandbox(SandboxLimits(timeout_s=20, cpu_s=20)), env=FAST)


# ------------------------------------------------------------------ reproduction


async def test_reproduce_fails_as_reported(grounder: DebuggingGrounder) -> None:
    result = await grounder.reproduce()
    assert result.grounded and result.verified is True
    assert "reproduced" in result.evidence and "1 failed" in result.evidence
    assert "assert add(2, 3) == 5" in grounder.failure_output


async def test_reproduce_reports_a_test_that_already_passes(tmp_path: Path) -> None:
    (tmp_path / "calc.py").write_text(FIXED_CALC)
    (tmp_path / "test_calc.py").write_text(TEST_CALC)
    grounder = DebuggingGrounder(tmp_path, FAILING, Sandbox(SandboxLimits(timeout_s=20)), env=FAST)
    result = await grounder.reproduce()
    assert result.verified is False
    assert "the test passes on the unmodified repo: nothing to debug" in result.evidence
    later = await grounder.ground(thought("The bug is in `add`."))
    assert not later.grounded and "nothing to debug" in later.evidence


@pytest.mark.skipif(not Path("/usr/bin/python3").exists(), reason="needs a system python")
def test_missing_pytest_is_a_setup_error(repo: Path) -> None:
    if _imports_pytest("/usr/bin/python3"):
        pytest.skip("the system python has pytest")
    with pytest.raises(GroundingSetupError, match=r"pytest is not importable .* \(--test-command CMD; test_command=\[...\] in Python\)"):
        DebuggingGrounder(repo, FAILING, Sandbox(python="/usr/bin/python3"))


def test_missing_repository_is_a_setup_error(tmp_path: Path) -> None:
    with pytest.raises(GroundingSetupError, match="repository not found"):
        DebuggingGrounder(tmp_path / "nope", FAILING, Sandbox())


def test_default_commands(repo: Path) -> None:
    grounder = DebuggingGrounder(repo, FAILING, Sandbox())
    assert grounder.test_command[1:] == ["-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", FAILING]
    assert grounder.suite_command[1:] == ["-m", "pytest", "-q", "-p", "no:cacheprovider"]


# ------------------------------------------------------------------ hypotheses


async def test_hypothesis_blaming_the_culprit_is_verified(grounder: DebuggingGrounder) -> None:
    result = await grounder.ground(thought("The bug is in `add` in calc.py: it subtracts instead of adding."))
    assert result.grounded and result.verified is True
    assert "add" in result.details["matched"]
    assert 0.5 <= result.confidence <= 0.7
    assert "add(2, 3)" in result.evidence


async def test_hypothesis_blaming_something_unrelated_is_not_verified(grounder: DebuggingGrounder) -> None:
    result = await grounder.ground(thought("The `parse_config` function in settings.py reads the wrong key."))
    assert result.grounded and result.verified is False
    assert result.details["matched"] == []
    assert 0.5 <= result.confidence <= 0.7


def test_blamed_names_finds_files_lines_and_identifiers() -> None:
    names = blamed_names("In calc.py line 2 the `add` function calls helper_sum() on self.total")
    assert {"calc.py", "calc.py:2", "add", "helper_sum", "self.total", "total"} <= set(names)


def test_blamed_names_ignores_plain_words() -> None:
    assert blamed_names("The function returns the wrong value when the input is negative.") == []


# ------------------------------------------------------------------ fixes


async def test_whole_file_fix_is_verified_with_the_full_suite(grounder: DebuggingGrounder) -> None:
    result = await grounder.ground(thought(whole_file(FIXED_CALC)))
    assert result.verified is True, result.evidence
    assert result.score == 1.0 and result.confidence == 1.0
    assert result.details["files_changed"] == ["calc.py"]
    assert result.details["failing_test_passed"] is True
    assert result.details["suite"]["passed"] == 3
    assert "3 passed" in result.evidence


async def test_unified_diff_fix_is_verified(grounder: DebuggingGrounder) -> None:
    result = await grounder.ground(thought(DIFF_FIX))
    assert result.verified is True, result.evidence
    assert result.passed == 3 and result.failed == 0


async def test_fix_that_breaks_another_test_is_a_regression(grounder: DebuggingGrounder) -> None:
    broken = FIXED_CALC.replace("return a * b", "return a ** b")
    result = await grounder.ground(thought(whole_file(broken)))
    assert result.verified is False
    assert result.details["failing_test_passed"] is True
    assert result.details["suite"] == {"passed": 2, "failed": 1, "errors": 0, "skipped": 0}
    assert result.score == pytest.approx(2 / 3)
    assert "test_mul" in result.evidence


async def test_fix_that_does_not_fix_the_test_is_not_verified(grounder: DebuggingGrounder) -> None:
    result = await grounder.ground(thought(whole_file(CALC.replace("return a * b", "return b * a"))))
    assert result.verified is False
    assert result.details["failing_test_passed"] is False
    assert "still fails" in result.evidence


async def test_fix_leaves_the_repository_untouched(grounder: DebuggingGrounder, repo: Path) -> None:
    await grounder.ground(thought(DIFF_FIX))
    assert (repo / "calc.py").read_text() == CALC


@pytest.mark.parametrize("path", ["../outside.py", "/etc/passwd", "sub/../../outside.py"])
async def test_fix_escaping_the_repository_is_rejected(grounder: DebuggingGrounder, path: str) -> None:
    result = await grounder.ground(thought(whole_file("x = 1\n", path=path)))
    assert result.grounded and result.verified is False
    assert "rejected path" in result.evidence
    assert result.cost == 0  # nothing ran


async def test_patch_that_does_not_apply_is_not_verified(grounder: DebuggingGrounder) -> None:
    stale = DIFF_FIX.replace(" def add(a, b):", " def plus(a, b):")
    result = await grounder.ground(thought(stale))
    assert result.grounded and result.verified is False
    assert "does not apply" in result.evidence and "calc.py" in result.evidence


def test_classify_tells_fixes_from_hypotheses() -> None:
    assert classify(DIFF_FIX) == "fix"
    assert classify(whole_file(FIXED_CALC)) == "fix"
    assert classify("The bug is in `add`.\n```python\ndef add(a, b):\n    return a - b\n```") == "hypothesis"


def test_debugging_grounder_is_a_grounder(grounder: DebuggingGrounder) -> None:
    assert isinstance(grounder, Grounder)
    assert grounder.can_ground(thought(DIFF_FIX))
    assert grounder.can_ground(thought("`add` is wrong"))
    assert not grounder.can_ground(thought("Something is off somewhere."))


# ------------------------------------------------------------------ patches and pytest output


def test_apply_patch_diff_with_wrong_line_numbers(tmp_path: Path) -> None:
    (tmp_path / "calc.py").write_text(CALC)
    diff = DIFF_FIX.replace("@@ -1,2 +1,2 @@", "@@ -40,2 +40,2 @@")
    assert apply_patch(tmp_path, diff) == ["calc.py"]
    assert (tmp_path / "calc.py").read_text() == FIXED_CALC


def test_apply_patch_diff_touches_only_the_matched_hunk(tmp_path: Path) -> None:
    (tmp_path / "calc.py").write_text(CALC)
    diff = "--- calc.py\n+++ calc.py\n@@ -5,2 +5,2 @@\n def sub(a, b):\n-    return a - b\n+    return b - a\n"
    apply_patch(tmp_path, diff)
    text = (tmp_path / "calc.py").read_text()
    assert "def add(a, b):\n    return a - b" in text and "def sub(a, b):\n    return b - a" in text


def test_apply_patch_creates_and_deletes_files(tmp_path: Path) -> None:
    (tmp_path / "old.py").write_text("x = 1\n")
    diff = (
        "--- /dev/null\n+++ b/pkg/new.py\n@@ -0,0 +1,2 @@\n+A = 1\n+B = 2\n"
        "--- a/old.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-x = 1\n"
    )
    assert apply_patch(tmp_path, diff) == ["old.py", "pkg/new.py"]
    assert (tmp_path / "pkg" / "new.py").read_text() == "A = 1\nB = 2\n"
    assert not (tmp_path / "old.py").exists()


def test_apply_patch_search_replace(tmp_path: Path) -> None:
    (tmp_path / "calc.py").write_text(CALC)
    text = "calc.py\n```python\n<<<<<<< SEARCH\ndef add(a, b):\n    return a - b\n=======\ndef add(a, b):\n    return a + b\n>>>>>>> REPLACE\n```\n"
    assert apply_patch(tmp_path, text) == ["calc.py"]
    assert (tmp_path / "calc.py").read_text() == FIXED_CALC


def test_apply_patch_whole_file_named_in_the_fence(tmp_path: Path) -> None:
    apply_patch(tmp_path, "```python src/calc.py\nX = 1\n```")
    assert (tmp_path / "src" / "calc.py").read_text() == "X = 1\n"


def test_apply_patch_is_all_or_nothing(tmp_path: Path) -> None:
    (tmp_path / "calc.py").write_text(CALC)
    text = whole_file("X = 1\n", path="ok.py") + whole_file("Y = 2\n", path="../escape.py")
    with pytest.raises(PatchError, match="rejected path"):
        apply_patch(tmp_path, text)
    assert not (tmp_path / "ok.py").exists()


def test_apply_patch_rejects_a_symlink_escape(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "link").symlink_to(outside)
    with pytest.raises(PatchError, match="symlink"):
        apply_patch(repo, whole_file("x = 1\n", path="link/evil.py"))
    assert not (outside / "evil.py").exists()


def test_text_without_a_patch_has_no_edits() -> None:
    assert parse_patch("The bug is in add; it should use + instead of -.") == []


def test_parse_pytest_summary() -> None:
    summary = parse_pytest_summary(
        "....F\nFAILED t.py::x - assert 1\n1 failed, 4 passed, 1 skipped, 2 warnings in 0.12s\n"
    )
    assert (summary.passed, summary.failed, summary.errors, summary.skipped) == (4, 1, 0, 1)
    assert summary.total == 5


def test_parse_pytest_summary_counts_errors() -> None:
    summary = parse_pytest_summary("==== 2 passed, 1 error in 0.30s ====")
    assert (summary.passed, summary.errors) == (2, 1)


def _imports_pytest(python: str) -> bool:
    return subprocess.run([python, "-c", "import pytest"], check=False, capture_output=True).returncode == 0
