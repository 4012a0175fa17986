"""The debug task: a real failing test in a temporary repository, fixed by a (scripted) model and verified."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_debugging_grounder import CALC, FAILING, FAST, FIXED_CALC, TEST_CALC

from thoughtloom.llm.fake import ScriptedBackend
from thoughtloom.llm.gateway import Gateway
from thoughtloom.search.config import SearchConfig
from thoughtloom.search.engine import search
from thoughtloom.tasks.base import ProblemError
from thoughtloom.tasks.debug import DebugTask

HYPOTHESIS = "add() in calc.py subtracts instead of adding."
WRONG_FIX = CALC.replace("return a * b", "return a * b * 1").replace("    return a - b\n\n\ndef sub", "    return b - a\n\n\ndef sub")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    (root / "calc.py").write_text(CALC)
    (root / "test_calc.py").write_text(TEST_CALC)
    return root


def debug_model(*fixes: str) -> ScriptedBackend:
    """Hypothesis prompts get HYPOTHESIS; fix prompts get the fixes in turn (the body of calc.py)."""
    fake = ScriptedBackend()
    fake.on("The cause of the failure", HYPOTHESIS)
    fake.on("(fixed)\n```python", *fixes)
    return fake


async def run(repo: Path, fake: ScriptedBackend, **config):
    task = DebugTask(repo=repo, failing_test=FAILING, test_env=FAST)
    cfg = SearchConfig(**{**task.search_defaults, "breadth": 1, "beam": 1, **config})
    return await search(task, "add(2, 3) should be 5", Gateway(fake), cfg)


async def test_the_proposed_fix_is_verified_by_the_failing_test_and_the_suite(repo: Path) -> None:
    result = await run(repo, debug_model(FIXED_CALC))
    assert result.termination_reason == "goal_reached"
    assert result.solved is True
    fix = result.grounding[result.goal_node]
    assert fix.verified is True and fix.details["failing_test_passed"] is True
    assert "return a + b" in result.answer and "calc.py" in result.answer.splitlines()[0]


async def test_the_hypothesis_is_checked_against_the_reproduced_failure(repo: Path) -> None:
    result = await run(repo, debug_model(FIXED_CALC))
    hypothesis = next(n for n in result.graph if n.content == HYPOTHESIS)
    assert result.grounding[hypothesis.id].verified is True


async def test_the_prompts_show_the_failure_and_the_source(repo: Path) -> None:
    fake = debug_model(FIXED_CALC)
    await run(repo, fake)
    first = fake.calls[0].prompt.as_text()
    assert "test_add" in first and "assert add(2, 3) == 5" in first and "### calc.py" in first


async def test_a_fix_that_breaks_another_test_is_revised_with_what_the_tests_said(repo: Path) -> None:
    fake = debug_model(WRONG_FIX, FIXED_CALC)
    result = await run(repo, fake)
    revisions = [r for r in fake.calls if "This attempt did not work" in r.prompt.as_text()]
    assert revisions
    assert result.solved is True and result.stats.grounding.grounding_failed >= 1


async def test_the_repository_itself_is_never_modified(repo: Path) -> None:
    await run(repo, debug_model(FIXED_CALC))
    assert (repo / "calc.py").read_text() == CALC


async def test_a_test_that_passes_on_the_unmodified_repo_is_a_problem_error(repo: Path) -> None:
    (repo / "calc.py").write_text(FIXED_CALC)
    with pytest.raises(ProblemError, match="passes on the unmodified repo"):
        await run(repo, debug_model(FIXED_CALC))


def test_a_failing_test_outside_the_repo_is_a_problem_error(repo: Path) -> None:
    with pytest.raises(ProblemError, match="no file 'nope.py'"):
        DebugTask(repo=repo, failing_test="nope.py::test_x").parse_problem("")


@pytest.mark.timeout(30)
def test_the_sources_shown_to_the_model_are_regular_files_inside_the_repo(tmp_path: Path) -> None:
    import os

    from thoughtloom.tasks.debug import involved_sources

    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "calc.py").write_text(CALC)
    (repo / "test_calc.py").write_text(TEST_CALC)
    (tmp_path / "secret.py").write_text("TOKEN = 'swordfish'\n")
    os.symlink(tmp_path / "secret.py", repo / "leak.py")
    os.mkfifo(repo / "pipe.py")
    with open(os.fsencode(repo) + b"/\xff.py", "wb") as fh:
        fh.write(b"x = 1\n")
    sources = involved_sources(repo, "test_calc.py::test_add", "leak.py pipe.py \\xff.py calc.py failed")
    assert [name for name, _ in sources] == ["calc.py", "test_calc.py"]
