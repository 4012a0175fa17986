"""The benchmark scoring rules and the confidence intervals, as specifications."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import pytest
from benchdata import data_dir, needs

from thoughtloom.eval.datasets import DATASETS, DataError, find_data_dir, load_dataset
from thoughtloom.eval.scoring import (
    final_number,
    hotpot_em,
    hotpot_f1,
    hotpot_span,
    normalize_answer,
    score_game24,
    score_gsm8k,
    score_hotpotqa,
    score_keyword_counting,
    score_set_intersection,
    score_sorting,
)
from thoughtloom.eval.stats import mean_ci, median, median_ci, wilson

_FILES = ("game24/24_dev.csv", "gsm8k/train.jsonl", "hotpotqa/hotpot_dev_distractor_first50.json",
          "mbpp/sanitized-mbpp-nontest.json")
DATA = data_dir(*_FILES)
needs_data = needs(*_FILES)


@pytest.mark.parametrize(
    ("answer", "solved"),
    [
        ("Answer: (4 + 8) * (6 - 4) = 24", True),
        ("some steps\nanswer: 4 * 6 * (8 - 4 - 3)", False),  # a number not in the puzzle
        ("(8 / (3 - 8 / 3)) = 24", False),  # the wrong numbers, though exactly 24
        ("steps...\n(4 + 8) * (6 - 4)", True),  # only the last line counts
        ("(4 + 8) * (6 - 4) = 24\nI am not sure", False),
        ("4 * 6 = 24", False),  # uses two of the four numbers
        (None, False),
    ],
)
def test_game24_rule_last_line_strip_answer_cut_at_equals_exact_multiset(answer: str | None, solved: bool) -> None:
    assert score_game24([4, 4, 6, 8], answer).solved is solved


def test_game24_rule_uses_fractions_not_floats() -> None:
    assert score_game24([3, 3, 8, 8], "8 / (3 - 8 / 3) = 24").solved


def test_gsm8k_exact_match_of_the_final_number() -> None:
    gold = "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n#### 72"
    assert score_gsm8k(gold, "She sold 48 + 24 = 72 clips. The answer is 72.").solved
    assert score_gsm8k("#### 1,200", "The answer is 1200").solved
    assert not score_gsm8k(gold, "The answer is 71.").solved
    assert not score_gsm8k(gold, None).solved


# Replies in the shapes Qwen2.5-Coder-0.5B-Instruct writes to GSM8K questions (the first two verbatim).
INSTRUCT_REPLIES = [
    ("...Thus, the total number of clips Natalia sold altogether in April and May is:\n\\[ \\boxed{72} \\]", 72),
    ("The answer is 18.", 18),
    ("Janet earns 16 - 3 - 4 = 9 eggs a day to sell, 9 * 2 = 18 dollars.\n\nThe answer is: **18** dollars", 18),
    ("The total cost is 1,000 + 80 = 1,080 dollars.\n\n\\[\n\\boxed{\\$1,080}\n\\]", 1080),
    ("So she has 72 apples left, 24 fewer than before.\n\nAnswer: 72 apples.", 72),
    ("48 / 2 = 24 in May, 48 + 24 = 72 in all.\n#### 72", 72),
    ("### Step 1: May\n48 / 2 = 24\n### Step 2: total\n48 + 24 = 72\n\nThe final answer is $72.", 72),
    ("The answer is 48 + 24 = 72 clips (48 in April and 24 in May).", 72),
    ("The discount is 25%, so the answer is 25%.", 25),
    ("He needs 1,200 bricks in total.", 1200),
    ("The final answer is \\(\\boxed{0.5}\\) hours.", 0.5),
]


@pytest.mark.parametrize(("reply", "number"), INSTRUCT_REPLIES)
def test_gsm8k_final_number_reads_instruct_model_replies(reply: str, number: float) -> None:
    assert final_number(reply) == Fraction(str(number))


def test_gsm8k_gold_lines_parse_as_before() -> None:
    assert final_number("Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n#### 72") == 72
    assert final_number("#### 1,200") == 1200 and final_number("#### -3") == -3 and final_number("72") == 72


def test_gsm8k_a_markdown_heading_is_not_the_answer_marker() -> None:
    assert final_number("#### Step 1: the clips in May\n48 / 2 = 24\nIn all, 48 + 24 = 72") == 72


@needs_data
async def test_gsm8k_boxed_instruct_reply_scores_against_the_data_gold() -> None:
    ds = load_dataset("gsm8k", DATA)
    assert (await ds.score(ds.problems[0], INSTRUCT_REPLIES[0][0])).solved  # Natalia's clips: 72


def test_sorting_errors_count_differences_and_inversions_and_unparsable_is_300() -> None:
    unsorted = [3, 1, 2, 2]
    assert score_sorting(unsorted, "[1, 2, 2, 3]") == score_sorting(unsorted, "Output: [1, 2, 2, 3]")
    assert score_sorting(unsorted, "[1, 2, 2, 3]").solved and score_sorting(unsorted, "[1, 2, 2, 3]").errors == 0
    s = score_sorting(unsorted, "[1, 2, 3, 1]")
    assert (s.solved, s.errors) == (False, 1 + 1 + 1)  # a 2 missing, an extra 1, and 3 > 1
    assert score_sorting(unsorted, "no list here").errors == 300


def test_set_intersection_missing_and_extra_elements_are_one_error_each() -> None:
    assert score_set_intersection([3, 11, 14], "[14, 3, 11]").solved
    s = score_set_intersection([3, 11, 14], "[3, 11, 99]")
    assert (s.solved, s.errors) == (False, 2)
    assert score_set_intersection([3], "nothing").errors == 1000


def test_keyword_counting_sums_count_differences_and_invalid_json_is_100() -> None:
    gold = ["Norway", "Sweden", "Norway", "Canada"]
    assert score_keyword_counting(gold, '{"Norway": 2, "Sweden": 1, "Canada": 1}').solved
    s = score_keyword_counting(gold, 'Output: {"Norway": 1, "Sweden": 1, "Peru": 2}')
    assert (s.solved, s.errors) == (False, 1 + 1 + 2)  # Norway off by 1, Canada missing, Peru extra x2
    assert score_keyword_counting(gold, "{not json").errors == 100


@pytest.mark.parametrize(
    ("text", "normalized"),
    [("The Beatles", "beatles"), ("a  Tale of Two Cities!", "tale of two cities"), ("U.S.A.", "usa"),
     ("Greenwich Village, New York City", "greenwich village new york city"), ("An apple", "apple")],
)
def test_hotpotqa_normalization_is_the_official_one(text: str, normalized: str) -> None:
    assert normalize_answer(text) == normalized


def test_hotpotqa_exact_match_ignores_case_punctuation_and_articles() -> None:
    assert hotpot_em("the Chief of Protocol.", "Chief of Protocol")
    assert not hotpot_em("Chief of Protocol of the United States", "Chief of Protocol")


def test_hotpotqa_f1_counts_shared_tokens() -> None:
    # prediction: chief of protocol of united states (6 tokens), gold: chief of protocol (3); 3 shared
    assert hotpot_f1("Chief of Protocol of the United States", "Chief of Protocol") == pytest.approx(2 / 3)
    assert hotpot_f1("Harry Potter", "Animorphs") == 0.0


@pytest.mark.parametrize(("prediction", "gold"), [("yes", "no"), ("no", "yes"), ("yes, both are", "yes"),
                                                  ("yes", "yes sir"), ("noanswer", "no answer")])
def test_hotpotqa_f1_is_zero_when_yes_no_or_noanswer_differ(prediction: str, gold: str) -> None:
    assert hotpot_f1(prediction, gold) == 0.0


def test_hotpotqa_yes_matches_yes_fully() -> None:
    assert hotpot_f1("Yes.", "yes") == 1.0 and hotpot_em("Yes.", "yes")


def test_hotpotqa_span_is_the_marked_answer_else_the_whole_text() -> None:
    assert hotpot_span("Both were American.\n\n**Answer:** yes") == "yes"
    assert hotpot_span("Answer:\nChief of Protocol\nbecause ...") == "Chief of Protocol"
    assert hotpot_span("Shirley Temple was\nChief of Protocol.") == "Shirley Temple was Chief of Protocol."
    assert hotpot_span(None) == ""


def test_hotpotqa_score_is_em_as_solved_with_the_f1() -> None:
    s = score_hotpotqa("Chief of Protocol", "Answer: Chief of Protocol of the United States")
    assert (s.solved, s.f1) == (False, pytest.approx(2 / 3))
    assert score_hotpotqa("yes", "Answer: Yes.") == score_hotpotqa("yes", "yes")
    assert score_hotpotqa("yes", None).f1 == 0.0


@needs_data
def test_hotpotqa_loads_50_questions_each_with_its_own_ten_paragraphs() -> None:
    ds = load_dataset("hotpotqa", DATA)
    assert len(ds.problems) == 50 and [p.id for p in ds.problems[:2]] == ["0", "1"]
    p = ds.problems[0]
    lines = p.shown.splitlines()
    assert len(lines) == 11 and lines[-1] == "Question: Were Scott Derrickson and Ed Wood of the same nationality?"
    assert lines[1].startswith("Scott Derrickson: Scott Derrickson (born July 16, 1966) is an American director, "
                               "screenwriter and producer. He lives in Los Angeles, California.")
    assert p.gold == "yes" and p.text == p.shown


@needs_data
async def test_hotpotqa_scores_its_own_gold_as_solved_with_f1_one() -> None:
    ds = load_dataset("hotpotqa", DATA)
    score = await ds.score(ds.problems[1], f"Answer: {ds.problems[1].gold}")
    assert score.solved and score.f1 == 1.0


def test_hotpotqa_file_that_is_not_a_list_is_a_one_line_error(tmp_path: Path) -> None:
    (tmp_path / "hotpotqa").mkdir()
    (tmp_path / "hotpotqa" / "hotpot_dev_distractor_first50.json").write_text('{"question": "q"}')
    with pytest.raises(DataError, match="cannot read .*expected a JSON list of questions"):
        load_dataset("hotpotqa", tmp_path)


def test_hotpotqa_reads_the_official_files_context_layout_too(tmp_path: Path) -> None:
    (tmp_path / "hotpotqa").mkdir()
    row = {"question": "Who?", "answer": "Ada", "context": [["Brisk", ["Brisk was founded by Ada.", " In 1790."]]]}
    (tmp_path / "hotpotqa" / "hotpot_dev_distractor_first50.json").write_text(json.dumps([row]))
    shown = load_dataset("hotpotqa", tmp_path).problems[0].shown
    assert shown == "Brisk: Brisk was founded by Ada. In 1790.\nQuestion: Who?"


def test_mean_interval_is_a_reproducible_bootstrap_inside_the_data_range() -> None:
    values = [0.0] * 10 + [1.0] * 8 + [0.5] * 2
    lo, hi = mean_ci(values)
    assert 0.0 <= lo < 0.45 < hi <= 1.0 and hi - lo < 0.5
    assert mean_ci(values) == (lo, hi)  # fixed seed
    assert mean_ci([0.4, 0.4]) == (0.4, 0.4) and mean_ci([]) is None


def test_wilson_interval_matches_known_values_and_stays_in_bounds() -> None:
    lo, hi = wilson(10, 20)
    assert lo == pytest.approx(0.2993, abs=1e-3) and hi == pytest.approx(0.7007, abs=1e-3)
    lo, hi = wilson(0, 20)
    assert lo == 0.0 and hi == pytest.approx(0.1611, abs=1e-3)
    assert wilson(20, 20)[1] == 1.0
    assert wilson(0, 0) == (0.0, 1.0)


def test_median_interval_is_the_order_statistics_with_95_percent_coverage() -> None:
    values = list(range(1, 21))  # n = 20: the interval is x(6) .. x(15)
    assert median(values) == 10.5
    assert median_ci(values) == (6.0, 15.0)
    assert median_ci([5.0]) == (5.0, 5.0)  # too few values: the full range
    assert median_ci([]) is None


@needs_data
def test_game24_data_set_loads_1262_puzzles_ranked_and_spread_selection_spans_difficulty() -> None:
    ds = load_dataset("game24", DATA)
    assert len(ds.problems) == 1262
    assert ds.problems[0].text == "1 1 4 6"
    picked = ds.select(20, "spread")
    ranks = [int(p.id) for p in picked]
    assert len(picked) == 20 and ranks[0] == 1 and ranks[-1] > 1200
    assert not any(901 <= r <= 1000 for r in ranks)  # the withheld test slice is not in the file
    assert ds.select(3, "first") == ds.problems[:3]


@needs_data
@pytest.mark.parametrize("name", ["gsm8k", "mbpp", "sorting32", "set_intersection32", "keyword_counting"])
async def test_every_data_set_loads_and_scores_its_own_gold_as_solved(name: str) -> None:
    ds = load_dataset(name, DATA)
    p = ds.problems[0]
    if name == "mbpp":
        assert p.id.startswith("MBPP/")
        return  # scoring runs the hidden tests in the sandbox: covered by the code task's tests
    gold = {
        "gsm8k": lambda: f"The answer is {p.gold}",
        "sorting32": lambda: str(sorted(p.gold["unsorted"])),
        "set_intersection32": lambda: str(p.gold["intersection"]),
        "keyword_counting": lambda: "{" + ", ".join(f'"{c}": {p.gold.count(c)}' for c in set(p.gold)) + "}",
    }[name]()
    assert (await ds.score(p, gold)).solved


def test_a_missing_data_directory_is_a_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="no such directory"):
        find_data_dir(tmp_path / "nope")
    with pytest.raises(DataError, match="not found"):
        load_dataset("game24", tmp_path)
    assert set(DATASETS) >= {"game24", "gsm8k", "humaneval", "mbpp", "sorting32", "set_intersection32",
                             "keyword_counting"}
