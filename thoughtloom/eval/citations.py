"""Citations read as HotpotQA sentence ids: a corpus with one sentence per line, and supporting-fact precision.

The research lane writes each paragraph as a Markdown file: "# Title" on line 1, then sentence i
on line i + 2. The knowledge index cuts a file into paragraphs (lines between blank lines) and a
paragraph longer than WINDOW_LINES lines into overlapping windows of lines
(grounding/knowledge.py), and a docs citation names a passage's file and 1-based line range
("docs:03-Ed_Wood.md:2-4", or ":3" for one line). So every cited line is one sentence (or the
heading, which is no sentence), whatever window the index cut.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from ..grounding.citations import parse_reference
from .datasets import Problem

#: Line of sentence 0 in a paragraph's file (line 1 is its "# Title" heading).
FIRST_SENTENCE_LINE = 2
#: Characters of a title kept in its file name.
NAME_CHARS = 60

Fact = tuple[str, int]


def corpus_file(index: int, title: str) -> str:
    """The file name of the index-th paragraph (1-based): its number, then its title made safe for a path."""
    # The number keeps two paragraphs whose titles clean to the same name apart.
    name = re.sub(r"[^\w-]+", "_", title).strip("_")[:NAME_CHARS] or "untitled"
    return f"{index:02d}-{name}.md"


def sentence_files(problem: Problem) -> dict[str, str]:
    """File name -> text of the problem's paragraphs, one sentence per line under a "# Title" heading."""
    out = {}
    for i, (title, sentences) in enumerate(problem.sentences, 1):
        # A sentence is one line: a line break inside one would shift every sentence after it.
        lines = [f"# {' '.join(title.split())}", *(" ".join(s.split()) for s in sentences)]
        out[corpus_file(i, title)] = "\n".join(lines) + "\n"
    return out


def cited_facts(problem: Problem, citations: Iterable[str]) -> set[Fact]:
    """The (title, sentence id) pairs the docs citations cover in the problem's sentence files; other sources cite
    none."""
    titles = {corpus_file(i, title): (title, len(sentences))
              for i, (title, sentences) in enumerate(problem.sentences, 1)}
    out: set[Fact] = set()
    for citation in citations:
        # Read as the citation checker reads them (grounding/citations.py), so both mean the same lines.
        ref = parse_reference(citation)
        if ref is None or ref.path not in titles:
            continue  # a tool's result or a file of no paragraph: no sentence of the corpus
        title, count = titles[ref.path]
        for line in range(max(ref.line_start, FIRST_SENTENCE_LINE), ref.line_end + 1):
            if line - FIRST_SENTENCE_LINE < count:
                out.add((title, line - FIRST_SENTENCE_LINE))
    return out


def support_precision(cited: Iterable[Fact], gold: Sequence[Fact]) -> float | None:
    """|cited ∩ gold| / |cited|: how many of the cited sentences are supporting facts; None without a cited sentence or
    gold."""
    cited = set(cited)
    if not cited or not gold:
        return None  # a data file without supporting facts must not read as precision 0
    return len(cited & set(gold)) / len(cited)
