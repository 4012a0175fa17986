"""Bad input to the store commands and to `loom bench`, table-driven, through real `loom` subprocesses.

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
from machine import scaled
from openai_server import FakeOpenAIServer, serve
from test_runs_cli import PROBLEM, model_of, responder

from thoughtloom.store.blocks import _varint, encode, link, raw
from thoughtloom.store.sqlite import SQLiteStore
from thoughtloom.store.store import put_obj

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
        proc = loom("solve", "--task", "game24", "--model", model_of(server), "--quiet", "--store", str(store), PROBLEM)
    assert proc.returncode == 0, proc.stderr
    run_id = proc.stderr.split("run ", 1)[1].split()[0]
    car = base / "run.car"
    assert loom("export", run_id, "--store", str(store), "--car", str(car)).returncode == 0
    return {"store": store, "run": run_id, "car": car, "base": base}


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


@pytest.mark.parametrize("case", list(CAR_CASES))
def test_a_bad_car_is_one_line_and_leaves_the_store_unchanged(case: str, run: dict[str, Any], tmp_path: Path) -> None:
    car = tmp_path / "bad.car"
    car.write_bytes(CAR_CASES[case](run))
    store = tmp_path / "store.db"
    with SQLiteStore(store) as s:
        put_obj(s, {"already": "here"})
        s.set_ref("other", put_obj(s, {"x": 1}))
    before = store_state(store)
    assert_one_line_error(loom("import", str(car), "--store", str(store), timeout=30), str(car))
    assert store_state(store) == before


@pytest.mark.parametrize("case", ["huge header length varint", "no roots", "random garbage", "blocks missing"])
def test_a_bad_car_creates_no_store(case: str, run: dict[str, Any], tmp_path: Path) -> None:
    car = tmp_path / "bad.car"
    car.write_bytes(CAR_CASES[case](run))
    store = tmp_path / "never.db"
    assert_one_line_error(loom("import", str(car), "--store", str(store), timeout=30))
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
        "import": ["import", str(run["car"])], "resume": ["resume", rid], "replay": ["replay", rid, "--quiet"],
        "view": ["view", rid, "--out", str(out / "v.html")],
    }


COMMANDS = ["runs", "runs --json", "show", "show --json", "export --car", "export --manifest", "import", "resume",
            "replay", "view"]


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


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("damage", list(DAMAGE))
def test_every_store_command_names_a_damaged_store_in_one_line(damage: str, command: str, run: dict[str, Any],
                                                               damaged: dict[str, Path], tmp_path: Path) -> None:
    store = damaged[damage]
    args = _commands(run, tmp_path)[command]
    line = assert_one_line_error(loom(*args, "--store", str(store)), str(store), DAMAGE_SAYS[damage])
    if "damaged" in DAMAGE_SAYS[damage]:
        assert "move it aside or use --store" in line


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
@pytest.mark.parametrize("damage", list(DAMAGE))
def test_solve_on_a_damaged_store_stops_before_any_model_call_or_prints_its_answer(
        damage: str, run: dict[str, Any], tmp_path: Path, model_server: FakeOpenAIServer) -> None:
    store = tmp_path / "store.db"
    shutil.copy(run["store"], store)
    DAMAGE[damage](store)
    model_server.seen.clear()
    proc = loom("solve", "--task", "game24", "--model", model_of(model_server), "--quiet", "--store", str(store), PROBLEM)
    assert "Traceback" not in proc.stderr, proc.stderr
    if model_server.seen:  # the damage showed only mid-run: the answer is not lost, the error is one line
        assert proc.stdout.startswith("answer: "), proc.stdout + proc.stderr
        assert len([line for line in proc.stderr.splitlines() if line.strip()]) == 1, proc.stderr
    else:
        assert_one_line_error(proc, str(store))


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


@needs_data
@pytest.mark.parametrize("case", list(BENCH_CASES))
def test_bad_bench_input_is_one_line_before_any_request(case: str, tmp_path: Path, bench_server: FakeOpenAIServer,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    model = f"openai-compatible:{bench_server.url}@m#completions"
    monkeypatch.setenv("BENCH_MODEL", model)
    extra = BENCH_CASES[case](tmp_path)
    bench_server.seen.clear()
    args = ["bench", "--model", model, "--data-dir", str(DATA),
            "--limit", "2", "--no-plot", "--quiet"]
    if "--out" not in extra and "--resume" not in extra:
        args += ["--out", str(tmp_path / "run")]
    proc = loom(*args, *extra, timeout=scaled(60))
    assert_one_line_error(proc)
    assert bench_server.seen == []
