"""Research grounding: claims are pulled out of thoughts and checked against real indexed documents."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_knowledge import CHEMISTRY, WATER

from thoughtloom.grounding.claims import extract_claims, sentences, stem
from thoughtloom.grounding.knowledge import KnowledgeBase
from thoughtloom.grounding.knowledge_check import (
    LEXICAL_CEILING,
    ClaimStatus,
    ResearchGrounder,
    Verdict,
    analyse_claim,
    judge_claim,
    judge_passage,
)
from thoughtloom.grounding.types import Citation, Grounder, Thought

PYTHON = """# Python notes

- Python 3.0 was released in December 2008.
- The global interpreter lock is not removed in CPython 3.12.
"""


@pytest.fixture
def kb(tmp_path: Path) -> Iterator[KnowledgeBase]:
    """A knowledge base over three documents, indexed into a real SQLite file."""
    folder = tmp_path / "docs"
    (folder / "science").mkdir(parents=True)
    (folder / "water.md").write_text(WATER, encoding="utf-8")
    (folder / "science" / "chemistry.txt").write_text(CHEMISTRY, encoding="utf-8")
    (folder / "python.md").write_text(PYTHON, encoding="utf-8")
    with KnowledgeBase.open(folder, tmp_path / "index.sqlite") as base:
        yield base


@pytest.fixture
def grounder(kb: KnowledgeBase) -> ResearchGrounder:
    """The grounder under test."""
    return ResearchGrounder(kb)


def thought(content: str) -> Thought:
    """A thought with a throwaway problem and no earlier steps."""
    return Thought(problem="What do we know?", steps=(), content=content)


# --- claim extraction -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "claims"),
    [
        ("Water boils at 100 degrees Celsius.", ["Water boils at 100 degrees Celsius."]),
        (
            "Water boils at 100 degrees. Ice floats on water! Does salt change that?",
            ["Water boils at 100 degrees.", "Ice floats on water!"],
        ),
        ("I think that water boils at 100 degrees.", ["water boils at 100 degrees."]),
        ("Probably, the reaction rate increases with temperature.", ["the reaction rate increases with temperature."]),
        ("Maybe. I think so. Not sure. Hmm, perhaps.", []),
        ("Let's check the documentation next. We should look at the tests.", []),
        ("Is the interpreter lock removed in CPython 3.12?", []),
        ("The reasons are:", []),
        ("Yes.", []),
        ("- Ice floats on water\n- Catalysts lower the activation energy\n", ["Ice floats on water", "Catalysts lower the activation energy"]),
        ("1. Ice floats on water.\n2) Salt lowers the freezing point.", ["Ice floats on water.", "Salt lowers the freezing point."]),
        ("## Water boils at 100 degrees\nIt freezes at 0 degrees.", ["Water boils at 100 degrees", "It freezes at 0 degrees."]),
        ("Step 2: The **global interpreter lock** is removed in [CPython](https://python.org) 3.13.", ["The global interpreter lock is removed in CPython 3.13."]),
        ("```python\nx = boil(water)\n```\nThe kettle switches off at 100 degrees.", ["The kettle switches off at 100 degrees."]),
        ("6 - 5 = 1 (left: 1 4 10)", []),
        ("The function f(x) returns None for missing keys.", []),
        ("Water is wet. Water is wet.", ["Water is wet."]),
        ("The U.S. grid runs at 60 Hz, e.g. in Texas. Europe uses 50 Hz.", ["The U.S. grid runs at 60 Hz, e.g. in Texas.", "Europe uses 50 Hz."]),
        ("", []),
    ],
)
def test_extract_claims_keeps_checkable_statements_only(text: str, claims: list[str]) -> None:
    assert extract_claims(text) == claims


def test_sentences_do_not_split_decimals_or_abbreviations() -> None:
    assert sentences("Pi is about 3.14 in value, i.e. a bit more than 3. Dr. Smith agrees.") == [
        "Pi is about 3.14 in value, i.e. a bit more than 3.",
        "Dr. Smith agrees.",
    ]


def test_stem_reduces_inflections_to_one_form() -> None:
    assert {stem(w) for w in ("boils", "boiled", "boiling", "boil")} == {"boil"}
    assert stem("degree") == stem("degrees")
    assert stem("study") == stem("studies")
    assert stem("stopped") == stem("stop")
    assert stem("increases") == stem("increasing") == stem("increase")


# --- judging one passage ----------------------------------------------------------------------


def passage(text: str, line: int = 10) -> Citation:
    """A passage as the index would return it."""
    return Citation(path="doc.md", line_start=line, line_end=line + text.count("\n"), text=text)


def test_passage_with_the_claims_words_and_number_supports_it() -> None:
    j = judge_passage(analyse_claim("Water boils at 100 degrees."), passage("Pure water boils at 100 degrees Celsius."))
    assert j.verdict is Verdict.SUPPORTS
    assert j.coverage == 1.0


def test_negated_passage_contradicts_an_affirmative_claim() -> None:
    j = judge_passage(
        analyse_claim("The interpreter lock is removed in CPython 3.12."),
        passage("The interpreter lock is not removed in CPython 3.12."),
    )
    assert j.verdict is Verdict.CONTRADICTS
    assert "negates" in j.reason


def test_negation_of_another_number_is_not_a_contradiction() -> None:
    j = judge_passage(analyse_claim("Water boils at 100 degrees."), passage("Water boils at 100 degrees, not 90."))
    assert j.verdict is Verdict.SUPPORTS


def test_passage_denying_the_claims_number_contradicts_it() -> None:
    j = judge_passage(analyse_claim("Water boils at 90 degrees."), passage("Water boils at 100 degrees, not 90."))
    assert j.verdict is Verdict.CONTRADICTS


def test_negated_claim_about_a_different_number_is_not_contradicted() -> None:
    j = judge_passage(analyse_claim("Water does not boil at 90 degrees."), passage("Water boils at 100 degrees."))
    assert j.verdict is Verdict.UNRELATED
    assert "under a negation" in j.reason


def test_opposite_word_contradicts() -> None:
    j = judge_passage(
        analyse_claim("Raising the temperature decreases the reaction rate."),
        passage("Raising the temperature increases the reaction rate of most reactions."),
    )
    assert j.verdict is Verdict.CONTRADICTS
    assert "'increases' where the claim says 'decreases'" in j.reason


def test_negation_of_an_unrelated_word_later_in_the_sentence_is_ignored() -> None:
    j = judge_passage(
        analyse_claim("The cache key includes the sample index."),
        passage("The cache key includes the sample index, so caching never collapses sample diversity."),
    )
    assert j.verdict is Verdict.SUPPORTS


def test_number_is_compared_with_the_number_in_the_same_context() -> None:
    # "3" is in the passage, but next to "depth"; next to "beam" the passage says 5.
    j = judge_passage(analyse_claim("The default beam is 3."), passage("Defaults: breadth 5, beam 5, depth 3."))
    assert j.verdict is Verdict.CONTRADICTS
    assert "says 5 where the claim says 3" in j.reason


def test_passage_without_the_claims_number_decides_nothing() -> None:
    j = judge_passage(analyse_claim("The tower is 330 metres tall."), passage("The tower is very tall."))
    assert j.verdict is Verdict.UNRELATED


def test_passage_sharing_few_words_is_unrelated() -> None:
    j = judge_passage(analyse_claim("Water boils quickly in copper kettles."), passage("Water is wet."))
    assert j.verdict is Verdict.UNRELATED
    assert j.coverage < 0.6


def test_citation_is_narrowed_to_the_lines_of_the_judged_sentence() -> None:
    text = "Water is made of hydrogen\nand oxygen. Ice is less dense\nthan water, so ice floats.\nIt melts at 0 degrees."
    j = judge_passage(analyse_claim("Ice floats on water."), passage(text, line=20))
    assert (j.citation.line_start, j.citation.line_end) == (21, 22)
    assert j.citation.text == "Ice is less dense than water, so ice floats."


def test_equally_strong_support_and_contradiction_leave_the_claim_unverified() -> None:
    verdict = judge_claim(
        "Ice floats on water.",
        [passage("Ice floats on water.", line=1), passage("Ice does not float on water.", line=5)],
    )
    assert verdict.status is ClaimStatus.UNVERIFIED
    assert "passages disagree" in verdict.reason
    assert verdict.strength == 0.0


def test_weaker_contradiction_lowers_the_strength_of_a_support() -> None:
    clean = judge_claim("Ice floats on liquid water.", [passage("Ice floats on liquid water.")])
    contested = judge_claim(
        "Ice floats on liquid water.",
        [passage("Ice floats on liquid water.", line=1), passage("Ice does not float on water.", line=5)],
    )
    assert clean.status is contested.status is ClaimStatus.SUPPORTED
    assert clean.strength == pytest.approx(LEXICAL_CEILING)
    assert contested.strength < clean.strength


# --- the grounder -----------------------------------------------------------------------------


def test_research_grounder_is_a_grounder(grounder: ResearchGrounder) -> None:
    assert isinstance(grounder, Grounder)
    assert grounder.name == "research"


async def test_supported_claim_is_verified_and_cites_the_right_lines(grounder: ResearchGrounder) -> None:
    result = await grounder.ground(thought("Water boils at 100 degrees Celsius at sea level."))
    assert result.grounded and result.verified is True
    assert result.outcome == 1.0
    assert (result.passed, result.failed) == (1, 0)
    assert [c.ref() for c in result.citations] == ["water.md:4-5"]
    assert "boils at 100 degrees Celsius" in result.citations[0].text
    assert result.details["claims"][0]["supporting"] == ["water.md:4-5"]
    assert result.details["claims"][0]["verdict"] == "supported"
    assert 0.5 < result.confidence <= LEXICAL_CEILING
    assert result.cost == 1
    assert "supported" in result.evidence and "water.md:4-5" in result.evidence


async def test_negated_claim_is_contradicted_by_the_document(grounder: ResearchGrounder) -> None:
    result = await grounder.ground(thought("Ice does not float on water."))
    assert result.grounded and result.verified is False
    assert result.outcome == 0.0
    assert (result.passed, result.failed) == (0, 1)
    claim = result.details["claims"][0]
    assert claim["verdict"] == "contradicted"
    assert claim["contradicting"] == ["water.md:9"]
    assert "water.md:9" in result.evidence


async def test_different_number_contradicts(grounder: ResearchGrounder) -> None:
    result = await grounder.ground(thought("Water boils at 90 degrees."))
    assert result.verified is False
    assert result.details["claims"][0]["contradicting"] == ["water.md:4-5"]
    assert "says 100 where the claim says 90" in result.evidence


async def test_opposite_claim_about_reaction_rates_is_contradicted(grounder: ResearchGrounder) -> None:
    result = await grounder.ground(thought("Raising the temperature decreases the reaction rate."))
    assert result.verified is False
    assert [c.ref() for c in result.citations] == ["science/chemistry.txt:3"]


async def test_list_items_are_checked_against_bulleted_documents(grounder: ResearchGrounder) -> None:
    supported = await grounder.ground(thought("Python 3.0 was released in December 2008."))
    contradicted = await grounder.ground(thought("Python 3.0 was released in 2010."))
    negated = await grounder.ground(thought("The global interpreter lock is removed in CPython 3.12."))
    assert supported.verified is True and supported.citations[0].ref() == "python.md:3"
    assert contradicted.verified is False
    assert negated.verified is False and negated.citations[0].ref() == "python.md:4"


async def test_unrelated_claim_is_unverified_with_score_zero(grounder: ResearchGrounder) -> None:
    result = await grounder.ground(thought("The Eiffel Tower is 330 metres tall."))
    assert result.grounded is True
    assert result.verified is None
    assert result.score == 0.0
    assert result.outcome is None  # nothing decided, so no score adjustment
    assert result.confidence == 0.0
    assert result.citations == ()
    assert result.details["claims"][0]["verdict"] == "unverified"


async def test_mixed_thought_counts_each_claim(grounder: ResearchGrounder) -> None:
    text = "Water boils at 100 degrees Celsius at sea level. Ice does not float on water."
    result = await grounder.ground(thought(text))
    assert result.verified is False
    assert (result.passed, result.failed) == (1, 1)
    assert result.score == 0.5
    assert result.cost == 2
    assert [c.ref() for c in result.citations] == ["water.md:4-5", "water.md:9"]
    assert [c["verdict"] for c in result.details["claims"]] == ["supported", "contradicted"]


async def test_supported_and_unverified_claims_grade_without_a_verdict(grounder: ResearchGrounder) -> None:
    result = await grounder.ground(thought("Ice floats on water. The Eiffel Tower is 330 metres tall."))
    assert result.grounded is True
    assert result.verified is None
    assert result.score == 0.5
    assert (result.passed, result.failed) == (1, 0)


async def test_thought_without_claims_is_not_grounded(grounder: ResearchGrounder) -> None:
    t = thought("Should we check the boiling point? Let's look it up.")
    assert grounder.can_ground(t) is False
    result = await grounder.ground(t)
    assert result.grounded is False and result.verified is None
    assert result.cost == 0


def test_can_ground_a_thought_that_states_something(grounder: ResearchGrounder) -> None:
    assert grounder.can_ground(thought("Catalysts lower the activation energy."))


async def test_closed_knowledge_base_is_reported_not_raised(kb: KnowledgeBase) -> None:
    grounder = ResearchGrounder(kb)
    kb.close()
    result = await grounder.ground(thought("Ice floats on water."))
    assert result.grounded is False
    assert "knowledge base failed" in result.evidence


async def test_concurrent_groundings_share_one_knowledge_base(grounder: ResearchGrounder) -> None:
    texts = ["Ice floats on water.", "Water boils at 90 degrees.", "Catalysts lower the activation energy."] * 5
    results = await asyncio.gather(*(grounder.ground(thought(t)) for t in texts))
    assert [r.verified for r in results] == [True, False, True] * 5


async def test_result_is_json_ready(grounder: ResearchGrounder) -> None:
    result = await grounder.ground(thought("Water boils at 100 degrees Celsius. Ice does not float."))
    data = json.loads(json.dumps(result.to_dict()))
    assert data["grounder"] == "research"
    assert data["citations"]


def test_passages_per_claim_must_be_positive(kb: KnowledgeBase) -> None:
    with pytest.raises(ValueError, match="passages_per_claim"):
        ResearchGrounder(kb, passages_per_claim=0)
