"""Bad input to the store commands and to `loom bench`, table-driven, in-process and through real `loom` subprocesses.

The case matrices (bad CARs, damaged stores through every store command, bad `loom bench` input,
some 80 crafted stores through every store command) run the same `main` in this process, with no
traceback let through: an interpreter per case would cost minutes; a few cases of each matrix still
go through a real `loom` subprocess.

Every case is one line on stderr, exit code 2, no traceback; a rejected CAR leaves the store as it
was; a damaged store (garbage pages, truncated, zeroed header, a directory, read-only, not SQLite)
is named as such by every command that opens it; `loom solve` against a damaged store fails before
its first model call or still prints its answer; `loom bench` refuses bad options before any
request reaches the model server.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from benchdata import data_dir, needs
from inprocess import loom_here
from machine import scaled
from openai_server import FakeOpenAIServer, serve
from test_runs_cli import PROBLEM, model_of, responder

from thoughtloom.store.blocks import _varint, encode, link, raw
from thoughtloom.store.runs import head_ref
from thoughtloom.store.sqlite import SQLiteStore
from thoughtloom.store.store import get_obj, put_obj

LOOM = [sys.executable, "-m", "thoughtloom"]
ROOT = Path(__file__).parents[1]
DATA = data_dir("game24/24_dev.csv")


def loom(*args: str, timeout: float = 60, wrap: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    """Run loom as a user would (inside `wrap`, e.g. a private read-only mount, when given)."""
    return subprocess.run([*wrap, *LOOM, *args], check=False, capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env={**os.environ, "THOUGHTLOOM_STORE": "/nonexistent/never-used.db"})


def assert_one_line_error(proc: subprocess.CompletedProcess[str], *fragments: str) -> str:
    """Exit 2, a single stderr line (naming the fragments), no traceback; the line."""
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def store_state(path: Path) -> tuple[list[tuple[bytes, bytes]], list[tuple[str, str]]]:
    """Every block and ref in a store file, read with plain sqlite3."""
    with sqlite3.connect(path) as db:
        return (db.execute("SELECT cid, data FROM blocks ORDER BY cid").fetchall(),
                db.execute("SELECT name, cid FROM refs ORDER BY name").fetchall())


# --- one real run, exported -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One finished `loom solve` run in a store of its own, and its CAR export."""
    base = tmp_path_factory.mktemp("run")
    store = base / "store.db"
    with serve() as server:
        server.responder = responder()
        model = model_of(server)
        proc = loom("solve", "--task", "game24", "--model", model, "--quiet", "--store", str(store), PROBLEM)
    assert proc.returncode == 0, proc.stderr
    run_id = proc.stderr.split("run ", 1)[1].split()[0]
    car = base / "run.car"
    assert loom("export", run_id, "--store", str(store), "--car", str(car)).returncode == 0
    return {"store": store, "run": run_id, "car": car, "base": base, "model": model}


# --- loom import of bad CAR files -----------------------------------------------------------------


def _car(roots: Any, *sections: bytes, version: int = 1) -> bytes:
    import libipld

    header = libipld.encode_dag_cbor({"roots": roots, "version": version})
    return _varint(len(header)) + header + b"".join(_varint(len(s)) + s for s in sections)


def _section(obj: Any) -> tuple[str, bytes]:
    from thoughtloom.store.blocks import cid_bytes

    cid, data = encode(obj) if not isinstance(obj, bytes) else raw(obj)
    return cid, cid_bytes(cid) + data


def _real(run: dict[str, Any]) -> bytes:
    return Path(run["car"]).read_bytes()


def _head_only(run: dict[str, Any]) -> bytes:
    # The real CAR's header and first section (the head) only: every other block is missing.
    from thoughtloom.store.car import read_car

    roots, blocks = read_car(run["car"])
    cid, data = next(blocks)
    return _car([link(r) for r in roots], _section_of(cid, data))


def _section_of(cid: str, data: bytes) -> bytes:
    from thoughtloom.store.blocks import cid_bytes

    return cid_bytes(cid) + data


def _second_root_bogus(run: dict[str, Any]) -> bytes:
    # A whole real run plus a second root that is nowhere: the valid run must not be stored either.
    from thoughtloom.store.car import read_car

    roots, blocks = read_car(run["car"])
    bogus, _ = encode({"type": "head", "nowhere": True})
    return _car([link(roots[0]), link(bogus)], *(_section_of(c, d) for c, d in blocks))


def _not_a_head(run: dict[str, Any]) -> bytes:
    cid, section = _section({"type": "thought", "content": "hi"})
    return _car([link(cid)], section)


def _head_without_fields(run: dict[str, Any]) -> bytes:
    cid, section = _section({"type": "head", "run": ["x"], "seq": "one"})
    return _car([link(cid)], section)


def _tampered(run: dict[str, Any]) -> bytes:
    data = bytearray(_real(run))
    data[-3] ^= 0xFF  # inside the last block's data: its CID no longer matches
    return bytes(data)


CAR_CASES: dict[str, Callable[[dict[str, Any]], bytes]] = {
    "huge header length varint": lambda r: b"\xff\xff\xff\xff\xff\xff\xff\xff\x7f" + b"x" * 10,
    "huge section length varint": lambda r: _car([link(_section({"a": 1})[0])]) + b"\xff" * 8 + b"\x7f" + b"x" * 10,
    "ten-byte varint": lambda r: b"\xff" * 12,
    "roots not a list": lambda r: _car("bafyreib"),
    "roots not CIDs": lambda r: _car([1, 2, 3]),
    "roots missing": lambda r: _car(None),
    "no roots": lambda r: _car([]),
    "empty block section": lambda r: _car([link(_section({"a": 1})[0])], b""),
    "no block sections": lambda r: _car([link(_section({"a": 1})[0])]),
    "section without a CID": lambda r: _car([link(_section({"a": 1})[0])], b"\x01\x71"),
    "truncated in the header": lambda r: _real(r)[:20],
    "truncated in a block": lambda r: _real(r)[: len(_real(r)) // 2],
    "random garbage": lambda r: random.Random(12).randbytes(5000),
    "header not CBOR": lambda r: b"\x05hello world",
    "CAR version 2": lambda r: _car([], version=2),
    "root is not a run head": _not_a_head,
    "head with wrong field types": _head_without_fields,
    "blocks missing": _head_only,
    "second root is nowhere": _second_root_bogus,
    "tampered block": _tampered,
}


def _import_bad_car(case: str, run: dict[str, Any], tmp_path: Path,
                     importer: Callable[..., subprocess.CompletedProcess[str]]) -> None:
    """`loom import` of the case's CAR into a store with other content: one line, the store as it was."""
    car = tmp_path / "bad.car"
    car.write_bytes(CAR_CASES[case](run))
    store = tmp_path / "store.db"
    with SQLiteStore(store) as s:
        put_obj(s, {"already": "here"})
        s.set_ref("other", put_obj(s, {"x": 1}))
    before = store_state(store)
    assert_one_line_error(importer("import", str(car), "--store", str(store)), str(car))
    assert store_state(store) == before


@pytest.mark.parametrize("case", list(CAR_CASES))
def test_a_bad_car_is_one_line_and_leaves_the_store_unchanged(case: str, run: dict[str, Any], tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    _import_bad_car(case, run, tmp_path, lambda *args: loom_here(capsys, *args))


@pytest.mark.parametrize("case", ["truncated in a block", "second root is nowhere"])
def test_a_bad_car_is_one_line_from_a_real_loom_process(case: str, run: dict[str, Any], tmp_path: Path) -> None:
    _import_bad_car(case, run, tmp_path, lambda *args: loom(*args, timeout=scaled(30)))


@pytest.mark.parametrize("case", ["huge header length varint", "no roots", "random garbage", "blocks missing"])
def test_a_bad_car_creates_no_store(case: str, run: dict[str, Any], tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    car = tmp_path / "bad.car"
    car.write_bytes(CAR_CASES[case](run))
    store = tmp_path / "never.db"
    assert_one_line_error(loom_here(capsys, "import", str(car), "--store", str(store)))
    assert not store.exists() or store_state(store) == ([], [])


@pytest.mark.parametrize(("make", "fragment"), [
    (lambda d: d, "not a regular file"),
    (lambda d: Path("/dev/zero"), "not a regular file"),
    (lambda d: d / "missing.car", "No such file"),
    (lambda d: (os.mkfifo(d / "fifo"), d / "fifo")[1], "not a regular file"),
])
def test_importing_something_that_is_not_a_file_is_one_line(make: Callable[[Path], Path], fragment: str,
                                                            tmp_path: Path) -> None:
    target = make(tmp_path)
    assert_one_line_error(loom("import", str(target), "--store", str(tmp_path / "s.db"), timeout=30),
                          "cannot read", fragment)
    assert not (tmp_path / "s.db").exists()


# --- a damaged store ------------------------------------------------------------------------------


def _garbage_pages(path: Path) -> None:
    size = path.stat().st_size
    with path.open("r+b") as f:
        f.seek(4096 * 2)
        f.write(random.Random(7).randbytes(size - 4096 * 3))  # everything but the header page and the last


def _truncated(path: Path) -> None:
    os.truncate(path, path.stat().st_size // 2)


def _zeroed_header(path: Path) -> None:
    with path.open("r+b") as f:
        f.write(b"\0" * 100)


def _directory(path: Path) -> None:
    path.unlink()
    path.mkdir()
    (path / "x").write_text("x")


def _not_sqlite(path: Path) -> None:
    path.write_text("a text file, not a store\n" * 200)


DAMAGE: dict[str, Callable[[Path], None]] = {
    "garbage pages": _garbage_pages, "truncated": _truncated, "zeroed header": _zeroed_header,
    "a directory": _directory, "not SQLite": _not_sqlite,
}
#: What the one line says for each damage.
DAMAGE_SAYS = {"garbage pages": "is damaged", "truncated": "is damaged", "zeroed header": "is damaged",
               "a directory": "cannot", "not SQLite": "not a thoughtloom store", "read-only": "cannot be used"}


def _commands(run: dict[str, Any], out: Path) -> dict[str, list[str]]:
    rid = run["run"]
    return {
        "runs": ["runs"], "runs --json": ["runs", "--json"], "show": ["show", rid], "show --json": ["show", rid, "--json"],
        "export --car": ["export", rid, "--car", str(out / "x.car")],
        "export --manifest": ["export", rid, "--manifest", str(out / "m.json")],
        "import": ["import", str(run["car"])], "resume": ["resume", rid, "--model", run["model"]], "replay": ["replay", rid, "--quiet"],
        "view": ["view", rid, "--out", str(out / "v.html")],
        "fork": ["fork", rid, "--at", "1", "--model", run["model"]],
        # Every part of the run read and checked, then refused before any model call (the server is gone).
        "fork, refused": ["fork", rid, "--at", "1", "--depth", "1", "--model", run["model"]],
    }


COMMANDS = ["runs", "runs --json", "show", "show --json", "export --car", "export --manifest", "import", "resume",
            "replay", "view", "fork"]


@pytest.fixture(scope="module")
def damaged(run: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A copy of the real store per kind of damage (commands only read them, or fail before writing)."""
    out = {}
    for name, damage in DAMAGE.items():
        path = tmp_path_factory.mktemp("damaged") / "store.db"
        shutil.copy(run["store"], path)
        damage(path)
        out[name] = path
    return out


def _assert_names_the_damage(proc: subprocess.CompletedProcess[str], store: Path, damage: str) -> None:
    line = assert_one_line_error(proc, str(store), DAMAGE_SAYS[damage])
    if "damaged" in DAMAGE_SAYS[damage]:
        assert "move it aside or use --store" in line


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("damage", list(DAMAGE))
def test_every_store_command_names_a_damaged_store_in_one_line(damage: str, command: str, run: dict[str, Any],
                                                               damaged: dict[str, Path], tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    store = damaged[damage]
    args = _commands(run, tmp_path)[command]
    _assert_names_the_damage(loom_here(capsys, *args, "--store", str(store)), store, damage)


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_store_is_named_in_one_line_by_a_real_loom_process(damage: str, run: dict[str, Any],
                                                                     damaged: dict[str, Path], tmp_path: Path) -> None:
    store = damaged[damage]
    args = _commands(run, tmp_path)["show"]
    _assert_names_the_damage(loom(*args, "--store", str(store), timeout=scaled(60)), store, damage)


def _read_only(directory: Path) -> tuple[str, ...]:
    """A command prefix: a private mount namespace where `directory` is read-only (root ignores mode bits)."""
    script = f"mount --bind {directory} {directory} && mount -o remount,ro,bind {directory} && exec \"$@\""
    return ("unshare", "-m", "sh", "-c", script, "sh")


@pytest.fixture(scope="module")
def read_only(run: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the store in a directory that loom will see read-only."""
    directory = tmp_path_factory.mktemp("ro")
    shutil.copy(run["store"], directory / "store.db")
    probe = subprocess.run([*_read_only(directory), "sh", "-c", f"! touch {directory}/w"], check=False,
                           capture_output=True)
    if probe.returncode != 0 or (directory / "w").exists():
        pytest.skip("cannot make a read-only mount here (needs unshare and mount)")
    return directory


@pytest.mark.parametrize("command", COMMANDS)
def test_every_store_command_on_a_read_only_store_is_one_line(command: str, run: dict[str, Any], read_only: Path,
                                                              tmp_path: Path) -> None:
    store = read_only / "store.db"
    args = _commands(run, tmp_path)[command]
    assert_one_line_error(loom(*args, "--store", str(store), wrap=_read_only(read_only)), str(store))


@pytest.fixture(scope="module")
def model_server() -> Iterator[FakeOpenAIServer]:
    """The scripted game24 server, shared by the solve cases (each case clears what it saw)."""
    with serve() as server:
        server.responder = responder()
        yield server


# Damage that only a write finds ("garbage pages": the store opens, the first flush after the first
# answered call fails) is survived by the recorder: the answer is printed, the error is one line.
def _solve_on_damaged(damage: str, run: dict[str, Any], tmp_path: Path, model_server: FakeOpenAIServer,
                      solver: Callable[..., subprocess.CompletedProcess[str]]) -> None:
    store = tmp_path / "store.db"
    shutil.copy(run["store"], store)
    DAMAGE[damage](store)
    model_server.seen.clear()
    proc = solver("solve", "--task", "game24", "--model", model_of(model_server), "--quiet", "--store", str(store),
                  PROBLEM)
    assert "Traceback" not in proc.stderr, proc.stderr
    if model_server.seen:  # the damage showed only mid-run: the answer is not lost, the error is one line
        assert proc.stdout.startswith("answer: "), proc.stdout + proc.stderr
        assert len([line for line in proc.stderr.splitlines() if line.strip()]) == 1, proc.stderr
    else:
        assert_one_line_error(proc, str(store))


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_solve_on_a_damaged_store_stops_before_any_model_call_or_prints_its_answer(
        damage: str, run: dict[str, Any], tmp_path: Path, model_server: FakeOpenAIServer,
        capsys: pytest.CaptureFixture[str]) -> None:
    _solve_on_damaged(damage, run, tmp_path, model_server, lambda *args: loom_here(capsys, *args))


@pytest.mark.parametrize("damage", ["garbage pages", "zeroed header"])
def test_solve_on_a_damaged_store_in_a_real_loom_process(damage: str, run: dict[str, Any], tmp_path: Path,
                                                         model_server: FakeOpenAIServer) -> None:
    _solve_on_damaged(damage, run, tmp_path, model_server, lambda *args: loom(*args, timeout=scaled(60)))


# --- loom bench: bad protocols and options, refused before any request ----------------------------

needs_data = needs("game24/24_dev.csv")


@pytest.fixture(scope="module")
def bench_server() -> Iterator[FakeOpenAIServer]:
    """A model server no bench case may reach (its replies would be wrong anyway)."""
    with serve() as server:
        yield server


PROTOCOLS: dict[str, str] = {
    "string budget": '{"budget_tokens": "1000"}',
    "negative budget": '{"budget_tokens": -5}',
    "zero call budget": '{"budget_calls": 0}',
    "NaN dollars": '{"budget_usd": NaN}',
    "infinite seconds": '{"budget_seconds": Infinity}',
    "negative dollars": '{"budget_usd": -1.5}',
    "fractional tokens": '{"budget_tokens": 1000.5}',
    "boolean limit": '{"limit": true}',
    "zero limit": '{"limit": 0}',
    "numbers as lanes": '{"lanes": [1, 2]}',
    "lanes as an object": '{"lanes": {"io": 1}}',
    "null tasks": '{"tasks": null}',
    "null lanes": '{"lanes": null}',
    "empty tasks": '{"tasks": []}',
    "unknown key": '{"budget_tokens": 1000, "colour": "red"}',
    "string temperature": '{"temperature": "hot"}',
    "NaN temperature": '{"temperature": NaN}',
    "huge seed": '{"seed": 99999999999999999999999999999}',
    "float seed": '{"seed": 1.5}',
    "lane params a list": '{"lane_params": []}',
    "lane params of a lane a number": '{"lane_params": {"cot_sc": 5}}',
    "lane param of the wrong type": '{"lane_params": {"cot_sc": {"k": "many"}}}',
    "lane override of the wrong type": '{"lanes": ["io", {"lane": "cot", "budget_tokens": "x"}]}',
    "lane params not an object": '{"lanes": [{"lane": "io", "params": 5}]}',
    "unknown lane setting": '{"lanes": [{"lane": "io", "colour": "red"}]}',
    "lane without a name": '{"lanes": [{"params": {}}]}',
    "a list, not an object": "[1, 2]",
    "not JSON": "budget_tokens = 1000",
    "empty file": "",
}


def _protocol_file(text: str) -> Callable[[Path], list[str]]:
    def make(tmp: Path) -> list[str]:
        path = tmp / "protocol.json"
        path.write_text(text)
        return ["--protocol", str(path)]

    return make


def _resume_dir(manifest: str | None) -> Callable[[Path], list[str]]:
    def make(tmp: Path) -> list[str]:
        run = tmp / "notarun"
        run.mkdir()
        if manifest is not None:  # naming the scripted server, so that a run that starts reaches it
            (run / "manifest.json").write_text(manifest.replace('"MODEL"', json.dumps(os.environ["BENCH_MODEL"])))
        return ["--resume", str(run)]

    return make


def _existing_file(tmp: Path) -> list[str]:
    (tmp / "afile").write_text("x")
    return ["--out", str(tmp / "afile")]


def _under_a_file(tmp: Path) -> list[str]:
    (tmp / "afile").write_text("x")
    return ["--out", str(tmp / "afile" / "run")]


BENCH_CASES: dict[str, Callable[[Path], list[str]]] = {
    **{f"--protocol {name}": _protocol_file(text) for name, text in PROTOCOLS.items()},
    "--protocol a directory": lambda t: ["--protocol", str(t)],
    "--protocol /dev/zero": lambda t: ["--protocol", "/dev/zero"],
    "--protocol missing": lambda t: ["--protocol", str(t / "missing.json")],
    "--out an existing file": _existing_file,
    "--out under a file": _under_a_file,
    "--out in /proc": lambda t: ["--out", "/proc/loom-bench-run"],
    "--limit 0": lambda t: ["--limit", "0"],
    "--limit -1": lambda t: ["--limit", "-1"],
    "--limit abc": lambda t: ["--limit", "abc"],
    "--ids garbage": lambda t: ["--ids", "no-such-id,%%%"],
    "--ids empty": lambda t: ["--ids", ","],
    "--param tot.beam=abc": lambda t: ["--param", "tot.beam=abc"],
    "--param nolane": lambda t: ["--param", "nolane"],
    "--param tot.beam=-1": lambda t: ["--param", "tot.beam=-1"],
    "--param tot.beam=2.5": lambda t: ["--param", "tot.beam=2.5"],
    "--param tot.colour=red": lambda t: ["--param", "tot.colour=red"],
    "--param cot_sc.k=0": lambda t: ["--param", "cot_sc.k=0"],
    "--param cot_sc.k=NaN": lambda t: ["--param", "cot_sc.k=NaN"],
    "--param io.k=3": lambda t: ["--lanes", "io", "--param", "io.k=3"],
    "--param tot.prune_threshold=2": lambda t: ["--param", "tot.prune_threshold=2"],
    "--workers 0": lambda t: ["--workers", "0"],
    "--jobs -1": lambda t: ["--jobs", "-1"],
    "--model-concurrency 0": lambda t: ["--model-concurrency", "0"],
    "--tasks empty": lambda t: ["--tasks", ""],
    "--tasks unknown": lambda t: ["--tasks", "chess"],
    "--lanes empty": lambda t: ["--lanes", " , "],
    "--lanes with an empty name": lambda t: ["--lanes", "io,,cot"],
    "--lanes with a trailing comma": lambda t: ["--lanes", "io,"],
    "--lanes with a lane twice": lambda t: ["--lanes", "io,cot,io"],
    "--tasks with an empty name": lambda t: ["--tasks", "game24,"],
    "--tasks with a task twice": lambda t: ["--tasks", "game24,game24"],
    "--ids with an empty id": lambda t: ["--ids", "1,,2"],
    "--protocol lanes with an empty name": _protocol_file('{"lanes": "io,,cot"}'),
    "--temperature nan": lambda t: ["--temperature", "nan"],
    "--resume a directory without a run": _resume_dir(None),
    "--resume a manifest that is not JSON": _resume_dir("{not json"),
    "--resume a manifest that is a list": _resume_dir("[]"),
    "--resume a manifest with wrong types": _resume_dir(json.dumps({
        "tasks": ["game24"], "problems": {"game24": ["1"]}, "model": "MODEL", "temperature": 0.7,
        "budget_tokens": "lots",
        "lanes": [{"lane": "io", "params": {}, "model": "MODEL", "temperature": 0.7, "budget_tokens": "lots",
                   "budget_calls": None, "budget_usd": None, "budget_seconds": None, "seed": 0,
                   "problems": {"game24": ["1"]}}]})),
}


def _bench_refuses(case: str, tmp_path: Path, bench_server: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch,
                   bench: Callable[..., subprocess.CompletedProcess[str]]) -> None:
    """`loom bench` with the case's bad input: one line, and no request reaches the model server."""
    model = f"openai-compatible:{bench_server.url}@m#completions"
    monkeypatch.setenv("BENCH_MODEL", model)
    extra = BENCH_CASES[case](tmp_path)
    bench_server.seen.clear()
    args = ["bench", "--model", model, "--data-dir", str(DATA),
            "--limit", "2", "--no-plot", "--quiet"]
    if "--out" not in extra and "--resume" not in extra:
        args += ["--out", str(tmp_path / "run")]
    assert_one_line_error(bench(*args, *extra))
    assert bench_server.seen == []


@needs_data
@pytest.mark.parametrize("case", list(BENCH_CASES))
def test_bad_bench_input_is_one_line_before_any_request(case: str, tmp_path: Path, bench_server: FakeOpenAIServer,
                                                        monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    _bench_refuses(case, tmp_path, bench_server, monkeypatch, lambda *args: loom_here(capsys, *args))


@needs_data
@pytest.mark.parametrize("case", ["--protocol not JSON", "--limit abc", "--resume a manifest with wrong types"])
def test_bad_bench_input_is_one_line_from_a_real_loom_process(case: str, tmp_path: Path,
                                                              bench_server: FakeOpenAIServer,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    _bench_refuses(case, tmp_path, bench_server, monkeypatch, lambda *args: loom(*args, timeout=scaled(60)))


# --- a crafted store: well-formed SQLite and verified blocks, shaped as no run is ----------------
#
# Each case copies the real run under a second id ("crafted") and changes one thing in it through the
# store's own API: a block put whole (so every CID still verifies), or a ref set to anything.
# Every command that reads the crafted run says so in one line naming it, or still does its job;
# `loom runs` marks it and lists the real run as before.

CRAFTED = "zzzzzzzzzz"  # sorts last, so `last` names it too


def _put_head(s: SQLiteStore, head: dict[str, Any]) -> None:
    head["run"] = CRAFTED
    s.set_ref(head_ref(CRAFTED), put_obj(s, head))


def _head(change: Callable[[SQLiteStore, dict[str, Any]], Any]) -> Callable[[SQLiteStore, dict[str, Any]], None]:
    def craft(s: SQLiteStore, head: dict[str, Any]) -> None:
        change(s, head)
        _put_head(s, head)

    return craft


def _block(field: str, change: Callable[[SQLiteStore, Any], Any]) -> Callable[[SQLiteStore, dict[str, Any]], None]:
    """A case that rewrites the block the head's `field` links (the change returns a new object, or edits it)."""
    def craft(s: SQLiteStore, head: dict[str, Any]) -> None:
        obj = get_obj(s, head[field].cid)
        new = change(s, obj)
        head[field] = link(put_obj(s, obj if new is None else new))
        _put_head(s, head)

    return craft


def _version(index: int, change: Callable[[SQLiteStore, dict[str, Any]], Any],
             thought: bool = False) -> Callable[[SQLiteStore, dict[str, Any]], None]:
    """A case that rewrites node `index`'s version block (or, with `thought`, its thought block)."""
    def in_graph(s: SQLiteStore, graph: dict[str, Any]) -> None:
        chunk_link = graph["nodes"]["chunks"][0]
        chunk = get_obj(s, chunk_link.cid)
        version = get_obj(s, chunk["items"][index].cid)
        if thought:
            obj = get_obj(s, version["thought"].cid)
            change(s, obj)
            version["thought"] = link(put_obj(s, obj))
        else:
            change(s, version)
        chunk["items"][index] = link(put_obj(s, version))
        graph["nodes"]["chunks"][0] = link(put_obj(s, chunk))

    return _block("graph", in_graph)


def _call(change: Callable[[dict[str, Any]], Any]) -> Callable[[SQLiteStore, dict[str, Any]], None]:
    """A case that rewrites the first recorded call."""
    def in_calls(s: SQLiteStore, calls: dict[str, Any]) -> None:
        chunk = get_obj(s, calls["chunks"][0].cid)
        call = get_obj(s, chunk["items"][0].cid)
        change(call)
        chunk["items"][0] = link(put_obj(s, call))
        calls["chunks"][0] = link(put_obj(s, chunk))

    return _block("calls", in_calls)


def _set(**values: Any) -> Callable[..., None]:
    """An edit of a block's fields (the last argument), for the helpers above."""
    def change(*args: Any) -> None:
        args[-1].update(values)

    return change


def _ref_to(block: tuple[str, bytes] | str, *, stored: bool = True) -> Callable[[SQLiteStore, dict[str, Any]], None]:
    """A case whose head ref names `block` (put in the store when `stored`), or a string that is no CID."""
    def craft(s: SQLiteStore, head: dict[str, Any]) -> None:
        if isinstance(block, str):
            s.set_ref(head_ref(CRAFTED), block)
            return
        if stored:
            s.put(*block)
        s.set_ref(head_ref(CRAFTED), block[0])

    return craft


def _missing_block(s: SQLiteStore, head: dict[str, Any]) -> None:
    missing, _ = encode({"type": "graph", "count": 0, "nodes": {"count": 0, "chunks": []}, "never": "stored"})
    head["graph"] = link(missing)
    _put_head(s, head)


def _parent_missing(s: SQLiteStore, thought: dict[str, Any]) -> None:
    nowhere, _ = encode({"type": "thought", "id": 99, "nowhere": True})
    thought["parents"], thought["edges"] = [link(nowhere)], ["elaboration"]


def _put_raw(s: SQLiteStore, data: bytes) -> str:
    cid, body = raw(data)
    s.put(cid, body)
    return cid


def _root_merged_from_child(s: SQLiteStore, head: dict[str, Any]) -> None:
    graph = get_obj(s, head["graph"].cid)
    chunk = get_obj(s, graph["nodes"]["chunks"][0].cid)
    child = get_obj(s, chunk["items"][1].cid)
    root = get_obj(s, chunk["items"][0].cid)
    root["merged"] = [[child["thought"], "elaboration"]]
    chunk["items"][0] = link(put_obj(s, root))
    graph["nodes"]["chunks"][0] = link(put_obj(s, chunk))
    head["graph"] = link(put_obj(s, graph))
    _put_head(s, head)


def _interrupted(craft: Callable[[SQLiteStore, dict[str, Any]], None]) -> Callable[[SQLiteStore, dict[str, Any]], None]:
    """A case on an interrupted run (resume reads its recorded calls and token counts before anything runs)."""
    def interrupted(s: SQLiteStore, head: dict[str, Any]) -> None:
        head.update(status="interrupted", result=None)
        craft(s, head)

    return interrupted


HUGE = 2**64 - 1  # the largest integer DAG-CBOR holds

CRAFTED_CASES: dict[str, Callable[[SQLiteStore, dict[str, Any]], None]] = {
    "unchanged": _head(lambda s, h: None),
    "ref that is not a CID": _ref_to("not-a-cid"),
    "ref that is a CID cut short": _ref_to("bafy"),
    "ref that is a CID of a hash loom does not know": _ref_to("b" + "a" * 58),
    "ref to a missing block": _ref_to(encode({"type": "head", "never": "stored"}), stored=False),
    "ref to a raw block": _ref_to(raw(b"just bytes")),
    "ref to a list": _ref_to(encode([1, 2, 3])),
    "ref to a head of another run": _ref_to(encode({"type": "head", "run": "other"})),
    "head without a status": _head(lambda s, h: h.pop("status")),
    "unknown run status": _head(_set(status="exploded")),
    "manifest null": _head(_set(manifest=None)),
    "manifest a string": _head(_set(manifest="bafy")),
    "graph null": _head(_set(graph=None)),
    "calls an integer": _head(_set(calls=7)),
    "timings missing": _head(lambda s, h: h.pop("timings")),
    "usage a list": _head(_set(usage=[1, 2])),
    "usage calls a string": _head(lambda s, h: h["usage"].update(calls="many")),
    "huge usage": _head(lambda s, h: h["usage"].update(input_tokens=HUGE, output_tokens=HUGE, calls=HUGE)),
    "nodes a string": _head(_set(nodes="three")),
    "huge seq": _head(_set(seq=HUGE)),
    "prev a number": _head(_set(prev=3)),
    "result a list": _head(_set(result=[1, 2])),
    "result a string": _head(_set(result="done")),
    "answer a dict": _head(lambda s, h: h["result"].update(answer={"a": 1})),
    "best path of strings": _head(lambda s, h: h["result"].update(best_path=["a", "b"])),
    "best path to a node not in the graph": _head(lambda s, h: h["result"].update(best_path=[0, 999])),
    "goal node a string": _head(lambda s, h: h["result"].update(goal_node="x")),
    "goal node not in the graph": _head(lambda s, h: h["result"].update(goal_node=HUGE)),
    "control a list": _head(lambda s, h: h["result"].update(control=[1])),
    "decisions a string": _head(lambda s, h: h["result"].update(control={"decisions": "x"})),
    "stopped a number": _head(lambda s, h: h["result"].update(termination_reason=5)),
    "manifest fields missing": _block("manifest", lambda s, m: {"type": "manifest"}),
    "manifest a list": _block("manifest", lambda s, m: [1, 2]),
    "manifest task a number": _block("manifest", _set(task=5)),
    "manifest problem a list": _block("manifest", _set(problem=["a"])),
    "manifest model null": _block("manifest", _set(model=None)),
    "manifest created_at a string": _block("manifest", _set(created_at="yesterday")),
    "manifest created_at huge": _block("manifest", _set(created_at=HUGE)),
    "manifest budget a list": _block("manifest", _set(budget=[1])),
    "manifest spec a string": _block("manifest", _set(spec="x")),
    "manifest calls not a link": _block("manifest", _set(calls="bafy")),
    "manifest max_concurrency a string": _block("manifest", _set(max_concurrency="x")),
    "graph chunk an integer": _block("graph", lambda s, g: g["nodes"].update(chunks=[5])),
    "graph nodes null": _block("graph", _set(nodes=None)),
    "graph a chunk block": _head(lambda s, h: h.update(graph=link(put_obj(s, {"type": "chunk", "items": []})))),
    "graph chunk items a dict": _block("graph", lambda s, g: g["nodes"].update(
        chunks=[link(put_obj(s, {"type": "chunk", "items": {"a": 1}}))])),
    "graph version an integer": _block("graph", lambda s, g: g["nodes"].update(
        chunks=[link(put_obj(s, {"type": "chunk", "items": [1, 2]}))])),
    "link to a missing block": _missing_block,
    "unknown node status": _version(0, _set(status="exploded")),
    "node score a string": _version(1, _set(score="high")),
    "node score huge": _version(1, _set(score=HUGE)),
    "node extra a list": _version(0, _set(extra=[1])),
    "node cost a float": _version(0, _set(cost_tokens=1.5)),
    "node merged a string": _version(0, _set(merged="x")),
    "node edges of the wrong shape": _version(1, _set(edges=[5])),
    "thought null": _version(0, _set(thought=None)),
    "unknown node kind": _version(0, _set(kind="spell"), thought=True),
    "thought id a string": _version(0, _set(id="zero"), thought=True),
    "thought id huge": _version(0, _set(id=HUGE), thought=True),
    "thought depth negative": _version(0, _set(depth=-1), thought=True),
    "thought content a number": _version(0, _set(content=5), thought=True),
    "thought content a link to CBOR": _version(0, lambda s, t: t.update(content=link(put_obj(s, {"a": 1}))),
                                               thought=True),
    "thought content not UTF-8": _version(0, lambda s, t: t.update(content=link(_put_raw(s, b"\xff\xfe" * 600))),
                                          thought=True),
    "parent missing": _version(1, _parent_missing, thought=True),
    "parents and edges differ": _version(1, lambda s, t: t.update(edges=[]), thought=True),
    "unknown edge kind": _version(1, lambda s, t: t.update(edges=["hates"]), thought=True),
    "cycle in parents": _root_merged_from_child,
    "call usage a string": _call(_set(usage="lots")),
    "call texts a number": _call(_set(texts=5)),
    "call prompt null": _call(_set(prompt=None)),
    "call error a string": _call(_set(error="bad")),
    "call rank a string": _call(_set(rank="first")),
    "counts chunk a string": _head(lambda s, h: h["counts"].update(chunks=["x"])),
    "interrupted, a call of the wrong shape": _interrupted(_call(_set(usage="lots"))),
    "interrupted, a token count of the wrong shape": _interrupted(_head(lambda s, h: h["counts"].update(
        chunks=[link(put_obj(s, {"type": "chunk", "items": [["digest", "many"]]}))]))),
    "timings created_at strings": _block("timings", lambda s, t: t.update(
        created_at={"count": 1, "chunks": [link(put_obj(s, {"type": "chunk", "items": ["noon"]}))]})),
}

CRAFTED_COMMANDS = ["show", "show --json", "view", "export --car", "export --manifest", "resume", "replay",
                    "fork, refused"]


@pytest.fixture(scope="module")
def crafted(run: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A copy of the real store per crafted case, the real run kept beside the crafted one."""
    out = {}
    for name, craft in CRAFTED_CASES.items():
        path = tmp_path_factory.mktemp("crafted") / "store.db"
        shutil.copy(run["store"], path)
        with SQLiteStore(path) as s:
            craft(s, dict(get_obj(s, s.get_ref(head_ref(run["run"])))))
        out[name] = path
    return out


def _one_line_or_done(proc: subprocess.CompletedProcess[str], *fragments: str) -> None:
    """No traceback; either the job is done (exit 0, or 1 for a replay that differs) or one line naming `fragments`."""
    assert "Traceback" not in proc.stderr, proc.stderr
    if proc.returncode in (0, 1):
        return
    assert_one_line_error(proc, *fragments)


@pytest.mark.parametrize("command", CRAFTED_COMMANDS)
@pytest.mark.parametrize("case", list(CRAFTED_CASES))
def test_a_crafted_run_is_refused_in_one_line_naming_it(case: str, command: str, run: dict[str, Any],
                                                        crafted: dict[str, Path], tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    args = _commands({**run, "run": CRAFTED}, tmp_path)[command]
    proc = loom_here(capsys, *args, "--store", str(crafted[case]))
    _one_line_or_done(proc, CRAFTED)


@pytest.mark.parametrize("command", CRAFTED_COMMANDS)
def test_a_crafted_run_is_one_line_from_a_real_loom_process(command: str, run: dict[str, Any],
                                                            crafted: dict[str, Path], tmp_path: Path) -> None:
    args = _commands({**run, "run": CRAFTED}, tmp_path)[command]
    proc = loom(*args, "--store", str(crafted["unknown node status"]), timeout=scaled(60))
    _one_line_or_done(proc, CRAFTED)


@pytest.mark.parametrize("case", list(CRAFTED_CASES))
def test_runs_lists_the_good_run_beside_a_crafted_one(case: str, run: dict[str, Any],
                                                      crafted: dict[str, Path],
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    proc = loom_here(capsys, "runs", "--store", str(crafted[case]))
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert any(line.startswith(run["run"]) and "finished" in line for line in lines), proc.stdout
    if case.startswith("ref") or case in ("unknown run status", "manifest null", "manifest fields missing"):
        assert any(line.startswith(CRAFTED) and "damaged" in line for line in lines), proc.stdout


@pytest.mark.parametrize("case", list(CRAFTED_CASES))
def test_runs_json_lists_every_run_as_json(case: str, run: dict[str, Any], crafted: dict[str, Path],
                                           capsys: pytest.CaptureFixture[str]) -> None:
    proc = loom_here(capsys, "runs", "--json", "--store", str(crafted[case]))
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [r["id"] for r in rows] == [run["run"], CRAFTED]


MANIFEST_CASES: dict[str, Any] = {
    "task a number": {"task": 5},
    "problem a list": {"problem": ["a"]},
    "created_at a string": {"created_at": "yesterday"},
    "spec a string": {"spec": "x"},
    "head not a CID": {"head": "not-a-cid"},
    "graph a CID cut short": {"graph": "bafy"},
    "calls not a CID": {"calls": "bafy"},
    "max_concurrency negative": {"max_concurrency": -1},
    "run_id missing": {"run_id": None},
}


@pytest.mark.parametrize("case", list(MANIFEST_CASES))
def test_replay_of_a_crafted_manifest_file_is_one_line_naming_it(case: str, run: dict[str, Any], tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "good.json"
    exported = loom_here(capsys, "export", run["run"], "--store", str(run["store"]), "--manifest", str(good))
    assert exported.returncode == 0, exported.stderr
    data = json.loads(good.read_text())
    data.update(MANIFEST_CASES[case])
    data = {k: v for k, v in data.items() if v is not None}
    crafted_file = tmp_path / "crafted.json"
    crafted_file.write_text(json.dumps(data))
    assert_one_line_error(loom_here(capsys, "replay", str(crafted_file), "--store", str(run["store"]), "--quiet"),
                          str(crafted_file))


# --- a crafted agent run: the tools and tool calls resume and replay read off its nodes -------------


@pytest.fixture(scope="module")
def agent_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One finished `loom agent` run (a tool call in it) in a store of its own."""
    from test_agent import TRIP, trip_reply

    store = tmp_path_factory.mktemp("agent") / "store.db"
    with serve() as server:
        server.responder = trip_reply
        proc = loom("agent", TRIP, "--quiet", "--store", str(store), "--model",
                    f"openai-compatible:{server.url}@scripted#chat")
    assert proc.returncode == 0, proc.stderr
    return {"store": store, "run": proc.stderr.split("run ", 1)[1].split()[0]}


TOOL_CASES: dict[str, Callable[[dict[str, Any]], None]] = {
    "tools a string": lambda extra: extra.update(tools="calc"),
    "a tool without a name": lambda extra: extra.update(tools=[{"description": "x"}]),
    "tool calls a number": lambda extra: extra.update(tool_calls=5),
    "a tool call of numbers": lambda extra: extra.update(tool_calls=[{"tool": 1, "status": 2}]),
    "a tool call without a status": lambda extra: extra.update(tool_calls=[{"tool": "calc"}]),
}


@pytest.mark.parametrize("case", list(TOOL_CASES))
def test_replay_of_an_agent_run_with_crafted_tools_is_one_line_naming_it(case: str, agent_run: dict[str, Any],
                                                                         tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "store.db"
    shutil.copy(agent_run["store"], store)
    with SQLiteStore(store) as s:
        head = dict(get_obj(s, s.get_ref(head_ref(agent_run["run"]))))
        _version(0, lambda _, version: TOOL_CASES[case](version["extra"]))(s, head)
    assert_one_line_error(loom_here(capsys, "replay", CRAFTED, "--store", str(store), "--quiet"), CRAFTED)


@pytest.mark.parametrize("case", ["ref that is not a CID", "ref to a missing block", "unknown run status",
                                  "head without a status"])
def test_importing_a_good_copy_replaces_a_run_that_cannot_be_read(case: str, run: dict[str, Any], tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "store.db"
    shutil.copy(run["store"], store)
    with SQLiteStore(store) as s:
        CRAFTED_CASES[case](s, dict(get_obj(s, s.get_ref(head_ref(run["run"])))))
        s.set_ref(head_ref(run["run"]), s.get_ref(head_ref(CRAFTED)))  # the real run's ref now names the crafted head
        s.delete_ref(head_ref(CRAFTED))
    assert loom_here(capsys, "show", run["run"], "--store", str(store)).returncode == 2
    proc = loom_here(capsys, "import", str(run["car"]), "--store", str(store))
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 0, proc.stderr
    assert loom_here(capsys, "show", run["run"], "--store", str(store)).returncode == 0
