"""The research lane of `loom bench`: Research Flow over a HotpotQA question's own paragraphs, one sentence per
line, its answer scored as a span and its cited sentences against the gold supporting facts."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest
from benchdata import data_dir, needs

from thoughtloom.cli.main import main
from thoughtloom.eval.datasets import DATASETS, Dataset
from thoughtloom.eval.lanes import LaneError, check_lane, check_params
from thoughtloom.eval.report import format_table, summarize
from thoughtloom.eval.results import Record
from thoughtloom.eval.runner import BenchOptions, build_protocol, run_protocol
from thoughtloom.llm.fake import ScriptedBackend
from thoughtloom.llm.types import GenerateRequest

ROOT = Path(__file__).resolve().parents[1]
DATA = data_dir("hotpotqa/hotpot_dev_distractor_first50.json")
needs_data = needs("hotpotqa/hotpot_dev_distractor_first50.json")
QUESTION = "Were Scott Derrickson and Ed Wood of the same nationality?"


def flow_model() -> ScriptedBackend:
    """Question 0's flow: each director's nationality read as American from his passages; a passage that says
    'American' supports (either hypothesis), the synthesis answers Yes."""

    def reply(request: GenerateRequest, index: int) -> str:
        text = request.prompt.as_text()
        if "Question: What is the nationality of" in text:
            return "American"
        asked = text[text.rfind(f"Question: {QUESTION}"):]  # past the few-shot example
        if asked.startswith(f"Question: {QUESTION}\nHypotheses:"):
            return "ANSWER: Yes\nWHY: both are American [docs:05-Ed_Wood.md:1-2]."
        passages = re.findall(r"^\[(\d+)\] (.*)$", asked, re.MULTILINE)
        return "\n".join(f"{i}: SUPPORTS 0.9 American" if "American" in passage else f"{i}: UNRELATED 0 no"
                         for i, passage in passages)

    return ScriptedBackend(responder=reply)


@pytest.fixture(scope="module")
def record() -> Record:
    """The research lane's record for HotpotQA question 0 with the scripted flow."""
    opts = BenchOptions(tasks=["hotpotqa"], lanes=["research"], model="fake:scripted", ids=["0"],
                        budget_tokens=8000, data_dir=str(DATA))
    stats = asyncio.run(run_protocol(build_protocol(opts), flow_model(), None))
    (rec,) = stats.records
    return rec


@needs_data
def test_the_research_lane_answer_is_scored_as_a_hotpotqa_span(record: Record) -> None:
    assert (record.answer, record.solved, record.f1) == ("yes", True, 1.0)
    assert record.stop_reason == "confidence_reached" and record.error is None
    # A comparison question: the question's own search, then one per director; two model calls, one fact each
    # (the facts compared decide: no passage is judged and no synthesis is asked for).
    assert (record.tool_calls, record.calls) == (3, 2)


@needs_data
def test_the_research_lane_records_its_citations_as_sentence_ids_and_their_precision(record: Record) -> None:
    # The line of each director's passage that states his nationality ("American").
    assert record.citations == ["docs:02-Scott_Derrickson.md:2", "docs:05-Ed_Wood.md:2"]
    assert record.cited == [["Ed Wood", 0], ["Scott Derrickson", 0]]
    # Gold: Scott Derrickson 0 and Ed Wood 0; both cited sentences are gold.
    assert record.support_precision == 1.0


@pytest.mark.parametrize(("params", "said"), [
    ({"branches": 3}, r"^lane research has no parameter 'branches' \(it takes: allow, branching_strategy, "),
    ({"max_branches": "3"}, r"^lane research: parameter max_branches must be a whole number; got '3'$"),
    ({"allow": "no_pruning"}, r"^lane research: parameter allow must be a list of names; got 'no_pruning'$"),
    ({"exploration_strategy": "random"}, r"^lane research: exploration_strategy must be one of best_first, "),
    ({"max_branches": 20}, r"^lane research: max_branches=20 is unbounded branching: "),
])
def test_a_bad_research_parameter_is_a_one_line_lane_error(params: dict[str, object], said: str) -> None:
    with pytest.raises(LaneError, match=said) as caught:
        check_params("research", params)
    assert "\n" not in str(caught.value)


def test_an_anti_pattern_the_parameters_allow_is_a_valid_research_setting() -> None:
    check_params("research", {"max_branches": 20, "allow": ["unbounded_branching"], "confidence_threshold": 0.8})


@needs_data
def test_a_bad_research_parameter_on_the_command_line_is_one_line_and_exit_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["bench", "--tasks", "hotpotqa", "--lanes", "io,research", "--param", "research.pruning_threshold=0",
                 "--model", "openai-compatible:http://127.0.0.1:9/v1@m", "--data-dir", str(DATA),
                 "--out", str(tmp_path / "r")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0, err
    assert "lane research: pruning_threshold=0 prunes nothing" in err and not (tmp_path / "r").exists()


def test_data_sets_whose_problems_bring_no_documents_refuse_the_research_lane_in_one_line() -> None:
    with pytest.raises(LaneError, match=r"^lane research needs problems that bring their own documents; gsm8k's "
                                        r"do not \(it runs on hotpotqa\)$"):
        check_lane("research", Dataset(DATASETS["gsm8k"], [], ""))
    check_lane("research", Dataset(DATASETS["hotpotqa"], [], ""))


def rec(lane: str, f1: float, precision: float | None, cites: bool) -> Record:
    return Record(task="hotpotqa", lane=lane, problem_id=str(f1), index=0, seed=0, answer="Answer: x", solved=f1 == 1,
                  errors=None, any_correct=None, candidates=0, tokens=100, input_tokens=90, output_tokens=10, calls=1,
                  wall_s=1.0, stop_reason="done", f1=f1, cited=[["A", 0]] if cites else None,
                  support_precision=precision)


def test_the_report_gives_support_precision_over_the_answers_that_cite_and_none_for_lanes_that_do_not() -> None:
    records = [rec("io", 1.0, None, False), rec("io", 0.0, None, False),
               rec("research", 1.0, 1.0, True), rec("research", 0.5, 0.5, True), rec("research", 0.0, None, True)]
    summaries = {s.lane: s for s in summarize(records, {"hotpotqa": "f1"}, ["io", "research"], {"hotpotqa": 3})}
    assert (summaries["io"].citing, summaries["io"].mean_support_precision) == (None, None)
    assert (summaries["research"].citing, summaries["research"].mean_support_precision) == (2, 0.75)
    table = format_table(list(summaries.values()))
    assert "| support precision [95% CI] (answers citing) |" in table
    io_row, research_row = (line for line in table.splitlines() if line.startswith(("| io ", "| research ")))
    assert "| - | 100 |" in io_row  # no precision for a lane that cites nothing, then its mean tokens
    assert "| 0.75 [0.50, 1.00] (2/3) |" in research_row


def test_a_table_without_a_citing_lane_has_no_precision_column() -> None:
    table = format_table(summarize([rec("io", 1.0, None, False)], {"hotpotqa": "f1"}, ["io"], {"hotpotqa": 1}))
    assert "support precision" not in table
