"""One stemmer and one bm25 ranking for the whole project: the knowledge index and the in-memory ranking agree."""

from __future__ import annotations

from pathlib import Path

import pytest

from thoughtloom.grounding import claims, stemming
from thoughtloom.grounding.knowledge import KnowledgeBase
from thoughtloom.grounding.ranking import fuse, query_stems, rank
from thoughtloom.tasks import similarity

PASSAGES = [
    "The committee reviewed the harbour budget in March.",
    "The director was appointed by the committee in 1998.",
    "Tides rise and fall twice a day in the harbour.",
]


def test_a_word_indexed_in_one_inflection_is_found_by_another_in_the_index_and_in_memory(tmp_path: Path) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    for number, text in enumerate(PASSAGES):
        (folder / f"p{number}.txt").write_text(text + "\n", encoding="utf-8")
    with KnowledgeBase.open(folder, tmp_path / "kb.sqlite") as kb:
        indexed = [c.path for c in kb.search("appointing directors")]
    in_memory = [index for index, _ in rank("appointing directors", PASSAGES)]
    assert indexed == ["p1.txt"]
    assert in_memory == [1]
    # The claim judge and the thought similarity reduce the words with the same function.
    assert claims.stem is similarity.stem is stemming.stem


def test_the_stemmer_is_snowball_english() -> None:
    assert {stemming.stem(w) for w in ("boils", "boiled", "boiling", "Boil")} == {"boil"}
    assert stemming.stem("generously") == "generous"  # Snowball's step 2, which no hand-written suffix list had
    assert stemming.stem("1,000") == "1,000"


def test_in_memory_ranking_puts_the_passage_with_more_query_words_first() -> None:
    found = rank("harbour committee budget", PASSAGES)
    assert found[0][0] == 0
    assert sorted(index for index, _ in found[1:]) == [1, 2]
    assert found[0][1] > found[1][1] > 0


def test_in_memory_ranking_leaves_out_passages_without_a_query_word_and_respects_limit() -> None:
    assert rank("tides", PASSAGES) == [(2, pytest.approx(rank("tides", PASSAGES)[0][1]))]
    assert rank("volcano", PASSAGES) == []
    assert rank("the of and", PASSAGES) == []
    assert len(rank("harbour committee", PASSAGES, limit=1)) == 1


def test_query_stems_are_content_words_stemmed_once_each() -> None:
    assert query_stems("Who directed the directors of the 2 films?") == ["direct", "director", "2", "film"]


def test_reciprocal_rank_fusion_favours_items_both_rankings_place_high() -> None:
    fused = fuse([[1, 2, 3], [3, 1, 4]])
    assert [item for item, _ in fused] == [1, 3, 2, 4]
    assert fuse([[5, 6]], limit=1) == [(5, pytest.approx(1 / 61))]
