"""cove: Chain of Verification. Draft an answer, plan questions that check it, answer each on its own, revise.

The graph: the draft (HYPOTHESIS) below the problem, a QUESTION node per planned verification
below the draft, each answer (EVIDENCE) below its question, and the revision (SOLUTION) with the
draft and every answer as parents (AGGREGATION edges; it stands in for the draft, one level
down). The verification answers are asked concurrently (one batch where the backend batches),
none shown the draft; planned questions that share nothing with the problem or the draft are
dropped. Every call goes through `ctx.ask`, so the budget, the cache, the record and replay
apply as to any strategy. The best answer so far is always settled: the draft
until a revision replaces it, so a budget stop still answers. The root keeps what happened in
`extra[EXTRA.cove]` ("cove").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Final

from ...graph import EdgeKind, NodeKind, ThoughtGraph
from ...tasks.cove import (
    answer_query,
    draft_query,
    on_topic,
    parse_questions,
    parse_reply,
    parse_revision,
    plan_query,
    revise_query,
)
from ..context import SearchContext
from ..stop import StopReason
from .base import BuiltinStrategy, root_record
from .fit import needs_free_text_answer


@dataclass(frozen=True, slots=True)
class CoveExtra:
    """The node.extra key cove writes: its record (questions, answered, revised, off_topic) on the root."""

    cove: str = "cove"


EXTRA: Final = CoveExtra()


async def run_cove(ctx: SearchContext) -> None:
    """Draft, plan verification questions, answer them independently, revise; the revision is the answer."""
    # cove writes its own final answer, so the engine makes no synthesis call to hold tokens back for.
    ctx.gateway.budget.release_hold()
    problem = ctx.problem_text
    record: dict[str, Any] = {"questions": 0, "answered": 0, "revised": False}
    ctx.graph.node(ctx.root).extra[EXTRA.cove] = record
    draft = await _step(ctx, [ctx.root], draft_query(problem), "draft", problem, NodeKind.HYPOTHESIS,
                        EdgeKind.ELABORATION)
    if draft is not None:
        _settle(ctx, draft)
        revision = await _verify(ctx, problem, draft, record)
        if revision is not None:
            _settle(ctx, revision)
            ctx.goals.append(revision)
            record["revised"] = True
    ctx.stop(StopReason.GOAL_REACHED if ctx.goals else StopReason.FRONTIER_EXHAUSTED)


async def _verify(ctx: SearchContext, problem: str, draft: int, record: dict[str, Any]) -> int | None:
    """Plan the draft's verification questions, answer each on its own, and revise; None: the draft stands."""
    draft_text = ctx.graph.node(draft).content
    got = await ctx.ask(plan_query(problem, draft_text, ctx.config.cove_questions), 1, "plan", draft_text)
    if got is None:
        return None
    texts, cost = got
    planned = parse_questions(texts[0], ctx.config.cove_questions)
    # A question that shares nothing with the problem or the draft checks something else.
    questions = [q for q in planned if on_topic(q, problem, draft_text)]
    record["questions"] = len(questions)
    record["off_topic"] = len(planned) - len(questions)
    if not questions:
        return None
    asked: list[tuple[str, int]] = []
    for question in questions:
        nid = ctx.add_thought([draft], question, "cove:plan", kind=NodeKind.QUESTION, edge_kind=EdgeKind.DEPENDENCY,
                              cost_tokens=cost // len(questions))
        if nid is not None:
            asked.append((question, nid))
    # Independent: no call holds the draft, and none waits for another.
    replies = await ctx.ask_many([answer_query(q, problem) for q, _ in asked], 1, "verify", [q for q, _ in asked])
    checks: list[tuple[str, str]] = []
    answers: list[int] = []
    for (question, qnode), reply in zip(asked, replies, strict=True):
        answer = parse_reply(reply[0][0]) if reply is not None else None
        if reply is None or answer is None:
            continue  # left pending: the engine marks it cancelled
        ctx.graph.succeed(qnode)
        nid = _add(ctx, [qnode], answer, "cove:verify", NodeKind.EVIDENCE, EdgeKind.DEPENDENCY, reply[1])
        if nid is not None:
            checks.append((question, answer))
            answers.append(nid)
    record["answered"] = len(answers)
    if not answers:
        return None
    key = (draft_text, tuple(checks))
    return await _step(ctx, [draft, *answers], revise_query(problem, draft_text, checks), "revise", key,
                       NodeKind.SOLUTION, EdgeKind.AGGREGATION, replaces_last=True, parse=parse_revision)


async def _step(ctx: SearchContext, parents: list[int], query: Any, purpose: str, key: object, kind: NodeKind,
                edge: EdgeKind, *, replaces_last: bool = False,
                parse: Callable[[str], str | None] = parse_reply) -> int | None:
    """One call whose reply, as `parse` reads it, becomes a node below `parents`; None when no call or no reply."""
    got = await ctx.ask(query, 1, purpose, key)
    if got is None:
        return None
    texts, cost = got
    content = parse(texts[0])
    if content is None:
        return None
    return _add(ctx, parents, content, f"cove:{purpose}", kind, edge, cost, replaces_last=replaces_last)


def _add(ctx: SearchContext, parents: list[int], content: str, creator: str, kind: NodeKind, edge: EdgeKind,
         cost: int, *, replaces_last: bool = False) -> int | None:
    """A settled thought: added and marked succeeded (cove does not score its steps)."""
    nid = ctx.add_thought(parents, content, creator, kind=kind, edge_kind=edge, cost_tokens=cost,
                          replaces_last=replaces_last)
    if nid is not None:
        ctx.graph.succeed(nid)
    return nid


def _settle(ctx: SearchContext, node_id: int) -> None:
    """Make this node the search's answer as it stands (the engine then makes no synthesis call)."""
    ctx.answers[node_id] = ctx.graph.node(node_id).content
    ctx.best_id = node_id


@dataclass(frozen=True, slots=True)
class CoveCheck:
    """One verification question (its node) and its own answer (None: unanswered)."""

    node: int
    question: str
    answer: str | None

    def to_dict(self) -> dict[str, Any]:
        """Plain data."""
        return {"node": self.node, "question": self.question, "answer": self.answer}


@dataclass(frozen=True, slots=True)
class CoveTrace:
    """CoVe's trace: its counts as the root records them, the draft, each check, the revision."""

    key: ClassVar[str] = "cove"
    #: The root's record: questions planned (on topic), answered, revised, off_topic (once planned).
    record: dict[str, Any]
    draft: str | None
    checks: tuple[CoveCheck, ...]
    revision: str | None

    @classmethod
    def read(cls, graph: ThoughtGraph) -> CoveTrace | None:
        """The trace a CoVe search left on the graph, or None."""
        record = root_record(graph, EXTRA.cove)
        if record is None:
            return None
        made = {creator: [n for n in graph if n.creator == creator]
                for creator in ("cove:draft", "cove:plan", "cove:revise")}
        checks = []
        for question in made["cove:plan"]:
            answers = [graph.node(c).content for c in graph.children(question.id)
                       if graph.node(c).creator == "cove:verify"]
            checks.append(CoveCheck(question.id, question.content, answers[0] if answers else None))
        return cls(record, made["cove:draft"][0].content if made["cove:draft"] else None, tuple(checks),
                   made["cove:revise"][0].content if made["cove:revise"] else None)

    def to_dict(self) -> dict[str, Any]:
        """Plain data: the record's counts, the draft, the checks, the revision."""
        return {**self.record, "draft": self.draft, "checks": [c.to_dict() for c in self.checks],
                "revision": self.revision}

    def lines(self) -> list[str]:
        """None: the best path shows the draft, the questions and the revision already."""
        return []


STRATEGIES = (BuiltinStrategy("cove", run_cove, fit=needs_free_text_answer, trace=CoveTrace.read),)
