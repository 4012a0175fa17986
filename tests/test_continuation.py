"""A tree search that ends its pass short of the goal with budget left goes on (search/continuation.py)."""

from __future__ import annotations

import pytest
from test_search import RIGHT, SCENARIO, WINNING_ANSWER, game24_model, general_model, of, proposed_for, run

from thoughtloom.llm.budget import BudgetLimits
from thoughtloom.llm.types import GenerateRequest
from thoughtloom.run.options import spec_from_options
from thoughtloom.run.spec import RunSpec, resolve
from thoughtloom.search.events import SearchContinued

# The decoy branch is valued "sure", the right one only "likely": a beam of one follows the decoy,
# whose every end misses 24, and holds the right step back.
DECOY_FIRST = {"6 9 10": "sure", "5 6 6": "likely", "6 30": "sure", "10 15": "likely", "4 9": "likely"}
BEAM_OF_ONE = {"strategy": "bfs", "breadth": 2, "beam": 1, "max_depth": 3, "value_samples": 1}


async def test_one_pass_stops_at_its_depth_limit_with_the_budget_unspent() -> None:
    result, _ = await run("game24", "4 5 6 10", game24_model(SCENARIO, DECOY_FIRST), **BEAM_OF_ONE, one_pass=True)
    assert result.answer is None
    assert result.termination_reason == "max_depth"
    assert result.stats.continuations == 0


async def test_the_search_goes_back_to_the_thoughts_the_beam_held_back_and_finds_the_goal() -> None:
    model = game24_model(SCENARIO, DECOY_FIRST)
    result, events = await run("game24", "4 5 6 10", model, **BEAM_OF_ONE, one_pass=False)
    assert result.answer == WINNING_ANSWER
    assert result.termination_reason == "goal_reached"
    continued = of(events, SearchContinued)
    assert result.stats.continuations == len(continued) >= 1
    assert all(c.ended == "max_depth" and c.how == "held back by the beam" for c in continued)
    assert "5 6 6" in proposed_for(model)  # the held-back right step was expanded after all


async def test_held_back_thoughts_are_taken_deepest_level_first() -> None:
    result, events = await run("game24", "4 5 6 10", game24_model(SCENARIO, DECOY_FIRST), **BEAM_OF_ONE,
                               one_pass=False)
    depths = [c.depth for c in of(events, SearchContinued)]
    assert depths[0] == 2  # the decoy's other child first, then the right step at depth 1
    assert depths[-1] == 1
    assert [result.graph.node(n).content for c in of(events, SearchContinued) if c.depth == 1
            for n in c.frontier] == [RIGHT]


async def test_a_search_given_no_budget_makes_one_pass() -> None:
    # Nothing to spend: going on would search the whole space at whatever it costs.
    result, events = await run("game24", "4 5 6 10", game24_model(SCENARIO, DECOY_FIRST), BudgetLimits(),
                               **BEAM_OF_ONE, one_pass=False)
    assert result.termination_reason == "max_depth"
    assert of(events, SearchContinued) == []


async def test_a_search_with_nothing_left_to_try_ends_search_exhausted() -> None:
    dead_ends = {**SCENARIO, "6 30": "6 + 30 = 36 (left: 36)"}  # no path reaches 24
    result, _ = await run("game24", "4 5 6 10", game24_model(dead_ends, DECOY_FIRST), **BEAM_OF_ONE, one_pass=False)
    assert result.answer is None
    assert result.termination_reason == "search_exhausted"


@pytest.mark.parametrize("strategy", ["dfs", "best_first"])
async def test_depth_and_best_first_searches_also_end_exhausted_rather_than_frontier_exhausted(strategy: str) -> None:
    dead_ends = {**SCENARIO, "6 30": "6 + 30 = 36 (left: 36)"}
    result, _ = await run("game24", "4 5 6 10", game24_model(dead_ends, DECOY_FIRST), strategy=strategy, breadth=2,
                          max_depth=3, value_samples=1, one_pass=False)
    assert result.termination_reason == "search_exhausted"


def _seeded_samples() -> object:
    """A general-task fake whose samples differ by seed, so that every widening brings new thoughts."""
    model = general_model()
    respond = model.responder
    assert respond is not None

    def by_seed(request: GenerateRequest, index: int) -> str:
        if request.purpose == "generate":
            return f"idea from seed {request.seed} temperature {request.temperature:.1f}"
        return respond(request, index)

    model.responder = by_seed
    return model


async def test_free_text_steps_are_widened_with_new_seeds_and_hotter_until_the_budget_runs_out() -> None:
    model = _seeded_samples()
    result, events = await run("general", "Plan a trip", model, limits=BudgetLimits(tokens=4000), strategy="bfs",
                               generation="sample", breadth=1, beam=1, max_depth=1, value_samples=1, seed=3,
                               one_pass=False)
    generate_calls = [r for r in model.calls if r.purpose == "generate"]  # type: ignore[attr-defined]
    assert len(generate_calls) >= 3
    assert len({r.seed for r in generate_calls}) == len(generate_calls)
    assert generate_calls[1].temperature > generate_calls[0].temperature
    assert all(c.how == "a restart from the root" for c in of(events, SearchContinued))
    assert result.termination_reason == "budget_tokens"


async def test_widening_a_thought_whose_proposals_are_all_made_gives_nothing_new() -> None:
    result, events = await run("game24", "4 5 6 10", game24_model(SCENARIO, DECOY_FIRST), strategy="bfs",
                               breadth=5, beam=5, max_depth=1, value_samples=1, one_pass=False)
    # Both root steps are children already and the scripted proposals never change.
    assert len(result.graph.children(0)) == 2
    assert result.termination_reason == "search_exhausted"
    assert result.stats.duplicates == 0  # passing over a thought's own children is not a duplicate


def test_one_pass_is_an_option_of_loom_solve() -> None:
    spec = spec_from_options({"task": "game24", "problem": "4 5 6 10", "one_pass": True})
    assert spec.config.one_pass is True
    assert spec_from_options({"task": "game24", "problem": "4 5 6 10"}).config.one_pass is False


def test_a_run_stored_before_continuation_existed_replays_as_one_pass() -> None:
    stored = resolve("4 5 6 10", task="game24").to_dict()
    del stored["config"]["one_pass"]
    assert RunSpec.from_dict(stored).config.one_pass is True


async def _held_back_search(one_pass: bool, offered: list[object]) -> tuple[object, object]:
    """A general-task search whose root has two children scored 0.6, the beam of one holding the other back."""
    from thoughtloom.control import CallbackHandler, ControlSettings, Controller
    from thoughtloom.llm.gateway import Gateway
    from thoughtloom.search.config import SearchConfig
    from thoughtloom.search.context import SearchContext
    from thoughtloom.search.operators import expand
    from thoughtloom.search.strategies.common import keep_beam
    from thoughtloom.tasks import get_task

    model = general_model()
    respond = model.responder
    assert respond is not None
    model.responder = lambda request, i: "6" if request.purpose == "evaluate" else respond(request, i)
    controller = Controller(ControlSettings(), CallbackHandler(on_compromise=lambda c: offered.append(c) or False))
    ctx = SearchContext(get_task("general"), "Plan a trip", Gateway(model), SearchConfig(
        generation="propose", breadth=2, beam=1, max_depth=3, value_samples=1, one_pass=one_pass),
        controller=controller)
    controller.attach(ctx)
    keep_beam(ctx, await expand(ctx, ctx.root))
    return ctx, controller


@pytest.mark.parametrize("one_pass", [False, True])
async def test_no_compromise_is_offered_for_an_intractable_problem_while_held_back_thoughts_remain(one_pass: bool) -> None:
    from thoughtloom.control.types import AnticipatedFailure, FailureMode

    offered: list[object] = []
    ctx, controller = await _held_back_search(one_pass, offered)
    failure = AnticipatedFailure(FailureMode.PROBLEM_INTRACTABLE, 0.9, "now", "p.", "m.", "e")
    await controller._act(ctx, failure, controller.snapshot(ctx))  # type: ignore[attr-defined]
    if one_pass:  # nothing will follow this pass: the best thought is offered
        assert len(offered) == 1
    else:
        assert offered == []
        assert controller.actions[-1].action == (  # type: ignore[attr-defined]
            "no compromise offered: 1 thought is held back by the beam, still to be tried")
