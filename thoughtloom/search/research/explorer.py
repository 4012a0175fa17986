"""The research flow: the `research` strategy, which grows a tree of hypotheses and tests them against evidence.

A round: explore up to `parallel` hypotheses at once (the exploration strategy picks them: best
promise, deepest, or shallowest first), gather each one's evidence (evidence.py), update its
confidence (the evaluator) and promise; branch the hypotheses the branching strategy picks and
prune; merge where `merge_threshold` settled hypotheses stand at one depth. The flow's state machine
(flow.py) takes a direction at each of these moves. Concurrent work is applied in the order it
started, so the graph, and its CID, do not depend on which call answered first.

Every model call goes through the search context (budget, cache, record, replay) and every tool
call through the run's Toolbox, by way of the same AgentEnv the agent's processors use.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Final

from ...graph import EdgeKind, NodeKind, NodeStatus
from ...grounding.citations import CitationStatus, find_references
from ...tasks.answer_types import EXTRACTABLE, answer_type, fits, typed_span
from ...tasks.answers import is_yes_no, span_answer
from ...tasks.base import Query
from ...tasks.comparison import choice_of, comparison_of
from ...tasks.research import (
    YES_NO,
    Proposal,
    SynthesisReply,
    answer_key,
    branch_query,
    contains_span,
    parse_proposals,
    parse_synthesis,
    synthesis_query,
)
from ...tools.toolbox import TOOL_CALLS, Toolbox
from ..agent.kinds import DOCS_TOOL
from ..agent.processors import AgentEnv, ProcessorRegistry, keep_grant
from ..context import SearchContext
from ..events import FlowTransitioned, InsightFound, NodeScored
from ..stop import StopReason
from ..strategies.base import BuiltinStrategy, Needs
from .config import ROLES, ResearchConfig
from .evidence import Findings, Gatherer, check_citations, cited_passage, narrowed_citations
from .flow import FlowMachine, FlowState, Transition
from .merge import (
    Candidate,
    agreeing,
    all_sources,
    best_first,
    citations,
    weighted_vote,
)
from .promise import SAME_THING, clamp, evidence_confidence, promise, similarity
from .records import (
    Hypothesis,
    HypothesisStatus,
    Insight,
    InsightType,
    ResearchResult,
    ResearchStats,
    Synthesis,
)
from .roles import (
    BranchRequest,
    ResearchRoles,
    call,
    read_confidence,
    read_proposals,
    read_synthesis,
)

_H = HypothesisStatus
_S = NodeStatus


@dataclass(frozen=True, slots=True)
class ResearchExtra:
    """The node.extra keys research writes: its record and hops on the task node, each hypothesis's,
    evidence's and synthesis's record, and the tool calls a node made."""

    research: str = "research"
    hops: str = "hops"
    evidence: str = "evidence"
    hypothesis: str = "hypothesis"
    synthesis: str = "synthesis"
    tool_calls: str = TOOL_CALLS


EXTRA: Final = ResearchExtra()


@dataclass(frozen=True, slots=True)
class ResearchSetup:
    """What a research run is given besides the search config: its settings and the caller's roles.

    Roles whose built-in prompts run on a model of their own are the context's `routed_roles`.
    """

    config: ResearchConfig = field(default_factory=ResearchConfig)
    roles: ResearchRoles = field(default_factory=ResearchRoles)


class ResearchFlow:
    """One question's research: the hypothesis tree, its insights, and the state machine driving it."""

    def __init__(self, ctx: SearchContext, setup: ResearchSetup, tools: Toolbox) -> None:
        self.ctx = ctx
        self.config = setup.config
        self.roles = setup.roles
        self.env = AgentEnv(ctx, ProcessorRegistry(), tools)
        self.tools = tools
        self.question = str(ctx.problem)
        self.passages: tuple[tuple[str, str], ...] = ()
        self.gatherer = Gatherer(self.env, self.question, self.config.passages, self._ask, self.config.bridge_hops)
        self.machine = FlowMachine(on_transition=self._moved)
        root = ctx.graph.node(ctx.root)
        self.tree: dict[int, Hypothesis] = {
            ctx.root: Hypothesis(ctx.root, self.question, None, 0, 0.0, 1.0, prior=0.0),
        }
        self.syntheses: list[Synthesis] = []
        self.insights: list[Insight] = []
        self.explorations = 0
        self.branched = 0  # hypotheses branched (the question included), for the branch factor
        self.pruned_by: dict[str, int] = {}
        self.stopped_by: str | None = None
        self.answer: Synthesis | None = None
        self.record: dict[str, Any] = root.extra.setdefault(EXTRA.research, {})
        self.record.update({"config": self.config.to_dict(), "transitions": [], "insights": []})
        #: The answers (by answer_key) the type check read from the passages as hypotheses, not the model.
        self.read_spans: set[str] = set()
        #: A comparison question ("same nationality?", "which is older, X or Y?"): settled by comparing facts.
        self.comparison = comparison_of(self.question)

    # --- the state machine and the insight stream -------------------------------------------------

    def _moved(self, move: Transition) -> None:
        self.record["transitions"].append(move.to_list())
        self.record["state"] = move.target.value
        if self.ctx.bus:
            self.ctx.bus.emit(FlowTransitioned(move.source.value, move.direction, move.target.value))

    def _insight(
        self, kind: InsightType, content: str, confidence: float, node_id: int, source: str | None = None
    ) -> None:
        depth = self.tree[node_id].depth if node_id in self.tree else self.ctx.graph.node(node_id).depth
        insight = Insight(kind, content, confidence, node_id, depth, datetime.now(), source)
        self.insights.append(insight)
        # Stored without the time: the stored run must come out the same in a replay.
        self.record["insights"].append({k: v for k, v in insight.to_dict().items() if k != "timestamp"})
        if self.ctx.bus:
            self.ctx.bus.emit(InsightFound(kind, content, confidence, node_id, depth, source))

    # --- the run ------------------------------------------------------------------------------------

    async def run(self) -> None:
        """Grow, test, prune and merge the tree until a stop condition, then synthesize the answer."""
        m = self.machine
        m.go("configure")
        m.go("start")
        try:
            await self._explore_question()
            await self._compare()
            m.go("explore")
            if not self._should_stop():
                await self._branching([self.tree[self.ctx.root]])
            while not self._should_stop():
                batch = self._pick()
                if not batch:
                    self.stopped_by = self.stopped_by or "frontier_exhausted"
                    break
                await self._explore_all(batch)
                m.go("explore")
                if self._should_stop():
                    break
                wanted = self._to_branch() if self._room() else []
                if wanted or self._prunable():
                    await self._branching(wanted)
                if await self._merge_settled():
                    if self._should_stop():
                        break
                    m.go("stream")
            await self._converge()
        except asyncio.CancelledError:
            # The caller stopped reading (or Ctrl-C): collapse with what is known, making no further call.
            self.stopped_by = self.stopped_by or "interrupted"
            self._collapse_now()
            raise
        finally:
            self.record["stats"] = self.stats().to_dict()
            self.record["stopped_by"] = self.stopped_by

    def _should_stop(self) -> bool:
        """Whether the flow should converge now (and why, in stopped_by)."""
        if self.stopped_by is not None:
            return True
        c, ctx = self.config, self.ctx
        if ctx.stopped:
            self.stopped_by = str(ctx.stop_reason)
        elif self.answer_confidence() >= c.confidence_threshold:
            self.stopped_by = "confidence_threshold"
        elif c.insight_target is not None and len(self.insights) >= c.insight_target:
            self.stopped_by = "insight_target"
        elif self.explorations >= c.exploration_budget:
            self.stopped_by = "exploration_budget"
        return self.stopped_by is not None

    def answer_confidence(self) -> float:
        """The best confidence an answer has now: a merge's, or an explored hypothesis's."""
        best = max((s.confidence for s in self.syntheses), default=0.0)
        return max([best, *(h.confidence for h in self.live() if h.explored)])

    def live(self) -> list[Hypothesis]:
        """Hypotheses still in play (not the question, not pruned, merged or expanded), by id."""
        return [h for h in self.tree.values() if h.depth > 0 and h.status is _H.EXPLORING]

    def _room(self) -> bool:
        """Whether another hypothesis may be added (research max_nodes, and the graph's own limit)."""
        if len(self.tree) - 1 >= self.config.max_nodes or not self._has_room():
            self.stopped_by = self.stopped_by or "max_nodes"
            return False
        return True

    def _has_room(self) -> bool:
        """Whether the graph has room for another node besides the final answer's."""
        return len(self.ctx.graph) < self.ctx.config.max_nodes - 1

    # --- model calls ----------------------------------------------------------------------------------

    async def _ask(self, query: Query, purpose: str, node_id: int, role: str) -> tuple[str, int] | None:
        got = await self.ctx.ask(query, 1, purpose, ("research", node_id, purpose), role)
        if got is None or not got[0]:
            return None
        return got[0][0], got[1]

    # --- exploring ------------------------------------------------------------------------------------

    async def _explore_question(self) -> None:
        """Look the question up in the documents, for the first hypotheses to start from."""
        self.passages, found, hops = await self.gatherer.question_passages(self.ctx.root)
        root = self.ctx.graph.node(self.ctx.root)
        root.cost_tokens += found.tokens
        if found.calls:
            root.extra.setdefault(EXTRA.tool_calls, []).extend(found.calls)
        if hops:
            # Which bridge entity was searched and how it was found, or why none was (as the agent's question).
            root.extra[EXTRA.hops] = hops
        self.tree[self.ctx.root].explored_at = datetime.now()

    async def _compare(self) -> None:
        """A comparison question's facts, one per entity, compared exactly (kept with the run's record)."""
        if self.comparison is None or DOCS_TOOL not in self.tools or self.ctx.stopped:
            return
        root = self.ctx.root
        compared, calls, tokens = await self.gatherer.settle(self.comparison, root, self.passages)
        node = self.ctx.graph.node(root)
        node.cost_tokens += tokens
        node.extra.setdefault(EXTRA.tool_calls, []).extend(calls)
        self.record["comparison"] = compared.to_dict()
        if compared.answer is not None:
            self._insight("discovery", f"{compared.answer}: {compared.why()}", 1.0, root,
                          ", ".join(f.source for f in compared.facts if f.source) or None)

    def _answers(self, h: Hypothesis) -> list[str]:
        """The answers the judge weighs a hypothesis's among: the tree's, in the order they were proposed (the same
        list, and so the same scoring call, for every hypothesis), at most max_branches, its own among them."""
        seen: dict[str, str] = {}
        for other in sorted(self.tree.values(), key=lambda o: o.id):
            if other.depth > 0 and other.answer and answer_key(other.answer):
                seen.setdefault(answer_key(other.answer), other.answer)
        keys = list(seen)[: self.config.max_branches]
        mine = answer_key(h.answer)
        if mine and mine not in keys:
            keys[-1:] = [mine]
        return [seen[k] for k in keys]

    def _pick(self) -> list[Hypothesis]:
        """The next hypotheses to explore, by the exploration strategy."""
        todo = [h for h in self.live() if not h.explored]
        order = self.config.exploration_strategy
        if order == "depth_first":
            todo.sort(key=lambda h: (-h.depth, -h.promise, h.id))
        elif order == "breadth_first":
            todo.sort(key=lambda h: (h.depth, h.id))
        else:
            todo.sort(key=lambda h: (-h.promise, h.depth, h.id))
        room = self.config.exploration_budget - self.explorations
        return todo[: max(0, min(self.config.parallel, room))]

    async def _explore_all(self, batch: list[Hypothesis]) -> None:
        graph = self.ctx.graph
        for h in batch:
            graph.set_status(h.id, _S.READY)
            graph.set_status(h.id, _S.IN_PROGRESS)
        # gather() returns results in the order given: applied in start order, whatever answered first.
        found = await asyncio.gather(*(self.gatherer.gather(h, self._answers(h)) for h in batch))
        for h, f in zip(batch, found, strict=True):
            await self._apply_evidence(h, f)

    async def _apply_evidence(self, h: Hypothesis, found: Findings) -> None:
        ctx, graph = self.ctx, self.ctx.graph
        node = graph.node(h.id)
        node.cost_tokens += found.tokens
        if found.calls:
            node.extra.setdefault(EXTRA.tool_calls, []).extend(found.calls)
        for e in found.evidence:
            if not self._has_room():
                self.stopped_by = self.stopped_by or "max_nodes"
                break
            edge = EdgeKind.SUPPORTS if e.supports else EdgeKind.CONTRADICTION
            nid = ctx.add_thought([h.id], e.content, "research:evidence", kind=NodeKind.EVIDENCE, edge_kind=edge)
            assert nid is not None  # room was checked
            self.ctx.graph.succeed(nid)
            graph.set_edge(h.id, nid, edge, round(e.weight, 4))
            evidence = replace(e, node_id=nid)
            graph.node(nid).extra[EXTRA.evidence] = {k: v for k, v in evidence.to_dict().items() if k != "node"}
            h.evidence.append(evidence)
            kind: InsightType = "evidence" if e.supports else "contradiction"
            self._insight(kind, e.content, e.weight, h.id, e.source)
        if self.roles.evaluator is not None:
            h.confidence = read_confidence(await call(self.roles.evaluator, h))
        else:
            h.confidence = evidence_confidence(h.prior, h.evidence)
        h.explored_at = datetime.now()
        self.explorations += 1
        self._reweigh(h)
        if node.status is _S.IN_PROGRESS:
            graph.set_status(h.id, _S.SUCCEEDED)
        # The score shown on the node is its confidence; not ctx.set_score, whose goal and threshold
        # rules are the tree searches' (the flow converges by its own: confidence_threshold, merging).
        node.score = h.confidence
        if ctx.bus:
            ctx.bus.emit(NodeScored(h.id, h.confidence, h.confidence))
        self._keep(h)

    def _reweigh(self, h: Hypothesis) -> None:
        parent = self.tree.get(h.parent_id) if h.parent_id is not None and h.parent_id != self.ctx.root else None
        h.promise, h.factors = promise(h, parent, self.config.depth_limit)

    def _keep(self, h: Hypothesis) -> None:
        """Mirror a hypothesis's record into its node (no times: the stored run must replay the same)."""
        self.ctx.graph.node(h.id).extra[EXTRA.hypothesis] = {
            "answer": h.answer, "prior": round(h.prior, 4), "confidence": round(h.confidence, 4),
            "promise": round(h.promise, 4), "factors": {k: round(v, 4) for k, v in h.factors.items()},
            "status": h.status.value, "explored": h.explored, "pruned_reason": h.pruned_reason,
            "merged_into": h.merged_into,
        }

    # --- branching and pruning ------------------------------------------------------------------------

    def _wants_branch(self, h: Hypothesis) -> bool:
        """The branching criterion: contradicting evidence (contradiction), else confidence below the threshold."""
        if self.config.branching_strategy == "contradiction":
            return h.balance()[1] > 0
        return h.confidence < self.config.branching_threshold

    def _to_branch(self) -> list[Hypothesis]:
        """The explored hypotheses to branch now, by the branching strategy."""
        c = self.config
        ready = [h for h in self.live() if h.explored and h.depth < c.depth_limit and self._wants_branch(h)]
        if not ready:
            return []
        strategy = c.branching_strategy
        if strategy == "depth_first":
            return [max(ready, key=lambda h: (h.depth, h.promise, -h.id))]
        if strategy == "best_first":
            return [max(ready, key=lambda h: (h.promise, -h.depth, -h.id))]
        if strategy == "breadth_first":
            shallowest = min(h.depth for h in ready)
            return [h for h in ready if h.depth == shallowest]
        return ready

    async def _branching(self, parents: Sequence[Hypothesis]) -> None:
        """Expand `parents` into alternatives (when any), then prune what the evidence and promise rule out."""
        m = self.machine
        m.go("branch")
        if parents:
            proposals = await asyncio.gather(*(self._propose(p) for p in parents))
            for parent, (props, tokens) in zip(parents, proposals, strict=True):
                self._expand(parent, props, tokens)
            m.go("expand")
        self._prune()
        m.go("prune")
        m.go("stream")

    async def _propose(self, parent: Hypothesis) -> tuple[list[Proposal], int]:
        root = parent.id == self.ctx.root
        if root and self.roles.brancher is None and is_yes_no(self.question):
            # A yes/no question has two answers; nothing to ask the model for.
            return [Proposal(content, answer) for answer, content in YES_NO], 0
        pair = choice_of(self.question) if root and self.roles.brancher is None else None
        if pair is not None:
            # "Which is older, X or Y?" has two answers, the two it names.
            return [Proposal(f"{e} - one of the two the question names", e) for e in pair], 0
        request = BranchRequest(self.question, self.config.max_branches, None if root else parent,
                                self.passages if root else ())
        if self.roles.brancher is not None:
            return read_proposals(await call(self.roles.brancher, request)), 0
        query = branch_query(self.question, request.n, passages=request.passages,
                             hypothesis=None if root else parent.content,
                             evidence=[f"[{e.source}] {'supports' if e.supports else 'contradicts'}: {e.content}"
                                       for e in parent.evidence])
        got = await self._ask(query, "branch", parent.id, "brancher")
        if got is None:
            return [], 0
        reply, tokens = got
        return self._typed(parse_proposals(reply, request.n), parent), tokens

    def _typed(self, proposals: list[Proposal], parent: Hypothesis) -> list[Proposal]:
        """The proposals by the answer type the question asks for (answer_types): those that fit first, the others
        with half the confidence they state; when none fits a year, date, period or number question, the span of
        that type the passages read so far give (the passage naming the proposals' or the parent's entity first)
        comes first, as one more hypothesis to test."""
        kind = answer_type(self.question)
        fitting = [p for p in proposals if fits(p.answer or p.content, kind, self.question)]
        unfit = [replace(p, confidence=(p.confidence if p.confidence is not None else 0.5) / 2)
                 for p in proposals if p not in fitting]
        if fitting or kind not in EXTRACTABLE:
            return fitting + unfit
        entities = [p.answer or p.content for p in proposals] + ([parent.answer] if parent.answer else [])
        span = typed_span(self.question, self._read(), entities, kind)
        if span is None:
            return unfit
        self.read_spans.add(answer_key(span))
        return [Proposal(f"{span} - the {kind.value} the passages give", span), *unfit]

    def _read(self) -> list[tuple[str, str]]:
        """Every passage the run has read, as (source, text), the question's first."""
        return list(dict.fromkeys([*self.passages, *self.gatherer.read.items()]))

    def _expand(self, parent: Hypothesis, proposals: list[Proposal], tokens: int) -> None:
        ctx = self.ctx
        ctx.graph.node(parent.id).cost_tokens += tokens
        known = {answer_key(h.answer or h.content) for h in self.tree.values() if h.depth > 0}
        added = 0
        for p in proposals[: self.config.max_branches]:
            key = answer_key(p.answer or p.content)
            if not key or key in known:
                continue
            if not self._room():
                break
            nid = ctx.add_thought([parent.id], p.content, "research:branch", kind=NodeKind.HYPOTHESIS)
            assert nid is not None  # room was checked
            known.add(key)
            prior = clamp(p.confidence) if p.confidence is not None else 0.5
            h = Hypothesis(nid, p.content, parent.id, parent.depth + 1, prior, 0.0, answer=p.answer, prior=prior)
            self.tree[nid] = h
            self._reweigh(h)
            parent.children.append(nid)
            self._keep(h)
            added += 1
            self._insight("discovery", p.content, h.confidence, nid)
        if parent.id != self.ctx.root or added:
            parent.status = _H.EXPANDED
            self.branched += 1
            if parent.id != self.ctx.root:
                self._keep(parent)

    def _prunable(self) -> list[tuple[Hypothesis, str]]:
        """Live hypotheses from prune_after_depth down that strong contradiction, low promise or a better twin rule
        out."""
        live = [h for h in self.live() if h.depth >= self.config.prune_after_depth]
        return [(h, reason) for h in live if (reason := self._prune_reason(h, live)) is not None]

    def _prune(self) -> None:
        """Cut what `_prunable` rules out (all reasons are read before any is cut, so the order does not matter)."""
        for h, reason in self._prunable():
            h.status, h.pruned_reason = _H.PRUNED, reason
            criterion = reason.split(":")[0]
            self.pruned_by[criterion] = self.pruned_by.get(criterion, 0) + 1
            self.ctx.prune(h.id, reason)
            self._keep(h)

    def _prune_reason(self, h: Hypothesis, live: list[Hypothesis]) -> str | None:
        c = self.config
        pro, con = h.balance()
        strongest = max((e.weight for e in h.evidence if not e.supports), default=0.0)
        if strongest >= c.strong_evidence and con > pro:
            return f"contradiction: evidence against it weighs {con:.2f}, for it {pro:.2f}"
        if h.promise < c.pruning_threshold:
            return f"low_promise: {h.promise:.3f} below {c.pruning_threshold}"
        for other in live:
            if other is h or other.status is not _H.EXPLORING:
                continue
            same = (answer_key(other.answer) == answer_key(h.answer) and bool(h.answer)) or similarity(
                other.content, h.content
            ) >= SAME_THING
            if same and (other.confidence, -other.id) > (h.confidence, -h.id):
                return (f"superseded: by hypothesis {other.id}, which says the same with confidence "
                        f"{other.confidence:.2f}")
        return None

    # --- merging --------------------------------------------------------------------------------------

    def _settled(self) -> dict[int, list[Hypothesis]]:
        """Explored hypotheses in play that will not branch, by depth."""
        out: dict[int, list[Hypothesis]] = {}
        for h in self.live():
            if h.explored and (h.depth >= self.config.depth_limit or not self._wants_branch(h)):
                out.setdefault(h.depth, []).append(h)
        return out

    async def _merge_settled(self) -> bool:
        """Merge each depth where merge_threshold settled hypotheses stand; True when any merged."""
        groups = [g for _, g in sorted(self._settled().items()) if len(g) >= self.config.merge_threshold]
        if not groups:
            return False
        self.machine.go("evaluate")
        for group in groups:
            await self._merge([Candidate.of_hypothesis(h) for h in group], final=False)
            self.machine.go("merge")
        return True

    async def _merge(self, members: list[Candidate], *, final: bool) -> Synthesis:
        strategy = self.config.merge_strategy
        tokens = 0
        compared = self.gatherer.compared
        if final and compared is not None and compared.answer is not None and self.roles.synthesizer is None:
            # The facts compared decide; the model is not asked to restate them.
            backing = agreeing(compared.answer, members)
            confidence = max((c.confidence for c in backing), default=min(c.confidence for c in members))
            cited = tuple(dict.fromkeys(f.source for f in compared.facts if f.source))
            synthesis = Synthesis(f"{compared.answer}. {compared.why()}", confidence, all_sources(members),
                                  "comparison", cited, compared.answer, final=True)
            return self._add_synthesis(members, synthesis, 0)
        if len(members) == 1:
            synthesis = replace(best_first(members), method=strategy if strategy != "synthesis" else "best_first")
        elif strategy == "best_first":
            synthesis = best_first(members)
        elif strategy == "weighted_vote":
            synthesis = weighted_vote(members)
        else:
            synthesis, tokens = await self._synthesize(members, final)
        synthesis = replace(synthesis, final=final)
        return self._add_synthesis(members, synthesis, tokens)

    async def _synthesize(self, members: list[Candidate], final: bool) -> tuple[Synthesis, int]:
        """The synthesizer's answer; its confidence is the evidence's for the members that agree with it."""
        hypotheses = [self.tree[c.node_id] for c in members if c.node_id in self.tree]
        if self.roles.synthesizer is not None:
            reply: SynthesisReply | None = read_synthesis(await call(self.roles.synthesizer, self.question, hypotheses))
            tokens = 0
        else:
            rows = [(c.label, c.confidence, c.content,
                     [f"[{e.source}] {e.content}" for e in c.evidence if e.supports] or list(c.citations))
                    for c in members]
            query = synthesis_query(self.question, rows)
            ctx = self.ctx
            # The final answer's call is allowed after a stop, as the engine's own synthesis is (the
            # budget still decides: a spent one refuses it, and the vote below answers instead).
            saved = ctx.stop_reason if final else None
            if final:
                ctx.stop_reason = None
            try:
                got = await self._ask(query, "synthesize", members[0].node_id, "synthesizer")
            finally:
                if final:
                    ctx.stop_reason = saved if saved is not None else ctx.stop_reason
            reply, tokens = (parse_synthesis(got[0]), got[1]) if got is not None else (None, 0)
        if reply is None:
            fallback = weighted_vote(members)
            return replace(fallback, method="weighted_vote (no synthesis reply)"), tokens
        backing = agreeing(reply.answer, members)
        # The synthesizer's own confidence is not evidence: an answer no tested member holds gets the lowest member's.
        confidence = max((c.confidence for c in backing), default=min(c.confidence for c in members))
        content = f"{reply.answer}. {reply.why}".strip() if reply.why else reply.answer
        # Its evidence, then what the answer's own words cite (each is checked when the answer is final).
        written = [f"docs:{r.path}:{r.line_start}" + (f"-{r.line_end}" if r.line_end != r.line_start else "")
                   for r in find_references(reply.why)]
        cited = tuple(dict.fromkeys([*citations(backing or members), *written]))
        return Synthesis(content, confidence, all_sources(members), "synthesis", cited, reply.answer), tokens

    def _checked(self, synthesis: Synthesis) -> Synthesis:
        """The final answer with its citations checked as a step's evidence is; only those that hold stay cited,
        each narrowed to the line(s) that say the answer (`narrowed_citations`)."""
        said = synthesis.answer or synthesis.content
        judged = [e for h in self.tree.values() if h.depth > 0 and agreeing(said, [Candidate.of_hypothesis(h)])
                  for e in h.evidence]
        read = self.gatherer.read
        checks = check_citations(synthesis.answer, said, synthesis.citations, read, judged)
        # Those that hold name the line(s) their passage says the answer in, checked again as they are now written.
        cited = check_citations(synthesis.answer, said,
                                narrowed_citations(synthesis.answer, [c.ref for c in checks if c.valid], read),
                                read, judged)
        return replace(synthesis, citations=tuple(c.ref for c in cited if c.valid),
                       checks=(*cited, *(c for c in checks if not c.valid)))

    def _add_synthesis(self, members: list[Candidate], synthesis: Synthesis, tokens: int) -> Synthesis:
        ctx = self.ctx
        if synthesis.final:
            # The answer first (the span rules may pick another member's), then its citations checked against it.
            given = synthesis.answer or synthesis.content
            synthesis = replace(synthesis, answer=self._final_answer(synthesis, members))
            key = answer_key(synthesis.answer)
            if key in self.read_spans or f" {key} " not in f" {answer_key(given)} ":
                # A span read from the passages (by the brancher's type check or the answer rules), or another
                # member's than the synthesis said: the passage that holds it.
                synthesis = self._cite_span(synthesis)
            synthesis = self._checked(synthesis)
        # The members that say what the synthesis says come first: the first parent is the path
        # `loom solve`'s best path and `loom show` follow to the answer.
        said = answer_key(synthesis.answer or synthesis.content)
        parents = [c.node_id for c in sorted(members, key=lambda c: c.key != said)]
        # The final answer always has a node: the flow stops adding others one short of max_nodes.
        nid = ctx.add_thought(parents, synthesis.content, "research:merge", kind=NodeKind.SYNTHESIS,
                              edge_kind=EdgeKind.AGGREGATION, cost_tokens=tokens) \
            if synthesis.final or self._has_room() else None
        if nid is not None:
            self.ctx.graph.succeed(nid)
            synthesis = replace(synthesis, node_id=nid)
            ctx.graph.node(nid).extra[EXTRA.synthesis] = {k: v for k, v in synthesis.to_dict().items() if k != "node"}
            ctx.graph.node(nid).score = synthesis.confidence
        for c in members:
            h = self.tree.get(c.node_id)
            if h is not None and h.status is _H.EXPLORING and not synthesis.final:
                h.status, h.merged_into = _H.MERGED, nid
                self._keep(h)
        self.syntheses.append(synthesis)
        self._insight("synthesis", synthesis.content, synthesis.confidence, nid if nid is not None else ctx.root,
                      ", ".join(synthesis.citations) or None)
        return synthesis

    # --- converging -----------------------------------------------------------------------------------

    def _final_members(self) -> list[Candidate]:
        """What the answer is synthesized from: earlier merges and explored hypotheses in play (else any in play)."""
        syntheses = [Candidate.of_synthesis(s) for s in self.syntheses if s.node_id is not None and not s.final]
        live = self.live()
        explored = [h for h in live if h.explored] or live
        members = syntheses + [Candidate.of_hypothesis(h) for h in explored]
        members.sort(key=lambda c: (-c.confidence, c.node_id))
        return members[: self.config.max_branches]

    async def _converge(self) -> None:
        members = self._final_members()
        if members:
            self._toward("synthesize")
            self.answer = await self._merge(members, final=True)
            self.machine.go("synthesize")
        else:
            self._toward("stop")
            self.machine.go("stop")  # nothing was found to answer with
        self.machine.go("harvest")
        self._settle()

    def _toward(self, end: str) -> None:
        """Take the directions that lead from the current state to one that has `end` (synthesize or stop)."""
        m = self.machine
        path = {
            "synthesize": {FlowState.DORMANT: "start", FlowState.BRANCHING: "stream", FlowState.STREAMING: "evaluate"},
            "stop": {FlowState.DORMANT: "start", FlowState.BRANCHING: "stream", FlowState.CONVERGING: "stream"},
        }[end]
        while end not in m.directions():
            m.go(path[m.state])

    def _collapse_now(self) -> None:
        """Collapse at once, after a cancel: the most confident answer found, with no model call."""
        m = self.machine
        if m.state is not FlowState.COLLAPSED:
            members = self._final_members()
            if members:
                self._toward("synthesize")
                self.answer = self._add_synthesis(members, replace(best_first(members), final=True), 0)
                m.go("synthesize")
            else:
                self._toward("stop")
                m.go("stop")
            m.go("harvest")
        self._settle()

    def _settle(self) -> None:
        """Hand the answer to the engine, and say why the flow stopped."""
        ctx = self.ctx
        if self.answer is not None and self.answer.node_id is not None:
            ctx.answers[self.answer.node_id] = self.answer.answer or self.answer.content
            if self.answer.node_id not in ctx.goals:
                ctx.goals.append(self.answer.node_id)
            self.record["answer"] = self.answer.node_id
        reason = {"confidence_threshold": StopReason.CONFIDENCE_REACHED, "insight_target": StopReason.INSIGHT_TARGET,
                  "exploration_budget": StopReason.ITERATIONS, "max_nodes": StopReason.MAX_NODES,
                  "frontier_exhausted": StopReason.FRONTIER_EXHAUSTED}.get(self.stopped_by or "")
        if reason is not None:
            ctx.stop(reason)

    def _final_answer(self, synthesis: Synthesis, members: list[Candidate]) -> str:
        """The synthesis's answer by the span rules (tasks/answers.py); where they refuse it (a file name,
        the question's own subject, a yes to a question that is no yes/no question), the most confident
        member of the merge they accept; as written when they accept none."""
        said = synthesis.answer or synthesis.content
        others = [c.answer or c.content for c in sorted(members, key=lambda c: (-c.confidence, c.node_id))]
        return span_answer(self.question, said, others, self._read()) or said

    def _cite_span(self, synthesis: Synthesis) -> Synthesis:
        """A final answer no citation names cites the first passage read that holds it (for an answer the synthesis
        did not give: a span the answer rules read from the passages, or another member's)."""
        read = dict(self._read())
        answer = synthesis.answer
        if answer is None or answer_key(answer) in ("yes", "no") or any(
                not isinstance(found := cited_passage(ref, read), CitationStatus) and contains_span(found.text, answer)
                for ref in synthesis.citations):
            return synthesis
        source = next((ref for ref, text in read.items() if contains_span(text, answer)), None)
        return replace(synthesis, citations=(*synthesis.citations, source)) if source is not None else synthesis

    def result(self) -> ResearchResult:
        """What the flow found so far: the answer, the tree, the insights and the metrics."""
        return ResearchResult(self.question, self.answer, self.answer.confidence if self.answer else 0.0,
                              dict(self.tree), list(self.insights), self.stats(), list(self.syntheses),
                              [t.to_list() for t in self.machine.history], self.machine.state.value, self.stopped_by)

    # --- metrics --------------------------------------------------------------------------------------

    def stats(self) -> ResearchStats:
        """Seed 004's metrics of the flow so far."""
        hyps = [h for h in self.tree.values() if h.depth > 0]
        explored = max(1, self.explorations)
        children = sum(len(h.children) for h in self.tree.values())
        return ResearchStats(
            hypotheses_generated=len(hyps),
            hypotheses_pruned=sum(h.status is _H.PRUNED for h in hyps),
            hypotheses_merged=sum(h.status is _H.MERGED for h in hyps),
            explorations=self.explorations,
            max_depth_reached=max((h.depth for h in hyps), default=0),
            branch_factor=children / self.branched if self.branched else 0.0,
            insights_discovered=len(self.insights),
            exploration_efficiency=len(self.insights) / explored if self.explorations else 0.0,
            final_confidence=self.answer.confidence if self.answer is not None else 0.0,
            pruned_by=dict(self.pruned_by),
        )


async def run_research(ctx: SearchContext) -> None:
    """The research strategy: a hypothesis tree grown, tested, pruned and merged over the run's tools."""
    setup = ctx.strategy_inputs.get(ResearchSetup)
    if setup is None:
        setup = ResearchSetup()
    tools = ctx.tools if ctx.tools is not None else Toolbox()
    keep_grant(ctx, tools)
    flow = ResearchFlow(ctx, setup, tools)
    try:
        await flow.run()
    finally:
        ctx.strategy_outputs.put(flow.result())


#: Research Flow runs on its own task (the run layer checks it), with its tools and roles of its own.
STRATEGIES = (BuiltinStrategy("research", run_research, Needs(tools=True, roles=ROLES)),)
