"""Path totals in results: the best path's total under the configured aggregation, and all root-to-leaf paths."""

from __future__ import annotations

import json
import re

import pytest
from openai_server import FakeOpenAIServer, completions_of

from thoughtloom import asolve
from thoughtloom.cli.main import main
from thoughtloom.llm.fake import ScriptedBackend
from thoughtloom.llm.types import GenerateRequest
from thoughtloom.search.paths import MAX_PATHS

QUESTION = "How can a small bakery cut its energy costs?"
# The score of a sampled step by its text: "a1" is sample 1 at depth 1 ("a" below the root, "b" one level further).
SCORES = {"a0": "8", "a1": "6", "b0": "5", "b1": "9"}


def reply(request: GenerateRequest, index: int) -> str:
    """Steps a0/a1 below the root and b0/b1 below those; each valued by SCORES; a final answer."""
    text = request.prompt.as_text()
    if text.endswith("Final answer:"):
        return "Insulate the ovens."
    if text.endswith("on a scale of 0 to 10:"):
        last = text.rsplit("Step ", 1)[1].split(": ", 1)[1].split("\n", 1)[0]
        return SCORES[last[:2]]
    depth = text.count("\nStep ") - 1  # the prompt ends with the new step's own label
    return f"{'ab'[depth]}{index}" + (f" under {text.rsplit('Step 1: ', 1)[1][:2]}" if depth else "")


def model() -> ScriptedBackend:
    return ScriptedBackend(responder=reply)


# Two steps below the root, two below each (bfs keeps both), so four root-to-leaf paths.
WIDE = {"max_depth": 2, "breadth": 2, "beam": 2, "value_samples": 1, "controller": False, "one_pass": True}


@pytest.mark.parametrize(("aggregation", "total"), [("sum", 0.8 + 0.9), ("product", 0.8 * 0.9), ("min", 0.8),
                                                    ("mean", (0.8 + 0.9) / 2)])
async def test_the_best_path_total_follows_the_configured_aggregation(aggregation: str, total: float) -> None:
    result = await asolve(QUESTION, model=model(), aggregation=aggregation, **WIDE)
    assert [s.content for s in result.best_path][1:3] == ["a0", "b1 under a0"]
    assert result.best_path_total == pytest.approx(total)
    assert result.to_dict()["best_path_total"] == pytest.approx(total)


async def test_all_paths_lists_every_root_to_leaf_path_with_its_total_best_first() -> None:
    result = await asolve(QUESTION, model=model(), aggregation="sum", **WIDE)
    listed = [(p.total, [result.graph.node(i).content for i in p.nodes[1:]]) for p in result.all_paths]
    assert listed == [
        (pytest.approx(1.7), ["a0", "b1 under a0"]),
        (pytest.approx(1.5), ["a1", "b1 under a1"]),
        (pytest.approx(1.3), ["a0", "b0 under a0"]),
        (pytest.approx(1.1), ["a1", "b0 under a1"]),
    ]
    assert result.paths_found == 4
    assert all(p.nodes[0] == 0 for p in result.all_paths)  # every path starts at the problem


async def test_a_thought_cut_from_the_beam_ends_a_path_of_its_own() -> None:
    result = await asolve(QUESTION, model=model(), aggregation="mean", **{**WIDE, "beam": 1})
    cut = [p for p in result.all_paths if p.status == "pruned"]
    assert [[result.graph.node(i).content for i in p.nodes[1:]] for p in cut] == [["a1"]]
    assert cut[0].total == pytest.approx(0.6)


async def test_all_paths_keeps_the_best_of_a_large_search_and_says_how_many_there_were() -> None:
    wide = ScriptedBackend(responder=lambda request, index: (
        "7" if request.prompt.as_text().endswith("0 to 10:") else f"step {index}"))
    result = await asolve(QUESTION, model=wide, max_depth=2, breadth=8, beam=8, value_samples=1, controller=False)
    assert result.paths_found == 64  # 8 x 8 leaves
    assert len(result.all_paths) == MAX_PATHS
    assert len(result.to_dict()["all_paths"]) == MAX_PATHS


async def test_each_listed_path_follows_first_parents_from_the_root_to_its_leaf() -> None:
    wide = ScriptedBackend(responder=lambda request, index: (
        str(index % 10) if request.prompt.as_text().endswith("0 to 10:") else f"step {index}"))
    result = await asolve(QUESTION, model=wide, max_depth=3, breadth=3, beam=3, value_samples=1, controller=False)
    assert [list(p.nodes) for p in result.all_paths] == [result.graph.path_to_root(p.nodes[-1]) for p in result.all_paths]
    assert len({p.nodes for p in result.all_paths}) == len(result.all_paths) == result.paths_found


#: The scripted model behind a completions endpoint.
server_reply = completions_of(reply)


def loom_solve(server: FakeOpenAIServer, capsys: pytest.CaptureFixture[str], *extra: str) -> str:
    server.responder = server_reply
    code = main(["solve", "--model", f"openai-compatible:{server.url}@m#completions", "--depth", "2",
                 "--breadth", "2", "--beam", "2", "--value-samples", "1", "--aggregation", "sum", "--quiet",
                 "--no-store", *extra, QUESTION])
    out = capsys.readouterr().out
    assert code == 0, out
    return out


def test_loom_solve_json_has_the_best_path_total_and_all_paths(server: FakeOpenAIServer,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    out = json.loads(loom_solve(server, capsys, "--json"))
    assert out["best_path_total"] == pytest.approx(1.7)
    assert out["paths_found"] == 4
    assert out["all_paths"][0]["steps"] == ["a0", "b1 under a0"]
    assert out["all_paths"][0]["total"] == pytest.approx(1.7)
    assert [p["total"] for p in out["all_paths"]] == sorted((p["total"] for p in out["all_paths"]), reverse=True)


def test_loom_solve_text_shows_the_path_score_and_how_many_paths(server: FakeOpenAIServer,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    out = loom_solve(server, capsys)
    line = r"^path score: 1\.70 \(sum of the steps' scores\) · 4 root-to-leaf paths scored, listed by --json$"
    assert re.search(line, out, re.MULTILINE)
