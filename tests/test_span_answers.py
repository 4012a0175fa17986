"""The answer rules every HotpotQA lane shares (tasks/answers.span_answer): one behaviour per test."""

from __future__ import annotations

import pytest

from thoughtloom.tasks.answers import is_yes_no, span_answer

WHO = "Who portrayed Corliss Archer in the film Kiss and Tell?"
WHAT = "What government position was held by the woman who portrayed Corliss Archer in the film Kiss and Tell?"
SAME = "Were Scott Derrickson and Ed Wood of the same nationality?"


@pytest.mark.parametrize("reply", ["Answer: Chief of Protocol", "Final answer: Chief of Protocol",
                                   "**Answer**: Chief of Protocol", "**Final Answer:** Chief of Protocol",
                                   "Answer: Answer: Chief of Protocol", "The answer is Chief of Protocol"])
def test_an_answer_loses_its_label(reply: str) -> None:
    assert span_answer(WHAT, reply) == "Chief of Protocol"


def test_an_answer_loses_its_quotes_and_closing_period() -> None:
    assert span_answer(WHAT, '"Chief of Protocol."') == "Chief of Protocol"


def test_an_abbreviation_keeps_its_period() -> None:
    assert span_answer("Which country?", "U.S.") == "U.S."


@pytest.mark.parametrize("question", [SAME, "Are Ferocactus and Silene both types of plant?",
                                      "Did the band release an album in 1999?", "Scott Derrickson and Ed Wood, "
                                      "both American?"])
def test_a_question_opening_with_an_auxiliary_verb_or_asking_both_or_same_is_a_yes_no_question(question: str) -> None:
    assert is_yes_no(question)


@pytest.mark.parametrize("question", [WHAT, "Is Annie Morton or Terry Richardson older?",
                                      "Which band, Letters to Cleo or Screaming Trees, had more members?"])
def test_a_wh_question_or_a_choice_between_two_is_no_yes_no_question(question: str) -> None:
    assert not is_yes_no(question)


def test_a_yes_no_question_is_answered_yes_or_no() -> None:
    assert span_answer(SAME, "Yes, both were American.") == "yes"
    assert span_answer(SAME, "Answer: No.") == "no"


def test_a_bare_yes_to_a_question_that_is_not_yes_no_is_no_answer() -> None:
    assert span_answer(WHO, "Yes") is None


def test_what_follows_a_yes_answers_a_question_that_is_not_yes_no() -> None:
    assert span_answer(WHO, "Yes, Shirley Temple") == "Shirley Temple"


def test_a_no_that_opens_a_phrase_is_kept() -> None:
    assert span_answer(WHO, "No one knows.") == "No one knows"


def test_a_factoid_answer_is_cut_to_its_first_sentence() -> None:
    assert span_answer(WHAT, "Chief of Protocol. She was appointed by Gerald Ford in 1976.") == "Chief of Protocol"


def test_a_factoid_answer_is_cut_where_its_explanation_starts() -> None:
    assert span_answer(WHAT, "Chief of Protocol, which she held from 1976 to 1977") == "Chief of Protocol"
    assert span_answer(WHAT, "Chief of Protocol [docs:03-Shirley_Temple.md:4]") == "Chief of Protocol"


def test_a_span_with_a_comma_inside_the_entity_stays_whole() -> None:
    assert span_answer("Where is the director based?", "Greenwich Village, New York City") == \
        "Greenwich Village, New York City"


def test_a_long_answer_is_cut_to_at_most_twelve_words_from_its_start() -> None:
    long = "Shirley Temple Black served as Chief of Protocol of the United States from 1976 until 1977 under Ford"
    assert span_answer(WHAT, long) == " ".join(long.split()[:12])


def test_a_file_name_is_never_the_answer() -> None:
    assert span_answer(WHO, "03-Shirley_Temple.md") is None
    assert span_answer(WHO, "doc_12.md") is None


def test_a_file_name_gives_way_to_the_span_beside_it() -> None:
    assert span_answer(WHO, "doc_12.md: Shirley Temple") == "Shirley Temple"


def test_the_questions_own_subject_gives_way_to_a_better_candidate() -> None:
    assert span_answer(WHAT, "Kiss and Tell\nChief of Protocol") == "Chief of Protocol"
    assert span_answer(WHAT, "Corliss Archer", ["Kiss and Tell", "Chief of Protocol"]) == "Chief of Protocol"


def test_the_questions_own_words_stay_the_answer_when_nothing_better_is_given() -> None:
    assert span_answer("The director is based in what New York city?", "New York City") == "New York City"


def test_a_choice_question_is_answered_by_one_of_the_two_it_names() -> None:
    assert span_answer("Who is older, Annie Morton or Terry Richardson?", "Terry Richardson.") == "Terry Richardson"
