"""The second hop of a bridge question (tasks/hops), shared by the agent's question mode and Research Flow."""

from __future__ import annotations

import pytest

from thoughtloom.run.options import spec_from_options
from thoughtloom.search.config import SearchConfig
from thoughtloom.search.research.config import ResearchConfig, ResearchConfigError
from thoughtloom.tasks.hops import (
    HopError,
    bridge_entities,
    bridge_of,
    hop_names,
    hop_query,
    hop_search,
    parse_hop,
)

BRIDGE = "Where was the director of Harbour Lights born?"
FILM = [("docs:harbour.md:1-2", "# Harbour Lights\nHarbour Lights premiered in York. It was directed by Jane Doe.")]


def test_a_relation_named_by_of_is_a_bridge_with_its_role_subject_and_other_words() -> None:
    bridge = bridge_of(BRIDGE)
    assert bridge is not None
    assert (bridge.phrase, bridge.role, bridge.subject, bridge.rest) == (
        "the director of Harbour Lights", "director", "Harbour Lights", "born")


def test_a_relation_named_by_who_or_that_is_a_bridge_too() -> None:
    # Research Flow's pattern read only "the ROLE of X"; the agent's read these as well.
    bridge = bridge_of("What government position was held by the woman who portrayed Corliss Archer in the film "
                       "Kiss and Tell?")
    assert bridge is not None and bridge.phrase == "the woman who portrayed Corliss Archer"
    assert bridge.link == "portrayed" and "government" in bridge.rest
    assert bridge_of("Where is the company that Sachin Warrier worked for headquartered?") is not None


@pytest.mark.parametrize("question", [
    "Who is the director of Harbour Lights?",  # asks for the bridge entity itself: the first search answers it
    "What is the capital of France?",
    "Who directed Harbour Lights?",
    "Were Scott Derrickson and Ed Wood of the same nationality?",
])
def test_a_question_that_asks_no_more_than_one_search_answers_is_not_a_bridge(question: str) -> None:
    assert bridge_of(question) is None


def test_the_follow_up_search_is_the_name_the_passages_gave_and_the_questions_other_words() -> None:
    bridge = bridge_of(BRIDGE)
    assert bridge is not None and hop_search(bridge, "Jane Doe") == "Jane Doe born"


def test_the_naming_prompt_shows_the_first_passages_and_asks_for_the_bridge_phrase() -> None:
    bridge = bridge_of(BRIDGE)
    assert bridge is not None
    text = hop_query(bridge, FILM).prompt.as_text()
    assert "It was directed by Jane Doe." in text and text.rstrip().endswith(
        "Who or what is the director of Harbour Lights?")


@pytest.mark.parametrize("reply, error", [
    ("The director.", "no NAME: line"),
    ("NAME: none", "names no one"),
    ("NAME: John Smith", "do not name 'John Smith'"),
    ("NAME: Harbour Lights", "named by the question itself"),
])
def test_a_naming_reply_must_name_an_entity_the_passages_give_and_the_question_does_not(
        reply: str, error: str) -> None:
    bridge = bridge_of(BRIDGE)
    assert bridge is not None
    with pytest.raises(HopError, match=error):
        parse_hop(reply, bridge, FILM)
    assert parse_hop("**NAME:** Jane Doe.", bridge, FILM) == "Jane Doe"


def test_a_name_made_of_the_questions_words_is_new_unless_the_question_writes_it() -> None:
    bridge = bridge_of("What is the fight song of the university whose main campus is in Lawrence, Kansas?")
    assert bridge is not None
    passages = [("a", "# Lawrence, Kansas\nLawrence is home to the University of Kansas.")]
    assert parse_hop("NAME: University of Kansas", bridge, passages) == "University of Kansas"
    with pytest.raises(HopError, match="named by the question itself"):
        parse_hop("NAME: Lawrence, Kansas", bridge, passages)


def test_without_a_model_the_bridge_is_the_name_nearest_the_relation_word_that_the_question_does_not_name() -> None:
    bridge = bridge_of(BRIDGE)
    assert bridge is not None
    passages = [*FILM, ("b", "The director of Harbour Lights, J. R. Smith, was hired late.")]
    assert bridge_entities(bridge, passages) == ["Jane Doe", "J. R. Smith"]


def test_without_a_model_a_who_relation_is_found_by_its_verb() -> None:
    bridge = bridge_of("What did the man who founded Argus Works study?")
    assert bridge is not None
    assert bridge_entities(bridge, [("a", "# Argus Works\nArgus Works was founded in 1901 by Tom Tall.")]) == [
        "Tom Tall"]


def test_the_models_name_is_searched_and_a_failed_reply_falls_back_to_the_passages() -> None:
    bridge = bridge_of(BRIDGE)
    assert bridge is not None
    assert hop_names(bridge, FILM, "NAME: Jane Doe").names == (("Jane Doe", "named by the model"),)
    (name, how), = hop_names(bridge, FILM, None).names
    assert name == "Jane Doe" and how == "found in the passages (no model reply)"


def test_more_hops_search_the_passages_other_names_after_the_models() -> None:
    bridge = bridge_of(BRIDGE)
    assert bridge is not None
    passages = [*FILM, ("b", "The director of Harbour Lights, J. R. Smith, was hired late.")]
    assert hop_names(bridge, passages, "NAME: J. R. Smith").names == (
        ("J. R. Smith", "named by the model"), ("Jane Doe", "found in the passages"))


def test_no_follow_up_when_the_bridge_entitys_own_page_was_read_or_no_one_is_named() -> None:
    bridge = bridge_of(BRIDGE)
    assert bridge is not None
    read = [*FILM, ("docs:jane.md:1-2", "# Jane Doe\nJane Doe was born in Leeds.")]
    assert hop_names(bridge, read, "NAME: Jane Doe").why_none == "Jane Doe's own page is among the passages"
    plan = hop_names(bridge, [("a", "# Harbour Lights\nharbour lights is a film.")], "NAME: none")
    assert plan.names == () and plan.why_none == "the passages name no one for 'the director of Harbour Lights'"


def test_the_agents_and_researchs_hop_settings_are_one_setting_validated_alike() -> None:
    assert SearchConfig().bridge_hops == ResearchConfig().bridge_hops == 1
    with pytest.raises(ValueError, match=r"^bridge_hops must be >= 0; got -1$"):
        SearchConfig(bridge_hops=-1)
    with pytest.raises(ResearchConfigError, match=r"^bridge_hops must be >= 0; got -1$"):
        ResearchConfig(bridge_hops=-1)


@pytest.mark.parametrize("options, search, research", [
    ({"task": "agent", "strategy": "agent", "problem": BRIDGE}, 0, None),
    ({"task": "research", "strategy": "research", "problem": BRIDGE}, 0, 0),
])
def test_one_bridge_hops_option_sets_the_agents_search_or_the_research_flow(
        options: dict[str, object], search: int, research: int | None) -> None:
    spec = spec_from_options({**options, "bridge_hops": 0, "model": "local"})
    assert spec.config.bridge_hops == search
    assert (None if spec.research is None else spec.research.bridge_hops) == research
