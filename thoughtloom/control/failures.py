"""Anticipatory failure handling: one detector per failure mode.

Each detector reads a SearchState snapshot and says how likely its failure is, when it will hit,
what would prevent it and what to do if it happens, with the numbers it saw. Detectors are pure
functions of (state, limits): they keep no memory between checkpoints, so the same snapshot always
gives the same answer. The anticipator runs them all and keeps the likely ones.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Protocol, runtime_checkable

from thoughtloom.control.types import AnticipatedFailure, FailureMode, SearchState

from ..tasks.similarity import (
    PARAPHRASE_THRESHOLD,
    find_loops,
    restating_ids,
)

#: Below this a detector reports nothing: not worth a line in the result.
NEGLIGIBLE = 0.05
#: A gain smaller than this is no gain at all (float noise in scores).
_EPSILON = 1e-9


@dataclass(frozen=True, slots=True)
class DetectorLimits:
    """What the detectors need to know beyond the state: the run's thresholds and limits."""

    #: Best quality a user would accept.
    acceptable_threshold: float = 0.7
    #: Best quality that reaches the goal; nothing is a failure once it is reached.
    goal_threshold: float = 0.9
    #: Checkpoints in a row without improvement that make a plateau.
    stagnation_threshold: int = 3
    #: A checkpoint (or depth level) that raises the best quality by less than this is stalled.
    min_progress_rate: float = 0.05
    #: The depth limit the search stops at (None: the state's current max_depth, which the
    #: controller may raise).
    hard_depth: int | None = None
    #: How far the controller may raise the depth limit when asked (None, or not above the limit:
    #: it cannot, and the detector does not advise it).
    depth_ceiling: int | None = None
    #: Value samples of one thought disagreeing by more than this make its score unreliable.
    unreliable_spread: float = 0.5
    #: Similarity at which two thoughts restate each other.
    paraphrase_threshold: float = PARAPHRASE_THRESHOLD
    #: Generated thoughts needed before rates of rejection or duplication mean anything.
    min_samples: int = 6
    #: Valued thoughts needed before the evaluator's disagreement means anything.
    min_valued: int = 3
    #: How many of the most recent value spreads the evaluator check looks at.
    spread_window: int = 10
    #: Expansions that count as a real effort when the budget is unlimited.
    effort_expansions: int = 20

    def __post_init__(self) -> None:
        if not 0.0 <= self.acceptable_threshold <= self.goal_threshold <= 1.0:
            raise ValueError("need 0 <= acceptable_threshold <= goal_threshold <= 1")
        if self.stagnation_threshold < 1:
            raise ValueError("stagnation_threshold must be at least 1")
        if self.hard_depth is not None and self.hard_depth < 1:
            raise ValueError("hard_depth must be at least 1")
        if self.depth_ceiling is not None and self.depth_ceiling < 1:
            raise ValueError("depth_ceiling must be at least 1")
        if self.min_samples < 1 or self.min_valued < 1 or self.spread_window < 1 or self.effort_expansions < 1:
            raise ValueError("sample sizes and windows must be at least 1")


@runtime_checkable
class FailureDetector(Protocol):
    """Sees one failure mode coming."""

    @property
    def mode(self) -> FailureMode:
        """The failure mode this detector watches for."""
        ...

    def assess(self, state: SearchState, limits: DetectorLimits) -> AnticipatedFailure | None:
        """The anticipated failure, or None when its likelihood is negligible."""
        ...


# --- shared readings of the state -------------------------------------------------------------


def _clamp(x: float, lo: float = 0.0, hi: float = 1.0) -> float:
    return max(lo, min(hi, x))


def best_quality(state: SearchState) -> float:
    """The best quality the search has seen (0 before any thought)."""
    candidates = [state.best.quality] if state.best is not None else []
    candidates += [q for _, q in state.progress] + list(state.score_history)
    return max(candidates, default=0.0)


def _running_max(values: Sequence[float]) -> list[float]:
    out: list[float] = []
    for v in values:
        out.append(max(v, out[-1]) if out else v)
    return out


def stalled_steps(values: Sequence[float], min_gain: float) -> int:
    """How many of the last steps raised the running best by less than `min_gain`, in a row."""
    best = _running_max(values)
    count = 0
    for i in range(len(best) - 1, 0, -1):
        if best[i] - best[i - 1] >= min_gain:
            break
        count += 1
    return count


def _stall(state: SearchState, limits: DetectorLimits) -> tuple[int, str]:
    """Stalled checkpoints (or depth levels, whichever says more) and what was seen."""
    by_checkpoint = stalled_steps([q for _, q in state.progress], limits.min_progress_rate)
    by_depth = stalled_steps(state.score_history, limits.min_progress_rate)
    seen = (
        f"{by_checkpoint} checkpoint(s) and {by_depth} depth level(s) in a row gained less than "
        f"{limits.min_progress_rate:g} quality"
    )
    return max(by_checkpoint, by_depth), seen


def _tokens_per_expansion(state: SearchState) -> float | None:
    if state.tokens_per_expansion:
        return state.tokens_per_expansion
    if state.expansions > 0 and state.tokens_spent > 0:
        return state.tokens_spent / state.expansions
    return None


def quality_rate(state: SearchState, window: int) -> float | None:
    """Quality gained per token over the last `window` checkpoints (None with fewer than two)."""
    points = state.progress[-(window + 1) :]
    if len(points) < 2:
        return None
    (t0, _), (t1, _) = points[0], points[-1]
    if t1 <= t0:
        return None
    best = _running_max([q for _, q in points])
    return (best[-1] - best[0]) / (t1 - t0)


def _failure(
    mode: FailureMode, likelihood: float, when: str, prevention: str, mitigation: str, evidence: str,
    nodes: tuple[int, ...] = (),
) -> AnticipatedFailure | None:
    likelihood = round(_clamp(likelihood), 3)
    if likelihood < NEGLIGIBLE:
        return None
    return AnticipatedFailure(mode, likelihood, when, prevention, mitigation, evidence, nodes)


# --- the detectors ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BudgetExhaustionDetector:
    """Tokens will run out before the best thought reaches the acceptable threshold.

    Rule: with an unlimited budget, or once the best quality is acceptable, nothing. Otherwise the
    quality gained per token over the last `stagnation_threshold` checkpoints gives the tokens
    still needed (gap / rate; unbounded when progress is flat). Likelihood = the shortfall
    (needed - left) / needed, weighted by how much of the budget is already spent
    (x (0.5 + 0.5 * spent fraction)) so a flat start does not cry wolf as loudly as a flat end.
    Without two checkpoints to measure a rate, likelihood is 0.9 if the tokens left cannot pay for
    one more expansion and 0.3 x the spent fraction otherwise. `when` counts the expansions left.
    """

    mode: ClassVar[FailureMode] = FailureMode.BUDGET_EXHAUSTED

    def assess(self, state: SearchState, limits: DetectorLimits) -> AnticipatedFailure | None:
        """See `BudgetExhaustionDetector`."""
        if state.tokens_left is None:
            return None
        best = best_quality(state)
        gap = limits.acceptable_threshold - best
        if gap <= 0:
            return None
        total = state.tokens_total or (state.tokens_spent + state.tokens_left)
        spent_fraction = _clamp(state.tokens_spent / total) if total > 0 else 1.0
        per_expansion = _tokens_per_expansion(state)
        left = max(0, state.tokens_left)
        expansions_left = math.floor(left / per_expansion) if per_expansion else None
        when = "now" if expansions_left == 0 else (
            f"within ~{expansions_left} expansions" if expansions_left is not None else "when the budget runs out"
        )
        rate = quality_rate(state, max(2, limits.stagnation_threshold))
        if rate is None:
            likelihood = 0.9 if expansions_left == 0 else 0.3 * spent_fraction
            needed_text = "no rate of progress measured yet"
            extra = None
        else:
            needed = gap / rate if rate > 0 else math.inf
            shortfall = 0.0 if needed <= left else (1.0 if math.isinf(needed) else (needed - left) / needed)
            likelihood = shortfall * (0.5 + 0.5 * spent_fraction)
            extra = None if math.isinf(needed) else max(0, math.ceil(needed - left))
            needed_text = (
                f"progress is flat ({rate:.2g} quality/token), so no budget reaches it"
                if math.isinf(needed) else f"~{math.ceil(needed):,} tokens needed at {rate:.2g} quality/token"
            )
        evidence = (
            f"best quality {best:.2f} < acceptable {limits.acceptable_threshold:.2f} (gap {gap:.2f}); "
            f"{left:,} tokens left of {total:,} ({spent_fraction:.0%} spent); "
            + (f"~{per_expansion:,.0f} tokens per expansion; " if per_expansion else "")
            + needed_text
        )
        prevention = (
            f"Request about {extra:,} more tokens before the budget runs out, or narrow the beam to conserve tokens."
            if extra else
            "Narrow the beam or prune weak branches to conserve tokens; ask for more budget only if progress resumes."
        )
        mitigation = f"Offer the best thought so far (quality {best:.2f}) as an honest compromise."
        return _failure(self.mode, likelihood, when, prevention, mitigation, evidence)


@dataclass(frozen=True, slots=True)
class DepthExceededDetector:
    """The depth limit will be reached before any thought is acceptable.

    Rule: nothing once the best quality is acceptable, nor when the task fixes the number of
    steps (SearchState.natural_depth) within the limit. At or past the limit (limits.hard_depth,
    else state.max_depth): 0.9. Otherwise the gain per depth level (running best of score_history,
    over its levels) gives the levels needed (gap / gain); likelihood = the shortfall
    (needed - remaining) / needed. With no measured gain per level, likelihood = 0.6 x how deep the
    search is relative to the limit (depth / limit). The prevention advises raising the limit only
    when it can be raised (limits.depth_ceiling above it), and then to no more than the ceiling.
    """

    mode: ClassVar[FailureMode] = FailureMode.DEPTH_EXCEEDED

    def assess(self, state: SearchState, limits: DetectorLimits) -> AnticipatedFailure | None:
        """See `DepthExceededDetector`."""
        best = best_quality(state)
        gap = limits.acceptable_threshold - best
        if gap <= 0:
            return None
        hard = limits.hard_depth or state.max_depth
        if hard < 1:
            return None
        if state.natural_depth is not None and state.natural_depth <= hard:
            return None  # every answer is complete within the limit: more depth cannot help
        remaining = hard - state.depth
        history = _running_max(state.score_history)
        per_level = (history[-1] - history[0]) / (len(history) - 1) if len(history) >= 2 else None
        needed: float | None = None
        if remaining <= 0:
            likelihood = 0.9
        elif per_level is not None and per_level > 0:
            needed = gap / per_level
            likelihood = 0.0 if needed <= remaining else (needed - remaining) / needed
        else:
            likelihood = 0.6 * _clamp(state.depth / hard)
        raisable = limits.depth_ceiling is not None and limits.depth_ceiling > hard
        evidence = (
            f"depth {state.depth} of {'depth' if raisable else 'hard'} limit {hard}; "
            f"best quality {best:.2f} < acceptable "
            f"{limits.acceptable_threshold:.2f}; "
            + (
                f"~{per_level:.2f} quality gained per level, ~{math.ceil(needed)} more levels needed"
                if needed is not None
                else ("no quality gained per level" if per_level is not None else "no per-level progress measured yet")
            )
        )
        target = state.depth + math.ceil(needed) if needed is not None else hard + 1
        ceiling = limits.depth_ceiling
        if raisable and ceiling is not None:
            prevention = (
                f"Ask to raise the depth limit to about {min(max(target, hard + 1), ceiling)} (the hard limit is "
                f"{ceiling}), or backtrack to a more promising branch before the limit is hit."
            )
        else:
            prevention = (
                f"Backtrack to a more promising branch or decompose the problem: the depth limit {hard} cannot be "
                "raised."
            )
        mitigation = f"Stop at depth {hard} and offer the best thought (quality {best:.2f}) as a compromise."
        when = "now" if remaining <= 0 else f"at depth {hard}"
        return _failure(self.mode, likelihood, when, prevention, mitigation, evidence)


@dataclass(frozen=True, slots=True)
class QualityPlateauDetector:
    """The best quality has stopped improving.

    Rule: nothing once the goal is reached. A checkpoint (state.progress) or depth level
    (state.score_history) is stalled when it raised the running best quality by less than
    min_progress_rate; s = the longer run of stalled steps at the end of either series. Likelihood
    = min(1, s / stagnation_threshold)^2 x (0.9 when the best has not moved at all over those
    steps, else 0.6: slow progress is a weaker plateau than none). Squared so one flat checkpoint
    is a murmur (0.1 of 3) and the last one before the threshold a warning (0.4).
    """

    mode: ClassVar[FailureMode] = FailureMode.QUALITY_PLATEAU

    def assess(self, state: SearchState, limits: DetectorLimits) -> AnticipatedFailure | None:
        """See `QualityPlateauDetector`."""
        best = best_quality(state)
        if best >= limits.goal_threshold:
            return None
        stalled, seen = _stall(state, limits)
        if stalled == 0:
            return None
        series = [q for _, q in state.progress]
        if stalled_steps(series, limits.min_progress_rate) < stalled:
            series = list(state.score_history)
        window = _running_max(series)[-(stalled + 1) :]
        flat = window[-1] - window[0] <= _EPSILON
        likelihood = min(1.0, stalled / limits.stagnation_threshold) ** 2 * (0.9 if flat else 0.6)
        evidence = f"{seen}; best quality {best:.2f}" + (" has not moved" if flat else " is creeping")
        prevention = "Widen the beam or expand from a different branch to escape the plateau."
        mitigation = (
            f"Accept the best thought (quality {best:.2f}) if it is good enough, or reformulate the problem."
        )
        when = "now" if stalled >= limits.stagnation_threshold else (
            f"within ~{limits.stagnation_threshold - stalled} checkpoints"
        )
        return _failure(self.mode, likelihood, when, prevention, mitigation, evidence)


@dataclass(frozen=True, slots=True)
class CircularReasoningDetector:
    """Recent thoughts restate earlier ones (their own ancestors, or each other), in other words.

    Rule: similarity.find_loops over state.recent at limits.paraphrase_threshold; the restating
    thoughts are the later of each pair (reported as `nodes`, for pruning). Likelihood =
    min(1, 2 x restating / recent): one paraphrase in ten recent thoughts is noise (0.2), three in
    ten is a loop (0.6).
    """

    mode: ClassVar[FailureMode] = FailureMode.CIRCULAR_REASONING

    def assess(self, state: SearchState, limits: DetectorLimits) -> AnticipatedFailure | None:
        """See `CircularReasoningDetector`."""
        if not state.recent:
            return None
        loops = find_loops(state.recent, limits.paraphrase_threshold)
        restating = restating_ids(loops)
        if not restating:
            return None
        fraction = len(restating) / len(state.recent)
        shown = ", ".join(
            f"#{later} restates {'#' + str(earlier) if earlier >= 0 else f'its ancestor at depth {-earlier}'} "
            f"({score:.2f})"
            for earlier, later, score in loops[:5]
        )
        evidence = (
            f"{len(restating)} of {len(state.recent)} recent thoughts restate earlier ones "
            f"(similarity >= {limits.paraphrase_threshold:.2f}): {shown}" + (" ..." if len(loops) > 5 else "")
        )
        prevention = "Prune the restating thoughts and ask the generator for steps unlike those already tried."
        mitigation = "Backtrack to the last thought before the loop and expand a different branch."
        return _failure(self.mode, 2.0 * fraction, "now", prevention, mitigation, evidence, restating)


@dataclass(frozen=True, slots=True)
class GroundingFailureDetector:
    """Reality keeps saying no: the task's validator rejects most proposals, or most grounded
    thoughts fail their tests or checks.

    Rule: two rates, each judged once it has limits.min_samples thoughts behind it: rejected /
    generated, and failed / grounded. Likelihood = (worse rate - 0.3) / 0.5, clamped to [0, 1]:
    40% gives 0.2, 55% gives 0.5, 80% or more gives 1.
    """

    mode: ClassVar[FailureMode] = FailureMode.GROUNDING_FAILURE

    def assess(self, state: SearchState, limits: DetectorLimits) -> AnticipatedFailure | None:
        """See `GroundingFailureDetector`."""
        rates: list[tuple[float, str]] = []
        if state.generated >= limits.min_samples:
            fraction = state.rejected / state.generated
            rates.append((fraction, f"{state.rejected} of {state.generated} generated thoughts ({fraction:.0%}) "
                                    "were rejected by the task's validator"))
        if state.grounded >= limits.min_samples:
            fraction = state.grounding_failed / state.grounded
            rates.append((fraction, f"{state.grounding_failed} of {state.grounded} grounded thoughts ({fraction:.0%}) "
                                    "failed their tests or checks"))
        if not rates:
            return None
        fraction, evidence = max(rates)
        prevention = (
            "Show the generator the validator's rules or the failing tests (a valid example), or lower the temperature."
        )
        mitigation = "Keep only verified thoughts and fall back to the best verified one."
        return _failure(self.mode, (fraction - 0.3) / 0.5, "now", prevention, mitigation, evidence)


@dataclass(frozen=True, slots=True)
class GeneratorExhaustionDetector:
    """The generator has run dry: most new thoughts are duplicates or rejected.

    Rule: nothing before limits.min_samples thoughts are generated. waste = (duplicates +
    rejected) / generated; likelihood = (waste - 0.4) / 0.5 clamped to [0, 1] (half wasted gives
    0.2, 65% gives 0.5, 90% gives 1), and at least 0.5 when expansions yield less than one new
    thought each on average.
    """

    mode: ClassVar[FailureMode] = FailureMode.GENERATOR_EXHAUSTION

    def assess(self, state: SearchState, limits: DetectorLimits) -> AnticipatedFailure | None:
        """See `GeneratorExhaustionDetector`."""
        if state.generated < limits.min_samples:
            return None
        wasted = min(state.generated, state.duplicates + state.rejected)
        waste = wasted / state.generated
        fresh = state.generated - wasted
        per_expansion = fresh / state.expansions if state.expansions else None
        likelihood = (waste - 0.4) / 0.5
        if per_expansion is not None and per_expansion < 1.0 and waste > 0.4:
            likelihood = max(likelihood, 0.5)
        evidence = (
            f"{state.duplicates} duplicates and {state.rejected} rejections among {state.generated} generated "
            f"thoughts ({waste:.0%} wasted)"
            + (f"; {per_expansion:.1f} new thoughts per expansion" if per_expansion is not None else "")
        )
        prevention = "Raise the temperature or rephrase the generation prompt to diversify proposals."
        mitigation = "Stop expanding exhausted branches and work with the thoughts already found."
        return _failure(self.mode, likelihood, "now", prevention, mitigation, evidence)


@dataclass(frozen=True, slots=True)
class EvaluatorUnreliableDetector:
    """The evaluator disagrees with itself: value samples of one thought are far apart.

    Rule: over the last limits.spread_window valued thoughts (at least limits.min_valued),
    likelihood = the fraction whose samples spread by more than limits.unreliable_spread.
    """

    mode: ClassVar[FailureMode] = FailureMode.EVALUATOR_UNRELIABLE

    def assess(self, state: SearchState, limits: DetectorLimits) -> AnticipatedFailure | None:
        """See `EvaluatorUnreliableDetector`."""
        spreads = state.value_spreads[-limits.spread_window :]
        if len(spreads) < limits.min_valued:
            return None
        wild = sum(1 for s in spreads if s > limits.unreliable_spread)
        fraction = wild / len(spreads)
        evidence = (
            f"{wild} of the last {len(spreads)} valued thoughts had value samples more than "
            f"{limits.unreliable_spread:g} apart (widest {max(spreads):.2f}, mean {sum(spreads) / len(spreads):.2f})"
        )
        prevention = "Re-score the disputed thoughts with more value samples, or switch to voting."
        mitigation = "Rank by the task's own quality check where it has one, not the evaluator's score."
        return _failure(self.mode, fraction, "now", prevention, mitigation, evidence)


@dataclass(frozen=True, slots=True)
class ProblemIntractableDetector:
    """Much effort spent, the best thought still poor and not improving: this approach will not do.

    Rule: effort = the spent fraction of the budget, or expansions / limits.effort_expansions when
    it is unlimited (whichever is larger when both are known); poorness = (acceptable - best) /
    acceptable; stuck = min(1, stalled steps / stagnation_threshold) (stalled as for the plateau).
    Likelihood = effort x poorness x stuck: it needs all three.
    """

    mode: ClassVar[FailureMode] = FailureMode.PROBLEM_INTRACTABLE

    def assess(self, state: SearchState, limits: DetectorLimits) -> AnticipatedFailure | None:
        """See `ProblemIntractableDetector`."""
        best = best_quality(state)
        if best >= limits.acceptable_threshold or limits.acceptable_threshold <= 0:
            return None
        by_tokens = state.tokens_spent / state.tokens_total if state.tokens_total else 0.0
        effort = _clamp(max(by_tokens, state.expansions / limits.effort_expansions))
        poorness = _clamp((limits.acceptable_threshold - best) / limits.acceptable_threshold)
        stalled, seen = _stall(state, limits)
        stuck = min(1.0, stalled / limits.stagnation_threshold)
        evidence = (
            f"{state.expansions} expansions and {state.tokens_spent:,} tokens spent (effort {effort:.2f}); "
            f"best quality {best:.2f} vs acceptable {limits.acceptable_threshold:.2f}; {seen}"
        )
        prevention = "Reformulate the problem or switch strategy (another decomposition) before spending more."
        mitigation = "Stop and report that no acceptable answer was found, with the best attempt and why."
        return _failure(self.mode, effort * poorness * stuck, "now", prevention, mitigation, evidence)


def default_detectors() -> tuple[FailureDetector, ...]:
    """One detector per failure mode, in FailureMode order."""
    return (
        BudgetExhaustionDetector(),
        DepthExceededDetector(),
        QualityPlateauDetector(),
        CircularReasoningDetector(),
        GroundingFailureDetector(),
        GeneratorExhaustionDetector(),
        EvaluatorUnreliableDetector(),
        ProblemIntractableDetector(),
    )


@dataclass(frozen=True, slots=True)
class FailureAnticipator:
    """Runs the detectors at a checkpoint and keeps the failures likely enough to act on."""

    detectors: tuple[FailureDetector, ...] = field(default_factory=default_detectors)
    #: Failures less likely than this are dropped (30%).
    threshold: float = 0.3

    def __post_init__(self) -> None:
        if not 0.0 <= self.threshold <= 1.0:
            raise ValueError(f"threshold must be in [0, 1]; got {self.threshold}")

    def assess_all(self, state: SearchState, limits: DetectorLimits | None = None) -> list[AnticipatedFailure]:
        """Every detector's non-negligible assessment, in detector order, whatever the threshold."""
        limits = limits or DetectorLimits()
        return [f for d in self.detectors if (f := d.assess(state, limits)) is not None]

    def anticipate(self, state: SearchState, limits: DetectorLimits | None = None) -> list[AnticipatedFailure]:
        """The failures at or above the threshold, most likely first (ties in detector order)."""
        found = [f for f in self.assess_all(state, limits) if f.likelihood >= self.threshold]
        return sorted(found, key=lambda f: -f.likelihood)
