"""The citation checker: a cited document must be in the knowledge base, and its cited lines must say what the sentence says."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import pytest

from thoughtloom.grounding.citations import (
    CitationChecker,
    CitationGrounder,
    CitationStatus,
    cited_sentences,
    parse_reference,
    strip_citations,
    with_sources,
)
from thoughtloom.grounding.knowledge import KnowledgeBase
from thoughtloom.grounding.knowledge_check import ResearchGrounder
from thoughtloom.grounding.types import Thought

TRUE = "Water boils at 100 degrees Celsius at sea level."


@pytest.fixture
def kb(tmp_path: Path) -> KnowledgeBase:
    folder = tmp_path / "kb"
    (folder / "notes").mkdir(parents=True)
    (folder / "physics.md").write_text("# Water\n\nSome intro.\n\nWater boils at 100 degrees Celsius at sea level.\n")
    (folder / "notes" / "metals.md").write_text("Copper conducts electricity.\n\nIron rusts in water.\n")
    return KnowledgeBase.open(folder)


def status(kb: KnowledgeBase, text: str) -> list[CitationStatus]:
    return [c.status for c in CitationChecker(kb).check(text).checks]


def test_a_citation_whose_lines_say_the_sentence_supports_it(kb: KnowledgeBase) -> None:
    assert status(kb, "Water boils at 100 degrees Celsius at sea level [physics.md:5].") == [CitationStatus.SUPPORTS]


def test_a_citation_of_a_document_that_is_not_there_is_a_made_up_source(kb: KnowledgeBase) -> None:
    assert status(kb, "Water boils at 100 degrees Celsius at sea level [chemistry.md:5].") == [CitationStatus.NO_SOURCE]


def test_a_citation_of_lines_the_document_does_not_have_is_refused(kb: KnowledgeBase) -> None:
    assert status(kb, "Water boils at 100 degrees Celsius at sea level [physics.md:40-41].") == [CitationStatus.NO_LINES]


def test_a_citation_whose_lines_say_otherwise_contradicts_the_sentence(kb: KnowledgeBase) -> None:
    checks = CitationChecker(kb).check("Water boils at 90 degrees Celsius at sea level [docs:physics.md:5].").checks
    assert [c.status for c in checks] == [CitationStatus.CONTRADICTS]
    assert "says 100 where the claim says 90" in checks[0].reason


def test_a_citation_of_lines_about_something_else_does_not_support_the_sentence(kb: KnowledgeBase) -> None:
    assert status(kb, "Water boils at 100 degrees Celsius at sea level [physics.md:1].") == [CitationStatus.UNRELATED]


def test_a_citation_after_the_full_stop_backs_the_sentence_before_it() -> None:
    pairs = cited_sentences(f"{TRUE} [physics.md:5] Iron rusts in water. [metals.md:3]")
    assert [(s, [r.text for r in refs]) for s, refs in pairs] == [
        (TRUE, ["physics.md:5"]), ("Iron rusts in water.", ["metals.md:3"]),
    ]


def test_a_document_is_found_by_its_name_within_the_folder(kb: KnowledgeBase) -> None:
    assert status(kb, "Iron rusts in water [metals.md:3].") == [CitationStatus.SUPPORTS]
    assert status(kb, "Iron rusts in water [kb/notes/metals.md:3].") == [CitationStatus.SUPPORTS]


def test_claims_that_cite_nothing_are_listed(kb: KnowledgeBase) -> None:
    report = CitationChecker(kb).check(f"{TRUE} [physics.md:5] Iron rusts in water.", required=True)
    assert report.uncited == ("Iron rusts in water.",) and report.missing


def test_citation_marks_are_not_part_of_the_claim() -> None:
    assert strip_citations("Water boils at 100 degrees [physics.md:5]. Iron rusts ([metals.md:3; a.md:1]).") == \
        "Water boils at 100 degrees. Iron rusts."


def test_a_reference_reads_both_forms() -> None:
    docs, plain = parse_reference("docs:01-Loire.md:2-4"), parse_reference("notes/x.txt:7")
    assert docs is not None and (docs.path, docs.line_start, docs.line_end) == ("01-Loire.md", 2, 4)
    assert plain is not None and (plain.path, plain.line_start, plain.line_end) == ("notes/x.txt", 7, 7)
    assert parse_reference("tool:calc") is None


def test_a_made_up_source_fails_a_claim_the_documents_support(kb: KnowledgeBase) -> None:
    grounder = CitationGrounder(ResearchGrounder(kb), CitationChecker(kb))
    result = asyncio.run(grounder.ground(Thought("q", (), f"{TRUE[:-1]} [chemistry.md:2].")))
    assert result.details["claims"][0]["verdict"] == "supported"
    assert result.verified is False and result.confidence == 1.0
    assert result.details["citation_check"]["checks"][0]["status"] == "no_source"


def test_a_thought_that_cites_nothing_is_grounded_as_before_unless_citations_are_required(kb: KnowledgeBase) -> None:
    thought = Thought("q", (), TRUE)
    plain = asyncio.run(CitationGrounder(ResearchGrounder(kb), CitationChecker(kb)).ground(thought))
    # Equal but for the milliseconds each took (a busy machine makes them differ).
    assert replace(plain, elapsed_ms=0) == replace(asyncio.run(ResearchGrounder(kb).ground(thought)), elapsed_ms=0)
    required = asyncio.run(CitationGrounder(ResearchGrounder(kb), CitationChecker(kb), required=True).ground(thought))
    assert required.verified is None and required.details["citation_check"]["uncited_claims"] == [TRUE]


def test_the_indexed_lines_keep_their_numbers_across_blank_lines(kb: KnowledgeBase) -> None:
    cited = kb.lines("notes/metals.md", 1, 3)
    assert cited is not None and cited.text == "Copper conducts electricity.\n\nIron rusts in water."
    assert kb.lines("notes/metals.md", 9, 12) is None


def test_the_problem_is_posed_with_its_sources_labelled_as_they_are_cited(kb: KnowledgeBase) -> None:
    posed = with_sources("At what temperature does water boil?", kb)
    assert posed.startswith("At what temperature does water boil?\n\nSources")
    assert f"[physics.md:5] Water: {TRUE}" in posed.splitlines()  # each source after its document's title
    assert with_sources("zebra quagga okapi", kb) == "zebra quagga okapi"
