"""Lanes: reasoning methods run through the same gateway and budget, each giving ONE final answer.

Sampling lanes (io, cot, cot_sc, best_of_n, react) prompt the model directly with the data set's
prompts, each request carrying both the few-shot completion text (base models) and chat messages
(instruct models); search lanes (tot, dfs, mcts, got, recursive, cove) run thoughtloom's engine on
the data set's task, only where the task has what the strategy needs (search/strategies/fit.py);
the random lane is the LM-free control: tot's search choosing by chance among the valid replies
the task lists, at the same token cost; the agent lane runs the agent strategy on the problem's text with the tools
chosen for its data set (AGENT_TOOLS); the research lane runs Research Flow on the question over
the problem's own documents, one sentence per line, so its citations read as the data set's
sentence ids (citations.py). "Any of k candidates correct" is kept apart as `candidates` for the
report's separately named any@k metric; it never decides a lane's answer.
"""

from __future__ import annotations

import asyncio
import math
import tempfile
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from enum import StrEnum
from pathlib import Path
from typing import Any

from ..grounding.arith import ExpressionError, evaluate, fmt
from ..llm.budget import BudgetLimits
from ..llm.errors import BudgetExceeded, ModelConfigError, ModelError
from ..llm.gateway import Gateway
from ..llm.limits import ModelLimit
from ..llm.tracing import span
from ..llm.types import Backend, GenerateRequest, Message, Prompt
from ..search.result import SearchResult
from ..search.stop import StopReason
from ..tasks import prontoqa
from ..tasks.answers import span_answer
from ..tools.toolbox import TOOL_CALLS
from .citations import Fact, cited_facts, corpus_file, sentence_files
from .datasets import DATASETS, VALIDATED_FAMILIES, Dataset, Problem
from .prompts import answer_from, calculator_call, own_turn, stated_answer
from .scoring import (
    final_number,
    hotpot_span,
    normalize_answer,
    parse_counts,
    parse_int_list,
    plain,
)

SAMPLING_LANES = ("io", "cot", "cot_sc", "best_of_n", "react", "pot")
#: Search lanes and the engine strategy each runs (recursive: only when that strategy is registered).
SEARCH_LANES = {"tot": "bfs", "dfs": "dfs", "mcts": "mcts", "got": "got", "recursive": "recursive", "random": "bfs",
                "cove": "cove"}
#: The LM-free control: the tot lane's search, choosing at random among the valid replies its
#: prompts list (llm/chance.py), with tokens counted as the lane's model would count them.
CHANCE_LANE = "random"
#: The lane that runs the agent strategy (the `agent` task, with tools) instead of the data set's task.
AGENT_LANE = "agent"
#: The lane that runs the research strategy (Research Flow) on a question over the problem's own documents.
RESEARCH_LANE = "research"
ALL_LANES = (*SAMPLING_LANES, *SEARCH_LANES, AGENT_LANE, RESEARCH_LANE)
#: Prompt families whose problems bring their own documents, sentence by sentence (the research lane's corpus).
RESEARCH_SETS: tuple[str, ...] = ("hotpotqa",)
#: The agent lane's tools by prompt family: math word problems get the exact calculator and
#: sandboxed Python; HotpotQA gets document search over the question's own ten paragraphs.
AGENT_TOOLS: dict[str, tuple[str, ...]] = {"gsm8k": ("calc", "python"), "hotpotqa": ("docs",)}
#: Lane parameters when the protocol gives none.
LANE_DEFAULTS: dict[str, dict[str, Any]] = {
    "cot_sc": {"k": 5},
    "best_of_n": {"n": 5},
    "react": {"max_steps": 4},
    "pot": {"k": 1},
}
#: A react turn (a thought and one action) is this many tokens at most; the loop stops past max_steps.
#: Room for an instruct model's wordier thought; a base model stops at "\nResult:" long before.
REACT_TOKENS = 160


class LaneError(ValueError):
    """A lane that cannot run on a data set (no such lane, no prompt, strategy not registered)."""


class LaneStop(StrEnum):
    """Why a lane ended, besides a search's own stop reasons."""

    DONE = "done"
    NO_VALID_CANDIDATE = "no_valid_candidate"
    NO_ACTION = "no_action"
    MAX_STEPS = "max_steps"
    PROBLEM_ERROR = "problem_error"
    UNSUPPORTED = "unsupported"
    CRASHED = "lane_crashed"


@dataclass(slots=True)
class LaneOutcome:
    """What a lane produced for one problem: one answer, and the candidates it chose among."""

    answer: str | None
    candidates: list[str | None] = field(default_factory=list)
    stop_reason: StopReason | LaneStop = LaneStop.DONE
    error: str | None = None
    #: Search lanes with a store: the stored run and its graph's CID.
    run_id: str | None = None
    graph: str | None = None
    #: The agent lane: tool calls made (from the graph's nodes); None for lanes without tools.
    tool_calls: int | None = None
    #: The research lane: the final synthesis's citations, and the (title, sentence id) pairs they cite;
    #: None for lanes that do not cite.
    citations: tuple[str, ...] | None = None
    cited: tuple[Fact, ...] | None = None
    #: Engine lanes: the whole SearchResult (graph, best path, calls, usage); None for sampling lanes
    #: and for a search that never started (a problem the task refused).
    result: SearchResult | None = None
    #: Sampling lanes: the model's replies as written, before the answer was read out of them.
    replies: tuple[str, ...] = ()


def available_strategies() -> set[str]:
    """Engine strategies registered right now: built in, and installed (search/strategies/registry.py)."""
    from ..search.strategies.registry import strategy_names

    return set(strategy_names())


def lane_strategy(lane: str) -> str | None:
    """The engine strategy a search lane runs: a built-in lane's (SEARCH_LANES), or the installed strategy
    the lane is named after; None for a lane that runs no search strategy."""
    if lane in SEARCH_LANES:
        return SEARCH_LANES[lane]
    if lane in ALL_LANES:
        return None
    from ..search.strategies.registry import installed_names

    return lane if lane in installed_names() else None


def role_lane(lane: str) -> bool:
    """True for a search lane whose strategy has roles of its own (the operators' generator, evaluator,
    synthesizer), so a protocol's role models apply to it; every other lane runs on the protocol's model
    alone (the random control above all: it must not be given a model's judgement)."""
    from ..search.strategies.registry import StrategyError, strategy_named

    strategy = lane_strategy(lane)
    if lane == CHANCE_LANE or strategy is None:
        return False
    try:
        return bool(strategy_named(strategy).needs.roles)
    except StrategyError:  # a broken installed strategy: its lane is left out (check_lane says why)
        return False


def check_lane_name(lane: str) -> None:
    """Raise LaneError for a name that is no lane (a built-in one, or an installed strategy's)."""
    if lane not in ALL_LANES and lane_strategy(lane) is None:
        raise LaneError(f"unknown lane {lane!r}; choose from: {', '.join(ALL_LANES)}, or an installed strategy's name")


def registered_tasks() -> set[str]:
    """Task names registered right now (built-in and installed)."""
    from ..tasks.registry import all_tasks

    return set(all_tasks())


def check_lane(lane: str, dataset: Dataset) -> None:
    """Raise LaneError when `lane` cannot run on `dataset` (before any model is loaded)."""
    check_lane_name(lane)
    family = dataset.spec.prompts
    if lane == AGENT_LANE:
        if "agent" not in available_strategies():
            raise LaneError("lane agent needs the agent strategy, which is not registered in this build")
        if family not in AGENT_TOOLS:
            sets = ", ".join(name for name, spec in DATASETS.items() if spec.prompts in AGENT_TOOLS)
            raise LaneError(f"lane agent has no tools chosen for {dataset.name}; it runs on {sets}")
        return
    if lane == RESEARCH_LANE:
        if "research" not in available_strategies():
            raise LaneError("lane research needs the research strategy, which is not registered in this build")
        if family not in RESEARCH_SETS:
            sets = ", ".join(name for name, spec in DATASETS.items() if spec.prompts in RESEARCH_SETS)
            raise LaneError(f"lane research needs problems that bring their own documents; {dataset.name}'s do not "
                            f"(it runs on {sets})")
        return
    if (strategy := lane_strategy(lane)) is not None:
        if strategy not in available_strategies():
            raise LaneError(f"lane {lane} needs the {strategy} strategy, which is not registered in this build")
        if dataset.task_object is None and dataset.spec.task not in registered_tasks():
            raise LaneError(f"lane {lane} needs task {dataset.spec.task} for {dataset.name}, which is not registered")
        if lane == CHANCE_LANE and not dataset.task().lists_choices:
            listing = sorted({spec.task for spec in DATASETS.values() if _lists_choices(spec.task)})
            raise LaneError(f"lane random needs a task that lists its valid steps; {dataset.spec.task} does not "
                            f"(it runs on {', '.join(listing)})")
        try:
            unfit = _unfit(strategy, dataset)
        except ValueError as exc:  # an installed strategy that cannot be loaded (registry.StrategyError)
            raise LaneError(f"lane {lane}: {exc}") from None
        if unfit is not None:
            raise LaneError(f"lane {lane} does not apply: {unfit}")
        return
    prompts = dataset.family()
    if prompts is None and family != "code":
        raise LaneError(
            f"lane {lane} has no prompt for {dataset.name}; use a search lane"
            + (" (or label its rows: an answer per row and --metric)" if family.startswith("user:") else "")
        )
    if family == "code":
        if lane in ("cot", "react"):
            raise LaneError(f"lane {lane} has no prompt for {dataset.name}; use io, cot_sc, best_of_n or a search lane")
        return
    if lane == "react" and prompts.react is None:
        raise LaneError(f"lane react needs a tool for {dataset.name}; it has none (react runs on game24 and gsm8k)")
    if lane == "best_of_n" and family not in VALIDATED_FAMILIES:
        # Without a check that can fail, picking "the first valid one" is cot_sc's vote under another name.
        raise LaneError(f"lane best_of_n needs a check that can fail without the gold; {dataset.name} has none, "
                        "so it would only repeat cot_sc's vote (run cot_sc)")
    if lane == "pot" and dataset.spec.task != "math":
        raise LaneError(f"lane pot writes programs for math questions; {dataset.name} is not one (it runs on gsm8k)")


def check_params(lane: str, params: dict[str, Any]) -> None:
    """Raise LaneError on a parameter the lane does not take or a value it cannot run with (before any call)."""
    engine = lane_strategy(lane) is not None or lane in (AGENT_LANE, RESEARCH_LANE)
    from ..search.config import SearchConfig
    from ..search.research.config import ResearchConfig

    Config: type[SearchConfig] | type[ResearchConfig] = ResearchConfig if lane == RESEARCH_LANE else SearchConfig
    if engine:
        defaults = {f.name: f.default for f in fields(Config)
                    if f.init and f.name not in ("strategy", "temperature", "seed")}  # shared by the protocol
    else:
        defaults = LANE_DEFAULTS.get(lane, {})
    for name, value in params.items():
        if name not in defaults:
            takes = ", ".join(sorted(defaults)) or "none"
            raise LaneError(f"lane {lane} has no parameter {name!r} (it takes: {takes})")
        default = defaults[name]
        if isinstance(default, bool) or isinstance(value, bool):
            ok = isinstance(value, bool) and isinstance(default, bool)
        elif isinstance(default, int) or default is None:  # every optional parameter is a count
            ok = isinstance(value, int) or (value is None and default is None)
        elif isinstance(default, float):
            ok = isinstance(value, (int, float)) and math.isfinite(value)
        elif isinstance(default, tuple):  # names, e.g. research's allow; JSON gives a list
            ok = isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value)
        else:
            ok = isinstance(value, type(default))
        if not ok:
            kind = "true or false" if isinstance(default, bool) else "a whole number" if isinstance(default, int) \
                else "a finite number" if isinstance(default, float) \
                else "a list of names" if isinstance(default, tuple) else f"a {type(default).__name__}"
            raise LaneError(f"lane {lane}: parameter {name} must be {kind}; got {value!r}")
        if not engine and value < 1:
            raise LaneError(f"lane {lane}: parameter {name} must be at least 1; got {value}")
    if engine:
        try:
            # Its own range checks (beam >= 1, prune_threshold in [0, 1]; research's anti-patterns ...).
            given: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in params.items()}
            Config(**given)
        except ValueError as exc:
            raise LaneError(f"lane {lane}: {exc}") from None


def _unfit(strategy: str, dataset: Dataset) -> str | None:
    """Why the engine strategy cannot search this data set (with the task its lane runs), or None."""
    from ..search.strategies.registry import unsupported_reason

    return unsupported_reason(strategy, lane_task(strategy, dataset))


def lane_task(strategy: str, dataset: Dataset, control: bool = False) -> Any:
    """The task a search lane runs: the data set's (for the random control, built with what it lists its
    steps from), or its prose task where the strategy writes a free-text answer that the data set's task
    cannot take (cove on GSM8K runs the general task)."""
    from ..search.strategies.registry import unsupported_reason
    from ..tasks.registry import get_task

    task = dataset.task(control)
    if dataset.spec.prose_task is not None and unsupported_reason(strategy, task) is not None:
        return get_task(dataset.spec.prose_task)
    return task


def _lists_choices(task_name: str) -> bool:
    """True when the task's prompts list every valid reply (what the random control chooses among)."""
    from ..tasks.registry import get_task

    return bool(get_task(task_name).lists_choices)


def search_spec(lane: str, dataset: Dataset, problem: Problem, backend: Backend, limits: BudgetLimits,
                params: dict[str, Any], temperature: float, seed: int | None, store: Any = None,
                knowledge: str | None = None, role_models: dict[str, str] | None = None) -> Any:
    """The RunSpec a search, agent or research lane runs: resolved like `loom solve` / `loom agent` / `loom research`,
    plus the lane's settings (knowledge: the corpus; role_models: for the lanes with roles)."""
    from ..run.spec import SpecError, research_tools, resolve

    search = {"temperature": temperature, "seed": seed, **params}
    try:
        if lane == RESEARCH_LANE:
            # The question alone, as for the agent: the documents are searched, not shown.
            return resolve(agent_task(problem), task="research", model=backend, budget=limits, store=store,
                           search={"strategy": "research", "temperature": temperature, "seed": seed},
                           tools=research_tools(knowledge), knowledge=knowledge,
                           research=params)
        if lane == AGENT_LANE:
            return resolve(agent_task(problem), task="agent", model=backend, budget=limits, store=store,
                           search={"strategy": "agent", **search}, tools=AGENT_TOOLS[dataset.spec.prompts],
                           knowledge=knowledge)
        strategy = lane_strategy(lane) or lane
        task = dataset.code_task() if dataset.spec.prompts == "code" else lane_task(strategy, dataset,
                                                                                     lane == CHANCE_LANE)
        if lane == CHANCE_LANE:
            from ..llm.chance import ChanceBackend

            backend = ChanceBackend(backend, seed=seed or 0)
        return resolve(problem.text, task=task, model=backend, budget=limits, store=store,
                       search={"strategy": strategy, **search},
                       role_models=(role_models or None) if role_lane(lane) else None)
    except SpecError as exc:
        raise LaneError(f"lane {lane}: {exc}") from None


@dataclass(slots=True)
class LaneSpend:
    """What a lane spent on one problem, read from its gateway's budget (the same measure for every lane)."""

    input_tokens: int = 0
    output_tokens: int = 0
    calls: int = 0


async def run_lane(
    lane: str,
    dataset: Dataset,
    problem: Problem,
    backend: Backend,
    limits: BudgetLimits,
    *,
    params: dict[str, Any],
    temperature: float,
    seed: int | None,
    slots: ModelLimit | None = None,
    store: Any = None,
    role_models: dict[str, str] | None = None,
) -> tuple[LaneOutcome, LaneSpend]:
    """Run one lane on one problem under a fresh budget over `backend`; never raises for model trouble.

    slots: the model-concurrency limit all lanes share. store: search lanes record their runs there.
    role_models: role -> model spec, for the lanes with roles (role_lane).
    """
    from ..run.execute import lane_gateway

    gateways: list[Gateway] = []
    try:
        if lane_strategy(lane) is not None or lane in (AGENT_LANE, RESEARCH_LANE):
            outcome = await _search(lane, dataset, problem, backend, limits, params, temperature, seed, slots,
                                    store, gateways.append, role_models)
        else:
            gateway = lane_gateway(backend, limits, slots)
            gateways.append(gateway)
            try:
                # One span per lane run, holding its model calls, as a search lane's invoke_agent span does.
                with span(f"invoke_agent thoughtloom {lane}", lane_attributes(lane, dataset, problem)) as lane_span:
                    outcome = await _SAMPLERS[lane](dataset, problem, gateway, params, temperature, seed)
                    if lane_span is not None:
                        lane_span.set_attributes({
                            "thoughtloom.stop_reason": str(outcome.stop_reason),
                            "gen_ai.usage.input_tokens": gateway.budget.spent.input_tokens,
                            "gen_ai.usage.output_tokens": gateway.budget.spent.output_tokens,
                        })
            finally:
                await gateway.aclose()
    except ModelConfigError:
        raise  # a wrong model spec or key: the whole run is wrong, not this problem
    except BudgetExceeded as exc:
        outcome = LaneOutcome(None, stop_reason=StopReason.budget(exc.limit))
    except ModelError as exc:
        outcome = LaneOutcome(None, stop_reason=StopReason.MODEL_ERROR, error=str(exc))
    except Exception as exc:  # noqa: BLE001 - one lane's bug must not end a long benchmark
        # Recorded (unsolved, with the error) and counted in the report's lane_errors column.
        outcome = LaneOutcome(None, stop_reason=LaneStop.CRASHED, error=f"{type(exc).__name__}: {exc}")
    spend = LaneSpend()
    if gateways:
        b = gateways[0].budget
        spend = LaneSpend(b.spent.input_tokens, b.spent.output_tokens, b.calls)
    return outcome, spend


def lane_attributes(lane: str, dataset: Dataset, problem: Problem) -> dict[str, Any]:
    """A sampling lane run's span attributes (the GenAI conventions' agent invocation, as a search's)."""
    return {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": f"thoughtloom {lane}",
            "thoughtloom.lane": lane, "thoughtloom.dataset": dataset.name, "thoughtloom.problem": problem.id}


# --- sampling lanes ------------------------------------------------------------------------


async def _ask(gateway: Gateway, prompt: Prompt, *, n: int, max_tokens: int, stop: tuple[str, ...],
               temperature: float, seed: int | None, purpose: str) -> list[str]:
    completion = await gateway.generate(
        GenerateRequest(prompt, n=n, max_tokens=max_tokens, temperature=temperature, stop=stop, seed=seed,
                        purpose=purpose)
    )
    return list(completion.texts)


Samples = tuple[list[str | None], tuple[str, ...]]


async def _code_samples(dataset: Dataset, problem: Problem, gateway: Gateway, n: int, temperature: float,
                        seed: int | None, purpose: str) -> Samples:
    """n programs from the code task's own completion prompt (and the replies they were read from)."""
    task = dataset.code_task()
    parsed = task.parse_problem(problem.text)
    q = task.sample(parsed, [])
    completion = await gateway.generate(
        GenerateRequest(q.prompt, n=n, max_tokens=q.max_tokens, temperature=temperature, stop=q.stop, seed=seed,
                        purpose=purpose)
    )
    out: list[str | None] = []
    for text in completion.texts:
        thought = task.parse_sample(parsed, [], text)
        out.append(task.compose_answer(parsed, [thought], None) if thought else None)
    return out, tuple(completion.texts)


async def _cot_samples(dataset: Dataset, problem: Problem, gateway: Gateway, n: int, temperature: float,
                       seed: int | None, purpose: str) -> Samples:
    """n chain-of-thought answers (and the replies they were read from)."""
    if dataset.spec.prompts == "code":
        return await _code_samples(dataset, problem, gateway, n, temperature, seed, purpose)
    fam = dataset.family()
    texts = await _ask(gateway, fam.prompt(fam.cot, problem.shown), n=n, max_tokens=fam.cot_tokens,
                       stop=fam.cot_stop, temperature=temperature, seed=seed, purpose=purpose)
    return [final_answer(dataset, problem, answer_from(fam, t, cot=True)) for t in texts], tuple(texts)


async def _io(dataset: Dataset, problem: Problem, gateway: Gateway, params: dict[str, Any], temperature: float,
              seed: int | None) -> LaneOutcome:
    if dataset.spec.prompts == "code":
        answers, replies = await _code_samples(dataset, problem, gateway, 1, temperature, seed, "io")
        return LaneOutcome(answers[0], replies=replies)
    fam = dataset.family()
    texts = await _ask(gateway, fam.prompt(fam.io, problem.shown), n=1, max_tokens=fam.io_tokens,
                       stop=fam.io_stop, temperature=temperature, seed=seed, purpose="io")
    return LaneOutcome(final_answer(dataset, problem, answer_from(fam, texts[0], cot=False)), replies=tuple(texts))


async def _cot(dataset: Dataset, problem: Problem, gateway: Gateway, params: dict[str, Any], temperature: float,
               seed: int | None) -> LaneOutcome:
    answers, replies = await _cot_samples(dataset, problem, gateway, 1, temperature, seed, "cot")
    return LaneOutcome(answers[0], replies=replies)


def answer_key(dataset: Dataset, answer: str | None) -> Any:
    """What two answers must share to count as the same vote (the value, not the wording)."""
    if answer is None:
        return None
    if dataset.checker is not None:
        return dataset.checker.key(answer)
    family = dataset.spec.prompts
    if family == "game24":
        # Different expressions can be the same answer only if both are right; vote on the text.
        return " ".join(answer.split("=")[0].replace("Answer:", "").split())
    if family == "gsm8k":
        return final_number(answer)
    if family in ("sorting", "set_intersection"):
        found = parse_int_list(answer)
        return tuple(found) if found is not None else None
    if family == "keyword_counting":
        counts = parse_counts(answer)
        return tuple(sorted(counts.items())) if counts is not None else None
    if family in ("hotpotqa", "general"):
        return normalize_answer(hotpot_span(answer)) or None
    if family == "prontoqa":
        return prontoqa.stated_answer(answer)
    return "\n".join(line.rstrip() for line in answer.strip().splitlines())


def majority(dataset: Dataset, candidates: list[str | None]) -> str | None:
    """The most common answer (by answer_key); ties go to the earliest sample; None never wins."""
    keys = [answer_key(dataset, c) for c in candidates]
    counts = Counter(k for k in keys if k is not None)
    if not counts:
        return None
    top = max(counts.values())
    for cand, key in zip(candidates, keys, strict=True):
        if key is not None and counts[key] == top:
            return cand
    return None  # pragma: no cover - unreachable: some key has the top count


async def _cot_sc(dataset: Dataset, problem: Problem, gateway: Gateway, params: dict[str, Any], temperature: float,
                  seed: int | None) -> LaneOutcome:
    candidates, replies = await _cot_samples(dataset, problem, gateway, int(params["k"]), temperature, seed, "cot_sc")
    return LaneOutcome(majority(dataset, candidates), candidates, replies=replies)


async def _best_of_n(dataset: Dataset, problem: Problem, gateway: Gateway, params: dict[str, Any],
                     temperature: float, seed: int | None) -> LaneOutcome:
    candidates, replies = await _cot_samples(dataset, problem, gateway, int(params["n"]), temperature, seed,
                                             "best_of_n")
    # The task's validator picks (it never sees the gold); when it accepts none, the majority does.
    for cand in candidates:
        if cand is not None and await dataset.validate(problem, cand):
            return LaneOutcome(cand, candidates, replies=replies)
    return LaneOutcome(majority(dataset, candidates), candidates, stop_reason=LaneStop.NO_VALID_CANDIDATE,
                       replies=replies)


async def _react(dataset: Dataset, problem: Problem, gateway: Gateway, params: dict[str, Any], temperature: float,
                 seed: int | None) -> LaneOutcome:
    fam = dataset.family()
    assert fam.react is not None
    # The transcript grows in both forms: completion text for a base model, turns for a chat model
    # (its thought and action as the assistant's turn, the calculator's result as the user's).
    transcript = fam.react.text(fam.examples, problem.shown)
    messages = list(fam.react.messages(fam.examples, problem.shown))
    stop = ("\nResult:", *fam.cot_stop)
    replies: list[str] = []
    for step in range(int(params["max_steps"])):
        texts = await _ask(gateway, Prompt(text=transcript, messages=tuple(messages)), n=1, max_tokens=REACT_TOKENS,
                           stop=stop, temperature=temperature, seed=None if seed is None else seed + step,
                           purpose="react")
        replies.append(texts[0])
        reply = own_turn(texts[0])
        transcript += reply
        messages.append(Message("assistant", reply.strip()))
        said = plain(reply)
        if "Answer:" in said:
            line = said[said.rfind("Answer:"):].splitlines()[0].strip()
            return LaneOutcome(line, replies=tuple(replies))
        expression = calculator_call(said)
        if expression is None:
            # No action and no "Answer:" line: an answer the reply states in its own words
            # ("The answer is 72.", a \boxed{}) is its answer; otherwise there is none.
            stated = stated_answer(fam, said)
            return LaneOutcome(stated, stop_reason=LaneStop.DONE if stated is not None else LaneStop.NO_ACTION,
                               replies=tuple(replies))
        result = _calculate(expression)
        transcript += f"\nResult: {result}\n"
        messages.append(Message("user", f"Result: {result}"))
    return LaneOutcome(None, stop_reason=LaneStop.MAX_STEPS, replies=tuple(replies))


def _calculate(expression: str) -> str:
    """The tool: exact fraction arithmetic, so the model's arithmetic never has to be right."""
    try:
        value, _ = evaluate(expression)
    except ZeroDivisionError:
        return "error: division by zero"
    except (ExpressionError, ValueError, RecursionError):
        # Said so that the model can write its next action in the form the tool reads.
        return "error: write only numbers, + - * / and parentheses after Calculate:"
    return fmt(value)


async def _pot(dataset: Dataset, problem: Problem, gateway: Gateway, params: dict[str, Any], temperature: float,
               seed: int | None) -> LaneOutcome:
    """Program of thought: k programs that compute the answer, each run in the sandbox for what it
    prints; with k > 1 the printed answers are voted on (self-consistency over programs). The
    prompt is the math task's: this lane is what that task's search samples, without the search."""
    from ..grounding.programs import run_answer_program
    from ..tasks.math import MathTask

    query = MathTask().sample(problem.shown, ())
    texts = await _ask(gateway, query.prompt, n=int(params["k"]), max_tokens=query.max_tokens, stop=query.stop,
                       temperature=temperature, seed=seed, purpose="pot")
    runs = await asyncio.gather(*(run_answer_program(t) for t in texts))
    candidates: list[str | None] = [r.answer for r in runs]
    errors = "; ".join(r.why_not for r in runs if r.why_not)
    answer = majority(dataset, candidates) if len(candidates) > 1 else candidates[0]
    return LaneOutcome(answer, candidates if len(candidates) > 1 else [], error=errors or None,
                       replies=tuple(texts))


_SAMPLERS = {"io": _io, "cot": _cot, "cot_sc": _cot_sc, "best_of_n": _best_of_n, "react": _react, "pot": _pot}


# --- search lanes --------------------------------------------------------------------------


async def _search(lane: str, dataset: Dataset, problem: Problem, backend: Backend, limits: BudgetLimits,
                  params: dict[str, Any], temperature: float, seed: int | None, slots: ModelLimit | None,
                  store: Any, on_gateway: Any, role_models: dict[str, str] | None = None) -> LaneOutcome:
    from ..run.execute import execute
    from ..tasks.base import ProblemError, UnsupportedOperation

    try:
        corpus = sentence_corpus(problem) if lane == RESEARCH_LANE else \
            problem_corpus(problem if lane == AGENT_LANE else None)
        with corpus as knowledge:
            spec = search_spec(lane, dataset, problem, backend, limits, params, temperature, seed, store, knowledge,
                               role_models)
            result = await execute(spec, slots=slots, on_gateway=on_gateway)
    except ProblemError as exc:
        return LaneOutcome(None, stop_reason=LaneStop.PROBLEM_ERROR, error=str(exc))
    except UnsupportedOperation as exc:
        return LaneOutcome(None, stop_reason=LaneStop.UNSUPPORTED, error=str(exc))
    tool_calls = sum(len(n.extra.get(TOOL_CALLS) or ()) for n in result.graph)
    if lane == AGENT_LANE:
        return LaneOutcome(agent_answer(dataset, problem, result.answer), stop_reason=result.termination_reason,
                           error=result.error, run_id=result.run_id, graph=result.graph_cid, tool_calls=tool_calls,
                           result=result)
    if lane == RESEARCH_LANE:
        synthesis = result.research.answer if result.research is not None else None
        citations = tuple(synthesis.citations) if synthesis is not None else ()
        return LaneOutcome(agent_answer(dataset, problem, result.answer), stop_reason=result.termination_reason,
                           error=result.error, run_id=result.run_id, graph=result.graph_cid, tool_calls=tool_calls,
                           citations=citations, cited=tuple(sorted(cited_facts(problem, citations))), result=result)
    return LaneOutcome(final_answer(dataset, problem, result.answer), stop_reason=result.termination_reason,
                       error=result.error, run_id=result.run_id, graph=result.graph_cid, result=result)


# --- the agent lane --------------------------------------------------------------------------


def agent_task(problem: Problem) -> str:
    """The text the agent works: the problem's, or for a problem with its own documents the question alone, ending in
    '?'."""
    # The agent's input processor researches a task ending in '?' as a question (docs search,
    # then an answer) when document search is granted; one HotpotQA question of the 50 lacks its '?'.
    if not problem.documents:
        return problem.text
    question = " ".join((problem.question or problem.text).split())
    return question if question.endswith("?") else f"{question}?"


@contextmanager
def problem_corpus(problem: Problem | None) -> Iterator[str | None]:
    """A temporary folder with the problem's own documents, one Markdown file each (its title as heading), removed
    after."""
    if problem is None or not problem.documents:
        yield None
        return
    # Heading and text in one paragraph: the index's passage then holds the title's words too.
    with _corpus({corpus_file(i, title): f"# {title}\n{text}\n"
                  for i, (title, text) in enumerate(problem.documents, 1)}) as folder:
        yield folder


@contextmanager
def sentence_corpus(problem: Problem) -> Iterator[str | None]:
    """Like problem_corpus, with one sentence per line under each heading (citations.sentence_files); None without
    sentences."""
    if not problem.sentences:
        yield None
        return
    with _corpus(sentence_files(problem)) as folder:
        yield folder


@contextmanager
def _corpus(files: dict[str, str]) -> Iterator[str]:
    """A temporary folder holding these files (name -> text), removed after."""
    with tempfile.TemporaryDirectory(prefix="thoughtloom-corpus-") as folder:
        for name, text in files.items():
            (Path(folder) / name).write_text(text, encoding="utf-8")
        yield folder


def final_answer(dataset: Dataset, problem: Problem, answer: str | None) -> str | None:
    """A lane's answer as the product gives it to a user: on HotpotQA the span its answer line names, by
    the answer rules every lane shares (tasks/answers.span_answer: no label, yes or no only to a yes/no
    question, never a file name or the question's own subject, a span of the type the question asks for);
    other data sets' answers as read."""
    if dataset.spec.prompts != "hotpotqa" or answer is None:
        return answer
    # The question alone (a problem's text also holds the paragraphs, whose names may be the answer).
    question = problem.question or problem.text.rsplit("Question:", 1)[-1]
    # The paragraphs every lane was given: where no span of the answer fits the type the question asks for (a
    # year, a number), the span of that type they give (answer_types.typed_span), the same rule for every lane.
    return span_answer(question, answer, passages=problem.documents)


def agent_answer(dataset: Dataset, problem: Problem, answer: str | None) -> str | None:
    """The agent's (or research flow's) solution, read for the answer the data set's rule scores."""
    if answer is None or not answer.strip():
        return None
    if dataset.spec.prompts != "hotpotqa":
        # GSM8K's rule reads the number after the last 'answer is' / 'Answer:', else the last number.
        return answer
    # The agent answers in up to four lines, the span first; a marked line ('Answer:', 'Final
    # answer:', 'The answer is') is read first, and the lines after it stand in where the rules
    # refuse it (a file name, a yes to a question that is no yes/no question).
    return final_answer(dataset, problem, plain(answer))
