"""Anticipatory failure handling: each detector fires on its failure and stays quiet on a healthy run."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import pytest

from thoughtloom.control.failures import (
    BudgetExhaustionDetector,
    CircularReasoningDetector,
    DepthExceededDetector,
    DetectorLimits,
    EvaluatorUnreliableDetector,
    FailureAnticipator,
    FailureDetector,
    GeneratorExhaustionDetector,
    GroundingFailureDetector,
    ProblemIntractableDetector,
    QualityPlateauDetector,
    best_quality,
    default_detectors,
    stalled_steps,
)
from thoughtloom.control.types import (
    AnticipatedFailure,
    FailureMode,
    SearchState,
    ThoughtView,
)

LIMITS = DetectorLimits()


def view(id: int, path: tuple[str, ...], quality: float = 0.3) -> ThoughtView:
    return ThoughtView(id=id, content=path[-1], depth=len(path), score=0.5, quality=quality, path=path)


HEALTHY_RECENT = [
    view(1, ("Split the list into two halves",)),
    view(2, ("Split the list into two halves", "Sort each half")),
    view(3, ("Split the list into two halves", "Sort each half", "Merge the two sorted halves")),
    view(4, ("Scan the list once",)),
]


def healthy(**changes: Any) -> SearchState:
    """A run making steady progress well within its budget and depth, with a sound generator and evaluator."""
    base = SearchState(
        depth=2, max_depth=5, nodes=20, expansions=4,
        tokens_spent=2000, tokens_total=10000, tokens_left=8000,
        best=view(9, ("Split the list into two halves", "Sort each half"), quality=0.5),
        score_history=[0.3, 0.5],
        generated=20, rejected=2, duplicates=2,
        value_spreads=[0.1, 0.2, 0.1, 0.15],
        recent=list(HEALTHY_RECENT),
        tokens_per_expansion=500.0,
        progress=[(500, 0.2), (1000, 0.3), (1500, 0.4), (2000, 0.5)],
    )
    return replace(base, **changes)


def flat(quality: float, tokens: list[int]) -> list[tuple[int, float]]:
    return [(t, quality) for t in tokens]


# --- every detector ---------------------------------------------------------------------------


def test_there_is_one_default_detector_per_failure_mode() -> None:
    assert [d.mode for d in default_detectors()] == list(FailureMode)


@pytest.mark.parametrize("detector", default_detectors(), ids=lambda d: d.mode.value)
def test_each_detector_is_quiet_on_a_healthy_run(detector: FailureDetector) -> None:
    assert detector.assess(healthy(), LIMITS) is None


@pytest.mark.parametrize("detector", default_detectors(), ids=lambda d: d.mode.value)
def test_each_detector_is_quiet_on_an_empty_run(detector: FailureDetector) -> None:
    empty = SearchState(depth=0, max_depth=5, nodes=1, expansions=0, tokens_spent=0, tokens_total=10000,
                        tokens_left=10000, best=None, score_history=[], generated=0, rejected=0, duplicates=0,
                        value_spreads=[], recent=[], tokens_per_expansion=None)
    assert detector.assess(empty, LIMITS) is None


# --- budget exhausted -------------------------------------------------------------------------


def budget_short(tokens_left: int) -> SearchState:
    spent = 10000 - tokens_left
    return healthy(tokens_spent=spent, tokens_left=tokens_left, best=None, score_history=[0.4, 0.42],
                   progress=[(spent - 2000, 0.40), (spent - 1000, 0.42), (spent, 0.43)])


def test_budget_exhaustion_fires_when_progress_is_too_slow_for_the_tokens_left() -> None:
    failure = BudgetExhaustionDetector().assess(budget_short(1600), LIMITS)
    assert failure is not None and failure.mode is FailureMode.BUDGET_EXHAUSTED
    assert failure.likelihood > 0.7
    assert failure.when == "within ~3 expansions"
    assert "1,600 tokens left" in failure.evidence and "0.43" in failure.evidence


def test_budget_exhaustion_grows_with_the_shortfall() -> None:
    # 0.3 short at 0.0001 quality/token: ~3,000 tokens needed.
    slow = healthy(progress=[(1000, 0.3), (1500, 0.35), (2000, 0.4)], best=None, score_history=[0.3, 0.4])
    rich = BudgetExhaustionDetector().assess(replace(slow, tokens_left=2000, tokens_total=4000), LIMITS)
    poor = BudgetExhaustionDetector().assess(replace(slow, tokens_left=500, tokens_total=2500), LIMITS)
    assert rich is not None and poor is not None and poor.likelihood > rich.likelihood


def test_budget_exhaustion_is_now_when_no_expansion_is_affordable() -> None:
    failure = BudgetExhaustionDetector().assess(budget_short(300), LIMITS)
    assert failure is not None and failure.when == "now"


def test_budget_exhaustion_asks_for_the_tokens_the_rate_says_are_missing() -> None:
    state = healthy(progress=[(1000, 0.3), (1500, 0.35), (2000, 0.4)], best=None, score_history=[0.3, 0.4],
                    tokens_left=1000, tokens_total=3000)
    failure = BudgetExhaustionDetector().assess(state, LIMITS)
    # 0.3 short at 0.0001 quality/token: ~3,000 tokens needed, 1,000 left.
    assert failure is not None and "about 2,000 more tokens" in failure.prevention


def test_budget_exhaustion_ignores_an_unlimited_budget() -> None:
    state = replace(budget_short(300), tokens_total=None, tokens_left=None)
    assert BudgetExhaustionDetector().assess(state, LIMITS) is None


def test_budget_exhaustion_ignores_a_run_already_acceptable() -> None:
    state = replace(budget_short(300), progress=[(9000, 0.6), (9700, 0.75)])
    assert BudgetExhaustionDetector().assess(state, LIMITS) is None


def test_budget_exhaustion_without_a_rate_fires_only_when_broke() -> None:
    broke = healthy(progress=[], tokens_spent=9800, tokens_left=200)
    assert BudgetExhaustionDetector().assess(broke, LIMITS).likelihood >= 0.9  # type: ignore[union-attr]
    early = healthy(progress=[])
    failure = BudgetExhaustionDetector().assess(early, LIMITS)
    assert failure is None or failure.likelihood < 0.3


# --- depth exceeded ---------------------------------------------------------------------------


def test_depth_exceeded_fires_at_the_hard_limit_without_an_acceptable_thought() -> None:
    failure = DepthExceededDetector().assess(healthy(depth=5, score_history=[0.3, 0.4, 0.45, 0.5, 0.5]), LIMITS)
    assert failure is not None and failure.likelihood >= 0.9 and failure.when == "now"
    assert "depth 5 of hard limit 5" in failure.evidence


def test_depth_exceeded_foresees_too_few_levels_for_the_gain_per_level() -> None:
    # 0.03 a level, 0.34 to go: ~12 levels needed, 2 left.
    state = healthy(depth=3, score_history=[0.3, 0.33, 0.36], best=None, progress=[])
    failure = DepthExceededDetector().assess(state, LIMITS)
    assert failure is not None and failure.likelihood > 0.8 and failure.when == "at depth 5"


def test_depth_exceeded_uses_the_hard_depth_of_the_limits() -> None:
    state = healthy(depth=3, score_history=[0.3, 0.4, 0.5])
    assert DepthExceededDetector().assess(state, LIMITS) is None
    failure = DepthExceededDetector().assess(state, replace(LIMITS, hard_depth=3))
    assert failure is not None and failure.when == "now"


def test_depth_exceeded_stays_quiet_when_every_answer_fits_within_the_limit() -> None:
    at_limit = healthy(depth=5, score_history=[0.3, 0.4, 0.45, 0.5, 0.5])
    assert DepthExceededDetector().assess(replace(at_limit, natural_depth=5), LIMITS) is None
    assert DepthExceededDetector().assess(replace(at_limit, natural_depth=8), LIMITS) is not None


def test_depth_exceeded_advises_raising_the_limit_only_when_the_hard_limit_allows_it() -> None:
    state = healthy(depth=3, score_history=[0.3, 0.33, 0.36], best=None, progress=[])
    fixed = DepthExceededDetector().assess(state, LIMITS)
    assert fixed is not None and "raise the depth limit" not in fixed.prevention
    assert "the depth limit 5 cannot be raised" in fixed.prevention
    room = DepthExceededDetector().assess(state, replace(LIMITS, depth_ceiling=8))
    assert room is not None
    assert room.prevention.startswith("Ask to raise the depth limit to about 8 (the hard limit is 8)")
    assert "depth 3 of depth limit 5" in room.evidence


def test_depth_exceeded_ignores_a_run_already_acceptable() -> None:
    state = healthy(depth=5, score_history=[0.3, 0.8], best=view(9, ("x",), quality=0.8))
    assert DepthExceededDetector().assess(state, LIMITS) is None


# --- quality plateau --------------------------------------------------------------------------


def test_quality_plateau_fires_after_stagnation_threshold_flat_checkpoints() -> None:
    state = healthy(progress=flat(0.5, [500, 1000, 1500, 2000]))
    failure = QualityPlateauDetector().assess(state, LIMITS)
    assert failure is not None and failure.likelihood == pytest.approx(0.9) and failure.when == "now"
    assert "3 checkpoint(s)" in failure.evidence


def test_quality_plateau_warns_softly_before_the_threshold() -> None:
    state = healthy(progress=[(500, 0.2), (1000, 0.5), (1500, 0.5), (2000, 0.5)])
    failure = QualityPlateauDetector().assess(state, LIMITS)
    assert failure is not None and 0.3 <= failure.likelihood < 0.9
    assert failure.when == "within ~1 checkpoints"


def test_quality_plateau_counts_creeping_progress_weaker_than_none() -> None:
    creeping = QualityPlateauDetector().assess(healthy(progress=[(500, 0.5), (1000, 0.51), (1500, 0.52),
                                                                 (2000, 0.53)]), LIMITS)
    stuck = QualityPlateauDetector().assess(healthy(progress=flat(0.5, [500, 1000, 1500, 2000])), LIMITS)
    assert creeping is not None and stuck is not None and creeping.likelihood < stuck.likelihood


def test_quality_plateau_reads_the_score_history_by_depth() -> None:
    state = healthy(progress=[], score_history=[0.5, 0.5, 0.49, 0.5], depth=4)
    failure = QualityPlateauDetector().assess(state, LIMITS)
    assert failure is not None and failure.likelihood == pytest.approx(0.9)


def test_quality_plateau_ignores_a_run_at_its_goal() -> None:
    state = healthy(progress=flat(0.95, [500, 1000, 1500, 2000]))
    assert QualityPlateauDetector().assess(state, LIMITS) is None


# --- circular reasoning -----------------------------------------------------------------------


def looping_recent() -> list[ThoughtView]:
    root = "We should cache the results to avoid recomputing them"
    return [
        view(1, (root,)),
        view(2, (root, "Profile the slowest function")),
        view(3, (root, "Profile the slowest function", "Caching results avoids recomputation")),
        view(4, ("Memoize the recursive calls",)),
        view(5, ("Cache the recursive calls",)),
    ]


def test_circular_reasoning_fires_on_paraphrased_restatements() -> None:
    failure = CircularReasoningDetector().assess(healthy(recent=looping_recent()), LIMITS)
    assert failure is not None and failure.mode is FailureMode.CIRCULAR_REASONING
    assert failure.nodes == (3, 5)
    assert failure.likelihood == pytest.approx(0.8)  # 2 of 5 restate, doubled
    assert "#3 restates #1" in failure.evidence


def test_circular_reasoning_names_an_ancestor_outside_the_recent_window() -> None:
    path = ("First, split the list into two halves", "Sort each half", "Divide the list in half first")
    failure = CircularReasoningDetector().assess(healthy(recent=[view(7, path)]), LIMITS)
    assert failure is not None and failure.nodes == (7,)
    assert "ancestor at depth 1" in failure.evidence


def test_circular_reasoning_is_faint_for_one_paraphrase_among_many() -> None:
    recent = [view(i, (f"Step {i}: check case number {i}",)) for i in range(10, 20)]
    recent += [view(4, ("Memoize the recursive calls",)), view(5, ("Cache the recursive calls",))]
    failure = CircularReasoningDetector().assess(healthy(recent=recent), LIMITS)
    assert failure is not None and failure.likelihood < 0.3


def test_circular_reasoning_uses_the_paraphrase_threshold_of_the_limits() -> None:
    lax = replace(LIMITS, paraphrase_threshold=0.5)  # "Sort each half" ~ "Merge the two sorted halves"
    failure = CircularReasoningDetector().assess(healthy(), lax)
    assert failure is not None and failure.nodes == (3,)


# --- grounding failure ------------------------------------------------------------------------


def test_grounding_failure_fires_when_the_validator_rejects_most_thoughts() -> None:
    failure = GroundingFailureDetector().assess(healthy(generated=20, rejected=14), LIMITS)
    assert failure is not None and failure.likelihood == pytest.approx(0.8)
    assert "14 of 20" in failure.evidence and "70%" in failure.evidence


def test_grounding_failure_waits_for_enough_samples() -> None:
    assert GroundingFailureDetector().assess(healthy(generated=4, rejected=4), LIMITS) is None


def test_grounding_failure_fires_when_most_grounded_thoughts_fail_their_tests() -> None:
    failure = GroundingFailureDetector().assess(healthy(grounded=10, grounding_failed=9), LIMITS)
    assert failure is not None and failure.likelihood == pytest.approx(1.0)
    assert "9 of 10 grounded thoughts (90%) failed their tests" in failure.evidence


def test_grounding_failure_waits_for_enough_grounded_thoughts() -> None:
    assert GroundingFailureDetector().assess(healthy(grounded=3, grounding_failed=3), LIMITS) is None


# --- generator exhaustion ---------------------------------------------------------------------


def test_generator_exhaustion_fires_when_duplicates_dominate() -> None:
    failure = GeneratorExhaustionDetector().assess(healthy(generated=20, duplicates=12, rejected=2), LIMITS)
    assert failure is not None and failure.likelihood == pytest.approx(0.6)
    assert "12 duplicates" in failure.evidence and "70% wasted" in failure.evidence


def test_generator_exhaustion_fires_when_expansions_yield_almost_nothing_new() -> None:
    state = healthy(generated=20, duplicates=9, rejected=0, expansions=12)  # 45% waste, 0.9 new per expansion
    failure = GeneratorExhaustionDetector().assess(state, LIMITS)
    assert failure is not None and failure.likelihood == pytest.approx(0.5)


def test_generator_exhaustion_waits_for_enough_samples() -> None:
    assert GeneratorExhaustionDetector().assess(healthy(generated=5, duplicates=5), LIMITS) is None


# --- evaluator unreliable ---------------------------------------------------------------------


def test_evaluator_unreliable_fires_when_value_samples_disagree() -> None:
    failure = EvaluatorUnreliableDetector().assess(healthy(value_spreads=[0.7, 0.8, 0.1, 0.9]), LIMITS)
    assert failure is not None and failure.likelihood == pytest.approx(0.75)
    assert "3 of the last 4" in failure.evidence


def test_evaluator_unreliable_reads_only_the_recent_window() -> None:
    state = healthy(value_spreads=[0.9] * 10 + [0.1] * 10)
    assert EvaluatorUnreliableDetector().assess(state, LIMITS) is None


def test_evaluator_unreliable_waits_for_enough_valued_thoughts() -> None:
    assert EvaluatorUnreliableDetector().assess(healthy(value_spreads=[0.9, 0.9]), LIMITS) is None


# --- problem intractable ----------------------------------------------------------------------


def intractable() -> SearchState:
    return healthy(expansions=30, tokens_spent=9000, tokens_left=1000, best=None, score_history=[0.1, 0.1, 0.1],
                   progress=flat(0.1, [6000, 7000, 8000, 9000]))


def test_problem_intractable_fires_on_much_effort_low_quality_and_no_progress() -> None:
    failure = ProblemIntractableDetector().assess(intractable(), LIMITS)
    assert failure is not None and failure.likelihood > 0.7
    assert "30 expansions" in failure.evidence and "9,000 tokens" in failure.evidence


def test_problem_intractable_is_quiet_while_quality_still_improves() -> None:
    improving = replace(intractable(), progress=[(6000, 0.05), (7000, 0.1), (8000, 0.15), (9000, 0.2)],
                        score_history=[0.1, 0.2])
    assert ProblemIntractableDetector().assess(improving, LIMITS) is None


def test_problem_intractable_is_faint_early_in_the_run() -> None:
    early = replace(intractable(), expansions=2, tokens_spent=500, tokens_left=9500)
    failure = ProblemIntractableDetector().assess(early, LIMITS)
    assert failure is None or failure.likelihood < 0.3


def test_problem_intractable_counts_expansions_when_the_budget_is_unlimited() -> None:
    state = replace(intractable(), tokens_total=None, tokens_left=None)
    failure = ProblemIntractableDetector().assess(state, LIMITS)
    assert failure is not None and failure.likelihood > 0.7


# --- readable output --------------------------------------------------------------------------


@pytest.mark.parametrize("state", [budget_short(1600), intractable(), healthy(recent=looping_recent()),
                                   healthy(generated=20, rejected=14)])
def test_every_anticipated_failure_reads_as_sentences(state: SearchState) -> None:
    for failure in FailureAnticipator(threshold=0.0).anticipate(state, LIMITS):
        assert failure.prevention.endswith(".") and failure.mitigation.endswith(".")
        assert failure.evidence and failure.when
        assert 0.0 < failure.likelihood <= 1.0


# --- the anticipator --------------------------------------------------------------------------


@dataclass(frozen=True)
class Fixed:
    """A detector that always sees its mode at a fixed likelihood."""

    mode: FailureMode
    likelihood: float

    def assess(self, state: SearchState, limits: DetectorLimits) -> AnticipatedFailure | None:
        return AnticipatedFailure(self.mode, self.likelihood, "now", "p.", "m.", "e")


def test_anticipator_sorts_failures_most_likely_first() -> None:
    anticipator = FailureAnticipator(detectors=(Fixed(FailureMode.QUALITY_PLATEAU, 0.4),
                                                Fixed(FailureMode.BUDGET_EXHAUSTED, 0.9),
                                                Fixed(FailureMode.DEPTH_EXCEEDED, 0.6)))
    assert [f.likelihood for f in anticipator.anticipate(healthy())] == [0.9, 0.6, 0.4]


def test_anticipator_keeps_only_failures_at_or_above_its_threshold() -> None:
    anticipator = FailureAnticipator(detectors=(Fixed(FailureMode.QUALITY_PLATEAU, 0.29),
                                                Fixed(FailureMode.BUDGET_EXHAUSTED, 0.3)), threshold=0.3)
    assert [f.mode for f in anticipator.anticipate(healthy())] == [FailureMode.BUDGET_EXHAUSTED]


def test_anticipator_reports_nothing_on_a_healthy_run() -> None:
    assert FailureAnticipator().anticipate(healthy(), LIMITS) == []


def test_anticipator_sees_several_failures_of_a_stuck_run() -> None:
    stuck = replace(intractable(), generated=30, rejected=18, recent=looping_recent())
    modes = {f.mode for f in FailureAnticipator().anticipate(stuck, LIMITS)}
    assert {FailureMode.PROBLEM_INTRACTABLE, FailureMode.QUALITY_PLATEAU, FailureMode.BUDGET_EXHAUSTED,
            FailureMode.CIRCULAR_REASONING, FailureMode.GROUNDING_FAILURE} <= modes


def test_anticipator_rejects_a_threshold_outside_0_1() -> None:
    with pytest.raises(ValueError):
        FailureAnticipator(threshold=1.5)


# --- shared readings --------------------------------------------------------------------------


def test_stalled_steps_counts_the_trailing_run_without_gain() -> None:
    assert stalled_steps([0.1, 0.3, 0.3, 0.31, 0.2], 0.05) == 3


def test_best_quality_reads_best_progress_and_history() -> None:
    assert best_quality(healthy(best=None, progress=[(1, 0.2)], score_history=[0.6])) == 0.6


def test_limits_reject_an_acceptable_threshold_above_the_goal() -> None:
    with pytest.raises(ValueError):
        DetectorLimits(acceptable_threshold=0.95, goal_threshold=0.9)
