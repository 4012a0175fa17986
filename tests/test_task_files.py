"""A task from a TOML file: its parser and one-line errors, every answer checker, `loom tasks`, `loom solve`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from openai_server import FakeOpenAIServer, always

from thoughtloom import load_task
from thoughtloom.cli.main import main
from thoughtloom.tasks.checkers import Checker, CheckerError, Verdict

ROOT = Path(__file__).resolve().parents[1]
UNITS = ROOT / "examples" / "units.toml"


def write(tmp_path: Path, text: str, name: str = "task.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


# --- the parser -------------------------------------------------------------------------------


def test_the_example_task_file_declares_its_name_checker_examples_prompts_and_search_defaults() -> None:
    task = load_task(UNITS)
    assert task.name == "units"
    assert task.checker == Checker("numeric", relative=0.005)
    assert [ex.answer for ex in task.examples] == ["250", "180"]
    assert set(task.prompts) == {"answer"}
    assert task.search_defaults["beam"] == 1 and task.search_defaults["max_depth"] == 2
    assert task.search_defaults["generation"] == "sample"  # the general task's defaults under the file's


def test_a_task_file_puts_its_instructions_and_examples_in_the_prompts() -> None:
    task = load_task(UNITS)
    prompt = task.synthesize("How many metres are in 3 km?", ["3 * 1000 = 3000"]).prompt
    said = json.dumps([m.content for m in prompt.messages])
    assert "Give the number alone" in said and "How many seconds are in 3 minutes?" in said
    assert "Final answer: 180" in said and "Work so far:\\nStep 1: 3 * 1000 = 3000" in said
    assert "Give the number alone" in task.propose("p", [], 2).prompt.messages[0].content


BAD_FILES = [
    ('description = "x"\n', "name: expected a text (it is required)"),
    ('name = "general"\n', "name: 'general' is a task 'loom tasks' lists already"),
    ('name = "t"\nprompt = "x"\n', "unknown key 'prompt'"),
    ('name = "t"\n[prompts]\nanswer = "{question}"\n', "prompts.answer: unknown placeholder {question}"),
    ('name = "t"\n[prompts]\nanswer = "no problem here"\n', "prompts.answer: expected the placeholder {problem}"),
    ('name = "t"\n[prompts]\nsummary = "{problem}"\n', "prompts.summary: unknown prompt"),
    ('name = "t"\n[search]\nbeam = "two"\n', "search.beam: expected a whole number"),
    ('name = "t"\n[search]\nbeam = 0\n', "search: beam must be at least 1"),
    ('name = "t"\n[search]\ntemperature = 0.5\n', "search.temperature: not a search setting a task sets"),
    ('name = "t"\nchecker = "close"\n', "checker: unknown checker 'close'"),
    ('name = "t"\nchecker = {kind = "numeric", tol = 1}\n', "checker.tol: checker numeric takes relative, tolerance"),
    ('name = "t"\nchecker = {kind = "f1", threshold = 2}\n', "checker: checker threshold must be in [0, 1]"),
    ('name = "t"\n[[examples]]\nproblem = "a"\n', "examples[1].answer: expected a text or a number"),
    ('name = "t"\n[[examples]]\nproblem = "a"\nanswer = 1\nhint = "b"\n', "examples[1].hint: unknown key"),
    ('name = "t\n', "not TOML"),
]


@pytest.mark.parametrize(("text", "said"), BAD_FILES)
def test_a_bad_task_file_is_one_line_naming_the_key_and_exit_2(tmp_path: Path, text: str, said: str,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, text)
    assert main(["tasks", "--task-file", str(path)]) == 2
    err = capsys.readouterr().err
    assert said in err and str(path) in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_loom_tasks_lists_a_task_file_beside_the_built_in_tasks(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tasks", "--task-file", str(UNITS)]) == 0
    lines = capsys.readouterr().out.splitlines()
    units = next(line for line in lines if line.startswith("units "))
    assert "(checker: numeric)" in units and str(UNITS) in units
    assert any(line.startswith("general ") for line in lines)


# --- the checkers ------------------------------------------------------------------------------


@pytest.mark.parametrize(("checker", "answer", "gold", "solved"), [
    (Checker("exact"), "Answer: The Eiffel Tower.", "eiffel tower", True),
    (Checker("exact"), "Reasoning first.\nFinal answer: Paris", "Paris", True),
    (Checker("exact"), "Answer: Lyon", "Paris", False),
    (Checker("numeric"), "Answer: 4,000 m", "4000", True),
    (Checker("numeric"), "So 3 * 1000 = 3000.\nFinal answer: 3000", 3000, True),
    (Checker("numeric"), "Answer: 16.1", "16.09", False),
    (Checker("numeric", tolerance=0.05), "Answer: 16.1", "16.09", True),
    (Checker("numeric", relative=0.005), "Answer: 16.1", "16.09", True),
    (Checker("numeric"), "Answer: no idea", "7", False),
    (Checker("contains"), "Answer: it is the city of Paris, France", "Paris", True),
    (Checker("contains"), "Answer: Parisian food", "Paris", False),
    (Checker("one_of"), "Answer: NYC", "New York|NYC|New York City", True),
    (Checker("one_of"), "Answer: Boston", ["New York", "NYC"], False),
    (Checker("one_of", separator=";"), "Answer: nyc", "New York; NYC", True),
    (Checker("regex"), "Answer: 1969-07-20", r"^1969-07-\d\d$", True),
    (Checker("regex"), "Answer: 1970-01-01", r"^1969-07-\d\d$", False),
    (Checker("f1"), "Answer: Barack Obama", "Barack Obama", True),
    (Checker("f1"), "Answer: Obama", "Barack Obama", False),
    (Checker("f1", threshold=0.6), "Answer: Obama", "Barack Obama", True),
    (Checker("exact"), None, "x", False),
])
def test_each_checker_kind_solves_right_answers_and_fails_wrong_ones(checker: Checker, answer: str | None,
                                                                     gold: object, solved: bool) -> None:
    assert checker.check(answer, gold).solved is solved


def test_the_f1_checker_keeps_its_score() -> None:
    assert Checker("f1").check("Answer: Obama", "Barack Obama").score == pytest.approx(2 / 3)


def test_a_gold_the_checker_cannot_read_is_said_in_one_line() -> None:
    assert "needs a number" in (Checker("numeric").check_gold("seven") or "")
    assert "not one" in (Checker("regex").check_gold("(unclosed") or "")
    assert Checker("exact").check_gold("") == "the answer is empty"


def test_a_custom_checker_is_imported_only_when_loaded(tmp_path: Path) -> None:
    marker = tmp_path / "imported"
    write(tmp_path, f"from pathlib import Path\nPath({str(marker)!r}).write_text('yes')\n"
          "def close(answer, gold):\n    return 0.5 if answer and gold in answer else 0.0\n", "mycheck.py")
    task = load_task(write(tmp_path, 'name = "t"\nchecker = {kind = "mycheck.py:close", threshold = 0.5}\n'))
    assert task.checker is not None and task.checker.function == "mycheck.py:close"
    assert not marker.exists()  # reading the file ran none of the user's code
    with pytest.raises(CheckerError, match="not loaded"):
        task.checker.check("Answer: 12", "12")
    checker = task.checker.loaded()
    assert marker.exists()
    assert checker.check("Answer: 12", "12") == Verdict(True, 0.5)
    assert checker.check("Answer: 9", "12") == Verdict(False, 0.0)


def test_a_custom_checker_that_fails_or_returns_nonsense_is_one_line(tmp_path: Path) -> None:
    write(tmp_path, "def boom(answer, gold):\n    raise KeyError('gold')\n"
                    "def nonsense(answer, gold):\n    return 'yes'\n", "bad.py")
    with pytest.raises(CheckerError, match=r"checker bad.py:boom failed: KeyError"):
        Checker.named("bad.py:boom", str(tmp_path)).loaded().check("a", "b")
    with pytest.raises(CheckerError, match="must return true/false or a score"):
        Checker.named("bad.py:nonsense", str(tmp_path)).loaded().check("a", "b")
    with pytest.raises(CheckerError, match="has no function missing"):
        Checker.named("bad.py:missing", str(tmp_path)).loaded()
    with pytest.raises(CheckerError, match="cannot import no_such_module"):
        Checker.named("no_such_module:f").loaded()


# --- loom solve --task-file and solve(task=load_task(...)) -------------------------------------


def test_loom_solve_runs_a_task_file_with_its_prompts(server: FakeOpenAIServer, capsys: pytest.CaptureFixture[str]) -> None:
    server.responder = always("Final answer: 3000")
    code = main(["solve", "--task-file", str(UNITS), "How many metres are in 3 kilometres?", "--model",
                 f"openai-compatible:{server.url}@m", "--budget-tokens", "4000", "--quiet", "--json"])
    out = capsys.readouterr().out
    assert code == 0
    assert json.loads(out)["answer"] == "3000"
    asked = [json.dumps(seen.body) for seen in server.seen]
    assert all("Give the number alone" in body for body in asked)  # the file's instructions, in every call
    assert any("Work so far:" in body for body in asked)  # its answer prompt


def test_loom_solve_refuses_a_task_and_a_task_file_together(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["solve", "--task", "general", "--task-file", str(UNITS), "3 km in m"]) == 2
    assert "give --task NAME or --task-file FILE, not both" in capsys.readouterr().err


def test_solve_in_python_takes_a_loaded_task_file(server: FakeOpenAIServer) -> None:
    from thoughtloom import BudgetLimits, solve

    server.responder = always("Final answer: 72")
    result = solve("How many hours are in 3 days?", task=load_task(UNITS), model=f"openai-compatible:{server.url}@m",
                   budget=BudgetLimits(tokens=4000))
    assert result.answer == "72"


def stored_run(server: FakeOpenAIServer, task_file: Path, store: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """The id of a run of the task file, stored in `store`."""
    server.responder = always("Final answer: 3000")
    assert main(["solve", "--task-file", str(task_file), "How many metres are in 3 kilometres?", "--model",
                 f"openai-compatible:{server.url}@m", "--budget-tokens", "4000", "--quiet", "--json",
                 "--store", str(store)]) == 0
    return str(json.loads(capsys.readouterr().out)["run_id"])


def test_a_stored_task_file_run_replays_only_when_the_file_is_named_again(
        server: FakeOpenAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "runs.db"
    run = stored_run(server, UNITS, store, capsys)
    assert main(["replay", run, "--store", str(store), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"this run asks for the task file {UNITS}" in err and f"--task-file {UNITS}" in err
    assert err.count("\n") == 1
    assert main(["replay", run, "--store", str(store), "--quiet", "--task-file", str(UNITS)]) == 0
    assert "identical graph" in capsys.readouterr().out


def test_a_task_file_that_no_longer_declares_the_runs_task_is_refused(
        server: FakeOpenAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    task_file = write(tmp_path, UNITS.read_text(encoding="utf-8"), "units.toml")
    store = tmp_path / "runs.db"
    run = stored_run(server, task_file, store, capsys)
    task_file.write_text(task_file.read_text(encoding="utf-8").replace('name = "units"', 'name = "sizes"'),
                         encoding="utf-8")
    assert main(["replay", run, "--store", str(store), "--quiet", "--task-file", str(task_file)]) == 2
    assert f"{task_file} declares task 'sizes'; run {run} ran task 'units'" in capsys.readouterr().err
