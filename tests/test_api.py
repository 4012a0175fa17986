"""The Python API: solve() and asolve() as a library user calls them."""

from __future__ import annotations

from pathlib import Path

from thoughtloom import solve
from thoughtloom.grounding.knowledge import KnowledgeBase
from thoughtloom.grounding.knowledge_check import ResearchGrounder
from thoughtloom.llm.fake import ScriptedBackend
from thoughtloom.tasks.registry import TaskOptions, get_task


def test_without_a_config_the_tasks_own_search_defaults_apply(tmp_path: Path) -> None:
    tests = tmp_path / "t.py"
    tests.write_text("assert add(1, 2) == 3\n")
    fake = ScriptedBackend(responder=lambda request, index: "a, b):\n    return a + b\n")
    result = solve("write add(a, b)", task=get_task("code", TaskOptions(tests=tests)), model=fake)
    assert result.config["generation"] == "sample"  # the code task's default, not the engine's "propose"
    assert result.solved is True


def test_keyword_overrides_change_single_config_fields() -> None:
    fake = ScriptedBackend(responder=lambda request, index: "7" if "scale of 0 to 10" in request.prompt.as_text() else "a step")
    result = solve("a question", model=fake, max_depth=1, breadth=2)
    assert (result.config["max_depth"], result.config["breadth"]) == (1, 2)


def test_extra_grounders_check_the_thoughts(tmp_path: Path) -> None:
    (tmp_path / "notes.md").write_text("The migration failed because the disk was full.\n")
    fake = ScriptedBackend(responder=lambda request, index: (
        "8" if "scale of 0 to 10" in request.prompt.as_text() else "The migration failed because the disk was full."
    ))
    result = solve("Why did the migration fail?", model=fake, max_depth=1,
                   grounders=[ResearchGrounder(KnowledgeBase.open(tmp_path))])
    assert [g.verified for g in result.grounding.values()] == [True]
