"""A model per role: the search operators' generator, evaluator and synthesizer, each on a model of its own.

Each role's model is a scripted OpenAI-compatible server on 127.0.0.1 (tests/openai_server.py), so
the tests see which server got which request, through the same HTTP backend a user's server gets.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from machine import scaled
from openai_server import FakeOpenAIServer, Reply, Seen, serve
from test_cli import assert_one_line_error, loom

from thoughtloom.api import areplay, asolve, solve
from thoughtloom.llm.budget import BudgetLimits, Pricing
from thoughtloom.llm.fake import ScriptedBackend
from thoughtloom.llm.routing import RoutedBackend
from thoughtloom.llm.types import GenerateRequest, Prompt
from thoughtloom.run.gateway import build_gateway
from thoughtloom.run.spec import SpecError, resolve
from thoughtloom.store.runs import load_calls, open_run
from thoughtloom.store.sqlite import SQLiteStore

QUESTION = "What is six times seven?"
#: A small general-task search: 2 samples per expansion, the best one kept, two levels, one value sample.
SEARCH: dict[str, Any] = {"breadth": 2, "beam": 1, "max_depth": 2, "value_samples": 1, "seed": 3}


def what(seen: Seen) -> str:
    """Which operator asked: generate, evaluate, aggregate, refine or synthesize (by the general task's prompts)."""
    user = seen.body["messages"][-1]["content"]
    for marker, name in (("Give the single best next step", "generate"), ("Evaluate the last step", "evaluate"),
                         ("Merge the strongest points", "aggregate"), ("Rewrite the last step", "refine"),
                         ("Give the final answer", "synthesize")):
        if marker in user:
            return name
    raise AssertionError(f"unexpected prompt: {user[-200:]}")


def reply(seen: Seen) -> Reply:
    """Answers that depend only on the prompt (so a resumed run asks what the first run asked)."""
    kind, n = what(seen), int(seen.body.get("n") or 1)
    steps = re.findall(r"^Step \d+: (.*)$", seen.body["messages"][-1]["content"], re.MULTILINE)
    if kind == "generate":
        texts = [f"work out part {len(steps) + 1}, way {i}" for i in range(n)]
    elif kind == "evaluate":
        texts = ["Score: 8/10" if steps[-1].endswith("way 0") else "Score: 5/10"] * n
    else:
        texts = {"aggregate": ["merged step"], "refine": ["refined step"], "synthesize": ["42"]}[kind] * n
    return Reply(200, {
        "id": "x", "object": "chat.completion", "created": 0, "model": seen.body.get("model"),
        "choices": [{"index": i, "message": {"role": "assistant", "content": t}, "finish_reason": "stop"}
                    for i, t in enumerate(texts)],
        "usage": {"prompt_tokens": 20, "completion_tokens": 4 * n, "total_tokens": 20 + 4 * n},
    })


@pytest.fixture
def servers() -> Iterator[dict[str, FakeOpenAIServer]]:
    """Three scripted servers: the run's model (main), and one each for the generator and the evaluator."""
    with ExitStack() as stack:
        out = {name: stack.enter_context(serve(FakeOpenAIServer(responder=reply)))
               for name in ("main", "generator", "evaluator", "synthesizer")}
        yield out


def spec(server: FakeOpenAIServer, name: str) -> str:
    """The model spec of a scripted server."""
    return f"openai-compatible:{server.url}@{name}#chat"


def kinds(server: FakeOpenAIServer) -> set[str]:
    """Which operators' requests a server got."""
    return {what(s) for s in server.seen}


def run_with_roles(servers: dict[str, FakeOpenAIServer], roles: tuple[str, ...] = ("generator", "evaluator"),
                   **settings: Any) -> Any:
    return solve(QUESTION, task="general", model=spec(servers["main"], "main"), controller=False,
                 role_models={r: spec(servers[r], r) for r in roles}, **{**SEARCH, **settings})


# --- which model answers which role ------------------------------------------------------------------


def test_each_role_with_a_model_of_its_own_is_answered_by_that_model_and_the_rest_by_the_runs(
        servers: dict[str, FakeOpenAIServer]) -> None:
    result = run_with_roles(servers)
    assert result.answer == "42"
    assert kinds(servers["generator"]) == {"generate"}
    assert kinds(servers["evaluator"]) == {"evaluate"}
    assert kinds(servers["main"]) == {"synthesize"}  # no synthesizer model: the run's model writes the answer


def test_got_merges_on_the_synthesizer_and_refines_on_the_generator(servers: dict[str, FakeOpenAIServer]) -> None:
    run_with_roles(servers, ("generator", "synthesizer"), strategy="got", breadth=3, beam=3, max_depth=1)
    assert kinds(servers["generator"]) == {"generate", "refine"}
    assert kinds(servers["synthesizer"]) == {"aggregate", "synthesize"}
    assert kinds(servers["main"]) == {"evaluate"}


# --- usage and budgets per role ------------------------------------------------------------------------


def test_usage_per_role_counts_each_models_requests_and_adds_up_to_the_total(
        servers: dict[str, FakeOpenAIServer]) -> None:
    usage = run_with_roles(servers).usage
    assert [r.role for r in usage.roles] == ["main", "evaluator", "generator"]
    for role in usage.roles:
        assert role.calls == len(servers[role.role].seen) > 0
        assert role.input_tokens == 20 * role.calls  # what the role's server reported
    assert sum(r.input_tokens for r in usage.roles) == usage.input_tokens
    assert sum(r.output_tokens for r in usage.roles) == usage.output_tokens
    assert sum(r.calls for r in usage.roles) == usage.calls


def test_the_json_result_reports_usage_per_role(servers: dict[str, FakeOpenAIServer]) -> None:
    out = run_with_roles(servers).to_dict()["usage"]
    assert set(out["roles"]) == {"main", "generator", "evaluator"}
    assert out["roles"]["evaluator"] == {"input_tokens": 20 * len(servers["evaluator"].seen),
                                         "output_tokens": 4 * len(servers["evaluator"].seen),
                                         "calls": len(servers["evaluator"].seen), "cost_usd": 0.0}


def test_a_run_without_role_models_reports_no_usage_per_role() -> None:
    result = solve(QUESTION, task="general", model=ScriptedBackend(default="Score: 7/10"), controller=False, **SEARCH)
    assert result.usage.roles == () and "roles" not in result.to_dict()["usage"]


def test_a_call_budget_counts_the_requests_of_every_roles_model(servers: dict[str, FakeOpenAIServer]) -> None:
    result = run_with_roles(servers, budget=BudgetLimits(calls=4), max_depth=3)
    sent = sum(len(s.seen) for s in servers.values())
    assert result.termination_reason == "budget_calls"
    assert sent == result.usage.calls == 4
    assert servers["generator"].seen and servers["evaluator"].seen


def test_each_routed_call_is_priced_at_its_own_models_price() -> None:
    cheap, dear = ScriptedBackend(default="x"), ScriptedBackend(default="x")
    cheap.pricing, dear.pricing = Pricing(1.0, 1.0), Pricing(100.0, 100.0)
    gateway = build_gateway(RoutedBackend(cheap, {"evaluator": dear}))
    prompt = Prompt(text="one two three")  # 3 words in, 1 out: 4 tokens each

    async def go() -> None:
        await gateway.generate(GenerateRequest(prompt=prompt, max_tokens=8))
        await gateway.generate(GenerateRequest(prompt=prompt, max_tokens=8, route="evaluator"))

    asyncio.run(go())
    assert [r.cost_usd for r in gateway.records] == [pytest.approx(4e-6), pytest.approx(4e-4)]
    assert gateway.budget.routes["evaluator"].cost_usd == pytest.approx(4e-4)
    assert gateway.budget.cost_usd == pytest.approx(4e-6 + 4e-4)


def test_a_dollar_budget_reserves_a_routed_call_at_its_own_models_price() -> None:
    cheap, dear = ScriptedBackend(default="x"), ScriptedBackend(default="x")
    cheap.pricing, dear.pricing = Pricing(1.0, 1.0), Pricing(1000.0, 1000.0)
    # 3 + 8 tokens reserved: $0.000011 on the cheap model, $0.011 on the dear one.
    gateway = build_gateway(RoutedBackend(cheap, {"evaluator": dear}), BudgetLimits(cost_usd=0.001))
    prompt = Prompt(text="one two three")

    async def go() -> str | None:
        await gateway.generate(GenerateRequest(prompt=prompt, max_tokens=8))
        try:
            await gateway.generate(GenerateRequest(prompt=prompt, max_tokens=8, route="evaluator"))
        except Exception as exc:  # noqa: BLE001 - the refusal is what is tested
            return getattr(exc, "limit", None)
        return None

    assert asyncio.run(go()) == "cost_usd"
    assert (len(cheap.calls), len(dear.calls)) == (1, 0)


def test_a_role_on_the_runs_own_model_shares_its_backend(servers: dict[str, FakeOpenAIServer]) -> None:
    from thoughtloom.run.execute import live_backend

    main, other = spec(servers["main"], "main"), spec(servers["generator"], "generator")
    backend: Any = live_backend(resolve(QUESTION, task="general", model=main,
                                        role_models={"evaluator": main, "synthesizer": other, "generator": other}))
    routes = backend.routes
    assert routes["evaluator"].inner is backend.inner  # one model loaded, not two
    assert routes["generator"] is routes["synthesizer"].inner and routes["generator"] is not backend.inner
    asyncio.run(backend.aclose())


# --- stored runs -------------------------------------------------------------------------------------------


def test_a_stored_run_keeps_its_role_models_and_replays_to_the_same_graph_with_no_model_call(
        servers: dict[str, FakeOpenAIServer], tmp_path: Path) -> None:
    store = str(tmp_path / "runs.db")
    result = run_with_roles(servers, store=store, concurrency=1)
    sent = {name: len(s.seen) for name, s in servers.items()}
    with SQLiteStore(store) as opened:
        replayed, verdict = asyncio.run(areplay(opened, str(result.run_id)))
    assert verdict.identical, str(verdict)
    assert verdict.model_calls == 0 and {name: len(s.seen) for name, s in servers.items()} == sent
    assert str(replayed.graph_cid) == str(result.graph_cid)
    assert [(r.role, r.calls) for r in replayed.usage.roles] == [(r.role, r.calls) for r in result.usage.roles]


def test_an_interrupted_run_with_role_models_resumes_on_the_same_models_without_asking_again(
        servers: dict[str, FakeOpenAIServer], tmp_path: Path) -> None:
    store = str(tmp_path / "runs.db")
    for server in servers.values():
        server.delay_s = 0.05
    evaluator = servers["evaluator"]

    async def interrupted() -> Any:
        task = asyncio.ensure_future(asolve(
            QUESTION, task="general", model=spec(servers["main"], "main"), controller=False, store=store,
            role_models={r: spec(servers[r], r) for r in ("generator", "evaluator")}, concurrency=1,
            **{**SEARCH, "max_depth": 3}))
        while len(evaluator.seen) < 2 and not task.done():
            await asyncio.sleep(0.01)
        task.cancel()
        return await task

    first = asyncio.run(interrupted())
    assert first.termination_reason == "interrupted"
    before = len(evaluator.seen)
    with SQLiteStore(store) as opened:
        # Seeds follow from each request's content: a recorded exchange's seed names it. (A request in
        # flight when the run was cancelled has no answer recorded, so it is asked again.)
        recorded = {c.seed for c in load_calls(opened, open_run(opened, str(first.run_id)).calls_cid)}
    resumed = loom("resume", str(first.run_id), "--store", store, "--json", "--quiet",
                   "--model", spec(servers["main"], "main"),
                   *(arg for r in ("generator", "evaluator") for arg in (f"--{r}-model", spec(servers[r], r))))
    assert resumed.returncode == 0, resumed.stderr
    out = json.loads(resumed.stdout)
    assert out["answer"] == "42" and set(out["usage"]["roles"]) == {"main", "generator", "evaluator"}
    again = [s.body["seed"] for s in evaluator.seen[before:]]
    assert recorded and again and not set(again) & recorded
    assert {what(s) for s in evaluator.seen} == {"evaluate"}


# --- settings that cannot work ---------------------------------------------------------------------------


def test_an_unknown_role_is_refused_in_one_line_naming_the_strategys_roles() -> None:
    with pytest.raises(SpecError, match="no role 'critic' in --strategy bfs; its roles are generator, evaluator"):
        resolve(QUESTION, task="general", role_models={"critic": "openai:gpt-4o-mini"})


def test_a_research_role_on_a_search_strategy_is_refused() -> None:
    with pytest.raises(SpecError, match="no role 'brancher' in --strategy bfs"):
        resolve(QUESTION, task="general", role_models={"brancher": "openai:gpt-4o-mini"})


def test_a_strategy_without_roles_refuses_role_models() -> None:
    with pytest.raises(SpecError, match="--strategy recursive has no roles"):
        resolve(QUESTION, task="general", search={"strategy": "recursive"},
                role_models={"evaluator": "openai:gpt-4o-mini"})


def test_a_bad_role_model_spec_exits_2_with_one_line_before_any_call(server: FakeOpenAIServer) -> None:
    proc = loom("solve", "--task", "general", "--model", spec(server, "main"), "--evaluator-model", "nosuch:thing",
                QUESTION)
    assert_one_line_error(proc, "--evaluator-model")
    assert server.seen == []


def test_role_models_on_a_strategy_without_roles_exit_2_with_one_line(server: FakeOpenAIServer) -> None:
    proc = loom("solve", "--task", "general", "--strategy", "recursive", "--model", spec(server, "main"),
                "--generator-model", spec(server, "gen"), QUESTION)
    assert_one_line_error(proc, "--strategy recursive has no roles")


# --- the command -----------------------------------------------------------------------------------------


def test_loom_solve_runs_each_role_on_its_model_and_prints_usage_per_role(
        servers: dict[str, FakeOpenAIServer]) -> None:
    args = ["solve", "--task", "general", "--model", spec(servers["main"], "main"), "--breadth", "2", "--beam", "1",
            "--depth", "2", "--value-samples", "1", "--no-store", "--quiet",
            "--evaluator-model", spec(servers["evaluator"], "evaluator"),
            "--synthesizer-model", spec(servers["synthesizer"], "synthesizer"), QUESTION]
    text = loom(*args)
    assert text.returncode == 0, text.stderr
    assert re.search(r"usage per role: main [\d,]+ tokens, \d+ calls · evaluator [\d,]+ tokens, \d+ calls · "
                     r"synthesizer [\d,]+ tokens, 1 call", text.stdout), text.stdout
    assert kinds(servers["evaluator"]) == {"evaluate"} and kinds(servers["synthesizer"]) == {"synthesize"}
    assert kinds(servers["main"]) == {"generate"}


# --- through the real parts --------------------------------------------------------------------------------


@pytest.mark.local_model
def test_the_embedded_model_generates_while_an_http_server_evaluates(servers: dict[str, FakeOpenAIServer]) -> None:
    evaluator = servers["evaluator"]
    proc = loom("solve", "--task", "general", "--model", "local", "--evaluator-model", spec(evaluator, "evaluator"),
                "--breadth", "2", "--beam", "1", "--depth", "1", "--value-samples", "1", "--seed", "1",
                "--budget-tokens", "4000", "--no-store", "--quiet", "--json", QUESTION, timeout=scaled(600))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    roles = out["usage"]["roles"]
    assert out["model"].startswith("local:") and out["answer"]
    assert kinds(evaluator) == {"evaluate"} and roles["evaluator"]["calls"] == len(evaluator.seen)
    assert roles["main"]["calls"] >= 2 and roles["main"]["output_tokens"] > 0  # generate and the final answer
    for key in ("input_tokens", "output_tokens", "calls"):
        assert roles["main"][key] + roles["evaluator"][key] == out["usage"][key]


# --- in loom bench ------------------------------------------------------------------------------------


def bench_with_roles(servers: dict[str, FakeOpenAIServer], lanes: list[str], roles: dict[str, str]) -> Any:
    from thoughtloom.eval.datasets import given_problems
    from thoughtloom.eval.runner import BenchOptions, build_protocol, run_protocol
    from thoughtloom.llm.registry import make_backend

    dataset = given_problems(QUESTION, "general")
    protocol = build_protocol(BenchOptions(tasks=[dataset.name], lanes=lanes, model=spec(servers["main"], "main"),
                                           limit=1, budget_tokens=4000,
                                           lane_params={"tot": {k: v for k, v in SEARCH.items() if k != "seed"}},
                                           role_models=roles), {dataset.name: dataset})

    async def go() -> Any:
        backend = make_backend(protocol.model)
        try:
            return await run_protocol(protocol, backend, None, datasets={dataset.name: dataset}, keep_results=True)
        finally:
            await backend.aclose()

    return protocol, asyncio.run(go())


def test_a_bench_runs_its_search_lanes_roles_on_their_models_and_the_other_lanes_on_its_model(
        servers: dict[str, FakeOpenAIServer]) -> None:
    protocol, _ = bench_with_roles(servers, ["io", "tot"], {"evaluator": spec(servers["evaluator"], "evaluator")})
    assert protocol.role_models == {"evaluator": spec(servers["evaluator"], "evaluator")}
    assert kinds(servers["evaluator"]) == {"evaluate"}
    markers = ("Give the single best next step", "Evaluate the last step", "Give the final answer")
    search = [s for s in servers["main"].seen if any(m in s.body["messages"][-1]["content"] for m in markers)]
    assert {what(s) for s in search} == {"generate", "synthesize"}  # the tot lane's evaluations went elsewhere
    assert len(servers["main"].seen) > len(search)  # and the io lane asked the run's model


def test_role_models_are_part_of_a_bench_protocol_and_its_fingerprint(servers: dict[str, FakeOpenAIServer]) -> None:
    from thoughtloom.eval.protocol import Protocol

    with_roles, _ = bench_with_roles(servers, ["tot"], {"evaluator": spec(servers["evaluator"], "evaluator")})
    without, _ = bench_with_roles(servers, ["tot"], {})
    assert with_roles.fingerprint() != without.fingerprint()
    assert Protocol.from_dict(with_roles.to_dict()).role_models == with_roles.role_models
    assert "role_models" not in {k for k, v in without.to_dict().items() if v}


def test_loom_bench_refuses_a_role_model_that_does_not_parse_in_one_line(tmp_path: Path) -> None:
    proc = loom("bench", "--tasks", "game24", "--lanes", "tot", "--evaluator-model", "nonsense",
                "--data-dir", str(tmp_path), "--out", str(tmp_path / "out"))
    assert_one_line_error(proc, "evaluator")
