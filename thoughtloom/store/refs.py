"""Named refs (mutable pointers such as "run/<id>/head") kept in a SQLite table, for any store."""

from __future__ import annotations

import sqlite3
import threading

from .blocks import CID

REFS_SCHEMA = "CREATE TABLE IF NOT EXISTS refs (name TEXT PRIMARY KEY, cid TEXT NOT NULL) WITHOUT ROWID"


class RefTable:
    """The `refs` table of a SQLite connection; every access holds the connection's lock."""

    def __init__(self, db: sqlite3.Connection, lock: threading.Lock | threading.RLock) -> None:
        self._db = db
        self._lock = lock

    def set(self, name: str, cid: CID) -> None:
        """Point the named ref at `cid`."""
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO refs (name, cid) VALUES (?, ?)", (name, cid))

    def get(self, name: str) -> CID | None:
        """The CID a ref points at, or None."""
        with self._lock:
            row = self._db.execute("SELECT cid FROM refs WHERE name = ?", (name,)).fetchone()
        return None if row is None else str(row[0])

    def items(self, prefix: str = "") -> dict[str, CID]:
        """All refs whose name starts with `prefix` (literally, not as a LIKE pattern), sorted by name."""
        with self._lock:
            rows = self._db.execute(
                "SELECT name, cid FROM refs WHERE substr(name, 1, ?) = ? ORDER BY name", (len(prefix), prefix)
            ).fetchall()
        return {str(n): str(c) for n, c in rows}

    def delete(self, name: str) -> None:
        """Remove a ref (no error if absent)."""
        with self._lock:
            self._db.execute("DELETE FROM refs WHERE name = ?", (name,))
