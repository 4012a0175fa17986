"""A task declared in Python (`thoughtloom.task`): the same task a task file gives, recorded whole in a stored run.

Real parts: the scripted OpenAI-compatible server on 127.0.0.1, a real SQLite store, `loom replay` in this process.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from openai_server import FakeOpenAIServer, always

from thoughtloom import BudgetLimits, TaskExample, solve, task
from thoughtloom.cli.main import main
from thoughtloom.run.spec import SpecError
from thoughtloom.run.taskfile import TaskFileError
from thoughtloom.store.blocks import link
from thoughtloom.store.runs import head_ref, history, run_ids
from thoughtloom.store.sqlite import SQLiteStore
from thoughtloom.store.store import get_obj, put_obj
from thoughtloom.tasks.checkers import Checker

PROBLEM = "How many metres are in 3 kilometres?"


def units() -> Any:
    return task(
        name="units-py", instructions="Convert the quantity. Give the number alone after 'Final answer:'.",
        examples=[("How many seconds are in 3 minutes?", "180"),
                  TaskExample("How many grams are in 2 kg?", "2000", "1 kg is 1000 g")],
        prompts={"answer": "Problem: {problem}\nWork so far:\n{steps}\nFinal answer:"},
        checker={"kind": "numeric", "relative": 0.005}, search={"beam": 1, "max_depth": 2},
    )


def test_a_python_task_is_the_task_a_task_file_declares() -> None:
    declared = units()
    assert declared.name == "units-py"
    assert declared.checker == Checker("numeric", relative=0.005)
    assert declared.examples[0] == TaskExample("How many seconds are in 3 minutes?", "180")
    assert declared.examples[1].reasoning == "1 kg is 1000 g"
    assert declared.search_defaults["beam"] == 1 and declared.search_defaults["generation"] == "sample"


@pytest.mark.parametrize(("kwargs", "said"), [
    ({"name": "general"}, "name: 'general' is a task 'loom tasks' lists already"),
    ({"name": "t", "prompts": {"answer": "no problem here"}}, "prompts.answer: expected the placeholder {problem}"),
    ({"name": "t", "examples": [("only a problem",)]}, "examples[1]: expected (problem, answer[, reasoning])"),
    ({"name": "t", "checker": "close"}, "checker: unknown checker 'close'"),
])
def test_a_bad_python_task_is_one_line_naming_the_key(kwargs: dict[str, Any], said: str) -> None:
    with pytest.raises(TaskFileError) as caught:
        task(**kwargs)
    assert said in str(caught.value) and "task()" in str(caught.value) and "\n" not in str(caught.value)


def test_solve_with_a_python_task_sends_its_instructions_and_examples(server: FakeOpenAIServer) -> None:
    server.responder = always("Final answer: 3000")
    result = solve(PROBLEM, task=units(), model=f"openai-compatible:{server.url}@m", budget=BudgetLimits(tokens=4000))
    assert result.answer == "3000"
    asked = [json.dumps(seen.body) for seen in server.seen]
    assert all("Give the number alone" in body for body in asked)  # the instructions, in every call
    assert any("How many seconds are in 3 minutes?" in body and "Work so far:" in body for body in asked)


def stored(server: FakeOpenAIServer, store: Path) -> str:
    server.responder = always("Final answer: 3000")
    result = solve(PROBLEM, task=units(), model=f"openai-compatible:{server.url}@m", budget=BudgetLimits(tokens=4000),
                   store=str(store))
    assert result.run_id is not None
    return result.run_id


def test_a_stored_python_task_run_replays_exactly_with_no_model_call(
        server: FakeOpenAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "runs.db"
    run = stored(server, store)
    sent = len(server.seen)
    assert main(["replay", run, "--store", str(store), "--quiet"]) == 0  # nothing named again
    assert "identical graph" in capsys.readouterr().out
    assert len(server.seen) == sent


def forge(store: Path, run: str, change: Any, *, calls: int | None = None) -> None:
    """The run's newest state (or its first after `calls` recorded calls, unfinished) with its manifest's spec
    rewritten (re-encoded, so every CID verifies)."""
    with SQLiteStore(store) as s:
        heads = list(history(s, s.get_ref(head_ref(run))))
        _, head = heads[0] if calls is None else next(h for h in reversed(heads) if h[1]["usage"]["calls"] >= calls)
        manifest = dict(get_obj(s, head["manifest"].cid))
        manifest["spec"] = change(dict(manifest["spec"]))
        s.set_ref(head_ref(run), put_obj(s, {**head, "manifest": link(put_obj(s, manifest))}))


def test_a_resumed_python_task_run_asks_the_model_with_its_instructions(
        server: FakeOpenAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "runs.db"
    run = stored(server, store)
    forge(store, run, lambda spec: spec, calls=1)  # the run as it was after its first call
    sent = len(server.seen)
    assert main(["resume", run, "--store", str(store), "--quiet", "--model", f"openai-compatible:{server.url}@m"]) == 0
    assert capsys.readouterr().out.startswith("answer: 3000")
    resumed = [json.dumps(seen.body) for seen in server.seen[sent:]]
    assert resumed and all("Give the number alone" in body for body in resumed)


def test_a_stored_custom_checker_is_kept_by_name_and_never_imported_by_replay(
        server: FakeOpenAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    server.responder = always("Final answer: 3000")
    store = tmp_path / "runs.db"
    declared = task(name="units-py", instructions="Convert.", checker="no_such_checker_module:check")
    run = solve(PROBLEM, task=declared, model=f"openai-compatible:{server.url}@m", budget=BudgetLimits(tokens=4000),
                store=str(store)).run_id
    assert run is not None
    assert main(["replay", run, "--store", str(store), "--quiet"]) == 0  # no import of the checker's module
    assert "identical graph" in capsys.readouterr().out


@pytest.mark.parametrize(("change", "said"), [
    (lambda d: {**d, "prompts": {"answer": "{problem.__class__}"}}, "prompts.answer: unknown placeholder"),
    (lambda d: {**d, "instructions": "x" * (2 << 20)}, "a stored task declaration holds at most"),
    (lambda d: {**d, "name": "other"}, "declares task 'other'; the run ran task 'units-py'"),
    (lambda d: "units-py", "task_declared must be dict or null"),
])
def test_replay_refuses_a_received_run_whose_task_declaration_is_bad_in_one_line(
        server: FakeOpenAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str], change: Any, said: str) -> None:
    store = tmp_path / "runs.db"
    run = stored(server, store)
    forge(store, run, lambda spec: {**spec, "task_declared": change(spec["task_declared"])})
    assert main(["replay", run, "--store", str(store), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert said in err and run in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_a_bare_general_task_with_instructions_is_not_stored_without_its_declaration(
        server: FakeOpenAIServer, tmp_path: Path) -> None:
    from thoughtloom.tasks.general import GeneralTask

    server.responder = always("Final answer: 3000")
    with pytest.raises(SpecError, match=r"thoughtloom\.task\(name="):
        solve(PROBLEM, task=GeneralTask(instructions="Be brief."), model=f"openai-compatible:{server.url}@m",
              budget=BudgetLimits(tokens=4000), store=str(tmp_path / "runs.db"))
    assert server.seen == []


def test_the_python_task_example_in_the_docs_runs_and_its_run_replays(
        server: FakeOpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from docs_examples import blocks

    page = Path(__file__).resolve().parents[1] / "docs" / "tasks.md"
    block = next(b for b in blocks(page) if b.info == "python" and "units = task(" in b.text)
    server.responder = always("Final answer: 3000")
    monkeypatch.chdir(tmp_path)
    exec(block.text.replace("openai:gpt-4o-mini", f"openai-compatible:{server.url}@m"), {})  # noqa: S102
    assert capsys.readouterr().out == "3000 True\n"
    assert any("A kilogram is 1000 g" in json.dumps(seen.body) for seen in server.seen)
    with SQLiteStore(tmp_path / "runs.db") as s:
        [run] = run_ids(s)  # the one run the example stored
    assert main(["replay", run, "--store", "runs.db", "--quiet"]) == 0
    assert "identical graph" in capsys.readouterr().out
