"""Consistency: a thought checked against the earlier steps of its own path (the design profile's check_consistency).

Each claim of the new thought (`claims.extract_claims`) is judged against every earlier step as a
passage, by the research grounder's lexical judge (`knowledge_check.judge_claim`): a step that says the
opposite, negates it or gives another number for the same thing contradicts it. No model is
involved, and agreement proves nothing (a path can be consistently wrong), so the grounder only
ever fails a thought: verified is False when a claim contradicts an earlier step, else None
(inconclusive, the score is kept).
"""

from __future__ import annotations

import time

from .claims import extract_claims
from .knowledge_check import SUPPORT_COVERAGE, ClaimStatus, judge_claim
from .types import Citation, GroundingResult, Thought, join_evidence, not_grounded


class ConsistencyGrounder:
    """Fails a thought whose claims contradict an earlier step of its path."""

    def __init__(self, *, name: str = "consistency", min_coverage: float | None = None) -> None:
        """min_coverage: the share of a claim's terms a step must cover to contradict it (None: the judge's)."""
        self.name = name
        self.min_coverage = SUPPORT_COVERAGE if min_coverage is None else min_coverage

    def can_ground(self, thought: Thought) -> bool:
        """True when there are earlier steps and the thought states a checkable claim."""
        return bool(thought.steps) and bool(extract_claims(thought.content))

    async def ground(self, thought: Thought) -> GroundingResult:
        """Judge every claim of the thought against the earlier steps (cheap and synchronous: no I/O)."""
        started = time.perf_counter()
        claims = extract_claims(thought.content)
        if not claims or not thought.steps:
            return not_grounded(self.name, "consistency: no claim, or no earlier step to check it against")
        # Each earlier step is a "document" of one line: step:N in the evidence.
        steps = [Citation("step", i, i, text) for i, text in enumerate(thought.steps, 1)]
        verdicts = [judge_claim(claim, steps, self.min_coverage) for claim in claims]
        conflicts = [v for v in verdicts if v.status is ClaimStatus.CONTRADICTED]
        elapsed_ms = int((time.perf_counter() - started) * 1000)
        details = {"claims": [v.to_dict() for v in verdicts], "steps": len(steps)}
        if not conflicts:
            return GroundingResult(
                self.name, True, None,
                f"consistency: {len(claims)} claim(s) against {len(steps)} earlier step(s): no contradiction",
                0.0, elapsed_ms=elapsed_ms, passed=0, details=details,
            )
        lines = [f"consistency: {len(conflicts)} of {len(claims)} claim(s) contradict an earlier step"]
        lines += [f'contradicted: "{v.claim}" - {v.reason}' for v in conflicts]
        return GroundingResult(
            self.name, True, False, join_evidence(lines),
            confidence=max(v.strength for v in conflicts), elapsed_ms=elapsed_ms,
            score=1.0 - len(conflicts) / len(claims), failed=len(conflicts), details=details,
        )
