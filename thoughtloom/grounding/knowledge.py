"""A local knowledge base: a folder of text and markdown documents, indexed with SQLite FTS5.

`KnowledgeBase.open(folder, index_path)` walks the folder (``*.md``, ``*.markdown``, ``*.txt``,
``*.rst``; hidden files and folders skipped), cuts every document into passages and indexes them
in an FTS5 table. The table holds each passage's words as stemmed by the project's one stemmer
(`grounding.ranking.index_terms`, Snowball English) and a query looks up its stems
(`query_stems`), so "boils" finds "boiling" and the index ranks as `grounding.ranking.rank` does.
A passage is a paragraph (lines between blank lines); a paragraph longer than WINDOW_LINES lines is
cut into windows of WINDOW_LINES lines that overlap by one line, so a citation stays a few lines long. Every passage
keeps its path (relative to the folder, with "/"), its first and last line (1-based), its text and
its document's title (the heading the document opens with, else its file name): the title is a
column of the FTS5 table, weighted TITLE_WEIGHT in the ranking, so the third window of "Some
Film.txt" is found by the film's name though only the first window's lines say it.

Only regular files inside the folder are read, by the rules of `grounding.files`: a pipe, a
device or a socket is never opened, a symlink that leaves the folder is not followed, a linked
folder is not entered, a name that is not UTF-8 is not used, a document larger than
MAX_DOCUMENT_BYTES is not read, and once MAX_FOLDER_BYTES of documents are indexed the rest are
not. Each file skipped so is named in `stats.skipped` and in one logged warning per refresh. The walk
itself is bounded: it reads at most MAX_DOCUMENTS documents and lists at most MAX_FOLDER_ENTRIES names,
then stops with one line in `stats.skipped` saying where (a folder of empty files or a whole disk given
by mistake ends in seconds, not hours).

The index lives in memory by default, or in the SQLite file `index_path` (never inside the
user's folder unless they ask for it). A file index is reused: on open, only files whose size or
modification time changed are read again, new files are added and deleted ones dropped. An index
file is marked as ours (SQLite's application_id); a file that holds other tables is refused,
never emptied, so a mistyped path cannot destroy a user's database.

`search(query)` never lets the query's text reach FTS5 syntax: it keeps the query's content words
and numbers, stems them, quotes each one as a phrase and ORs them, and ranks by bm25. With
`retrieval="hybrid"` (the `embed` extra) it also ranks every passage by the cosine of its sentence
embedding to the query's and fuses the two rankings by reciprocal rank (`ranking.fuse`); a
passage's vector is computed on the first hybrid search that needs it and kept in the index.
All SQLite work is done under one lock, so a KnowledgeBase can be shared by threads (the grounder
searches from `asyncio.to_thread`).
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Self

from thoughtloom.grounding.embedding import Embedder, load_embedder
from thoughtloom.grounding.files import FileRefused, check_regular, read_regular, shown, size_text, walk_files
from thoughtloom.grounding.ranking import fuse, index_terms, query_stems
from thoughtloom.grounding.types import Citation

logger = logging.getLogger(__name__)

#: File name endings that are indexed.
EXTENSIONS: tuple[str, ...] = (".md", ".markdown", ".txt", ".rst")
#: A paragraph longer than this many lines is cut into windows of this many lines.
WINDOW_LINES = 5
#: Consecutive windows share this many lines, so a sentence wrapped across a cut is whole in one.
WINDOW_OVERLAP = 1
#: At most this many terms go into one FTS5 query (a long claim does not need more).
MAX_QUERY_TERMS = 32
#: A document larger than this is not read (a log or a data dump, not a document to cite).
MAX_DOCUMENT_BYTES = 4 * 1024 * 1024
#: At most this many bytes of documents are indexed from one folder; the rest are skipped.
MAX_FOLDER_BYTES = 64 * 1024 * 1024
#: At most this many documents are read from one folder; the walk stops at the next one.
MAX_DOCUMENTS = 20_000
#: The walk lists at most this many names (documents or not) before it stops.
MAX_FOLDER_ENTRIES = 200_000
#: Skipped files named in the one warning a refresh logs (all of them are in `IndexStats.skipped`).
WARN_NAMES = 5
#: SQLite's application_id of an index file ("TLKB"): a file without it is not ours to rebuild.
APPLICATION_ID = 0x544C4B42

#: A query term found in a passage's document title counts this many times one found in its text.
TITLE_WEIGHT = 2.0
#: How a search ranks: "bm25" (full text) or "hybrid" (bm25 and sentence embeddings, fused by rank).
RETRIEVALS: tuple[str, ...] = ("bm25", "hybrid")
#: A hybrid search fuses this many of each ranking's best passages (or `limit`, if larger).
HYBRID_CANDIDATES = 50

# Bump when the tables or the passage rules change: an index built by other rules is rebuilt.
SCHEMA_VERSION = "3"
#: Why an index of an older schema is rebuilt, logged when it is.
SCHEMA_CHANGES = {"2": "words are now stemmed with Snowball English (PyStemmer) instead of FTS5's porter"}

_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE documents (
    path TEXT PRIMARY KEY,
    mtime_ns INTEGER NOT NULL,
    size INTEGER NOT NULL
);
CREATE TABLE passages (
    id INTEGER PRIMARY KEY,
    path TEXT NOT NULL,
    line_start INTEGER NOT NULL,
    line_end INTEGER NOT NULL,
    title TEXT NOT NULL,
    text TEXT NOT NULL,
    title_terms TEXT NOT NULL,
    text_terms TEXT NOT NULL
);
CREATE INDEX passages_by_path ON passages (path);
CREATE TABLE embeddings (id INTEGER PRIMARY KEY, model TEXT NOT NULL, vector BLOB NOT NULL);
CREATE VIRTUAL TABLE passages_fts USING fts5 (
    title_terms, text_terms, content='passages', content_rowid='id', tokenize='unicode61'
);
CREATE TRIGGER passages_added AFTER INSERT ON passages BEGIN
    INSERT INTO passages_fts (rowid, title_terms, text_terms) VALUES (new.id, new.title_terms, new.text_terms);
END;
CREATE TRIGGER passages_removed AFTER DELETE ON passages BEGIN
    INSERT INTO passages_fts (passages_fts, rowid, title_terms, text_terms)
        VALUES ('delete', old.id, old.title_terms, old.text_terms);
    DELETE FROM embeddings WHERE id = old.id;
END;
"""
_TABLES = ("passages_fts", "embeddings", "passages", "documents", "meta")


class KnowledgeBaseError(ValueError):
    """The knowledge base cannot be used; the message says what to do."""


@dataclass(frozen=True, slots=True)
class Passage:
    """A piece of a document: its lines (1-based, inclusive) and their text."""

    line_start: int
    line_end: int
    text: str


@dataclass(frozen=True, slots=True)
class IndexStats:
    """What the last refresh did."""

    indexed: tuple[str, ...]  # new or changed files that were read and indexed
    removed: tuple[str, ...]  # files that disappeared from the folder
    unchanged: int  # files whose size and mtime matched the index, not read
    skipped: tuple[str, ...]  # "path: why" of each file not read (not regular, outside, too large, unreadable)
    documents: int
    passages: int


def split_passages(text: str) -> list[Passage]:
    """Cut a document into paragraphs, and long paragraphs into overlapping windows of lines."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    passages: list[Passage] = []
    paragraph: list[int] = []  # indices of the current paragraph's lines
    for index, line in enumerate([*lines, ""]):
        if line.strip():
            paragraph.append(index)
            continue
        if paragraph:
            passages.extend(_windows(lines, paragraph[0], paragraph[-1] + 1))
            paragraph = []
    return passages


def document_title(rel: str, text: str) -> str:
    """A document's title: the heading it opens with (`# Title`), else its file name without the ending."""
    for line in text.splitlines():
        if line.strip():
            if line.lstrip().startswith("#"):
                heading = " ".join(line.strip().lstrip("#").split())
                if heading:
                    return heading
            break
    return " ".join(Path(rel).stem.replace("_", " ").split()) or rel


def _windows(lines: list[str], start: int, end: int) -> Iterator[Passage]:
    step = WINDOW_LINES - WINDOW_OVERLAP
    for first in range(start, end, step):
        last = min(first + WINDOW_LINES, end)
        yield Passage(first + 1, last, "\n".join(lines[first:last]).strip())
        if last == end:
            return


def match_expression(query: str) -> str | None:
    """A safe FTS5 MATCH expression for free text: its stemmed terms quoted and ORed, or None if it has none."""
    terms = query_stems(query)[:MAX_QUERY_TERMS]
    if not terms:
        return None
    # Inside double quotes FTS5 reads only tokens; doubling a quote is the one escape needed.
    return " OR ".join('"' + term.replace('"', '""') + '"' for term in terms)


def _decode(data: bytes) -> str:
    # Documents are user files of unknown provenance: a stray byte must not hide the rest.
    return data.decode("utf-8", errors="replace").removeprefix("\ufeff")


class KnowledgeBase:
    """A folder of documents indexed for full-text search; see the module docstring."""

    def __init__(self, folder: str | Path, index_path: str | Path | None = None, *,
                 max_document_bytes: int = MAX_DOCUMENT_BYTES, max_total_bytes: int = MAX_FOLDER_BYTES,
                 max_documents: int = MAX_DOCUMENTS, max_entries: int = MAX_FOLDER_ENTRIES,
                 retrieval: str = "bm25", embedder: Embedder | None = None) -> None:
        """Index `folder` (incrementally when `index_path` holds an earlier index), reading at most
        `max_document_bytes` of a document, `max_total_bytes` and `max_documents` in all and listing at most
        `max_entries` names, searched by `retrieval` ("hybrid" loads the embedding model unless `embedder`
        is given); see `open`."""
        if retrieval not in RETRIEVALS:
            raise KnowledgeBaseError(f"unknown retrieval {retrieval!r}; use one of {', '.join(RETRIEVALS)}")
        self.retrieval = retrieval
        self.embedder = embedder if retrieval == "hybrid" else None
        if retrieval == "hybrid" and self.embedder is None:
            try:
                self.embedder = load_embedder()
            except ValueError as exc:  # EmbeddingUnavailable: the extra is missing or a file is not the pinned one
                raise KnowledgeBaseError(str(exc)) from None
        self.folder = Path(folder).expanduser()
        self.index_path = Path(index_path).expanduser() if index_path is not None else None
        self.max_document_bytes = max_document_bytes
        self.max_total_bytes = max_total_bytes
        self.max_documents = max_documents
        self.max_entries = max_entries
        if not self.folder.exists():
            raise KnowledgeBaseError(
                f"knowledge base folder {shown(self.folder)} does not exist; "
                "pass the folder of .md/.txt documents to check against"
            )
        if not self.folder.is_dir():
            raise KnowledgeBaseError(
                f"{shown(self.folder)} is a file, not a folder; pass the folder that holds the documents"
            )
        self.folder = self.folder.resolve()
        self._lock = threading.Lock()
        self._conn = self._connect()
        try:
            self.stats = self.refresh()
            if self.stats.documents == 0:
                raise KnowledgeBaseError(
                    f"no documents in {self.folder} (looked for {', '.join('*' + e for e in EXTENSIONS)}, "
                    "hidden folders skipped); add text or markdown files or point at another folder"
                )
            if self.stats.passages == 0:
                raise KnowledgeBaseError(
                    f"the documents in {self.folder} are empty; add some text to them or point at another folder"
                )
        except BaseException:
            self._conn.close()
            raise

    @classmethod
    def open(cls, folder: str | Path, index_path: str | Path | None = None, retrieval: str = "bm25") -> KnowledgeBase:
        """Open the knowledge base for `folder`, indexed in memory or in the SQLite file `index_path`, searched by
        `retrieval` ("bm25" or "hybrid")."""
        return cls(folder, index_path, retrieval=retrieval)

    def _connect(self) -> sqlite3.Connection:
        target = ":memory:"
        if self.index_path is not None:
            if self.index_path.is_dir():
                raise KnowledgeBaseError(f"index {self.index_path} is a directory; give a file name such as index.db")
            if self.index_path.exists():
                try:
                    check_regular(self.index_path, what="index")
                except FileRefused as exc:
                    raise KnowledgeBaseError(
                        f"index {shown(self.index_path)} is {exc.reason}; give a file name such as index.db") from None
            target = str(self.index_path)
        try:
            if self.index_path is not None:
                self.index_path.parent.mkdir(parents=True, exist_ok=True)
            # One connection shared by threads, always used under self._lock.
            conn = sqlite3.connect(target, check_same_thread=False, timeout=10.0)
        except (OSError, sqlite3.Error) as exc:
            raise KnowledgeBaseError(f"cannot open the index {target}: {exc}") from None
        try:
            self._prepare(conn)
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise KnowledgeBaseError(
                f"{self.index_path} is not a usable index ({exc}); delete it or pass another index_path"
            ) from exc
        return conn

    def _prepare(self, conn: sqlite3.Connection) -> None:
        """Create the tables, or rebuild them when the index was made by other rules or for another folder."""
        wanted = {"schema": SCHEMA_VERSION, "folder": str(self.folder)}
        with conn:
            exists = conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'meta'").fetchone()
            found = dict(conn.execute("SELECT key, value FROM meta").fetchall()) if exists else {}
            if found == wanted:
                return
            self._check_ours(conn)
            old = found.get("schema")
            if old is not None and old != SCHEMA_VERSION:
                why = SCHEMA_CHANGES.get(old, "its tables or passage rules changed")
                logger.warning("rebuilding the knowledge index %s: it was built by an older thoughtloom "
                               "(index schema %s, now %s: %s)", shown(self.index_path or ""), old, SCHEMA_VERSION, why)
            for table in _TABLES:
                conn.execute(f"DROP TABLE IF EXISTS {table}")
            conn.executescript(_SCHEMA)
            conn.executemany("INSERT INTO meta (key, value) VALUES (?, ?)", wanted.items())
            conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")

    def _check_ours(self, conn: sqlite3.Connection) -> None:
        """Refuse to rebuild a file that is not an index of ours: an empty file, one marked with our
        application_id, or one holding only our tables (an index written before the mark) is ours."""
        if conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID:
            return
        tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        # FTS5 keeps its data in shadow tables named after the virtual table.
        foreign = sorted(t for t in tables if t not in _TABLES and not t.startswith(("sqlite_", "passages_fts_")))
        try:
            legacy = "meta" in tables and {"schema", "folder"} <= {k for (k,) in conn.execute("SELECT key FROM meta")}
        except sqlite3.DatabaseError:  # another program's table named meta, without our columns
            legacy = False
        if foreign or (tables and not legacy):
            raise KnowledgeBaseError(
                f"{shown(self.index_path or '')} is not a thoughtloom knowledge index (it holds the tables "
                f"{', '.join(sorted(tables))}); pass a new file name for the index, this file is left as it is"
            )

    def refresh(self) -> IndexStats:
        """Bring the index up to date with the folder: read new and changed files, drop deleted ones."""
        with self._lock, self._conn:
            known = {
                path: (mtime_ns, size)
                for path, mtime_ns, size in self._conn.execute("SELECT path, mtime_ns, size FROM documents")
            }
            seen: set[str] = set()
            indexed: list[str] = []
            skipped: list[str] = []
            unchanged = 0
            total = 0
            inside = (self.folder,)
            documents_seen = 0
            for entry in walk_files(self.folder, EXTENSIONS, max_entries=self.max_entries):
                rel = entry.rel
                if entry.refused is not None:
                    skipped.append(f"{rel}: {entry.refused}")
                    continue
                documents_seen += 1
                if documents_seen > self.max_documents:
                    skipped.append(f"{rel} and the files after it: past the folder's limit of "
                                   f"{self.max_documents:,} documents")
                    break
                try:
                    _, st = check_regular(entry.path, inside=inside)
                    if st.st_size > self.max_document_bytes:
                        skipped.append(f"{rel}: larger than {size_text(self.max_document_bytes)}")
                        continue
                    if total + st.st_size > self.max_total_bytes:
                        skipped.append(
                            f"{rel}: past the folder's limit of {size_text(self.max_total_bytes)} of documents in all")
                        continue
                    total += st.st_size
                    signature = (st.st_mtime_ns, st.st_size)
                    if known.get(rel) == signature:
                        seen.add(rel)
                        unchanged += 1
                        continue
                    data = read_regular(entry.path, max_bytes=self.max_document_bytes, inside=inside)
                except FileRefused as exc:
                    skipped.append(f"{rel}: {exc.reason}")
                    continue
                seen.add(rel)
                text = _decode(data)
                self._replace(rel, signature, document_title(rel, text), split_passages(text))
                indexed.append(rel)
            removed = sorted(set(known) - seen)
            for rel in removed:
                self._conn.execute("DELETE FROM passages WHERE path = ?", (rel,))
                self._conn.execute("DELETE FROM documents WHERE path = ?", (rel,))
            documents, passages = self._counts()
        if skipped:
            more = f"; {len(skipped) - WARN_NAMES} more" if len(skipped) > WARN_NAMES else ""
            logger.warning("%d files in %s not indexed: %s%s", len(skipped), shown(self.folder),
                           "; ".join(skipped[:WARN_NAMES]), more)
        return IndexStats(tuple(indexed), tuple(removed), unchanged, tuple(skipped), documents, passages)

    def _replace(self, rel: str, signature: tuple[int, int], title: str, passages: list[Passage]) -> None:
        self._conn.execute("DELETE FROM passages WHERE path = ?", (rel,))
        self._conn.execute(
            "INSERT OR REPLACE INTO documents (path, mtime_ns, size) VALUES (?, ?, ?)", (rel, *signature)
        )
        title_terms = " ".join(index_terms(title))
        self._conn.executemany(
            "INSERT INTO passages (path, line_start, line_end, title, text, title_terms, text_terms) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            [(rel, p.line_start, p.line_end, title, p.text, title_terms, " ".join(index_terms(p.text)))
             for p in passages],
        )

    def _counts(self) -> tuple[int, int]:
        documents = self._conn.execute("SELECT count(*) FROM documents").fetchone()[0]
        passages = self._conn.execute("SELECT count(*) FROM passages").fetchone()[0]
        return int(documents), int(passages)

    @property
    def documents(self) -> int:
        """How many documents are indexed."""
        with self._lock:
            return self._counts()[0]

    @property
    def passages(self) -> int:
        """How many passages are indexed."""
        with self._lock:
            return self._counts()[1]

    def search(self, query: str, limit: int = 5) -> list[Citation]:
        """The passages that best match the words of `query` in their text or their document's title, most
        relevant first (bm25, a title word weighing TITLE_WEIGHT; with hybrid retrieval, fused by rank with
        the embeddings' cosine ranking, and the score is the fused one)."""
        if limit <= 0:
            return []
        with self._lock:
            lexical = self._bm25(query, limit if self.embedder is None else max(limit, HYBRID_CANDIDATES))
            if self.embedder is None:
                # bm25 is lower-is-better and negative; Citation.score is higher-is-better.
                return [self._citation(row, -rank) for row, rank in lexical]
            semantic = self._nearest(self.embedder, query, max(limit, HYBRID_CANDIDATES))
            fused = fuse([[row[0] for row, _ in lexical], semantic], limit)
            rows = {row[0]: row for row, _ in lexical}
            missing = [pid for pid, _ in fused if pid not in rows]
            for pid in missing:
                rows[pid] = self._conn.execute(
                    "SELECT id, path, line_start, line_end, text, title FROM passages WHERE id = ?", (pid,)).fetchone()
            return [self._citation(rows[pid], score) for pid, score in fused]

    def _bm25(self, query: str, limit: int) -> list[tuple[tuple, float]]:
        """(passage row, bm25 rank) of the best `limit` full-text matches, best first."""
        expression = match_expression(query)
        if expression is None:
            return []
        rows = self._conn.execute(
            """
            SELECT p.id, p.path, p.line_start, p.line_end, p.text, p.title, bm25(passages_fts, ?, 1.0) AS rank
            FROM passages_fts JOIN passages AS p ON p.id = passages_fts.rowid
            WHERE passages_fts MATCH ?
            ORDER BY rank, p.path, p.line_start
            LIMIT ?
            """,
            (TITLE_WEIGHT, expression, limit),
        ).fetchall()
        return [(tuple(row[:6]), float(row[6])) for row in rows]

    def _nearest(self, embedder: Embedder, query: str, limit: int) -> list[int]:
        """Ids of the `limit` passages whose embedding is nearest the query's, best first (ties by id)."""
        todo = self._conn.execute(
            "SELECT p.id, p.title, p.text FROM passages AS p LEFT JOIN embeddings AS e ON e.id = p.id AND e.model = ? "
            "WHERE e.id IS NULL ORDER BY p.id", (embedder.name,)).fetchall()
        if todo:
            # The title goes with the text, as the full-text side indexes it, so a late window still names its document.
            vectors = embedder.embed([f"{title}: {text}" for _, title, text in todo])
            with self._conn:
                self._conn.executemany("INSERT OR REPLACE INTO embeddings (id, model, vector) VALUES (?, ?, ?)",
                                       [(pid, embedder.name, vector.tobytes()) for (pid, _, _), vector in
                                        zip(todo, vectors, strict=True)])
        stored = self._conn.execute("SELECT id, vector FROM embeddings WHERE model = ? ORDER BY id",
                                    (embedder.name,)).fetchall()
        if not stored:
            return []
        import numpy as np  # loaded only for a hybrid search

        ids = [pid for pid, _ in stored]
        matrix = np.stack([np.frombuffer(blob, dtype=np.float32) for _, blob in stored])
        cosines = matrix @ embedder.embed([query])[0]
        order = sorted(range(len(ids)), key=lambda i: (-float(cosines[i]), ids[i]))
        return [ids[i] for i in order[:limit]]

    @staticmethod
    def _citation(row: tuple, score: float) -> Citation:
        _, path, start, end, text, title = row
        return Citation(path, start, end, text, score=score, title=title)

    def document_path(self, cited: str) -> str | None:
        """The indexed path a citation names: exactly, or the one document whose path ends with it (or it with
        the document's path, when the citation adds the folder's name); None when there is no such document."""
        name = cited.strip().replace("\\", "/").removeprefix("./")
        with self._lock:
            if self._conn.execute("SELECT 1 FROM documents WHERE path = ?", (name,)).fetchone():
                return name
            paths = [row[0] for row in self._conn.execute("SELECT path FROM documents")]
        near = [p for p in paths if p.endswith("/" + name) or name.endswith("/" + p)]
        return near[0] if len(near) == 1 else None

    def lines(self, path: str, line_start: int, line_end: int) -> Citation | None:
        """The indexed text of lines line_start..line_end of the document at `path` (blank lines are not
        indexed); None when none of those lines holds text."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT line_start, text, title FROM passages WHERE path = ? AND line_end >= ? AND line_start <= ? "
                "ORDER BY line_start",
                (path, line_start, line_end),
            ).fetchall()
        found: dict[int, str] = {}
        title = rows[0][2] if rows else ""
        for first, text, _ in rows:
            # A passage holds its lines whole and in order (paragraphs have no blank line inside).
            for number, line in enumerate(text.split("\n"), first):
                if line_start <= number <= line_end:
                    found.setdefault(number, line)
        if not found:
            return None
        first, last = min(found), max(found)
        # Blank lines stay blank, so a line's number is still its offset in the text.
        return Citation(path, first, last, "\n".join(found.get(n, "") for n in range(first, last + 1)), title=title)

    def close(self) -> None:
        """Close the index (a file index stays on disk for the next open)."""
        with self._lock:
            self._conn.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        where = self.index_path if self.index_path is not None else ":memory:"
        return f"KnowledgeBase({str(self.folder)!r}, index={str(where)!r})"
