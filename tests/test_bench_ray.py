"""`loom bench --executor ray` on a real local Ray runtime against the scripted OpenAI-compatible server.

One Ray cluster on this machine (a head node without CPUs and two nodes of one CPU each, no
dashboard, small object stores) serves every test of the module; sweeps are a handful of units so
the module stays cheap. (Ray maps 127.0.0.1 to the node's own address on Linux, so the cluster
listens there; the scripted server is on 127.0.0.1.)
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import pytest
from benchdata import needs
from machine import scaled
from openai_server import FakeOpenAIServer, closed_port
from test_bench_cli import DATA, bench_args, completions

from thoughtloom.cli.main import main
from thoughtloom.eval.datasets import given_problems
from thoughtloom.eval.ray_sweep import LimitKeeper

ROOT = Path(__file__).resolve().parents[1]
needs_ray = pytest.mark.skipif(find_spec("ray") is None, reason="the 'ray' extra is not installed")
SMALL_NODE = {"num_cpus": 1, "object_store_memory": 80 * 1024 * 1024}
needs_data = needs("game24/24_dev.csv")


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    """One Ray cluster for the module's tests: a head without CPUs and two nodes of 1 CPU, small object stores."""
    import ray
    from ray.cluster_utils import Cluster

    # No CPU on the head: the driver's node keeps the limit actor, and workers go to the two others.
    made = Cluster(initialize_head=True, head_node_args={**SMALL_NODE, "num_cpus": 0, "include_dashboard": False})
    try:
        made.add_node(**SMALL_NODE)
        made.add_node(**SMALL_NODE)
        made.wait_for_nodes()
        ray.init(address=made.address, log_to_driver=False)
        yield made
    finally:
        ray.shutdown()
        made.shutdown()


@pytest.fixture
def ray_address(cluster: Any) -> str:
    """The test cluster's GCS address (what --ray-address takes)."""
    return cluster.address


def records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines() if line.endswith("}")]


def worker_pids() -> list[int]:
    """The sweep's Ray worker processes: Ray names a worker's process after its actor class."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            title = (proc / "cmdline").read_bytes() if proc.name.isdigit() else b""
        except OSError:
            continue
        if title.startswith(b"ray::UnitWorker"):
            pids.append(int(proc.name))
    return pids


def kill_a_worker_when_busy(server: FakeOpenAIServer, after_requests: int = 2) -> threading.Thread:
    """SIGKILL one Ray worker process of the sweep once the server has seen `after_requests` requests."""

    def run() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(server.seen) < after_requests:
            time.sleep(0.01)
        for pid in worker_pids():
            os.kill(pid, signal.SIGKILL)
            return

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_without_ray_the_executor_is_one_line_and_exit_2(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # what an environment without the extra sees
    model = "openai-compatible:http://127.0.0.1:9@m#completions"
    code = main(["bench", "--executor", "ray", "--tasks", "game24", "--lanes", "io", "--model", model,
                 "--out", str(tmp_path / "r"), "--quiet"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0 and "pip install 'thoughtloom[ray]'" in err, err


def test_shard_is_refused_with_the_ray_executor(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["bench", "--executor", "ray", "--shard", "0/2", "--tasks", "game24", "--out", str(tmp_path / "r")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0 and "--shard" in err, err


@needs_ray
@needs_data
def test_an_unreachable_ray_address_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = "openai-compatible:http://127.0.0.1:9@m#completions"
    code = main(["bench", "--executor", "ray", "--ray-address", f"127.0.0.1:{closed_port()}", "--tasks", "game24",
                 "--lanes", "io", "--limit", "1", "--data-dir", str(DATA), "--model", model, "--out",
                 str(tmp_path / "r"), "--quiet"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0 and "cannot reach the Ray cluster at 127.0.0.1:" in err, err


def test_the_limit_keeper_frees_the_slots_of_a_unit_that_ended() -> None:
    async def go() -> bool:
        keeper = LimitKeeper(1)
        await keeper.acquire("a#0", 1)
        waiting = asyncio.ensure_future(keeper.acquire("b#0", 1))
        await asyncio.sleep(0)
        assert not waiting.done()
        assert await keeper.close("a#0") == 1  # its worker died holding the slot
        await asyncio.wait_for(waiting, 1)
        return True

    assert asyncio.run(go())


def test_a_slot_granted_to_a_unit_that_already_ended_goes_back() -> None:
    async def go() -> None:
        keeper = LimitKeeper(1)
        await keeper.acquire("a#0", 1)
        late = asyncio.ensure_future(keeper.acquire("dead#0", 1))
        await asyncio.sleep(0)
        await keeper.close("dead#0")  # ended while still waiting
        await keeper.release("a#0")
        await asyncio.wait_for(late, 1)
        await asyncio.wait_for(keeper.acquire("c#0", 1), 1)  # the slot went back, not to the dead unit

    asyncio.run(go())


@needs_ray
def test_the_embedded_model_gets_one_worker_per_node_and_no_cluster_limit(ray_address: str) -> None:
    import ray

    from thoughtloom.eval.ray_sweep import RaySettings, ray_workers
    from thoughtloom.eval.runner import BenchOptions, build_protocol

    protocol = build_protocol(BenchOptions(tasks=["general"], lanes=["io"], model="local", limit=1),
                              {"general": given_problems("What is 2 + 2?", "general")})
    workers, keeper = ray_workers(ray, protocol, RaySettings(workers=4))
    try:
        # One loaded copy per node with a CPU (the cluster has two), whatever --workers says; each limits its own calls.
        assert len(workers) == 2 and keeper is None
    finally:
        for worker in workers:
            ray.kill(worker)


def without_wall(line: str) -> str:
    """A results-table row without its wall-seconds cell (the last but one); the winner line without its seconds."""
    if line.startswith("winner on "):
        return re.sub(r"\d+(\.\d+)? s\b", "… s", line)
    cells = line.split("|")
    return "|".join(cells[:-3] + cells[-2:]) if len(cells) > 3 else line


@needs_ray
@needs_data
def test_a_ray_sweep_prints_the_same_table_as_a_local_run(ray_address: str, server: FakeOpenAIServer,
                                                          tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    server.responder = completions({"1 1 4 6": " 1 * 1 * 4 * 6 = 24"})
    flags = ("--lanes", "io,cot,tot", "--limit", "3", "--budget-tokens", "1500", "--no-plot")
    assert main(bench_args(server, tmp_path / "local", *flags)) == 0
    local = capsys.readouterr().out
    assert main(bench_args(server, tmp_path / "ray", *flags, "--executor", "ray", "--workers", "2")) == 0
    on_ray = capsys.readouterr().out
    # Every column but wall seconds (the one before the cost), and not the written paths: those differ by nature.
    table = lambda text: [without_wall(line) for line in text.split("\nwritten:")[0].splitlines()]
    assert table(on_ray) == table(local) and "| io | 3 | 1/3 = 33% [" in local
    keep = ("task", "lane", "problem_id", "answer", "solved", "tokens", "calls", "stop_reason")
    same = lambda out: sorted(tuple(r[k] for k in keep) for r in records(out))
    assert same(tmp_path / "ray") == same(tmp_path / "local")
    assert {r["retries"] for r in records(tmp_path / "ray")} == {0}


@needs_ray
@needs_data
@pytest.mark.skipif(bool(os.environ.get("ANTHROPIC_API_KEY")), reason="needs ANTHROPIC_API_KEY unset")
def test_a_worker_that_cannot_build_its_model_stops_the_sweep_in_one_line_and_records_nothing(
        ray_address: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    code = main(bench_args_for("anthropic:claude-test", out, "--lanes", "io", "--limit", "2", "--no-plot",
                               "--executor", "ray", "--workers", "2"))
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0, err
    assert "a Ray worker could not start" in err and "ANTHROPIC_API_KEY is not set" in err
    assert not (out / "results.jsonl").exists()  # no unit recorded as crashed: the same command resumes


@needs_ray
@needs_data
def test_killing_a_ray_worker_mid_sweep_loses_no_unit(ray_address: str, server: FakeOpenAIServer,
                                                     tmp_path: Path) -> None:
    server.responder = completions({}, delay_s=0.3)
    killer = kill_a_worker_when_busy(server)
    out = tmp_path / "run"
    code = main(bench_args(server, out, "--lanes", "io", "--limit", "6", "--budget-tokens", "1000", "--no-plot",
                           "--executor", "ray", "--workers", "2"))
    killer.join()
    assert code == 0
    rows = records(out)
    assert sorted(r["problem_id"] for r in rows) == ["1", "2", "3", "4", "5", "6"]  # each unit once
    assert all(r["stop_reason"] != "lane_crashed" for r in rows)
    assert sum(r["retries"] for r in rows) == 1  # the killed worker's unit ran again, and says so


@needs_ray
@needs_data
def test_a_unit_whose_worker_dies_past_the_retries_is_lane_crashed_and_the_sweep_goes_on(
        ray_address: str, server: FakeOpenAIServer, tmp_path: Path) -> None:
    from thoughtloom.eval.datasets import load_dataset
    from thoughtloom.eval.ray_sweep import RaySettings, run_protocol_on_ray
    from thoughtloom.eval.results import ResultsStore
    from thoughtloom.eval.runner import BenchOptions, build_protocol, prepare_run_dir

    server.responder = completions({}, delay_s=0.3)
    datasets = {"game24": load_dataset("game24", str(DATA))}
    protocol = build_protocol(BenchOptions(tasks=["game24"], lanes=["io"], model=f"openai-compatible:{server.url}@m"
                                           "#completions", limit=4, selection="first", budget_tokens=1000,
                                           data_dir=str(DATA)), datasets)
    out = tmp_path / "run"
    prepare_run_dir(protocol, out)
    killer = kill_a_worker_when_busy(server)
    stats = asyncio.run(run_protocol_on_ray(protocol, ResultsStore(out), datasets, RaySettings(workers=2, retries=0)))
    killer.join()
    rows = records(out)
    assert stats.done == 4 and sorted(r["problem_id"] for r in rows) == ["1", "2", "3", "4"]
    crashed = [r for r in rows if r["stop_reason"] == "lane_crashed"]
    assert len(crashed) == 1 and "worker died" in crashed[0]["error"] and crashed[0]["solved"] is False


@needs_ray
@needs_data
def test_the_model_limit_holds_across_ray_workers(ray_address: str, server: FakeOpenAIServer, tmp_path: Path) -> None:
    server.responder = completions({}, delay_s=0.2)
    code = main(bench_args(server, tmp_path / "run", "--lanes", "io,cot", "--limit", "4", "--budget-tokens", "1000",
                           "--no-plot", "--executor", "ray", "--workers", "2", "--jobs", "3",
                           "--model-concurrency", "2"))
    assert code == 0 and len(records(tmp_path / "run")) == 8
    assert server.peak_in_flight == 2  # 6 units in flight, never more than 2 at the server


@needs_ray
@needs_data
def test_ray_workers_ship_their_stored_runs_to_the_drivers_store_and_they_replay(
        ray_address: str, server: FakeOpenAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    server.responder = completions({})
    db = tmp_path / "runs.db"
    code = main(bench_args(server, tmp_path / "run", "--lanes", "tot", "--limit", "2", "--budget-tokens", "1500",
                           "--no-plot", "--executor", "ray", "--workers", "2", "--store", str(db)))
    assert code == 0
    run_ids = [r["run_id"] for r in records(tmp_path / "run")]
    assert len(run_ids) == 2 and all(run_ids)
    capsys.readouterr()
    calls = len(server.seen)
    for run_id in run_ids:
        assert main(["replay", run_id, "--store", str(db), "--quiet"]) == 0, capsys.readouterr()
    assert len(server.seen) == calls  # replayed from the shipped blocks, no model call


@needs_ray
@needs_data
def test_a_killed_ray_driver_resumes_without_redoing_written_units(ray_address: str, server: FakeOpenAIServer,
                                                                   tmp_path: Path) -> None:
    server.responder = completions({}, delay_s=0.2)
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "thoughtloom", *bench_args(server, out, "--lanes", "io,cot", "--limit", "6",
                                                            "--budget-tokens", "1000", "--no-plot", "--executor",
                                                            "ray", "--ray-address", ray_address, "--workers", "2")]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    results = out / "results.jsonl"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and not (results.is_file() and len(results.read_text().splitlines()) >= 3):
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    written = records(out)
    assert 3 <= len(written) < 12, "the sweep finished before it could be killed"

    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=scaled(120), check=False)
    assert done.returncode == 0, done.stderr
    rows = records(out)
    assert rows[:len(written)] == written  # written units were kept, not re-run
    assert sorted((r["lane"], r["problem_id"]) for r in rows) == sorted(
        (lane, str(i)) for lane in ("io", "cot") for i in range(1, 7))  # every unit exactly once
    assert "| io | 6 |" in done.stdout


@needs_ray
@needs_data
@pytest.mark.local_model
def test_the_embedded_model_runs_units_on_its_node_worker(ray_address: str, tmp_path: Path) -> None:
    out = tmp_path / "run"
    code = main(bench_args_for("local:gemma-3-270m", out, "--lanes", "io", "--limit", "1", "--budget-tokens", "600",
                               "--no-plot", "--executor", "ray", "--workers", "3"))
    assert code == 0
    (row,) = records(out)
    assert row["stop_reason"] == "done" and 0 < row["tokens"] <= 600 and row["calls"] == 1


def bench_args_for(model: str, out: Path, *extra: str) -> list[str]:
    return ["bench", "--tasks", "game24", "--model", model, "--data-dir", str(DATA), "--out", str(out),
            "--select", "first", "--quiet", *extra]


@needs_ray
@needs_data
def test_losing_a_node_mid_sweep_loses_no_unit(cluster: Any, server: FakeOpenAIServer, tmp_path: Path) -> None:
    server.responder = completions({}, delay_s=0.3)
    raylets = {node.all_processes["raylet"][0].process.pid: node for node in cluster.list_all_nodes() if not node.head}

    def remove_a_busy_node() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(server.seen) < 2:
            time.sleep(0.01)
        for pid in worker_pids():  # a node whose worker has a unit in flight (its raylet started the worker)
            parent = int((Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[1])
            if parent in raylets:
                cluster.remove_node(raylets[parent])  # its raylet and workers killed, as a lost machine
                return

    remover = threading.Thread(target=remove_a_busy_node, daemon=True)
    remover.start()
    out = tmp_path / "run"
    try:
        code = main(bench_args(server, out, "--lanes", "io", "--limit", "6", "--budget-tokens", "1000", "--no-plot",
                               "--executor", "ray", "--workers", "2"))
        remover.join()
    finally:
        if len(cluster.list_all_nodes()) < 3:
            cluster.add_node(**SMALL_NODE)  # for the tests after this one
            cluster.wait_for_nodes()
    assert code == 0
    rows = records(out)
    assert sorted(r["problem_id"] for r in rows) == ["1", "2", "3", "4", "5", "6"]
    assert all(r["stop_reason"] == "done" for r in rows), [(r["stop_reason"], r["error"]) for r in rows]
    assert sum(r["retries"] for r in rows) >= 1  # the node's worker had a unit in flight: it ran again elsewhere
