"""The controller driving a real search on the scripted fake: every decision path, end to end.

Each scenario runs BFS under a Controller on a tiny task whose thoughts and value replies the test
scripts by path, so the score at each depth, the tokens each call costs and the moment the budget
runs short are all known. The assertions read the result's control report (decisions timeline,
budget requests, compromise, anticipated failures, actions, score history) and the gateway's
budget, as a user of the library would.
"""

from __future__ import annotations

import zlib
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pytest

from thoughtloom.control import (
    AutomaticHandler,
    CallbackHandler,
    Controller,
    ControlReport,
    ControlSettings,
    FeedbackHandler,
)
from thoughtloom.control.report import ControlAction, DepthLimits
from thoughtloom.tasks.similarity import similarity
from thoughtloom.control.types import (
    BudgetRequest,
    Compromise,
    DepthAction,
    DepthAnswer,
    DepthDecision,
    SearchState,
)
from thoughtloom.graph import NodeStatus
from thoughtloom.llm.budget import BudgetLimits
from thoughtloom.llm.fake import ScriptedBackend
from thoughtloom.llm.gateway import Gateway
from thoughtloom.llm.types import GenerateRequest, Prompt
from thoughtloom.search import SearchConfig, SearchResult, search
from thoughtloom.search.events import BudgetSpent, Event, NodePruned
from thoughtloom.tasks.base import Query, Task

# --- a fully scripted task -----------------------------------------------------------------------


class ScriptTask(Task[str]):
    """Thoughts are free text; the prompts carry the path, one step a line, so the fake can key on it.

    A sample prompt is "GEN" + the path; a value prompt is "VAL" + the path (its last line is the
    thought being valued). Value replies are numbers 0-10. Answers are composed without a model
    call, so no synthesis reserve muddles the token arithmetic.
    """

    name = "script"
    programmatic_answer = True

    def sample(self, problem: str, steps: Sequence[str]) -> Query:
        return Query(Prompt(text="\n".join(("GEN", *steps))), max_tokens=8)

    def value(self, problem: str, steps: Sequence[str]) -> Query:
        return Query(Prompt(text="\n".join(("VAL", *steps))), max_tokens=1)

    def parse_value(self, problem: str, steps: Sequence[str], texts: Sequence[str]) -> float:
        return sum(float(t) for t in texts) / (10 * len(texts))


Children = Callable[[tuple[str, ...], int], str]
Values = Callable[[tuple[str, ...], int, int], str]


def scripted(children: Children, values: Values) -> ScriptedBackend:
    """children(path, sample index) -> the thought; values(path, sample index, n) -> a 0-10 reply."""

    def respond(request: GenerateRequest, index: int) -> str:
        head, *steps = request.prompt.as_text().split("\n")
        path = tuple(steps)
        return children(path, index) if head == "GEN" else values(path, index, request.n)

    return ScriptedBackend(responder=respond)


def _word(seed: str) -> str:
    """A made-up word of 4 to 7 letters, fixed by the seed."""
    h = zlib.crc32(seed.encode())
    return "".join(chr(ord("a") + (h >> (5 * k)) % 26) for k in range(4 + h % 4))


def padded_child(path: tuple[str, ...], index: int) -> str:
    """Eight made-up words, different for every thought (so no two restate each other) and exactly
    the 8 tokens a sample reserves, so that what is spent is what was reserved."""
    return " ".join(_word(f"{path}|{index}|{k}") for k in range(8))


def by_depth(scores: Mapping[int, float]) -> Values:
    """Every thought at depth d is valued scores[d]."""
    return lambda path, index, n: f"{scores[len(path)]:g}"


def by_content(scores: Mapping[str, float]) -> Values:
    return lambda path, index, n: f"{scores[path[-1]]:g}"


def tree(children: Mapping[tuple[str, ...], Sequence[str]]) -> Children:
    """Children listed by their parent's path (the root's path is ())."""
    return lambda path, index: children[path][index]


class Run:
    """One search under a controller, with what the test needs to look at afterwards."""

    def __init__(self, result: SearchResult, gateway: Gateway, controller: Controller, events: list[Event],
                 model: ScriptedBackend) -> None:
        self.result, self.gateway, self.controller, self.events, self.model = (
            result, gateway, controller, events, model,
        )
        assert isinstance(result.control, ControlReport)
        self.control: ControlReport = result.control

    def decisions(self, kind: str | None = None) -> list[str]:
        return [d.decision for d in self.control.decisions if kind is None or d.kind == kind]

    def modes(self) -> set[str]:
        return {f.failure.mode.value for f in self.control.anticipated_failures}

    def actions(self, mode: str) -> list[ControlAction]:
        return [a for a in self.control.actions if a.mode == mode]

    def status(self, node_id: int) -> NodeStatus:
        return self.result.graph.node(node_id).status

    def node_ids(self, content: str) -> list[int]:
        return [n.id for n in self.result.graph if n.content == content]

    def children(self, node_id: int) -> list[int]:
        return list(self.result.graph.children(node_id))


async def run(
    model: ScriptedBackend,
    settings: ControlSettings | None = None,
    handler: FeedbackHandler | None = None,
    *,
    tokens: int | None = None,
    **config: Any,
) -> Run:
    # These specify the controller over one pass of the search; continuation is tests/test_continuation.py's.
    config = {"strategy": "bfs", "generation": "sample", "breadth": 2, "beam": 1, "max_depth": 6,
              "value_samples": 1, "one_pass": True, **config}
    gateway = Gateway(model, BudgetLimits(tokens=tokens))
    controller = Controller(settings or ControlSettings(), handler)
    events: list[Event] = []
    result = await search(ScriptTask(), "sort a list", gateway, SearchConfig(**config), sinks=[events.append],
                          controller=controller)
    return Run(result, gateway, controller, events, model)


def assert_budget_kept(r: Run) -> None:
    """At no call did spending pass the limit in force at that moment, nor at the end."""
    budget = r.gateway.budget
    assert budget.limits.tokens is None or budget.spent.total <= budget.limits.tokens
    for e in r.events:
        if isinstance(e, BudgetSpent) and e.token_limit is not None:
            assert e.spent_tokens <= e.token_limit


def appear_in_order(seq: Sequence[str], *wanted: str) -> bool:
    it = iter(seq)
    return all(any(x == w for x in it) for w in wanted)


# Steady progress, 0.3 -> 0.45 -> 0.6 per depth, then the goal at depth 4: the whole run costs 258
# of the fake's tokens (words; 183 by the depth-3 checkpoint), so a budget between about 160 and
# 255 runs short with the best at 0.6.
STEADY = {1: 3, 2: 4.5, 3: 6, 4: 10, 5: 10}
STEADY_RUN_TOKENS = 258


# --- a. steady progress to the goal ---------------------------------------------------------------


async def test_steady_progress_reaches_the_goal_without_asking_for_anything() -> None:
    r = await run(scripted(padded_child, by_depth({1: 4, 2: 6, 3: 8, 4: 9.6, 5: 10})), tokens=10_000)
    assert r.result.termination_reason == "goal_reached"
    c = r.control
    assert c.goal_reached is True and c.acceptable_reached is True
    assert c.score_history == (0.4, 0.6, 0.8, 0.96)
    assert all(b > a for a, b in zip(c.score_history, c.score_history[1:]))
    assert c.best_quality == pytest.approx(0.96)
    assert c.budget_requests == () and c.compromise is None and c.actions == ()
    assert not any(d.kind in ("budget", "compromise") for d in c.decisions)
    assert r.result.goal_node is not None and r.result.graph.node(r.result.goal_node).score == pytest.approx(0.96)
    assert r.gateway.budget.limits.tokens == 10_000
    assert_budget_kept(r)


# --- b. stagnation -> feedback -> continue deeper -------------------------------------------------


async def _deeper_by_two(decision: DepthDecision, state: SearchState) -> DepthAnswer:
    assert decision.action is DepthAction.REQUEST_FEEDBACK and state.depth == 2
    return DepthAnswer(DepthAction.CONTINUE, 2)


@pytest.mark.parametrize(
    "handler",
    [AutomaticHandler(extra_depth=2), CallbackHandler(on_depth=_deeper_by_two)],
    ids=["automatic", "callback"],
)
async def test_stagnation_asks_for_feedback_and_goes_deeper(handler: FeedbackHandler) -> None:
    settings = ControlSettings(soft_depth=2)
    r = await run(scripted(padded_child, by_depth({1: 5, 2: 5, 3: 7, 4: 10, 5: 10})), settings, handler,
                  max_depth=5)
    c = r.control
    depth = [d for d in c.decisions if d.kind == "depth"]
    assert [d.decision for d in depth][:2] == ["request_feedback", "continue_deeper"]
    assert depth[0].depth == 2 and "progress slowing" in depth[0].reason and depth[0].detail["suggestion"]
    assert "soft limit moved to 4" in depth[1].reason
    # the hard limit is the search's depth limit plus the default margin of 3 levels
    assert c.depth_limits == DepthLimits(soft=4, hard=8, search=5, search_at_start=5)
    assert r.result.stats.max_depth == 4  # past the soft limit of 2
    assert c.score_history == (0.5, 0.5, 0.7, 1.0)
    assert c.goal_reached is True and r.result.termination_reason == "goal_reached"


async def test_stagnation_with_no_depth_allowance_stops_at_the_soft_limit() -> None:
    r = await run(scripted(padded_child, by_depth({1: 5, 2: 5, 3: 7, 4: 10})), ControlSettings(soft_depth=2),
                  AutomaticHandler(extra_depth=0), max_depth=5)
    assert r.decisions("depth") == ["request_feedback", "stop"]
    assert r.result.termination_reason == "depth_soft_limit"
    assert r.result.stats.max_depth == 2 and r.control.goal_reached is False


# --- c. budget nearly spent close to acceptable -> request -> approved -> goal --------------------


@pytest.mark.parametrize(
    ("tokens", "refused"),
    [
        (220, 0),  # at the depth-3 checkpoint fewer tokens are left than an expansion costs: ask then
        (170, 1),  # a depth-3 value call is refused: ask, and make the call after all
        (250, 1),  # a depth-4 value call is refused: the same, one level later
    ],
)
async def test_budget_request_approved_raises_the_limit_by_exactly_the_grant_and_reaches_the_goal(
    tokens: int, refused: int,
) -> None:
    r = await run(scripted(padded_child, by_depth(STEADY)), ControlSettings(),
                  AutomaticHandler(approve_tokens=10_000), tokens=tokens)
    c = r.control
    assert len(c.budget_requests) == 1
    request = c.budget_requests[0]
    assert request.approved is True and request.granted == request.request.tokens > 0
    assert request.request.situation.best_score == pytest.approx(0.6)
    assert request.request.situation.tokens_total == tokens
    assert request.request.situation.estimated_tokens_to_acceptable is not None
    assert "0.60 < 0.70 acceptable" in request.request.justification
    assert appear_in_order(r.decisions("budget"), "request_increase", "approved")
    # the hard limit rose by exactly the grant, and the run really used tokens beyond the original
    assert r.gateway.budget.limits.tokens == tokens + request.granted
    assert r.result.usage.token_limit == tokens + request.granted
    assert tokens < r.gateway.budget.spent.total == STEADY_RUN_TOKENS <= r.gateway.budget.limits.tokens
    assert c.goal_reached is True and r.result.termination_reason == "goal_reached"
    assert c.score_history == (0.3, 0.45, 0.6, 1.0)
    refusals = [rec for rec in r.gateway.records if rec.error is not None]
    assert len(refusals) == refused and all("BudgetExceeded" in rec.error for rec in refusals)
    if refused:  # the refused call was made again once the limit was raised
        again = r.gateway.records[r.gateway.records.index(refusals[0]) + 1]
        assert again.error is None and again.prompt == refusals[0].prompt
    assert_budget_kept(r)


async def test_a_callback_grant_smaller_than_the_request_raises_the_limit_by_the_grant_only() -> None:
    seen: list[BudgetRequest] = []

    def grant_100(request: BudgetRequest) -> int:
        seen.append(request)
        return 100

    r = await run(scripted(padded_child, by_depth(STEADY)), ControlSettings(), CallbackHandler(on_budget=grant_100),
                  tokens=250)
    assert len(seen) == 1 and seen[0].tokens == 125  # asked for 200, capped at half the original budget
    request = r.control.budget_requests[0]
    assert (request.request.tokens, request.granted, request.approved) == (125, 100, True)
    assert r.gateway.budget.limits.tokens == 250 + 100
    assert r.control.goal_reached is True
    assert_budget_kept(r)


# --- d. request denied -> compromise accepted -----------------------------------------------------


async def test_denied_request_leads_to_an_accepted_compromise() -> None:
    offered: list[Compromise] = []

    async def accept(compromise: Compromise) -> bool:
        offered.append(compromise)
        return True

    handler = CallbackHandler(on_budget=lambda request: 0, on_compromise=accept)
    r = await run(scripted(padded_child, by_depth(STEADY)), ControlSettings(), handler, tokens=250)
    c = r.control
    assert r.result.termination_reason == "compromise_accepted"
    assert c.goal_reached is False
    assert [(q.approved, q.granted) for q in c.budget_requests] == [(False, 0)]
    assert appear_in_order(r.decisions(), "request_increase", "denied", "propose", "accepted")
    assert r.gateway.budget.limits.tokens == 250  # nothing granted, nothing raised
    assert c.compromise is not None and c.compromise.accepted is True
    compromise = c.compromise.offer
    assert offered == [compromise]
    best = r.result.graph.node(compromise.node_id)
    assert compromise.content == best.content and best.score == pytest.approx(0.6)
    assert compromise.score == pytest.approx(0.6)
    assert compromise.gap_to_acceptable == pytest.approx(0.1)
    assert len(compromise.path) == 3 and compromise.path[-1] == best.content
    assert compromise.tradeoffs[0] == "quality slightly below target"
    assert any("depth 3 of 6" in t for t in compromise.tradeoffs)
    assert compromise.explain().startswith("Compromise (quality 0.60, 0.10 below acceptable)")
    assert r.result.best_node == compromise.node_id  # the answer is the compromise
    assert_budget_kept(r)


async def test_denied_request_and_rejected_compromise_stop_at_the_budget() -> None:
    handler = CallbackHandler(on_budget=lambda request: 0, on_compromise=lambda compromise: False)
    r = await run(scripted(padded_child, by_depth(STEADY)), ControlSettings(), handler, tokens=250)
    assert r.result.termination_reason == "budget_tokens"
    assert r.control.compromise is not None and r.control.compromise.accepted is False
    assert len(r.control.budget_requests) == 1  # a denied request is not asked again
    assert "rejected" in r.decisions("compromise")
    assert_budget_kept(r)


async def test_denied_request_with_nothing_to_offer_terminates_once_when_the_tokens_are_really_gone() -> None:
    # Asked at the depth-3 checkpoint (183 spent of 230), denied, and 0.6 is below a 0.65 compromise
    # bar: the search spends the 47 tokens left, and "terminate" is recorded once, when a call is
    # refused and the search really ends (it used to be recorded at the checkpoint as well).
    handler = CallbackHandler(on_budget=lambda request: 0, on_compromise=lambda compromise: True)
    r = await run(scripted(padded_child, by_depth(STEADY)), ControlSettings(compromise_threshold=0.65), handler,
                  tokens=230)
    budget = [(d.decision, d.tokens_spent) for d in r.control.decisions if d.kind == "budget"]
    assert budget == [("request_increase", 183), ("denied", 183), ("terminate", 224)]
    assert r.control.compromise is None
    assert r.result.termination_reason == "budget_tokens"
    assert_budget_kept(r)


# --- e. no acceptable thought -> terminate --------------------------------------------------------


async def test_no_acceptable_thought_terminates_when_the_budget_runs_out() -> None:
    handler = AutomaticHandler(approve_tokens=10_000)  # willing to pay, but nothing worth paying for
    r = await run(scripted(padded_child, by_depth(dict.fromkeys(range(1, 7), 2))), ControlSettings(), handler,
                  tokens=250)
    c = r.control
    assert r.result.termination_reason == "budget_tokens"
    terminate = [d for d in c.decisions if d.kind == "budget" and d.decision == "terminate"]
    assert len(terminate) == 1
    assert "below the compromise threshold 0.50" in terminate[0].reason
    assert terminate[0].detail["situation"]["best_score"] == pytest.approx(0.2)
    assert c.budget_requests == () and c.compromise is None
    assert c.goal_reached is False and c.acceptable_reached is False
    assert r.gateway.budget.limits.tokens == 250 and handler.approved == 0
    # the controller saw it coming: flat progress at a poor quality
    assert {"quality_plateau", "budget_exhausted"} <= r.modes()
    assert_budget_kept(r)


# --- f. paraphrased loop -> circular reasoning detected and acted on ------------------------------

SPLIT = "Split the list into two halves"
PIVOT = "Pick a pivot element"
SPLIT_AGAIN = "Divide the array into two halves"  # SPLIT in other words
PARTITION = "Partition the list into two equal halves"  # SPLIT in other words, from the other branch
SORT_HALVES = "Sort each half recursively"
MOVE_SMALLER = "Move smaller elements before the pivot"
MERGE = "Merge the sorted halves with two pointers"
SWAP = "Swap the pivot into its final place"

LOOP_TREE = {
    (): [SPLIT, PIVOT],
    (SPLIT,): [SPLIT_AGAIN, SORT_HALVES],
    (PIVOT,): [PARTITION, MOVE_SMALLER],
    (SPLIT, SORT_HALVES): [MERGE, SWAP],
    (PIVOT, MOVE_SMALLER): [SWAP, MERGE],
    # were the loop followed, it would go round and round
    (SPLIT, SPLIT_AGAIN): [SPLIT, PIVOT],
    (PIVOT, PARTITION): [SPLIT_AGAIN, PIVOT],
}
# The evaluator likes the restatements best: without the controller the beam would keep them.
LOOP_VALUES = {SPLIT: 5, PIVOT: 4, SPLIT_AGAIN: 6, PARTITION: 6, SORT_HALVES: 5, MOVE_SMALLER: 4,
               MERGE: 10, SWAP: 3}


async def test_paraphrased_loop_is_detected_and_the_restating_thoughts_are_pruned() -> None:
    # the loop is in other words, not exact repeats
    assert SPLIT_AGAIN != SPLIT and similarity(SPLIT, SPLIT_AGAIN) >= 0.7 and similarity(SPLIT, PARTITION) >= 0.7
    r = await run(scripted(tree(LOOP_TREE), by_content(LOOP_VALUES)), ControlSettings(), beam=2)
    circular = [f.failure for f in r.control.anticipated_failures if f.failure.mode == "circular_reasoning"]
    assert circular, r.control.anticipated_failures
    looping = set(r.node_ids(SPLIT_AGAIN) + r.node_ids(PARTITION))
    assert len(looping) == 2 and set(circular[0].nodes) == looping
    assert circular[0].likelihood >= 0.6 and "restate" in circular[0].evidence
    acts = r.actions("circular_reasoning")
    assert len(acts) == 1 and set(acts[0].nodes or ()) == looping and "pruned 2 thoughts" in acts[0].action
    for n in looping:
        assert r.status(n) is NodeStatus.PRUNED
        assert r.children(n) == []  # never expanded: the loop was cut
    pruned = {e.node_id: e.reason for e in r.events if isinstance(e, NodePruned)}
    assert all("circular reasoning" in pruned[n] for n in looping)
    # the search went on along the thoughts that were new, and found the goal there
    assert r.result.termination_reason == "goal_reached"
    assert [s.content for s in r.result.best_path][1:3] == [SPLIT, SORT_HALVES]
    assert r.result.answer == MERGE


async def test_without_a_controller_the_paraphrased_loop_takes_the_beam() -> None:
    gateway = Gateway(scripted(tree(LOOP_TREE), by_content(LOOP_VALUES)), BudgetLimits(tokens=100_000))
    config = SearchConfig(strategy="bfs", generation="sample", breadth=2, beam=2, max_depth=3, value_samples=1,
                          one_pass=True)
    result = await search(ScriptTask(), "sort a list", gateway, config)
    expanded_at_2 = {n.content for n in result.graph if n.depth == 2 and result.graph.children(n.id)}
    assert expanded_at_2 == {SPLIT_AGAIN, PARTITION}  # the beam followed the restatements
    assert result.termination_reason != "goal_reached"


# --- failure actions: plateau, unreliable evaluator, backtracking ---------------------------------


async def test_plateau_widens_the_beam() -> None:
    flat = dict.fromkeys(range(1, 8), 4)
    r = await run(scripted(padded_child, by_depth(flat)), ControlSettings(), beam=2, max_depth=6)
    plateau = [f.failure for f in r.control.anticipated_failures if f.failure.mode == "quality_plateau"]
    assert plateau and max(f.likelihood for f in plateau) >= 0.6
    acts = r.actions("quality_plateau")
    assert acts and acts[0].action == "widened the beam from 2 to 3"
    widened_at = next(d.depth for d in r.control.decisions if d.detail.get("mode") == "quality_plateau")
    # two thoughts a level were expanded before the widening, three right after it
    expanded = Counter(n.depth for n in r.result.graph if r.children(n.id))
    assert expanded[widened_at - 1] == 2
    assert expanded[widened_at] == 3


async def test_a_self_contradicting_evaluator_gets_more_samples_and_thoughts_are_rescored() -> None:
    def values(path: tuple[str, ...], index: int, n: int) -> str:
        if len(path) >= 3:
            return "10"
        return ("1", "9", "5")[index % 3] if n < 6 else "7"  # wild with 3 samples, steady with more

    r = await run(scripted(padded_child, values), ControlSettings(), beam=2, value_samples=3, max_depth=4)
    assert "evaluator_unreliable" in r.modes()
    acts = r.actions("evaluator_unreliable")
    assert acts and acts[0].action.startswith("value samples 3 -> 6; re-scored 2 open thoughts")
    rescored = acts[0].nodes or ()
    assert len(rescored) == 2
    for n in rescored:
        assert r.result.graph.node(n).score == pytest.approx(0.7)  # was 0.5 from the wild samples
    evaluate_calls = [q for q in r.model.calls if q.purpose == "evaluate"]
    assert {q.n for q in evaluate_calls} >= {3, 6}
    rescore_calls = [q for q in evaluate_calls if q.n == 6]
    assert len(rescore_calls) >= 2
    # the re-scored thoughts now lead the beam
    assert r.result.best_path[2].id in rescored


async def test_backtrack_when_quality_falls_deeper_revives_an_earlier_thought() -> None:
    good, better_later, worse = "Try the greedy approach", "Try dynamic programming", "Greedy fails here"
    children = tree({
        (): [good, better_later],
        (good,): [worse, "Greedy fails again"],
        (better_later,): ["Fill the table bottom up", "Read the answer from the table"],
        (better_later, "Fill the table bottom up"): ["done", "done too"],
        (better_later, "Read the answer from the table"): ["done three", "done four"],
    })
    values = by_content({good: 6, better_later: 5.5, worse: 3, "Greedy fails again": 3,
                         "Fill the table bottom up": 10, "Read the answer from the table": 8,
                         "done": 10, "done too": 10, "done three": 10, "done four": 10})
    r = await run(scripted(children, values), ControlSettings(soft_depth=2), beam=1, max_depth=4)
    back = [d for d in r.control.decisions if d.kind == "depth" and d.decision == "backtrack"]
    assert len(back) == 1 and "quality fell from 0.60 at depth 1 to 0.30 at depth 2" in back[0].reason
    revived = r.node_ids(better_later)
    assert len(revived) == 1
    acts = r.actions("depth")
    assert acts == [ControlAction("depth", "backtracked to depth 1", nodes=tuple(revived))]
    assert r.status(revived[0]) is NodeStatus.SUCCEEDED  # was pruned outside the beam, now alive
    assert r.children(revived[0])  # and expanded
    pruned = [e for e in r.events if isinstance(e, NodePruned) and e.node_id == revived[0]]
    assert pruned and pruned[0].reason == "outside the beam"
    assert r.result.termination_reason == "goal_reached"
    assert [s.content for s in r.result.best_path][1:3] == [better_later, "Fill the table bottom up"]
