"""The controller: one self-aware supervisor that any strategy runs under.

Strategies call `ctx.checkpoint()` after each unit of work (a level, an expansion, a batch of
simulations); the context forwards to the controller, which then, in this order:

1. anticipates failures and acts on the likely ones (likelihood >= act_threshold, each mode at
   most once every two checkpoints): widen the beam on a plateau, prune paraphrased thoughts on
   circular reasoning, re-score with more samples when the evaluator disagrees with itself,
   raise the temperature when the generator is exhausted, ask for more proposals when the
   validator rejects most of them, ask for more tokens before they run out, ask to raise the
   depth limit before the search reaches it, and offer the compromise when the problem looks
   intractable. A failure none of that prevents goes to the feedback handler once per mode,
   which may abort the search (stop reason `anticipated_failure`);
2. negotiates every budget limit the run has (tokens, calls, dollars, seconds) when less is left
   than one expansion costs;
3. applies the depth policy once per newly reached depth: continue, stop, ask for feedback at
   the soft limit, or backtrack to the best earlier depth. At the search's own depth limit, when
   the hard limit is higher and a thought is held back only by the limit, it asks whether to go
   deeper; an approved answer raises `ctx.max_depth` (never past the hard limit).

When a call is refused by a limit, the context asks `on_budget_exhausted`: an approved increase
raises that limit of the gateway's budget by exactly the amount granted and the call is retried;
otherwise a compromise is offered or the search terminates. A denied request is not asked again
for the same limit in the run. The wall clock stands still while a question waits for its answer.
Everything decided is kept in the timeline and the report.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ..graph import NodeStatus
from ..llm.budget import LIMIT_NAMES, BudgetLimits
from ..search.context import EXTRA as CONTEXT_EXTRA
from ..search.continuation import held_back
from ..search.events import ControlDecision
from ..search.operators import value_many
from ..search.stop import StopReason
from ..search.strategies.registry import needs_of
from .depth import DepthPolicy
from .failures import DetectorLimits, FailureAnticipator
from .feedback import AutomaticHandler, FeedbackHandler
from .negotiation import BudgetNegotiator, Negotiation
from .profiles import DEFAULT_DEPTH_MARGIN, DomainProfile
from .report import (
    Anticipation,
    BudgetRequestOutcome,
    CompromiseOutcome,
    ControlAction,
    ControlReport,
    Decision,
    DepthLimits,
    Thresholds,
)
from .types import (
    UNITS,
    Allowance,
    AnticipatedFailure,
    BudgetDecision,
    Compromise,
    DepthAction,
    DepthAnswer,
    DepthDecision,
    FailureAction,
    FailureMode,
    SearchState,
    ThoughtView,
    amount_text,
)

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
    #: Where the depth policy starts judging progress (None: the search's max_depth).
    soft_depth: int | None = None
    min_progress_rate: float = 0.05
    stagnation_threshold: int = 3
    #: Anticipated failures at least this likely are acted on.
    act_threshold: float = 0.6
    #: Widening the beam stops here.
    max_beam: int = 16
    #: The absolute depth bound: the controller may raise the search's max_depth up to it when the
    #: feedback handler approves (None: max_depth + depth_margin).
    hard_depth: int | None = None
    #: Levels past the search's max_depth that may be approved when hard_depth is not set (0: none).
    depth_margin: int = DEFAULT_DEPTH_MARGIN
    #: The domain profile these settings came from (`from_profile`): a run built with them gets
    #: that profile's search and grounding settings too, as `--profile` does.
    profile: str | None = None

    @classmethod
    def from_profile(cls, profile: DomainProfile, **overrides: Any) -> ControlSettings:
        """Settings from a profile, with single fields overridden (None values are ignored).

        The settings name their profile, so `solve(controller=...)` with them applies the profile's
        search and grounding settings as well (see thoughtloom.run.resolve).
        """
        values: dict[str, Any] = {
            "acceptable_threshold": profile.acceptable_threshold,
            "goal_threshold": profile.goal_threshold,
            "compromise_threshold": profile.compromise_threshold,
            "soft_depth": profile.soft_depth,
            "hard_depth": profile.hard_depth,
            "depth_margin": profile.depth_margin,
            "min_progress_rate": profile.min_progress_rate,
            "stagnation_threshold": profile.stagnation_threshold,
            "profile": profile.name,
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
        for name in ("soft_depth", "hard_depth"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be at least 1; got {value}")
        if self.depth_margin < 0:
            raise ValueError(f"depth_margin must be >= 0; got {self.depth_margin}")


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
        self.timeline: list[Decision] = []
        self.budget_requests: list[BudgetRequestOutcome] = []
        self.anticipated: list[Anticipation] = []
        self.actions: list[ControlAction] = []
        self.compromise: Compromise | None = None
        self.compromise_accepted: bool | None = None
        self.original_tokens: int | None = None
        self.original_limits = BudgetLimits()
        self.original_depth: int | None = None
        self.progress: list[tuple[int, float]] = []
        self._lock = asyncio.Lock()
        self._denied: set[str] = set()
        self._rejected_compromise: int | None = None
        self._judged_depth = 0
        self._checkpoints = 0
        self._acted_at: dict[FailureMode, int] = {}
        self._consulted: set[FailureMode] = set()
        self._depth_answers: dict[tuple[str, int], DepthAnswer] = {}
        self._spent_before = 0
        self._used_before: dict[str, float] = {}
        self._points: dict[str, list[tuple[float, float]]] = {}

    # --- wiring -------------------------------------------------------------------------

    @property
    def goal_quality(self) -> float:
        """The quality at which a thought counts as reaching the goal."""
        return self.settings.goal_threshold

    def attach(self, ctx: SearchContext) -> None:
        """Bind to a search: depth limits from its config and the settings, the budget it starts with."""
        limit = ctx.max_depth
        s = self.settings
        hard = max(limit, s.hard_depth if s.hard_depth is not None else limit + s.depth_margin)
        soft = s.soft_depth or limit
        self.original_depth = limit
        self.policy = DepthPolicy(soft, hard, s.min_progress_rate, s.stagnation_threshold)
        # The detectors read the search's live depth limit from the state (the controller may raise
        # it); the hard limit tells them whether raising it is possible at all.
        self.limits = DetectorLimits(
            acceptable_threshold=s.acceptable_threshold,
            goal_threshold=s.goal_threshold,
            stagnation_threshold=s.stagnation_threshold,
            min_progress_rate=s.min_progress_rate,
            depth_ceiling=hard,
        )
        budget = ctx.gateway.budget
        self.original_tokens = budget.limits.tokens
        self.original_limits = budget.limits
        self._spent_before = budget.spent.total
        self._used_before = {limit: budget.spent_of(limit) for limit in LIMIT_NAMES if limit != "tokens"}

    def record(self, ctx: SearchContext, kind: str, decision: str, reason: str, **detail: Any) -> None:
        """Keep a decision in the timeline and tell the event stream."""
        self.timeline.append(Decision(kind, decision, reason, ctx.gateway.budget.spent.total - self._spent_before,
                                      len(ctx.quality_history()), detail))
        if ctx.bus:
            ctx.bus.emit(ControlDecision(kind, decision, reason))

    # --- observation --------------------------------------------------------------------

    def _view(self, ctx: SearchContext, node_id: int) -> ThoughtView:
        node = ctx.graph.node(node_id)
        return ThoughtView(
            node_id, node.content, len(ctx.steps(node_id)), node.score or 0.0, ctx.quality(node_id),
            ctx.steps(node_id),
        )

    def _allowances(self, ctx: SearchContext) -> dict[str, Allowance]:
        """The run's limits other than tokens, in their units, with the progress observed against each."""
        budget = ctx.gateway.budget
        out: dict[str, Allowance] = {}
        for name in LIMIT_NAMES:
            bound = getattr(budget.limits, name)
            if name == "tokens" or bound is None:
                continue
            left = budget.left_of(name)
            assert left is not None
            spent = budget.spent_of(name) - self._used_before.get(name, 0.0)
            out[name] = Allowance(spent, bound, left, tuple(self._points.get(name, ())))
        return out

    def snapshot(self, ctx: SearchContext) -> SearchState:
        """The search as the detectors and policies see it now."""
        budget = ctx.gateway.budget
        spent = budget.spent.total - self._spent_before
        expansions = ctx.counts.expansions
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
            generated=ctx.counts.proposed,
            rejected=ctx.counts.rejected,
            duplicates=ctx.counts.duplicates,
            grounded=ctx.counts.grounded,
            grounding_failed=ctx.counts.grounding_failed,
            value_spreads=list(ctx.value_spreads),
            recent=[self._view(ctx, n) for n in recent[-RECENT_WINDOW:]],
            tokens_per_expansion=(spent / expansions) if expansions else None,
            progress=list(self.progress),
            natural_depth=ctx.task.natural_depth(ctx.problem),
            allowances=self._allowances(ctx),
            hard_depth=self.policy.hard_limit if self.policy is not None else None,
        )

    # --- checkpoints --------------------------------------------------------------------

    async def checkpoint(self, ctx: SearchContext) -> list[int] | None:
        """Act on what the search looks like now; a list means: continue from these nodes."""
        if ctx.stopped:
            return None
        self._checkpoints += 1
        state = self.snapshot(ctx)
        quality = state.best.quality if state.best else 0.0
        self.progress.append((state.tokens_spent, quality))
        state.progress = list(self.progress)
        for name, allowance in state.allowances.items():
            points = self._points.setdefault(name, [])
            points.append((allowance.spent, quality))
            state.allowances[name] = replace(allowance, progress=tuple(points))
        assert self.limits is not None and self.policy is not None
        if ctx.order is not None:
            # agent: steps are not scored thoughts, so the quality-based detectors and depth policy
            # have nothing to read; the controller steers the order, and negotiates when a call is refused.
            self._steer_agent(ctx, state)
            return None
        for failure in self.anticipator.anticipate(state, self.limits):
            self._note_failure(ctx, failure)
            if failure.likelihood >= self.settings.act_threshold and self._may_act(failure.mode):
                prevented = await self._act(ctx, failure, state)
                if not prevented and not ctx.stopped:
                    await self._consult(ctx, failure, state)
                if ctx.stopped:
                    return None
                if prevented:
                    state = self.snapshot(ctx)  # a raised limit or depth: negotiate on what is true now
        for limit in ("tokens", *state.allowances):
            negotiation = self.negotiator.negotiate(state, self._original(limit), limit=limit)
            if negotiation.decision is not BudgetDecision.SUFFICIENT:
                await self._resolve(ctx, negotiation, exhausted=False)
                if ctx.stopped:
                    return None
        if state.depth > self._judged_depth:
            self._judged_depth = state.depth
            return await self._judge_depth(ctx, state)
        return None

    async def on_budget_exhausted(self, ctx: SearchContext, limit: str, before: BudgetLimits) -> bool:
        """A call was refused by a budget limit: True to retry it (that limit was raised)."""
        async with self._lock:
            if ctx.stopped:
                return False
            if getattr(ctx.gateway.budget.limits, limit) != getattr(before, limit):
                return True  # raised while this call waited for the lock
            state = self.snapshot(ctx)
            negotiation = self.negotiator.negotiate(state, self._original(limit), exhausted=True, limit=limit)
            if negotiation.decision is BudgetDecision.SUFFICIENT:
                self.record(ctx, "budget", "stop", f"{UNITS[limit]} budget used up; {negotiation.reason}", limit=limit)
                return False
            return await self._resolve(ctx, negotiation, exhausted=True)

    def _original(self, limit: str) -> float | None:
        return getattr(self.original_limits, limit)

    # --- budget -------------------------------------------------------------------------

    async def _request(self, ctx: SearchContext, negotiation: Negotiation) -> bool:
        """Ask the handler for the negotiated increase; True when some was granted (the limit is raised)."""
        request = negotiation.request
        assert request is not None
        limit = request.limit
        situation = negotiation.situation.to_dict()
        token_detail = {"tokens": request.tokens} if limit == "tokens" else {}
        # The justification goes to the handler (and the report); the live line stays short.
        self.record(ctx, "budget", "request_increase", f"asking for {request.describe()}: {negotiation.reason}",
                    limit=limit, amount=request.amount, **token_detail, justification=request.justification,
                    situation=situation)
        with ctx.gateway.budget.paused():
            granted = await self.handler.request_budget(request)
        granted = max(0, int(granted) if limit in ("tokens", "calls") else granted)
        self.budget_requests.append(BudgetRequestOutcome(request, granted))
        if granted > 0:
            ctx.gateway.budget.raise_limit(granted, limit)
            self.record(ctx, "budget", "approved", f"{_LIMIT_WORD[limit]} limit raised by {_amount(limit, granted)}",
                        limit=limit, amount=granted, **({"tokens": granted} if limit == "tokens" else {}))
            return True
        self._denied.add(limit)
        self.record(ctx, "budget", "denied", f"{_LIMIT_WORD[limit]} budget increase denied", limit=limit)
        return False

    async def _resolve(self, ctx: SearchContext, negotiation: Negotiation, *, exhausted: bool) -> bool:
        situation = negotiation.situation.to_dict()
        limit = negotiation.situation.limit
        if negotiation.decision is BudgetDecision.REQUEST_INCREASE and limit not in self._denied:
            if await self._request(ctx, negotiation):
                return True
        elif negotiation.decision is BudgetDecision.REQUEST_INCREASE:
            pass  # a denied request is not asked again: fall through to a compromise
        elif negotiation.decision is BudgetDecision.TERMINATE:
            self.record(ctx, "budget", "terminate", negotiation.reason, situation=situation)
            ctx.stop(StopReason.budget(limit))
            return False
        compromise = negotiation.compromise or self.negotiator.compromise(self.snapshot(ctx))
        if compromise is not None and compromise.node_id != self._rejected_compromise:
            why = (
                negotiation.reason
                if negotiation.compromise is not None
                else "no more budget: offering the best thought"
            )
            if await self._offer(ctx, compromise, why):
                return False
        # Short of a limit but not out of it (a checkpoint): the search spends what is left, and
        # "terminate" is recorded only when a refused call really ends it.
        if exhausted:
            if compromise is None:
                self.record(ctx, "budget", "terminate",
                            "no budget left and no thought above the compromise threshold", situation=situation)
            ctx.stop(StopReason.budget(limit))
        return False

    async def _offer(self, ctx: SearchContext, compromise: Compromise, reason: str) -> bool:
        self.compromise = compromise
        self.record(ctx, "compromise", "propose", reason, compromise=compromise.to_dict())
        with ctx.gateway.budget.paused():
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

    def _deepening_helps(self, ctx: SearchContext, state: SearchState, *, held: bool) -> bool:
        """Whether a deeper limit could matter: room below the hard limit, a tree-growing strategy, no
        goal or acceptable thought yet, answers not all complete within the limit, and (held) some
        thought the limit alone keeps from being expanded."""
        assert self.policy is not None
        if ctx.max_depth >= self.policy.hard_limit or not needs_of(ctx.config.strategy).grows_depth or ctx.goals:
            return False
        if state.best is not None and state.best.quality >= self.settings.acceptable_threshold:
            return False
        if state.natural_depth is not None and state.natural_depth <= ctx.max_depth:
            return False
        return not held or any(ctx.held_by_depth(n.id) for n in ctx.graph)

    async def _judge_depth(self, ctx: SearchContext, state: SearchState) -> list[int] | None:
        assert self.policy is not None
        decision = self.policy.decide(state.depth, state.score_history)
        at_limit = state.depth >= ctx.max_depth
        if decision.action is DepthAction.STOP:
            self.record(ctx, "depth", "stop", decision.reason, suggestion=decision.suggestion)
            return None  # the hard limit bounds the search's own depth limit: it stops there by itself
        if decision.action is DepthAction.BACKTRACK:
            self.record(ctx, "depth", "backtrack", decision.reason, suggestion=decision.suggestion)
            return self._backtrack(ctx, state)
        if at_limit and not self._deepening_helps(ctx, state, held=True):
            return None  # the search ends at its limit by itself, and more depth would not change that
        if decision.action is DepthAction.CONTINUE:
            if not at_limit:
                if decision.reason:
                    self.record(ctx, "depth", "continue", decision.reason)
                return None
            # Still progressing, but the search's own limit would end it here: the soft limit is a
            # checkpoint, not a wall, so ask whether to go on.
            decision = DepthDecision(
                DepthAction.REQUEST_FEEDBACK,
                f"depth limit {ctx.max_depth} reached without an acceptable thought"
                + (f" ({decision.reason})" if decision.reason else ""),
                f"go deeper, up to the hard limit {self.policy.hard_limit}", raises_limit=True,
            )
        answer = await self._ask_depth(ctx, state, decision)
        if answer.action is DepthAction.CONTINUE and answer.extra_depth > 0:
            self._deepen(ctx, state.depth + answer.extra_depth)
            return None
        if answer.action is DepthAction.BACKTRACK:
            self.record(ctx, "depth", "backtrack", "feedback asked to try another branch")
            return self._backtrack(ctx, state)
        if at_limit:
            # The search's own limit ends this line; other open branches (best_first, mcts) go on.
            self.record(ctx, "depth", "stop", f"feedback: stop at the depth limit {ctx.max_depth}")
            return None
        self.record(ctx, "depth", "stop", "feedback: stop at the soft depth limit")
        ctx.stop(StopReason.DEPTH_SOFT_LIMIT)
        return None

    async def _ask_depth(self, ctx: SearchContext, state: SearchState, decision: DepthDecision) -> DepthAnswer:
        """Ask the handler about depth once per question: going past the search's depth limit is asked
        once per limit, judging progress at the soft limit once per depth (a repeat gets the first answer)."""
        key = (
            ("limit", ctx.max_depth)
            if state.depth >= ctx.max_depth or decision.raises_limit
            else ("depth", state.depth)
        )
        known = self._depth_answers.get(key)
        if known is not None:
            return known
        self.record(ctx, "depth", "request_feedback", decision.reason, suggestion=decision.suggestion)
        with ctx.gateway.budget.paused():
            answer = await self.handler.depth_feedback(decision, state)
        self._depth_answers[key] = answer
        return answer

    def _deepen(self, ctx: SearchContext, target: int) -> bool:
        """Move the soft limit to `target` and raise the search's depth limit to it (within the hard
        limit); True when the search may now go deeper than before."""
        assert self.policy is not None
        new = min(self.policy.hard_limit, target)
        old_soft, old = self.policy.soft_limit, ctx.max_depth
        self.policy.soft_limit = max(old_soft, new)
        if new > old:
            ctx.max_depth = new
        if (self.policy.soft_limit, ctx.max_depth) == (old_soft, old):
            return False  # an answer given already at this depth: nothing new to do
        reason = f"soft limit moved to {self.policy.soft_limit}" + (
            f"; the search's depth limit raised from {old} to {new} (hard limit {self.policy.hard_limit})"
            if new > old else "")
        self.record(ctx, "depth", "continue_deeper", reason, max_depth=ctx.max_depth)
        return True

    def _backtrack(self, ctx: SearchContext, state: SearchState) -> list[int] | None:
        history = state.score_history
        if not history:
            return None
        target = history.index(max(history)) + 1
        candidates = [
            n.id for n in ctx.graph
            if len(ctx.steps(n.id)) == target and n.id not in ctx.expanded and n.score is not None
            and n.status in (_S.SUCCEEDED, _S.PRUNED) and n.extra.get(CONTEXT_EXTRA.rejected) is None
        ]
        candidates.sort(key=lambda n: -ctx.quality(n))
        chosen = candidates[: ctx.beam]
        for n in chosen:
            ctx.revive(n)
        self.actions.append(ControlAction("depth", f"backtracked to depth {target}", nodes=tuple(chosen)))
        return chosen or None

    # --- failures -----------------------------------------------------------------------

    def _note_failure(self, ctx: SearchContext, failure: AnticipatedFailure) -> None:
        self.anticipated.append(Anticipation(self._checkpoints, failure))
        if ctx.bus:
            ctx.bus.emit(
                ControlDecision(
                    "failure", failure.mode.value, f"likelihood {failure.likelihood:.2f}: {failure.evidence}"
                )
            )

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

    async def _consult(self, ctx: SearchContext, failure: AnticipatedFailure, state: SearchState) -> None:
        """A likely failure nothing prevented: the handler says continue or abort (asked once per mode)."""
        if failure.mode in self._consulted:
            return
        self._consulted.add(failure.mode)
        with ctx.gateway.budget.paused():
            answer = await self.handler.failure_feedback(failure, state)
        if answer is FailureAction.ABORT:
            self.record(ctx, "failure", "abort", f"{failure.mode.value} could not be prevented: {failure.mitigation}",
                        mode=failure.mode.value, likelihood=failure.likelihood)
            ctx.stop(StopReason.ANTICIPATED_FAILURE)
            return
        self.record(ctx, "failure", "continue", f"{failure.mode.value} could not be prevented; carrying on",
                    mode=failure.mode.value, likelihood=failure.likelihood)

    async def _act(self, ctx: SearchContext, failure: AnticipatedFailure, state: SearchState) -> bool:
        """Try to prevent the failure; True when something was done that may prevent it."""
        self._acted_at[failure.mode] = self._checkpoints
        mode = failure.mode
        action: str
        prevented = True
        nodes: Sequence[int] = ()
        if mode is FailureMode.QUALITY_PLATEAU:
            old = ctx.beam
            ctx.beam = min(self.settings.max_beam, old + max(1, old // 2))
            prevented = ctx.beam > old
            action = f"widened the beam from {old} to {ctx.beam}" if prevented else f"the beam is already at {old}"
        elif mode is FailureMode.CIRCULAR_REASONING:
            nodes = [n for n in failure.nodes if ctx.graph.node(n).status is _S.SUCCEEDED and n not in ctx.expanded]
            for n in nodes:
                ctx.prune(n, "restates an earlier thought (circular reasoning)")
            prevented = bool(nodes)
            action = f"pruned {len(nodes)} thoughts that restate earlier ones"
        elif mode is FailureMode.EVALUATOR_UNRELIABLE:
            old = ctx.value_samples
            ctx.value_samples = min(9, old * 2)
            live = [v.id for v in state.recent if ctx.graph.node(v.id).status is _S.SUCCEEDED
                    and v.id not in ctx.expanded][-ctx.beam:]
            await value_many(ctx, live, rescore=True)
            nodes = live
            prevented = ctx.value_samples > old or bool(live)
            action = f"value samples {old} -> {ctx.value_samples}; re-scored {len(live)} open thoughts"
        elif mode is FailureMode.GENERATOR_EXHAUSTION:
            old_t = ctx.temperature
            ctx.temperature = min(1.3, old_t + 0.2)
            prevented = ctx.temperature > old_t
            action = f"raised the temperature from {old_t:.1f} to {ctx.temperature:.1f}"
        elif mode is FailureMode.GROUNDING_FAILURE:
            old = ctx.breadth
            ctx.breadth = min(12, old + 2)
            prevented = ctx.breadth > old
            action = f"asked for more proposals per expansion: breadth {old} -> {ctx.breadth}"
        elif mode is FailureMode.BUDGET_EXHAUSTED:
            prevented, action = await self._prevent_exhaustion(ctx, state)
        elif mode is FailureMode.DEPTH_EXCEEDED:
            prevented, action = await self._prevent_depth_limit(ctx, failure, state)
        else:  # PROBLEM_INTRACTABLE
            compromise = self.negotiator.compromise(state)
            waiting = len(held_back(ctx))
            if compromise is not None and waiting:
                # The search will try these before it ends: a compromise now would cut that short.
                action = (f"no compromise offered: {waiting} thought{'s are' if waiting != 1 else ' is'} held back by "
                          "the beam, still to be tried")
                self.actions.append(ControlAction(mode.value, action, failure.likelihood))
                self.record(ctx, "failure", "act", action, mode=mode.value)
                return True
            if compromise is not None and compromise.node_id != self._rejected_compromise:
                action = "offered the best thought as a compromise"
                self.actions.append(ControlAction(mode.value, action, failure.likelihood))
                self.record(ctx, "failure", "act", action, mode=mode.value)
                await self._offer(ctx, compromise, f"problem looks intractable: {failure.evidence}")
                return False  # accepted: the search stopped; rejected: the handler may still abort
            prevented = False
            action = "no thought good enough to offer as a compromise"
        self.actions.append(ControlAction(mode.value, action, failure.likelihood, tuple(nodes)))
        self.record(ctx, "failure", "act", action, mode=mode.value)
        return prevented

    async def _prevent_exhaustion(self, ctx: SearchContext, state: SearchState) -> tuple[bool, str]:
        """Tokens will run out before acceptable: ask for the increase now, through the negotiator."""
        if "tokens" in self._denied:
            return False, "a token increase was already denied"
        negotiation = self.negotiator.negotiate(state, self._original("tokens"), limit="tokens", anticipated=True)
        if negotiation.decision is not BudgetDecision.REQUEST_INCREASE:
            return False, f"no token increase asked: {negotiation.reason}"
        assert negotiation.request is not None
        granted = await self._request(ctx, negotiation)
        return granted, (f"asked for {negotiation.request.describe()} before they run out: "
                         + ("granted" if granted else "denied"))

    async def _prevent_depth_limit(self, ctx: SearchContext, failure: AnticipatedFailure,
                                   state: SearchState) -> tuple[bool, str]:
        """The depth limit will be reached before acceptable: ask to raise it now, within the hard limit."""
        assert self.policy is not None
        reached = state.depth >= ctx.max_depth
        if not self._deepening_helps(ctx, state, held=reached):
            why = (f"the depth limit {ctx.max_depth} is the hard limit" if ctx.max_depth >= self.policy.hard_limit
                   else "more depth would not help this search")
            return False, f"no deeper limit asked: {why}"
        decision = DepthDecision(
            DepthAction.REQUEST_FEEDBACK,
            (f"depth limit {ctx.max_depth} reached" if reached else f"likely to reach the depth limit {ctx.max_depth}")
            + f" before an acceptable thought: {failure.evidence}",
            failure.prevention, raises_limit=True,
        )
        answer = await self._ask_depth(ctx, state, decision)
        if answer.action is DepthAction.CONTINUE and answer.extra_depth > 0:
            old = ctx.max_depth
            self._deepen(ctx, old + answer.extra_depth)
            return ctx.max_depth > old, f"asked to raise the depth limit: now {ctx.max_depth} (was {old})"
        return False, f"asked to raise the depth limit {ctx.max_depth}: declined"

    # --- report -------------------------------------------------------------------------

    def report(self, ctx: SearchContext) -> ControlReport:
        """Everything the controller saw and did, for the result and --json."""
        s = self.settings
        best = ctx.best_quality_id
        best_quality = ctx.quality(best) if best is not None else 0.0
        return ControlReport(
            profile=self.profile,
            thresholds=Thresholds(s.acceptable_threshold, s.goal_threshold, s.compromise_threshold),
            depth_limits=DepthLimits(self.policy.soft_limit if self.policy else None,
                                     self.policy.hard_limit if self.policy else None,
                                     ctx.max_depth, self.original_depth),
            goal_reached=bool(ctx.goals),
            acceptable_reached=best_quality >= s.acceptable_threshold,
            best_quality=round(best_quality, 4),
            budget_requests=tuple(self.budget_requests),
            compromise=(None if self.compromise is None
                        else CompromiseOutcome(self.compromise, self.compromise_accepted)),
            anticipated_failures=tuple(self.anticipated),
            actions=tuple(self.actions),
            score_history=tuple(round(q, 4) for q in ctx.quality_history()),
            decisions=tuple(self.timeline),
        )


#: How decision lines name a limit: "token limit raised by 1,200", "call budget increase denied".
_LIMIT_WORD = {"tokens": "token", "calls": "call", "cost_usd": "dollar", "wall_s": "wall-clock"}


def _amount(limit: str, amount: float) -> str:
    """An amount of a limit as the decision lines show it: '1,200', '3', '$0.05', '30s'."""
    if limit == "wall_s":
        return f"{amount:,.0f}s"
    return amount_text(limit, amount) if limit == "cost_usd" else f"{int(amount):,}"
