"""The search engine on the scripted fake model: strategies, operators, circuit breakers and events."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Mapping, Sequence
from fractions import Fraction

import pytest

from thoughtloom.graph import EdgeKind, NodeKind, NodeStatus
from thoughtloom.llm.budget import BudgetLimits
from thoughtloom.llm.errors import ModelError
from thoughtloom.llm.fake import ScriptedBackend
from thoughtloom.llm.gateway import Gateway
from thoughtloom.llm.types import GenerateRequest
from thoughtloom.search import SearchConfig, SearchResult, search
from thoughtloom.search.context import overrides
from thoughtloom.search.scoring import combine
from thoughtloom.search.events import (
    Backtracked,
    BudgetSpent,
    DuplicateMerged,
    Event,
    NodeAdded,
    NodePruned,
    NodeScored,
    SearchStarted,
    SearchStopped,
    ThoughtRepaired,
)
from thoughtloom.tasks import get_task
from thoughtloom.grounding.arith import fmt
from thoughtloom.tasks.base import Task, Verdict

# --- scripted models --------------------------------------------------------------------

Values = Mapping[str, str | Sequence[str]]


def _numbers_in(request: GenerateRequest) -> tuple[str, str]:
    """("propose" | "value", the numbers the game24 prompt asks about)."""
    text = request.prompt.as_text()
    if text.startswith("Evaluate if"):
        return "value", text.rstrip("\n").splitlines()[-1]
    return "propose", text.rsplit("Input: ", 1)[1].split("\n", 1)[0]


def game24_model(
    proposals: Mapping[str, str], values: Values | None = None, default_value: str = "likely", **kw
) -> ScriptedBackend:
    """A fake for game24 keyed by the numbers left: proposals[numbers] is the propose reply (none: no
    steps), values[numbers] the value reply (a sequence: one reply per sample)."""
    values = values or {}

    def respond(request: GenerateRequest, index: int) -> str:
        kind, numbers = _numbers_in(request)
        if kind == "propose":
            return proposals.get(numbers, "")
        reply = values.get(numbers, default_value)
        return reply if isinstance(reply, str) else reply[index % len(reply)]

    return ScriptedBackend(responder=respond, **kw)


def _fmt_all(xs: Sequence[Fraction]) -> str:
    return " ".join(fmt(x) for x in sorted(xs))


def every_step_model(**kw) -> ScriptedBackend:
    """A game24 fake that proposes + and * of every pair and values every state 'likely'."""

    def respond(request: GenerateRequest, index: int) -> str:
        kind, numbers = _numbers_in(request)
        if kind == "value":
            return "likely"
        xs = [Fraction(t) for t in numbers.split()]
        lines = []
        for i, j in itertools.combinations(range(len(xs)), 2):
            rest = [x for k, x in enumerate(xs) if k not in (i, j)]
            for op, r in (("+", xs[i] + xs[j]), ("*", xs[i] * xs[j])):
                lines.append(f"{fmt(xs[i])} {op} {fmt(xs[j])} = {fmt(r)} (left: {_fmt_all(rest + [r])})")
        return "\n".join(lines)

    return ScriptedBackend(responder=respond, **kw)


def general_model(**kw) -> ScriptedBackend:
    """A general-task fake: numbered ideas, independent samples, score 5, vote for choice 1, an answer."""

    def respond(request: GenerateRequest, index: int) -> str:
        text = request.prompt.as_text()
        if text.endswith("Final answer:"):
            return "the final answer"
        if text.endswith("on a scale of 0 to 10:"):
            return "5"
        if text.endswith("The most promising choice is Choice"):
            return " 1"
        if text.endswith("Possible next steps:\n1."):
            depth = text.count("\nStep ")
            return "\n".join(f"{k}. idea {k} at depth {depth}" for k in range(1, 4))
        if "One step that merges" in text:
            return "merged idea"
        if text.endswith("Improved last step:"):
            return "refined idea"
        return f"sample {index}"

    return ScriptedBackend(responder=respond, **kw)


# The main game24 scenario: "4 5 6 10". The decoy step comes first and is valued "likely"; the
# step toward 24 comes second and is valued "sure". Only 10 - 4, 5 * 6, 30 - 6 reaches 24.
DECOY = "4 + 5 = 9 (left: 6 9 10)"
RIGHT = "10 - 4 = 6 (left: 5 6 6)"
WINNING_ANSWER = "(5 * 6) - (10 - 4) = 24"
SCENARIO = {
    "4 5 6 10": f"{DECOY}\n{RIGHT}",
    "6 9 10": "6 + 9 = 15 (left: 10 15)\n10 - 6 = 4 (left: 4 9)",
    "10 15": "10 + 15 = 25 (left: 25)",
    "4 9": "4 * 9 = 36 (left: 36)",
    "5 6 6": "5 * 6 = 30 (left: 6 30)\n6 + 6 = 12 (left: 5 12)",
    "6 30": "30 - 6 = 24 (left: 24)",
    "5 12": "5 + 12 = 17 (left: 17)",
}
SCENARIO_VALUES = {"6 9 10": "likely", "5 6 6": "sure", "6 30": "sure", "5 12": "impossible"}


def scenario_model(**kw) -> ScriptedBackend:
    return game24_model(SCENARIO, SCENARIO_VALUES, **kw)


async def run(
    task: str,
    problem: str,
    model: ScriptedBackend,
    limits: BudgetLimits | None = None,
    gateway_concurrency: int = 8,
    **config,
) -> tuple[SearchResult, list[Event]]:
    events: list[Event] = []
    gateway = Gateway(model, limits or BudgetLimits(tokens=1_000_000), concurrency=gateway_concurrency)
    # These specify a strategy's own pass; what follows it with budget left is tests/test_continuation.py's.
    config.setdefault("one_pass", True)
    result = await search(get_task(task), problem, gateway, SearchConfig(**config), sinks=[events.append])
    return result, events


def of(events: list[Event], kind: type) -> list:
    return [e for e in events if isinstance(e, kind)]


def proposed_for(model: ScriptedBackend) -> list[str]:
    """The game24 states the model was asked to propose steps for, in call order."""
    return [_numbers_in(r)[1] for r in model.calls if r.purpose == "generate"]


def node_by_content(result: SearchResult, content: str) -> int:
    (nid,) = [n.id for n in result.graph if n.content == content]
    return nid


# --- each strategy finds the answer behind the higher-valued branch -----------------------

GAME24_STRATEGIES = ["bfs", "dfs", "best_first", "mcts"]
# beam 1: bfs keeps one thought per level, best_first expands one at a time, mcts simulates serially.
NARROW = {"breadth": 2, "beam": 1, "max_depth": 3, "value_samples": 1}


@pytest.mark.parametrize("strategy", GAME24_STRATEGIES)
async def test_strategy_finds_the_24_behind_the_higher_valued_branch(strategy):
    result, _ = await run("game24", "4 5 6 10", scenario_model(), strategy=strategy, **NARROW)
    assert result.solved is True
    assert result.answer == WINNING_ANSWER
    assert [s.content for s in result.best_path][:2] == ["4 5 6 10", RIGHT]


@pytest.mark.parametrize("strategy", GAME24_STRATEGIES)
async def test_strategy_expands_the_higher_valued_of_two_siblings_first(strategy):
    model = scenario_model()
    await run("game24", "4 5 6 10", model, strategy=strategy, **NARROW)
    assert proposed_for(model)[:2] == ["4 5 6 10", "5 6 6"]  # not the decoy's "6 9 10", proposed first


GOT = {"strategy": "got", "breadth": 3, "beam": 2, "max_depth": 1, "value_samples": 1, "aggregate_k": 2,
       "refine_rounds": 1}


def got_model() -> ScriptedBackend:
    model = general_model()
    model.on("Step 1: idea 1 at depth 0\nQuality", "9")
    model.on("Step 1: idea 2 at depth 0\nQuality", "8")
    model.on("Step 1: idea 3 at depth 0\nQuality", "2")
    model.on("Step 1: merged idea\nQuality", "7")
    model.on("Step 1: refined idea\nQuality", "10")
    model.on("Step 1: refined idea\nFinal answer:", "the refined answer")
    return model


async def test_got_answers_from_the_refined_merge_of_the_best_thoughts():
    result, _ = await run("general", "How to cut costs?", got_model(), **GOT)
    assert result.answer == "the refined answer"
    assert [s.content for s in result.best_path][-2:] == ["refined idea", "the refined answer"]


async def test_got_merges_the_top_thoughts_into_one_node_with_aggregation_edges():
    result, _ = await run("general", "How to cut costs?", got_model(), **GOT)
    graph = result.graph
    merged = node_by_content(result, "merged idea")
    assert graph.node(merged).kind is NodeKind.SYNTHESIS
    parents = graph.parents(merged)
    assert sorted(graph.node(p).content for p in parents) == ["idea 1 at depth 0", "idea 2 at depth 0"]
    assert {graph.edge(p, merged).kind for p in parents} == {EdgeKind.AGGREGATION}


async def test_got_refines_the_merge_along_a_refinement_edge():
    result, _ = await run("general", "How to cut costs?", got_model(), **GOT)
    merged = node_by_content(result, "merged idea")
    refined = node_by_content(result, "refined idea")
    assert result.graph.parents(refined) == [merged]
    assert result.graph.edge(merged, refined).kind is EdgeKind.REFINEMENT


# --- strategy behaviour -----------------------------------------------------------------

FIVE_STEPS = {  # root proposals, valued 1.0, 0.3, 0.0, 0.3 and 1.0 by FIVE_VALUES
    "4 5 6 10": (
        "4 + 5 = 9 (left: 6 9 10)\n"
        "10 - 4 = 6 (left: 5 6 6)\n"
        "5 * 6 = 30 (left: 4 10 30)\n"
        "4 + 6 = 10 (left: 5 10 10)\n"
        "10 - 6 = 4 (left: 4 4 5)"
    ),
}
FIVE_VALUES = {"6 9 10": "sure", "5 6 6": "likely", "4 10 30": "impossible", "5 10 10": "likely",
               "4 4 5": "sure"}


async def test_bfs_keeps_beam_thoughts_per_level_and_prunes_the_rest_as_outside_the_beam():
    model = game24_model(FIVE_STEPS, FIVE_VALUES)
    result, events = await run("game24", "4 5 6 10", model, strategy="bfs", breadth=5, beam=2, max_depth=2,
                               value_samples=1)
    pruned = {result.graph.node(e.node_id).content for e in of(events, NodePruned)}
    assert pruned == {"10 - 4 = 6 (left: 5 6 6)", "5 * 6 = 30 (left: 4 10 30)", "4 + 6 = 10 (left: 5 10 10)"}
    assert {e.reason for e in of(events, NodePruned)} == {"outside the beam"}
    assert sorted(proposed_for(model)[1:]) == ["4 4 5", "6 9 10"]  # the two kept, and only they


async def test_dfs_prunes_thoughts_scoring_below_the_threshold():
    model = game24_model(FIVE_STEPS, FIVE_VALUES)
    result, events = await run("game24", "4 5 6 10", model, strategy="dfs", breadth=5, max_depth=2,
                               value_samples=1, prune_threshold=0.5)
    pruned = {result.graph.node(e.node_id).content: e.reason for e in of(events, NodePruned)}
    assert set(pruned) == {"10 - 4 = 6 (left: 5 6 6)", "5 * 6 = 30 (left: 4 10 30)", "4 + 6 = 10 (left: 5 10 10)"}
    assert pruned["5 * 6 = 30 (left: 4 10 30)"] == "score 0.00 below threshold 0.50"
    assert sorted(proposed_for(model)[1:]) == ["4 4 5", "6 9 10"]


async def test_dfs_backtracks_from_a_dead_end_to_try_the_next_branch():
    # The decoy is valued higher here; everything below it is impossible and pruned.
    values = {"6 9 10": "sure", "10 15": "impossible", "4 9": "impossible", "5 6 6": "likely", "6 30": "sure"}
    model = game24_model(SCENARIO, values)
    result, events = await run("game24", "4 5 6 10", model, strategy="dfs", breadth=2, max_depth=3,
                               value_samples=1, prune_threshold=0.2)
    decoy, right = node_by_content(result, DECOY), node_by_content(result, RIGHT)
    assert [(e.from_id, e.to_id) for e in of(events, Backtracked)] == [(decoy, result.graph.parents(decoy)[0])]
    assert proposed_for(model)[:3] == ["4 5 6 10", "6 9 10", "5 6 6"]
    assert result.answer == WINNING_ANSWER and right in result.graph.path_to_root(result.goal_node)


async def test_best_first_expands_the_highest_scored_open_thought_first():
    proposals = {
        "4 5 6 10": "4 + 5 = 9 (left: 6 9 10)\n10 - 4 = 6 (left: 5 6 6)\n5 * 6 = 30 (left: 4 10 30)",
        "5 6 6": "6 + 6 = 12 (left: 5 12)",
        "6 9 10": "6 + 9 = 15 (left: 10 15)",
        "4 10 30": "4 + 10 = 14 (left: 14 30)",
    }
    values = {"6 9 10": "likely", "5 6 6": "sure", "4 10 30": "impossible", "5 12": "impossible",
              "10 15": "impossible", "14 30": "impossible"}
    result, events = await run("game24", "4 5 6 10", game24_model(proposals, values), strategy="best_first",
                               beam=1, breadth=3, max_depth=2, value_samples=1)
    expanded_in_order = list(dict.fromkeys(e.parents[0] for e in of(events, NodeAdded) if e.parents))
    contents = [result.graph.node(n).content for n in expanded_in_order]
    # sure (1.0), then likely (0.3), then impossible (0.0), although proposed likely, sure, impossible
    assert contents == ["4 5 6 10", "10 - 4 = 6 (left: 5 6 6)", "4 + 5 = 9 (left: 6 9 10)",
                        "5 * 6 = 30 (left: 4 10 30)"]


@pytest.mark.parametrize("iterations", [2, 5])
async def test_mcts_runs_mcts_iterations_simulations_and_stops_with_iterations(iterations):
    result, _ = await run("game24", "1 1 1 1", every_step_model(), strategy="mcts", beam=1, breadth=5,
                          max_depth=3, value_samples=1, mcts_iterations=iterations)
    assert result.termination_reason == "iterations"
    assert result.stats.expansions == iterations  # each simulation expands one new leaf here
    assert result.solved is False


# --- task hooks ---------------------------------------------------------------------------


class _Plain(Task[str]):
    name = "plain"


class _Checked(_Plain):
    def validate(self, problem: str, steps: Sequence[str], thought: str) -> Verdict:
        return Verdict(False, thought, "never")


def test_a_hook_left_at_the_base_default_is_not_an_override():
    assert not overrides(_Plain(), "validate")


def test_a_subclass_hook_is_an_override():
    assert overrides(_Checked(), "validate")


def test_a_hook_set_on_the_instance_is_an_override():
    task = _Plain()
    task.is_goal = lambda problem, steps: True  # type: ignore[method-assign]
    assert overrides(task, "is_goal")


# --- score aggregation ------------------------------------------------------------------


def test_the_first_step_of_a_path_scores_its_own_score_under_every_aggregation():
    for aggregation in ("sum", "product", "min", "mean"):
        assert combine(aggregation, None, 0.4, 1) == 0.4


@pytest.mark.parametrize(
    ("aggregation", "expected"), [("sum", 0.75), ("product", 0.125), ("min", 0.25), ("mean", 0.375)]
)
def test_combine_extends_a_path_score_with_a_new_step(aggregation, expected):
    assert combine(aggregation, 0.5, 0.25, 2) == pytest.approx(expected)


def test_combine_mean_is_the_running_mean_of_all_steps():
    mean_of_two = combine("mean", 1.0, 0.5, 2)
    assert combine("mean", mean_of_two, 0.0, 3) == pytest.approx((1.0 + 0.5 + 0.0) / 3)


@pytest.mark.parametrize(
    ("aggregation", "expected"),
    [("sum", [0.5, 0.8, 1.8]), ("product", [0.5, 0.15, 0.15]), ("min", [0.5, 0.3, 0.3]), ("mean", [0.5, 0.4, 0.6])],
)
async def test_path_scores_aggregate_the_scores_along_the_path(aggregation, expected):
    # 10 - 4 is valued 0.5 (sure + impossible), 5 * 6 is valued 0.3, 30 - 6 = 24 is exactly 1.
    proposals = {"4 5 6 10": RIGHT, "5 6 6": "5 * 6 = 30 (left: 6 30)", "6 30": "30 - 6 = 24 (left: 24)"}
    values = {"5 6 6": ["sure", "impossible"], "6 30": "likely"}
    result, events = await run("game24", "4 5 6 10", game24_model(proposals, values), strategy="bfs",
                               aggregation=aggregation, value_samples=2)
    scored = {e.node_id: e for e in of(events, NodeScored)}
    path = result.graph.path_to_root(result.goal_node)[1:]
    assert [scored[n].score for n in path] == pytest.approx([0.5, 0.3, 1.0])
    assert [scored[n].path_score for n in path] == pytest.approx(expected)


# --- generation and evaluation modes ----------------------------------------------------


async def test_sample_generation_draws_breadth_independent_samples_in_one_call():
    model = general_model()
    result, _ = await run("general", "Plan a trip", model, strategy="bfs", generation="sample", breadth=4,
                          max_depth=1, value_samples=1)
    generate_calls = [r for r in model.calls if r.purpose == "generate"]
    assert [r.n for r in generate_calls] == [4]
    assert sorted(result.graph.node(c).content for c in result.graph.children(0)) == [
        f"sample {i}" for i in range(4)
    ]


async def test_vote_evaluation_makes_one_vote_call_per_sibling_group():
    model = general_model()
    result, _ = await run("general", "Plan a trip", model, strategy="bfs", generation="propose",
                          evaluation="vote", breadth=3, beam=2, max_depth=2, vote_samples=5)
    evaluate_calls = [r for r in model.calls if r.purpose == "evaluate"]
    assert result.stats.expansions == 3  # the root, then the two kept thoughts
    assert len(evaluate_calls) == 3
    assert all(r.prompt.as_text().endswith("Choice") and "Choice 3:" in r.prompt.as_text() for r in evaluate_calls)
    assert [r.n for r in evaluate_calls] == [5, 5, 5]


async def test_vote_shares_become_the_siblings_scores():
    model = general_model()
    result, _ = await run("general", "Plan a trip", model, strategy="bfs", generation="propose",
                          evaluation="vote", breadth=3, max_depth=1, vote_samples=5)
    scores = {result.graph.node(c).content: result.graph.node(c).score for c in result.graph.children(0)}
    assert scores == {"idea 1 at depth 0": 1.0, "idea 2 at depth 0": 0.0, "idea 3 at depth 0": 0.0}


# --- deduplication ----------------------------------------------------------------------

DEDUP = {  # "2 2 3 4": two different two-step paths reach the state "4 7"
    "2 2 3 4": "2 + 2 = 4 (left: 3 4 4)\n3 + 4 = 7 (left: 2 2 7)",
    "3 4 4": "3 + 4 = 7 (left: 4 7)",
    "2 2 7": "2 * 2 = 4 (left: 4 7)",
    "4 7": "4 * 7 = 28 (left: 28)",
}


async def test_two_paths_to_the_same_state_share_one_node():
    result, events = await run("game24", "2 2 3 4", game24_model(DEDUP), strategy="bfs", beam=2, value_samples=1)
    state_nodes = [n.id for n in result.graph if n.content.endswith("(left: 4 7)")]
    assert len(state_nodes) == 1
    (merged,) = of(events, DuplicateMerged)
    assert merged.existing_id == state_nodes[0]
    assert result.stats.duplicates == 1


async def test_a_duplicate_state_gets_an_extra_edge_from_its_second_parent():
    result, _ = await run("game24", "2 2 3 4", game24_model(DEDUP), strategy="bfs", beam=2, value_samples=1)
    (node,) = [n.id for n in result.graph if n.content.endswith("(left: 4 7)")]
    parents = {result.graph.node(p).content for p in result.graph.parents(node)}
    assert parents == {"2 + 2 = 4 (left: 3 4 4)", "3 + 4 = 7 (left: 2 2 7)"}


async def test_a_state_reached_twice_is_expanded_once():
    model = game24_model(DEDUP)
    await run("game24", "2 2 3 4", model, strategy="bfs", beam=2, value_samples=1)
    assert proposed_for(model).count("4 7") == 1


# --- the task's validator in the search -------------------------------------------------


async def test_wrong_arithmetic_is_repaired_in_the_node_content():
    model = game24_model({"4 5 6 10": "4 + 5 = 10 (left: 6 10 10)"})
    result, events = await run("game24", "4 5 6 10", model, max_depth=1, value_samples=1)
    (repaired,) = of(events, ThoughtRepaired)
    assert result.graph.node(repaired.node_id).content == "4 + 5 = 9 (left: 6 9 10)"
    assert "result corrected to 9" in repaired.note
    assert result.stats.repaired == 1


async def test_a_step_using_absent_numbers_is_rejected_as_a_failed_node():
    model = game24_model({"4 5 6 10": "7 * 3 = 21 (left: 4 5 6 10 21)\n4 + 5 = 9 (left: 6 9 10)"})
    result, _ = await run("game24", "4 5 6 10", model, max_depth=1, value_samples=1)
    node = result.graph.node(node_by_content(result, "7 * 3 = 21 (left: 4 5 6 10 21)"))
    assert node.status is NodeStatus.FAILED
    assert "uses 7 and 3" in node.extra["rejected"]
    assert result.stats.rejected == 1


# --- circuit breakers -------------------------------------------------------------------


async def test_max_nodes_stops_the_search_within_the_node_limit():
    result, _ = await run("general", "Plan a trip", general_model(), strategy="bfs", generation="sample",
                          breadth=3, beam=3, max_depth=5, value_samples=1, max_nodes=7)
    assert result.termination_reason == "max_nodes"
    assert len(result.graph) <= 7 + 1  # plus the final solution node
    assert result.graph.node(result.answer_node).kind is NodeKind.SOLUTION


@pytest.mark.parametrize("strategy", GAME24_STRATEGIES)
async def test_no_thought_is_deeper_than_max_depth(strategy):
    result, _ = await run("game24", "1 1 1 1", every_step_model(), strategy=strategy, breadth=3, beam=2,
                          max_depth=2, value_samples=1, mcts_iterations=20)
    assert result.stats.max_depth == 2
    assert max(n.depth for n in result.graph) == 2


async def test_a_token_budget_stops_the_search_without_overspending():
    limit = 2_000
    model = every_step_model()
    result, events = await run("game24", "1 1 1 1", model, limits=BudgetLimits(tokens=limit), breadth=5,
                               beam=5, max_depth=3, value_samples=3)
    assert result.termination_reason == "budget_tokens"
    assert result.usage.input_tokens + result.usage.output_tokens <= limit
    assert all(e.spent_tokens <= limit for e in of(events, BudgetSpent))


async def test_a_budget_stopped_search_still_returns_its_best_partial_path():
    result, _ = await run("game24", "1 1 1 1", every_step_model(), limits=BudgetLimits(tokens=2_000),
                          breadth=5, beam=5, max_depth=3, value_samples=3)
    assert result.best_node is not None
    assert len(result.best_path) >= 2
    assert result.best_path[0].content == "1 1 1 1"
    assert result.best_path[-1].id == result.best_node


async def test_the_general_task_synthesizes_its_answer_after_a_token_budget_stop():
    model = general_model()
    result, _ = await run("general", "Plan a trip", model, limits=BudgetLimits(tokens=1_500), strategy="bfs",
                          generation="sample", breadth=3, beam=3, max_depth=5, value_samples=3)
    assert result.termination_reason == "budget_tokens"
    assert model.calls[-1].purpose == "synthesize"
    assert result.answer == "the final answer"
    assert result.usage.input_tokens + result.usage.output_tokens <= 1_500


# --- the result -------------------------------------------------------------------------


async def test_the_result_reports_answer_verdict_reason_path_usage_and_stats():
    model = scenario_model()
    result, _ = await run("game24", "4 5 6 10", model, **NARROW)
    d = result.to_dict()
    assert d["answer"] == WINNING_ANSWER
    assert d["solved"] is True
    assert d["score"] == 1.0
    assert d["termination_reason"] == "goal_reached"
    assert [s["content"] for s in d["best_path"]] == [
        "4 5 6 10", RIGHT, "5 * 6 = 30 (left: 6 30)", "30 - 6 = 24 (left: 24)", WINNING_ANSWER,
    ]
    assert d["usage"]["calls"] == len(model.calls)
    assert d["usage"]["input_tokens"] > 0 and d["usage"]["output_tokens"] > 0
    assert set(d["stats"]) >= {"nodes", "pruned", "rejected", "repaired", "duplicates", "expansions", "max_depth",
                               "wall_s"}
    assert d["stats"]["nodes"] == len(result.graph)


async def test_reaching_the_goal_stops_the_search_when_stop_on_goal():
    model = scenario_model()
    result, _ = await run("game24", "4 5 6 10", model, strategy="dfs", breadth=2, value_samples=1)
    assert result.termination_reason == "goal_reached"
    assert "6 9 10" not in proposed_for(model)  # the lower-valued branch is never explored


async def test_the_search_continues_past_a_goal_without_stop_on_goal():
    model = scenario_model()
    result, _ = await run("game24", "4 5 6 10", model, strategy="dfs", breadth=2, value_samples=1,
                          stop_on_goal=False)
    assert result.termination_reason == "frontier_exhausted"
    assert "6 9 10" in proposed_for(model)
    assert result.answer == WINNING_ANSWER


# --- concurrency ------------------------------------------------------------------------


def wide_model(peaks: list[int]) -> ScriptedBackend:
    """Five root steps, each a dead end; records how many calls were in flight at each level-2 propose."""
    model = game24_model(FIVE_STEPS, FIVE_VALUES, latency_s=0.05)
    respond = model.responder

    def tracking(request: GenerateRequest, index: int) -> str:
        if request.purpose == "generate" and _numbers_in(request)[1] != "4 5 6 10":
            peaks.append(model.in_flight)
        return respond(request, index)

    model.responder = tracking
    return model


async def test_a_bfs_level_expands_its_thoughts_concurrently():
    peaks: list[int] = []
    await run("game24", "4 5 6 10", wide_model(peaks), strategy="bfs", breadth=5, beam=5, max_depth=2,
              value_samples=1)
    assert len(peaks) == 5
    assert max(peaks) == 5


async def test_the_configured_concurrency_caps_calls_in_flight():
    peaks: list[int] = []
    model = wide_model(peaks)
    await run("game24", "4 5 6 10", model, strategy="bfs", breadth=5, beam=5, max_depth=2, value_samples=1,
              concurrency=2)
    assert len(peaks) == 5
    assert model.peak_in_flight == 2


# --- events -----------------------------------------------------------------------------


async def test_events_start_with_search_started_and_end_with_search_stopped():
    _, events = await run("game24", "4 5 6 10", scenario_model(), **NARROW)
    assert isinstance(events[0], SearchStarted)
    assert isinstance(events[-1], SearchStopped)
    assert len(of(events, SearchStarted)) == len(of(events, SearchStopped)) == 1


async def test_every_node_is_announced_by_a_node_added_event():
    result, events = await run("game24", "4 5 6 10", scenario_model(), **NARROW)
    assert [e.node_id for e in of(events, NodeAdded)] == [n.id for n in result.graph]


async def test_every_model_call_is_reported_by_a_budget_spent_event():
    model = scenario_model()
    _, events = await run("game24", "4 5 6 10", model, **NARROW)
    spent = of(events, BudgetSpent)
    assert len(spent) == len(model.calls)
    assert [e.calls for e in spent] == list(range(1, len(model.calls) + 1))
    assert spent[-1].spent_tokens == sum(e.call_tokens for e in spent)


# --- model errors -----------------------------------------------------------------------


async def test_a_model_error_on_the_first_call_propagates():
    model = ScriptedBackend(failures=[ModelError("model not found: check the model name")])
    with pytest.raises(ModelError, match="model not found"):
        await run("game24", "4 5 6 10", model)


async def test_a_model_error_after_successful_calls_stops_the_search_and_keeps_the_partial_result():
    model = scenario_model()

    def fail_deep(request: GenerateRequest, index: int) -> str:
        if _numbers_in(request) == ("propose", "6 30"):
            raise ModelError("server went away")
        return respond(request, index)

    respond, model.responder = model.responder, fail_deep
    result, _ = await run("game24", "4 5 6 10", model, **NARROW)
    assert result.termination_reason == "model_error"
    assert result.error == "server went away"
    assert [s.content for s in result.best_path] == ["4 5 6 10", RIGHT, "5 * 6 = 30 (left: 6 30)"]
    assert result.solved is False


async def test_a_cancelled_search_returns_what_it_found_as_interrupted() -> None:
    fake = ScriptedBackend(latency_s=0.05, default="likely")
    fake.on("Possible next steps", "4 + 5 = 9 (left: 6 9 10)\n10 - 4 = 6 (left: 5 6 6)")
    gateway = Gateway(fake, BudgetLimits(tokens=100_000))
    running = asyncio.ensure_future(search(get_task("game24"), "4 5 6 10", gateway, SearchConfig(strategy="bfs")))
    await asyncio.sleep(0.12)  # after the first propose call, during the values
    running.cancel()
    result = await running
    assert result.termination_reason == "interrupted"
    assert result.stats.nodes > 1
    calls_at_stop = len(fake.calls)
    await asyncio.sleep(0.1)
    assert len(fake.calls) == calls_at_stop  # nothing keeps calling the model after the stop


async def test_a_query_reaches_the_model_with_each_of_its_settings_in_its_own_request_field() -> None:
    from thoughtloom.llm.types import Prompt
    from thoughtloom.search.context import SearchContext
    from thoughtloom.tasks.base import Query

    fake = ScriptedBackend(default="a", follows_choices=True)
    task = get_task("game24")
    ctx = SearchContext(task, task.parse_problem("4 5 6 10"), Gateway(fake), SearchConfig(strategy="bfs", seed=7),
                        routed_roles=("evaluator",))
    query = Query(Prompt(text="Q"), max_tokens=9, stop=("\n",), temperature=0.3, schema='{"type":"object"}',
                  choices=("a", "b"))
    await ctx.ask(query, 2, "evaluate", ("k",), "evaluator")
    (sent,) = fake.calls
    assert (sent.prompt, sent.n, sent.max_tokens, sent.temperature, sent.stop) == (Prompt(text="Q"), 2, 9, 0.3, ("\n",))
    assert (sent.purpose, sent.schema, sent.route, sent.choices, sent.score_choices) == (
        "evaluate", '{"type":"object"}', "evaluator", ("a", "b"), False)
    assert sent.seed is not None and sent.logprobs is None and sent.form is None


@pytest.mark.parametrize(("given", "kept"), [(float("nan"), 0.0), (1.7, 1.0), (-0.3, 0.0), (0.25, 0.25)])
def test_a_score_outside_zero_to_one_is_clamped_and_nan_counts_as_zero(given: float, kept: float) -> None:
    from thoughtloom.search.context import SearchContext

    task = get_task("game24")
    ctx = SearchContext(task, task.parse_problem("4 5 6 10"), Gateway(ScriptedBackend(default="a")),
                        SearchConfig(strategy="bfs"))
    node = ctx.add_thought([ctx.root], "4 + 5 = 9 (left: 6 9 10)", "generate")
    assert node is not None
    ctx.set_score(node, given)
    assert ctx.graph.node(node).score == kept


async def test_value_calls_answered_at_once_score_in_turn_and_from_the_first_that_waits_they_overlap() -> None:
    from dataclasses import dataclass as _dataclass

    from thoughtloom.llm.types import Completion, Prompt
    from thoughtloom.search.context import SearchContext
    from thoughtloom.search.operators import value_many
    from thoughtloom.tasks.base import Query

    class Plain(Task):
        name = "plain"

        def value(self, problem, steps):  # type: ignore[no-untyped-def]
            return Query(Prompt(text=f"value {steps[-1]}"), max_tokens=4)

        def parse_value(self, problem, steps, texts):  # type: ignore[no-untyped-def]
            return float(texts[0])

    events: list[tuple[str, str]] = []

    @_dataclass
    class WaitsOnT1(ScriptedBackend):
        async def generate(self, request: GenerateRequest) -> Completion:
            thought = request.prompt.text.split()[-1]
            events.append(("start", thought))
            if thought == "t1":
                await asyncio.sleep(0.02)
            events.append(("end", thought))
            return await super().generate(request)

    ctx = SearchContext(Plain(), "p", Gateway(WaitsOnT1(default="0.5")), SearchConfig(strategy="bfs"))
    ids = [ctx.add_thought([ctx.root], f"t{i}", "generate") for i in range(4)]
    await value_many(ctx, ids)  # type: ignore[arg-type]
    assert all(ctx.graph.node(i).score == 0.5 for i in ids)  # type: ignore[arg-type]
    assert events.index(("end", "t0")) < events.index(("start", "t1"))  # answered at once, before the next call
    assert events.index(("start", "t3")) < events.index(("end", "t1"))  # the ones after the wait overlap it
