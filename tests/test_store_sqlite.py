"""SQLiteStore specifics: default path, open errors, atomic put_many, crash safety, concurrent readers."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from thoughtloom.store.blocks import CorruptBlock, encode, verify
from thoughtloom.store.sqlite import SQLiteStore, default_store_path
from thoughtloom.store.store import BlockStore, StoreError, get_obj


def test_default_store_path_honours_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("THOUGHTLOOM_STORE", raising=False)
    assert default_store_path() == Path.home() / ".thoughtloom" / "store.db"
    monkeypatch.setenv("THOUGHTLOOM_STORE", str(tmp_path / "x.db"))
    assert default_store_path() == tmp_path / "x.db"


def test_creates_the_directory_and_is_a_block_store(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "a" / "b" / "store.db") as s:
        assert isinstance(s, BlockStore)
        db = sqlite3.connect(tmp_path / "a" / "b" / "store.db")
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_uncreatable_directory_is_a_one_line_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(StoreError, match=r"^cannot create store directory .*file") as info:
        SQLiteStore(tmp_path / "file" / "store.db")
    assert "\n" not in str(info.value)


def test_a_file_that_is_not_a_store_is_refused(tmp_path: Path) -> None:
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError, match="is not a thoughtloom store \\(not a SQLite database\\)"):
        SQLiteStore(junk)
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE users (name TEXT)")
    with pytest.raises(StoreError, match="is not a thoughtloom store \\(a different SQLite database\\)"):
        SQLiteStore(other)
    assert sqlite3.connect(other).execute("SELECT name FROM sqlite_master").fetchall() == [("users",)]


def test_readonly_mode(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="no store at"):
        SQLiteStore(tmp_path / "none.db", readonly=True)
    cid, data = encode({"x": 1})
    with SQLiteStore(tmp_path / "s.db") as s:
        s.put(cid, data)
    with SQLiteStore(tmp_path / "s.db", readonly=True) as r:
        assert get_obj(r, cid) == {"x": 1}
        with pytest.raises(StoreError, match="cannot be used: attempt to write a readonly database"):
            r.set_ref("x", cid)


def test_put_many_is_all_or_nothing(tmp_path: Path) -> None:
    good = [encode({"i": i}) for i in range(10)]
    bad_cid, bad_data = encode({"bad": True})
    with SQLiteStore(tmp_path / "s.db") as s:
        with pytest.raises(CorruptBlock):
            s.put_many([*good, (bad_cid, bad_data + b"!")])
        assert len(s) == 0
        s.put_many(good)
        assert len(s) == 10 and sorted(s.cids()) == sorted(c for c, _ in good)


WRITER = textwrap.dedent("""
    import sys, itertools
    from thoughtloom.store.blocks import encode
    from thoughtloom.store.sqlite import SQLiteStore
    s = SQLiteStore(sys.argv[1])
    print("ready", flush=True)
    for n in itertools.count():
        batch = [encode({"batch": n, "i": i, "pad": "x" * 200}) for i in range(200)]
        s.put_many(batch)
        s.set_ref("run/w/head", batch[-1][0])  # the ref is set only after its blocks are committed
""")


def _start_writer(path: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def test_a_sigkilled_writer_leaves_a_consistent_store(tmp_path: Path) -> None:
    path = tmp_path / "crash.db"
    writer = _start_writer(path)
    time.sleep(0.6)
    writer.send_signal(signal.SIGKILL)
    writer.wait()
    assert sqlite3.connect(path).execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    with SQLiteStore(path) as s:
        head = s.get_ref("run/w/head")
        assert head is not None and get_obj(s, head)["i"] == 199  # the ref's whole batch is there
        n = len(s)
        assert n > 0 and n % 200 == 0  # whole transactions only
        assert all(verify(cid, s.get(cid)) for cid in s.cids())


def test_readers_in_other_processes_see_committed_state_while_a_writer_writes(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    SQLiteStore(path).close()
    writer = _start_writer(path)
    try:
        seen = []
        for _ in range(5):
            reader = subprocess.run(
                [sys.executable, "-c", textwrap.dedent("""
                    import sys
                    from thoughtloom.store.sqlite import SQLiteStore
                    from thoughtloom.store.store import get_obj
                    with SQLiteStore(sys.argv[1], readonly=True) as s:
                        head = s.get_ref("run/w/head")
                        print(get_obj(s, head)["batch"] if head else -1)
                """), str(path)],
                capture_output=True, text=True, timeout=30, check=False,
                env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})
            assert reader.returncode == 0, reader.stderr
            seen.append(int(reader.stdout))
        assert seen == sorted(seen) and seen[-1] >= 0
    finally:
        writer.kill()
        writer.wait()
