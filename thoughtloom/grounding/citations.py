"""Citations in a thought, checked against the knowledge base: the cited document must be there and
the cited lines must support the sentence that cites them.

A citation names a document of the `--knowledge` folder and its lines, in the research flow's form
(`[docs:notes.md:3-4]`, `docs:notes.md:3`) or as a file name with an indexed ending
(`[notes.md:3]`, `(notes.md:3-4)`, `notes.md:3`). It backs the sentence it stands in; a citation
after a sentence's full stop ("... at sea level. [notes.md:5]") backs the sentence before it.

Each citation is checked in three steps, with the knowledge base's own index and the research
grounder's judge (grounding/knowledge_check.py), so "supports" means here what it means for a claim
looked up in the documents:

1. the document: `KnowledgeBase.document_path` (the exact path, or the one document whose path
   ends with the cited one) - else NO_SOURCE (a made-up source);
2. the lines: `KnowledgeBase.lines` - else NO_LINES (the document has no text there);
3. the passage against the sentence: `judge_passage` - SUPPORTS, CONTRADICTS or UNRELATED (the
   cited lines do not say it, by the judge's lexical rule).

Only SUPPORTS is a valid citation. `CitationGrounder` wraps a claim grounder (the research
grounder): the claims are judged without the citation marks, the citations are checked, and the
two are merged into one result whose `details["citation_check"]` holds every check (`loom solve
--json`, under `grounding`). An invalid citation fails the thought; when citations are required
(the research_synthesis profile's `require_citations`), a thought with a claim that cites nothing
is not verified, whatever the documents say of the claim.
"""

from __future__ import annotations

import asyncio
import re
import sqlite3
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from .claims import extract_claims, sentence_spans
from .knowledge import EXTENSIONS, KnowledgeBase, KnowledgeBaseError
from .knowledge_check import (
    LEXICAL_CEILING,
    SUPPORT_COVERAGE,
    Verdict,
    analyse_claim,
    judge_passage,
)
from .types import Citation, Grounder, GroundingResult, Thought, join_evidence

_ENDINGS = "|".join(e.lstrip(".") for e in EXTENSIONS)
#: One citation: `docs:FILE:A[-B]` (any file name), or `FILE.md:A[-B]` (a name with an indexed ending).
CITATION = re.compile(
    r"(?<![\w/.-])(?:docs:(?P<doc>[^\s:\[\]()]+)|(?P<file>(?:[\w.-]+/)*[\w-][\w.-]*\.(?:" + _ENDINGS + r"))):"
    r"(?P<start>\d+)(?:\s*[-–]\s*(?P<end>\d+))?(?![\w.])",
    re.IGNORECASE,
)
# What is left of a bracket that held only citations: "[]", "(; )".
_EMPTY_BRACKETS = re.compile(r"\s*[\[(]\s*(?:[,;]\s*)*[\])]")
_SPACE_BEFORE_STOP = re.compile(r"\s+([.,;:!?])")


@dataclass(frozen=True, slots=True)
class Reference:
    """A citation as written: the document it names and its lines (1-based, inclusive)."""

    text: str
    path: str
    line_start: int
    line_end: int


def parse_reference(text: str) -> Reference | None:
    """One citation string (`docs:notes.md:3-4`, `notes.md:3`) read, or None when it names no document lines."""
    found = CITATION.fullmatch(text.strip())
    return _reference(found) if found is not None else None


def _reference(m: re.Match[str]) -> Reference:
    start = int(m["start"])
    end = int(m["end"]) if m["end"] else start
    return Reference(m.group(0), m["doc"] or m["file"], min(start, end), max(start, end))


def find_references(text: str) -> list[Reference]:
    """Every citation in a text, in order."""
    return [_reference(m) for m in CITATION.finditer(text)]


def strip_citations(text: str) -> str:
    """The text without its citation marks (and the brackets that held only them)."""
    plain = CITATION.sub("", text)
    emptied = _EMPTY_BRACKETS.sub("", plain)
    while emptied != plain:  # "([a.md:1])" leaves "()" once its "[]" is gone
        plain, emptied = emptied, _EMPTY_BRACKETS.sub("", emptied)
    return _SPACE_BEFORE_STOP.sub(r"\1", plain)


def cited_sentences(text: str) -> list[tuple[str, tuple[Reference, ...]]]:
    """(sentence without citation marks, the citations backing it) for every sentence that has either."""
    out: list[tuple[str, tuple[Reference, ...]]] = []
    for start, end in sentence_spans(text):
        chunk = text[start:end]
        matches = list(CITATION.finditer(chunk))
        # "... at sea level. [notes.md:5] Ice ...": citations before a sentence's first word back the one before it.
        leading = [m for m in matches if not any(ch.isalnum() for ch in strip_citations(chunk[: m.start()]))]
        if leading and out:
            before, earlier = out[-1]
            out[-1] = (before, (*earlier, *(_reference(m) for m in leading)))
            matches = matches[len(leading):]
        sentence = " ".join(strip_citations(chunk).split())
        if any(ch.isalnum() for ch in sentence):
            out.append((sentence, tuple(_reference(m) for m in matches)))
    return out


class CitationStatus(StrEnum):
    """What checking one citation found."""

    SUPPORTS = "supports"  # the cited lines say what the sentence says
    CONTRADICTS = "contradicts"  # they say otherwise
    UNRELATED = "unrelated"  # they do not say it
    NO_LINES = "no_lines"  # the document has no text at those lines
    NO_SOURCE = "no_source"  # no such document in the knowledge base


@dataclass(frozen=True, slots=True)
class CitationCheck:
    """One citation checked: what it backs, what was found at the cited place, and why that verdict."""

    ref: str  # as written
    claim: str  # the sentence it backs, without citation marks
    status: CitationStatus
    reason: str
    passage: Citation | None = None  # the cited lines as indexed (the judged sentence of them when judged)
    coverage: float = 0.0

    @property
    def valid(self) -> bool:
        """True when the cited lines support the sentence."""
        return self.status is CitationStatus.SUPPORTS

    @property
    def certainty(self) -> float:
        """How sure the check is that an invalid citation is invalid: a missing source is certain, a lexical verdict is
        not."""
        if self.status in (CitationStatus.NO_SOURCE, CitationStatus.NO_LINES):
            return 1.0
        if self.status is CitationStatus.CONTRADICTS:
            return LEXICAL_CEILING * self.coverage
        if self.status is CitationStatus.UNRELATED:
            return LEXICAL_CEILING / 2  # not saying it is weaker evidence than saying otherwise
        return 0.0

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready summary."""
        return {
            "ref": self.ref,
            "claim": self.claim,
            "status": self.status.value,
            "valid": self.valid,
            "source": self.passage.ref() if self.passage is not None else None,
            "coverage": round(self.coverage, 3),
            "reason": self.reason,
        }


@dataclass(frozen=True, slots=True)
class CitationReport:
    """Every citation of a thought checked, and the claims that cite nothing."""

    checks: tuple[CitationCheck, ...]
    uncited: tuple[str, ...]
    required: bool

    @property
    def valid(self) -> int:
        """Citations whose lines support their sentence."""
        return sum(1 for c in self.checks if c.valid)

    @property
    def invalid(self) -> tuple[CitationCheck, ...]:
        """Citations that do not hold (no source, no such lines, a passage that does not support the sentence)."""
        return tuple(c for c in self.checks if not c.valid)

    @property
    def missing(self) -> bool:
        """True when citations are required and some claim cites nothing."""
        return self.required and bool(self.uncited)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready summary."""
        return {
            "required": self.required,
            "cited": len(self.checks),
            "valid": self.valid,
            "invalid": len(self.invalid),
            "uncited_claims": list(self.uncited),
            "checks": [c.to_dict() for c in self.checks],
        }


class CitationChecker:
    """Checks a text's citations against a `KnowledgeBase` (see the module docstring)."""

    def __init__(self, kb: KnowledgeBase, *, min_coverage: float | None = None) -> None:
        """Check against `kb`; min_coverage: as the research grounder's (None: SUPPORT_COVERAGE)."""
        self.kb = kb
        self.min_coverage = SUPPORT_COVERAGE if min_coverage is None else min_coverage

    def check(self, text: str, *, required: bool = False) -> CitationReport:
        """Every citation in `text` checked, and (when `required`) which of its claims cite nothing."""
        checks: list[CitationCheck] = []
        cited_claims: set[str] = set()
        for sentence, refs in cited_sentences(text):
            if not refs:
                continue
            claims = extract_claims(sentence)
            cited_claims.update(c.lower() for c in claims)
            claim = " ".join(claims) or sentence
            checks.extend(self.check_one(ref, claim) for ref in refs)
        uncited = tuple(c for c in extract_claims(strip_citations(text)) if c.lower() not in cited_claims)
        return CitationReport(tuple(checks), uncited, required)

    def check_one(self, ref: Reference, claim: str) -> CitationCheck:
        """One citation of `claim` checked: the document, the lines, then what they say of the claim."""
        path = self.kb.document_path(ref.path)
        if path is None:
            return CitationCheck(ref.text, claim, CitationStatus.NO_SOURCE,
                                 f"no document {ref.path} in the knowledge base")
        passage = self.kb.lines(path, ref.line_start, ref.line_end)
        if passage is None:
            return CitationCheck(ref.text, claim, CitationStatus.NO_LINES,
                                 f"{path} has no text at lines {ref.line_start}-{ref.line_end}")
        judged = judge_passage(analyse_claim(claim), passage, self.min_coverage)
        status = {Verdict.SUPPORTS: CitationStatus.SUPPORTS, Verdict.CONTRADICTS: CitationStatus.CONTRADICTS,
                  Verdict.UNRELATED: CitationStatus.UNRELATED}[judged.verdict]
        return CitationCheck(ref.text, claim, status, f"{judged.citation.ref()} {judged.reason}",
                             judged.citation, judged.coverage)


class CitationGrounder:
    """A claim grounder with the thought's citations checked too: one result, the checks in its details."""

    def __init__(self, inner: Grounder, checker: CitationChecker, *, required: bool = False) -> None:
        """Judge claims with `inner` (on the text without citation marks) and citations with `checker`;
        required: a claim that cites nothing keeps the thought from being verified."""
        self.inner = inner
        self.checker = checker
        self.required = required
        self.name = inner.name

    def can_ground(self, thought: Thought) -> bool:
        """True when the thought cites something or the inner grounder can test its claims."""
        return bool(find_references(thought.content)) or self.inner.can_ground(_plain(thought))

    async def ground(self, thought: Thought) -> GroundingResult:
        """The inner grounder's result on the claims, merged with the citation checks."""
        plain = _plain(thought)
        result = await self.inner.ground(plain) if self.inner.can_ground(plain) else None
        if result is None:
            result = GroundingResult(self.name, False, None, "", 0.0)
        try:
            # SQLite and the judging are synchronous; keep them off the event loop.
            report = await asyncio.to_thread(self.checker.check, thought.content, required=self.required)
        except (sqlite3.Error, KnowledgeBaseError) as exc:
            return replace(
                result, evidence=join_evidence([result.evidence, f"citations: the knowledge base failed: {exc}"])
            )
        return merge(result, report)


def _plain(thought: Thought) -> Thought:
    return replace(thought, content=strip_citations(thought.content))


def merge(result: GroundingResult, report: CitationReport) -> GroundingResult:
    """A claim grounder's result with a citation report folded in.

    verified: False when a citation does not hold or the claims failed; True only when the claims
    were verified (or there were none and every citation holds) and no required citation is
    missing; else None. The graded outcome averages the claims' with the share of valid citations.
    """
    invalid = report.invalid
    cited = len(report.checks)
    if not cited and not report.required:
        return result  # nothing cited, nothing required: the claims' result as it was
    claims_ok = result.verified if result.grounded else (True if cited else None)
    if invalid or claims_ok is False:
        verified: bool | None = False
    elif claims_ok is True and not report.missing:
        verified = True
    else:
        verified = None
    share = report.valid / cited if cited else None
    parts = [p for p in (result.outcome, share) if p is not None]
    score = sum(parts) / len(parts) if parts else None
    confidence = max([result.confidence, *(c.certainty for c in invalid)])
    summary = [
        f"citations: {cited} checked: {report.valid} valid, {len(invalid)} invalid"
        + (f"; {len(report.uncited)} claim{'s' if len(report.uncited) != 1 else ''} cite nothing"
           + (" (citations are required)" if report.required else "") if report.uncited else ""),
        *(f'{c.status.value}: {c.ref} for "{c.claim}" - {c.reason}' for c in invalid),
    ]
    claims = [result.evidence] if result.evidence else []
    # The first line is what the progress line shows: the citations when they are why the thought failed.
    lines = [*summary, *claims] if invalid or (report.missing and verified is None) else [*claims, *summary]
    passages: dict[tuple[str, int, int], Citation] = {(c.path, c.line_start, c.line_end): c for c in result.citations}
    for check in report.checks:
        if check.valid and check.passage is not None:
            p = check.passage
            passages.setdefault((p.path, p.line_start, p.line_end), p)
    return replace(
        result,
        grounded=result.grounded or bool(cited) or report.required,
        verified=verified,
        evidence=join_evidence(lines),
        confidence=confidence if verified is not None else result.confidence,
        score=score,
        passed=result.passed + report.valid,
        failed=result.failed + len(invalid),
        citations=tuple(passages.values()),
        details={**result.details, "citation_check": report.to_dict()},
    )



#: Passages of the documents posed with a problem whose claims must cite them.
SOURCES_SHOWN = 5
#: Characters of a passage shown as a source.
SOURCE_CHARS = 300


def with_sources(problem: str, kb: KnowledgeBase, limit: int = SOURCES_SHOWN) -> str:
    """The problem followed by the passages the documents hold for it, each labelled as it is cited (`[notes.md:3-4]`).

    A model cannot cite what it never saw: a run that requires citations poses the problem this way,
    so every prompt built from the problem shows the sources and how to cite them. Unchanged when no
    passage matches.
    """
    passages = kb.search(problem, limit=limit)
    if not passages:
        return problem
    lines = []
    for p in passages:
        text = " ".join(p.shown_text().split())
        lines.append(f"[{p.ref()}] {text if len(text) <= SOURCE_CHARS else text[: SOURCE_CHARS - 1] + '…'}")
    return (f"{problem.rstrip()}\n\nSources (end each claim with the source it rests on, as [file:line]):\n"
            + "\n".join(lines))
