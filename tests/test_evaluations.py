"""Evaluations as records: the evaluator's score, reasoning and verdict, kept on the node, in results and runs."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from openai_server import FakeOpenAIServer, Reply, Seen, completions_of

from thoughtloom import areplay, asolve
from thoughtloom.cli.main import main
from thoughtloom.graph import NodeKind
from thoughtloom.llm.budget import BudgetLimits
from thoughtloom.llm.fake import ScriptedBackend
from thoughtloom.llm.types import GenerateRequest
from thoughtloom.store.runs import load_graph, open_run
from thoughtloom.store.sqlite import SQLiteStore

QUESTION = "How can a small bakery cut its energy costs?"
# One JSON evaluation per idea the scripted model proposes.
EVALUATIONS = {
    "idea A": {"reasoning": "Insulating the ovens saves heat every day.", "score": 8, "is_promising": True},
    "idea B": {"reasoning": "Closing on Mondays loses sales.", "score": 4, "is_promising": False},
}


def bakery_reply(request: GenerateRequest, index: int) -> str:
    """Sampled steps "idea A" and "idea B"; each valued by its JSON evaluation; a final answer."""
    text = request.prompt.as_text()
    if text.endswith("Final answer:"):
        return "Insulate the ovens."
    if text.endswith("on a scale of 0 to 10:"):
        last = text.rsplit("Step ", 1)[1]
        return json.dumps(next(e for idea, e in EVALUATIONS.items() if idea in last))
    return ["idea A", "idea B"][index % 2]


def bakery_model() -> ScriptedBackend:
    return ScriptedBackend(responder=bakery_reply)


SETTINGS = {"max_depth": 1, "breadth": 2, "value_samples": 1, "controller": False}


def node_with(result, content: str):
    """The thought (not the final answer) with this content."""
    (node,) = [n for n in result.graph if n.content == content and n.kind is not NodeKind.SOLUTION]
    return node


async def test_the_general_tasks_evaluation_is_kept_on_the_node() -> None:
    result = await asolve(QUESTION, model=bakery_model(), **SETTINGS)
    assert node_with(result, "idea A").extra["evaluation"] == {
        "score": pytest.approx(0.8), "reasoning": "Insulating the ovens saves heat every day.", "is_promising": True}
    assert node_with(result, "idea B").extra["evaluation"]["is_promising"] is False


async def test_the_best_path_in_the_json_result_carries_the_evaluation() -> None:
    result = await asolve(QUESTION, model=bakery_model(), **SETTINGS)
    step = result.to_dict()["best_path"][1]
    assert step["content"] == "idea A"
    assert step["evaluation"]["reasoning"] == "Insulating the ovens saves heat every day."
    assert "evaluation" not in result.to_dict()["best_path"][0]  # the problem itself was not evaluated


async def test_a_chatty_evaluator_is_scored_by_its_stated_score_not_the_step_number() -> None:
    model = ScriptedBackend(responder=lambda request, index: (
        "Step 1: the idea is sound and concrete. 0.8" if request.prompt.as_text().endswith("0 to 10:")
        else "Final answer: insulate" if request.prompt.as_text().endswith("Final answer:") else "idea A"))
    result = await asolve(QUESTION, model=model, **SETTINGS)
    node = node_with(result, "idea A")
    assert node.score == pytest.approx(0.8)
    assert node.extra["evaluation"]["reasoning"] == "Step 1: the idea is sound and concrete. 0.8"


async def test_a_bare_number_keeps_no_record_beyond_the_score() -> None:
    model = ScriptedBackend(responder=lambda request, index: (
        " 7" if request.prompt.as_text().endswith("0 to 10:") else "idea A"))
    result = await asolve(QUESTION, model=model, **SETTINGS)
    node = node_with(result, "idea A")
    assert node.score == pytest.approx(0.7) and "evaluation" not in node.extra


async def test_game24_thoughts_keep_their_verdict_values_and_no_evaluation_record() -> None:
    def reply(request: GenerateRequest, index: int) -> str:
        text = request.prompt.as_text()
        return "likely" if text.startswith("Evaluate if") else "10 - 4 = 6 (left: 5 6 6)"

    result = await asolve("4 5 6 10", task="game24", model=ScriptedBackend(responder=reply), max_depth=1,
                          evaluation="value", value_samples=1, controller=False)
    thoughts = [n for n in result.graph if n.depth == 1]
    assert thoughts and all("evaluation" not in n.extra for n in thoughts)


def chat_reply(seen: Seen) -> Reply:
    """The general task's chat prompts: a step, a JSON evaluation, an answer."""
    system = seen.body["messages"][0]["content"]
    if "evaluator" in system:
        text = json.dumps(EVALUATIONS["idea A"])
    elif "synthesizer" in system:
        text = "Insulate the ovens."
    else:
        text = "idea A"
    n = int(seen.body.get("n") or 1)
    return Reply(200, {"id": "x", "object": "chat.completion", "created": 0, "model": "m",
                       "choices": [{"index": i, "message": {"role": "assistant", "content": text},
                                    "finish_reason": "stop"} for i in range(n)],
                       "usage": {"prompt_tokens": 50, "completion_tokens": 10 * n, "total_tokens": 50 + 10 * n}})


async def test_a_chat_endpoint_is_asked_for_the_evaluation_as_structured_output(server: FakeOpenAIServer) -> None:
    server.responder = chat_reply
    result = await asolve(QUESTION, model=f"openai-compatible:{server.url}@m#chat", **SETTINGS)
    [asked] = [s.body for s in server.seen if "evaluator" in s.body["messages"][0]["content"]]
    schema = asked["response_format"]["json_schema"]["schema"]
    assert schema["required"] == ["reasoning", "score", "is_promising"]
    assert node_with(result, "idea A").extra["evaluation"]["is_promising"] is True


def test_a_stored_run_keeps_the_evaluations_and_replays_them(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "s.db") as store:
        result = asyncio.run(asolve(QUESTION, model=bakery_model(), store=store, run_id="r1", **SETTINGS))
        stored = load_graph(store, open_run(store, "r1").graph_cid).graph
        node = next(n for n in stored if n.content == "idea B")
        assert node.extra["evaluation"]["reasoning"] == "Closing on Mondays loses sales."
        replayed, verdict = asyncio.run(areplay(store, "r1"))
        assert verdict.identical, str(verdict)
        assert node_with(replayed, "idea B").extra == node_with(result, "idea B").extra


@pytest.mark.local_model
async def test_the_embedded_model_answers_evaluations_as_records_through_its_grammar() -> None:
    result = await asolve(QUESTION, model="local:gemma-3-270m", max_depth=1, breadth=2, value_samples=1, seed=1,
                          controller=False, budget=BudgetLimits(tokens=4_000))
    evaluated = [n for n in result.graph if n.depth == 1 and n.score is not None]
    assert evaluated, result.termination_reason
    for node in evaluated:  # the grammar makes every reply the JSON record: a verdict always, a score in 0..1
        record = node.extra["evaluation"]
        assert record["is_promising"] in (True, False)
        assert 0.0 <= record["score"] <= 1.0


#: The bakery model behind a completions endpoint.
completion_reply = completions_of(bakery_reply)


def test_loom_solve_prints_why_the_evaluator_scored_each_best_path_step(
        server: FakeOpenAIServer, capsys: pytest.CaptureFixture[str]) -> None:
    server.responder = completion_reply
    code = main(["solve", "--model", f"openai-compatible:{server.url}@m#completions", "--depth", "1",
                 "--breadth", "2", "--value-samples", "1", "--quiet", "--no-store", QUESTION])
    out = capsys.readouterr().out
    assert code == 0, out
    why = out.split("hypothesis   idea A", 1)[1].splitlines()[1]
    assert why.strip() == "why: Insulating the ovens saves heat every day."
