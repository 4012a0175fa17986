"""Strategies of your own (examples/greedy_strategy.py) in loom solve, the stored run, replay and loom bench.

The greedy strategy is reached three ways: by its file and class (`--strategy file.py:Class`), as an
installed package's entry point (`thoughtloom.strategies`: a fake *.dist-info folder on the import
path, which importlib.metadata reads as it reads a pip-installed one), and as an object given to
`solve`. The task is the examples' reach task, installed the same way; the model is the fake
OpenAI-compatible server.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest
from machine import scaled
from openai_server import FakeOpenAIServer, Reply, Seen
from test_strategy_api import ThroughTheAPI
from test_task_plugins import EXAMPLES, install_fake_distribution, reach_reply

from thoughtloom import SearchAPI, Strategy, ThoughtGraph, TracedStrategy, asolve
from thoughtloom.cli.main import main
from thoughtloom.run.spec import RunSpec, SpecError, resolve
from thoughtloom.search.result import SearchResult
from thoughtloom.search.strategies.registry import built_in_strategies, strategy_names

GREEDY_FILE = str(EXAMPLES / "greedy_strategy.py")


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The reach task and the greedy strategy installed (the greedy one as `greedy`, and a broken one)."""
    path = tmp_path / "site"
    install_fake_distribution(path, {"reach": "custom_task:ReachTask"})
    install_fake_distribution(path, {"greedy": "greedy_strategy:GreedyStrategy", "broken": "no_such_module:Nope"},
                              group="thoughtloom.strategies", name="loom-greedy")
    monkeypatch.syspath_prepend(str(EXAMPLES))
    monkeypatch.syspath_prepend(str(path))
    return path


def solve_args(server: FakeOpenAIServer, strategy: str, *more: str) -> list[str]:
    server.responder = reach_reply
    return ["solve", "3 10", "--task", "reach", "--strategy", strategy, "--model",
            f"openai-compatible:{server.url}@m#completions", "--quiet", "--json", *more]


def solved(args: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    assert main(args) == 0, capsys.readouterr().err
    return dict(json.loads(capsys.readouterr().out))


def manifest_spec(run: str, store: Path, tmp_path: Path) -> dict[str, Any]:
    manifest = tmp_path / "manifest.json"
    assert main(["export", run, "--store", str(store), "--manifest", str(manifest)]) == 0
    return dict(json.loads(manifest.read_text(encoding="utf-8"))["spec"])


def one_line_error(code: int, capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    return err


# --- the registry ------------------------------------------------------------------------------------


def test_every_built_in_strategy_is_declared_once_and_satisfies_the_protocol() -> None:
    names = [s.name for s in built_in_strategies()]
    assert len(names) == len(set(names))
    assert all(isinstance(s, Strategy) for s in built_in_strategies())
    assert names[:3] == ["bfs", "tree_of_thoughts", "breadth_first"]


def test_an_installed_strategy_is_named_after_the_built_in_ones(site: Path) -> None:
    assert strategy_names()[-2:] == ("greedy", "broken")


def test_a_run_of_a_built_in_strategy_is_stored_as_before_without_a_strategy_record() -> None:
    assert "strategy" not in resolve("4 5 6 10", task="game24", search={"strategy": "dfs"}).to_dict()


# --- loom solve --strategy ---------------------------------------------------------------------------


def test_loom_solve_runs_the_example_named_by_its_file_and_class(
        site: Path, server: FakeOpenAIServer, capsys: pytest.CaptureFixture[str]) -> None:
    out = solved(solve_args(server, f"{GREEDY_FILE}:GreedyStrategy", "--no-store"), capsys)
    assert out["config"]["strategy"] == "greedy"
    assert out["termination_reason"] == "goal_reached" and str(out["answer"]).endswith("= 10")


def test_loom_solve_runs_an_installed_strategy_by_name(
        site: Path, server: FakeOpenAIServer, capsys: pytest.CaptureFixture[str]) -> None:
    out = solved(solve_args(server, "greedy", "--no-store"), capsys)
    assert out["config"]["strategy"] == "greedy"
    assert out["stats"]["expansions"] == out["stats"]["max_depth"]  # one child a level


def test_an_unknown_strategy_is_one_line_listing_the_known_ones(
        site: Path, server: FakeOpenAIServer, capsys: pytest.CaptureFixture[str]) -> None:
    err = one_line_error(main(solve_args(server, "nope", "--no-store")), capsys)
    assert "unknown strategy 'nope'" in err and "bfs, tree_of_thoughts" in err and "greedy" in err


def test_a_broken_installed_strategy_is_one_line_naming_it(
        site: Path, server: FakeOpenAIServer, capsys: pytest.CaptureFixture[str]) -> None:
    err = one_line_error(main(solve_args(server, "broken", "--no-store")), capsys)
    assert "installed strategy 'broken': cannot load no_such_module:Nope" in err
    assert server.seen == []


def test_loom_solve_leaves_the_tool_strategies_to_their_own_commands(
        server: FakeOpenAIServer, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["solve", "--strategy", "agent", "--no-store", "What is 2 + 2?"])
    assert exit_.value.code == 2
    assert "agent calls tools: run it with loom agent" in capsys.readouterr().err


def test_a_strategy_the_task_cannot_take_is_refused_before_any_call(
        site: Path, server: FakeOpenAIServer, capsys: pytest.CaptureFixture[str]) -> None:
    args = solve_args(server, "greedy", "--no-store")
    args[args.index("reach")] = "sorting"
    args[1] = "[3, 1, 2]"
    err = one_line_error(main(args), capsys)
    assert "--strategy greedy: task sorting has no step prompts (propose or sample), which greedy needs" in err
    assert server.seen == []


# --- the stored run: its strategy's name and settings, replay ----------------------------------------


def test_a_stored_run_records_its_strategys_name_and_settings_and_replays_with_no_model_call(
        site: Path, server: FakeOpenAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "runs.db"
    run = str(solved(solve_args(server, "greedy", "--store", str(store)), capsys)["run_id"])
    spec = manifest_spec(run, store, tmp_path)
    assert spec["config"]["strategy"] == "greedy"
    assert spec["strategy"] == {"name": "greedy", "settings": {"width": 1}}
    calls = len(server.seen)
    assert main(["replay", run, "--store", str(store), "--quiet"]) == 0
    assert "identical graph" in capsys.readouterr().out
    assert len(server.seen) == calls


def test_an_interrupted_run_of_an_installed_strategy_resumes_with_it_and_finishes(
        site: Path, server: FakeOpenAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def slow(seen: Seen) -> Reply:
        reply = reach_reply(seen)
        return Reply(reply.status, reply.body, delay_s=0.3)

    server.responder = slow
    store = tmp_path / "runs.db"
    model = f"openai-compatible:{server.url}@m#completions"

    async def interrupted() -> SearchResult:  # cancelled (Ctrl-C) midway: the engine returns what it has
        return await asyncio.wait_for(asolve("3 10", task="reach", model=model, strategy="greedy", store=str(store),
                                             concurrency=1), 0.8)

    result = asyncio.run(interrupted())
    assert result.termination_reason == "interrupted"
    server.responder = reach_reply
    out = solved(["resume", str(result.run_id), "--store", str(store), "--quiet", "--json", "--model", model], capsys)
    assert out["config"]["strategy"] == "greedy"
    assert out["termination_reason"] == "goal_reached" and str(out["answer"]).endswith("= 10")


def test_a_run_of_a_strategy_named_by_its_file_replays_from_that_file(
        site: Path, server: FakeOpenAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "runs.db"
    run = str(solved(solve_args(server, f"{GREEDY_FILE}:GreedyStrategy", "--store", str(store)), capsys)["run_id"])
    assert manifest_spec(run, store, tmp_path)["strategy"] == {
        "name": "greedy", "source": f"{GREEDY_FILE}:GreedyStrategy", "settings": {"width": 1}}
    assert main(["replay", run, "--store", str(store), "--quiet"]) == 0
    assert "identical graph" in capsys.readouterr().out


def test_replay_of_a_run_whose_strategy_is_not_installed_is_one_line_and_exit_2(
        site: Path, server: FakeOpenAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "runs.db"
    run = str(solved(solve_args(server, "greedy", "--store", str(store)), capsys)["run_id"])
    shutil.rmtree(site / "loom_greedy-0.1.dist-info")
    err = one_line_error(main(["replay", run, "--store", str(store), "--quiet"]), capsys)
    assert "the run's strategy greedy is not available here: unknown strategy 'greedy'" in err


def test_solve_takes_a_strategy_object_and_its_settings_are_stored_and_replayed(
        site: Path, server: FakeOpenAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from greedy_strategy import GreedyStrategy

    server.responder = reach_reply
    store = tmp_path / "runs.db"
    result = asyncio.run(asolve("3 10", task="reach", model=f"openai-compatible:{server.url}@m#completions",
                                strategy=GreedyStrategy(width=2), store=str(store)))
    assert result.config["strategy"] == "greedy" and result.termination_reason == "goal_reached"
    spec = manifest_spec(str(result.run_id), store, tmp_path)
    assert spec["strategy"] == {"name": "greedy", "settings": {"width": 2}}  # installed: found by its name
    stored = RunSpec.from_dict(spec)
    assert stored.strategy is not None and stored.strategy.load() == GreedyStrategy(width=2)
    assert main(["replay", str(result.run_id), "--store", str(store), "--quiet"]) == 0
    assert "identical graph" in capsys.readouterr().out


def test_an_object_of_an_importable_class_not_installed_is_recorded_by_its_class_and_replayed(
        site: Path, server: FakeOpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "my_strategies.py").write_text(
        "from greedy_strategy import GreedyStrategy\n\n\nclass Wide(GreedyStrategy):\n    name = 'wide'\n",
        encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    from my_strategies import Wide

    server.responder = reach_reply
    store = tmp_path / "runs.db"
    result = asyncio.run(asolve("3 10", task="reach", model=f"openai-compatible:{server.url}@m#completions",
                                strategy=Wide(width=2), store=str(store)))
    spec = manifest_spec(str(result.run_id), store, tmp_path)
    assert spec["strategy"] == {"name": "wide", "source": "my_strategies:Wide", "settings": {"width": 2}}
    assert main(["replay", str(result.run_id), "--store", str(store), "--quiet"]) == 0
    assert "identical graph" in capsys.readouterr().out


def test_a_strategy_object_may_not_take_a_built_in_name(site: Path) -> None:
    from greedy_strategy import GreedyStrategy

    class Impostor(GreedyStrategy):
        name = "bfs"

    with pytest.raises(SpecError, match="^strategy 'bfs': a built-in strategy has that name"):
        resolve("3 10", task="reach", search={"strategy": Impostor()})


# --- loom bench: a lane named after the installed strategy -------------------------------------------


def test_loom_bench_runs_a_lane_named_after_an_installed_strategy_and_leaves_a_broken_one_out(
        site: Path, server: FakeOpenAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    server.responder = reach_reply
    out = tmp_path / "bench"
    code = main(["bench", "--tasks", f"reach:{EXAMPLES / 'reach_problems.jsonl'}", "--lanes", "greedy,broken",
                 "--model", f"openai-compatible:{server.url}@m#completions", "--budget-tokens", "20000",
                 "--out", str(out), "--no-plot", "--quiet"])
    err = capsys.readouterr().err
    assert code == 0, err
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines() if line.strip()]
    assert sorted(r["problem_id"] for r in rows) == ["r1", "r2", "r3"]
    assert all(r["lane"] == "greedy" and r["solved"] for r in rows)
    assert "lane broken: installed strategy 'broken': cannot load no_such_module:Nope" in err


# --- a strategy's own trace (TracedStrategy) ---------------------------------------------------------


def reach(server: FakeOpenAIServer, strategy: Strategy) -> SearchResult:
    server.responder = reach_reply
    return asyncio.run(asolve("3 10", task="reach", model=f"openai-compatible:{server.url}@m#completions",
                              strategy=strategy))


def test_a_user_strategys_trace_is_read_from_the_graph_into_the_result_and_its_json(
        site: Path, server: FakeOpenAIServer) -> None:
    from greedy_strategy import GreedyStrategy, GreedyTrace

    result = reach(server, GreedyStrategy(width=2))
    trace = result.trace
    assert isinstance(trace, GreedyTrace) and isinstance(GreedyStrategy(), TracedStrategy)
    assert len(trace.levels) == result.stats.max_depth
    assert all(len(level.kept) == min(2, level.children) for level in trace.levels)
    assert result.to_dict()["greedy"] == trace.to_dict() == {
        "levels": [{"children": level.children, "kept": list(level.kept)} for level in trace.levels]}


def test_a_user_trace_under_a_key_of_the_results_own_does_not_replace_it(
        site: Path, server: FakeOpenAIServer) -> None:
    from greedy_strategy import GreedyStrategy, GreedyTrace

    class AnswerTrace(GreedyTrace):
        key = "answer"

    class Clashing(GreedyStrategy):
        def read_trace(self, graph: ThoughtGraph) -> AnswerTrace:
            return AnswerTrace(())

    result = reach(server, Clashing())
    assert isinstance(result.trace, AnswerTrace)
    assert result.to_dict()["answer"] == result.answer and str(result.answer).endswith("= 10")


def test_loom_solve_prints_a_user_strategys_trace_lines(
        site: Path, server: FakeOpenAIServer, capsys: pytest.CaptureFixture[str]) -> None:
    from greedy_strategy import GreedyStrategy

    args = solve_args(server, f"{GREEDY_FILE}:GreedyStrategy", "--no-store")
    args.remove("--json")
    assert main(args) == 0
    out = capsys.readouterr().out.splitlines()
    lines = [line for line in out if line.startswith("greedy: ")]
    assert lines == ["greedy: 5 levels kept #2 of 2 · #3 of 2 · #5 of 2 · #7 of 2 · #9 of 2"]
    assert lines == reach(server, GreedyStrategy()).trace.lines()  # type: ignore[union-attr]


def test_a_user_strategys_run_cut_short_keeps_the_trace_of_the_levels_it_did(
        site: Path, server: FakeOpenAIServer) -> None:
    from greedy_strategy import GreedyTrace

    released = threading.Event()

    def held(seen: Seen) -> Reply:  # the reach task scores its own steps: one call a level
        if len(server.seen) > 1:
            released.wait(scaled(10))  # the second level's call, until the run is cancelled
        return reach_reply(seen)

    server.responder = held

    async def interrupted() -> SearchResult:  # cancelled (Ctrl-C) during its second level's call
        run = asyncio.create_task(asolve("3 10", task="reach", model=f"openai-compatible:{server.url}@m#completions",
                                         strategy="greedy"))
        while len(server.seen) < 2 and not run.done():
            await asyncio.sleep(0.01)
        run.cancel()
        return await run  # the engine returns what it has

    try:
        result = asyncio.run(interrupted())
    finally:
        released.set()
    assert result.termination_reason == "interrupted"
    trace = result.trace
    assert isinstance(trace, GreedyTrace) and len(trace.levels) == 1


def test_a_user_strategy_whose_trace_cannot_be_read_keeps_its_answer(
        site: Path, server: FakeOpenAIServer, caplog: pytest.LogCaptureFixture) -> None:
    from greedy_strategy import GreedyStrategy

    class Unreadable(GreedyStrategy):
        def read_trace(self, graph: ThoughtGraph) -> None:
            raise KeyError("levels")

    result = reach(server, Unreadable())
    assert str(result.answer).endswith("= 10") and result.trace is None
    assert result.to_dict()["answer"] == result.answer
    assert "could not read its trace: KeyError" in caplog.text


def test_a_strategy_may_not_note_under_a_key_the_engine_writes(site: Path, server: FakeOpenAIServer) -> None:
    from greedy_strategy import GreedyStrategy

    class Clobbering(GreedyStrategy):
        async def run(self, ctx: SearchAPI) -> None:
            ctx.note(ctx.root, "grounding", {"verified": True})

    with pytest.raises(ValueError, match="note key 'grounding' is one the engine writes"):
        reach(server, Clobbering())


def test_a_user_strategy_without_a_trace_runs_and_has_none(site: Path, server: FakeOpenAIServer) -> None:
    from greedy_strategy import GreedyStrategy

    untraced = ThroughTheAPI(GreedyStrategy())  # the greedy search, by a strategy with no read_trace
    assert not isinstance(untraced, TracedStrategy)
    result = reach(server, untraced)
    assert result.termination_reason == "goal_reached" and str(result.answer).endswith("= 10")
    assert result.trace is None and "greedy" not in result.to_dict()


def test_loom_show_shows_a_stored_run_whose_strategy_is_not_installed(
        site: Path, server: FakeOpenAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "runs.db"
    run = str(solved(solve_args(server, "greedy", "--store", str(store)), capsys)["run_id"])
    shutil.rmtree(site / "loom_greedy-0.1.dist-info")
    assert main(["show", run, "--store", str(store)]) == 0
    out = capsys.readouterr().out
    assert f"run {run} · finished · reach" in out and "= 10" in out
