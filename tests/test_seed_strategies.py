"""Seed 001's strategy names (tree_of_thoughts, breadth_first) and its prune threshold as the general task's default."""

from __future__ import annotations

import json

import pytest
from openai_server import FakeOpenAIServer, completions_of

from thoughtloom import asolve
from thoughtloom.cli.main import main
from thoughtloom.llm.fake import ScriptedBackend
from thoughtloom.llm.types import GenerateRequest
from thoughtloom.run.spec import resolve
from thoughtloom.search.events import Event, NodePruned

QUESTION = "How can a small bakery cut its energy costs?"
# Each first step's evaluation: a strong one, a fair one its evaluator calls a dead end, a weak one.
EVALUATIONS = {
    "a0": {"reasoning": "Insulation pays back fast.", "score": 8, "is_promising": True},
    "a1": {"reasoning": "Cheaper flour does not touch energy.", "score": 6, "is_promising": False},
    "a2": {"reasoning": "Closing early loses sales.", "score": 2, "is_promising": True},
}
DEEPER = {"reasoning": "A concrete next step.", "score": 7, "is_promising": True}


def reply(request: GenerateRequest, index: int) -> str:
    """Three first steps a0..a2 (then b0.. below each), valued by EVALUATIONS as JSON; a final answer."""
    text = request.prompt.as_text()
    if text.endswith("Final answer:"):
        return "Insulate the ovens."
    if text.endswith("on a scale of 0 to 10:"):
        last = text.rsplit("Step ", 1)[1].split(": ", 1)[1].split("\n", 1)[0]
        return json.dumps(EVALUATIONS.get(last, DEEPER))
    depth = text.count("\nStep ") - 1  # the prompt ends with the new step's own label
    return f"a{index}" if depth == 0 else f"b{index} under {text.rsplit('Step 1: ', 1)[1][:2]}"


def expanded(model: ScriptedBackend) -> list[str]:
    """The first steps the search asked the model to continue from."""
    asked = [r.prompt.as_text() for r in model.calls if r.purpose == "generate"]
    return sorted(t.rsplit("Step 1: ", 1)[1][:2] for t in asked if "Step 1: " in t and t.endswith("Step 2:"))


# beam 1 would keep one first step: the seed's strategies must not cut to it.
NARROW_BEAM = {"max_depth": 2, "breadth": 3, "beam": 1, "value_samples": 1, "controller": False, "one_pass": True}


async def test_bfs_keeps_only_the_beam() -> None:
    model = ScriptedBackend(responder=reply)
    await asolve(QUESTION, model=model, strategy="bfs", **NARROW_BEAM)
    assert expanded(model) == ["a0"]


async def test_tree_of_thoughts_expands_every_promising_thought_above_the_threshold_without_a_beam_cut() -> None:
    model = ScriptedBackend(responder=reply)
    result = await asolve(QUESTION, model=model, strategy="tree_of_thoughts", **NARROW_BEAM)
    assert expanded(model) == ["a0"]  # a1 was called unpromising, a2 scored below 0.3
    assert result.config["strategy"] == "tree_of_thoughts"


async def test_tree_of_thoughts_prunes_a_thought_its_evaluator_calls_unpromising() -> None:
    events: list[Event] = []
    model = ScriptedBackend(responder=reply)
    result = await asolve(QUESTION, model=model, strategy="tree_of_thoughts", sinks=[events.append],
                          **{**NARROW_BEAM, "prune_threshold": 0.0})
    assert expanded(model) == ["a0", "a2"]  # no beam cut, no threshold: only the verdict stops a1
    (a1,) = [n.id for n in result.graph if n.content == "a1"]
    assert [e.reason for e in events if isinstance(e, NodePruned) and e.node_id == a1] == [
        "its evaluator found it not worth expanding"]


async def test_breadth_first_expands_every_thought_above_the_threshold_whatever_its_verdict() -> None:
    model = ScriptedBackend(responder=reply)
    result = await asolve(QUESTION, model=model, strategy="breadth_first", **NARROW_BEAM)
    assert expanded(model) == ["a0", "a1"]  # a2 scored below the general task's 0.3
    assert result.config["strategy"] == "breadth_first"


async def test_breadth_first_goes_level_by_level() -> None:
    model = ScriptedBackend(responder=reply)
    await asolve(QUESTION, model=model, strategy="breadth_first", **{**NARROW_BEAM, "prune_threshold": 0.0})
    depths = [r.prompt.as_text().count("\nStep ") for r in model.calls if r.purpose == "generate"]
    assert depths == sorted(depths) and depths.count(2) == 3  # the root, then all three first steps


def test_the_general_tasks_default_prune_threshold_is_the_seeds() -> None:
    assert resolve(QUESTION).config.prune_threshold == 0.3


def test_game24_keeps_its_own_prune_threshold() -> None:
    assert resolve("4 5 6 10", task="game24").config.prune_threshold == 0.0


async def test_by_default_a_general_thought_scored_below_three_in_ten_is_pruned() -> None:
    model = ScriptedBackend(responder=reply)
    result = await asolve(QUESTION, model=model, max_depth=2, breadth=3, beam=3, value_samples=1, controller=False,
                          one_pass=True)
    (a2,) = [n for n in result.graph if n.content == "a2"]
    assert a2.status.value == "pruned"
    assert "a2" not in expanded(model)


#: The scripted model behind a completions endpoint.
server_reply = completions_of(reply)


@pytest.mark.parametrize("strategy", ["tree_of_thoughts", "breadth_first"])
def test_loom_solve_takes_the_seed_strategy_names(server: FakeOpenAIServer, capsys: pytest.CaptureFixture[str],
                                                  strategy: str) -> None:
    server.responder = server_reply
    code = main(["solve", "--model", f"openai-compatible:{server.url}@m#completions", "--strategy", strategy,
                 "--one-pass", "--depth", "2", "--soft-depth", "3", "--breadth", "3", "--beam", "1", "--value-samples", "1", "--quiet", "--no-store",
                 "--json", QUESTION])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert out["config"]["strategy"] == strategy
    assert out["config"]["prune_threshold"] == 0.3
    # (--soft-depth 3: the controller does not judge progress at depth 2, so it never backtracks here)
    assert out["stats"]["expansions"] == 1 + {"tree_of_thoughts": 1, "breadth_first": 2}[strategy]
