"""A store that cannot be written (a full disk) never costs the answer or the run (issue 12, point 4).

In process: a SQLite store whose put_many fails with SQLite's disk-full error on chosen writes.
The search goes on and returns its answer; blocks of a failed write are re-sent with the next
one, so no stored head ever links a block the store does not hold; when the last writes fail,
the ref keeps naming the last head written whole (the one `loom resume` continues from). The
same through `loom solve` on a real 2 MB tmpfs is in test_runs_cli.py.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_runs import CONFIG, game24_reply

from thoughtloom.api import asolve
from thoughtloom.llm.fake import ScriptedBackend
from thoughtloom.store.car import walk
from thoughtloom.store.runs import head_ref, history, load_graph, open_run, run_ids
from thoughtloom.store.sqlite import SQLiteStore


# asolve warns when the run is not stored whole; here that is the point (see the test of the warning).
pytestmark = pytest.mark.filterwarnings("ignore:run run1 is not stored whole:RuntimeWarning")


class FullDisk(SQLiteStore):
    """put_many fails as SQLite does on a full disk whenever `full(n)` holds for the n-th call (from 1)."""

    def __init__(self, path: Path, full: Callable[[int], bool]) -> None:
        super().__init__(path)
        self.full = full
        self.writes = 0
        self.failed = 0

    def put_many(self, items: Any) -> None:
        self.writes += 1
        if self.full(self.writes):
            self.failed += 1
            raise sqlite3.OperationalError("database or disk is full")
        super().put_many(items)


def solve_into(store: Any) -> Any:
    backend = ScriptedBackend(responder=game24_reply)
    return asyncio.run(asolve("4 5 6 10", task="game24", model=backend, config=CONFIG, store=store, run_id="run1"))


def test_asolve_warns_when_the_run_is_not_stored_whole_and_returns_the_result(tmp_path: Path) -> None:
    with pytest.warns(RuntimeWarning, match="run run1 is not stored whole: database or disk is full"):
        result = solve_into(FullDisk(tmp_path / "s.db", lambda n: n >= 4))
    assert result.answer == "(5 * 6) - (10 - 4) = 24"


def test_failed_writes_mid_run_cost_nothing_once_the_store_takes_writes_again(tmp_path: Path) -> None:
    store = FullDisk(tmp_path / "s.db", lambda n: 3 <= n <= 5)
    result = solve_into(store)
    assert store.failed == 3
    assert result.answer == "(5 * 6) - (10 - 4) = 24"
    with SQLiteStore(tmp_path / "s.db") as reopened:
        run = open_run(reopened, "run1")
        assert run.status == "finished" and run.result is not None and run.result["answer"] == result.answer
        # Every block under the final head (and under every earlier head it chains to) is stored.
        assert sum(1 for _ in walk(reopened, [run.head_cid])) > 0
        # The heads written are consecutive states: a failed write left no gap in seq.
        seqs = [h["seq"] for _, h in history(reopened, run.head_cid)]
        assert seqs == list(range(len(seqs) - 1, -1, -1))


def test_a_store_that_fills_up_keeps_the_last_whole_head_and_the_search_keeps_its_answer(tmp_path: Path) -> None:
    store = FullDisk(tmp_path / "s.db", lambda n: n >= 4)
    result = solve_into(store)
    assert result.answer == "(5 * 6) - (10 - 4) = 24"
    with SQLiteStore(tmp_path / "s.db") as reopened:
        head = reopened.get_ref(head_ref("run1"))
        run = open_run(reopened, "run1")
        assert head == run.head_cid and run.status == "running"  # resumable: not finished
        assert run.head["seq"] == 2  # the third write, the last that succeeded
        assert sum(1 for _ in walk(reopened, [head])) > 0
        assert len(load_graph(reopened, run.graph_cid).graph) >= 1


def test_a_store_full_from_the_first_write_holds_no_run_and_the_search_still_answers(tmp_path: Path) -> None:
    store = FullDisk(tmp_path / "s.db", lambda n: True)
    result = solve_into(store)
    assert result.answer == "(5 * 6) - (10 - 4) = 24"
    with SQLiteStore(tmp_path / "s.db") as reopened:
        assert run_ids(reopened) == [] and len(reopened) == 0
