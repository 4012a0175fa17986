"""Research Flow's judge: answers compared by the model's log-probabilities given a passage, answer spans, and
comparison questions settled by comparing each entity's extracted fact exactly."""

from __future__ import annotations

import asyncio
import logging
import re
from pathlib import Path
from typing import Any

import pytest
from test_research_flow import run

from thoughtloom.api import areplay
from thoughtloom.llm.fake import ScriptedBackend
from thoughtloom.llm.types import GenerateRequest, choice_text
from thoughtloom.store.sqlite import SQLiteStore
from thoughtloom.tasks.comparison import (
    Comparison,
    compare,
    comparison_of,
    nationality,
    parse_date,
)
from thoughtloom.tasks.research import contains_span

QUESTION = "Who built the Argo?"
ROOT = "1. Argus - the shipwright.\n2. Jason - he led the crew."
#: What a 0.5B model writes when asked for verdicts: every passage supports, or contradicts, every side.
ALL_SUPPORT = "1: SUPPORTS 0.9 yes\n2: SUPPORTS 0.9 yes\n3: SUPPORTS 0.9 yes"
ALL_CONTRADICT = "1: CONTRADICTS 0.9 no\n2: CONTRADICTS 0.9 no\n3: CONTRADICTS 0.9 no"


def folder(tmp_path: Path, **files: str) -> str:
    docs = tmp_path / "docs"
    docs.mkdir()
    for name, text in files.items():
        (docs / f"{name}.md").write_text(text)
    return str(docs)


def passage_of(text: str) -> str:
    found = re.search(r"Passage: (.*)", text)
    return found.group(1) if found else ""


def scripted(*, scores: dict[str, dict[str, float]] | None = None, facts: dict[str, str] | None = None,
             verdicts: str = ALL_SUPPORT, synth: str = "ANSWER: Argus\nWHY: it says so.",
             scoring: bool = True) -> ScriptedBackend:
    """A model that scores answers by the passage's words (`scores`: passage word -> log-probabilities; equal
    with no passage), states facts by the entity asked about, and otherwise writes what a 0.5B model writes."""
    def reply(request: GenerateRequest, _: int) -> str:
        text = request.prompt.as_messages()[-1].content
        if request.score_choices:
            passage = passage_of(text)
            for word, logps in (scores or {}).items():
                if word in passage:
                    return choice_text(logps)
            return choice_text({c: -1.0 for c in request.choices})
        if "Question: " in text and facts is not None and "Passages:" in text and "Hypothesis" not in text:
            asked = text.rsplit("Question: ", 1)[1]
            return next((fact for entity, fact in facts.items() if entity in asked), "unknown")
        if "Hypotheses (" in text:
            return ROOT
        if "Hypothesis:" in text and "Passages:" in text:
            return verdicts
        if "Hypotheses:" in text:
            return synth
        return "1. Other - another."

    return ScriptedBackend(responder=reply, scores_choices=scoring)


def evidence_of(result: Any, answer: str) -> list[Any]:
    return next(h for h in result.tree.values() if h.answer == answer).evidence


# --- the contrastive judge ---------------------------------------------------------------------------------


def test_the_contrastive_judge_prefers_the_side_the_passage_names(tmp_path: Path) -> None:
    docs = folder(tmp_path, argo="The Argo was built by Argus for the voyage.")
    model = scripted(scores={"built by Argus": {"Argus": -0.2, "Jason": -2.5}})
    _, _, result = run(model=model, knowledge=docs, exploration_budget=2, confidence_threshold=0.99)
    assert [e.supports for e in evidence_of(result, "Argus")] == [True]
    assert [e.supports for e in evidence_of(result, "Jason")] == [False]
    # Both sides scored in one pass per passage, not a SUPPORTS verdict asked per side.
    scored = [c for c in model.calls if c.score_choices and "built by Argus" in c.prompt.as_text()]
    assert scored and all(set(c.choices) == {"Argus", "Jason"} for c in scored)
    assert not any("SUPPORTS, CONTRADICTS" in c.prompt.as_text() for c in model.calls)
    assert result.answer.answer == "Argus"


def test_a_passage_that_names_neither_answer_supports_neither(tmp_path: Path) -> None:
    docs = folder(tmp_path, legend="The Argo is a ship of Greek legend.")
    model = scripted(verdicts=ALL_CONTRADICT)
    _, _, result = run(model=model, knowledge=docs, exploration_budget=2, confidence_threshold=0.99)
    assert evidence_of(result, "Argus") == [] and evidence_of(result, "Jason") == []
    assert not any(c.score_choices and "Greek legend" in c.prompt.as_text() for c in model.calls)


def test_a_yes_no_passage_about_the_question_speaks_for_the_side_it_lifts_and_against_the_other(
        tmp_path: Path) -> None:
    docs = folder(tmp_path, argo="The Argo was built in Colchis by Argus.")
    model = scripted(scores={"Colchis by": {"Yes": -0.1, "No": -4.0}})
    _, _, result = run("Was the Argo built in Colchis?", model=model, knowledge=docs, exploration_budget=2,
                       confidence_threshold=0.99)
    assert [e.supports for e in evidence_of(result, "Yes")] == [True]
    assert [e.supports for e in evidence_of(result, "No")] == [False]
    assert all(e.why.startswith("given the passage: Yes 0.") for e in evidence_of(result, "Yes"))
    assert result.answer.answer == "yes"


def test_a_yes_no_passage_about_none_of_the_questions_names_supports_neither(tmp_path: Path) -> None:
    docs = folder(tmp_path, ship="Argus built ships in a harbour of Greek legend.")
    model = scripted(scores={"harbour": {"Yes": -0.1, "No": -4.0}})
    _, _, result = run("Was the Argo built in Colchis?", model=model, knowledge=docs, exploration_budget=2,
                       confidence_threshold=0.99)
    assert evidence_of(result, "Yes") == [] and evidence_of(result, "No") == []


def test_a_backend_that_cannot_score_choices_falls_back_to_written_verdicts_and_says_so_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    docs = folder(tmp_path, argo="The Argo was built by Argus for the voyage.")
    with caplog.at_level(logging.WARNING, logger="thoughtloom.search.research.evidence"):
        _, _, result = run(model=scripted(scoring=False), knowledge=docs, exploration_budget=2,
                           confidence_threshold=0.99)
    said = [r for r in caplog.records if "cannot score choices" in r.getMessage()]
    assert len(said) == 1
    assert [e.supports for e in evidence_of(result, "Argus")] == [True]


# --- the span check ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("passage", "answer", "held"), [
    ("The film was directed by Jane Doe in 1999.", "Jane Doe", True),
    ("It is a song by the Beatles.", "The Beatles", True),           # articles go, as the official scorer drops them
    ("It opened in Greenwich Village, New York City.", "greenwich village new york city", True),  # punctuation goes
    ("Jane Smith met John Doe.", "Jane Doe", False),                  # every word there, not as one span
    ("Doe, Jane (born 1950)", "Jane Doe", False),
    ("Janet Doe", "Jane Doe", False),
])
def test_a_passage_contains_an_answer_only_as_a_normalised_span(passage: str, answer: str, held: bool) -> None:
    assert contains_span(passage, answer) is held


# --- comparison questions ----------------------------------------------------------------------------------

NATIONALITY = "Were Scott Derrickson and Ed Wood of the same nationality?"
OLDER = "Who is older, Annie Morton or Terry Richardson?"


@pytest.fixture
def people(tmp_path: Path) -> str:
    return folder(tmp_path,
                  scott="Scott Derrickson (born July 16, 1966) is a director of horror films.",
                  ed="Ed Wood (1924-1978) was a filmmaker, actor and writer.",
                  annie="Annie Morton (born October 8, 1970) is a model.",
                  terry="Terry Richardson (born August 14, 1965) is a fashion photographer.")


def facts_run(question: str, docs: str, facts: dict[str, str], synth: str, **settings: Any) -> Any:
    model = scripted(facts=facts, synth=synth)
    return model, run(question, model=model, knowledge=docs, exploration_budget=4, **settings)


def test_a_same_nationality_question_is_no_when_the_extracted_nationalities_differ(people: str) -> None:
    _, (_, _, result) = facts_run(NATIONALITY, people, {"Scott Derrickson": "American", "Ed Wood": "Canadian"},
                                  "ANSWER: yes\nWHY: both passages support yes.")
    assert result.answer.answer == "no"
    assert not any(e.supports for e in evidence_of(result, "Yes"))


def test_a_same_nationality_question_is_yes_when_the_extracted_nationalities_match(people: str) -> None:
    model, (_, _, result) = facts_run(NATIONALITY, people, {"Scott Derrickson": "American", "Ed Wood": "U.S."},
                                      "ANSWER: no\nWHY: the passages do not say.")
    assert result.answer.answer == "yes"
    assert {c.split(":")[1] for c in result.answer.citations} == {"scott.md", "ed.md"}
    # Each entity's fact is asked of the model; whether a passage "supports yes" never is.
    asked = [c.prompt.as_text() for c in model.calls]
    assert any("nationality of Ed Wood" in a for a in asked) and not any("Hypothesis: Yes" in a for a in asked)


def test_a_which_is_older_question_picks_the_earlier_birth_date(people: str) -> None:
    _, (_, _, result) = facts_run(OLDER, people, {"Annie Morton": "October 8, 1970", "Terry Richardson": "1965"},
                                  "ANSWER: Annie Morton\nWHY: she is older.")
    assert [h.answer for h in result.tree.values() if h.depth == 1] == ["Annie Morton", "Terry Richardson"]
    assert result.answer.answer == "Terry Richardson"


def test_a_question_choosing_between_two_it_names_starts_from_those_two_without_asking_the_model(
        tmp_path: Path) -> None:
    docs = folder(tmp_path, roth="Henry Roth was an American novelist.",
                  childers="Robert Erskine Childers was an English-born writer.")
    model = scripted(scores={"English": {"Henry Roth": -3.0, "Robert Erskine Childers": -0.5}})
    _, _, result = run("Which writer was from England, Henry Roth or Robert Erskine Childers?", model=model,
                       knowledge=docs, exploration_budget=2, confidence_threshold=0.99)
    assert [h.answer for h in result.tree.values() if h.depth == 1] == ["Henry Roth", "Robert Erskine Childers"]
    assert not any("Hypotheses (" in c.prompt.as_text() for c in model.calls)
    assert [e.supports for e in evidence_of(result, "Robert Erskine Childers")] == [True]


def test_an_undecided_comparison_falls_back_to_judging_passages(people: str) -> None:
    _, (_, _, result) = facts_run(OLDER, people, {"Annie Morton": "unknown", "Terry Richardson": "1965"},
                                  "ANSWER: Annie Morton\nWHY: she is older.")
    assert result.answer.answer == "Annie Morton"  # no fact settles it: the synthesis answers, as before


def test_a_stored_comparison_run_replays_with_no_model_call(people: str, tmp_path: Path) -> None:
    store = str(tmp_path / "runs.db")
    model, (stream, _, result) = facts_run(OLDER, people, {"Annie Morton": "1970", "Terry Richardson": "1965"},
                                           "ANSWER: Annie Morton", store=store, seed=3)
    live = len(model.calls)
    with SQLiteStore(store) as opened:
        replayed, verdict = asyncio.run(areplay(opened, stream.search.run_id))
    assert verdict.identical, str(verdict)
    assert len(model.calls) == live and replayed.research.answer.answer == result.answer.answer == "Terry Richardson"
    facts = stream.search.graph.node(0).extra["research"]["comparison"]["facts"]
    assert [(f["entity"], f["value"], f["source"]) for f in facts] == [
        ("Annie Morton", "(1970, None, None)", "docs:annie.md:1"), ("Terry Richardson", "(1965, None, None)",
                                                                   "docs:terry.md:1")]


def test_a_stored_contrastive_run_replays_with_no_model_call_even_when_no_passage_was_scored(tmp_path: Path) -> None:
    docs = folder(tmp_path, legend="The Argo is a ship of Greek legend.")
    model = scripted()
    store = str(tmp_path / "runs.db")
    stream, _, _ = run(model=model, knowledge=docs, exploration_budget=2, confidence_threshold=0.99, store=store,
                       seed=3)
    live = len(model.calls)
    with SQLiteStore(store) as opened:
        _, verdict = asyncio.run(areplay(opened, stream.search.run_id))
    assert verdict.identical, str(verdict)
    assert len(model.calls) == live


@pytest.mark.parametrize(("question", "kind", "entities"), [
    (NATIONALITY, "same", ("Scott Derrickson", "Ed Wood")),
    ("Are the Laleli Mosque and Esma Sultan Mansion located in the same neighborhood?", "same",
     ("the Laleli Mosque", "Esma Sultan Mansion")),
    (OLDER, "earlier", ("Annie Morton", "Terry Richardson")),
    ("Which came first, Star Wars or Alien?", "earlier", ("Star Wars", "Alien")),
    ("Who was born first, Ada Lovelace or Charles Babbage?", "earlier", ("Ada Lovelace", "Charles Babbage")),
    ("Is Paris or Rome older?", "earlier", ("Paris", "Rome")),
    ("Who is younger, Ann Lee or Bo Chan?", "later", ("Ann Lee", "Bo Chan")),
    ("Which band, Letters to Cleo or Screaming Trees, had more members?", "more", ("Letters to Cleo", "Screaming Trees")),
])
def test_comparison_questions_are_recognised_with_their_two_entities(question: str, kind: str,
                                                                     entities: tuple[str, str]) -> None:
    found = comparison_of(question)
    assert found is not None and (found.kind, found.entities) == (kind, entities)


@pytest.mark.parametrize("question", [
    "Which writer was from England, Henry Roth or Robert Erskine Childers?",  # no fact compared: a choice to judge
    "Which performance act has a higher instrument to person ratio, Badly Drawn Boy or Wolf Alice?",
    "Are Local H and For Against both from the United States?",
    "Who built the Argo?",
])
def test_other_questions_are_no_comparison(question: str) -> None:
    assert comparison_of(question) is None


def test_nationalities_compare_through_demonyms_and_country_names() -> None:
    assert nationality("American") == nationality("the U.S.") == nationality("United States of America")
    assert nationality("He was a South Korean singer") == "south korea" != nationality("Korean")
    assert nationality("unknown") is None


def test_dates_are_parsed_to_year_month_and_day_and_compared_only_as_far_as_both_go() -> None:
    assert parse_date("born 3 May 1961") == parse_date("May 3, 1961") == (1961, 5, 3)
    assert parse_date("formed in 1988 and split in 1996") == (1988, None, None)
    older = Comparison("earlier", "date", ("A", "B"))
    assert compare(older, [parse_date("May 1961"), parse_date("1960")]) == "B"
    assert compare(older, [parse_date("May 1961"), parse_date("1961")]) is None  # the same year, one month unknown
