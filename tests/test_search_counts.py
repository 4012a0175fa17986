"""What a search counts as it goes (SearchCounts) and the stats its result reports from them (SearchStats)."""

from __future__ import annotations

import pytest

from thoughtloom.search.counts import SearchCounts
from thoughtloom.search.result import GroundingStats, SearchStats

# A distinct number for every count, so a count copied into the wrong field shows.
COUNTED = SearchCounts(
    proposed=1, rejected=2, repaired=3, duplicates=4, pruned=5, expansions=6, reasks=7, parse_failures=8,
    grounded=9, verified=10, grounding_failed=11, grounder_errors=12, continuations=13,
)


def test_the_stats_json_keeps_its_field_names_order_and_values():
    stats = SearchStats.of(COUNTED, nodes=40, max_depth=3, wall_s=1.25, grounded=True)
    # `--json` output and stored runs carry exactly these keys, in this order.
    assert list(stats.to_dict().items()) == [
        ("nodes", 40), ("pruned", 5), ("rejected", 2), ("repaired", 3), ("duplicates", 4), ("expansions", 6),
        ("reasks", 7), ("continuations", 13), ("parse_failures", 8), ("max_depth", 3), ("grounded", 9),
        ("verified", 10), ("grounding_failed", 11), ("grounder_errors", 12), ("wall_s", 1.25),
    ]


def test_the_stats_have_no_grounding_when_no_grounder_ran():
    stats = SearchStats.of(COUNTED, nodes=40, max_depth=3, wall_s=1.25, grounded=False)
    assert stats.grounding is None and "grounded" not in stats.to_dict()


def test_the_grounding_stats_are_the_grounding_counts():
    stats = SearchStats.of(COUNTED, nodes=40, max_depth=3, wall_s=1.25, grounded=True)
    assert stats.grounding == GroundingStats(grounded=9, verified=10, grounding_failed=11, grounder_errors=12)


def test_an_unchecked_answer_is_in_the_stats():
    stats = SearchStats.of(SearchCounts(), nodes=1, max_depth=0, wall_s=0.0, grounded=False, answer_check="timeout")
    assert stats.to_dict()["answer_check"] == "timeout"


def test_a_misspelled_count_is_an_error_not_a_new_count():
    counts = SearchCounts()
    with pytest.raises(AttributeError):
        counts.rejectd += 1  # type: ignore[attr-defined]
