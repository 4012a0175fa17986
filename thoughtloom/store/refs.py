"""Named refs (mutable pointers such as "run/<id>/head") kept in a SQLite table, for any store."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .blocks import CID
from .store import StoreError

REFS_SCHEMA = "CREATE TABLE IF NOT EXISTS refs (name TEXT PRIMARY KEY, cid TEXT NOT NULL) WITHOUT ROWID"


def database_error(path: str | Path, exc: sqlite3.Error) -> StoreError:
    """The one-line StoreError for a SQLite failure on the file at `path` (damage said as such)."""
    name = getattr(exc, "sqlite_errorname", "")
    if name == "SQLITE_NOTADB":  # a zeroed header and a file that never was a store look alike
        return StoreError(f"the store at {path} is damaged or is not a thoughtloom store (not a SQLite database); "
                          "move it aside or use --store")
    if name.startswith("SQLITE_CORRUPT"):
        return StoreError(f"the store at {path} is damaged: {exc}; move it aside or use --store")
    return StoreError(f"the store at {path} cannot be used: {exc}")


@contextmanager
def guarded(
    db: sqlite3.Connection, lock: threading.Lock | threading.RLock, path: str | Path
) -> Iterator[sqlite3.Connection]:
    """The connection under its lock; a SQLite error (a damaged page, a full disk) leaves as StoreError."""
    with lock:
        try:
            yield db
        except sqlite3.ProgrammingError:
            raise  # misuse (a closed store), not the file's state
        except sqlite3.DatabaseError as exc:
            raise database_error(path, exc) from exc


class RefTable:
    """The `refs` table of a SQLite connection; every access holds the connection's lock."""

    def __init__(self, db: sqlite3.Connection, lock: threading.Lock | threading.RLock, path: str | Path) -> None:
        self._db = db
        self._lock = lock
        self._path = path

    def set(self, name: str, cid: CID) -> None:
        """Point the named ref at `cid`."""
        with guarded(self._db, self._lock, self._path) as db:
            db.execute("INSERT OR REPLACE INTO refs (name, cid) VALUES (?, ?)", (name, cid))

    def get(self, name: str) -> CID | None:
        """The CID a ref points at, or None."""
        with guarded(self._db, self._lock, self._path) as db:
            row = db.execute("SELECT cid FROM refs WHERE name = ?", (name,)).fetchone()
        return None if row is None else str(row[0])

    def items(self, prefix: str = "") -> dict[str, CID]:
        """All refs whose name starts with `prefix` (literally, not as a LIKE pattern), sorted by name."""
        with guarded(self._db, self._lock, self._path) as db:
            rows = db.execute(
                "SELECT name, cid FROM refs WHERE substr(name, 1, ?) = ? ORDER BY name", (len(prefix), prefix)
            ).fetchall()
        return {str(n): str(c) for n, c in rows}

    def delete(self, name: str) -> None:
        """Remove a ref (no error if absent)."""
        with guarded(self._db, self._lock, self._path) as db:
            db.execute("DELETE FROM refs WHERE name = ?", (name,))


class TableRefs:
    """BlockStore's ref methods over a RefTable (`_ref_table`), for the stores that keep refs in SQLite."""

    _ref_table: RefTable

    def set_ref(self, name: str, cid: CID) -> None:
        """Point the named ref at `cid`."""
        self._ref_table.set(name, cid)

    def get_ref(self, name: str) -> CID | None:
        """The CID a ref points at, or None."""
        return self._ref_table.get(name)

    def refs(self, prefix: str = "") -> dict[str, CID]:
        """All refs whose name starts with `prefix`, sorted by name."""
        return self._ref_table.items(prefix)

    def delete_ref(self, name: str) -> None:
        """Remove a ref (no error if absent)."""
        self._ref_table.delete(name)
