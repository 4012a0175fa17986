"""The agent lane of `loom bench`: tools per data set, the data set's scoring, tool calls in records and the report."""

from __future__ import annotations

import asyncio
import importlib
import json
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from benchdata import data_dir, needs
from openai_server import FakeOpenAIServer, Reply, Seen

from thoughtloom.cli.main import main
from thoughtloom.eval import lanes
from thoughtloom.eval.datasets import DATASETS, Dataset, Problem, load_dataset
from thoughtloom.eval.lanes import LaneError, agent_answer, agent_task, check_lane
from thoughtloom.eval.report import format_table, summarize
from thoughtloom.eval.runner import BenchOptions, build_protocol, run_protocol
from thoughtloom.graph import NodeKind
from thoughtloom.llm.fake import ScriptedBackend

# The module (thoughtloom.run re-exports its function under the same name).
run_execute = importlib.import_module("thoughtloom.run.execute")
ROOT = Path(__file__).resolve().parents[1]
DATA = data_dir("hotpotqa/hotpot_dev_distractor_first50.json", "gsm8k/train.jsonl")
pytestmark = needs("hotpotqa/hotpot_dev_distractor_first50.json", "gsm8k/train.jsonl")


def scripted() -> ScriptedBackend:
    """GSM8K #0 (72) and #1 (10) computed by programs the python tool runs, #1 wrong; HotpotQA #0 right, #1 half right
    after a second search for the actress its first passages name."""
    model = ScriptedBackend(default="ok")
    model.on("in April and May?\n", "```python\napril = 48\nprint(april + april / 2)\n```")
    model.on("How much did she earn?\n", "```python\nprint(12 * 50)\n```")
    model.on("Answer in a few words (a name, a number, yes or no): Were Scott Derrickson", "Yes, both were American.\nScott Derrickson is an American "
             "director; Ed Wood was an American filmmaker.")
    model.on("Answer in a few words (a name, a number, yes or no): What government position", "She served as Chief of Protocol.")
    # #1 is a bridge question: the film's passages name the actress, whose own page the agent then searches.
    model.on("Who or what is the woman who portrayed Corliss Archer?", "NAME: Shirley Temple")
    return model


@contextmanager
def watched(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Record each corpus folder the lane writes (its files, and whether it is gone after) and each run's result."""
    corpora: list[dict[str, Any]] = []
    results: list[Any] = []
    original_corpus, original_execute = lanes.problem_corpus, run_execute.execute

    @contextmanager
    def corpus(problem: Problem | None) -> Any:
        with original_corpus(problem) as folder:
            if folder is not None:
                files = {p.name: p.read_text(encoding="utf-8") for p in Path(folder).iterdir()}
                corpora.append({"problem": problem, "folder": Path(folder), "files": files})
            yield folder

    async def execute(spec: Any, **kw: Any) -> Any:
        result = await original_execute(spec, **kw)
        results.append((spec, result))
        return result

    monkeypatch.setattr(lanes, "problem_corpus", corpus)
    monkeypatch.setattr(run_execute, "execute", execute)
    yield corpora, results


def run_agent_lane(model: ScriptedBackend) -> tuple[Any, Any]:
    opts = BenchOptions(tasks=["gsm8k", "hotpotqa"], lanes=["agent"], model="fake:scripted", ids=["0", "1"],
                        budget_tokens=8000, data_dir=str(DATA))
    protocol = build_protocol(opts)
    stats = asyncio.run(run_protocol(protocol, model, None))
    return protocol, {(r.task, r.problem_id): r for r in stats.records}


def test_the_agent_lane_scores_with_each_data_sets_rule_and_records_its_tool_calls(
        monkeypatch: pytest.MonkeyPatch) -> None:
    with watched(monkeypatch) as (corpora, results):
        protocol, records = run_agent_lane(scripted())
    g0, g1, h0, h1 = (records[k] for k in (("gsm8k", "0"), ("gsm8k", "1"), ("hotpotqa", "0"), ("hotpotqa", "1")))
    # GSM8K: the number the agent's programs agreed on against the gold.
    assert g0.solved and g0.answer == "72"
    assert not g1.solved and g1.answer == "600"
    # A question about numbers: five programs, each run by the python tool.
    assert (g0.tool_calls, g1.tool_calls) == (5, 5)
    assert all(r.tokens > 0 and r.calls == 5 and r.stop_reason == "goal_reached" for r in (g0, g1))
    # HotpotQA: the span, scored by the official EM and F1 ("Yes, both ..." is the answer yes).
    assert (h0.answer, h0.solved, h0.f1) == ("yes", True, 1.0)
    assert h1.answer == "She served as Chief of Protocol" and not h1.solved
    assert h1.f1 == pytest.approx(2 / 3)
    # #0 compares two people (one search); #1 searches again for the woman its first passages name.
    assert (h0.tool_calls, h1.tool_calls) == (1, 2) and (h0.calls, h1.calls) == (1, 2)
    # Each run granted the data set's tools; HotpotQA's researched the question alone (question mode).
    tools = {spec.problem: spec.tools for spec, _ in results}
    assert sorted(set(tools.values())) == [("calc", "python"), ("docs",)]
    for spec, result in results:
        if spec.tools == ("docs",):
            kinds = [n.kind for n in result.graph]
            assert kinds == [NodeKind.INPUT, NodeKind.QUESTION, NodeKind.SOLUTION]
            assert spec.problem.endswith("?") and "\n" not in spec.problem
    bridge = next(r for s, r in results if s.problem.startswith("What government position"))
    _, second = bridge.graph.by_kind(NodeKind.QUESTION)[0].extra["tool_calls"]
    assert second["args"]["query"].startswith("Shirley Temple") and "Shirley_Temple.md:" in second["output"]
    table = format_table(summarize(records.values(), {"gsm8k": "rate", "hotpotqa": "f1"}, ["agent"],
                                   {"gsm8k": 2, "hotpotqa": 2}))
    assert "| mean tokens | mean calls | mean tool calls | wall s (mean) |" in table
    assert "| 5.0 |" in table and "| 1.5 |" in table  # GSM8K (5 + 5) / 2 and HotpotQA (1 + 2) / 2


def test_the_hotpotqa_corpus_is_exactly_the_questions_ten_paragraphs_and_is_removed_after(
        monkeypatch: pytest.MonkeyPatch) -> None:
    with watched(monkeypatch) as (corpora, results):
        run_agent_lane(scripted())
    assert len(corpora) == 2  # one per HotpotQA question; GSM8K gets none
    raw = json.loads((DATA / "hotpotqa" / "hotpot_dev_distractor_first50.json").read_text(encoding="utf-8"))
    for seen in corpora:
        row = raw[int(seen["problem"].id)]
        assert not seen["folder"].exists()
        assert len(seen["files"]) == 10
        headings = sorted(text.splitlines()[0] for text in seen["files"].values())
        assert headings == sorted(f"# {title}" for title in row["context"]["title"])
        for title, sentences in zip(row["context"]["title"], row["context"]["sentences"]):
            assert f"# {title}\n{' '.join(s.strip() for s in sentences)}\n" in seen["files"].values()
    # The docs tool searched that corpus and found a gold paragraph of the question.
    question = next(r for s, r in results if s.problem.startswith("Were Scott Derrickson"))
    node = question.graph.by_kind(NodeKind.QUESTION)[0]
    (call,) = node.extra["tool_calls"]
    assert call["tool"] == "docs" and call["status"] == "ok"
    assert "Scott_Derrickson.md" in call["output"] and "American director" in call["output"]


def test_data_sets_without_chosen_tools_refuse_the_agent_lane_in_one_line() -> None:
    with pytest.raises(LaneError, match=r"^lane agent has no tools chosen for game24; it runs on gsm8k, gsm8k_test, hotpotqa$"):
        check_lane("agent", Dataset(DATASETS["game24"], [], ""))
    check_lane("agent", Dataset(DATASETS["gsm8k"], [], ""))
    check_lane("agent", Dataset(DATASETS["hotpotqa"], [], ""))


def test_the_question_without_its_question_mark_is_still_researched_as_a_question() -> None:
    problem = load_dataset("hotpotqa", DATA).problems[32]
    assert not problem.question.rstrip().endswith("?")
    assert agent_task(problem) == "Which French ace pilot and adventurer fly L'Oiseau Blanc?"


@pytest.mark.parametrize("question, reply, span", [
    ("Which city is the capital?", "Paris\nIt is the capital.", "Paris"),
    ("Which city is the capital?", "The city is large.\nFinal answer: Paris", "Paris"),
    ("Who held the post?", "**Answer:** Chief of Protocol", "Chief of Protocol"),
    ("Are Adam Collis and Conrad Brooks both American?", "No, Adam Collis is American and Conrad Brooks is too.", "no"),
    ("Who knows?", "No one knows.", "No one knows"),
    ("Who knows?", "   ", None),
])
def test_a_hotpotqa_answer_is_read_as_a_span(question: str, reply: str, span: str | None) -> None:
    problem = Problem("p", question, question, "x", question=question)
    assert agent_answer(Dataset(DATASETS["hotpotqa"], [problem], ""), problem, reply) == span


def agent_chat(seen: Seen) -> Reply:
    """A chat model for the agent's prompts (by their system message) and the cot prompts of both sets."""
    messages = seen.body["messages"]
    system, last = messages[0]["content"], messages[-1]["content"]
    if "short Python program" in system:
        text = "```python\napril = 48\nprint(april + april / 2)\n```"
    elif "Answer in a few words" in last:
        text = "Yes, both were American."
    elif "math word problem" in system:
        text = "48 / 2 = 24 in May, 48 + 24 = 72. The answer is 72."
    else:
        text = "They are both American.\nAnswer: yes"
    choices = [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]
    return Reply(200, {"id": "x", "object": "chat.completion", "created": 0, "model": "m", "choices": choices,
                       "usage": {"prompt_tokens": 300, "completion_tokens": 20, "total_tokens": 320}})


def test_loom_bench_runs_cot_and_agent_on_gsm8k_and_hotpotqa(server: FakeOpenAIServer, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    server.responder = agent_chat
    out = tmp_path / "run"
    code = main(["bench", "--tasks", "gsm8k,hotpotqa", "--lanes", "cot,agent", "--model",
                 f"openai-compatible:{server.url}@m", "--data-dir", str(DATA), "--out", str(out), "--ids", "0",
                 "--budget-tokens", "8000", "--quiet", "--no-plot"])
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "| mean calls | mean tool calls |" in printed
    assert "| cot | 1 | 1/1 = 100% [" in printed and "| agent | 1 | 1/1 = 100% [" in printed
    records = {(r["task"], r["lane"]): r for r in map(json.loads, (out / "results.jsonl").read_text().splitlines())}
    assert records[("gsm8k", "cot")]["tool_calls"] is None
    # GSM8K: five programs run by the python tool; HotpotQA: one document search.
    assert records[("gsm8k", "agent")]["tool_calls"] == 5 and records[("hotpotqa", "agent")]["tool_calls"] == 1
    assert records[("hotpotqa", "agent")]["answer"] == "yes"


@pytest.mark.parametrize("lane", ["agent", "research"])
def test_the_agent_and_research_lanes_take_bridge_hops_and_refuse_a_negative_count_in_one_line(lane: str) -> None:
    lanes.check_params(lane, {"bridge_hops": 0})
    with pytest.raises(LaneError, match=rf"^lane {lane}: bridge_hops must be >= 0; got -1$"):
        lanes.check_params(lane, {"bridge_hops": -1})
