"""Tasks from installed packages (the `thoughtloom.tasks` entry-point group) in loom tasks, solve, replay and bench.

The "installed package" is a fake distribution: a *.dist-info folder with entry_points.txt on
PYTHONPATH, which importlib.metadata reads exactly as it reads a pip-installed one.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from machine import scaled
from openai_server import FakeOpenAIServer, Reply, Seen

ROOT = Path(__file__).parents[1]
EXAMPLES = ROOT / "examples"


def install_fake_distribution(site: Path, entries: dict[str, str], group: str = "thoughtloom.tasks",
                              name: str = "loom-user-tasks") -> Path:
    """A distribution `name` registering `entries` (name -> module:Class) in the entry-point `group`; its folder."""
    info = site / f"{name.replace('-', '_')}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n", encoding="utf-8")
    lines = "".join(f"{entry} = {target}\n" for entry, target in entries.items())
    (info / "entry_points.txt").write_text(f"[{group}]\n{lines}", encoding="utf-8")
    return info


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """A site directory holding the examples' ReachTask as an installed task named `reach`."""
    path = tmp_path / "site"
    install_fake_distribution(path, {"reach": "custom_task:ReachTask", "game24": "custom_task:ReachTask",
                                     "broken": "no_such_module:Task"})
    return path


def loom(site: Path, *args: str, timeout: float | None = None) -> subprocess.CompletedProcess[str]:
    """Run loom with the fake distribution (and the example's module) importable (timeout: 120 s, scaled)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(EXAMPLES), str(ROOT)])}
    return subprocess.run([sys.executable, "-m", "thoughtloom", *args], check=False, capture_output=True, text=True,
                          timeout=scaled(120) if timeout is None else timeout, env=env, cwd=site)


def reach_reply(seen: Seen) -> Reply:
    """A scripted model for the reach task: both steps from the number in the prompt."""
    now = int(re.findall(r"Now: (-?\d+)", seen.body.get("prompt") or seen.body["messages"][-1]["content"])[-1])
    n = int(seen.body.get("n") or 1)
    text = f"{now} + 1 = {now + 1}\n{now} * 2 = {now * 2}"
    return Reply(200, {
        "id": "x", "object": "text_completion", "created": 0, "model": "m",
        "choices": [{"index": i, "text": text, "finish_reason": "stop"} for i in range(n)],
        "usage": {"prompt_tokens": 50, "completion_tokens": 10, "total_tokens": 60},
    })


def test_loom_tasks_lists_an_installed_task_with_its_description(site: Path) -> None:
    proc = loom(site, "tasks")
    assert proc.returncode == 0, proc.stderr
    line = next(line for line in proc.stdout.splitlines() if line.startswith("reach "))
    assert '"+ 1" and "* 2"' in line


def test_an_installed_task_cannot_replace_a_built_in_one(site: Path) -> None:
    proc = loom(site, "tasks")
    game24 = [line for line in proc.stdout.splitlines() if line.startswith("game24 ")]
    assert len(game24) == 1 and "Game of 24" in game24[0] and "* 2" not in game24[0]


def test_a_broken_installed_task_is_listed_and_refused_in_one_line(site: Path) -> None:
    listed = loom(site, "tasks")
    assert re.search(r"^broken .*cannot load no_such_module:Task", listed.stdout, flags=re.MULTILINE)
    proc = loom(site, "solve", "--task", "broken", "--no-store", "x")
    assert proc.returncode == 2
    assert [line for line in proc.stderr.splitlines() if line.strip()] == [
        next(line for line in proc.stderr.splitlines() if "installed task 'broken'" in line)]
    assert "Traceback" not in proc.stderr


def test_loom_solve_runs_an_installed_task_by_name(site: Path, server: FakeOpenAIServer, tmp_path: Path) -> None:
    server.responder = reach_reply
    proc = loom(site, "solve", "--task", "reach", "--model", f"openai-compatible:{server.url}@m#completions",
                "--quiet", "--json", "--no-store", "3 10")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["termination_reason"] == "goal_reached"
    assert out["answer"].endswith("= 10")


def test_loom_replay_finds_an_installed_task_by_its_stored_name(site: Path, server: FakeOpenAIServer,
                                                               tmp_path: Path) -> None:
    server.responder = reach_reply
    store = str(tmp_path / "runs.db")
    solved = loom(site, "solve", "--task", "reach", "--model", f"openai-compatible:{server.url}@m#completions",
                  "--quiet", "--store", store, "3 10")
    assert solved.returncode == 0, solved.stderr
    run_id = re.search(r"run (\S+) stored", solved.stderr).group(1)
    calls = len(server.seen)
    replayed = loom(site, "replay", run_id, "--store", store, "--quiet")
    assert replayed.returncode == 0, replayed.stderr + replayed.stdout
    assert len(server.seen) == calls  # every answer came from the record


def test_the_python_api_runs_an_installed_task_by_name(site: Path) -> None:
    script = ("import thoughtloom, custom_task; "
              "r = thoughtloom.solve('3 10', task='reach', model=custom_task.scripted_model(), controller=False); "
              "print(r.termination_reason, r.answer)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(EXAMPLES), str(ROOT)])}
    proc = subprocess.run([sys.executable, "-c", script], check=False, capture_output=True, text=True, timeout=scaled(120), env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("goal_reached ")


def test_loom_bench_runs_an_installed_task_on_a_users_data_set(site: Path, server: FakeOpenAIServer,
                                                              tmp_path: Path) -> None:
    server.responder = reach_reply
    out = tmp_path / "bench"
    proc = loom(site, "bench", "--tasks", f"reach:{EXAMPLES / 'reach_problems.jsonl'}", "--lanes", "tot,io",
                "--model", f"openai-compatible:{server.url}@m#completions", "--budget-tokens", "20000",
                "--out", str(out), "--no-plot", "--quiet", timeout=scaled(300))
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines() if line.strip()]
    assert sorted(r["problem_id"] for r in rows) == ["r1", "r2", "r3"]
    assert all(r["lane"] == "tot" and r["solved"] for r in rows)  # scored by the task's own check_answer
    assert "lane io has no prompt" in proc.stderr  # io needs prompts the data set does not have: left out, said why


def test_a_users_data_set_with_a_malformed_problem_is_refused_in_one_line(site: Path, tmp_path: Path) -> None:
    data = tmp_path / "bad.jsonl"
    data.write_text('{"id": "a", "problem": "3 10"}\n{"id": "b", "problem": "ten"}\n', encoding="utf-8")
    proc = loom(site, "bench", "--tasks", f"reach:{data}", "--lanes", "tot", "--model", "openai-compatible:"
                "http://127.0.0.1:9/v1@m", "--out", str(tmp_path / "o"), "--quiet")
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "line 2" in lines[0] and "START TARGET" in lines[0]


def test_loom_resume_finishes_a_killed_run_of_an_installed_task(site: Path, server: FakeOpenAIServer,
                                                               tmp_path: Path) -> None:
    def slow(seen: Seen) -> Reply:
        reply = reach_reply(seen)
        return Reply(reply.status, reply.body, delay_s=0.3)

    server.responder = slow
    store = str(tmp_path / "runs.db")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(EXAMPLES), str(ROOT)])}
    proc = subprocess.Popen(
        [sys.executable, "-m", "thoughtloom", "solve", "--task", "reach", "--model",
         f"openai-compatible:{server.url}@m#completions", "--quiet", "--concurrency", "1", "--store", store, "3 10"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=site, env=env)
    deadline = time.monotonic() + 30
    while len(server.seen) < 2 and time.monotonic() < deadline:  # one answered, the next in flight
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    _, err = proc.communicate(timeout=30)
    run_id = re.search(r"run (\S+) stored", err).group(1)
    server.responder = reach_reply
    resumed = loom(site, "resume", run_id, "--store", store, "--quiet", "--json", "--model",
                   f"openai-compatible:{server.url}@m#completions")
    assert resumed.returncode == 0, resumed.stderr
    out = json.loads(resumed.stdout)
    assert out["termination_reason"] == "goal_reached" and out["answer"].endswith("= 10")


@pytest.mark.local_model
def test_an_installed_task_runs_on_the_embedded_base_model(site: Path) -> None:
    proc = loom(site, "solve", "--task", "reach", "--model", "local:gemma-3-270m", "--quiet", "--json", "--no-store",
                "--budget-tokens", "3000", "3 10", timeout=scaled(900))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["usage"]["calls"] > 0
    assert out["usage"]["input_tokens"] + out["usage"]["output_tokens"] <= 3000
    # Whatever the model wrote, every kept step is one the task recomputed exactly.
    steps = [s["content"] for s in out["best_path"][1:]]
    assert all(re.fullmatch(r"\d+ [+*] [12] = \d+", step) for step in steps), steps
    if out["answer"] is not None:
        assert out["solved"] is True
