"""Recording scores: a thought's score, its path score, goal status, threshold pruning and the best
thought so far (Scoring, a base of SearchContext).

`scorer()` is the hot path of every search (once per thought): it hoists the lookups once and
returns a closure a loop calls per thought. Not to be confused with scorer.py, the user's own
scorer that produces scores; this records them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from ..graph import NodeStatus, ThoughtGraph
from ..tasks.base import Task
from .config import SearchConfig
from .events import EventBus, GoalFound, NodeScored
from .stop import StopReason

_S = NodeStatus


def combine(aggregation: str, parent_value: float | None, score: float, length: int) -> float:
    """Path score after appending `score` to a path of `length - 1` scored steps."""
    if parent_value is None or length <= 1:
        return score
    if aggregation == "sum":
        return parent_value + score
    if aggregation == "product":
        return parent_value * score
    if aggregation == "min":
        return min(parent_value, score)
    return parent_value + (score - parent_value) / length  # running mean


class Scoring:
    """Recording the scores thoughts are given: `set_score`, `scorer()`, `quality` (SearchContext sets the state)."""

    # The search's state these methods use (set by SearchContext.__init__).
    task: Task[Any]
    problem: Any
    config: SearchConfig
    graph: ThoughtGraph
    root: int
    bus: EventBus
    goals: list[int]
    best_id: int | None
    best_quality_id: int | None
    goal_quality: float | None
    recent: deque[int]
    _qualities: bool
    _goals: bool
    _goal_ids: set[int]
    _grounded_goals: set[int]
    _quality: dict[int, float]
    _best_by_depth: dict[int, float]
    _steps: dict[int, tuple[str, ...]]
    _path_score: dict[int, float | None]
    _best_key: tuple[Any, ...] | None

    if TYPE_CHECKING:  # defined by SearchContext

        def stop(self, reason: StopReason) -> None: ...

        def prune(self, node_id: int, reason: str) -> None: ...

    def set_score(self, node_id: int, score: float) -> None:
        """Record a node's score, its path score, goal status and threshold pruning."""
        self.set_scores(((node_id, score),))

    def set_scores(self, scores: Iterable[tuple[int, float]]) -> None:
        """set_score for several nodes in turn (siblings, usually), with lookups made once."""
        score_one = self.scorer()
        for node_id, score in scores:
            score_one(node_id, score)

    def scorer(self) -> Callable[[int, float], None]:
        """set_score with the search's lookups made once: for a loop that scores thoughts one by one
        without waiting in between (the attributes it holds do not change while nothing waits)."""
        # The hot path of every search (once per thought): lookups are hoisted, calls kept few.
        graph, root, steps_of, path_scores = self.graph, self.root, self._steps, self._path_score
        node_of, succeed, primary_parent = graph.node, graph.succeed, graph.primary_parent
        aggregation = self.config.aggregation
        task, problem = self.task, self.problem
        qualities, best_by_depth, goal_ids, recent = self._quality, self._best_by_depth, self._goal_ids, self.recent
        sinks = self.bus.sinks
        by_quality, by_goal, grounded_goals = self._qualities, self._goals, self._grounded_goals
        prune_threshold, stop_on_goal = self.config.prune_threshold, self.config.stop_on_goal
        whole_answers = task.whole_answers

        def score_one(node_id: int, score: float) -> None:
            if not 0.0 <= score <= 1.0:  # out of range: clamped; NaN -> 0
                score = 1.0 if score > 1.0 else 0.0
            node = node_of(node_id)
            node.score = score
            if node.status is not _S.PRUNED:  # a re-score must not revive a thought pruned meanwhile
                succeed(node_id)
            steps = steps_of[node_id]
            depth = len(steps)
            # The path score extends the nearest ancestor one step shorter (a merge or refinement
            # stands in for its parent's step rather than adding one).
            base = primary_parent(node_id)
            assert base is not None  # only the root has no parent, and it is never scored
            while base != root and len(steps_of[base]) >= depth:
                base = primary_parent(base)
                assert base is not None
            path = combine(aggregation, path_scores[base], score, depth)
            path_scores[node_id] = path
            if sinks:
                self.bus.emit(NodeScored(node_id, score, path))
            quality = task.quality(problem, steps, score) if by_quality else score
            qualities[node_id] = quality
            if quality > best_by_depth.get(depth, -1.0):
                best_by_depth[depth] = quality
            best_quality_id = self.best_quality_id
            if best_quality_id is None or quality > qualities[best_quality_id]:
                self.best_quality_id = node_id
            recent.append(node_id)
            goal = node_id in goal_ids
            if not goal:  # a re-scored goal stays a goal, and goals are never pruned
                goal_quality = self.goal_quality
                if (
                    (by_goal and task.is_goal(problem, steps)) or node_id in grounded_goals
                    or (goal_quality is not None and quality >= goal_quality)
                ):
                    goal = True
                    self.goals.append(node_id)
                    goal_ids.add(node_id)
                    if sinks:
                        self.bus.emit(GoalFound(node_id))
                    if stop_on_goal:
                        self.stop(StopReason.GOAL_REACHED)
                elif score < prune_threshold:
                    self.prune(node_id, f"score {score:.2f} below threshold {prune_threshold:.2f}")
            # The best thought so far: goals first, then scored above zero, deeper, better path, older
            # (where each thought is a whole answer: better scored, then older, at any depth).
            best = self._best_key
            if best is None or goal or not best[0]:  # a non-goal never beats a goal
                key = (goal, score > 0.0, score, 0, -node_id) if whole_answers else \
                    (goal, score > 0.0, depth, path or 0.0, -node_id)
                if best is None or key > best:
                    self._best_key = key
                    self.best_id = node_id

        return score_one

    def quality(self, node_id: int) -> float:
        """The task's judgement of a scored thought as an answer (0 for unscored ones)."""
        return self._quality.get(node_id, 0.0)

    def quality_history(self) -> list[float]:
        """Best quality at each depth from 1 to the deepest scored one (0 where none)."""
        deepest = max(self._best_by_depth, default=0)
        return [self._best_by_depth.get(d, 0.0) for d in range(1, deepest + 1)]
