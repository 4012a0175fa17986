"""Merging hypotheses: what a merge reads (candidates), and the two merges that need no model (best_first,
weighted_vote).

The third strategy, synthesis, asks the synthesizer (the model, or the caller's function) and
is in explorer.py; its confidence is still read from the evidence, through `agreeing`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ...tasks.research import answer_key
from .records import Evidence, Hypothesis, Synthesis


@dataclass(frozen=True, slots=True)
class Candidate:
    """A hypothesis, or an earlier synthesis, standing for a position a merge weighs."""

    label: str
    node_id: int
    content: str
    answer: str | None
    confidence: float
    #: The hypotheses behind it (itself, for a hypothesis).
    sources: tuple[int, ...]
    evidence: tuple[Evidence, ...] = ()
    #: Citations an earlier synthesis carries.
    citations: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        """What it answers, normalised (two candidates with the same key take the same position)."""
        return answer_key(self.answer or self.content)

    @classmethod
    def of_hypothesis(cls, h: Hypothesis) -> Candidate:
        """A hypothesis as a candidate."""
        return cls(f"H{h.id}", h.id, h.content, h.answer, h.confidence, (h.id,), tuple(h.evidence))

    @classmethod
    def of_synthesis(cls, s: Synthesis) -> Candidate:
        """An earlier synthesis as a candidate."""
        assert s.node_id is not None
        return cls(f"S{s.node_id}", s.node_id, s.content, s.answer, s.confidence, s.sources, (), s.citations)


def citations(members: Sequence[Candidate]) -> tuple[str, ...]:
    """The documents and tools behind the members: supporting evidence first, then contradicting; no model claims."""
    out: list[str] = []
    for supports in (True, False):
        for c in members:
            for e in c.evidence:
                if e.supports is supports and e.cited and e.source not in out:
                    out.append(e.source)
    for c in members:
        out.extend(s for s in c.citations if s not in out)
    return tuple(out)


def all_sources(members: Sequence[Candidate]) -> tuple[int, ...]:
    """The hypothesis ids behind the members, each once, in order."""
    out: list[int] = []
    for c in members:
        out.extend(s for s in c.sources if s not in out)
    return tuple(out)


def best_first(members: Sequence[Candidate]) -> Synthesis:
    """The most confident member as it stands (ties: the earliest)."""
    winner = max(members, key=lambda c: (c.confidence, -c.node_id))
    return Synthesis(winner.content, winner.confidence, winner.sources, "best_first", citations([winner]),
                     winner.answer)


def weighted_vote(members: Sequence[Candidate]) -> Synthesis:
    """The position with the most confidence behind it; its confidence is that share over all members.

    Members with the same answer vote together; the winner's content is its most confident
    member's, and the confidence is the winner's summed confidence divided by the number of members
    (so agreement of confident members scores high, a split field low).
    """
    weights: dict[str, float] = {}
    for c in members:
        weights[c.key] = weights.get(c.key, 0.0) + c.confidence
    top = max(weights.values())
    key = next(c.key for c in members if weights[c.key] == top)  # ties: the position named first
    group = [c for c in members if c.key == key]
    lead = max(group, key=lambda c: (c.confidence, -c.node_id))
    confidence = min(1.0, top / len(members))
    return Synthesis(lead.content, confidence, all_sources(members), "weighted_vote",
                     citations(group) + tuple(s for s in citations(members) if s not in citations(group)), lead.answer)


def agreeing(answer: str, members: Sequence[Candidate]) -> list[Candidate]:
    """Members whose answer is the same as `answer` (or contains it, or is contained by it)."""
    key = answer_key(answer)
    if not key:
        return []
    return [c for c in members if c.key and (c.key == key or f" {key} " in f" {c.key} " or f" {c.key} " in f" {key} ")]
