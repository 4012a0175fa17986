"""A user's own scorer: `solve(..., scorer=fn)` and `loom solve --scorer` score the thoughts instead of the model."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from pathlib import Path

import pytest
from openai_server import FakeOpenAIServer, completions_of

from thoughtloom import Grants, Scored, areplay, solve
from thoughtloom.cli.main import main
from thoughtloom.llm.fake import ScriptedBackend
from thoughtloom.llm.types import GenerateRequest
from thoughtloom.run.spec import SpecError
from thoughtloom.search.scorer import ScorerError
from thoughtloom.store.sqlite import SQLiteStore

PROBLEM = "Which way leads out of the maze?"
#: One expansion of two thoughts, each a whole path: the scores alone decide which one answers.
SEARCH = {"generation": "propose", "breadth": 2, "beam": 2, "max_depth": 1}
FLAGS = ["--generation", "propose", "--breadth", "2", "--beam", "2", "--depth", "1"]


def maze_model(request: GenerateRequest, index: int) -> str:
    """The scripted model: proposes paths A and B, values A far above B, answers from the path it is shown."""
    text = request.prompt.as_text()
    if "Quality of the last step" in text or "Evaluate the last step" in text:
        return "9" if "Path A" in text.rsplit("Reasoning", 1)[-1] else "2"
    if "Final answer" in text or "final answer" in text:
        return "right" if "Path B" in text else "left"
    return "1. Path A: turn left at every fork\n2. Path B: follow the right-hand wall"


def prefer_b(thought: str, path: Sequence[str]) -> Scored | float:
    """Path B wins under this scorer (the model's evaluator prefers A)."""
    return Scored(0.9, "the right-hand wall always leads out") if "Path B" in thought else 0.1


SCORER_FILE = '''
from thoughtloom import Scored

SEEN = []


def prefer_b(thought, path):
    return Scored(0.9, "the right-hand wall always leads out") if "Path B" in thought else 0.1


def out_of_range(thought, path):
    return 7
'''


def evaluations(fake: ScriptedBackend) -> list[GenerateRequest]:
    return [r for r in fake.calls if r.purpose == "evaluate"]


def test_without_a_scorer_the_models_evaluation_picks_path_a() -> None:
    fake = ScriptedBackend(responder=maze_model)
    result = solve(PROBLEM, model=fake, **SEARCH)
    assert result.answer == "left"
    assert evaluations(fake)


def test_a_user_scorer_makes_path_b_win_with_no_evaluation_call() -> None:
    fake = ScriptedBackend(responder=maze_model)
    result = solve(PROBLEM, model=fake, scorer=prefer_b, **SEARCH)
    assert result.answer == "right"
    assert evaluations(fake) == []
    b = next(step for step in result.best_path if "Path B" in step.content)
    assert b.score == 0.9
    assert b.evaluation is not None and b.evaluation.reasoning == "the right-hand wall always leads out"


def test_the_scorer_is_given_the_thought_and_its_path_from_the_root() -> None:
    seen: list[tuple[str, tuple[str, ...]]] = []

    def record(thought: str, path: Sequence[str]) -> float:
        seen.append((thought, tuple(path)))
        return 0.5

    solve(PROBLEM, model=ScriptedBackend(responder=maze_model), scorer=record, **SEARCH)
    assert ("Path A: turn left at every fork", (PROBLEM, "Path A: turn left at every fork")) in seen


def test_an_async_scorer_is_awaited() -> None:
    async def prefer_b_later(thought: str, path: Sequence[str]) -> tuple[float, str]:
        await asyncio.sleep(0)
        return (0.8, "later") if "Path B" in thought else (0.2, "")

    result = solve(PROBLEM, model=ScriptedBackend(responder=maze_model), scorer=prefer_b_later, **SEARCH)
    assert result.answer == "right"


@pytest.mark.parametrize("returned", [7, -0.1, float("nan"), "high", None, (0.5,)])
def test_a_scorer_that_returns_no_score_in_0_1_is_one_line_naming_it(returned: object) -> None:
    def bad(thought: str, path: Sequence[str]) -> object:
        return returned

    with pytest.raises(ScorerError) as caught:
        solve(PROBLEM, model=ScriptedBackend(responder=maze_model), scorer=bad, **SEARCH)  # type: ignore[arg-type]
    message = str(caught.value)
    assert "scorer" in message and "bad" in message and "[0, 1]" in message and "\n" not in message


def test_a_scorer_that_raises_is_one_line_naming_it() -> None:
    def broken(thought: str, path: Sequence[str]) -> float:
        raise KeyError("no such wall")

    with pytest.raises(ScorerError, match=r"scorer .*broken failed: KeyError: 'no such wall'"):
        solve(PROBLEM, model=ScriptedBackend(responder=maze_model), scorer=broken, **SEARCH)


def test_a_scorer_is_refused_for_a_strategy_that_scores_its_own_way() -> None:
    with pytest.raises(SpecError, match="--strategy cove"):
        solve(PROBLEM, model=ScriptedBackend(responder=maze_model), scorer=prefer_b, strategy="cove")


# --- loom solve --scorer, the stored run, replay and resume --------------------------------------


@pytest.fixture
def scorers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A module of scorers, importable as `maze_scorers` (and by its file)."""
    path = tmp_path / "maze_scorers.py"
    path.write_text(SCORER_FILE, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    return path


def loom_solve(server: FakeOpenAIServer, *more: str) -> list[str]:
    server.responder = completions_of(maze_model)
    return ["solve", PROBLEM, "--task", "general", "--model", f"openai-compatible:{server.url}@m#completions",
            *FLAGS, "--quiet", "--json", *more]


def test_loom_solve_scorer_module_function_makes_path_b_win(
        server: FakeOpenAIServer, scorers: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(loom_solve(server, "--no-store")) == 0
    assert json.loads(capsys.readouterr().out)["answer"] == "left"
    assert any("Quality of the last step" in str(seen.body) for seen in server.seen)
    server.seen.clear()
    assert main(loom_solve(server, "--no-store", "--scorer", "maze_scorers:prefer_b")) == 0
    assert json.loads(capsys.readouterr().out)["answer"] == "right"
    assert not any("Quality of the last step" in str(seen.body) for seen in server.seen)  # no evaluation call


def test_loom_solve_scorer_takes_a_file_and_function(
        server: FakeOpenAIServer, scorers: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(loom_solve(server, "--no-store", "--scorer", f"{scorers}:prefer_b")) == 0
    assert json.loads(capsys.readouterr().out)["answer"] == "right"


@pytest.mark.parametrize(("reference", "said"), [
    ("maze_scorers:no_such", "maze_scorers has no function no_such"),
    ("no_such_module:f", "cannot import no_such_module"),
    ("not a reference", "module:function"),
    ("maze_scorers:out_of_range", "scorer maze_scorers:out_of_range must return a score in [0, 1]"),
])
def test_a_bad_scorer_on_the_command_line_is_one_line_and_exit_2(
        server: FakeOpenAIServer, scorers: Path, capsys: pytest.CaptureFixture[str], reference: str,
        said: str) -> None:
    assert main(loom_solve(server, "--no-store", "--scorer", reference)) == 2
    err = capsys.readouterr().err
    assert said in err and err.count("\n") == 1 and "Traceback" not in err


def stored_run(server: FakeOpenAIServer, store: Path, capsys: pytest.CaptureFixture[str]) -> str:
    assert main(loom_solve(server, "--store", str(store), "--scorer", "maze_scorers:prefer_b")) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["answer"] == "right"
    return str(out["run_id"])


def test_a_stored_run_records_its_scorer_by_name(
        server: FakeOpenAIServer, scorers: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "runs.db"
    run = stored_run(server, store, capsys)
    manifest = tmp_path / "manifest.json"
    assert main(["export", run, "--store", str(store), "--manifest", str(manifest)]) == 0
    assert json.loads(manifest.read_text(encoding="utf-8"))["spec"]["scorer"] == "maze_scorers:prefer_b"


def test_replay_without_the_scorer_is_refused_in_one_line_and_with_it_identical(
        server: FakeOpenAIServer, scorers: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "runs.db"
    run = stored_run(server, store, capsys)
    assert main(["replay", run, "--store", str(store), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "this run asks for the scorer maze_scorers:prefer_b" in err and "--scorer maze_scorers:prefer_b" in err
    assert err.count("\n") == 1
    assert main(["replay", run, "--store", str(store), "--quiet", "--scorer", "maze_scorers:out_of_range"]) == 2
    assert "--scorer maze_scorers:prefer_b" in capsys.readouterr().err
    assert main(["replay", run, "--store", str(store), "--quiet", "--scorer", "maze_scorers:prefer_b"]) == 0
    assert "identical graph" in capsys.readouterr().out


def test_a_run_without_a_scorer_refuses_one_given_on_replay(
        server: FakeOpenAIServer, scorers: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "runs.db"
    assert main(loom_solve(server, "--store", str(store))) == 0
    run = json.loads(capsys.readouterr().out)["run_id"]
    assert main(["replay", run, "--store", str(store), "--quiet", "--scorer", "maze_scorers:prefer_b"]) == 2
    assert "leave out --scorer" in capsys.readouterr().err


def test_areplay_takes_the_scorer_function_as_its_grant(tmp_path: Path) -> None:
    store = tmp_path / "runs.db"
    fake = ScriptedBackend(responder=maze_model)
    result = solve(PROBLEM, model=fake, scorer=prefer_b, store=str(store), **SEARCH)
    assert result.answer == "right"
    with SQLiteStore(store) as opened, pytest.raises(SpecError, match="scorer=.*prefer_b"):
        asyncio.run(areplay(opened, str(result.run_id)))
    with SQLiteStore(store) as opened:
        replayed, verdict = asyncio.run(areplay(opened, str(result.run_id), grants=Grants(scorer=prefer_b)))
    assert verdict.identical and replayed.answer == "right"


def test_a_stored_spec_keeps_the_scorers_name_and_runs_only_once_it_is_imported_again() -> None:
    from thoughtloom.run.execute import execute
    from thoughtloom.run.grants import check_grants
    from thoughtloom.run.spec import RunSpec, resolve

    spec = resolve(PROBLEM, model=ScriptedBackend(responder=maze_model), scorer=prefer_b, search=SEARCH)
    stored = RunSpec.from_dict(spec.to_dict())
    assert stored.scorer is not None and stored.scorer.name == "test_user_scorer:prefer_b"
    assert stored.scorer.call is None  # a stored name imports nothing
    with pytest.raises(SpecError, match="--scorer test_user_scorer:prefer_b"):
        check_grants(stored, Grants(), live=True, cli=True)  # resume asks for it as replay does
    with pytest.raises(SpecError, match="not imported"):
        asyncio.run(execute(stored))
