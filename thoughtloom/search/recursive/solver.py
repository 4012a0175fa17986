"""The recursive solver: explicit solve(goal) calls over decompositions with recomposition contracts.

solve(goal) ranks the goal's plans (the task's, the model's, and solving directly), keeps the best
`beam` of them (the frontier width w), and tries them in order: a decomposition solves its children
(concurrently when independent, in order for a chain), gates on their typed outputs, recomposes,
verifies, and on failure follows its contract's failure policy (retry, replan, backtrack to the
next alternative). Every node carries its recursion record in node.extra["recursion"].
"""

from __future__ import annotations

import asyncio
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

from ...graph import EdgeKind, NodeKind, NodeStatus
from ...tasks.base import Query
from ...tasks.recursion.contract import ContractError, FailurePolicy, check_contract
from ...tasks.recursion.hooks import Goal, Plan, RecursiveHooks, Verification
from ..context import EXTRA as CONTEXT_EXTRA, SearchContext
from ..events import Backtracked, NodeScored, ThoughtRejected

_S = NodeStatus
#: Ranking weights of a branch: decomposition quality, child completion, verification confidence.
W_PLAN, W_CHILDREN, W_VERIFY = 0.2, 0.3, 0.5
#: Verification of a leaf that has a typed output but no checker: present, not proven.
UNCHECKED = Verification(True, 0.6, ("typed output; no checker for this goal",))


@dataclass(frozen=True, slots=True)
class RecursionExtra:
    """The node.extra keys the solver writes: each node's recursion record, why a branch failed."""

    recursion: str = "recursion"
    rejected: str = CONTEXT_EXTRA.rejected


EXTRA: Final = RecursionExtra()


@dataclass(slots=True)
class Outcome:
    """What solve(goal) or one attempt at it produced."""

    goal: Goal
    mode: str | None
    value: Any
    text: str | None
    verification: Verification
    score: float
    #: The node holding the result (a solve attempt or a recomposition); None without a result.
    result_node: int | None = None


def branch_score(plan_quality: float, completion: float, verification: Verification) -> float:
    """Rank of a branch: decomposition quality, child completion and verification confidence combined."""
    confidence = verification.confidence if verification.passed else verification.confidence * 0.5
    return round(W_PLAN * plan_quality + W_CHILDREN * completion + W_VERIFY * confidence, 4)


class Solver:
    """Runs solve(goal) recursively over one SearchContext with one task's hooks."""

    def __init__(self, ctx: SearchContext, hooks: RecursiveHooks) -> None:
        self.ctx = ctx
        self.hooks = hooks
        #: Tokens spent by the calls made at each recursion depth (for the per-level budget).
        self.level_tokens: dict[int, int] = defaultdict(int)
        self.stats: Counter[str] = Counter()
        self.root_outcomes: list[Outcome] = []

    # --- the recursion ----------------------------------------------------------------

    async def solve(
        self, goal: Goal, depth: int, ancestors: tuple[Goal, ...], node: int, policy: FailurePolicy
    ) -> Outcome:
        """Solve one goal: rank its plans, try them within the frontier, return the best outcome."""
        ctx, hooks = self.ctx, self.hooks
        self.stats["goals"] += 1
        self._record(node, goal=goal.text, context=list(goal.context), spec=hooks.spec(goal).to_dict())
        self._start(node)
        for ancestor in ancestors:
            if hooks.equivalent(goal, ancestor):
                # An equivalent goal above this one: decomposing it again would loop forever.
                self.stats["cycles"] += 1
                why = f"cycle: equivalent to the ancestor goal {ancestor.text[:60]!r}"
                return self._fail_goal(node, goal, why)
        plans: list[Plan] = []
        if depth < ctx.max_depth:
            plans.extend(hooks.plans(goal, depth))
            if hooks.model_plans:
                plans.extend(await self._propose(goal, depth, None))
        frontier = self._frontier(node, goal, depth, plans)
        best: Outcome | None = None
        backtracks = replans = 0
        i = 0
        while i < len(frontier) and not ctx.stopped:
            plan = frontier[i]
            i += 1
            outcome = await self._attempt(goal, plan, depth, ancestors, node, policy)
            if best is None or (outcome.verification.passed, outcome.score) > (best.verification.passed, best.score):
                best = outcome
            if outcome.verification.passed or ctx.stopped:
                break
            failed_policy = plan.contract.failure_policy if plan.contract else policy
            if replans < failed_policy.replan and hooks.model_plans and depth < ctx.max_depth:
                replans += 1
                self.stats["replans"] += 1
                feedback = "; ".join(outcome.verification.diagnostics)[:300]
                fresh = self._frontier(node, goal, depth, await self._propose(goal, depth, feedback), direct=False)
                frontier[i:i] = fresh
            if i >= len(frontier):
                break
            if backtracks >= failed_policy.backtrack:
                self._note(node, f"backtrack limit {failed_policy.backtrack} of the failed plan reached")
                break
            backtracks += 1
            self.stats["backtracks"] += 1
            if ctx.bus and outcome.result_node is not None:
                ctx.bus.emit(Backtracked(outcome.result_node, node))
        if best is None:
            return self._fail_goal(
                node, goal, "no plan could run" if not ctx.stopped else f"stopped: {ctx.stop_reason}"
            )
        self._record(node, mode=best.mode, result=best.text, verification=best.verification.to_dict(), score=best.score)
        self._score(node, best.score)
        self._finish(node, best.verification.passed, None if best.verification.passed else
                     "; ".join(best.verification.diagnostics)[:200])
        return best

    def _frontier(self, node: int, goal: Goal, depth: int, plans: Sequence[Plan], direct: bool = True) -> list[Plan]:
        """Valid plans ranked by quality, cut to the frontier width; invalid ones are recorded and cut."""
        valid: list[Plan] = []
        for plan in plans:
            reason = plan.invalid or self._invalid(plan)
            if reason is not None:
                self._cut(node, plan, reason)
                continue
            valid.append(plan)
        if direct and self.hooks.allow_direct(goal, depth) and not any(p.mode == "solve" for p in valid):
            valid.append(Plan("solve", quality=self.hooks.solve_quality))
        valid.sort(key=lambda p: -p.quality)  # stable: equal quality keeps the proposer's order
        self.stats["plans"] += len(valid)
        return valid[: self.ctx.beam]

    def _invalid(self, plan: Plan) -> str | None:
        if plan.mode == "solve":
            return None
        if len(plan.children) > self.ctx.config.recursive_fanout:
            return f"fan-out {len(plan.children)} above the limit {self.ctx.config.recursive_fanout}"
        try:
            check_contract(plan.contract, len(plan.children))
        except ContractError as exc:
            return f"invalid contract: {exc}"
        return None

    async def _attempt(
        self, goal: Goal, plan: Plan, depth: int, ancestors: tuple[Goal, ...], node: int, policy: FailurePolicy
    ) -> Outcome:
        outcome = (
            await self._solve_directly(goal, plan, depth, node, policy) if plan.mode == "solve"
            else await self._decompose(goal, plan, depth, ancestors, node)
        )
        if depth == 0 and outcome.result_node is not None:
            # Root-level results are the search's candidate answers: scored through the context so
            # goals, the best answer and the controller see them.
            self.root_outcomes.append(outcome)
            if outcome.verification.passed:  # a failed result stays failed; it can still be the best answer
                above = self.ctx.graph.primary_parent(outcome.result_node)
                # The decomposition first: the result's path score extends it.
                if above is not None and above != self.ctx.root:
                    self.ctx.set_score(above, outcome.score)
                self.ctx.set_score(outcome.result_node, outcome.score)
            await self.ctx.checkpoint()
        return outcome

    async def _solve_directly(self, goal: Goal, plan: Plan, depth: int, node: int, policy: FailurePolicy) -> Outcome:
        hooks = self.hooks
        spec = hooks.spec(goal)
        best: Outcome | None = None
        feedback: str | None = None
        for attempt in range(1 + policy.retry):
            if attempt:
                self.stats["retries"] += 1
            text = await self._ask(hooks.solve_query(goal, attempt, feedback), "solve", (goal, attempt), depth)
            if text is None:
                break
            value = hooks.parse_result(goal, text)
            why = spec.check(value)
            content = hooks.render(goal, value) if why is None else (text.strip()[:200] or "(empty reply)")
            nid = self._add(node, content, "solve", NodeKind.HYPOTHESIS, EdgeKind.ELABORATION)
            if nid is None:
                break
            ver = Verification(False, 0.0, (f"untyped output: {why}",)) if why else await self._verify(
                goal, value, None, depth)
            score = branch_score(plan.quality, 1.0, ver) if why is None else 0.0
            self._record(nid, goal=goal.text, mode="solve", result=content if why is None else None,
                         verification=ver.to_dict(), score=score, attempt=attempt)
            self._score(nid, score)
            self._finish(nid, ver.passed, None if ver.passed else "; ".join(ver.diagnostics)[:200])
            out = Outcome(
                goal, "solve", value if why is None else None, content if why is None else None, ver, score, nid
            )
            if best is None or (out.verification.passed, out.score) > (best.verification.passed, best.score):
                best = out
            if ver.passed:
                break
            feedback = "; ".join(ver.diagnostics)[:200]
        if best is None:
            return Outcome(goal, "solve", None, None, Verification(False, 0.0, (self._why_no_call(depth),)), 0.0)
        return best

    async def _decompose(self, goal: Goal, plan: Plan, depth: int, ancestors: tuple[Goal, ...], node: int) -> Outcome:
        hooks = self.hooks
        contract = plan.contract
        assert contract is not None  # _frontier cut plans without a well-formed contract
        dnode = self._add(node, plan.describe(), "decompose", NodeKind.DECOMPOSITION, EdgeKind.ELABORATION)
        if dnode is None:
            return Outcome(goal, plan.mode, None, None, Verification(False, 0.0, ("max_nodes reached",)), 0.0)
        self.stats["decompositions"] += 1
        self._record(dnode, goal=goal.text, mode=plan.mode, children=[c.text for c in plan.children],
                     contract=contract.to_dict(), source=plan.source, quality=plan.quality)
        self._start(dnode)
        lineage = (*ancestors, goal)
        children = [replace(c, spec=s) for c, s in zip(plan.children, contract.child_specs, strict=True)]
        child_nodes: list[int] = []
        for child in children:
            cn = self._add(dnode, child.text, "decompose", NodeKind.QUESTION, EdgeKind.DEPENDENCY)
            if cn is None:
                return self._fail_decomposition(dnode, goal, plan, 0.0, "max_nodes reached")
            child_nodes.append(cn)
        policy = contract.failure_policy
        if plan.mode == "chain":
            # A chain hands each step's result to the next step, as the contract's order says.
            outs: list[Outcome] = []
            for child, cn in zip(children, child_nodes, strict=True):
                if outs and outs[-1].text is not None:
                    child = replace(child, context=(*child.context, f"Result of the previous step: {outs[-1].text}"))
                outs.append(await self.solve(child, depth + 1, lineage, cn, policy))
        else:
            # Independent children run concurrently; each sees only its own goal and context.
            outs = list(
                await asyncio.gather(
                    *(
                        self.solve(child, depth + 1, lineage, cn, policy)
                        for child, cn in zip(children, child_nodes, strict=True)
                    )
                )
            )
        best: Outcome | None = None
        feedback: str | None = None
        for attempt in range(1 + policy.retry):
            missing = [
                f"child {i + 1}: {_why_missing(outs[i], why)}"
                for i, why in enumerate(s.check(o.value) for s, o in zip(contract.child_specs, outs, strict=True))
                if why
            ]
            completion = sum(o.verification.passed for o in outs) / len(outs)
            if missing:
                # Gate: every required child output must be present and typed before recomposing.
                reason = "child outputs missing or untyped: " + "; ".join(missing)[:240]
                return self._fail_decomposition(dnode, goal, plan, completion, reason, best)
            if attempt:
                self.stats["retries"] += 1
            values = [o.value for o in outs]
            value = hooks.combine(goal, plan, values)
            programmatic = value is not None
            raw = None
            if not programmatic:
                raw = await self._ask(hooks.combine_query(goal, plan, values, feedback), "recompose",
                                      (goal, plan.describe(), attempt), depth)
                if raw is None:
                    return self._fail_decomposition(dnode, goal, plan, completion, self._why_no_call(depth), best)
                value = hooks.parse_result(goal, raw)
            why = hooks.spec(goal).check(value)
            content = hooks.render(goal, value) if why is None else ((raw or "").strip()[:200] or "(no result)")
            rnode = self._add_recomposition(dnode, child_nodes, content)
            if rnode is None:
                return self._fail_decomposition(dnode, goal, plan, completion, "max_nodes reached", best)
            self.stats["recompositions"] += 1
            if why is not None:
                ver = Verification(False, 0.0, (f"recomposition mismatch: {why}",))
            else:
                ver = await self._verify(goal, value, contract.verify_instruction, depth)
            score = branch_score(plan.quality, completion, ver) if why is None else 0.0
            self._record(rnode, goal=goal.text, mode="recompose", result=content if why is None else None,
                         verification=ver.to_dict(), score=score, by="task" if programmatic else "model",
                         attempt=attempt)
            self._score(rnode, score)
            self._finish(rnode, ver.passed, None if ver.passed else "; ".join(ver.diagnostics)[:200])
            out = Outcome(goal, plan.mode, value if why is None else None, content if why is None else None,
                          ver, score, rnode)
            if best is None or (out.verification.passed, out.score) > (best.verification.passed, best.score):
                best = out
            if ver.passed:
                break
            self.stats["recompositions_failed"] += 1
            feedback = "; ".join(ver.diagnostics)[:200]
            if attempt < policy.retry:
                outs = await self._resolve_failed(children, child_nodes, outs, depth, lineage, policy)
        assert best is not None
        self._record(dnode, result=best.text, verification=best.verification.to_dict(), score=best.score)
        self._score(dnode, best.score)
        self._finish(dnode, best.verification.passed,
                     None if best.verification.passed else "; ".join(best.verification.diagnostics)[:200])
        return best

    async def _resolve_failed(
        self, children: list[Goal], child_nodes: list[int], outs: list[Outcome], depth: int,
        lineage: tuple[Goal, ...], policy: FailurePolicy,
    ) -> list[Outcome]:
        """A retry: solve again the children whose outputs failed their own check (in new nodes)."""
        redo = [i for i, o in enumerate(outs) if not o.verification.passed]
        if not redo:
            return outs
        new_nodes = []
        for i in redo:
            cn = self._add(
                child_nodes[i], f"retry: {children[i].text}", "retry", NodeKind.QUESTION, EdgeKind.REFINEMENT
            )
            new_nodes.append(cn)
        # A child whose retry node could not be added (the graph refused it) keeps its first outcome;
        # the others are paired with their own retry, never with a neighbour's.
        placed = [(i, cn) for i, cn in zip(redo, new_nodes, strict=True) if cn is not None]
        fresh = await asyncio.gather(
            *(self.solve(children[i], depth + 1, lineage, cn, policy) for i, cn in placed)
        )
        outs = list(outs)
        for (i, _), out in zip(placed, fresh, strict=True):
            if (out.verification.passed, out.score) > (outs[i].verification.passed, outs[i].score):
                outs[i] = out
        return outs

    # --- model calls, verification ----------------------------------------------------

    async def _propose(self, goal: Goal, depth: int, feedback: str | None) -> list[Plan]:
        text = await self._ask(self.hooks.propose_query(goal, self.ctx.breadth, feedback), "decompose",
                               (goal, feedback), depth)
        if text is None:
            return []
        return self.hooks.parse_plans(goal, text)[: self.ctx.breadth]

    async def _verify(self, goal: Goal, value: Any, instruction: str | None, depth: int) -> Verification:
        """The task's exact check when it has one; else the model following the instruction; else typed only."""
        exact = self.hooks.verify(goal, value)
        if exact is not None:
            return exact
        if instruction is None:
            if depth > 0:
                return UNCHECKED
            instruction = "The result fully and correctly achieves the goal."
        text = await self._ask(self.hooks.verify_query(goal, instruction, value), "verify", (goal, repr(value)), depth)
        if text is None:
            return Verification(False, 0.0, (self._why_no_call(depth),))
        return self.hooks.parse_verification(text)

    async def _ask(self, query: Query, purpose: str, key: object, depth: int) -> str | None:
        cap = self.ctx.config.recursive_level_tokens
        if cap is not None and self.level_tokens[depth] >= cap:
            self.stats["level_budget_refusals"] += 1
            return None
        got = await self.ctx.ask(query, 1, purpose, key)
        if got is None:
            return None
        texts, cost = got
        self.level_tokens[depth] += cost
        return texts[0]

    def _why_no_call(self, depth: int) -> str:
        if self.ctx.stopped:
            return f"no model call: search stopped ({self.ctx.stop_reason})"
        return f"no model call: level {depth} token budget of {self.ctx.config.recursive_level_tokens} spent"

    # --- graph bookkeeping ------------------------------------------------------------

    def _add(self, parent: int, content: str, creator: str, kind: NodeKind, edge: EdgeKind) -> int | None:
        return self.ctx.add_thought([parent], content, creator, kind=kind, edge_kind=edge)

    def _add_recomposition(self, dnode: int, child_nodes: list[int], content: str) -> int | None:
        # The recomposition has the decomposition and every child as parents: the merge is visible.
        return self.ctx.add_thought([dnode, *child_nodes], content, "recompose", kind=NodeKind.SYNTHESIS,
                                    edge_kind=EdgeKind.AGGREGATION)

    def _record(self, node: int, **fields: Any) -> None:
        record = self.ctx.graph.node(node).extra.setdefault(EXTRA.recursion, {
            "goal": None, "mode": None, "children": [], "contract": None, "result": None,
            "verification": None, "score": None,
        })
        record.update(fields)

    def _note(self, node: int, note: str) -> None:
        self.ctx.graph.node(node).extra.setdefault(EXTRA.recursion, {}).setdefault("notes", []).append(note)

    def _score(self, node: int, score: float) -> None:
        # Inner nodes are scored here, not through ctx.set_score: only root-level results compete
        # as the search's answer.
        n = self.ctx.graph.node(node)
        if node == self.ctx.root:
            return
        n.score = score
        if self.ctx.bus:
            self.ctx.bus.emit(NodeScored(node, score, score))

    def _start(self, node: int) -> None:
        graph = self.ctx.graph
        if graph.node(node).status is _S.PENDING:
            graph.set_status(node, _S.READY)
        if graph.node(node).status is _S.READY:
            graph.set_status(node, _S.IN_PROGRESS)

    def _finish(self, node: int, ok: bool, reason: str | None) -> None:
        if node == self.ctx.root:
            return
        self._start(node)
        graph = self.ctx.graph
        if graph.node(node).status is _S.IN_PROGRESS:
            graph.set_status(node, _S.SUCCEEDED if ok else _S.FAILED)
        if not ok and reason:
            graph.node(node).extra[EXTRA.rejected] = reason

    def _cut(self, node: int, plan: Plan, reason: str) -> None:
        """Record an invalid decomposition as a failed node with the reason, and cut its branch."""
        self.stats["invalid_plans"] += 1
        nid = self._add(node, plan.describe(), "decompose", NodeKind.DECOMPOSITION, EdgeKind.ELABORATION)
        if nid is None:
            return
        self._record(nid, mode=plan.mode, children=[c.text for c in plan.children],
                     contract=plan.contract.to_dict() if plan.contract else None, source=plan.source,
                     verification=Verification(False, 0.0, (reason,)).to_dict(), score=0.0, invalid=reason)
        self._finish(nid, False, reason)
        self.ctx.counts.rejected += 1
        if self.ctx.bus:
            self.ctx.bus.emit(ThoughtRejected(nid, reason))

    def _fail_goal(self, node: int, goal: Goal, reason: str) -> Outcome:
        ver = Verification(False, 0.0, (reason,))
        self._record(node, verification=ver.to_dict(), score=0.0)
        self._finish(node, False, reason)
        return Outcome(goal, None, None, None, ver, 0.0)

    def _fail_decomposition(
        self, dnode: int, goal: Goal, plan: Plan, completion: float, reason: str, best: Outcome | None = None
    ) -> Outcome:
        if best is not None:
            reason = f"{reason} (after: {'; '.join(best.verification.diagnostics)[:120]})"
        ver = Verification(False, 0.0, (reason,))
        score = branch_score(plan.quality, completion, ver)
        self._record(dnode, verification=ver.to_dict(), score=score)
        self._score(dnode, score)
        self._finish(dnode, False, reason)
        return best if best is not None else Outcome(goal, plan.mode, None, None, ver, score)


def _why_missing(out: Outcome, why: str) -> str:
    """Why a child's result falls short: its own diagnostic when it has no value, else why its spec refuses it."""
    if out.value is None and out.verification.diagnostics:
        return out.verification.diagnostics[0]
    return why
