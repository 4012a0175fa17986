"""Chain of Verification (--strategy cove): draft, plan verification questions, answer each alone, revise."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from openai_server import FakeOpenAIServer, Reply, Seen

from thoughtloom.api import areplay, asolve
from thoughtloom.cli.main import main
from thoughtloom.graph import EdgeKind, NodeKind, NodeStatus
from thoughtloom.llm.budget import BudgetLimits
from thoughtloom.llm.fake import ScriptedBackend
from thoughtloom.run.spec import SpecError
from thoughtloom.search.result import SearchResult
from thoughtloom.store.runs import load_graph, open_run
from thoughtloom.store.sqlite import SQLiteStore
from thoughtloom.tasks.cove import on_topic, parse_questions, parse_reply

QUESTION = "Which river flows through the city where Mozart was born?"
DRAFT = "Mozart was born in Vienna, and the Danube flows through Vienna."
CHECKS = {
    "Where was Mozart born?": "Mozart was born in Salzburg.",
    "Which river flows through Salzburg?": "The Salzach flows through Salzburg.",
}
REVISION = "The Salzach: Mozart was born in Salzburg, and the Salzach flows through it."


def world(**settings: Any) -> ScriptedBackend:
    """A model that drafts wrongly, asks the two questions that expose it, answers them, and revises."""
    model = ScriptedBackend(**settings)
    model.on(f"Question: {QUESTION}\n", f"Answer: {DRAFT}")
    model.on("Verification questions (", "\n".join(f"{i}. {q}" for i, q in enumerate(CHECKS, 1)))
    for question, answer in CHECKS.items():
        model.on(f"Question: {question}\n", f"Answer: {answer}")
    model.on("Verifications:\n", f"Final answer: {REVISION}")
    return model


def cove(model: ScriptedBackend, problem: str = QUESTION, **settings: Any) -> SearchResult:
    return asyncio.run(asolve(problem, model=model, strategy="cove", controller=False, **settings))


def purposes(model: ScriptedBackend) -> list[str]:
    return [call.purpose for call in model.calls]


def test_cove_answers_with_the_draft_revised_by_its_verifications() -> None:
    model = world()
    result = cove(model)
    assert result.answer == REVISION
    assert result.termination_reason == "goal_reached"
    assert purposes(model) == ["draft", "plan", "verify", "verify", "revise"]


def test_each_verification_question_is_asked_alone_without_the_draft_or_the_problem() -> None:
    model = world()
    cove(model)
    asked = [call.prompt.as_text() for call in model.calls if call.purpose == "verify"]
    assert len(asked) == 2
    for text, question in zip(asked, CHECKS):
        assert f"Question: {question}" in text
        assert "Mozart was born in Vienna" not in text and QUESTION not in text


def test_the_revision_is_shown_the_draft_and_every_question_with_its_answer() -> None:
    model = world()
    cove(model)
    revise = next(call.prompt.as_text() for call in model.calls if call.purpose == "revise")
    assert f"Draft answer: {DRAFT}" in revise
    for question, answer in CHECKS.items():
        assert f"{question} {answer}" in revise


def test_the_verification_questions_are_answered_concurrently() -> None:
    model = world(latency_s=0.05)
    cove(model)
    assert model.peak_in_flight == 2


def test_a_backend_that_batches_gets_the_verification_questions_as_one_batch() -> None:
    model = world(supports_batch=True)
    cove(model)
    assert model.batch_sizes == [2]


def test_the_graph_holds_the_draft_its_questions_their_answers_and_the_revision_merging_them() -> None:
    result = cove(world())
    graph = result.graph
    (draft,) = graph.by_kind(NodeKind.HYPOTHESIS)
    questions = graph.by_kind(NodeKind.QUESTION)
    answers = graph.by_kind(NodeKind.EVIDENCE)
    (revision,) = graph.by_kind(NodeKind.SOLUTION)
    assert draft.content == DRAFT and graph.parents(draft.id) == [0]
    assert [q.content for q in questions] == list(CHECKS)
    assert all(graph.parents(q.id) == [draft.id] for q in questions)
    assert [(graph.parents(a.id), a.content) for a in answers] == [([q.id], CHECKS[q.content]) for q in questions]
    assert graph.parents(revision.id) == [draft.id, *(a.id for a in answers)]
    assert {graph.edge(p, revision.id).kind for p in graph.parents(revision.id)} == {EdgeKind.AGGREGATION}
    assert result.answer_node == revision.id and all(n.status is NodeStatus.SUCCEEDED for n in graph)


def test_the_json_output_carries_the_draft_each_check_and_the_revision() -> None:
    trace = cove(world()).to_dict()["cove"]
    assert trace["draft"] == DRAFT and trace["revision"] == REVISION and trace["revised"] is True
    assert [(c["question"], c["answer"]) for c in trace["checks"]] == list(CHECKS.items())


def test_a_budget_that_stops_after_the_draft_still_answers_with_the_draft() -> None:
    model = world()
    result = cove(model, budget=BudgetLimits(calls=1))
    assert result.answer == DRAFT
    assert result.termination_reason == "budget_calls"
    assert purposes(model) == ["draft"]
    assert result.to_dict()["cove"]["revised"] is False


def test_a_question_left_unanswered_is_cancelled_and_the_answered_one_still_revises() -> None:
    model = world()
    model.on("Question: Which river flows through Salzburg?\n", "")
    result = cove(model)
    (unanswered,) = [q for q in result.graph.by_kind(NodeKind.QUESTION) if q.content.startswith("Which river")]
    assert unanswered.status is NodeStatus.CANCELLED
    assert result.answer == REVISION and result.to_dict()["cove"]["answered"] == 1


def test_a_plan_without_questions_leaves_the_draft_as_the_answer() -> None:
    model = world()
    model.on("Verification questions (", "I cannot think of any.")
    result = cove(model)
    assert result.answer == DRAFT
    assert purposes(model) == ["draft", "plan"]
    assert result.termination_reason == "frontier_exhausted"


def test_cove_questions_caps_how_many_questions_are_planned_and_asked() -> None:
    model = world()
    result = cove(model, cove_questions=1)
    plan = next(call.prompt.as_text() for call in model.calls if call.purpose == "plan")
    assert plan.endswith("Verification questions (1):\n")
    assert purposes(model).count("verify") == 1 and result.to_dict()["cove"]["questions"] == 1


def test_a_stored_cove_run_replays_into_the_same_graph_with_no_model_call(tmp_path: Path) -> None:
    model = world(latency_s=0.01)
    store = str(tmp_path / "runs.db")
    result = cove(model, store=store, seed=5)
    live = len(model.calls)
    with SQLiteStore(store) as opened:
        replayed, verdict = asyncio.run(areplay(opened, str(result.run_id)))
    assert verdict.identical, str(verdict)
    assert verdict.model_calls == 0 and len(model.calls) == live
    assert replayed.answer == REVISION and str(replayed.graph_cid) == str(result.graph_cid)


def test_cove_is_refused_before_any_call_for_a_task_that_composes_its_own_answer() -> None:
    model = ScriptedBackend(default="anything")
    refusal = "^--strategy cove: cove drafts and revises a free-text answer, and task game24 composes its own answer"
    with pytest.raises(SpecError, match=refusal):
        asyncio.run(asolve("4 5 6 10", task="game24", model=model, strategy="cove"))
    assert model.calls == []


def test_planned_questions_are_read_from_numbered_bulleted_or_question_lines() -> None:
    assert parse_questions("1. A?\n2) B?\n**3.** C?\n1. A?", 5) == ["A?", "B?", "C?"]
    assert parse_questions("- A?\n* B?", 5) == ["A?", "B?"]
    assert parse_questions("Some thoughts first.\nIs A true?\nIs B true?", 1) == ["Is A true?"]
    assert parse_questions("no questions here", 3) == []


def test_replies_lose_the_label_they_open_with() -> None:
    assert parse_reply("Final answer: Paris.") == "Paris."
    assert parse_reply("**Answer:** Paris") == "Paris"
    assert parse_reply("  Paris  ") == "Paris"
    assert parse_reply("Answer:  ") is None


def reply_to(prompt: str) -> str:
    """What the world() model writes for one completion prompt, by what the prompt asks."""
    asked = prompt.rstrip("\n").rsplit("\n", 1)[-1]
    if asked.startswith("Verification questions ("):
        return "\n".join(f"{i}. {q}" for i, q in enumerate(CHECKS, 1))
    if "\nVerifications:\n" in prompt.rsplit("Question: ", 1)[-1]:
        return f"Final answer: {REVISION}"
    return f"Answer: {CHECKS.get(asked.removeprefix('Question: '), DRAFT)}"


def answer_by_prompt(seen: Seen) -> Reply:
    """A completion endpoint playing the world() model over HTTP (a list of prompts: one choice each)."""
    prompts = seen.body.get("prompt") or ""
    texts = [reply_to(p) for p in (prompts if isinstance(prompts, list) else [prompts])]
    return Reply(200, {"id": "x", "object": "text_completion", "created": 0, "model": "m",
                       "choices": [{"index": i, "text": t, "finish_reason": "stop", "logprobs": None}
                                   for i, t in enumerate(texts)],
                       "usage": {"prompt_tokens": 40 * len(texts), "completion_tokens": 10 * len(texts),
                                 "total_tokens": 50 * len(texts)}})


def test_loom_solve_strategy_cove_prints_the_revision_and_its_checks_as_json(
        server: FakeOpenAIServer, capsys: pytest.CaptureFixture[str]) -> None:
    server.responder = answer_by_prompt
    code = main(["solve", QUESTION, "--strategy", "cove", "--model", f"openai-compatible:{server.url}@m#completions",
                 "--json", "--quiet", "--no-store", "--cove-questions", "2"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert out["answer"] == REVISION and out["config"]["strategy"] == "cove"
    assert [(c["question"], c["answer"]) for c in out["cove"]["checks"]] == list(CHECKS.items())
    # Draft, plan, the two verification questions as one list of prompts (the endpoint batches), revision.
    assert [len(p) if isinstance(p := seen.body["prompt"], list) else 1 for seen in server.seen] == [1, 1, 2, 1]


@pytest.mark.local_model
def test_cove_runs_on_the_embedded_model_within_a_small_budget() -> None:
    result = asyncio.run(asolve("What is the capital of France?", model="local", strategy="cove",
                                budget=BudgetLimits(tokens=3000), seed=0))
    trace = result.to_dict()["cove"]
    assert result.answer and trace["draft"]
    assert result.usage.input_tokens + result.usage.output_tokens <= 3000
    assert [c.purpose for c in result.calls][:2] == ["draft", "plan"]


# --- staying on the problem ---------------------------------------------------------------------


def test_verification_questions_that_share_nothing_with_the_problem_are_dropped() -> None:
    model = world()
    model.on("Verification questions (", "1. What is the capital of Hungary?\n2. Where was Mozart born?")
    result = cove(model)
    asked = [call.prompt.as_text() for call in model.calls if call.purpose == "verify"]
    assert len(asked) == 1 and "Where was Mozart born?" in asked[0]
    assert result.cove()["off_topic"] == 1


def test_a_possessive_names_the_same_thing_as_the_word() -> None:
    assert on_topic("Which city is the seat of France's government?", "What is the capital of France?", "")


def test_when_every_planned_question_is_off_topic_the_draft_stands() -> None:
    model = world()
    model.on("Verification questions (", "1. What is the capital of Hungary?")
    result = cove(model)
    assert result.answer == DRAFT and "verify" not in purposes(model)


def test_a_revision_that_goes_on_to_repeat_the_verifications_is_cut_before_them() -> None:
    model = world()
    model.on("Verifications:\n", f"Final answer: {REVISION}\nVerifications:\n1. Where was Mozart born? Salzburg.")
    assert cove(model).answer == REVISION


SUM = "Janet has 3 boxes of 12 pencils and gives away 7. How many pencils does she have left?"
SUM_DRAFT = "3 x 12 = 36 pencils; 36 - 7 = 28. The answer is 28."


def sums() -> ScriptedBackend:
    model = ScriptedBackend(default="Answer: 29")
    model.on(f"Question: {SUM}\n", f"Answer: {SUM_DRAFT}")
    model.on("Verification questions (", "1. How many pencils are left from 36 after giving away 7?")
    model.on("Verifications:\n", "Final answer: 36 - 7 = 29. The answer is 29.")
    return model


def test_a_question_about_numbers_is_verified_beside_the_problem_and_never_the_draft() -> None:
    model = sums()
    cove(model, SUM, task="general")
    verify = next(call.prompt.as_text() for call in model.calls if call.purpose == "verify")
    assert f"Facts: {SUM}" in verify and SUM_DRAFT not in verify


def test_a_question_about_numbers_is_planned_from_an_arithmetic_example() -> None:
    model = sums()
    result = cove(model, SUM)  # a question about numbers asked with cove is worked by the general task
    plan = next(call.prompt.as_text() for call in model.calls if call.purpose == "plan")
    assert "How much do 4 pens cost at 3 dollars each?" in plan and "Rubik" not in plan
    assert result.answer == "36 - 7 = 29. The answer is 29."


@pytest.mark.local_model
def test_the_embedded_models_verifications_of_a_word_problem_stay_on_it_and_out_of_the_answer() -> None:
    problem = ("Janet has 3 boxes of 12 pencils. She gives 7 pencils to her friend and buys 5 more. "
               "How many pencils does she have now?")
    result = asyncio.run(asolve(problem, model="local", strategy="cove", seed=0))
    trace = result.to_dict()["cove"]
    assert trace["checks"] and all("pencil" in c["question"].lower() for c in trace["checks"])
    assert "Verification" not in result.answer and "Rubik" not in result.answer


def test_a_stored_cove_run_keeps_its_trace_as_the_run_ended(tmp_path: Path) -> None:
    # The trace is one dict on the root, filled in place as the run goes: the store must see its end.
    store = str(tmp_path / "runs.db")
    result = cove(world(), store=store)
    with SQLiteStore(store) as opened:
        stored = load_graph(opened, open_run(opened, result.run_id).graph_cid).graph
    assert stored.node(0).extra["cove"] == result.graph.node(0).extra["cove"]
    assert stored.node(0).extra["cove"]["revised"] is True
