"""Paraphrase detection for circular reasoning: restatements meet, distinct steps stay apart."""

from __future__ import annotations

import pytest

from thoughtloom.tasks.similarity import (
    PARAPHRASE_THRESHOLD,
    find_loops,
    fingerprint,
    fingerprint_similarity,
    is_paraphrase,
    normalize_words,
    restating_ids,
    similarity,
    stem,
)
from thoughtloom.control.types import ThoughtView

# The hand-written pairs the threshold was chosen on (PARAPHRASE_THRESHOLD sits between the
# highest distinct pair, ~0.63, and the lowest paraphrase, ~0.76).
PARAPHRASES = [
    ("We should cache the results to avoid recomputing them", "Caching results avoids recomputation"),
    ("First, split the list into two halves", "Divide the list in half first"),
    ("Check whether the input is empty", "Verify if the input is empty"),
    ("Use a hash map to count the occurrences of each word", "Count each word's occurrences using a hash map"),
    ("The bug is caused by an off-by-one error in the loop", "An off-by-one mistake in the loop causes the bug"),
    ("4 + 5 = 9 (left: 6 9 10)", "5 + 4 = 9 (left: 6 9 10)"),
    ("Sort the array before searching it", "Sorting the array first, then search it"),
    ("Memoize the recursive calls", "Cache the recursive calls"),
    ("Start by reading the input file", "Begin by reading the input file"),
    ("Reduce the problem to a smaller one", "Reducing the problem to a smaller problem"),
    ("Look at the failing test first", "First, examine the failing test"),
    ("Let's compute the total cost of all items", "Calculate the total cost of the items"),
    ("Break the problem into smaller subproblems", "Decompose the problem into smaller sub-problems"),
    ("Try a greedy approach", "Attempt a greedy strategy"),
    ("Remove duplicate entries from the list", "Delete the duplicated entries in the list"),
    ("The function returns None when the key is missing", "When the key is missing, the function returns None"),
    ("We can use dynamic programming here", "Dynamic programming can be used here"),
    ("Try 13 - 9 = 4 next", "13 - 9 = 4"),
]

DISTINCT = [
    ("Sort each half", "Merge the two sorted halves"),
    ("4 + 5 = 9 (left: 6 9 10)", "4 * 5 = 20 (left: 6 10 20)"),
    ("10 - 6 = 4 (left: 4 4 9)", "4 + 6 = 10 (left: 4 9 10)"),
    ("13 - 9 = 4 (left: 4 4 10)", "13 - 10 = 3 (left: 3 4 9)"),
    ("6 * 4 = 24 (left: 24)", "6 + 4 = 10 (left: 10)"),
    ("Split the list into two halves", "Sort each half recursively"),
    ("Read the input file", "Write the output file"),
    ("Check whether the input is empty", "Return the first element of the input"),
    ("Use a hash map to count word occurrences", "Use a heap to find the top k words"),
    ("The bug is in the parser", "The bug is in the tokenizer"),
    ("Add error handling for network timeouts", "Add logging for network timeouts"),
    ("Cache the results", "Invalidate the cache when inputs change"),
    ("Increase the timeout", "Decrease the timeout"),
    ("Sort the list in ascending order", "Sort the list in descending order"),
    ("Validate the input before saving", "Validate the input after saving"),
    ("Write unit tests for the parser", "Write integration tests for the parser"),
    ("Binary search the sorted array", "Linear scan of the unsorted array"),
    ("Profile the code to find the bottleneck", "Rewrite the hot loop in C"),
]


def view(id: int, path: tuple[str, ...]) -> ThoughtView:
    """A thought whose path (root side first) ends with its own content."""
    return ThoughtView(id=id, content=path[-1], depth=len(path), score=0.5, quality=0.1, path=path)


@pytest.mark.parametrize(("a", "b"), PARAPHRASES)
def test_paraphrases_are_detected(a: str, b: str) -> None:
    assert is_paraphrase(a, b), similarity(a, b)


@pytest.mark.parametrize(("a", "b"), DISTINCT)
def test_distinct_steps_are_not_paraphrases(a: str, b: str) -> None:
    assert not is_paraphrase(a, b), similarity(a, b)


def test_the_threshold_separates_the_hand_written_pairs_with_a_margin() -> None:
    lowest_paraphrase = min(similarity(a, b) for a, b in PARAPHRASES)
    highest_distinct = max(similarity(a, b) for a, b in DISTINCT)
    assert highest_distinct + 0.05 <= PARAPHRASE_THRESHOLD <= lowest_paraphrase - 0.05


@pytest.mark.parametrize("word", ["cache", "caching", "cached", "caches"])
def test_inflections_of_a_word_share_one_stem(word: str) -> None:
    assert stem(word) == stem("cache")


@pytest.mark.parametrize(("a", "b"), [("recomputing", "recomputation"), ("running", "run"),
                                      ("studies", "study"), ("sizes", "size"), ("quickly", "quick")])
def test_stemming_joins_derived_forms(a: str, b: str) -> None:
    assert stem(a) == stem(b)


@pytest.mark.parametrize("word", ["pass", "status", "add", "call"])
def test_stemming_leaves_words_that_only_look_inflected(word: str) -> None:
    assert stem(word) == word


def test_normalize_drops_stopwords_and_punctuation() -> None:
    assert normalize_words("The results, of course!") == ["result", "cours"]


@pytest.mark.parametrize(("a", "b"), [("halves", "half"), ("ran", "run"), ("made", "make")])
def test_normalize_joins_irregular_forms_the_stemmer_cannot(a: str, b: str) -> None:
    assert normalize_words(a) == normalize_words(b)


def test_normalize_folds_synonyms_onto_one_word() -> None:
    assert normalize_words("divide")[0] == normalize_words("split")[0]


def test_normalize_keeps_numbers_and_operators_canonically() -> None:
    assert normalize_words("1,000 + 2.50 = 1002.5") == ["1000", "+", "2.5", "=", "1002.5"]


def test_identical_texts_are_fully_similar() -> None:
    assert similarity("Sort each half", "Sort each half") == pytest.approx(1.0)


def test_texts_without_content_words_match_only_each_other() -> None:
    assert similarity("", "") == 1.0
    assert similarity("the of and", "Sort each half") == 0.0


def test_similarity_is_symmetric() -> None:
    for a, b in PARAPHRASES + DISTINCT:
        assert similarity(a, b) == pytest.approx(similarity(b, a))


def test_differing_numbers_lower_similarity() -> None:
    same = similarity("13 - 9 = 4 (left: 4 4 10)", "13 - 9 = 4 (left: 4 10 4)")
    other = similarity("13 - 9 = 4 (left: 4 4 10)", "13 - 9 = 4 (left: 4 4 11)")
    assert same > other


def test_fingerprints_compare_like_texts() -> None:
    a, b = PARAPHRASES[0]
    assert fingerprint_similarity(fingerprint(a), fingerprint(b)) == pytest.approx(similarity(a, b))


def test_find_loops_catches_a_thought_restating_its_ancestor() -> None:
    root = "We should cache the results to avoid recomputing them"
    thoughts = [
        view(1, (root,)),
        view(2, (root, "Profile the slowest function")),
        view(3, (root, "Profile the slowest function", "Caching results avoids recomputation")),
    ]
    loops = find_loops(thoughts)
    assert [(e, later) for e, later, _ in loops] == [(1, 3)]


def test_find_loops_names_an_absent_ancestor_by_negative_depth() -> None:
    path = ("First, split the list into two halves", "Sort each half", "Divide the list in half first")
    loops = find_loops([view(7, path)])
    assert [(e, later) for e, later, _ in loops] == [(-1, 7)]


def test_find_loops_catches_cousins_saying_the_same_thing() -> None:
    thoughts = [
        view(1, ("Split the input", "Memoize the recursive calls")),
        view(2, ("Scan the input", "Cache the recursive calls")),
    ]
    assert [(e, later) for e, later, _ in find_loops(thoughts)] == [(1, 2)]


def test_find_loops_ignores_a_path_of_distinct_steps() -> None:
    thoughts = [
        view(1, ("Split the list into two halves",)),
        view(2, ("Split the list into two halves", "Sort each half")),
        view(3, ("Split the list into two halves", "Sort each half", "Merge the two sorted halves")),
    ]
    assert find_loops(thoughts) == []


def test_find_loops_ignores_game24_siblings() -> None:
    steps = ["4 + 5 = 9 (left: 6 9 10)", "4 * 5 = 20 (left: 6 10 20)", "10 - 6 = 4 (left: 4 4 5)",
             "6 + 4 = 10 (left: 5 10 10)", "10 / 5 = 2 (left: 2 4 6)"]
    assert find_loops([view(i, (s,)) for i, s in enumerate(steps)]) == []


def test_find_loops_reports_a_pair_once_with_the_later_thought_second() -> None:
    a = view(1, ("Try a greedy approach",))
    b = view(2, ("Try a greedy approach", "Attempt a greedy strategy"))
    loops = find_loops([a, b])  # found both as ancestor and as an earlier thought
    assert len(loops) == 1 and loops[0][:2] == (1, 2)


def test_find_loops_respects_its_threshold() -> None:
    thoughts = [view(1, ("Sort each half",)), view(2, ("Merge the two sorted halves",))]
    assert find_loops(thoughts) == []
    assert [(e, later) for e, later, _ in find_loops(thoughts, threshold=0.3)] == [(1, 2)]


def test_restating_ids_are_the_later_thoughts() -> None:
    assert restating_ids([(1, 5, 0.9), (-1, 3, 0.8), (2, 5, 0.7)]) == (3, 5)
