"""The GoT paper's tasks (sorting, set intersection, keyword counting) under the recursive strategy."""

from __future__ import annotations

import ast
import asyncio
import csv
import json
import re

import pytest
from benchdata import data_dir, needs
from inprocess import loom_here
from machine import scaled

from thoughtloom.cli.main import main
from thoughtloom.graph import NodeKind, NodeStatus
from thoughtloom.llm.budget import BudgetLimits
from thoughtloom.llm.fake import ScriptedBackend
from thoughtloom.llm.gateway import Gateway
from thoughtloom.llm.types import GenerateRequest
from thoughtloom.search import SearchConfig, search
from thoughtloom.tasks import get_task
from thoughtloom.tasks.base import ProblemError
from thoughtloom.tasks.got_paper import intersection_errors, keyword_errors, sorting_errors
from thoughtloom.tasks.registry import TaskOptions
from thoughtloom.views.mermaid import to_mermaid

_GOT_FILES = ("got/sorting/sorting_032.csv", "got/sorting/sorting_064.csv", "got/sorting/sorting_128.csv",
              "got/set_intersection/set_intersection_032.csv", "got/set_intersection/set_intersection_064.csv",
              "got/set_intersection/set_intersection_128.csv", "got/keyword_counting/countries.csv")
GOT = data_dir(*_GOT_FILES) / "got"
needs_data = needs(*_GOT_FILES)


def last_list(request: GenerateRequest) -> list[int]:
    line = request.prompt.as_text().rstrip().splitlines()[-2]
    return [int(x) for x in re.findall(r"\d+", line.split("Input:")[1])]


def sorting_model(wrong_first: bool = False) -> ScriptedBackend:
    """Sorts exactly; with wrong_first, its first answer for each chunk drops a number."""
    seen: set[tuple[int, ...]] = set()

    def respond(request: GenerateRequest, index: int) -> str:
        xs = last_list(request)
        out = sorted(xs)
        if wrong_first and tuple(xs) not in seen:
            seen.add(tuple(xs))
            out = out[1:]
        return "[" + ", ".join(map(str, out)) + "]"

    return ScriptedBackend(responder=respond)


def run(task_name: str, problem: str, backend: ScriptedBackend, **options) -> object:
    task = get_task(task_name, TaskOptions(**options))
    config = SearchConfig(**{**task.search_defaults, "temperature": 0.0})
    return asyncio.run(search(task, problem, Gateway(backend, BudgetLimits(tokens=100_000)), config))


# --- exact scoring (the GoT paper's error counts) -----------------------------------------

def test_sorting_errors_count_digit_differences_and_descents():
    assert sorting_errors([0, 1, 2], [2, 1, 0]) == 0
    assert sorting_errors([0, 2, 1], [2, 1, 0]) == 1
    assert sorting_errors([0, 1], [2, 1, 0]) == 1
    assert sorting_errors(None, [1]) == 300


def test_intersection_errors_count_missing_and_extra_elements():
    assert intersection_errors([3, 5], [3, 5]) == 0
    assert intersection_errors([3, 7], [3, 5]) == 2
    assert intersection_errors(None, [3]) == 1000


def test_keyword_errors_count_differences_and_missing_countries_fully():
    assert keyword_errors({"Peru": 2}, {"Peru": 2}) == 0
    assert keyword_errors({"Peru": 1, "Chile": 1}, {"Peru": 2, "Japan": 3}) == 1 + 1 + 3
    assert keyword_errors(None, {"Peru": 1}) == 100


# --- sorting --------------------------------------------------------------------------------

def test_sorting_decomposes_into_chunks_solves_them_and_merges_programmatically():
    numbers = [9, 3, 5, 1, 0, 2, 8, 7, 7, 4, 6, 1, 0, 3, 9, 2] * 2
    result = run("sorting", str(numbers), sorting_model())
    assert result.solved is True and result.answer == str(sorted(numbers))
    summary = result.recursion()["summary"]
    assert summary["errors"] == 0 and summary["decompositions"] == 1
    (recomposition,) = [n for n in result.graph if n.kind is NodeKind.SYNTHESIS]
    assert recomposition.extra["recursion"]["by"] == "task"
    assert len(result.graph.parents(recomposition.id)) == 3  # the decomposition and both chunks


def test_a_child_that_fails_verification_is_retried_before_the_merge():
    numbers = [9, 3, 5, 1, 0, 2, 8, 7, 7, 4, 6, 1, 0, 3, 9, 2] + [1, 1, 2, 5, 0, 8, 4, 4, 9, 3, 6, 6, 2, 7, 0, 5]
    result = run("sorting", str(numbers), sorting_model(wrong_first=True))
    assert result.solved is True
    assert result.recursion()["summary"]["retries"] >= 2


def test_the_model_can_merge_following_the_combine_instruction():
    from thoughtloom.tasks.got_paper import SortingTask

    numbers = [9, 3, 5, 1, 0, 2, 8, 7, 7, 4, 6, 1, 0, 3, 9, 2] * 2
    backend = sorting_model().on("Merge the sorted lists", str(sorted(numbers)))
    task = SortingTask(merge="model")
    result = asyncio.run(search(task, str(numbers), Gateway(backend, BudgetLimits(tokens=100_000)),
                                SearchConfig(**task.search_defaults)))
    assert result.solved is True
    assert any(c.purpose == "recompose" for c in backend.calls)


def test_a_wrong_model_merge_is_caught_by_verification_and_reported_with_its_errors():
    from thoughtloom.tasks.got_paper import SortingTask

    numbers = [9, 3, 5, 1, 0, 2, 8, 7, 7, 4, 6, 1, 0, 3, 9, 2] * 2
    backend = sorting_model().on("Merge the sorted lists", "[0, 1, 2]").on("Input: [" + ", ".join(map(str, numbers)), "[1]")
    task = SortingTask(merge="model")
    result = asyncio.run(search(task, str(numbers), Gateway(backend, BudgetLimits(tokens=100_000)),
                                SearchConfig(**task.search_defaults)))
    assert result.solved is False
    assert result.recursion()["summary"]["errors"] > 0
    assert any(n.kind is NodeKind.DECOMPOSITION and n.status is NodeStatus.FAILED for n in result.graph)


def test_sorting_with_size_alone_generates_the_same_instance_every_time():
    task = get_task("sorting", TaskOptions(size=32))
    assert task.parse_problem("") == task.parse_problem("")
    assert len(task.parse_problem("").numbers) == 32


def test_sorting_rejects_a_list_of_the_wrong_size_in_one_line():
    with pytest.raises(ProblemError, match="--size 32 but the list has 3 numbers"):
        get_task("sorting", TaskOptions(size=32)).parse_problem("[3, 1, 2]")


@needs_data
@pytest.mark.parametrize("size", [32, 64, 128])
def test_sorting_data_instances_are_solved_by_chunks_with_an_exact_model(size):
    with (GOT / "sorting" / f"sorting_{size:03d}.csv").open() as fh:
        row = next(csv.DictReader(fh))
    result = run("sorting", "0", sorting_model(), size=size, data=GOT)
    assert result.answer == str(ast.literal_eval(row["Sorted"]))
    assert result.recursion()["summary"]["errors"] == 0


def test_the_mermaid_picture_draws_decompositions_and_recompositions_apart():
    numbers = [9, 3, 5, 1, 0, 2, 8, 7, 7, 4, 6, 1, 0, 3, 9, 2] * 2
    result = run("sorting", str(numbers), sorting_model())
    picture = to_mermaid(result.graph, [s.id for s in result.best_path])
    assert "classDef decomposition" in picture and "classDef recomposition" in picture
    assert re.search(r'n\d+\[/"decomposition', picture)  # a trapezoid
    assert re.search(r'n\d+\{\{"synthesis', picture)  # a hexagon
    assert "contract:" in picture and "verified" in picture


# --- set intersection and keyword counting ---------------------------------------------

@needs_data
@pytest.mark.parametrize("size", [32, 64, 128])
def test_set_intersection_data_instances_are_solved_by_chunks(size):
    def respond(request: GenerateRequest, index: int) -> str:
        line = request.prompt.as_text().rstrip().splitlines()[-2]
        a, b = (json.loads(x) for x in re.findall(r"\[[^\]]*\]", line))
        return str(sorted(set(a) & set(b)))

    result = run("set_intersection", "0", ScriptedBackend(responder=respond), size=size, data=GOT)
    assert result.solved is True and result.recursion()["summary"]["errors"] == 0


@needs_data
def test_keyword_counting_sums_passage_counts_and_scores_against_the_gold():
    with (GOT / "keyword_counting" / "countries.csv").open() as fh:
        row = next(csv.DictReader(fh))
    names = sorted({x.strip() for x in row["Countries"].strip("[]").split(",")}, key=len, reverse=True)

    def respond(request: GenerateRequest, index: int) -> str:
        passage = request.prompt.as_text().rstrip().splitlines()[-2].split("Input:", 1)[1]
        counts = {}
        for name in names:
            n = len(re.findall(rf"\b{re.escape(name)}\b", passage))
            passage = re.sub(rf"\b{re.escape(name)}\b", "", passage)
            if n:
                counts[name] = n
        return json.dumps(counts)

    result = run("keyword_counting", "0", ScriptedBackend(responder=respond), data=GOT)
    summary = result.recursion()["summary"]
    assert summary["decompositions"] == 1 and "errors" in summary


# --- the CLI -------------------------------------------------------------------------------

def test_cli_rejects_size_for_a_task_without_sizes(capsys):
    assert main(["solve", "--task", "game24", "--size", "32", "1 2 3 4"]) == 2
    assert capsys.readouterr().err.count("\n") == 1


@pytest.mark.local_model
@pytest.mark.timeout(scaled(300))
def test_sorting_32_runs_end_to_end_on_the_embedded_model_and_reports_its_error_count(capsys):
    # In this process (the model stays loaded for the suite's other embedded tests); `loom solve` in a
    # subprocess is tested elsewhere.
    proc = loom_here(capsys, "solve", "--task", "sorting", "--size", "32", "--strategy", "recursive",
                     "--json", "--quiet", "--budget-tokens", "12000")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    summary = data["recursion"]["summary"]
    assert isinstance(summary["errors"], int) and summary["errors"] >= 0
    assert summary["decompositions"] >= 1
    assert data["usage"]["calls"] >= 1
