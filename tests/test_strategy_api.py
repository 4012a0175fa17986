"""What a strategy may use of its search (thoughtloom.SearchAPI): the context the engine gives every strategy
has all of it, and the user-strategy example (examples/greedy_strategy.py) needs nothing else."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import pytest
from test_observability import ONE_PATH
from test_search import game24_model
from test_task_plugins import EXAMPLES

from thoughtloom import Needs, SearchAPI, Strategy, Task
from thoughtloom.llm.budget import BudgetLimits
from thoughtloom.llm.gateway import Gateway
from thoughtloom.search import SearchConfig, search
from thoughtloom.search.stop import StopReason
from thoughtloom.search.strategy_api import StrategyContext
from thoughtloom.tasks import get_task

#: Every name the protocol declares (its methods and read-only properties).
API_NAMES = frozenset(name for name in vars(SearchAPI) if not name.startswith("_"))


class OnlyTheAPI:
    """A context that lets a strategy reach only what SearchAPI names: anything else is an AttributeError."""

    def __init__(self, ctx: StrategyContext) -> None:
        object.__setattr__(self, "_ctx", ctx)

    def __getattr__(self, name: str) -> Any:
        if name not in API_NAMES:
            raise AttributeError(f"{name!r} is not part of SearchAPI")
        return getattr(object.__getattribute__(self, "_ctx"), name)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"a strategy sets nothing on its context ({name!r})")


@dataclass(frozen=True)
class ThroughTheAPI:
    """The strategy given, run with a context that is only the API."""

    inner: Any
    name: str = "through_the_api"
    settings: None = None
    needs: Needs = Needs(operators=True)

    def unfit(self, task: Task[Any]) -> str | None:
        return None

    async def run(self, ctx: SearchAPI) -> None:
        assert isinstance(ctx, StrategyContext)
        await self.inner.run(OnlyTheAPI(ctx))


@pytest.fixture
def greedy(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.syspath_prepend(str(EXAMPLES))
    from greedy_strategy import GreedyStrategy

    return GreedyStrategy


async def _solve(strategy: Any) -> Any:
    gateway = Gateway(game24_model(ONE_PATH), BudgetLimits(tokens=100_000))
    return await search(get_task("game24"), "4 5 6 10", gateway, SearchConfig(strategy="bfs"), strategy=strategy)


def test_the_api_names_what_a_strategy_does() -> None:
    assert {"ask", "ask_many", "tools", "expand", "value", "add_thought", "set_score", "scorer", "frontier",
            "graph", "path_score", "stop", "stopped"} <= API_NAMES
    # The controller's knobs are its own, not the strategy's.
    assert not {"beam", "breadth", "max_depth", "temperature", "order", "counts", "config"} & API_NAMES


def test_the_context_a_strategy_gets_has_each_member_of_the_api_with_the_same_parameters() -> None:
    task = get_task("game24")
    ctx = StrategyContext(task, task.parse_problem("4 5 6 10"), Gateway(game24_model(ONE_PATH)), SearchConfig())
    assert isinstance(ctx, SearchAPI)
    for name in sorted(API_NAMES):
        declared = inspect.getattr_static(SearchAPI, name)
        if isinstance(declared, property):
            assert not inspect.ismethod(getattr(ctx, name)), name
            continue
        wanted = list(inspect.signature(declared).parameters.values())[1:]  # without self
        got = inspect.signature(getattr(ctx, name)).parameters
        # Each declared parameter, as declared; the context may take more, if a strategy can leave them out.
        assert [(p.name, p.kind, p.default) for p in wanted] == [
            (p.name, p.kind, p.default) for p in got.values() if p.name in {w.name for w in wanted}], name
        assert all(p.default is not p.empty for p in got.values() if p.name not in {w.name for w in wanted}), name


async def test_the_greedy_example_reaches_its_answer_through_the_api_alone(greedy: Any) -> None:
    direct = await _solve(greedy())
    through = await _solve(ThroughTheAPI(greedy()))
    assert through.answer == direct.answer and through.answer is not None
    assert [s.content for s in through.best_path] == [s.content for s in direct.best_path]


async def test_a_strategy_that_reaches_past_the_api_fails_under_it() -> None:
    @dataclass(frozen=True)
    class ReadsTheBeam:
        name: str = "reads_the_beam"

        async def run(self, ctx: Any) -> None:
            if ctx.beam:  # a controller's knob, not part of the API
                ctx.stop(StopReason.FRONTIER_EXHAUSTED)

    with pytest.raises(AttributeError, match="'beam' is not part of SearchAPI"):
        await _solve(ThroughTheAPI(ReadsTheBeam()))


def test_a_strategy_typed_against_the_api_satisfies_the_strategy_protocol(greedy: Any) -> None:
    assert isinstance(greedy(), Strategy)
    assert inspect.signature(greedy.run).parameters["ctx"].annotation in ("SearchAPI", SearchAPI)


# --- what a run hands one kind of strategy (search/handoff.py) ---------------------------------------


def test_a_strategy_reads_back_what_the_run_handed_it_by_its_type() -> None:
    from thoughtloom.search.agent.processors import ProcessorRegistry
    from thoughtloom.search.handoff import ByType
    from thoughtloom.search.research.explorer import ResearchSetup

    registry, setup = ProcessorRegistry(), ResearchSetup()
    handed = ByType([None, registry, setup])
    assert handed.get(ProcessorRegistry) is registry and handed.get(ResearchSetup) is setup
    assert ByType().get(ResearchSetup) is None


def test_what_a_strategy_leaves_replaces_what_it_left_before() -> None:
    from thoughtloom.search.handoff import ByType

    left = ByType()
    left.put([1])
    left.put([2])
    assert left.get(list) == [2]
