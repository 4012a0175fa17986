"""SQLite block store: one file, the default (`~/.thoughtloom/store.db`, env THOUGHTLOOM_STORE).

WAL journal with synchronous=NORMAL: a committed transaction survives the writer being killed
(SIGKILL) and the file is always consistent; an OS crash or power loss can lose the last commits
but never corrupts. One writer process and any number of reader processes may use the file at once
(readers see the last committed state; writers wait up to `busy_timeout_s` for the lock).

Blocks live in `blocks(cid BLOB PRIMARY KEY, data BLOB) WITHOUT ROWID`, keyed by the binary CID
(36 bytes vs 59 for the string; one b-tree, no separate index); refs in `refs(name, cid)`.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path

from thoughtloom.store.blocks import (
    CID,
    CorruptBlock,
    MissingBlock,
    cid_bytes,
    cid_str,
    verify,
)
from thoughtloom.store.refs import REFS_SCHEMA, RefTable, TableRefs, guarded
from thoughtloom.store.store import ClosesOnExit, StoreError

APPLICATION_ID = 0x746C6F6D  # "tlom": marks the file as a thoughtloom store
SCHEMA_VERSION = 1
_BATCH = 10_000  # rows per executemany, to bound memory when put_many gets a generator
_IN_BATCH = 500  # CIDs per "WHERE cid IN (...)": one statement per ~500 rows instead of per row

_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS blocks (cid BLOB PRIMARY KEY, data BLOB NOT NULL) WITHOUT ROWID;
{REFS_SCHEMA};
"""


def default_store_path() -> Path:
    """The default store file: $THOUGHTLOOM_STORE, else ~/.thoughtloom/store.db."""
    env = os.environ.get("THOUGHTLOOM_STORE")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".thoughtloom" / "store.db"


class SQLiteStore(TableRefs, ClosesOnExit):
    """A BlockStore in one SQLite file."""

    def __init__(self, path: str | os.PathLike[str], *, readonly: bool = False, busy_timeout_s: float = 10.0) -> None:
        self.path = Path(path).expanduser()
        self.readonly = readonly
        self._lock = threading.RLock()  # one connection shared by threads (asyncio executors)
        if not readonly:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise StoreError(f"cannot create store directory {self.path.parent}: {e.strerror or e}") from None
        elif not self.path.exists():
            raise StoreError(f"no store at {self.path}")
        try:
            if readonly:
                self._db = sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=ro", uri=True,
                                           isolation_level=None, check_same_thread=False,
                                           timeout=busy_timeout_s)
            else:
                self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False,
                                           timeout=busy_timeout_s)
        except sqlite3.Error as e:
            raise StoreError(f"cannot open store {self.path}: {e}") from None
        self._ref_table = RefTable(self._db, self._lock, self.path)
        try:
            with self._guard():
                self._init_schema()
        except StoreError:
            self._db.close()
            raise

    def _guard(self) -> AbstractContextManager[sqlite3.Connection]:
        # Every statement runs in here: a damaged page found by any query is a one-line StoreError.
        return guarded(self._db, self._lock, self.path)

    def _init_schema(self) -> None:
        db = self._db
        db.execute("PRAGMA cache_size=-65536")  # 64 MiB page cache (per connection): a 100k-node graph is ~40 MB
        app_id = db.execute("PRAGMA application_id").fetchone()[0]
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if app_id != APPLICATION_ID and (app_id != 0 or tables):
            # Another application's database: never write our tables into it.
            raise StoreError(f"{self.path} is not a thoughtloom store (a different SQLite database)")
        if app_id == APPLICATION_ID:
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise StoreError(f"{self.path} has store schema {version}; this thoughtloom reads <= {SCHEMA_VERSION}")
        if self.readonly:
            if app_id != APPLICATION_ID:
                raise StoreError(f"{self.path} is not a thoughtloom store (empty)")
            return
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        if app_id == 0:
            db.execute("BEGIN IMMEDIATE")
            try:
                for stmt in _SCHEMA.strip().split(";"):
                    if stmt.strip():
                        db.execute(stmt)
                db.execute(f"PRAGMA application_id={APPLICATION_ID}")
                db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:  # a failed COMMIT may already have ended it
                    db.execute("ROLLBACK")
                raise

    # --- blocks -----------------------------------------------------------------------------------

    def put(self, cid: CID, data: bytes) -> None:
        """Store one block (idempotent); CorruptBlock if `data` does not hash to `cid`."""
        key = cid_bytes(cid)
        if not verify(key, data):
            raise CorruptBlock(cid, "refusing to store data that does not match its CID")
        with self._guard() as db:
            db.execute("INSERT OR IGNORE INTO blocks (cid, data) VALUES (?, ?)", (key, bytes(data)))

    def put_many(self, items: Iterable[tuple[CID, bytes]]) -> None:
        """Store many blocks in one transaction (all or none)."""
        with self._guard() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                batch: list[tuple[bytes, bytes]] = []
                for cid, data in items:
                    key = cid_bytes(cid)
                    if not verify(key, data):
                        raise CorruptBlock(cid, "refusing to store data that does not match its CID")
                    batch.append((key, bytes(data)))
                    if len(batch) >= _BATCH:
                        db.executemany("INSERT OR IGNORE INTO blocks (cid, data) VALUES (?, ?)", batch)
                        batch.clear()
                if batch:
                    db.executemany("INSERT OR IGNORE INTO blocks (cid, data) VALUES (?, ?)", batch)
                db.execute("COMMIT")
            except BaseException:
                # SQLite may have rolled back already (a full disk): a second ROLLBACK would fail
                # and hide why the write failed.
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise

    def get(self, cid: CID) -> bytes:
        """The block's bytes, verified (MissingBlock / CorruptBlock)."""
        key = cid_bytes(cid)
        with self._guard() as db:
            # CAST: a damaged row may hold TEXT, which sqlite3 would try (and fail) to decode as UTF-8.
            row = db.execute("SELECT CAST(data AS BLOB) FROM blocks WHERE cid = ?", (key,)).fetchone()
        if row is None:
            raise MissingBlock(cid, str(self.path))
        data: bytes = row[0]
        if not verify(key, data):
            raise CorruptBlock(cid, f"stored bytes in {self.path} do not match the CID")
        return data

    def get_many(self, cids: Iterable[CID]) -> dict[CID, bytes]:
        """Many blocks by CID, verified, in few queries (MissingBlock / CorruptBlock on the first bad one)."""
        wanted = list(dict.fromkeys(cids))
        out: dict[CID, bytes] = {}
        keys = [cid_bytes(c) for c in wanted]
        found: dict[bytes, bytes] = {}
        with self._guard() as db:
            for i in range(0, len(keys), _IN_BATCH):
                part = keys[i:i + _IN_BATCH]
                sql = f"SELECT cid, CAST(data AS BLOB) FROM blocks WHERE cid IN ({','.join('?' * len(part))})"
                found.update(db.execute(sql, part).fetchall())
        for cid, key in zip(wanted, keys, strict=True):
            data = found.get(key)
            if data is None:
                raise MissingBlock(cid, str(self.path))
            if not verify(key, data):
                raise CorruptBlock(cid, f"stored bytes in {self.path} do not match the CID")
            out[cid] = data
        return out

    def has(self, cid: CID) -> bool:
        """Whether the block is stored."""
        with self._guard() as db:
            return db.execute("SELECT 1 FROM blocks WHERE cid = ?", (cid_bytes(cid),)).fetchone() is not None

    def cids(self) -> Iterator[CID]:
        """Every stored CID (snapshot; order unspecified)."""
        with self._guard() as db:
            rows = db.execute("SELECT cid FROM blocks").fetchall()
        return (cid_str(r[0]) for r in rows)

    def __len__(self) -> int:
        with self._guard() as db:
            return int(db.execute("SELECT count(*) FROM blocks").fetchone()[0])

    # --- lifecycle --------------------------------------------------------------------------------

    def close(self) -> None:
        """Close the connection (idempotent)."""
        with self._lock:
            self._db.close()

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self.path)!r})"
