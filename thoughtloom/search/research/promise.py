"""Confidence from evidence, and promise = prior x information gain x parent track record / cost.

Every factor is computed from quantities the flow observes, and reported with the promise:
- prior: the hypothesis's confidence now (the brancher's before any evidence, else from evidence);
- information gain: the binary entropy of that confidence, in bits (1 when it could go either
  way, near 0 when the evidence has settled it): what exploring it further could still tell;
- parent track record: how well the evidence held up for its parent, (for + 1) / (for + against
  + 2), times 2, so a parent with no evidence gives 1 and one the evidence refuted gives less;
- cost: 1 + depth / depth_limit, since a deeper hypothesis is narrower and dearer to reach.
"""

from __future__ import annotations

import math
import re

from .records import Evidence, Hypothesis

#: How far one unit of evidence weight moves the log-odds of a hypothesis.
EVIDENCE_LOGIT = 2.0
#: Confidence never reaches 0 or 1 on evidence alone.
CONFIDENCE_FLOOR = 0.02
#: Information gain never quite reaches 0 (a settled hypothesis is still worth a look when nothing else is).
GAIN_FLOOR = 0.05
#: Hypotheses at least this similar (word overlap) say the same thing.
SAME_THING = 0.8


def clamp(value: float, low: float = CONFIDENCE_FLOOR, high: float = 1.0 - CONFIDENCE_FLOOR) -> float:
    """value kept within [low, high]."""
    return low if value < low else min(value, high)


def evidence_confidence(prior: float, evidence: list[Evidence]) -> float:
    """The default evaluator: the prior's log-odds moved by each piece of evidence's weight, for or against."""
    p = clamp(prior)
    logit = math.log(p / (1.0 - p))
    for e in evidence:
        logit += (EVIDENCE_LOGIT if e.supports else -EVIDENCE_LOGIT) * e.weight
    return clamp(1.0 / (1.0 + math.exp(-logit)))


def information_gain(confidence: float) -> float:
    """Binary entropy of the confidence, in bits, floored at GAIN_FLOOR."""
    p = clamp(confidence, 1e-9, 1 - 1e-9)
    return max(GAIN_FLOOR, -(p * math.log2(p) + (1 - p) * math.log2(1 - p)))


def track_record(parent: Hypothesis | None) -> float:
    """2 x (for + 1) / (for + against + 2) of the parent's evidence; 1 for the question's own hypotheses."""
    if parent is None or not parent.evidence:
        return 1.0
    pro, con = parent.balance()
    return 2.0 * (pro + 1.0) / (pro + con + 2.0)


def exploration_cost(depth: int, depth_limit: int) -> float:
    """1 + depth / depth_limit."""
    return 1.0 + depth / max(1, depth_limit)


def promise(hypothesis: Hypothesis, parent: Hypothesis | None, depth_limit: int) -> tuple[float, dict[str, float]]:
    """The hypothesis's promise and the factors it is made of."""
    factors = {
        "prior": hypothesis.confidence,
        "info_gain": information_gain(hypothesis.confidence),
        "track_record": track_record(parent),
        "cost": exploration_cost(hypothesis.depth, depth_limit),
    }
    value = factors["prior"] * factors["info_gain"] * factors["track_record"] / factors["cost"]
    return value, factors


_WORD = re.compile(r"[a-z0-9]+")


def words(text: str) -> frozenset[str]:
    """The lowercase words of a text."""
    return frozenset(_WORD.findall(text.lower()))


def similarity(a: str, b: str) -> float:
    """Word overlap of two texts (Jaccard), 0 to 1."""
    wa, wb = words(a), words(b)
    if not wa or not wb:
        return 0.0
    return len(wa & wb) / len(wa | wb)
