"""A received run is untrusted input: resume and replay use none of its endpoints, files or tools unless named again.

Real parts throughout: `loom solve` / `loom agent` subprocesses against the scripted OpenAI-compatible
server on 127.0.0.1, real SQLite stores, `loom export --car` / `loom import` of a run whose manifest
someone rewrote (an unfinished state of a real run, with its spec changed and re-encoded, so every
CID in the CAR verifies). A refusal is one line saying what the run asks for and how to grant it;
no request reaches the manifest's server and no key leaves; naming it again makes the run go on.
Also: wrong types in a stored manifest are one line on resume, and a run is resumed by one process at a time.

Most cases run loom's own `main` in this process (the user's key in its environment too), forging copies of
one finished run: an interpreter and a fresh run per case would cost minutes; each command still has a
case in a real `loom` subprocess.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from inprocess import loom_here
from machine import scaled
from openai_server import FakeOpenAIServer, serve
from test_agent import TRIP, trip_reply
from test_runs_cli import LOOM, PROBLEM, ROOT, assert_one_line_error, model_of, responder, run_id_from

from thoughtloom.store.blocks import link
from thoughtloom.store.runs import head_ref, history
from thoughtloom.store.sqlite import SQLiteStore
from thoughtloom.store.store import get_obj, put_obj

SECRET_KEY = "sk-the-users-own-secret-key"


@pytest.fixture(autouse=True)
def users_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """The user's own OpenAI key is in the environment of every loom run here, in this process or not."""
    monkeypatch.setenv("OPENAI_API_KEY", SECRET_KEY)
    monkeypatch.delenv("THOUGHTLOOM_API_KEY", raising=False)


def loom(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run loom as a user with an OpenAI key in the environment would."""
    env = {**os.environ, "THOUGHTLOOM_STORE": "/nonexistent/never-used.db", "OPENAI_API_KEY": SECRET_KEY}
    env.pop("THOUGHTLOOM_API_KEY", None)
    return subprocess.run([*LOOM, *args], check=False, capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env=env)


def stored_run(tmp_path: Path, *args: str, capsys: pytest.CaptureFixture[str] | None = None) -> tuple[Path, str]:
    """A finished run of `loom ARGS` in a store of its own (run in this process given `capsys`), and its id."""
    store = tmp_path / "sender.db"
    argv = (*args, "--quiet", "--store", str(store))
    proc = loom(*argv) if capsys is None else loom_here(capsys, *argv)
    assert proc.returncode == 0, proc.stderr
    return store, run_id_from(proc.stderr)


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A finished game24 run to forge from (its server gone, as a sender's is)."""
    with serve() as honest:
        honest.responder = responder()
        return stored_run(tmp_path_factory.mktemp("finished"), "solve", "--task", "game24", "--model",
                          model_of(honest), PROBLEM)


def copy_of(finished: tuple[Path, str], tmp_path: Path) -> tuple[Path, str]:
    """The finished run in a store of this test's own (to forge), and its id."""
    store = tmp_path / "sender.db"
    store.write_bytes(finished[0].read_bytes())
    return store, finished[1]


def forge(store: Path, run: str, change: Callable[[dict[str, Any]], Any], *, calls: int | None = 2) -> None:
    """Make the run's current state an unfinished one (after `calls` recorded calls) whose manifest's spec
    is `change(spec)`, re-encoded so every CID verifies; `calls=None` keeps the newest state."""
    with SQLiteStore(store) as s:
        heads = list(history(s, s.get_ref(head_ref(run))))
        _, head = heads[0] if calls is None else next(h for h in reversed(heads) if h[1]["usage"]["calls"] >= calls)
        manifest = dict(get_obj(s, head["manifest"].cid))
        manifest["spec"] = change(dict(manifest["spec"]))
        forged = {**head, "manifest": link(put_obj(s, manifest))}
        s.set_ref(head_ref(run), put_obj(s, forged))


def received(store: Path, run: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """The run as another user gets it: exported as a CAR, imported into a store of their own."""
    car, mine = tmp_path / "received.car", tmp_path / "mine.db"
    assert loom_here(capsys, "export", run, "--store", str(store), "--car", str(car)).returncode == 0
    proc = loom_here(capsys, "import", str(car), "--store", str(mine))
    assert proc.returncode == 0, proc.stderr
    return mine


def with_model(model: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    return lambda spec: {**spec, "model": model}


# --- model endpoints --------------------------------------------------------------------------------


@pytest.fixture
def attacker() -> Any:
    """The server a rewritten manifest points at: it records every request (and its headers)."""
    with serve() as server:
        server.responder = responder()
        yield server


def test_resume_refuses_the_model_endpoint_a_received_manifest_names_and_sends_no_key(
        attacker: FakeOpenAIServer, finished: tuple[Path, str], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    store, run = copy_of(finished, tmp_path)
    forge(store, run, with_model(model_of(attacker)))
    mine = received(store, run, tmp_path, capsys)

    proc = loom("resume", run, "--store", str(mine))
    assert_one_line_error(proc, "this run asks for model", attacker.url, f"--model {shlex.quote(model_of(attacker))}")
    assert attacker.seen == []
    assert SECRET_KEY not in proc.stderr


def test_resume_on_the_model_named_again_finishes_the_received_run(attacker: FakeOpenAIServer,
                                                                   finished: tuple[Path, str], tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    store, run = copy_of(finished, tmp_path)
    forge(store, run, with_model(model_of(attacker)))
    mine = received(store, run, tmp_path, capsys)

    proc = loom_here(capsys, "resume", run, "--store", str(mine), "--quiet", "--model", model_of(attacker))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("answer: (5 * 6) - (10 - 4) = 24")
    assert attacker.seen  # the user named it: the run went on there


def test_resume_refuses_a_different_model_than_the_run_asks_for(attacker: FakeOpenAIServer,
                                                                finished: tuple[Path, str], tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    store, run = copy_of(finished, tmp_path)
    forge(store, run, with_model(model_of(attacker)))
    proc = loom_here(capsys, "resume", run, "--store", str(store), "--model", "openai:gpt-4o-mini")
    assert_one_line_error(proc, f"--model {shlex.quote(model_of(attacker))}")
    assert attacker.seen == []


def test_resume_refuses_an_openai_model_a_received_manifest_names(finished: tuple[Path, str], tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    # openai: goes to OPENAI_BASE_URL with OPENAI_API_KEY: spending the user's key is a grant too.
    store, run = copy_of(finished, tmp_path)
    forge(store, run, with_model("openai:gpt-4o-mini#completions"))
    proc = loom_here(capsys, "resume", run, "--store", str(store))
    assert_one_line_error(proc, "model openai:gpt-4o-mini#completions at https://api.openai.com/v1",
                          "--model 'openai:gpt-4o-mini#completions'")


def test_resume_refuses_a_role_model_endpoint_a_received_manifest_names(
        attacker: FakeOpenAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with serve() as honest:
        honest.responder = responder()
        store, run = stored_run(tmp_path, "solve", "--task", "game24", "--model", model_of(honest), PROBLEM,
                                capsys=capsys)
        forge(store, run, lambda spec: {**spec, "role_models": [["evaluator", model_of(attacker)]]})
        proc = loom_here(capsys, "resume", run, "--store", str(store), "--model", model_of(honest))
        assert_one_line_error(proc, "evaluator model", f"--evaluator-model {shlex.quote(model_of(attacker))}")
        assert attacker.seen == [] and len(honest.seen) > 0
        before = len(honest.seen)
        proc = loom_here(capsys, "resume", run, "--store", str(store), "--quiet", "--model", model_of(honest),
                         "--evaluator-model", model_of(attacker))
        assert proc.returncode == 0, proc.stderr
        assert attacker.seen and len(honest.seen) > before


def _at_a_terminal(*args: str) -> Any:
    """`loom ARGS` in a pseudo-terminal, as a person runs it."""
    import pexpect

    env = {**os.environ, "OPENAI_API_KEY": SECRET_KEY}
    return pexpect.spawn(LOOM[0], [*LOOM[1:], *args], cwd=str(ROOT), env=env, encoding="utf-8", timeout=60)


@pytest.mark.parametrize("answer", ["y", "n"])
def test_resume_at_a_terminal_shows_what_the_run_asks_for_in_full_and_goes_on_only_on_yes(
        answer: str, attacker: FakeOpenAIServer, finished: tuple[Path, str], tmp_path: Path) -> None:
    store, run = copy_of(finished, tmp_path)
    forge(store, run, with_model(model_of(attacker)))
    child = _at_a_terminal("resume", run, "--store", str(store), "--quiet")
    child.expect_exact("loom: this stored run asks for:")
    child.expect_exact(f"model {model_of(attacker)}")
    child.expect_exact("Grant all of these to it? [y/N] ")
    assert attacker.seen == []  # nothing sent while the person reads
    child.sendline(answer)
    rest = child.read()
    child.close()
    if answer == "y":
        assert child.exitstatus == 0, rest
        assert "answer: (5 * 6) - (10 - 4) = 24" in rest and attacker.seen
    else:
        assert child.exitstatus == 2 and "this run asks for model" in rest
        assert attacker.seen == []


# --- folders, files and tools -----------------------------------------------------------------------


def test_resume_refuses_read_access_a_received_agent_manifest_asks_for(server: FakeOpenAIServer, tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "trip.md").write_text("Flights are 150 EUR each.\n")
    server.responder = trip_reply
    model = f"openai-compatible:{server.url}@scripted#chat"
    store, run = stored_run(tmp_path, "agent", TRIP, "--model", model, "--tools", "calc,files",
                            "--allow-read", str(notes))
    forge(store, run, lambda spec: {**spec, "read_roots": ["/"]})
    mine = received(store, run, tmp_path, capsys)
    sent = len(server.seen)

    proc = loom_here(capsys, "resume", run, "--store", str(mine), "--model", model, "--allow-read", str(notes))
    assert_one_line_error(proc, "read access to /", "--allow-read /")
    assert len(server.seen) == sent

    proc = loom_here(capsys, "resume", run, "--store", str(mine), "--model", model, "--allow-read", "/", "--quiet")
    assert proc.returncode == 0, proc.stderr
    assert len(server.seen) > sent


def test_resume_refuses_a_tool_the_user_did_not_grant_again(server: FakeOpenAIServer, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    server.responder = trip_reply
    model = f"openai-compatible:{server.url}@scripted#chat"
    store, run = stored_run(tmp_path, "agent", TRIP, "--model", model, "--tools", "calc", capsys=capsys)
    forge(store, run, lambda spec: {**spec, "tools": ["calc", "python"]})
    sent = len(server.seen)
    proc = loom_here(capsys, "resume", run, "--store", str(store), "--model", model)
    assert_one_line_error(proc, "tools python", "--tools calc,python")
    assert len(server.seen) == sent


def test_replay_refuses_a_tests_file_a_received_manifest_names(finished: tuple[Path, str], tmp_path: Path) -> None:
    store, run = copy_of(finished, tmp_path)
    secret = tmp_path / "private.py"
    secret.write_text("assert True\n")
    forge(store, run, lambda spec: {**spec, "task_options": {**spec["task_options"], "tests": str(secret)}},
          calls=None)
    proc = loom("replay", run, "--store", str(store))
    assert_one_line_error(proc, f"the tests in {secret}", f"--tests {secret}")


def test_replay_refuses_a_knowledge_folder_the_caller_does_not_grant_again(tmp_path: Path) -> None:
    from test_profile_checks import CITED_TRUE, QUESTION, docs

    from thoughtloom.api import areplay, asolve
    from thoughtloom.llm.fake import ScriptedBackend
    from thoughtloom.run.grants import GrantError, Grants

    fake = ScriptedBackend(default=CITED_TRUE).on("scale of 0 to 10", "7").on("Final answer:", "100 degrees.")
    store, folder = str(tmp_path / "runs.db"), str(docs(tmp_path))
    result = asyncio.run(asolve(QUESTION, task="general", model=fake, profile="research_synthesis", knowledge=folder,
                                store=store, max_depth=1, breadth=1, controller=False))
    with SQLiteStore(store) as opened:
        with pytest.raises(GrantError, match=f"the documents in {folder}.*Grants\\(knowledge="):
            asyncio.run(areplay(opened, str(result.run_id)))
        _, verdict = asyncio.run(areplay(opened, str(result.run_id), grants=Grants(knowledge=folder)))
    assert verdict.identical, str(verdict)


def test_a_named_embedded_model_and_the_calculator_need_no_grant_but_a_gguf_path_does() -> None:
    from thoughtloom.run.grants import needs
    from thoughtloom.run.spec import resolve

    embedded = resolve("Plan a picnic", task="agent", model="local", search={"strategy": "agent"}, tools=["calc"])
    assert needs(embedded, live=True) == []
    gguf = resolve(PROBLEM, task="game24", model="local:/home/someone/model.gguf")
    assert [n.flags() for n in needs(gguf, live=True)] == ["--model local:/home/someone/model.gguf"]
    assert needs(gguf, live=False) == []  # a replay loads no model


# --- wrong types in a stored manifest ---------------------------------------------------------------


def _head_manifest_null(store: Path, run: str) -> None:
    with SQLiteStore(store) as s:
        head = dict(get_obj(s, s.get_ref(head_ref(run))))
        s.set_ref(head_ref(run), put_obj(s, {**head, "status": "running", "manifest": None}))


BAD_SPECS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "read_roots a string": lambda spec: {**spec, "read_roots": "/etc", "tools": ["files"]},
    "tools a string": lambda spec: {**spec, "tools": "calc"},
    "model a number": lambda spec: {**spec, "model": 5},
    "spec a list": lambda spec: ["not", "a", "spec"],
    "task options a list": lambda spec: {**spec, "task_options": ["tests"]},
    "a role model not a pair": lambda spec: {**spec, "role_models": ["evaluator"]},
    "config a string": lambda spec: {**spec, "config": "bfs"},
}


def _resume_with_wrong_types(case: str, finished: tuple[Path, str], tmp_path: Path,
                             resume: Callable[..., subprocess.CompletedProcess[str]]) -> None:
    store, run = copy_of(finished, tmp_path)
    if case == "manifest null":
        _head_manifest_null(store, run)
    else:
        forge(store, run, BAD_SPECS[case])
    proc = resume("resume", run, "--store", str(store))
    assert "Traceback" not in proc.stderr
    if case == "spec a list":
        assert_one_line_error(proc, f"run {run} cannot be read", "'spec' is a list")
    elif case == "manifest null":
        assert_one_line_error(proc, f"run {run} cannot be read", "'manifest' is null")
    else:
        assert_one_line_error(proc, f"run {run}: not a run spec")


@pytest.mark.parametrize("case", [*BAD_SPECS, "manifest null"])
def test_resume_of_a_manifest_with_wrong_types_is_one_line(case: str, finished: tuple[Path, str], tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    _resume_with_wrong_types(case, finished, tmp_path, lambda *args: loom_here(capsys, *args))


@pytest.mark.parametrize("case", ["spec a list", "model a number"])
def test_resume_of_a_manifest_with_wrong_types_is_one_line_from_a_real_loom_process(
        case: str, finished: tuple[Path, str], tmp_path: Path) -> None:
    _resume_with_wrong_types(case, finished, tmp_path, loom)


# --- one resume at a time ---------------------------------------------------------------------------


def held(gate: threading.Event) -> Callable[[Any], Any]:
    """The scripted game24 replies, each held back until `gate` is set (a guard against a hang stops the wait)."""
    answer = responder()

    def reply(seen: Any) -> Any:
        gate.wait(scaled(60))
        return answer(seen)

    return reply


def resume_spending(server: FakeOpenAIServer, gate: threading.Event, finished: tuple[Path, str], tmp_path: Path,
                    env: dict[str, str] | None = None) -> tuple[Path, str, subprocess.Popen[str]]:
    """A stored unfinished game24 run on `server`, and a `loom resume` of it that has started spending and
    waits for its answers until `gate` is set."""
    store, run = copy_of(finished, tmp_path)
    forge(store, run, with_model(model_of(server)))
    server.responder = held(gate)
    sent = len(server.seen)
    first = subprocess.Popen([*LOOM, "resume", run, "--store", str(store), "--quiet", "--model", model_of(server)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env)
    deadline = time.monotonic() + 30
    while len(server.seen) == sent and time.monotonic() < deadline:
        time.sleep(0.02)
    if len(server.seen) == sent:  # never started spending: not left running behind a failed test
        first.kill()
        first.communicate()
    assert len(server.seen) > sent  # the first resume is spending
    return store, run, first


def test_a_second_resume_of_a_run_being_resumed_refuses_in_one_line(finished: tuple[Path, str],
                                                                   tmp_path: Path) -> None:
    gate = threading.Event()
    with serve() as server:
        store, run, first = resume_spending(server, gate, finished, tmp_path,
                                            {**os.environ, "OPENAI_API_KEY": SECRET_KEY})
        try:
            second = loom("resume", run, "--store", str(store), "--model", model_of(server))
            assert_one_line_error(second, f"run {run} is in use by another loom process (pid {first.pid})")
            gate.set()  # the first goes on, and finishes
            out, err = first.communicate(timeout=60)
        finally:
            gate.set()
            if first.poll() is None:
                first.send_signal(signal.SIGKILL)
                first.communicate()
    assert first.returncode == 0, err
    assert out.startswith("answer: (5 * 6) - (10 - 4) = 24")


def test_a_killed_resume_leaves_the_run_resumable(finished: tuple[Path, str], tmp_path: Path) -> None:
    gate = threading.Event()
    with serve() as server:
        store, run, first = resume_spending(server, gate, finished, tmp_path)
        first.send_signal(signal.SIGKILL)
        first.communicate(timeout=30)
        gate.set()  # the killed process's request, held in the server, is let go
        server.responder = responder()
        proc = loom("resume", run, "--store", str(store), "--quiet", "--model", model_of(server))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("answer: (5 * 6) - (10 - 4) = 24")


def test_resume_names_the_stored_budget_a_granted_model_would_be_charged_under(
        attacker: FakeOpenAIServer, finished: tuple[Path, str], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    store, run = copy_of(finished, tmp_path)
    forge(store, run, lambda spec: {**with_model(model_of(attacker))(spec),
                                    "budget": {**spec["budget"], "tokens": 5_000_000, "cost_usd": 40.0}})
    mine = received(store, run, tmp_path, capsys)
    proc = loom_here(capsys, "resume", run, "--store", str(mine))
    assert_one_line_error(proc, f"this run asks for model {model_of(attacker)} (under the run's stored budget: "
                                "5,000,000 tokens, $40);")
    assert attacker.seen == []
