"""The answer-type check every HotpotQA lane shares (tasks/answer_types): one behaviour per test."""

from __future__ import annotations

import pytest

from thoughtloom.tasks.answer_types import AnswerType, answer_type, fits, typed_span
from thoughtloom.tasks.answers import span_answer

T = AnswerType
GUNS = "What year did Guns N Roses perform a promo for a movie starring Arnold Schwarzenegger as a former detective?"
GUNS_PASSAGES = [
    ("Arnold Schwarzenegger filmography", "# Arnold Schwarzenegger filmography\nArnold Schwarzenegger is an actor "
     "who has appeared in over 30 films. He starred in The Terminator in 1984."),
    ("Oh My God (Guns N' Roses song)", "# Oh My God (Guns N' Roses song)\n\"Oh My God\" is a song by Guns N' Roses "
     "released in 1999 on the soundtrack to the film End of Days. The song was sent out to radio stations in "
     "November 1999 as a promo for the soundtrack and the band."),
]


@pytest.mark.parametrize(("question", "expected"), [
    (GUNS, T.YEAR),
    ("Seven Brief Lessons on Physics was written by a physicist that has worked in France since what year?", T.YEAR),
    ("When was Poison's album \"Shut Up, Make Love\" released?", T.DATE),
    ("Alexander Kerensky was defeated in the course of a civil war that ended when ?", T.DATE),
    ("The football manager who recruited David Beckham managed Manchester United during what timeframe?", T.PERIOD),
    ("Roger O. Egeberg served under a president that served during what years?", T.PERIOD),
    ("The arena where the Lewiston Maineiacs played their home games can seat how many people?", T.NUMBER),
    ("Who was known by his stage name Aladin?", T.PERSON),
    ("2014 S/S is the debut album of a boy group that was formed by who?", T.PERSON),
    ("What screenwriter with credits for \"Evolution\" co-wrote a film starring Nicolas Cage?", T.PERSON),
    ("Where is the company that Sachin Warrier worked for headquartered?", T.PLACE),
    ("Ralph Hefferline was a psychology professor at a university that is located in what city?", T.PLACE),
    ("Were Scott Derrickson and Ed Wood of the same nationality?", T.YES_NO),
    ("What government position was held by the woman who portrayed Corliss Archer?", T.OTHER),
])
def test_the_question_form_gives_the_expected_answer_type(question: str, expected: AnswerType) -> None:
    assert answer_type(question) is expected


def test_a_choice_between_two_named_is_no_typed_question() -> None:
    assert answer_type("Who is older, Annie Morton or Terry Richardson?") is T.OTHER


def test_a_title_does_not_fit_a_year_question() -> None:
    assert not fits("Arnold Schwarzenegger filmography", T.YEAR, GUNS)


def test_a_season_is_no_year() -> None:
    assert not fits("2012–13", T.YEAR, "Which university, founded in what year, ...?")


def test_the_question_own_year_does_not_fit() -> None:
    assert not fits("1990", T.YEAR, "In what year was the driver born in 1990 first on the podium?")


def test_the_year_of_a_season_the_question_names_does_not_fit() -> None:
    assert not fits("2011", T.YEAR, "The 2011–12 VCU Rams represented a university founded in what year?")


def test_a_description_does_not_fit_a_person_question() -> None:
    assert not fits("a Bangladeshi-British cultural practitioner", T.PERSON, "Who was known as Aladin?")


def test_a_capitalised_name_fits_a_person_question() -> None:
    assert fits("Eenasul Fateh", T.PERSON, "Who was known as Aladin?")


def test_a_bridge_entity_named_in_the_sentence_beats_the_question_words() -> None:
    passages = [("Steven Galson", "# Steven Galson\nHe served as Assistant Secretary for Health from 2001 to 2007."),
                ("Richard Nixon", "# Richard Nixon\nRichard Nixon was President of the United States from 1969 until "
                 "1974.")]
    question = "Roger Egeberg was Assistant Secretary for Health under a president who served during what years?"
    assert typed_span(question, passages, entities=["Richard Nixon"]) == "1969 until 1974"


def test_a_year_is_re_extracted_from_the_sentence_that_shares_the_question_words() -> None:
    assert typed_span(GUNS, GUNS_PASSAGES) == "1999"


def test_a_year_from_the_passage_naming_the_entity_wins_a_tie() -> None:
    passages = [("A", "# A\nThe club was founded in 1901."), ("B", "# B\nThe college was founded in 1838.")]
    question = "The team represented a college which was founded in what year?"
    assert typed_span(question, passages, entities=["B"]) == "1838"


def test_a_period_is_re_extracted_as_its_two_ends() -> None:
    passages = [("Richard Nixon", "# Richard Nixon\nRichard Nixon (January 9, 1913 – April 22, 1994) was the 37th "
                 "President of the United States from 1969 until 1974, when he resigned from office.")]
    question = "Roger O. Egeberg served during the administration of a president that served during what years?"
    assert typed_span(question, passages) == "1969 until 1974"


def test_a_count_is_re_extracted_and_a_census_year_passed_over() -> None:
    passages = [("Brown County, Kansas", "# Brown County, Kansas\nAs of the 2010 census, the county population was "
                 "9,984.")]
    question = "Brown State Fishing Lake is in a county that has a population of how many inhabitants?"
    assert typed_span(question, passages) == "9,984"


def test_a_date_is_re_extracted_whole() -> None:
    passages = [("Shut Up, Make Love", "# Shut Up, Make Love\n\"Shut Up, Make Love\" is a song by Poison; "
                 "released on March 7, 2000, it was the first single.")]
    assert typed_span("When was Poison's album \"Shut Up, Make Love\" released?", passages) == "March 7, 2000"


def test_no_span_of_the_type_gives_none() -> None:
    assert typed_span(GUNS, [("A", "# A\nNo years are written here.")]) is None


def test_an_untyped_question_re_extracts_nothing() -> None:
    assert typed_span("Who wrote the song?", GUNS_PASSAGES) is None


def test_span_answer_prefers_a_candidate_that_fits_the_type() -> None:
    assert span_answer(GUNS, "Arnold Schwarzenegger filmography", ["1999"]) == "1999"


def test_span_answer_re_extracts_when_no_candidate_fits() -> None:
    assert span_answer(GUNS, "Arnold Schwarzenegger filmography", passages=GUNS_PASSAGES) == "1999"


def test_span_answer_keeps_a_fitting_answer_over_the_passages() -> None:
    assert span_answer(GUNS, "1984", passages=GUNS_PASSAGES) == "1984"


def test_span_answer_without_passages_keeps_the_answer_it_cannot_replace() -> None:
    assert span_answer(GUNS, "Arnold Schwarzenegger filmography") == "Arnold Schwarzenegger filmography"
