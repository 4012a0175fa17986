"""Structured output for plans, contracts, typed values and verdicts: asked for by JSON schema, the JSON
reply used, free text still read where a backend does not enforce schemas (and counted), and runs
stored before these requests had a schema replaying as they were."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from openai_server import FakeOpenAIServer
from test_agent import TRIP, run, trip_model
from test_recursive import CONTRACT, PROBLEM, decomposition, plans
from test_recursive import run as run_recursive

from thoughtloom.api import agent, areplay
from thoughtloom.graph import NodeKind, NodeStatus
from thoughtloom.llm.fake import ScriptedBackend
from thoughtloom.llm.types import GenerateRequest
from thoughtloom.search.context import SearchContext
from thoughtloom.store.sqlite import SQLiteStore
from thoughtloom.tasks.agent import PlanStep, parse_plan, plan_query
from thoughtloom.tasks.cove import parse_questions
from thoughtloom.tasks.cove import plan_query as cove_plan_query
from thoughtloom.tasks.recursion import ChildSpec, Goal, RecursiveHooks
from thoughtloom.tasks.research import branch_query, parse_proposals

TEXT_PLAN = "1. Find flights\n2. Find a hotel\n3. [calc] Add up flights and hotel (after 1, 2)\n4. Check the total (after 3)"
JSON_PLAN = json.dumps({"steps": [{"text": "Find flights"}, {"text": "Find a hotel"},
                                  {"text": "Add up flights and hotel", "after": [1, 2], "tool": "calc"},
                                  {"text": "Check the total", "after": [3]}]})


def structured_calls(backend: ScriptedBackend) -> int:
    return sum(r.n for r in backend.calls if r.schema is not None and not r.choices)


# --- recursive decomposition: plans and their contracts ----------------------------------------------


def test_a_decomposition_asks_for_at_most_k_plans_each_split_with_its_contract_by_json_schema() -> None:
    query = RecursiveHooks(PROBLEM).propose_query(Goal(PROBLEM), 3, None)
    assert query.schema is not None
    plans_schema = json.loads(query.schema)["properties"]["plans"]
    assert plans_schema["maxItems"] == 3
    split = plans_schema["items"]["anyOf"][1]
    assert {"children", "contract"} <= set(split["required"])
    assert set(split["properties"]["contract"]["required"]) == set(CONTRACT)


def test_the_plans_schema_is_the_same_text_each_time() -> None:
    # Part of a stored request's key: a replay must ask exactly what the run asked.
    first = RecursiveHooks(PROBLEM).propose_query(Goal(PROBLEM), 2, None).schema
    assert first == RecursiveHooks(PROBLEM).propose_query(Goal(PROBLEM), 2, None).schema
    assert first == json.dumps(json.loads(first or ""), sort_keys=True, separators=(",", ":"))


def json_recursion() -> ScriptedBackend:
    """Every reply the JSON its request's schema asks for."""
    return (
        ScriptedBackend()
        .on("Decompose the goal", plans(decomposition("a line about a river's source", "a line about its mouth")))
        .on("Goal: a line about a river's source", '{"value": "A spring wakes in the hills"}')
        .on("Goal: a line about its mouth", '{"value": "and sleeps in the sea"}')
        .on("Solve the goal", '{"value": "Rivers run"}')
        .on("Combine the results", json.dumps({"value": "A spring wakes in the hills\nand sleeps in the sea"}))
        .on("Verify the result", '{"verdict": "PASS", "reason": "two lines about a river"}')
    )


def test_every_request_of_a_recursive_search_asks_for_json_by_schema() -> None:
    backend = json_recursion()
    run_recursive(backend)
    purposes = {r.purpose for r in backend.calls}
    assert {"decompose", "solve", "recompose", "verify"} <= purposes
    assert all(r.schema is not None for r in backend.calls if r.purpose in ("decompose", "solve", "recompose", "verify"))


def test_json_replies_decompose_solve_combine_and_verify_with_no_parse_failure() -> None:
    result = run_recursive(json_recursion())
    assert result.answer == "A spring wakes in the hills\nand sleeps in the sea"
    (split,) = [n for n in result.graph if n.kind is NodeKind.DECOMPOSITION]
    assert split.status is not NodeStatus.FAILED
    assert result.stats.parse_failures == 0


def test_a_plan_in_prose_is_still_read_and_every_text_reply_is_a_parse_failure() -> None:
    backend = (
        ScriptedBackend()
        .on("Decompose the goal", "Here is my plan:\n" + plans(decomposition("first line", "second line")))
        .on("Goal: first line", "Rivers run")
        .on("Goal: second line", "to the sea")
        .on("Solve the goal", "Rivers run to the sea")
        .on("Combine the results", "Rivers run\nto the sea")
        .on("Verify the result", "PASS")
    )
    result = run_recursive(backend)
    (split,) = [n for n in result.graph if n.kind is NodeKind.DECOMPOSITION]
    assert split.status is not NodeStatus.FAILED  # the text fallback found the plan and its contract
    assert result.answer == "Rivers run\nto the sea"
    assert result.stats.parse_failures == structured_calls(backend) > 0


# --- typed values and verdicts -----------------------------------------------------------------------


def test_a_typed_value_is_asked_for_as_json_of_the_contracts_type_and_length() -> None:
    schema = json.loads(ChildSpec("list[integer]", length=3).reply_schema())
    assert schema["required"] == ["value"]
    assert schema["properties"]["value"] == {"type": "array", "items": {"type": "integer"}, "minItems": 3, "maxItems": 3}


def test_a_json_value_reply_gives_the_value() -> None:
    assert ChildSpec("list[integer]").parse('{"value": [3, 1, 2]}') == [3, 1, 2]
    assert ChildSpec("text").parse('{"value": "two\\nlines"}') == "two\nlines"


def test_a_text_value_reply_is_still_read() -> None:
    assert ChildSpec("integer").parse("The answer is 42.") == 42


def test_a_json_verdict_is_read_with_its_reason() -> None:
    verdict = RecursiveHooks(PROBLEM).parse_verification('{"verdict": "FAIL", "reason": "three lines"}')
    assert not verdict.passed
    assert verdict.diagnostics == ("model: FAIL: three lines",)


def test_a_decomposition_sends_its_schema_as_structured_output_to_a_chat_endpoint(server: FakeOpenAIServer) -> None:
    from thoughtloom.api import solve

    solve(PROBLEM, task="general", model=f"openai-compatible:{server.url}@m", controller=False,
          strategy="recursive", breadth=2, max_depth=1)
    asked = [s.body["response_format"]["json_schema"]["schema"] for s in server.seen if "response_format" in s.body]
    assert any("plans" in schema.get("properties", {}) for schema in asked)


# --- agent plans -------------------------------------------------------------------------------------


def test_an_agent_plan_asks_for_its_steps_by_json_schema_with_the_granted_tools() -> None:
    schema = json.loads(plan_query(TRIP, ["docs", "calc"]).schema or "")
    step = schema["properties"]["steps"]["items"]
    assert step["properties"]["tool"] == {"enum": ["calc", "docs"]}
    assert schema["required"] == ["steps"]


def test_an_agent_plan_without_tools_offers_none() -> None:
    step = json.loads(plan_query(TRIP, []).schema or "")["properties"]["steps"]["items"]
    assert "tool" not in step["properties"]


def test_a_json_plan_gives_steps_numbered_by_position_with_dependencies_and_tools() -> None:
    steps = parse_plan(JSON_PLAN, ["calc"])
    assert steps == parse_plan(TEXT_PLAN, ["calc"])
    assert steps[2] == PlanStep(3, "Add up flights and hotel", (1, 2), "calc")


def test_a_json_plan_keeps_only_dependencies_on_earlier_steps_and_granted_tools() -> None:
    reply = json.dumps({"steps": [{"text": "a", "after": [2]}, {"text": "b", "after": [1, 2, 9], "tool": "web"}]})
    assert parse_plan(reply, ["calc"]) == [PlanStep(1, "a"), PlanStep(2, "b", (1,))]


def test_an_agent_run_reads_a_json_plan_with_no_parse_failure_for_it() -> None:
    model = trip_model()
    model.on("Tools: calc", JSON_PLAN)
    result = asyncio.run(run(model))
    (plan,) = [n for n in result.graph if n.kind is NodeKind.PLAN]
    assert [s["text"] for s in plan.extra["steps"]] == ["Find flights", "Find a hotel", "Add up flights and hotel",
                                                        "Check the total"]
    plan_calls = [r for r in model.calls if r.purpose == "plan"]
    assert plan_calls and all(r.schema is not None for r in plan_calls)
    text_replies = sum(r.n for r in model.calls if r.schema is not None and r.purpose != "plan")
    assert result.stats.parse_failures == text_replies  # the tool calls' text, not the plan


def test_an_agent_run_with_a_text_plan_reads_it_and_counts_it_as_a_parse_failure() -> None:
    model = trip_model()  # its plan: numbered lines
    result = asyncio.run(run(model))
    (plan,) = [n for n in result.graph if n.kind is NodeKind.PLAN]
    assert len(plan.extra["steps"]) == 4
    assert [r.schema is not None for r in model.calls if r.purpose == "plan"] == [True]
    assert result.stats.parse_failures == structured_calls(model)  # the plan's text among them


# --- runs stored before these requests had a schema ---------------------------------------------------


@pytest.fixture
def schemaless(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The search as it asked before any reply had a schema (a record stored by an older thoughtloom)."""
    asked = SearchContext._request

    def without_schema(self: SearchContext, *args: Any, **kwargs: Any) -> GenerateRequest:
        return dataclasses.replace(asked(self, *args, **kwargs), schema=None)

    monkeypatch.setattr(SearchContext, "_request", without_schema)
    return monkeypatch


def test_an_agent_run_stored_before_plans_had_a_schema_replays_into_the_same_graph(
        tmp_path: Path, schemaless: pytest.MonkeyPatch) -> None:
    store = str(tmp_path / "runs.db")
    model = trip_model()
    result = asyncio.run(agent(TRIP, tools=["calc"], model=model, store=store, controller=False, seed=3))
    assert all(r.schema is None for r in model.calls)
    schemaless.undo()  # today's code asks with schemas
    with SQLiteStore(store) as opened:
        replayed, verdict = asyncio.run(areplay(opened, str(result.run_id)))
    assert verdict.identical, str(verdict)
    assert verdict.model_calls == 0
    assert str(replayed.graph_cid) == str(result.graph_cid)


def test_a_recursive_run_stored_before_plans_and_contracts_had_a_schema_replays_into_the_same_graph(
        tmp_path: Path, schemaless: pytest.MonkeyPatch) -> None:
    from thoughtloom.api import solve

    store = str(tmp_path / "runs.db")
    backend = json_recursion()
    result = solve(PROBLEM, task="general", model=backend, controller=False, strategy="recursive", breadth=3,
                   max_depth=1, seed=1, store=store)
    assert backend.calls and all(r.schema is None for r in backend.calls)
    schemaless.undo()
    with SQLiteStore(store) as opened:
        replayed, verdict = asyncio.run(areplay(opened, str(result.run_id)))
    assert verdict.identical, str(verdict)
    assert replayed.answer == result.answer


# --- through the embedded model ----------------------------------------------------------------------


@pytest.mark.local_model
async def test_the_embedded_models_grammar_writes_an_agent_plan_that_parses_as_json() -> None:
    from thoughtloom.llm.registry import make_backend

    backend = make_backend("local:gemma-3-270m")
    query = plan_query(TRIP, ["calc"])
    try:
        completion = await backend.generate(GenerateRequest(query.prompt, max_tokens=query.max_tokens,
                                                            temperature=0.7, seed=1, schema=query.schema))
    finally:
        await backend.aclose()
    (reply,) = completion.texts
    assert isinstance(json.loads(reply), dict)  # the grammar closed the JSON within max_tokens
    steps = parse_plan(reply, ["calc"])
    assert 1 <= len(steps) <= 6
    assert all(s.text for s in steps)


# --- research hypotheses -----------------------------------------------------------------------------

JSON_HYPOTHESES = json.dumps({"hypotheses": [
    {"answer": "Argus", "reason": "the shipwright of the legend", "confidence": 0.7},
    {"answer": "Jason", "reason": "he led the crew"},
    {"answer": "Athena", "reason": "she helped"},
]})


def test_a_research_branch_asks_for_at_most_n_hypotheses_by_json_schema() -> None:
    schema = json.loads(branch_query("Who built the Argo?", 3).schema or "")
    hypotheses = schema["properties"]["hypotheses"]
    assert hypotheses["maxItems"] == 3
    assert hypotheses["items"]["required"] == ["answer"]


def test_json_hypotheses_are_read_as_their_numbered_lines_would_be() -> None:
    text = "1. Argus - the shipwright of the legend (confidence 0.7)\n2. Jason - he led the crew\n3. Athena - she helped"
    assert parse_proposals(JSON_HYPOTHESES, 5) == parse_proposals(text, 5)


def test_json_hypotheses_keep_each_answer_once_and_at_most_n() -> None:
    reply = json.dumps({"hypotheses": [{"answer": "Argus"}, {"answer": "the Argus"}, {"answer": "Jason"},
                                       {"answer": "Athena"}]})
    assert [p.answer for p in parse_proposals(reply, 2)] == ["Argus", "Jason"]


def test_a_research_flow_grows_its_hypotheses_from_a_json_reply(tmp_path: Path) -> None:
    from test_research_flow import run as run_research
    from test_research_flow import world

    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "argo.md").write_text("# The Argo\nThe Argo was built by Argus, with the help of Athena.\n")
    model = world(root=JSON_HYPOTHESES)
    _, _, result = run_research(model=model, knowledge=str(folder), confidence_threshold=0.99)
    assert {h.answer for h in result.tree.values() if h.depth == 1} == {"Argus", "Jason", "Athena"}
    assert all(r.schema is not None for r in model.calls if r.purpose == "branch")


# --- Chain of Verification's plan of questions --------------------------------------------------------


def test_a_cove_plan_asks_for_at_most_k_questions_by_json_schema() -> None:
    schema = json.loads(cove_plan_query("Which river?", "The Danube.", 2).schema or "")
    assert schema["properties"]["questions"]["maxItems"] == 2


def test_json_questions_are_read_each_once_and_at_most_k() -> None:
    reply = json.dumps({"questions": ["Where was Mozart born?", "where was mozart born?", "Which river?", "A third?"]})
    assert parse_questions(reply, 2) == ["Where was Mozart born?", "Which river?"]


def test_a_cove_run_verifies_the_questions_of_a_json_plan_with_no_parse_failure() -> None:
    from test_cove import CHECKS, DRAFT, QUESTION, REVISION
    from test_cove import cove as run_cove

    model = ScriptedBackend()
    model.on(f"Question: {QUESTION}\n", f"Answer: {DRAFT}")
    model.on("Verification questions (", json.dumps({"questions": list(CHECKS)}))
    for question, answer in CHECKS.items():
        model.on(f"Question: {question}\n", f"Answer: {answer}")
    model.on("Verifications:\n", f"Final answer: {REVISION}")
    result = run_cove(model)
    assert result.answer == REVISION
    assert [r.schema is not None for r in model.calls if r.purpose == "plan"] == [True]
    assert result.stats.parse_failures == 0
