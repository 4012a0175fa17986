"""What a user reads after a run: progress and summary agree, scores say what they measure, words agree
with their numbers, columns line up, answers come without their prompt's label."""

from __future__ import annotations

import io
import re

from test_cli import loom
from test_result_paths import QUESTION, WIDE, model

from thoughtloom import asolve
from thoughtloom.cli.solve import format_text
from thoughtloom.eval.datasets import DATASETS, Dataset, Problem
from thoughtloom.eval.runner import compare_strategies
from thoughtloom.llm.fake import ScriptedBackend
from thoughtloom.llm.types import GenerateRequest
from thoughtloom.search.events import NodeAdded, NodePruned, NodeRevived, SearchStarted, SearchStopped
from thoughtloom.search.research.records import ResearchStats
from thoughtloom.views.insights import research_lines
from thoughtloom.views.progress import ProgressDisplay
from thoughtloom.words import counted, plural

_STATUS = re.compile(r"nodes (\d+) \(pruned (\d+), rejected (\d+)\) · depth (\d+)")


def last_status(stream: io.StringIO) -> tuple[int, ...]:
    """The counts of the last status line a progress display wrote."""
    found = _STATUS.findall(stream.getvalue())
    assert found, stream.getvalue()
    return tuple(int(x) for x in found[-1])


async def test_the_last_progress_line_says_what_the_summary_says() -> None:
    stream = io.StringIO()
    result = await asolve(QUESTION, model=model(), sinks=[ProgressDisplay(stream)], prune_threshold=0.55, **WIDE)
    s = result.stats
    assert s.pruned > 0
    assert last_status(stream) == (s.nodes, s.pruned, s.rejected, s.max_depth)
    assert f"nodes {s.nodes} (pruned {s.pruned}, rejected {s.rejected}" in format_text(result)


def test_a_thought_brought_back_is_no_longer_counted_as_pruned() -> None:
    stream = io.StringIO()
    display = ProgressDisplay(stream)
    display(SearchStarted("general", "q", "bfs", None))
    for node in (1, 2, 3):
        display(NodeAdded(node, (0,), "hypothesis", 1, "x", "generate"))
        display(NodePruned(node, "low score"))
    display(NodeRevived(2))
    assert display.pruned == 2


def test_the_final_status_takes_the_depth_in_steps_not_the_answer_node_below_them() -> None:
    stream = io.StringIO()
    display = ProgressDisplay(stream)
    display(SearchStarted("game24", "4 5 6 10", "bfs", None))
    display(NodeAdded(7, (6,), "solution", 4, "(5 * 6) - (10 - 4) = 24", "synthesize"))
    display(SearchStopped("goal_reached", 7, 8, pruned=1, rejected=0, depth=3))
    assert last_status(stream) == (8, 1, 0, 3)


async def test_a_partial_path_score_says_it_is_not_a_solution() -> None:
    result = await asolve(QUESTION, model=model(), **WIDE)
    result.answer = None
    assert "(mean of the steps' scores; a partial path, not a solution)" in format_text(result)


async def test_the_path_score_of_an_answer_checked_wrong_says_so() -> None:
    result = await asolve(QUESTION, model=model(), **WIDE)
    result.solved = False
    assert "(mean of the steps' scores; the answer they lead to was checked wrong)" in format_text(result)


async def test_the_path_score_of_an_answer_is_said_plainly() -> None:
    result = await asolve(QUESTION, model=model(), **WIDE)
    assert "(mean of the steps' scores) · 4 root-to-leaf paths scored" in format_text(result)


def test_a_count_takes_the_number_of_its_noun() -> None:
    assert counted(1, "hypothesis") == "1 hypothesis"
    assert counted(2, "hypothesis") == "2 hypotheses"
    assert counted(1, "root-to-leaf path") == "1 root-to-leaf path"
    assert counted(12_000, "token") == "12,000 tokens"
    assert counted(0, "call") == "0 calls"
    assert plural("match", 2) == "matches"


def test_the_research_summary_says_one_hypothesis() -> None:
    class Research:
        answer = None
        statistics = ResearchStats(hypotheses_generated=1, explorations=1)
        stopped_by = "confidence_reached"
        state = "collapsed"

    assert "research: 1 hypothesis (0 pruned, 0 merged)" in research_lines(Research())[-1]


def test_loom_tasks_starts_every_description_in_one_column() -> None:
    lines = [line for line in loom("tasks").stdout.splitlines() if line.strip()]
    columns = {len(line) - len(line.split("  ", 1)[1].lstrip()) for line in lines}
    assert len(columns) == 1, lines
    assert any(line.startswith("set_intersection  ") for line in lines)


def _cot_reply(request: GenerateRequest, index: int) -> str:
    return "10 - 4 = 6 (left: 6 9 13)\n13 - 9 = 4 (left: 4 6)\n6 * 4 = 24 (left: 24)\nAnswer: (10 - 4) * (13 - 9) = 24"


async def test_a_lane_answer_comes_without_its_prompts_label() -> None:
    cmp = await compare_strategies("4 9 10 13", ["cot"], task="game24", model=ScriptedBackend(responder=_cot_reply))
    (first,) = cmp["cot"]
    assert first.answer == "(10 - 4) * (13 - 9) = 24"
    assert first.record.solved


def _io_reply(request: GenerateRequest, index: int) -> str:
    return "Answer: 5 apples, 3 left over"


async def test_a_label_the_score_depends_on_is_kept() -> None:
    # "Answer: 5 apples, 3 left over" scores 5 (the number after the label); without the label the
    # scorer would read the last number, 3. The answer keeps its label rather than change its score.
    problems = Dataset(DATASETS["gsm8k"], [Problem("1", "Ann has 8 apples and eats 3. How many are left?",
                                                   "Ann has 8 apples and eats 3. How many are left?", "#### 5")], "<test>")
    cmp = await compare_strategies(problems, ["io"], model=ScriptedBackend(responder=_io_reply), limit=1)
    (first,) = cmp["io"]
    assert first.record.solved
    assert first.answer == "Answer: 5 apples, 3 left over"


def _doubting(request: GenerateRequest, index: int) -> str:
    """A model that answers 91 is prime and, as its evaluator, says that is wrong."""
    text = request.prompt.as_text()
    if text.endswith("Final answer:"):
        return "Final answer: 91 is prime."
    if "scale of 0 to 10" in text:
        return '{"reasoning": "91 = 7 x 13, so it is not prime", "score": 1, "is_promising": false}'
    return "Final answer: Final answer: 91 is prime."


async def test_an_answer_its_own_evaluator_scored_low_says_so_beside_it() -> None:
    result = await asolve("Is 91 prime?", task="general", model=ScriptedBackend(responder=_doubting), controller=False,
                          max_depth=1, breadth=1, value_samples=1)
    lines = format_text(result).splitlines()
    assert lines[0] == "answer: 91 is prime.   [unchecked]"
    assert lines[1].startswith("doubt: the evaluator scored step #1 0.10, not promising: 91 = 7 x 13, so it is not prime")
    assert result.to_dict()["answer_doubt"].startswith("the evaluator scored step #1 0.10")


async def test_an_answer_its_evaluator_stands_behind_has_no_doubt() -> None:
    result = await asolve(QUESTION, model=model(), **WIDE)
    assert result.answer_doubt() is None
    assert "doubt:" not in format_text(result)


async def test_a_general_answer_and_its_steps_keep_no_repeated_label() -> None:
    result = await asolve("Is 91 prime?", task="general", model=ScriptedBackend(responder=_doubting), controller=False,
                          max_depth=1, breadth=1, value_samples=1)
    assert result.answer == "91 is prime."
    assert [s.content for s in result.best_path][1] == "Final answer: 91 is prime."
