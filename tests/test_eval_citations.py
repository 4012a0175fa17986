"""HotpotQA paragraphs one sentence per line, and docs citations read back as the (title, sentence id) facts they cite."""

from __future__ import annotations

from pathlib import Path

import pytest
from benchdata import data_dir, needs

from thoughtloom.eval.citations import cited_facts, sentence_files, support_precision
from thoughtloom.eval.datasets import Problem, load_dataset
from thoughtloom.grounding.knowledge import KnowledgeBase

ROOT = Path(__file__).resolve().parents[1]
DATA = data_dir("hotpotqa/hotpot_dev_distractor_first50.json")
needs_data = needs("hotpotqa/hotpot_dev_distractor_first50.json")


def hotpotqa(index: int) -> Problem:
    return load_dataset("hotpotqa", DATA).problems[index]


@needs_data
def test_the_corpus_puts_the_title_on_line_1_and_sentence_i_on_line_i_plus_2() -> None:
    problem = hotpotqa(7)
    files = sentence_files(problem)
    assert len(files) == len(problem.sentences) == 10
    for (title, sentences), (name, text) in zip(problem.sentences, files.items()):
        lines = text.splitlines()
        assert lines[0] == f"# {title}" and len(lines) == len(sentences) + 1
        for i, sentence in enumerate(sentences):
            assert lines[i + 1] == " ".join(sentence.split())  # line i + 2, counted from 1
    # Numbered in file order, the title made safe for a file name.
    assert list(files)[3:6] == ["04-Loan_modification_in_the_United_States.md", "05-Case_Gym.md",
                                "06-Androscoggin_Bank_Colisée.md"]


@needs_data
def test_every_passage_the_index_cuts_from_the_corpus_reads_back_as_the_sentences_its_lines_cite(
        tmp_path: Path) -> None:
    # Question 7 holds a 32-sentence paragraph: the index cuts it into overlapping windows of lines.
    problem = hotpotqa(7)
    for name, text in sentence_files(problem).items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    titles = dict(problem.sentences)
    kb = KnowledgeBase.open(tmp_path)
    try:
        found = kb.search("loan modification mortgage Lewiston Maineiacs arena", limit=100)
    finally:
        kb.close()
    # Windows of the long paragraph below its heading are among them (lines 5-9, 9-13, ...).
    assert any(c.path.startswith("04-") and c.line_start > 1 for c in found)
    for passage in found:
        facts = sorted(cited_facts(problem, [f"docs:{passage.ref()}"]), key=lambda f: f[1])
        assert {title for title, _ in facts} <= {name for name in titles}
        heading = [f"# {facts[0][0]}"] if passage.line_start == 1 else []
        assert passage.text == "\n".join([*heading, *(titles[t][i].strip() for t, i in facts)])


def problem(sentences: dict[str, int], gold: tuple[tuple[str, int], ...]) -> Problem:
    """A problem with these paragraphs (title -> sentence count) and supporting facts."""
    return Problem("p", "", "", sentences=tuple((t, tuple(f"{t} {i}." for i in range(n))) for t, n in sentences.items()),
                   supporting_facts=gold)


def test_precision_is_the_share_of_cited_sentences_that_are_supporting_facts() -> None:
    p = problem({"Alpha": 3, "Beta": 2}, gold=(("Alpha", 0), ("Beta", 1)))
    cited = cited_facts(p, ["docs:01-Alpha.md:1-3", "docs:02-Beta.md:3"])
    assert cited == {("Alpha", 0), ("Alpha", 1), ("Beta", 1)}
    assert support_precision(cited, p.supporting_facts) == pytest.approx(2 / 3)


def test_a_heading_a_tool_a_foreign_file_and_lines_past_the_end_cite_no_sentence() -> None:
    p = problem({"Alpha": 2}, gold=(("Alpha", 0),))
    cited = cited_facts(p, ["docs:01-Alpha.md:1", "tool:calc", "docs:notes.md:2-3", "docs:01-Alpha.md:4-9"])
    assert cited == set()
    assert support_precision(cited, p.supporting_facts) is None




def test_a_problem_without_gold_supporting_facts_has_no_precision() -> None:
    p = problem({"Alpha": 2}, gold=())
    assert support_precision(cited_facts(p, ["docs:01-Alpha.md:2"]), p.supporting_facts) is None
