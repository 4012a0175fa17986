"""The knowledge base: real folders indexed into real SQLite FTS5 files, cited by file and line."""

from __future__ import annotations

import os
import sqlite3
import sys
import threading
from pathlib import Path

import pytest
from machine import scaled

from thoughtloom.grounding.knowledge import (
    MAX_DOCUMENT_BYTES,
    WINDOW_LINES,
    KnowledgeBase,
    KnowledgeBaseError,
    match_expression,
    split_passages,
)

WATER = """# Water

Water is a chemical compound of hydrogen and oxygen.
At sea level, pure water boils at 100 degrees Celsius
and freezes at 0 degrees Celsius.

## Density

Ice is less dense than liquid water, which is why ice floats.
"""

CHEMISTRY = """Reaction rates

Raising the temperature increases the reaction rate of most reactions.
Catalysts lower the activation energy of a reaction.
"""


def write(folder: Path, rel: str, text: str) -> Path:
    """Write a document, creating its folders."""
    path = folder / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    """A small folder of documents: markdown at the top, text in a subfolder."""
    folder = tmp_path / "docs"
    write(folder, "water.md", WATER)
    write(folder, "science/chemistry.txt", CHEMISTRY)
    return folder


def bump(path: Path, text: str) -> None:
    """Rewrite a file and move its mtime forward, so coarse filesystem clocks still see a change."""
    before = path.stat().st_mtime_ns
    path.write_text(text, encoding="utf-8")
    os.utime(path, ns=(before + 2_000_000_000, before + 2_000_000_000))


# --- passages and citations -----------------------------------------------------------------


def test_search_cites_the_file_and_lines_of_the_matching_paragraph(docs: Path) -> None:
    with KnowledgeBase.open(docs) as kb:
        hits = kb.search("boiling point of water at sea level")
    assert hits[0].path == "water.md"
    assert (hits[0].line_start, hits[0].line_end) == (3, 5)
    assert hits[0].ref() == "water.md:3-5"
    assert "boils at 100 degrees" in hits[0].text
    assert hits[0].score > 0


def test_documents_in_subfolders_are_cited_by_relative_posix_path(docs: Path) -> None:
    with KnowledgeBase.open(docs) as kb:
        hits = kb.search("catalysts activation energy")
    assert hits[0].ref() == "science/chemistry.txt:3-4"


def test_single_line_paragraph_is_cited_by_one_line(docs: Path) -> None:
    with KnowledgeBase.open(docs) as kb:
        hits = kb.search("ice floats")
    assert hits[0].ref() == "water.md:9"


def test_stemming_matches_other_forms_of_a_word(docs: Path) -> None:
    with KnowledgeBase.open(docs) as kb:
        assert kb.search("boiling")[0].path == "water.md"
        assert kb.search("catalyst")[0].path == "science/chemistry.txt"


def test_best_match_ranks_first_and_limit_is_respected(docs: Path) -> None:
    with KnowledgeBase.open(docs) as kb:
        hits = kb.search("water ice density oxygen reaction", limit=2)
        assert len(hits) == 2
        assert hits[0].score >= hits[1].score
        assert kb.search("water", limit=0) == []


def test_long_paragraph_is_cut_into_five_line_windows_that_overlap_by_one() -> None:
    text = "\n".join(f"line {n} of the long paragraph" for n in range(1, 13))
    passages = split_passages(text)
    assert [(p.line_start, p.line_end) for p in passages] == [(1, 5), (5, 9), (9, 12)]
    assert all(p.line_end - p.line_start + 1 <= WINDOW_LINES for p in passages)
    assert passages[1].text.splitlines()[0] == "line 5 of the long paragraph"


def test_window_citation_points_at_the_window_holding_the_match(tmp_path: Path) -> None:
    lines = [f"Filler sentence number {n} about nothing much." for n in range(1, 12)]
    lines[8] = "The zeppelin hangar is in Friedrichshafen."  # line 9
    write(tmp_path, "long.md", "\n".join(lines) + "\n")
    with KnowledgeBase.open(tmp_path) as kb:
        hit = kb.search("zeppelin hangar")[0]
    assert hit.path == "long.md"
    assert hit.line_start <= 9 <= hit.line_end
    assert hit.line_end - hit.line_start + 1 <= WINDOW_LINES


FILM = "\n".join([
    "Harbour Lights is a 1999 drama shot in Lisbon.",
    *(f"It ran for week {n} in the city's cinemas." for n in range(2, 11)),
    "The director was Ana Moura, who also wrote it.",
    "It won a prize at a small festival.",
]) + "\n"


def test_a_later_window_is_found_by_its_documents_title_alone(tmp_path: Path) -> None:
    write(tmp_path, "Harbour Lights.txt", FILM)
    write(tmp_path, "city.txt", "At night the city lights are bright and the streets are busy.\n")
    write(tmp_path, "water.md", WATER)
    write(tmp_path, "chemistry.txt", CHEMISTRY)
    with KnowledgeBase.open(tmp_path) as kb:
        assert [p.line_start for p in split_passages(FILM)] == [1, 5, 9]
        hits = kb.search("Harbour Lights", limit=5)
    third = next(h for h in hits if h.ref() == "Harbour Lights.txt:9-12")
    assert "director was Ana Moura" in third.text
    assert third.title == "Harbour Lights" and third.shown_text().startswith("Harbour Lights: ")
    assert {h.path for h in hits[:3]} == {"Harbour Lights.txt"}  # the title outranks a passing mention


def test_a_documents_opening_heading_is_its_title(tmp_path: Path) -> None:
    write(tmp_path, "0001_The_Argo.md", "# The Argo\n\nIt was built by Argus.\n")
    with KnowledgeBase.open(tmp_path) as kb:
        hit = kb.search("Argus")[0]
    assert hit.ref() == "0001_The_Argo.md:3" and hit.shown_text() == "The Argo: It was built by Argus."


def test_a_window_opening_with_its_title_heading_does_not_repeat_it(docs: Path) -> None:
    with KnowledgeBase.open(docs) as kb:
        hit = kb.lines("water.md", 1, 1)
    assert hit is not None and hit.title == "Water" and hit.shown_text() == "# Water"


def test_crlf_and_runs_of_blank_lines_keep_line_numbers_right(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_bytes(b"first paragraph here\r\n\r\n\r\n\r\nsecond: the walrus sleeps\r\nstill second\r\n")
    with KnowledgeBase.open(tmp_path) as kb:
        assert kb.search("walrus")[0].ref() == "notes.txt:5-6"


def test_hidden_folders_hidden_files_and_other_extensions_are_not_indexed(tmp_path: Path) -> None:
    write(tmp_path, "kept.markdown", "The platypus lays eggs.")
    write(tmp_path, "also.rst", "The echidna lays eggs too.")
    write(tmp_path, ".git/notes.md", "The platypus is hidden here.")
    write(tmp_path, ".draft.md", "The platypus draft.")
    write(tmp_path, "script.py", "# platypus")
    with KnowledgeBase.open(tmp_path) as kb:
        assert kb.documents == 2
        assert {c.path for c in kb.search("platypus echidna", limit=10)} == {"kept.markdown", "also.rst"}


def test_undecodable_bytes_do_not_stop_indexing(tmp_path: Path) -> None:
    (tmp_path / "latin1.txt").write_bytes("Caf\xe9 culture in Vienna.".encode("latin-1"))
    with KnowledgeBase.open(tmp_path) as kb:
        assert kb.search("Vienna")[0].path == "latin1.txt"


# --- hostile folders -------------------------------------------------------------------------

#: A hang guard: a folder's pipe or device must be skipped at once, a blocked open would wait forever.
QUICK = pytest.mark.timeout(scaled(30))


def kb_folder(tmp_path: Path) -> Path:
    """A folder with one good document, and a secret file beside it (outside the folder)."""
    folder = tmp_path / "docs"
    write(folder, "ship.md", "The Argo was built by Argus.")
    write(tmp_path, "secret.txt", "The launch password is swordfish.")
    return folder


@QUICK
def test_a_fifo_in_the_folder_is_skipped_without_blocking(tmp_path: Path) -> None:
    folder = kb_folder(tmp_path)
    os.mkfifo(folder / "pipe.md")
    with KnowledgeBase.open(folder) as kb:
        assert kb.documents == 1 and kb.search("Argo")[0].path == "ship.md"
        assert kb.stats.skipped == ("pipe.md: a pipe (FIFO), not a regular file",)


def test_a_symlink_to_a_file_outside_the_folder_is_not_indexed(tmp_path: Path) -> None:
    folder = kb_folder(tmp_path)
    os.symlink(tmp_path / "secret.txt", folder / "leak.txt")
    with KnowledgeBase.open(folder) as kb:
        assert kb.search("launch password swordfish") == []
        assert kb.stats.skipped[0].startswith("leak.txt: resolves to") and "outside the folder" in kb.stats.skipped[0]


def test_a_symlink_that_stays_inside_the_folder_is_indexed(tmp_path: Path) -> None:
    folder = kb_folder(tmp_path)
    write(folder, "notes/real.txt", "Jason led the Argonauts.")
    os.symlink(folder / "notes" / "real.txt", folder / "alias.txt")
    with KnowledgeBase.open(folder) as kb:
        assert {c.path for c in kb.search("Jason Argonauts", limit=5)} == {"alias.txt", "notes/real.txt"}


@QUICK
def test_a_symlink_to_dev_zero_is_skipped(tmp_path: Path) -> None:
    folder = kb_folder(tmp_path)
    os.symlink("/dev/zero", folder / "zero.txt")
    with KnowledgeBase.open(folder) as kb:
        assert kb.documents == 1 and kb.stats.skipped[0].startswith("zero.txt: ")


@QUICK
def test_a_document_larger_than_the_cap_is_skipped_unread(tmp_path: Path) -> None:
    folder = kb_folder(tmp_path)
    with (folder / "huge.txt").open("wb") as fh:
        fh.write(b"one line that never ends ")
        fh.truncate(300 * 1024 * 1024)  # sparse: nothing like 300 MB is written, and none of it may be read
    with KnowledgeBase.open(folder) as kb:
        assert kb.documents == 1
        assert kb.stats.skipped == (f"huge.txt: larger than {MAX_DOCUMENT_BYTES >> 20} MB",)


def test_documents_past_the_folders_total_cap_are_skipped_and_reported(tmp_path: Path) -> None:
    for name in ("a.md", "b.md", "c.md"):
        write(tmp_path, name, f"Document {name} " + "word " * 40)
    with KnowledgeBase(tmp_path, max_total_bytes=500) as kb:
        assert kb.documents == 2
        assert kb.stats.skipped == ("c.md: past the folder's limit of 500 bytes of documents in all",)


def test_a_file_name_that_is_not_utf8_is_skipped_and_the_rest_indexed(tmp_path: Path) -> None:
    folder = kb_folder(tmp_path)
    with open(os.fsencode(folder) + b"/\xff.txt", "wb") as fh:
        fh.write(b"Argus also built a raft.")
    with KnowledgeBase.open(folder) as kb:
        assert [c.path for c in kb.search("Argus")] == ["ship.md"]
        assert kb.stats.skipped == ("\\xff.txt: its name is not UTF-8; rename it",)


def test_skipped_files_are_reported_once_in_one_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    folder = kb_folder(tmp_path)
    os.mkfifo(folder / "pipe.md")
    os.symlink(tmp_path / "secret.txt", folder / "leak.txt")
    with caplog.at_level("WARNING", logger="thoughtloom"), KnowledgeBase.open(folder):
        pass
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warned) == 1 and "\n" not in warned[0]
    assert warned[0].startswith("2 files in ") and "not indexed" in warned[0] and "leak.txt" in warned[0]


# --- hostile queries --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "query",
    [
        'water "boils',
        '"',
        '""',
        "water AND OR NOT ice",
        "NEAR(water ice, 2)",
        "water*",
        "*",
        "(((",
        "col:water",
        "^water",
        "water - ice + {x}",
        "naïve café 東京 Ωmega",
        "🙂 emoji 🙂",
        "\x00 null byte",
        "x" * 5000,
        "",
        "   ",
        "don't isn't can't",
    ],
)
def test_fts_hostile_queries_never_raise(docs: Path, query: str) -> None:
    with KnowledgeBase.open(docs) as kb:
        assert isinstance(kb.search(query), list)


def test_match_expression_quotes_every_stemmed_term_and_drops_stopwords() -> None:
    assert match_expression('Does "water" boil AND (freezing)?') == '"water" OR "boil" OR "freez"'
    assert match_expression("the of and or not") is None
    assert match_expression("1,000 degrees") == '"1,000" OR "degre"'


def test_unicode_terms_are_found(tmp_path: Path) -> None:
    write(tmp_path, "intl.md", "Das Café in München öffnet um 8 Uhr.")
    with KnowledgeBase.open(tmp_path) as kb:
        assert kb.search("münchen café")[0].path == "intl.md"


# --- errors -----------------------------------------------------------------------------------


def test_missing_folder_says_to_pass_an_existing_folder(tmp_path: Path) -> None:
    with pytest.raises(KnowledgeBaseError, match="does not exist; pass the folder"):
        KnowledgeBase.open(tmp_path / "nope")


def test_file_instead_of_folder_is_a_clear_error(tmp_path: Path) -> None:
    file = write(tmp_path, "a.md", "text")
    with pytest.raises(KnowledgeBaseError, match="is a file, not a folder"):
        KnowledgeBase.open(file)


@pytest.mark.parametrize("setup", ["empty", "only_hidden", "wrong_extensions"])
def test_folder_without_documents_says_what_to_add(tmp_path: Path, setup: str) -> None:
    if setup == "only_hidden":
        write(tmp_path, ".hidden/a.md", "The platypus lays eggs.")
    elif setup == "wrong_extensions":
        write(tmp_path, "a.py", "print('hi')")
    with pytest.raises(KnowledgeBaseError, match="no documents in .*add text or markdown files") as info:
        KnowledgeBase.open(tmp_path)
    assert "\n" not in str(info.value)
    assert isinstance(info.value, ValueError)


def test_folder_of_empty_documents_is_a_clear_error(tmp_path: Path) -> None:
    write(tmp_path, "a.md", "\n\n   \n")
    with pytest.raises(KnowledgeBaseError, match="are empty"):
        KnowledgeBase.open(tmp_path)


def test_index_path_that_is_not_a_database_is_a_clear_error(docs: Path, tmp_path: Path) -> None:
    bogus = tmp_path / "index.sqlite"
    bogus.write_bytes(b"this is not sqlite at all, just some bytes" * 100)
    with pytest.raises(KnowledgeBaseError, match="not a usable index.*delete it or pass another index_path"):
        KnowledgeBase.open(docs, bogus)


def test_an_index_file_holding_another_programs_documents_table_is_refused_untouched(
        docs: Path, tmp_path: Path) -> None:
    theirs = tmp_path / "mine.db"
    with sqlite3.connect(theirs) as conn:
        conn.execute("CREATE TABLE documents (id INTEGER PRIMARY KEY, body TEXT)")
        conn.executemany("INSERT INTO documents (body) VALUES (?)", [(f"row {i}",) for i in range(100)])
    conn.close()
    with pytest.raises(KnowledgeBaseError, match="is not a thoughtloom knowledge index.*pass a new file") as info:
        KnowledgeBase.open(docs, theirs)
    assert "\n" not in str(info.value)
    with sqlite3.connect(theirs) as conn:
        assert conn.execute("SELECT count(*) FROM documents").fetchone()[0] == 100
    conn.close()


def test_an_empty_index_file_becomes_the_index(docs: Path, tmp_path: Path) -> None:
    empty = tmp_path / "index.db"
    empty.touch()
    with KnowledgeBase.open(docs, empty) as kb:
        assert kb.documents == 2


@QUICK
def test_an_index_path_that_is_a_fifo_is_refused(docs: Path, tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "index.db")
    with pytest.raises(KnowledgeBaseError, match=r"index .*index.db is a pipe \(FIFO\), not a regular file"):
        KnowledgeBase.open(docs, tmp_path / "index.db")


# --- persistence and incremental re-indexing --------------------------------------------------


def _passage_rows(index: Path) -> list[tuple[int, str, int, int]]:
    with sqlite3.connect(index) as conn:
        return conn.execute("SELECT id, path, line_start, line_end FROM passages ORDER BY id").fetchall()


def test_index_file_is_reused_without_rereading_unchanged_files(docs: Path, tmp_path: Path) -> None:
    index = tmp_path / "index" / "kb.sqlite"
    with KnowledgeBase.open(docs, index) as kb:
        assert sorted(kb.stats.indexed) == ["science/chemistry.txt", "water.md"]
    rows = _passage_rows(index)
    assert len(rows) == 6

    with KnowledgeBase.open(docs, index) as kb:
        assert kb.stats.indexed == ()
        assert kb.stats.unchanged == 2
        assert kb.search("ice floats")[0].ref() == "water.md:9"
    assert _passage_rows(index) == rows  # same row ids: nothing was deleted and re-inserted


def test_modified_file_is_reindexed_and_others_are_left_alone(docs: Path, tmp_path: Path) -> None:
    index = tmp_path / "kb.sqlite"
    KnowledgeBase.open(docs, index).close()
    chemistry_rows = [r for r in _passage_rows(index) if r[1] == "science/chemistry.txt"]

    bump(docs / "water.md", "# Water\n\nSeawater freezes at about minus 2 degrees Celsius.\n")
    with KnowledgeBase.open(docs, index) as kb:
        assert kb.stats.indexed == ("water.md",)
        assert kb.stats.unchanged == 1
        assert kb.search("seawater")[0].ref() == "water.md:3"
        assert all(c.path != "water.md" for c in kb.search("ice floats"))  # the old text is gone
    assert [r for r in _passage_rows(index) if r[1] == "science/chemistry.txt"] == chemistry_rows


def test_deleted_file_is_dropped_from_the_index(docs: Path, tmp_path: Path) -> None:
    index = tmp_path / "kb.sqlite"
    KnowledgeBase.open(docs, index).close()
    (docs / "science" / "chemistry.txt").unlink()
    with KnowledgeBase.open(docs, index) as kb:
        assert kb.stats.removed == ("science/chemistry.txt",)
        assert kb.documents == 1
        assert kb.search("catalysts activation energy") == []
    assert {r[1] for r in _passage_rows(index)} == {"water.md"}


def test_new_file_is_added_on_reopen(docs: Path, tmp_path: Path) -> None:
    index = tmp_path / "kb.sqlite"
    KnowledgeBase.open(docs, index).close()
    write(docs, "animals/platypus.md", "The platypus is a mammal that lays eggs.\n")
    with KnowledgeBase.open(docs, index) as kb:
        assert kb.stats.indexed == ("animals/platypus.md",)
        assert kb.search("platypus eggs")[0].ref() == "animals/platypus.md:1"


def test_refresh_picks_up_changes_while_open(docs: Path) -> None:
    with KnowledgeBase.open(docs) as kb:
        write(docs, "late.txt", "The narwhal tusk is a tooth.")
        stats = kb.refresh()
        assert stats.indexed == ("late.txt",)
        assert kb.search("narwhal")[0].path == "late.txt"


def test_index_built_for_another_folder_is_rebuilt(docs: Path, tmp_path: Path) -> None:
    index = tmp_path / "kb.sqlite"
    KnowledgeBase.open(docs, index).close()
    other = tmp_path / "other"
    write(other, "a.md", "The axolotl regrows its limbs.")
    with KnowledgeBase.open(other, index) as kb:
        assert kb.stats.indexed == ("a.md",)
        assert kb.documents == 1
        assert kb.search("water") == []


def test_an_index_written_by_the_untitled_version_is_rebuilt_with_titles(tmp_path: Path) -> None:
    folder = tmp_path / "docs"
    film = write(folder, "Harbour Lights.txt", FILM)
    index = tmp_path / "kb.sqlite"
    with sqlite3.connect(index) as conn:  # version 1's tables, its marks, and the file already listed as indexed
        conn.executescript("""
            CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
            CREATE TABLE documents (path TEXT PRIMARY KEY, mtime_ns INTEGER NOT NULL, size INTEGER NOT NULL);
            CREATE TABLE passages (id INTEGER PRIMARY KEY, path TEXT NOT NULL, line_start INTEGER NOT NULL,
                                   line_end INTEGER NOT NULL, text TEXT NOT NULL);
            CREATE VIRTUAL TABLE passages_fts USING fts5 (text, content='passages', content_rowid='id',
                                                          tokenize='porter unicode61');
            PRAGMA application_id = 0x544C4B42;
        """)
        conn.executemany("INSERT INTO meta VALUES (?, ?)", [("schema", "1"), ("folder", str(folder.resolve()))])
        conn.execute("INSERT INTO documents VALUES (?, ?, ?)",
                     ("Harbour Lights.txt", film.stat().st_mtime_ns, film.stat().st_size))
    conn.close()
    with KnowledgeBase.open(folder, index) as kb:
        assert kb.stats.indexed == ("Harbour Lights.txt",)
        assert "Harbour Lights.txt:9-12" in [h.ref() for h in kb.search("Harbour Lights")]


def test_in_memory_index_writes_nothing_into_the_folder(docs: Path) -> None:
    before = sorted(p.relative_to(docs) for p in docs.rglob("*"))
    with KnowledgeBase.open(docs) as kb:
        assert kb.index_path is None
        assert kb.search("water")
    assert sorted(p.relative_to(docs) for p in docs.rglob("*")) == before


# --- threads ----------------------------------------------------------------------------------


def test_one_knowledge_base_serves_searches_from_many_threads(docs: Path, tmp_path: Path) -> None:
    errors: list[BaseException] = []
    with KnowledgeBase.open(docs, tmp_path / "kb.sqlite") as kb:

        def work() -> None:
            try:
                for _ in range(50):
                    assert kb.search("water boils sea level")[0].path == "water.md"
                    assert kb.search("catalyst")[0].path == "science/chemistry.txt"
            except BaseException as exc:  # noqa: BLE001 - reported to the main thread below
                errors.append(exc)

        threads = [threading.Thread(target=work) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert errors == []


def test_an_index_of_the_porter_schema_is_rebuilt_with_the_project_stemmer_and_says_why(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    folder = tmp_path / "docs"
    water = write(folder, "water.md", WATER)
    index = tmp_path / "kb.sqlite"
    with sqlite3.connect(index) as conn:  # version 2's tables (porter), its marks, the file listed as indexed
        conn.executescript("""
            CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
            CREATE TABLE documents (path TEXT PRIMARY KEY, mtime_ns INTEGER NOT NULL, size INTEGER NOT NULL);
            CREATE TABLE passages (id INTEGER PRIMARY KEY, path TEXT NOT NULL, line_start INTEGER NOT NULL,
                                   line_end INTEGER NOT NULL, title TEXT NOT NULL, text TEXT NOT NULL);
            CREATE VIRTUAL TABLE passages_fts USING fts5 (title, text, content='passages', content_rowid='id',
                                                          tokenize='porter unicode61');
            PRAGMA application_id = 0x544C4B42;
        """)
        conn.executemany("INSERT INTO meta VALUES (?, ?)", [("schema", "2"), ("folder", str(folder.resolve()))])
        conn.execute("INSERT INTO documents VALUES (?, ?, ?)",
                     ("water.md", water.stat().st_mtime_ns, water.stat().st_size))
    conn.close()
    with caplog.at_level("WARNING", logger="thoughtloom"), KnowledgeBase.open(folder, index) as kb:
        assert kb.stats.indexed == ("water.md",)
        assert kb.search("boiling")[0].path == "water.md"
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warned) == 1
    assert "rebuilding the knowledge index" in warned[0] and "schema 2, now 3" in warned[0]
    assert "Snowball" in warned[0]
    with caplog.at_level("WARNING", logger="thoughtloom"), KnowledgeBase.open(folder, index) as kb:
        assert kb.stats.unchanged == 1
    assert len([r for r in caplog.records if r.levelname == "WARNING"]) == 1  # the rebuilt index is reused quietly


# --- hybrid retrieval ---------------------------------------------------------------------------


def test_hybrid_retrieval_without_the_embed_extra_is_a_one_line_error(
        docs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # what an environment without the extra imports
    with pytest.raises(KnowledgeBaseError) as err:
        KnowledgeBase.open(docs, retrieval="hybrid")
    message = str(err.value)
    assert "\n" not in message
    assert "pip install 'thoughtloom[embed]'" in message and "--retrieval bm25" in message


def test_an_unknown_retrieval_is_refused_naming_the_choices(docs: Path) -> None:
    with pytest.raises(KnowledgeBaseError, match="unknown retrieval 'dense'; use one of bm25, hybrid"):
        KnowledgeBase.open(docs, retrieval="dense")


def test_hybrid_retrieval_finds_a_passage_by_meaning_that_shares_no_word_with_the_query(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime", reason="needs the 'embed' extra")
    folder = tmp_path / "docs"
    write(folder, "water.md", WATER)
    write(folder, "diesel.txt", "A diesel engine ignites its fuel by compression alone.\n")
    query = "motor that needs no spark plug"
    with KnowledgeBase.open(folder) as kb:
        assert kb.search(query) == []  # no word in common: full text alone finds nothing
    with KnowledgeBase.open(folder, tmp_path / "kb.sqlite", retrieval="hybrid") as kb:
        hits = kb.search(query, limit=1)
        assert [h.ref() for h in hits] == ["diesel.txt:1"]
        stored = kb._conn.execute("SELECT count(*) FROM embeddings").fetchone()[0]
        assert stored == kb.passages  # every passage's vector is kept in the index for the next search
    with KnowledgeBase.open(folder, tmp_path / "kb.sqlite", retrieval="hybrid") as kb:
        assert [h.ref() for h in kb.search(query, limit=1)] == ["diesel.txt:1"]


def test_documents_past_the_folders_count_cap_end_the_walk_in_one_reported_line(tmp_path: Path) -> None:
    for name in ("a.md", "b.md", "c.md", "d.md"):
        write(tmp_path, name, f"Document {name} about rafts.")
    with KnowledgeBase(tmp_path, max_documents=2) as kb:
        assert kb.documents == 2
        assert kb.stats.skipped == ("c.md and the files after it: past the folder's limit of 2 documents",)


def test_a_folder_listing_more_names_than_the_cap_ends_the_walk_where_it_stopped(tmp_path: Path) -> None:
    write(tmp_path, "a.md", "Argus built a raft.")
    crowded = tmp_path / "crowded"
    crowded.mkdir()
    for i in range(20):
        (crowded / f"noise{i}.bin").write_bytes(b"")
    with KnowledgeBase(tmp_path, max_entries=10) as kb:
        assert kb.documents == 1
        assert kb.stats.skipped == ("crowded/: the walk stopped here, past 10 names in the folder",)
