"""Stored runs from the command line: real `loom` subprocesses, a real HTTP model server, real SQLite files.

`loom solve` stores its run; a run killed with SIGKILL resumes to completion without re-sending
the calls it had recorded; `loom export --car` / `loom import` move a run to a fresh store with
every CID verified; `loom replay` rebuilds the same graph CID without a single model request;
a tampered block or a bad input is one line and exit code 2; a changed search reports the first
diverging node.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openai_server import FakeOpenAIServer, Reply, Seen, serve

from thoughtloom.store.blocks import cid_bytes
from thoughtloom.store.runs import load_calls, open_run
from thoughtloom.store.sqlite import SQLiteStore

LOOM = [sys.executable, "-m", "thoughtloom"]
ROOT = Path(__file__).parents[1]
PROBLEM = "4 5 6 10"
PROPOSALS = {
    "4 5 6 10": "10 - 4 = 6 (left: 5 6 6)\n4 + 5 = 11 (left: 6 10 11)\n7 * 7 = 49 (left: 4 5 49)",
    "5 6 6": "5 * 6 = 30 (left: 6 30)",
    "6 30": "30 - 6 = 24 (left: 24)",
}
#: Model calls of the scripted run: propose and 2 values at depth 1; at depth 2 two proposes, the
#: "6 10 11" one rejected whole and asked again twice, then a value; the winning propose at depth 3.
CALLS = 9


def scripted_text(prompt: str) -> str:
    """The game24 model: one known path to 24, every state "likely"."""
    if prompt.startswith("Evaluate if"):
        return "likely"
    numbers = re.findall(r"Input: ([\d ]+)\nPossible", prompt)[-1]
    return PROPOSALS.get(numbers, "1 + 1 = 2 (left: 2)")


def responder(delay_s: float = 0.0):
    """Completions replies for single and batched (list) prompts, after `delay_s`."""
    def reply(seen: Seen) -> Reply:
        prompts = seen.body["prompt"]
        prompts = prompts if isinstance(prompts, list) else [prompts]
        n = int(seen.body.get("n") or 1)
        choices = [{"index": i * n + j, "text": scripted_text(p), "finish_reason": "stop"}
                   for i, p in enumerate(prompts) for j in range(n)]
        usage = {"prompt_tokens": 100 * len(prompts), "completion_tokens": 20 * len(choices),
                 "total_tokens": 100 * len(prompts) + 20 * len(choices)}
        body = {"id": "x", "object": "text_completion", "created": 0, "model": "m", "choices": choices, "usage": usage}
        return Reply(200, body, delay_s=delay_s)

    return reply


def prompts_of(seen: list[Seen]) -> list[tuple[str, float]]:
    """Every prompt the server was sent, with its temperature (a re-ask sends a prompt again, hotter)."""
    out: list[tuple[str, float]] = []
    for s in seen:
        p = s.body["prompt"]
        out.extend((text, round(float(s.body["temperature"]), 6)) for text in (p if isinstance(p, list) else [p]))
    return out


def loom(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run loom as a user would."""
    return subprocess.run([*LOOM, *args], check=False, capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env={**os.environ, "THOUGHTLOOM_STORE": "/nonexistent/never-used.db"})


def assert_one_line_error(proc: subprocess.CompletedProcess[str], *fragments: str) -> None:
    """Exit 2, one stderr line naming the problem, no traceback."""
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def model_of(server: FakeOpenAIServer) -> str:
    return f"openai-compatible:{server.url}@scripted#completions"


def run_id_from(stderr: str) -> str:
    match = re.search(r"run (\w+) stored in ", stderr)
    assert match, stderr
    return match.group(1)


def graph_of(store: Path, run: str) -> dict[str, Any]:
    proc = loom("show", run, "--store", str(store), "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """One finished `loom solve` run in a store of its own (the server is gone afterwards)."""
    store = tmp_path_factory.mktemp("runs") / "store.db"
    with serve() as server:
        server.responder = responder()
        proc = loom("solve", "--task", "game24", "--model", model_of(server), "--quiet", "--store", str(store), PROBLEM)
        assert proc.returncode == 0, proc.stderr
        requests = len(server.seen)
    yield {"store": store, "run": run_id_from(proc.stderr), "stdout": proc.stdout, "requests": requests}


def test_solve_stores_the_run_and_lists_it(stored: dict[str, Any]) -> None:
    assert stored["stdout"].startswith("answer: (5 * 6) - (10 - 4) = 24")
    proc = loom("runs", "--store", str(stored["store"]))
    assert proc.returncode == 0, proc.stderr
    row = next(line for line in proc.stdout.splitlines() if line.startswith(stored["run"]))
    assert "finished" in row and "game24" in row and "(5 * 6) - (10 - 4) = 24" in row
    assert "1,200" in row  # tokens: 6 proposes of 120 and 3 values of 160 (the scripted server's usage)


def test_show_prints_the_tree_and_writes_mermaid(stored: dict[str, Any], tmp_path: Path) -> None:
    picture = tmp_path / "g.mmd"
    proc = loom("show", stored["run"][:6], "--store", str(stored["store"]), "--mermaid", str(picture))
    assert proc.returncode == 0, proc.stderr
    assert "#0 input: 4 5 6 10" in proc.stdout
    assert re.search(r"\*\s+#\d+ solution: \(5 \* 6\) - \(10 - 4\) = 24", proc.stdout)  # on the best path
    assert "(failed)" in proc.stdout  # the rejected 7 * 7 step
    assert picture.read_text().startswith("flowchart TD")


def test_replay_reproduces_the_graph_cid_with_zero_model_requests(stored: dict[str, Any]) -> None:
    # The server that answered the run is gone: any model request would fail the replay.
    proc = loom("replay", stored["run"], "--store", str(stored["store"]), "--quiet")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    graph = graph_of(stored["store"], stored["run"])["graph"]
    assert f"identical graph {graph}" in proc.stdout
    assert f"{CALLS} recorded calls served, 0 model calls" in proc.stdout
    assert "answer: (5 * 6) - (10 - 4) = 24" in proc.stdout


def test_export_then_import_into_a_fresh_store_verifies_every_cid(stored: dict[str, Any], tmp_path: Path) -> None:
    car, fresh = tmp_path / "run.car", tmp_path / "fresh.db"
    proc = loom("export", stored["run"], "--store", str(stored["store"]), "--car", str(car))
    assert proc.returncode == 0, proc.stderr
    exported = int(re.search(r": (\d+) blocks", proc.stdout).group(1))  # type: ignore[union-attr]
    proc = loom("import", str(car), "--store", str(fresh))
    assert proc.returncode == 0, proc.stderr
    assert f"imported run {stored['run']} (finished): {exported} blocks, every CID verified" in proc.stdout
    original, moved = graph_of(stored["store"], stored["run"]), graph_of(fresh, stored["run"])
    assert moved["head"] == original["head"] and moved["graph"] == original["graph"]
    assert [n["cid"] for n in moved["nodes"]] == [n["cid"] for n in original["nodes"]]
    # Every saved state came along: the fresh store replays the run too.
    assert loom("replay", stored["run"], "--store", str(fresh), "--quiet").returncode == 0


def test_a_tampered_block_is_reported_as_corrupt(stored: dict[str, Any], tmp_path: Path) -> None:
    copy = tmp_path / "copy.db"
    car = tmp_path / "run.car"
    assert loom("export", stored["run"], "--store", str(stored["store"]), "--car", str(car)).returncode == 0
    assert loom("import", str(car), "--store", str(copy)).returncode == 0
    victim = graph_of(copy, stored["run"])["nodes"][1]["cid"]
    with sqlite3.connect(copy) as db:
        db.execute("UPDATE blocks SET data = ? WHERE cid = ?", (b"\xa1atbforged", cid_bytes(victim)))
    assert_one_line_error(loom("show", stored["run"], "--store", str(copy)), "corrupt block", victim)
    assert_one_line_error(loom("replay", stored["run"], "--store", str(copy)), "corrupt block", victim)
    assert_one_line_error(loom("export", stored["run"], "--store", str(copy), "--car", str(tmp_path / "x.car")),
                          "corrupt block", victim)


def test_a_changed_manifest_replay_reports_the_first_diverging_node(stored: dict[str, Any], tmp_path: Path) -> None:
    manifest = tmp_path / "manifest.json"
    proc = loom("export", stored["run"], "--store", str(stored["store"]), "--manifest", str(manifest))
    assert proc.returncode == 0, proc.stderr
    data = json.loads(manifest.read_text())
    assert data["model"].startswith("openai-compatible:") and data["task"] == "game24" and data["problem"] == PROBLEM
    assert data["config"]["breadth"] == 5 and data["commit"] != "" and data["prompt_hashes"]
    assert data["calls"] and data["graph"] and data["head"]
    # The same manifest replays identically ...
    assert loom("replay", str(manifest), "--store", str(stored["store"]), "--quiet").returncode == 0
    # ... an edited one (prune everything the model called merely "likely") does not.
    data["spec"]["config"]["prune_threshold"] = 0.5
    manifest.write_text(json.dumps(data))
    proc = loom("replay", str(manifest), "--store", str(stored["store"]), "--quiet")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "DIVERGED" in proc.stdout
    assert re.search(r"first diverging node #1: recorded hypothesis '10 - 4 = 6 \(left: 5 6 6\)' \[succeeded, score "
                     r"[\d.]+\] vs replayed hypothesis '10 - 4 = 6 \(left: 5 6 6\)' \[pruned", proc.stdout), proc.stdout
    assert "search config differs: prune_threshold 0.5 (recorded 0.0)" in proc.stdout


def _diverging_replay_with_prompt_hashes(stored: dict[str, Any], tmp_path: Path, rewrite: Any) -> str:
    """Replay an exported manifest made to diverge, its prompt_hashes rewritten; the replay's output."""
    manifest = tmp_path / "manifest.json"
    assert loom("export", stored["run"], "--store", str(stored["store"]), "--manifest", str(manifest)).returncode == 0
    data = json.loads(manifest.read_text())
    data["prompt_hashes"] = rewrite(data["prompt_hashes"])
    data["spec"]["config"]["prune_threshold"] = 0.5
    manifest.write_text(json.dumps(data))
    proc = loom("replay", str(manifest), "--store", str(stored["store"]), "--quiet")
    assert proc.returncode == 1 and "DIVERGED" in proc.stdout, proc.stdout + proc.stderr
    return proc.stdout


def test_a_task_module_renamed_since_the_run_is_not_a_prompt_change(stored: dict[str, Any], tmp_path: Path) -> None:
    out = _diverging_replay_with_prompt_hashes(
        stored, tmp_path, lambda hashes: {f"{name}_old_name": sha for name, sha in hashes.items()})
    assert "prompt templates changed" not in out


def test_an_edited_task_module_is_named_as_a_prompt_change(stored: dict[str, Any], tmp_path: Path) -> None:
    out = _diverging_replay_with_prompt_hashes(stored, tmp_path, lambda hashes: {name: "0" * 64 for name in hashes})
    assert "the task's prompt templates changed since the run" in out


def test_bad_inputs_are_one_line_errors(stored: dict[str, Any], tmp_path: Path) -> None:
    store = str(stored["store"])
    assert_one_line_error(loom("show", "zzzz", "--store", store), "no run 'zzzz'")
    assert_one_line_error(loom("runs", "--store", str(tmp_path / "none.db")), "no run store at")
    junk = tmp_path / "junk.car"
    junk.write_bytes(b"\x05hello world")
    assert_one_line_error(loom("import", str(junk), "--store", str(tmp_path / "n.db")), "not a readable CAR file")
    assert_one_line_error(loom("import", str(tmp_path / "missing.car"), "--store", str(tmp_path / "n.db")), "cannot read")
    assert_one_line_error(loom("replay", str(junk.with_suffix(".json")), "--store", store), "cannot read manifest")
    assert_one_line_error(loom("resume", stored["run"], "--store", store), "is finished")
    assert_one_line_error(loom("export", stored["run"], "--store", store), "--car FILE")
    assert_one_line_error(loom("show", stored["run"], "--store", store, "--mermaid", str(tmp_path / "no" / "g.mmd")),
                          "cannot write --mermaid")


def test_no_store_stores_nothing(tmp_path: Path) -> None:
    with serve() as server:
        server.responder = responder()
        proc = loom("solve", "--task", "game24", "--model", model_of(server), "--quiet", "--no-store", PROBLEM)
    assert proc.returncode == 0, proc.stderr
    assert "stored in" not in proc.stderr


def test_a_run_killed_with_sigkill_resumes_to_completion_without_resending_recorded_calls(tmp_path: Path) -> None:
    store = tmp_path / "store.db"
    with serve() as server:
        server.responder = responder(delay_s=0.25)
        # One call at a time, so an uninterrupted run is deterministic and can be compared below
        # (concurrent live calls complete in whatever order the network gives).
        args = ["solve", "--task", "game24", "--model", model_of(server), "--quiet", "--concurrency", "1",
                "--store", str(store), PROBLEM]
        proc = subprocess.Popen([*LOOM, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
        deadline = time.monotonic() + 30
        while len(server.seen) < 4 and time.monotonic() < deadline:  # three answered, the fourth in flight
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == -signal.SIGKILL
        run = run_id_from(err)
        killed = json.loads(loom("runs", "--store", str(store), "--json").stdout.splitlines()[0])
        assert killed["id"] == run and killed["status"] == "running" and killed["answer"] is None
        recorded = killed["calls"]
        assert 1 <= recorded < CALLS
        before = len(server.seen)
        with SQLiteStore(store) as opened:
            answered = {(c.prompt.as_text(), round(c.temperature, 6))
                        for c in load_calls(opened, open_run(opened, run).calls_cid)}

        server.responder = responder()
        # A stored run's model endpoint is used only when named again (tests/test_received_runs.py).
        proc2 = loom("resume", run[:7], "--store", str(store), "--quiet", "--model", model_of(server))
        assert proc2.returncode == 0, proc2.stderr
        assert proc2.stdout.startswith("answer: (5 * 6) - (10 - 4) = 24   [checked: correct]")
        assert f"{recorded} recorded calls served from the store" in proc2.stderr
        resumed_prompts = prompts_of(server.seen[before:])
    # Only what had not been answered before the kill was asked again.
    assert answered and not answered & set(resumed_prompts)
    assert len(resumed_prompts) == CALLS - recorded
    assert_finished_as_if_never_interrupted(store, tmp_path)
    # Its history keeps the killed states: the heads chain back through the kill.
    assert loom("replay", run, "--store", str(store), "--quiet").returncode == 0


def assert_finished_as_if_never_interrupted(store: Path, tmp_path: Path) -> dict[str, Any]:
    """The run in `store` finished with all its calls and the graph an uninterrupted run builds; its row."""
    finished = json.loads(loom("runs", "--store", str(store), "--json").stdout.splitlines()[0])
    assert finished["status"] == "finished" and finished["calls"] == CALLS
    with serve() as server:
        server.responder = responder()
        fresh = tmp_path / "fresh.db"
        proc = loom("solve", "--task", "game24", "--model", model_of(server), "--quiet", "--concurrency", "1",
                    "--store", str(fresh), PROBLEM)
    assert graph_of(fresh, run_id_from(proc.stderr))["graph"] == finished["graph"]
    return finished


def _small_tmpfs(path: Path, size: str) -> None:
    """Mount a tmpfs of `size` at `path` (root only); skip the test where that is not permitted."""
    path.mkdir()
    try:
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                              capture_output=True, text=True, timeout=30)
    except OSError as exc:
        pytest.skip(f"cannot mount a small tmpfs here: {exc}")
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here (needs root): {proc.stderr.strip()}")


def _fill(disk: Path, keep_bytes: int) -> Path:
    """A file taking all of the disk's free space but `keep_bytes`."""
    st = os.statvfs(disk)
    filler = disk / "filler"
    filler.write_bytes(b"\0" * max(0, st.f_bavail * st.f_frsize - keep_bytes))
    return filler


def test_a_full_disk_prints_the_answer_then_one_line_and_resume_finishes_the_run_after_space_is_freed(
    tmp_path: Path,
) -> None:
    disk = tmp_path / "disk"
    _small_tmpfs(disk, "2m")
    try:
        store = disk / "store.db"
        SQLiteStore(store).close()
        filler = _fill(disk, 96 * 1024)  # room for the first few calls' blocks, not for the whole run
        with serve() as server:
            server.responder = responder()
            args = ["--task", "game24", "--model", model_of(server), "--quiet", "--concurrency", "1",
                    "--store", str(store), PROBLEM]
            proc = loom("solve", *args)
            # The answer first, whole; then one line saying what was lost and what to do.
            assert proc.returncode == 3, proc.stderr
            assert proc.stdout.startswith("answer: (5 * 6) - (10 - 4) = 24   [checked: correct]"), proc.stdout
            assert "Traceback" not in proc.stderr
            run = run_id_from(proc.stderr)
            errors = [line for line in proc.stderr.splitlines() if line.startswith("loom: error:")]
            assert len(errors) == 1 and len(proc.stderr.strip().splitlines()) == 2, proc.stderr
            # ... and how to resume it: with the model named again, as a stored run needs.
            assert "disk is full" in errors[0] and f"loom resume {run} --model '{model_of(server)}'" in errors[0]
            stopped = json.loads(loom("runs", "--store", str(store), "--json").stdout.splitlines()[0])
            assert stopped["status"] == "running" and 1 <= stopped["calls"] < CALLS

            filler.unlink()
            resumed = loom("resume", run, "--store", str(store), "--quiet", "--model", model_of(server))
            assert resumed.returncode == 0, resumed.stderr
            assert resumed.stdout.startswith("answer: (5 * 6) - (10 - 4) = 24   [checked: correct]")
        assert_finished_as_if_never_interrupted(store, tmp_path)
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False, capture_output=True)
