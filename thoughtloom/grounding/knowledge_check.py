"""Knowledge check: the claims in a thought checked against a local knowledge base (the research grounder).

The thought is split into claims (`claims.extract_claims`); each claim is looked up in the
`KnowledgeBase` (one FTS5 query, the best `passages_per_claim` passages) and every passage is
judged by a transparent lexical rule. No model is involved, so the rule is cheap, deterministic
and explainable, and also blind to paraphrase: it can only confirm what a document says in
roughly the same words.

Judging a passage against a claim
---------------------------------
The claim's *terms* are the stems of its content words (stopwords, hedges and negations
dropped; numbers are kept apart). The passage is cut into sentences, and the sentence (or pair
of adjacent sentences, when the pair covers strictly more) with the highest *coverage* is judged:

    coverage = claim terms found in the sentence / claim terms

where a term also counts as found when the sentence has one of its opposites (ANTONYMS), since
"prices decrease" is about the same thing as "prices increase". Then:

- coverage < SUPPORT_COVERAGE (or the grounder's `min_coverage`: a profile's
  cross_reference_threshold): UNRELATED (the passage is about something else).
- *polarity*: a side is negated when the first content word or number after a negation ("not",
  "never", "isn't", ...; within NEGATION_SCOPE tokens) is one of the claim's terms or numbers,
  so "boils at 100, not 90" negates 90 but not "boils". The sentence *flips* the claim when
  exactly one of: the negation differs between claim and sentence; the sentence has the
  opposite of a claim term that it does not itself contain ("decrease" for "increase").
- *numbers*: a number's context is the content words within NUMBER_WINDOW tokens of it, not
  reaching past another number ("beam 5, depth 3": the 3 is about depth). A claim number is
  stated when the sentence has the same value with a context word in common (or without one,
  if no other number there shares its context). The numbers conflict when a claim number is not
  stated and the sentence has a different number sharing its context ("boils at 90 degrees" vs
  "boils at 100 degrees"). If all claim numbers are stated they agree, else they are unknown.
- numbers agree: CONTRADICTS if the sentence flips the claim, else SUPPORTS.
- numbers conflict: CONTRADICTS when neither side is negated nor flipped by an opposite ("not 90"
  against "100" is no contradiction), else UNRELATED.
- numbers unknown: UNRELATED (the passage does not say what the claim's number claims).

The strength of a SUPPORTS or CONTRADICTS judgement is its coverage.

Judging a claim
---------------
A claim is *supported* when its strongest supporting passage is stronger than its strongest
contradicting one, *contradicted* in the reverse case, and *unverified* when nothing decided
or the two tie. The claim's strength is LEXICAL_CEILING x (winner - loser / 2): word overlap is
never certainty, and conflicting passages lower it. Unverified claims have strength 0.

The thought: verified is True when every claim is supported, False when any is contradicted,
else None (grounded all the same, score = supported / claims); confidence is the mean claim
strength; cost is the number of index lookups.
"""

from __future__ import annotations

import asyncio
import itertools
import sqlite3
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from thoughtloom.grounding.claims import (
    OPPOSITES,
    extract_claims,
    is_content_word,
    is_negation,
    parse_number,
    sentence_spans,
    stem,
    tokenize,
)
from thoughtloom.grounding.knowledge import KnowledgeBase, KnowledgeBaseError
from thoughtloom.grounding.types import (
    Citation,
    GroundingResult,
    Thought,
    join_evidence,
    not_grounded,
)

#: A passage must contain at least this fraction of the claim's terms to say anything about it.
SUPPORT_COVERAGE = 2 / 3
#: A negation applies to a term or number at most this many tokens after it.
NEGATION_SCOPE = 3
#: Content words this many tokens either side of a number say what the number measures.
NUMBER_WINDOW = 3
#: The highest confidence a lexical judgement can have.
LEXICAL_CEILING = 0.9
#: How much of a passage sentence the evidence quotes.
QUOTE_CHARS = 120


class Verdict(StrEnum):
    """What one passage says about one claim."""

    SUPPORTS = "supports"
    CONTRADICTS = "contradicts"
    UNRELATED = "unrelated"


class ClaimStatus(StrEnum):
    """What the knowledge base says about one claim."""

    SUPPORTED = "supported"
    CONTRADICTED = "contradicted"
    UNVERIFIED = "unverified"


NumberFact = tuple[float, frozenset[str]]  # a stated number and the stems of the words around it


@dataclass(frozen=True, slots=True)
class Claim:
    """A claim reduced to what the judge compares: term stems, numbers, polarity."""

    text: str
    terms: frozenset[str]
    numbers: tuple[NumberFact, ...]
    negated: bool
    words: dict[str, str] = field(compare=False)  # stem -> the claim's word, for readable reasons


def _context(tokens: Sequence[str], i: int, step: int) -> Iterator[str]:
    """Up to NUMBER_WINDOW tokens from position i in direction `step`, stopping at another number."""
    for j in range(i + step, i + step * (NUMBER_WINDOW + 1), step):
        if not 0 <= j < len(tokens) or parse_number(tokens[j]) is not None:
            return  # in "beam 5, depth 3" the 3 is about depth, not beam
        yield tokens[j]


def _numbers(tokens: Sequence[str]) -> tuple[NumberFact, ...]:
    facts: list[NumberFact] = []
    for i, token in enumerate(tokens):
        value = parse_number(token)
        if value is None:
            continue
        window = [*_context(tokens, i, -1), *_context(tokens, i, 1)]
        facts.append((value, frozenset(stem(w) for w in window if is_content_word(w))))
    return tuple(facts)


def _negates(tokens: Sequence[str], relevant: set[str], values: set[float]) -> bool:
    """True when the first content word or number after a negation is a relevant term or number.

    Only that first word is negated, and only within NEGATION_SCOPE tokens ("is not really
    removed"), so "caching never collapses sample diversity" does not negate "sample".
    """
    for i, token in enumerate(tokens):
        if not is_negation(token):
            continue
        for nxt in tokens[i + 1 : i + 1 + NEGATION_SCOPE]:
            value = parse_number(nxt)
            if value is not None:
                if value in values:
                    return True
                break
            if is_content_word(nxt):
                if stem(nxt) in relevant:
                    return True
                break
    return False


def analyse_claim(text: str) -> Claim:
    """Reduce a claim to its term stems, its numbers and whether it is negated."""
    tokens = tokenize(text)
    words: dict[str, str] = {}
    for token in tokens:
        if is_content_word(token):
            words.setdefault(stem(token), token)
    numbers = _numbers(tokens)
    values = {value for value, _ in numbers}
    return Claim(
        text=text,
        terms=frozenset(words),
        numbers=numbers,
        negated=_negates(tokens, set(words), values),
        words=words,
    )


@dataclass(frozen=True, slots=True)
class Judgement:
    """What one passage says about one claim, and why; `citation` is narrowed to the judged sentence."""

    verdict: Verdict
    coverage: float
    reason: str
    citation: Citation


def _fmt(value: float) -> str:
    return str(int(value)) if value.is_integer() else repr(value)


def _coverage(claim: Claim, stems: set[str]) -> float:
    if not claim.terms:
        return 0.0
    found = sum(1 for t in claim.terms if t in stems or OPPOSITES.get(t, frozenset()) & stems)
    return found / len(claim.terms)


def _opposite(claim: Claim, stems: set[str], tokens: Sequence[str]) -> str | None:
    """ "'decreases' where the claim says 'increase'" when the sentence uses an opposite of a claim term."""
    for term in sorted(claim.terms - stems):
        for opposite in sorted(OPPOSITES.get(term, frozenset()) & (stems - claim.terms)):
            word = next((t for t in tokens if stem(t) == opposite), opposite)
            return f"'{word}' where the claim says '{claim.words.get(term, term)}'"
    return None


def _number_conflict(claim: Claim, facts: tuple[NumberFact, ...]) -> tuple[str, float, float] | None:
    """None when the passage states every claim number, else ("conflict" | "unknown", claim number, passage number).

    A claim number is stated when the passage has the same value with a context word in common
    (or anywhere, when no other number there shares its context); it conflicts with a different
    passage number that shares the most context words with it.
    """
    outcome: tuple[str, float, float] | None = None
    for value, around in claim.numbers:
        same = [other_around for other, other_around in facts if other == value]
        if same and (not around or any(around & a for a in same)):
            continue
        rivals = [(len(around & a), other) for other, a in facts if other != value and around & a]
        if rivals:
            return ("conflict", value, max(rivals)[1])
        if not same and outcome is None:
            outcome = ("unknown", value, float("nan"))
    return outcome


def judge_passage(claim: Claim, passage: Citation, min_coverage: float = SUPPORT_COVERAGE) -> Judgement:
    """Judge whether `passage` supports, contradicts or is unrelated to `claim` (see the module docstring).

    min_coverage: the share of the claim's terms a sentence must cover to say anything about it.
    """
    text = passage.text
    spans = sentence_spans(text) or [(0, len(text))]
    analysed = []
    for start, end in spans:
        tokens = tokenize(text[start:end])
        analysed.append((start, end, tokens, {stem(t) for t in tokens if is_content_word(t)}))

    best_start, best_end, tokens, stems = analysed[0]
    best = _coverage(claim, stems)
    for start, end, toks, sts in analysed[1:]:
        cov = _coverage(claim, sts)
        if cov > best:
            best, best_start, best_end, tokens, stems = cov, start, end, toks, sts
    for (start, _, toks_a, sts_a), (_, end, toks_b, sts_b) in itertools.pairwise(analysed):
        cov = _coverage(claim, sts_a | sts_b)
        if cov > best:  # a pair only when it covers strictly more, so that a pronoun's antecedent counts
            best, best_start, best_end, tokens, stems = cov, start, end, [*toks_a, *toks_b], sts_a | sts_b

    first_line = passage.line_start + text.count("\n", 0, best_start)
    last_line = passage.line_start + text.count("\n", 0, best_end)
    citation = replace(
        passage, line_start=first_line, line_end=last_line, text=" ".join(text[best_start:best_end].split())
    )
    found = round(best * len(claim.terms))
    covered = f"covers {found}/{len(claim.terms)} terms"
    if best < min_coverage:
        return Judgement(Verdict.UNRELATED, best, covered, citation)

    relevant = set(claim.terms).union(*(OPPOSITES.get(t, frozenset()) for t in claim.terms))
    values = {value for value, _ in claim.numbers}
    negated = _negates(tokens, relevant, values)
    opposite = _opposite(claim, stems, tokens)
    flipped = (negated != claim.negated) != (opposite is not None)
    numbers = _number_conflict(claim, _numbers(tokens))

    if numbers is None:
        if not flipped:
            agree = "; numbers match" if claim.numbers else ""
            return Judgement(Verdict.SUPPORTS, best, covered + agree, citation)
        why = (
            f"says {opposite}"
            if opposite is not None
            else "negates it"
            if negated
            else "affirms what the claim negates"
        )
        return Judgement(Verdict.CONTRADICTS, best, f"{covered} but {why}", citation)
    status, mine, theirs = numbers
    if status == "unknown":
        return Judgement(Verdict.UNRELATED, best, f"{covered} but does not state {_fmt(mine)}", citation)
    differs = f"says {_fmt(theirs)} where the claim says {_fmt(mine)}"
    if negated or claim.negated or opposite:
        # "does not boil at 90" against "boils at 100" agrees; a negation makes numbers inconclusive.
        return Judgement(Verdict.UNRELATED, best, f"{covered}; {differs}, but under a negation", citation)
    return Judgement(Verdict.CONTRADICTS, best, f"{covered} but {differs}", citation)


@dataclass(frozen=True, slots=True)
class ClaimVerdict:
    """What the knowledge base says about one claim, with the passages that say it."""

    claim: str
    status: ClaimStatus
    strength: float  # 0..LEXICAL_CEILING
    coverage: float  # the best coverage of any retrieved passage
    reason: str
    supporting: tuple[Judgement, ...] = ()
    contradicting: tuple[Judgement, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready summary with `file:line` refs."""
        return {
            "claim": self.claim,
            "verdict": self.status.value,
            "supporting": [j.citation.ref() for j in self.supporting],
            "contradicting": [j.citation.ref() for j in self.contradicting],
            "coverage": round(self.coverage, 3),
            "reason": self.reason,
        }


def _distinct(judgements: list[Judgement]) -> tuple[Judgement, ...]:
    # Overlapping windows can yield the same sentence twice; keep the strongest once.
    seen: dict[tuple[str, int, int], Judgement] = {}
    for j in sorted(judgements, key=lambda j: -j.coverage):
        seen.setdefault((j.citation.path, j.citation.line_start, j.citation.line_end), j)
    return tuple(seen.values())


def _quote(citation: Citation) -> str:
    text = citation.text
    return f'"{text}"' if len(text) <= QUOTE_CHARS else f'"{text[: QUOTE_CHARS - 1]}…"'


def judge_claim(claim: str, passages: Sequence[Citation], min_coverage: float = SUPPORT_COVERAGE) -> ClaimVerdict:
    """Judge a claim from the passages retrieved for it (see the module docstring; min_coverage as for
    judge_passage)."""
    profile = analyse_claim(claim)
    judgements = [judge_passage(profile, p, min_coverage) for p in passages]
    supporting = _distinct([j for j in judgements if j.verdict is Verdict.SUPPORTS])
    contradicting = _distinct([j for j in judgements if j.verdict is Verdict.CONTRADICTS])
    coverage = max((j.coverage for j in judgements), default=0.0)
    pro = supporting[0].coverage if supporting else 0.0
    con = contradicting[0].coverage if contradicting else 0.0
    if pro > con:
        status, strength = ClaimStatus.SUPPORTED, LEXICAL_CEILING * (pro - con / 2)
        lead = supporting[0]
        reason = f"{lead.citation.ref()} {lead.reason}"
    elif con > pro:
        status, strength = ClaimStatus.CONTRADICTED, LEXICAL_CEILING * (con - pro / 2)
        lead = contradicting[0]
        reason = f"{lead.citation.ref()} {lead.reason}: {_quote(lead.citation)}"
    else:
        status, strength = ClaimStatus.UNVERIFIED, 0.0
        if supporting:
            reason = (
                f"passages disagree: {supporting[0].citation.ref()} supports it, "
                f"{contradicting[0].citation.ref()} contradicts it"
            )
        elif not passages:
            reason = "no passage mentions it"
        else:
            closest = max(judgements, key=lambda j: j.coverage)
            reason = f"no passage decides it; closest {closest.citation.ref()} {closest.reason}"
    return ClaimVerdict(claim, status, strength, coverage, reason, supporting, contradicting)


class ResearchGrounder:
    """Checks the claims in a thought against a `KnowledgeBase` and cites the passages it used."""

    def __init__(self, kb: KnowledgeBase, *, name: str = "research", passages_per_claim: int = 5,
                 min_coverage: float | None = None) -> None:
        """Ground against `kb`, judging the best `passages_per_claim` passages for each claim.

        min_coverage: the share of a claim's terms a passage must cover to confirm or refute it (a
        profile's cross_reference_threshold; None: SUPPORT_COVERAGE).
        """
        if passages_per_claim < 1:
            raise ValueError(f"passages_per_claim must be at least 1, got {passages_per_claim}")
        if min_coverage is not None and not 0.0 < min_coverage <= 1.0:
            raise ValueError(f"min_coverage must be in (0, 1], got {min_coverage}")
        self.kb = kb
        self.name = name
        self.passages_per_claim = passages_per_claim
        self.min_coverage = SUPPORT_COVERAGE if min_coverage is None else min_coverage

    def can_ground(self, thought: Thought) -> bool:
        """True when the thought states at least one checkable claim."""
        return bool(extract_claims(thought.content))

    async def ground(self, thought: Thought) -> GroundingResult:
        """Check every claim of the thought; never raises for a claim that fails, only reports it."""
        # SQLite and the judging are synchronous; keep them off the event loop.
        return await asyncio.to_thread(self.check, thought.content)

    def check(self, text: str) -> GroundingResult:
        """The synchronous core of `ground`, for a thought's text."""
        started = time.perf_counter()
        claims = extract_claims(text)
        if not claims:
            return not_grounded(self.name, "research: no checkable claim in the thought")
        verdicts: list[ClaimVerdict] = []
        lookups = 0
        try:
            for claim in claims:
                passages = self.kb.search(claim, limit=self.passages_per_claim)
                lookups += 1
                verdicts.append(judge_claim(claim, passages, self.min_coverage))
            documents = self.kb.documents
        except (sqlite3.Error, KnowledgeBaseError) as exc:
            return not_grounded(self.name, f"research: the knowledge base failed: {exc}")
        elapsed_ms = int((time.perf_counter() - started) * 1000)
        return self._result(verdicts, lookups, documents, elapsed_ms)

    def _result(
        self, verdicts: list[ClaimVerdict], lookups: int, documents: int, elapsed_ms: int
    ) -> GroundingResult:
        total = len(verdicts)
        supported = sum(1 for v in verdicts if v.status is ClaimStatus.SUPPORTED)
        contradicted = sum(1 for v in verdicts if v.status is ClaimStatus.CONTRADICTED)
        verified = True if supported == total else False if contradicted else None
        citations: dict[tuple[str, int, int], Citation] = {}
        for v in verdicts:
            for j in (*v.supporting, *v.contradicting):
                citations.setdefault((j.citation.path, j.citation.line_start, j.citation.line_end), j.citation)
        unverified = total - supported - contradicted
        lines = [
            f"research: {total} claim{'s' if total != 1 else ''} checked against {documents} "
            f"document{'s' if documents != 1 else ''}: "
            + f"{supported} supported, {contradicted} contradicted, {unverified} unverified"
        ]
        lines += [f'{v.status.value}: "{v.claim}" - {v.reason}' for v in verdicts]
        return GroundingResult(
            grounder=self.name,
            grounded=True,
            verified=verified,
            evidence=join_evidence(lines),
            confidence=sum(v.strength for v in verdicts) / total,
            elapsed_ms=elapsed_ms,
            cost=lookups,
            score=supported / total,
            passed=supported,
            failed=contradicted,
            citations=tuple(citations.values()),
            details={"claims": [v.to_dict() for v in verdicts], "documents": documents},
        )
