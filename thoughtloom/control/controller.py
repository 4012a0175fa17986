"""The controller: one self-aware supervisor that any strategy runs under.

Strategies call `ctx.checkpoint()` after each unit of work (a level, an expansion, a batch of
simulations); the context forwards to the controller, which then, in this order:

1. anticipates failures and acts on the likely ones (likelihood >= act_threshold, each mode at
   most once every two checkpoints): widen the beam on a plateau, prune paraphrased thoughts on
   circular reasoning, re-score with more samples when the evaluator disagrees with itself,
   raise the temperature when the generator is exhausted, ask for more proposals when the
   validator rejects most of them, and offer the compromise when the problem looks intractable;
2. negotiates the budget when fewer tokens are left than one expansion costs;
3. applies the depth policy once per newly reached depth: continue, stop, ask for feedback at
   the soft limit, or backtrack to the best earlier depth.

When a call is refused for lack of tokens, the context asks `on_budget_exhausted`: an approved
increase raises the gateway's hard token limit by exactly the amount granted and the call is
retried; otherwise a compromise is offered or the search terminates. A denied request is not
asked again in the same run. Everything decided is kept in the timeline and the report.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..graph import NodeStatus
from ..search.events import ControlDecision
from ..search.operators import value_many
from .depth import DepthPolicy
from .failures import DetectorLimits, FailureAnticipator
from .feedback import AutomaticHandler, FeedbackHandler
from .negotiation import BudgetNegotiator, Negotiation
from .profiles import DomainProfile
from .types import (
    AnticipatedFailure,
    BudgetDecision,
    Compromise,
    DepthAction,
    FailureMode,
    SearchState,
    ThoughtView,
)
from ..search.stop import StopReason

if TYPE_CHECKING:
    from ..search.context import SearchContext

_S = NodeStatus
RECENT_WINDOW = 50


@dataclass(frozen=True, slots=True)
class ControlSettings:
    """Thresholds and limits the controller works to."""

    acceptable_threshold: float = 0.7
    goal_threshold: float = 0.95
    compromise_threshold: float = 0.5
    soft_depth: int | None = None
    min_progress_rate: float = 0.05
    stagnation_threshold: int = 3
    #: Anticipated failures at least this likely are acted on.
    act_threshold: float = 0.6
    #: Widening the beam stops here.
    max_beam: int = 16

    @classmethod
    def from_profile(cls, profile: DomainProfile, **overrides: Any) -> ControlSettings:
        """Settings from a profile, with single fields overridden (None values are ignored)."""
        values = {
            "acceptable_threshold": profile.acceptable_threshold,
            "goal_threshold": profile.goal_threshold,
            "compromise_threshold": profile.compromise_threshold,
            "soft_depth": profile.soft_depth,
            "min_progress_rate": profile.min_progress_rate,
            "stagnation_threshold": profile.stagnation_threshold,
        }
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    def __post_init__(self) -> None:
        for name in ("acceptable_threshold", "goal_threshold", "compromise_threshold"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be between 0 and 1; got {getattr(self, name)}")
        if not self.compromise_threshold <= self.acceptable_threshold <= self.goal_threshold:
            raise ValueError(
                "thresholds must satisfy compromise <= acceptable <= goal; got "
                f"{self.compromise_threshold} / {self.acceptable_threshold} / {self.goal_threshold}"
            )


#: agent: below this share of the token budget left, the controller switches to depth-first.
AGENT_FINISH_SHARE = 0.4


class Controller:
    """Watches a search through its checkpoints and decides, with a feedback handler, what to do."""

    def __init__(
        self,
        settings: ControlSettings | None = None,
        handler: FeedbackHandler | None = None,
        *,
        profile: str = "default",
        anticipator: FailureAnticipator | None = None,
    ) -> None:
        self.settings = settings or ControlSettings()
        self.handler: FeedbackHandler = handler or AutomaticHandler(
            accept_compromise_above=self.settings.compromise_threshold
        )
        self.profile = profile
        self.negotiator = BudgetNegotiator(
            self.settings.acceptable_threshold, self.settings.goal_threshold, self.settings.compromise_threshold
        )
        self.anticipator = anticipator or FailureAnticipator()
        self.policy: DepthPolicy | None = None
        self.limits: DetectorLimits | None = None
        self.timeline: list[dict[str, Any]] = []
        self.budget_requests: list[dict[str, Any]] = []
        self.anticipated: list[dict[str, Any]] = []
        self.actions: list[dict[str, Any]] = []
        self.compromise: Compromise | None = None
        self.compromise_accepted: bool | None = None
        self.original_tokens: int | None = None
        self.progress: list[tuple[int, float]] = []
        self._lock = asyncio.Lock()
        self._denied = False
        self._rejected_compromise: int | None = None
        self._judged_depth = 0
        self._checkpoints = 0
        self._acted_at: dict[FailureMode, int] = {}
        self._spent_before = 0

    # --- wiring -------------------------------------------------------------------------

    @property
    def goal_quality(self) -> float:
        """The quality at which a thought counts as reaching the goal."""
        return self.settings.goal_threshold

    def attach(self, ctx: SearchContext) -> None:
        """Bind to a search: depth limits from its config, the budget it starts with."""
        hard = ctx.max_depth
        soft = self.settings.soft_depth or hard
        self.policy = DepthPolicy(soft, hard, self.settings.min_progress_rate, self.settings.stagnation_threshold)
        self.limits = DetectorLimits(
            acceptable_threshold=self.settings.acceptable_threshold,
            goal_threshold=self.settings.goal_threshold,
            stagnation_threshold=self.settings.stagnation_threshold,
            min_progress_rate=self.settings.min_progress_rate,
            hard_depth=hard,
        )
        budget = ctx.gateway.budget
        self.original_tokens = budget.limits.tokens
        self._spent_before = budget.spent.total

    def record(self, ctx: SearchContext, kind: str, decision: str, reason: str, **detail: Any) -> None:
        """Keep a decision in the timeline and tell the event stream."""
        entry = {
            "kind": kind, "decision": decision, "reason": reason,
            "tokens_spent": ctx.gateway.budget.spent.total - self._spent_before,
            "depth": len(ctx.quality_history()), **detail,
        }
        self.timeline.append(entry)
        if ctx.bus:
            ctx.bus.emit(ControlDecision(kind, decision, reason))

    # --- observation --------------------------------------------------------------------

    def _view(self, ctx: SearchContext, node_id: int) -> ThoughtView:
        node = ctx.graph.node(node_id)
        return ThoughtView(
            node_id, node.content, len(ctx.steps(node_id)), node.score or 0.0, ctx.quality(node_id),
            ctx.steps(node_id),
        )

    def snapshot(self, ctx: SearchContext) -> SearchState:
        """The search as the detectors and policies see it now."""
        budget = ctx.gateway.budget
        spent = budget.spent.total - self._spent_before
        expansions = ctx.counts["expansions"]
        best = ctx.best_quality_id
        history = ctx.quality_history()
        # Live thoughts only, each once (a re-scored thought is appended again), oldest first.
        recent: list[int] = []
        seen: set[int] = set()
        for n in reversed(ctx.recent):
            if n not in seen and ctx.graph.node(n).status is _S.SUCCEEDED:
                seen.add(n)
                recent.append(n)
        recent.reverse()
        return SearchState(
            depth=len(history),
            max_depth=ctx.max_depth,
            nodes=len(ctx.graph),
            expansions=expansions,
            tokens_spent=spent,
            tokens_total=budget.limits.tokens,
            tokens_left=budget.tokens_left(),
            best=self._view(ctx, best) if best is not None else None,
            score_history=history,
            generated=ctx.counts["proposed"],
            rejected=ctx.counts["rejected"],
            duplicates=ctx.counts["duplicates"],
            grounded=ctx.counts["grounded"],
            grounding_failed=ctx.counts["grounding_failed"],
            value_spreads=list(ctx.value_spreads),
            recent=[self._view(ctx, n) for n in recent[-RECENT_WINDOW:]],
            tokens_per_expansion=(spent / expansions) if expansions else None,
            progress=list(self.progress),
            natural_depth=ctx.task.natural_depth(ctx.problem),
        )

    # --- checkpoints --------------------------------------------------------------------

    async def checkpoint(self, ctx: SearchContext) -> list[int] | None:
        """Act on what the search looks like now; a list means: continue from these nodes."""
        if ctx.stopped:
            return None
        self._checkpoints += 1
        state = self.snapshot(ctx)
        self.progress.append((state.tokens_spent, state.best.quality if state.best else 0.0))
        state.progress = list(self.progress)
        assert self.limits is not None and self.policy is not None
        if ctx.order is not None:
            # agent: steps are not scored thoughts, so the quality-based detectors and depth policy
            # have nothing to read; the controller steers the order, and negotiates when a call is refused.
            self._steer_agent(ctx, state)
            return None
        for failure in self.anticipator.anticipate(state, self.limits):
            self._note_failure(ctx, failure)
            if failure.likelihood >= self.settings.act_threshold and self._may_act(failure.mode):
                await self._act(ctx, failure, state)
                if ctx.stopped:
                    return None
        negotiation = self.negotiator.negotiate(state, self.original_tokens)
        if negotiation.decision is not BudgetDecision.SUFFICIENT:
            await self._resolve(ctx, negotiation, exhausted=False)
            if ctx.stopped:
                return None
        if state.depth > self._judged_depth:
            self._judged_depth = state.depth
            return await self._judge_depth(ctx, state)
        return None

    async def on_budget_exhausted(self, ctx: SearchContext, limit_before: int | None) -> bool:
        """A call was refused for lack of tokens: True to retry it (the budget was raised)."""
        async with self._lock:
            if ctx.stopped:
                return False
            if ctx.gateway.budget.limits.tokens != limit_before:
                return True  # raised while this call waited for the lock
            state = self.snapshot(ctx)
            negotiation = self.negotiator.negotiate(state, self.original_tokens, exhausted=True)
            if negotiation.decision is BudgetDecision.SUFFICIENT:
                self.record(ctx, "budget", "stop", f"token budget used up; {negotiation.reason}")
                return False
            return await self._resolve(ctx, negotiation, exhausted=True)

    # --- budget -------------------------------------------------------------------------

    async def _resolve(self, ctx: SearchContext, negotiation: Negotiation, *, exhausted: bool) -> bool:
        situation = negotiation.situation.to_dict()
        if negotiation.decision is BudgetDecision.REQUEST_INCREASE and not self._denied:
            request = negotiation.request
            assert request is not None
            # The justification goes to the handler (and the report); the live line stays short.
            self.record(ctx, "budget", "request_increase",
                        f"asking for {request.tokens:,} more tokens: {negotiation.reason}",
                        tokens=request.tokens, justification=request.justification, situation=situation)
            granted = await self.handler.request_budget(request)
            self.budget_requests.append({
                "tokens": request.tokens, "justification": request.justification,
                "situation": situation, "granted": granted, "approved": granted > 0,
            })
            if granted > 0:
                ctx.gateway.budget.raise_limit(granted)
                self.record(ctx, "budget", "approved", f"token limit raised by {granted:,}", tokens=granted)
                return True
            self._denied = True
            self.record(ctx, "budget", "denied", "budget increase denied")
        elif negotiation.decision is BudgetDecision.REQUEST_INCREASE:
            pass  # a denied request is not asked again: fall through to a compromise
        elif negotiation.decision is BudgetDecision.TERMINATE:
            self.record(ctx, "budget", "terminate", negotiation.reason, situation=situation)
            ctx.stop(StopReason.BUDGET_TOKENS)
            return False
        compromise = negotiation.compromise or self.negotiator.compromise(self.snapshot(ctx))
        if compromise is not None and compromise.node_id != self._rejected_compromise:
            why = negotiation.reason if negotiation.compromise is not None else "no more budget: offering the best thought"
            if await self._offer(ctx, compromise, why):
                return False
        # Short of tokens but not out of them (a checkpoint): the search spends what is left, and
        # "terminate" is recorded only when a refused call really ends it.
        if exhausted:
            if compromise is None:
                self.record(ctx, "budget", "terminate",
                            "no budget left and no thought above the compromise threshold", situation=situation)
            ctx.stop(StopReason.BUDGET_TOKENS)
        return False

    async def _offer(self, ctx: SearchContext, compromise: Compromise, reason: str) -> bool:
        self.compromise = compromise
        self.record(ctx, "compromise", "propose", reason, compromise=compromise.to_dict())
        accepted = await self.handler.propose_compromise(compromise)
        self.compromise_accepted = accepted
        if accepted:
            self.record(ctx, "compromise", "accepted", compromise.explain())
            ctx.stop(StopReason.COMPROMISE_ACCEPTED)
            return True
        self._rejected_compromise = compromise.node_id
        self.record(ctx, "compromise", "rejected", "compromise not accepted")
        return False

    # --- depth --------------------------------------------------------------------------

    async def _judge_depth(self, ctx: SearchContext, state: SearchState) -> list[int] | None:
        assert self.policy is not None
        decision = self.policy.decide(state.depth, state.score_history)
        if decision.action is DepthAction.CONTINUE:
            if decision.reason:
                self.record(ctx, "depth", "continue", decision.reason)
            return None
        if decision.action is DepthAction.STOP:
            self.record(ctx, "depth", "stop", decision.reason, suggestion=decision.suggestion)
            return None  # the hard limit is the search's own depth limit: it stops there by itself
        if decision.action is DepthAction.BACKTRACK:
            self.record(ctx, "depth", "backtrack", decision.reason, suggestion=decision.suggestion)
            return self._backtrack(ctx, state)
        self.record(ctx, "depth", "request_feedback", decision.reason, suggestion=decision.suggestion)
        answer = await self.handler.depth_feedback(decision, state)
        if answer.action is DepthAction.CONTINUE and answer.extra_depth > 0:
            self.policy.soft_limit = min(self.policy.hard_limit, state.depth + answer.extra_depth)
            self.record(ctx, "depth", "continue_deeper", f"soft limit moved to {self.policy.soft_limit}")
            return None
        if answer.action is DepthAction.BACKTRACK:
            self.record(ctx, "depth", "backtrack", "feedback asked to try another branch")
            return self._backtrack(ctx, state)
        self.record(ctx, "depth", "stop", "feedback: stop at the soft depth limit")
        ctx.stop(StopReason.DEPTH_SOFT_LIMIT)
        return None

    def _backtrack(self, ctx: SearchContext, state: SearchState) -> list[int] | None:
        history = state.score_history
        if not history:
            return None
        target = history.index(max(history)) + 1
        candidates = [
            n.id for n in ctx.graph
            if len(ctx.steps(n.id)) == target and n.id not in ctx.expanded and n.score is not None
            and n.status in (_S.SUCCEEDED, _S.PRUNED) and n.extra.get("rejected") is None
        ]
        candidates.sort(key=lambda n: -ctx.quality(n))
        chosen = candidates[: ctx.beam]
        for n in chosen:
            ctx.revive(n)
        self.actions.append({"mode": "depth", "action": f"backtracked to depth {target}", "nodes": chosen})
        return chosen or None

    # --- failures -----------------------------------------------------------------------

    def _note_failure(self, ctx: SearchContext, failure: AnticipatedFailure) -> None:
        entry = {"checkpoint": self._checkpoints, **failure.to_dict()}
        self.anticipated.append(entry)
        if ctx.bus:
            ctx.bus.emit(ControlDecision("failure", failure.mode.value, f"likelihood {failure.likelihood:.2f}: {failure.evidence}"))

    def _steer_agent(self, ctx: SearchContext, state: SearchState) -> None:
        """agent: once less than AGENT_FINISH_SHARE of the token budget is left, finish what is started first.

        Breadth-first starts every independent step before any dependent one; with the budget
        running out that leaves many half-done branches and no answer, so the order switches to
        depth-first, which drives the deepest started branch (toward synthesis and solution) first.
        """
        if ctx.order is None or ctx.order == "depth_first" or not state.tokens_total:
            return
        left = state.tokens_left if state.tokens_left is not None else state.tokens_total
        if left < AGENT_FINISH_SHARE * state.tokens_total:
            before, ctx.order = ctx.order, "depth_first"
            self.record(ctx, "order", "depth_first",
                        f"{left:,} of {state.tokens_total:,} tokens left: finishing started branches before "
                        f"starting new ones (was {before})")

    def _may_act(self, mode: FailureMode) -> bool:
        last = self._acted_at.get(mode)
        return last is None or self._checkpoints - last >= 2

    async def _act(self, ctx: SearchContext, failure: AnticipatedFailure, state: SearchState) -> None:
        self._acted_at[failure.mode] = self._checkpoints
        mode = failure.mode
        action: str
        nodes: Sequence[int] = ()
        if mode is FailureMode.QUALITY_PLATEAU:
            old = ctx.beam
            ctx.beam = min(self.settings.max_beam, old + max(1, old // 2))
            action = f"widened the beam from {old} to {ctx.beam}"
        elif mode is FailureMode.CIRCULAR_REASONING:
            nodes = [n for n in failure.nodes if ctx.graph.node(n).status is _S.SUCCEEDED and n not in ctx.expanded]
            for n in nodes:
                ctx.prune(n, "restates an earlier thought (circular reasoning)")
            action = f"pruned {len(nodes)} thoughts that restate earlier ones"
        elif mode is FailureMode.EVALUATOR_UNRELIABLE:
            old = ctx.value_samples
            ctx.value_samples = min(9, old * 2)
            live = [v.id for v in state.recent if ctx.graph.node(v.id).status is _S.SUCCEEDED
                    and v.id not in ctx.expanded][-ctx.beam:]
            await value_many(ctx, live, rescore=True)
            nodes = live
            action = f"value samples {old} -> {ctx.value_samples}; re-scored {len(live)} open thoughts"
        elif mode is FailureMode.GENERATOR_EXHAUSTION:
            old_t = ctx.temperature
            ctx.temperature = min(1.3, old_t + 0.2)
            action = f"raised the temperature from {old_t:.1f} to {ctx.temperature:.1f}"
        elif mode is FailureMode.GROUNDING_FAILURE:
            old = ctx.breadth
            ctx.breadth = min(12, old + 2)
            action = f"asked for more proposals per expansion: breadth {old} -> {ctx.breadth}"
        elif mode is FailureMode.PROBLEM_INTRACTABLE:
            compromise = self.negotiator.compromise(state)
            if compromise is not None and compromise.node_id != self._rejected_compromise:
                action = "offered the best thought as a compromise"
                self.actions.append({"mode": mode.value, "action": action, "likelihood": failure.likelihood})
                self.record(ctx, "failure", "act", action, mode=mode.value)
                await self._offer(ctx, compromise, f"problem looks intractable: {failure.evidence}")
                return
            action = "no thought good enough to offer as a compromise; continuing"
        else:
            action = f"noted; {failure.prevention}"
        self.actions.append({"mode": mode.value, "action": action, "likelihood": failure.likelihood,
                             "nodes": list(nodes)})
        self.record(ctx, "failure", "act", action, mode=mode.value)

    # --- report -------------------------------------------------------------------------

    def report(self, ctx: SearchContext) -> dict[str, Any]:
        """Everything the controller saw and did, for the result and --json."""
        s = self.settings
        best = ctx.best_quality_id
        best_quality = ctx.quality(best) if best is not None else 0.0
        return {
            "profile": self.profile,
            "thresholds": {"acceptable": s.acceptable_threshold, "goal": s.goal_threshold,
                           "compromise": s.compromise_threshold},
            "depth_limits": {"soft": self.policy.soft_limit if self.policy else None,
                             "hard": self.policy.hard_limit if self.policy else None},
            "goal_reached": bool(ctx.goals),
            "acceptable_reached": best_quality >= s.acceptable_threshold,
            "best_quality": round(best_quality, 4),
            "budget_requests": self.budget_requests,
            "compromise": None if self.compromise is None else {
                **self.compromise.to_dict(), "accepted": self.compromise_accepted},
            "anticipated_failures": self.anticipated,
            "actions": self.actions,
            "score_history": [round(q, 4) for q in ctx.quality_history()],
            "decisions": self.timeline,
        }
