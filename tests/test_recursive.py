"""The recursive strategy (seed 002, ToT-Gen) on the scripted fake: contracts, backtracking, cycles, leakage."""

from __future__ import annotations

import asyncio
import json

import pytest

from thoughtloom.graph import NodeKind, NodeStatus
from thoughtloom.llm.budget import BudgetLimits
from thoughtloom.llm.fake import ScriptedBackend
from thoughtloom.llm.gateway import Gateway
from thoughtloom.search import SearchConfig, search
from thoughtloom.tasks.recursion import (
    ChildSpec, Contract, ContractError, FailurePolicy, check_contract, parse_contract,
)
from thoughtloom.tasks import get_task

PROBLEM = "Write a two-line poem about rivers"

CONTRACT = {
    "child_specs": ["text", "text"],
    "combine_instruction": "Join the two lines with a newline.",
    "verify_instruction": "The poem has exactly two lines about rivers.",
    "failure_policy": {"retry": 0, "replan": 0, "backtrack": 2},
}


def plans(*items: dict) -> str:
    return json.dumps({"plans": list(items)})


def decomposition(a: str, b: str, contract: dict | None = CONTRACT, confidence: float = 0.8, mode: str = "decompose") -> dict:
    plan = {"mode": mode, "confidence": confidence, "children": [{"goal": a}, {"goal": b}]}
    if contract is not None:
        plan["contract"] = contract
    return plan


def run(backend: ScriptedBackend, problem: str = PROBLEM, **config) -> object:
    gateway = Gateway(backend, BudgetLimits(tokens=200_000))
    cfg = SearchConfig(**{"strategy": "recursive", "breadth": 3, "beam": 3, "max_depth": 1, "temperature": 0.0, **config})
    return asyncio.run(search(get_task("general"), problem, gateway, cfg))


def records(result) -> list[dict]:
    return [n.extra["recursion"] for n in result.graph if "recursion" in n.extra]


def by_kind(result, kind: NodeKind) -> list:
    return [n for n in result.graph if n.kind is kind]


# --- contracts ---------------------------------------------------------------------------

def test_a_contract_needs_all_four_fields():
    with pytest.raises(ContractError, match="lacks failure_policy"):
        parse_contract({k: v for k, v in CONTRACT.items() if k != "failure_policy"}, 2)


def test_a_contract_needs_one_child_spec_per_child():
    with pytest.raises(ContractError, match="2 entries for 3 children"):
        parse_contract(CONTRACT, 3)


def test_a_missing_contract_is_not_well_formed():
    with pytest.raises(ContractError, match="missing contract"):
        check_contract(None, 2)


def test_failure_policy_counts_are_bounded():
    bad = Contract((ChildSpec("text"),), "join", "check", FailurePolicy(retry=50))
    with pytest.raises(ContractError, match="retry"):
        check_contract(bad, 1)


def test_child_specs_are_checkable_schemas():
    spec = ChildSpec("list[integer]", length=3, minimum=0, maximum=9)
    assert spec.check([1, 2, 3]) is None
    assert "expected 3 items" in spec.check([1, 2])
    assert "above the maximum" in spec.check([1, 2, 12])
    assert spec.parse("sorted: [3, 1, 2]") == [3, 1, 2]


# --- the Done-when behaviours ------------------------------------------------------------

def test_a_decomposition_without_a_contract_is_rejected_and_its_branch_cut():
    backend = (
        ScriptedBackend()
        .on("Decompose the goal", plans(decomposition("first line", "second line", contract=None)))
        .on("Solve the goal", "Rivers run to the sea\nand carry the sky")
        .on("Verify the result", "PASS")
    )
    result = run(backend)
    cut = [n for n in by_kind(result, NodeKind.DECOMPOSITION)]
    assert len(cut) == 1 and cut[0].status is NodeStatus.FAILED
    assert "missing contract" in cut[0].extra["recursion"]["invalid"]
    assert not [n for n in result.graph if n.kind is NodeKind.QUESTION]  # no child was ever solved
    assert result.answer == "Rivers run to the sea\nand carry the sky"
    assert result.graph.node(0).extra["recursion_summary"]["invalid_plans"] == 1


def test_a_failed_recomposition_backtracks_to_an_alternative_decomposition_that_succeeds():
    backend = (
        ScriptedBackend()
        .on("Decompose the goal", plans(
            decomposition("a line about mountains", "a line about snow", confidence=0.9),
            decomposition("a line about a river's source", "a line about its mouth", confidence=0.7),
        ))
        .on("Solve the goal", "some line")
        .on("Goal: a line about mountains", "Mountains stand tall")
        .on("Goal: a line about snow", "Snow falls")
        .on("Goal: a line about a river's source", "A spring wakes in the hills")
        .on("Goal: a line about its mouth", "and sleeps in the sea")
        .on("Combine the results", "Mountains stand tall\nSnow falls")
        .on("Combine the results of the sub-goals into the result of the goal.\nGoal: Write a two-line poem about rivers\nInstruction: Join the two lines with a newline.\nSub-results:\n1. a line about a river's source",
            "A spring wakes in the hills\nand sleeps in the sea")
        .on("Verify the result", "FAIL: not about rivers")
        .on("Result: A spring wakes", "PASS")
    )
    result = run(backend)
    decomps = by_kind(result, NodeKind.DECOMPOSITION)
    assert [n.status for n in decomps] == [NodeStatus.FAILED, NodeStatus.SUCCEEDED]
    assert "not about rivers" in decomps[0].extra["recursion"]["verification"]["diagnostics"][0]
    assert result.answer == "A spring wakes in the hills\nand sleeps in the sea"
    summary = result.graph.node(0).extra["recursion_summary"]
    assert summary["backtracks"] == 1 and summary["verified"] is True


def test_a_cycle_of_equivalent_goals_is_stopped():
    # The model keeps "decomposing" the goal into a restatement of itself.
    backend = (
        ScriptedBackend()
        .on("Decompose the goal", plans(decomposition("Write a two line poem about rivers!", "a second line")))
        .on("Solve the goal", "Rivers run")
        .on("Combine the results", "Rivers run\nRivers run")
        .on("Verify the result", "PASS")
    )
    result = run(backend, max_depth=4)
    cyclic = [n for n in result.graph if n.kind is NodeKind.QUESTION and n.status is NodeStatus.FAILED]
    assert cyclic and "cycle: equivalent to the ancestor goal" in cyclic[0].extra["rejected"]
    assert result.graph.node(0).extra["recursion_summary"]["cycles"] >= 1
    # Stopped at once: the root and its one genuine child asked for plans, no restatement did.
    assert sum(c.purpose == "decompose" for c in backend.calls) <= 2


def test_a_paraphrased_goal_counts_as_a_cycle():
    backend = (
        ScriptedBackend()
        .on("Decompose the goal", plans(decomposition("Write a poem with two lines about rivers", "a second line")))
        .on("Solve the goal", "Rivers run")
        .on("Verify the result", "PASS")
    )
    result = run(backend, max_depth=3)
    assert result.graph.node(0).extra["recursion_summary"]["cycles"] >= 1


def test_a_child_sees_only_its_own_goal_and_the_context_its_contract_gives():
    backend = (
        ScriptedBackend()
        .on("Decompose the goal", plans({
            "mode": "decompose", "children": [
                {"goal": "describe the source", "context": "SECRET-A"},
                {"goal": "describe the mouth", "context": "SECRET-B"},
            ], "contract": CONTRACT,
        }))
        .on("Goal: describe the source", "ALPHA-RESULT")
        .on("Goal: describe the mouth", "BETA-RESULT")
        .on("Combine the results", "ALPHA-RESULT\nBETA-RESULT")
        .on("Verify the result", "PASS")
    )
    result = run(backend)
    solves = [c.prompt.as_text() for c in backend.calls if c.purpose == "solve"]
    source = next(p for p in solves if "describe the source" in p)
    mouth = next(p for p in solves if "describe the mouth" in p)
    assert "SECRET-A" in source and "SECRET-A" not in mouth
    assert "SECRET-B" in mouth and "SECRET-B" not in source
    for prompt in (source, mouth):
        assert "RESULT" not in prompt and PROBLEM not in prompt  # no sibling result, no parent goal
    assert result.answer == "ALPHA-RESULT\nBETA-RESULT"


def test_independent_children_are_solved_concurrently():
    backend = (
        ScriptedBackend(latency_s=0.05)
        .on("Decompose the goal", plans(decomposition("first line", "second line")))
        .on("Solve the goal", "a line")
        .on("Combine the results", "a line\na line")
        .on("Verify the result", "PASS")
    )
    run(backend)
    assert backend.peak_in_flight >= 2


def test_a_chain_hands_each_step_result_to_the_next_step():
    backend = (
        ScriptedBackend()
        .on("Decompose the goal", plans(decomposition("first line", "second line", mode="chain")))
        .on("Goal: first line", "FIRST-OUT")
        .on("Goal: second line", "SECOND-OUT")
        .on("Combine the results", "FIRST-OUT\nSECOND-OUT")
        .on("Verify the result", "PASS")
    )
    run(backend)
    second = next(c.prompt.as_text() for c in backend.calls if "Goal: second line" in c.prompt.as_text())
    assert "Result of the previous step: FIRST-OUT" in second


def test_a_decomposition_above_the_fanout_limit_is_cut():
    backend = (
        ScriptedBackend()
        .on("Decompose the goal", plans(decomposition("first line", "second line")))
        .on("Solve the goal", "Rivers run")
        .on("Verify the result", "PASS")
    )
    result = run(backend, recursive_fanout=1)
    (cut,) = by_kind(result, NodeKind.DECOMPOSITION)
    assert "fan-out 2 above the limit 1" in cut.extra["rejected"]


def test_a_spent_level_token_budget_stops_calls_at_that_level():
    backend = (
        ScriptedBackend()
        .on("Decompose the goal", plans(decomposition("first line", "second line")))
        .on("Solve the goal", "a line")
        .on("Verify the result", "PASS")
    )
    result = run(backend, recursive_level_tokens=1)
    assert result.graph.node(0).extra["recursion_summary"]["level_budget_refusals"] >= 1
    # Each level's first call spends its budget: no recomposition is ever asked for.
    assert not [c for c in backend.calls if c.purpose == "recompose"]
    (decomposition_node,) = by_kind(result, NodeKind.DECOMPOSITION)
    assert "token budget of 1 spent" in decomposition_node.extra["rejected"]


def test_contracts_and_verification_traces_are_in_the_json_output():
    backend = (
        ScriptedBackend()
        .on("Decompose the goal", plans(decomposition("first line", "second line")))
        .on("Solve the goal", "a line")
        .on("Combine the results", "a line\na line")
        .on("Verify the result", "PASS")
    )
    data = json.loads(json.dumps(run(backend).to_dict()))
    nodes = data["recursion"]["nodes"]
    decomposition_node = next(n for n in nodes if n["kind"] == "decomposition")
    assert decomposition_node["contract"]["failure_policy"] == {"retry": 0, "replan": 0, "backtrack": 2}
    assert all({"goal", "mode", "children", "contract", "result", "verification", "score"} <= set(n) for n in nodes)
    assert any(n["mode"] == "recompose" and n["verification"]["passed"] for n in nodes)
    assert data["recursion"]["summary"]["verified"] is True


async def test_a_task_whose_steps_have_a_fixed_form_refuses_the_generic_decomposition() -> None:
    from thoughtloom.llm.fake import ScriptedBackend
    from thoughtloom.llm.gateway import Gateway
    from thoughtloom.search.config import SearchConfig
    from thoughtloom.search.engine import search
    from thoughtloom.tasks.base import UnsupportedOperation
    from thoughtloom.tasks.registry import get_task

    fake = ScriptedBackend(default="anything")
    with pytest.raises(UnsupportedOperation, match="task game24 has no decomposition for --strategy recursive"):
        await search(get_task("game24"), "4 5 6 10", Gateway(fake), SearchConfig(strategy="recursive"))
    assert fake.calls == []
