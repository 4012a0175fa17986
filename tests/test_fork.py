"""Forks: `loom fork RUN --at NODE [settings]` and `thoughtloom.fork()` continue a stored run from one of its nodes.

A real SQLite store, the scripted Game of 24 model behind the fake OpenAI-compatible HTTP server, `loom`
called in process (one subprocess). The parent run (see test_runs_cli.py's script; node ids follow the
order its concurrent calls completed in):

    input 4 5 6 10
      first: 10 - 4 = 6 (left: 5 6 6)   -> mid: 5 * 6 = 30 (left: 6 30) -> goal: 30 - 6 = 24 -> the answer
      4 + 5 = 9 (left: 6 9 10)          -> three rejected proposals
      rejected: 7 * 7 = 49 (left: 4 5 49)
"""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from inprocess import loom_here
from openai_server import FakeOpenAIServer, serve
from test_runs_cli import ROOT, model_of, prompts_of, responder

import thoughtloom
from thoughtloom.run.grants import GrantError
from thoughtloom.run.spec import RunSpec, SpecError
from thoughtloom.store.runs import RunError, head_ref, history, open_run
from thoughtloom.store.sqlite import SQLiteStore

PROBLEM = "4 5 6 10"


@pytest.fixture()
def server() -> Iterator[FakeOpenAIServer]:
    with serve() as fake:
        fake.responder = responder()
        yield fake


@pytest.fixture()
def parent(server: FakeOpenAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    """A finished `loom solve` run (bfs) in a store of its own; the server's record starts empty after it."""
    store = tmp_path / "store.db"
    proc = loom_here(capsys, "solve", "--task", "game24", "--model", model_of(server), "--price-in", "1",
                     "--price-out", "2", "--quiet", "--store", str(store), PROBLEM)
    assert proc.returncode == 0, proc.stderr
    run = re.search(r"run (\w+) stored in ", proc.stderr)
    assert run, proc.stderr
    server.seen.clear()
    # Node ids follow the order concurrent calls completed in: each is found by its content.
    nodes = show_json(capsys, store, run.group(1))["nodes"]

    def node(content: str, status: str = "succeeded") -> int:
        return next(n["id"] for n in nodes if n["content"] == content and n["status"] == status)

    return {"store": store, "run": run.group(1), "model": model_of(server), "head": head_of(store, run.group(1)),
            "first": node("10 - 4 = 6 (left: 5 6 6)"), "mid": node("5 * 6 = 30 (left: 6 30)"),
            "goal": node("30 - 6 = 24 (left: 24)"), "rejected": node("7 * 7 = 49 (left: 4 5 49)", "failed")}


def head_of(store: Path, run: str) -> str:
    with SQLiteStore(store) as blocks:
        return str(open_run(blocks, run).head_cid)


def show_json(capsys: pytest.CaptureFixture[str], store: Path, run: str) -> dict[str, Any]:
    proc = loom_here(capsys, "show", run, "--store", str(store), "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def forked_id(stderr: str) -> str:
    match = re.search(r"into run (\w+)", stderr)
    assert match, stderr
    return match.group(1)


def run_count(store: Path) -> int:
    with sqlite3.connect(store) as db:
        return db.execute("select count(*) from refs where name like 'run/%/head'").fetchone()[0]


def test_a_fork_at_a_middle_node_with_another_strategy_is_a_new_run_linked_to_its_parent(
        parent: dict[str, Any], server: FakeOpenAIServer, capsys: pytest.CaptureFixture[str]) -> None:
    store, run = parent["store"], parent["run"]
    first, mid = parent["first"], parent["mid"]
    proc = loom_here(capsys, "fork", run, "--at", f"#{mid}", "--strategy", "dfs", "--model", parent["model"],
                     "--store", str(store), "--quiet", "--json")
    assert proc.returncode == 0, proc.stderr
    child = forked_id(proc.stderr)
    assert child != run and json.loads(proc.stdout)["answer"] == "(5 * 6) - (10 - 4) = 24"

    shown, before = show_json(capsys, store, child), show_json(capsys, store, run)
    # The fork's graph begins with the parent's path down to the node, each copied thought scored as it was.
    assert [n["content"] for n in shown["nodes"][:3]] == [before["nodes"][i]["content"] for i in (0, first, mid)]
    assert [n["score"] for n in shown["nodes"][1:3]] == [before["nodes"][i]["score"] for i in (first, mid)]
    assert shown["manifest"]["spec"]["fork"]["run"] == run and shown["manifest"]["spec"]["fork"]["node"] == mid
    assert shown["manifest"]["config"]["strategy"] == "dfs" and before["manifest"]["config"]["strategy"] == "bfs"
    assert shown["parent"] == {"run": run, "node": mid}
    # Only what lies below #4 was asked of the model: the copied thoughts cost nothing.
    asked = [p for p, _ in prompts_of(server.seen)]
    assert asked and all("Input: 6 30\n" in p for p in asked), asked
    # The parent is as it was, and the listings name the link.
    assert head_of(store, run) == parent["head"]
    listed = loom_here(capsys, "runs", "--store", str(store), "--json")
    rows = {r["id"]: r for r in map(json.loads, listed.stdout.splitlines())}
    assert rows[child]["parent"] == {"run": run, "node": mid} and "parent" not in rows[run]
    table = loom_here(capsys, "runs", "--store", str(store)).stdout
    assert f"[fork of {run} #{mid}]" in table
    text = loom_here(capsys, "show", child, "--store", str(store)).stdout
    assert f"forked from run {run} at node #{mid}: #1 to #2 below are its path, copied" in text
    assert f"forks: {child} at #{mid}" in loom_here(capsys, "show", run, "--store", str(store)).stdout
    assert show_json(capsys, store, run)["forks"] == [{"run": child, "node": mid}] and shown["forks"] == []


def test_a_fork_replays_exactly_with_zero_model_calls(
        parent: dict[str, Any], server: FakeOpenAIServer, capsys: pytest.CaptureFixture[str]) -> None:
    store = parent["store"]
    proc = loom_here(capsys, "fork", parent["run"], "--at", str(parent["first"]), "--beam", "1", "--model",
                     parent["model"], "--store", str(store), "--quiet")
    assert proc.returncode == 0, proc.stderr
    child, asked = forked_id(proc.stderr), len(server.seen)
    graph = show_json(capsys, store, child)["graph"]
    replay = loom_here(capsys, "replay", child, "--store", str(store), "--quiet")
    assert replay.returncode == 0, replay.stdout + replay.stderr
    assert f"identical graph {graph}" in replay.stdout and ", 0 model calls" in replay.stdout
    assert len(server.seen) == asked


def test_a_fork_exported_alone_replays_in_a_store_without_its_parent(
        parent: dict[str, Any], server: FakeOpenAIServer, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    store = parent["store"]
    proc = loom_here(capsys, "fork", parent["run"], "--at", f"#{parent['mid']}", "--model", parent["model"],
                     "--store", str(store), "--quiet")
    child, car, elsewhere = forked_id(proc.stderr), tmp_path / "fork.car", tmp_path / "other.db"
    assert loom_here(capsys, "export", child, "--car", str(car), "--store", str(store)).returncode == 0
    assert loom_here(capsys, "import", str(car), "--store", str(elsewhere)).returncode == 0
    assert run_count(elsewhere) == 1
    replay = loom_here(capsys, "replay", child, "--store", str(elsewhere), "--quiet")
    assert replay.returncode == 0 and "identical graph" in replay.stdout, replay.stdout + replay.stderr


def test_a_fork_killed_mid_way_resumes_to_the_graph_it_would_have_had(
        parent: dict[str, Any], server: FakeOpenAIServer, capsys: pytest.CaptureFixture[str]) -> None:
    store = parent["store"]
    whole = thoughtloom.fork(str(store), parent["run"], parent["first"], model=parent["model"])
    with SQLiteStore(store) as blocks:  # what a kill -9 after the fork's first answered call leaves
        first = list(history(blocks, open_run(blocks, whole.run_id).head_cid))[-1]
        assert first[1]["status"] == "running" and first[1]["usage"]["calls"] == 1
        blocks.set_ref(head_ref(whole.run_id), first[0])
    proc = loom_here(capsys, "resume", whole.run_id, "--model", parent["model"], "--store", str(store), "--quiet")
    assert proc.returncode == 0 and "1 recorded calls served from the store" in proc.stderr, proc.stderr
    assert show_json(capsys, store, whole.run_id)["graph"] == whole.graph_cid


def test_fork_in_python_continues_a_run_as_a_new_run_that_replays(
        parent: dict[str, Any], server: FakeOpenAIServer) -> None:
    first = parent["first"]
    result = thoughtloom.fork(str(parent["store"]), parent["run"], first, model=parent["model"], strategy="best_first")
    assert result.run_id is not None and result.run_id != parent["run"]
    assert result.answer == "(5 * 6) - (10 - 4) = 24"
    assert result.graph.node(1).extra["forked_from"] == {"run": parent["run"], "node": first}
    with SQLiteStore(parent["store"]) as blocks:
        child = open_run(blocks, result.run_id)
        assert child.manifest.config["strategy"] == "best_first"
        replayed, verdict = asyncio.run(thoughtloom.areplay(blocks, child.run_id))
    assert verdict.identical and verdict.model_calls == 0 and replayed.answer == result.answer


def test_a_fork_at_a_pruned_thought_goes_on_from_it(
        server: FakeOpenAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store, model = tmp_path / "store.db", model_of(server)
    proc = loom_here(capsys, "solve", "--task", "game24", "--model", model, "--prune-threshold", "0.5", "--quiet",
                     "--store", str(store), "--json", PROBLEM)
    assert proc.returncode == 0 and json.loads(proc.stdout)["answer"] != "(5 * 6) - (10 - 4) = 24", proc.stderr
    found = re.search(r"run (\w+) stored in ", proc.stderr)
    assert found, proc.stderr
    run = found.group(1)
    pruned = next(n for n in show_json(capsys, store, run)["nodes"]
                  if n["content"] == "10 - 4 = 6 (left: 5 6 6)" and n["status"] == "pruned")
    proc = loom_here(capsys, "fork", run, "--at", str(pruned["id"]), "--prune-threshold", "0.2", "--model", model,
                     "--store", str(store), "--quiet", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["answer"] == "(5 * 6) - (10 - 4) = 24"
    copied = show_json(capsys, store, forked_id(proc.stderr))["nodes"][1]
    assert (copied["content"], copied["status"], copied["score"]) == (pruned["content"], "succeeded", pruned["score"])


def test_fork_at_the_root_reruns_the_problem_with_the_new_settings(
        parent: dict[str, Any], server: FakeOpenAIServer, capsys: pytest.CaptureFixture[str]) -> None:
    proc = loom_here(capsys, "fork", parent["run"], "--at", "#0", "--budget-calls", "2", "--model", parent["model"],
                     "--store", str(parent["store"]), "--quiet", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["termination_reason"] == "budget_calls"
    assert len(server.seen) == 2


def test_a_fork_of_a_fork_with_another_profile_and_goal_names_its_own_parent(
        parent: dict[str, Any], server: FakeOpenAIServer) -> None:
    store, model = str(parent["store"]), parent["model"]
    child = thoughtloom.fork(store, parent["run"], parent["first"], model=model, control={"goal_threshold": 0.8})
    grandchild = thoughtloom.fork(store, child.run_id, 2, model=model, profile="strategic_planning")
    with SQLiteStore(parent["store"]) as blocks:
        theirs = open_run(blocks, child.run_id).manifest.spec
        ours = open_run(blocks, grandchild.run_id).manifest.spec
    assert theirs["control"]["goal_threshold"] == 0.8 and theirs["profile"] == "default"
    assert ours["profile"] == "strategic_planning" and ours["control"]["acceptable_threshold"] == 0.65
    assert ours["config"] == theirs["config"]  # the search settings stay the parent's
    assert (ours["fork"]["run"], ours["fork"]["node"]) == (child.run_id, 2)
    assert [s["node"] for s in ours["fork"]["steps"]] == [1, 2]
    assert grandchild.graph.node(2).extra["forked_from"] == {"run": child.run_id, "node": 2}


def test_the_parents_model_named_again_keeps_its_price_and_another_model_has_none(
        parent: dict[str, Any], server: FakeOpenAIServer, capsys: pytest.CaptureFixture[str]) -> None:
    store = str(parent["store"])
    kept = thoughtloom.fork(store, parent["run"], parent["mid"], model=parent["model"],
                            budget=thoughtloom.BudgetLimits(cost_usd=1.0))
    assert kept.usage.cost_usd > 0
    other = parent["model"].replace("@scripted", "@other")
    moved = thoughtloom.fork(store, parent["run"], parent["mid"], model=other)
    with SQLiteStore(parent["store"]) as blocks:
        assert open_run(blocks, kept.run_id).manifest.spec["pricing"] == {"input_per_mtok": 1.0, "output_per_mtok": 2.0}
        assert open_run(blocks, kept.run_id).manifest.spec["budget"]["cost_usd"] == 1.0
        assert "pricing" not in open_run(blocks, moved.run_id).manifest.spec
        assert open_run(blocks, moved.run_id).manifest.model == other
    assert {s.body["model"] for s in server.seen} == {"scripted", "other"}


def test_fork_in_python_needs_the_parents_endpoint_named_again(parent: dict[str, Any]) -> None:
    with pytest.raises(GrantError, match=r"this run asks for model .*grants=Grants\(model="):
        thoughtloom.fork(str(parent["store"]), parent["run"], parent["first"])


@pytest.mark.parametrize(("args", "fragments"), [
    (["nosuchrun", "--at", "1"], ["no run 'nosuchrun' in the store"]),
    (["RUN", "--at", "#99"], ["has no node #99", "#0 to #9"]),
    (["RUN", "--at", "bafyreinotanode"], ["--at bafyreinotanode: no such node in run"]),
    (["RUN", "--at", "GOAL"], ["node #GOAL of", "is a final answer; fork at a thought above it (#MID)"]),
    (["RUN", "--at", "REJECTED"], ["node #REJECTED of", "is failed and was never scored"]),
    (["RUN", "--at", "MID", "--depth", "2"],
     ["node #MID of run", "is at depth 2, the search's depth limit is 2; give --depth 3"]),
    (["RUN", "--at", "MID", "--budget-usd", "1", "--no-model", "--model", "OTHER"],
     ["--budget-usd needs a price, and --model openai-compatible:"]),
    (["RUN", "--at", "MID", "--price-in", "1"], ["give both --price-in and --price-out"]),
    (["RUN", "--at", "MID", "--strategy", "mcts"], ["--strategy mcts cannot start from a node; a fork continues with "
                                                    "one of bfs, tree_of_thoughts, breadth_first, dfs, best_first"]),
    (["RUN", "--at", "FIRST", "--no-model"], ["this run asks for model", "--model 'openai-compatible:"]),
    (["RUN", "--at", "FIRST", "--hard-depth", "1"], ["hard depth 1 is below the search's depth 3"]),
    (["RUN", "--at", "FIRST", "--goal", "0.6"], ["thresholds must satisfy compromise <= acceptable <= goal"]),
])
def test_bad_fork_inputs_are_one_line_errors_that_store_nothing(
        parent: dict[str, Any], server: FakeOpenAIServer, capsys: pytest.CaptureFixture[str], args: list[str],
        fragments: list[str]) -> None:
    store = parent["store"]
    model = [] if "--no-model" in args else ["--model", parent["model"]]
    names = {"RUN": parent["run"], "OTHER": parent["model"].replace("@scripted", "@other"),
             **{k.upper(): str(parent[k]) for k in ("first", "mid", "goal", "rejected")}}
    args = [names.get(a, a) for a in args if a != "--no-model"]
    fragments = [re.sub(r"FIRST|MID|GOAL|REJECTED", lambda m: names[m.group()], f) for f in fragments]
    proc = loom_here(capsys, "fork", *args, *model, "--store", str(store), "--quiet")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    assert run_count(store) == 1 and not server.seen


def test_a_node_of_another_run_is_named_as_such(
        parent: dict[str, Any], server: FakeOpenAIServer, capsys: pytest.CaptureFixture[str]) -> None:
    store, run = parent["store"], parent["run"]
    proc = loom_here(capsys, "fork", run, "--at", f"#{parent['first']}", "--model", parent["model"], "--store",
                     str(store), "--quiet")
    child = forked_id(proc.stderr)
    theirs = show_json(capsys, store, child)["nodes"][2]["cid"]  # a thought only the fork has
    proc = loom_here(capsys, "fork", run, "--at", theirs, "--model", parent["model"], "--store", str(store))
    assert proc.returncode == 2
    assert f"node {theirs} is a node of run {child}, not of run {run}" in proc.stderr.strip()
    ours = show_json(capsys, store, run)["nodes"][parent["mid"]]["cid"]
    proc = loom_here(capsys, "fork", run, "--at", ours, "--model", parent["model"], "--store", str(store), "--quiet")
    assert proc.returncode == 0, proc.stderr
    assert show_json(capsys, store, forked_id(proc.stderr))["parent"] == {"run": run, "node": parent["mid"]}


def test_an_mcts_run_is_forked_with_a_strategy_that_starts_from_a_node(server: FakeOpenAIServer,
                                                                        tmp_path: Path) -> None:
    store, model = str(tmp_path / "store.db"), model_of(server)
    parent = thoughtloom.solve(PROBLEM, task="game24", model=model, store=store, strategy="mcts", mcts_iterations=4)
    node = parent.best_path[1].id
    with pytest.raises(SpecError, match=f"run {parent.run_id}'s strategy, mcts, cannot start from a node; .* "
                                        r"\(--strategy\)"):
        thoughtloom.fork(store, parent.run_id, node, model=model)
    child = thoughtloom.fork(store, parent.run_id, node, model=model, strategy="dfs")
    assert child.graph.node(1).content == parent.best_path[1].content and child.run_id != parent.run_id


def test_a_run_whose_thoughts_are_not_steps_of_one_path_is_not_forked(tmp_path: Path) -> None:
    from test_search import GOT, got_model

    store = str(tmp_path / "store.db")
    parent = thoughtloom.solve("How to cut costs?", task="general", model=got_model(), store=store, **GOT)
    with pytest.raises(SpecError, match=f"run {parent.run_id} searched with got, whose thoughts are not steps"):
        thoughtloom.fork(store, parent.run_id, 1, strategy="bfs")
    assert run_count(Path(store)) == 1


def test_a_stored_fork_that_is_not_shaped_as_one_is_refused_in_one_line() -> None:
    spec = RunSpec("game24", PROBLEM).to_dict()
    with pytest.raises(SpecError, match="not a run spec: fork.steps: each needs a node id"):
        RunSpec.from_dict({**spec, "fork": {"run": "x", "node": 1, "steps": [{"node": 1, "kind": "nonsense"}]}})
    with pytest.raises(SpecError, match="not a run spec: fork must be dict or null, not list"):
        RunSpec.from_dict({**spec, "fork": []})


def test_loom_fork_from_the_command_line(parent: dict[str, Any]) -> None:
    proc = subprocess.run([sys.executable, "-m", "thoughtloom", "fork", parent["run"], "--at", "#42", "--store",
                           str(parent["store"])], capture_output=True, text=True, timeout=60, cwd=ROOT, check=False)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert f"run {parent['run']} has no node #42" in proc.stderr


def test_a_strategy_that_cannot_start_from_a_node_is_refused_in_python(parent: dict[str, Any]) -> None:
    with pytest.raises(SpecError, match="--strategy mcts cannot start from a node; a fork continues with one of bfs"):
        thoughtloom.fork(str(parent["store"]), parent["run"], parent["first"], model=parent["model"], strategy="mcts")
    assert run_count(parent["store"]) == 1


def test_run_error_is_what_python_gets_for_an_unknown_node(parent: dict[str, Any]) -> None:
    with pytest.raises(RunError, match="has no node #42"):
        thoughtloom.fork(str(parent["store"]), parent["run"], 42, model=parent["model"])
