"""Agent mode: typed nodes worked by processors, the dependency-ready scheduler, tools, storage and replay."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import pytest
from machine import scaled

from thoughtloom.api import agent, areplay
from thoughtloom.graph import EdgeKind, NodeKind, NodeStatus
from thoughtloom.llm.fake import ScriptedBackend
from thoughtloom.run.gateway import build_gateway
from thoughtloom.search.agent.kinds import arithmetic_claims, default_processors
from thoughtloom.search.agent.processors import NewNode, ProcessorResult, succeeded
from thoughtloom.search.config import SearchConfig
from thoughtloom.search.engine import search
from thoughtloom.search.events import NodeProcessed
from thoughtloom.search.stop import StopReason
from thoughtloom.store.sqlite import SQLiteStore
from thoughtloom.tasks.agent import AgentTask, PlanStep, ToolCallError, check_plan, parse_plan, parse_tool_call
from thoughtloom.grounding.arith import evaluate, fmt
from thoughtloom.tools import Toolbox, ToolError, ToolSpec

TRIP = "Plan a 3-day trip to Lisbon for two under 900 EUR; check the arithmetic"
PLAN = ("1. Find flights.\n2. Find a hotel.\n3. [calc] Add up flights and hotel. (after 1, 2)\n"
        "4. Check the total. (after 3)")


class Calc:
    """An exact calculator with a call log (the tests' own: the built-in one is tested with the tools)."""

    spec = ToolSpec("calc", "exact arithmetic", {"type": "object", "properties": {"expression": {"type": "string"}},
                                                 "required": ["expression"]})

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def call(self, args: dict[str, Any]) -> str:
        self.calls.append(args["expression"])
        value, _ = evaluate(args["expression"])
        return f"{args['expression']} = {fmt(value)}"


class Broken:
    """A calculator that fails the first `failures` calls."""

    spec = Calc.spec

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls = 0

    async def call(self, args: dict[str, Any]) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise ToolError("the calculator is down")
        value, _ = evaluate(args["expression"])
        return fmt(value)


def trip_model(latency_s: float = 0.0, *, total: str = "Flights 300 EUR and hotel 300 EUR: 600 EUR in all.",
               verdict: str = "VERDICT: ok\nREASON: under budget") -> ScriptedBackend:
    model = ScriptedBackend(default="ok", latency_s=latency_s)
    model.on("Tools: calc", PLAN)
    model.on("Step: Find flights", "Flights: 2 x 150 = 300 EUR")
    model.on("Step: Find a hotel", "Hotel: 3 x 100 = 300 EUR")
    model.on("Step: Add up", 'calc: {"expression": "300 + 300"}')
    model.on("Step: Check the total", "Total 600 EUR, under 900.")
    model.on("Final answer:", total)
    model.on("VERDICT", verdict)
    model.on("Corrected answer:", "Flights 300 EUR and hotel 300 EUR: 600 EUR in all (corrected).")
    return model


async def run(model: ScriptedBackend, tools: Toolbox | None = None, **config: Any) -> Any:
    return await search(AgentTask(), TRIP, build_gateway(model), SearchConfig(strategy="agent", **config),
                        tools=tools if tools is not None else Toolbox([Calc()]))


def by_content(result: Any, start: str) -> Any:
    return next(n for n in result.graph if n.content.startswith(start))


# --- plans -------------------------------------------------------------------------------------


def test_a_plan_is_read_as_numbered_steps_with_their_dependencies_and_granted_tools() -> None:
    steps = parse_plan(PLAN + "\n5. [web] Book it. (after 4)", ["calc"])
    assert steps[2] == PlanStep(3, "Add up flights and hotel", (1, 2), "calc")
    assert steps[4].tool is None  # web was not granted


def test_a_plan_whose_dependencies_form_a_cycle_is_refused_with_the_cycle() -> None:
    why = check_plan([PlanStep(1, "a", (2,)), PlanStep(2, "b", (3,)), PlanStep(3, "c", (1,))])
    assert why is not None and "cycle" in why and "step 1" in why and "step 3" in why


def test_the_plan_processor_refuses_a_cyclic_plan_and_the_node_fails_with_the_reason() -> None:
    # A cyclic plan cannot come from parse_plan (it keeps only dependencies on earlier steps), so the
    # plan node is made directly, as a user's processor could make it.
    registry = default_processors()

    class CyclicInput:
        async def run(self, node: Any, env: Any) -> ProcessorResult:
            steps = [{"number": 1, "text": "a", "after": [2]}, {"number": 2, "text": "b", "after": [1]}]
            return succeeded("plan", new_nodes=(NewNode("plan", "a cyclic plan", data={"steps": steps}),))

    registry.register(NodeKind.INPUT, CyclicInput())
    result = asyncio.run(search(AgentTask(), TRIP, build_gateway(ScriptedBackend(default="ok")),
                                SearchConfig(strategy="agent", on_failure="fail"), processors=registry))
    plan = by_content(result, "a cyclic plan")
    assert plan.status is NodeStatus.FAILED
    assert "cycle" in plan.extra["error"] and len(result.graph) == 2


# --- the scheduler -------------------------------------------------------------------------------


def test_the_trip_runs_plan_parallel_steps_calculator_synthesis_critique_and_solution() -> None:
    result = asyncio.run(run(trip_model()))
    kinds = [n.kind for n in result.graph]
    assert kinds == [NodeKind.INPUT, NodeKind.PLAN, NodeKind.ANALYSIS, NodeKind.ANALYSIS, NodeKind.EVIDENCE,
                     NodeKind.ANALYSIS, NodeKind.SYNTHESIS, NodeKind.CRITIQUE, NodeKind.SOLUTION]
    assert result.answer == "Flights 300 EUR and hotel 300 EUR: 600 EUR in all."
    assert result.termination_reason is StopReason.GOAL_REACHED
    assert by_content(result, "Add up").extra["text"] == "300 + 300 = 600"


def test_a_node_that_depends_on_two_parents_waits_for_both() -> None:
    events: list[Any] = []
    model = trip_model(latency_s=0.02)

    async def go() -> Any:
        return await search(AgentTask(), TRIP, build_gateway(model), SearchConfig(strategy="agent"),
                            tools=Toolbox([Calc()]), sinks=[events.append])

    result = asyncio.run(go())
    add = by_content(result, "Add up")
    flights, hotel = by_content(result, "Find flights"), by_content(result, "Find a hotel")
    deps = [p for p in result.graph.parents(add.id) if result.graph.edge(p, add.id).kind is EdgeKind.DEPENDENCY]
    assert {flights.id, hotel.id} <= set(deps)
    done = [e.node_id for e in events if isinstance(e, NodeProcessed)]
    assert done.index(add.id) > max(done.index(flights.id), done.index(hotel.id))
    # the two independent steps were asked at once, not one after the other
    prompts = [c.prompt.as_text() for c in model.calls]
    assert model.peak_in_flight >= 2 and any("Find flights" in p for p in prompts)


def test_independent_steps_run_concurrently_and_the_parallel_limit_holds() -> None:
    model = trip_model(latency_s=0.05)
    asyncio.run(run(model, beam=1))
    assert model.peak_in_flight == 1
    model = trip_model(latency_s=0.05)
    asyncio.run(run(model, beam=4))
    assert model.peak_in_flight == 2


def test_a_critique_that_finds_wrong_arithmetic_adds_a_contradiction_edge_and_the_solution_is_revised() -> None:
    model = trip_model(total="Flights 300 EUR + hotel 300 EUR: 300 + 300 = 700 EUR, under 900.")
    calc = Calc()
    result = asyncio.run(run(model, Toolbox([calc])))
    synthesis = result.graph.by_kind(NodeKind.SYNTHESIS)[0]
    critique = result.graph.by_kind(NodeKind.CRITIQUE)[0]
    edge = result.graph.edge(synthesis.id, critique.id)
    assert edge.kind is EdgeKind.CONTRADICTION and edge.weight == 1.0
    assert critique.extra["result"]["refutes"] is True and "is 600, not 700" in critique.extra["result"]["reasons"][0]
    assert "300 + 300 = 700" in calc.calls  # the check went through the calculator tool, recorded on the node
    assert critique.extra["tool_calls"][0]["args"] == {"expression": "300 + 300 = 700"}
    assert result.answer.endswith("(corrected).")


def test_a_solution_whose_synthesis_failed_fails_rather_than_answer_with_the_steps_description() -> None:
    model = trip_model(total="   ")
    result = asyncio.run(run(model, on_failure="skip"))
    solution = result.graph.by_kind(NodeKind.SOLUTION)[0]
    assert solution.status is NodeStatus.FAILED and "synthesis it depends on failed" in solution.extra["error"]
    assert result.answer != "Put the results together into one answer"


def test_a_critique_refuting_in_words_labels_the_edge_with_its_confidence() -> None:
    result = asyncio.run(run(trip_model(verdict="VERDICT: wrong\nREASON: no food budget")))
    synthesis = result.graph.by_kind(NodeKind.SYNTHESIS)[0]
    critique = result.graph.by_kind(NodeKind.CRITIQUE)[0]
    edge = result.graph.edge(synthesis.id, critique.id)
    assert edge.kind is EdgeKind.CONTRADICTION and edge.weight == 0.6
    assert result.graph.by_kind(NodeKind.SOLUTION)[0].extra["result"]["problems"] == ["no food budget"]


def test_a_failed_tool_call_is_replanned_once_and_its_dependents_wait_for_the_retry() -> None:
    tool = Broken(failures=1)
    result = asyncio.run(run(trip_model(), Toolbox([tool]), on_failure="replan"))
    first, retry = [n for n in result.graph if n.content.startswith("Add up")]
    assert first.status is NodeStatus.FAILED and "the calculator is down" in first.extra["error"]
    assert retry.status is NodeStatus.SUCCEEDED and retry.extra["retry_of"] == first.id
    assert result.graph.edge(first.id, retry.id).kind is EdgeKind.REFINEMENT
    check = by_content(result, "Check the total")
    assert retry.id in result.graph.parents(check.id) and check.status is NodeStatus.SUCCEEDED
    assert result.answer is not None


def test_under_the_fail_policy_a_failed_tool_call_cancels_its_dependents() -> None:
    result = asyncio.run(run(trip_model(), Toolbox([Broken(failures=5)]), on_failure="fail"))
    check = by_content(result, "Check the total")
    assert check.status is NodeStatus.CANCELLED and "failed" in check.extra["error"]
    assert result.graph.by_kind(NodeKind.SOLUTION)[0].status is NodeStatus.CANCELLED
    assert result.answer is None


def test_under_the_skip_policy_dependents_run_told_the_step_failed() -> None:
    model = trip_model()
    result = asyncio.run(run(model, Toolbox([Broken(failures=5)]), on_failure="skip"))
    assert by_content(result, "Check the total").status is NodeStatus.SUCCEEDED
    told = [c.prompt.as_text() for c in model.calls if "Step: Check the total" in c.prompt.as_text()]
    assert "(failed: calc: error: the calculator is down)" in told[0]
    assert result.answer is not None


def test_a_malformed_tool_call_is_counted_and_retried_never_crashing_the_run() -> None:
    model = trip_model()
    model.on("Step: Add up", "I would add them up.", 'calc: {"expression": "300 + 300"}')
    result = asyncio.run(run(model))
    assert result.graph.node(0).extra["agent_summary"]["malformed_tool_calls"] == 1
    assert by_content(result, "Add up").extra["text"] == "300 + 300 = 600"


def test_tool_arguments_that_break_the_schema_are_refused_before_the_call() -> None:
    calc = Calc()
    model = trip_model()
    model.on("Step: Add up", 'calc: {"expr": "300 + 300"}')
    result = asyncio.run(run(model, Toolbox([calc]), on_failure="skip"))
    add = by_content(result, "Add up")
    assert add.extra["tool_calls"][0]["status"] == "invalid" and calc.calls == []


def test_a_user_processor_for_a_new_kind_is_run_by_the_scheduler() -> None:
    registry = default_processors()

    class Budget:
        async def run(self, node: Any, env: Any) -> ProcessorResult:
            return succeeded(f"budget checked for: {env.task[:10]}")

    class Input:
        async def run(self, node: Any, env: Any) -> ProcessorResult:
            return succeeded("x", new_nodes=(NewNode("budget_check", "Check the budget"),))

    registry.register("budget_check", Budget(), base=NodeKind.ANALYSIS)
    registry.register(NodeKind.INPUT, Input())
    result = asyncio.run(search(AgentTask(), TRIP, build_gateway(ScriptedBackend(default="ok")),
                                SearchConfig(strategy="agent"), processors=registry))
    node = result.graph.node(1)
    assert node.kind is NodeKind.ANALYSIS and node.extra["kind"] == "budget_check"
    assert node.extra["text"] == "budget checked for: Plan a 3-d"


def test_a_processor_that_raises_fails_its_node_not_the_run() -> None:
    registry = default_processors()

    class Crash:
        async def run(self, node: Any, env: Any) -> ProcessorResult:
            raise RuntimeError("bug")

    registry.register(NodeKind.CRITIQUE, Crash())
    result = asyncio.run(search(AgentTask(), TRIP, build_gateway(trip_model()),
                                SearchConfig(strategy="agent", on_failure="skip"), tools=Toolbox([Calc()]),
                                processors=registry))
    critique = result.graph.by_kind(NodeKind.CRITIQUE)[0]
    assert critique.status is NodeStatus.FAILED and "RuntimeError: bug" in critique.extra["error"]
    assert result.answer is not None


def test_the_controller_switches_to_depth_first_when_the_budget_runs_low() -> None:
    from thoughtloom.control import ControlReport
    from thoughtloom.control.controller import Controller
    from thoughtloom.llm.budget import BudgetLimits

    async def go() -> Any:
        gateway = build_gateway(trip_model(), BudgetLimits(tokens=1100))
        return await search(AgentTask(), TRIP, gateway, SearchConfig(strategy="agent"), tools=Toolbox([Calc()]),
                            controller=Controller())

    result = asyncio.run(go())
    assert result.graph.node(0).extra["agent_summary"]["order"] == "depth_first"
    assert isinstance(result.control, ControlReport)
    assert any(d.kind == "order" for d in result.control.decisions)
    assert result.answer is not None


# --- tool calls in replies ------------------------------------------------------------------------


def test_a_tool_call_is_read_from_json_from_name_and_json_and_from_name_and_plain_text() -> None:
    tools = {"calc": Calc.spec}
    assert parse_tool_call('{"tool": "calc", "args": {"expression": "1+1"}}', tools).args == {"expression": "1+1"}
    assert parse_tool_call('calc: {"expression": "2*3"}', tools).args == {"expression": "2*3"}
    assert parse_tool_call("Calc: 2 * 3", tools).args == {"expression": "2 * 3"}


def test_a_reply_naming_no_granted_tool_is_not_a_call() -> None:
    with pytest.raises(ToolCallError):
        parse_tool_call("shell: rm -rf /", {"calc": Calc.spec})


def test_written_out_calculations_are_found_for_the_exact_check() -> None:
    assert arithmetic_claims("Hotel: 3 x 100 = 300 EUR; food 2 * 45.5 = 91") == [("3 * 100", "300"),
                                                                                 ("2 * 45.5", "91")]
    assert arithmetic_claims("2 buses x 48.00 EUR = 112 EUR") == [("2 * 48.00", "112")]


# --- storage and replay ---------------------------------------------------------------------------


def test_a_stored_agent_run_replays_with_no_model_or_tool_call_into_the_same_graph(tmp_path: Any) -> None:
    model = trip_model(latency_s=0.01, total="Flights 300 EUR + hotel 300 EUR: 300 + 300 = 700 EUR, under 900.")
    store = str(tmp_path / "runs.db")
    result = asyncio.run(agent(TRIP, tools=["calc"], model=model, store=store, controller=False, seed=3))
    assert result.graph_cid is not None
    calls = [c for n in result.graph for c in n.extra.get("tool_calls", [])]
    assert len(calls) == 2 and all(c["status"] == "ok" for c in calls)
    live_calls = len(model.calls)
    with SQLiteStore(store) as opened:
        replayed, verdict = asyncio.run(areplay(opened, result.run_id))
    assert verdict.identical, str(verdict)
    assert (verdict.model_calls, verdict.tool_calls) == (0, 0) and verdict.tools_replayed == 2
    assert len(model.calls) == live_calls
    assert replayed.answer == result.answer and str(replayed.graph_cid) == str(result.graph_cid)
    critique = replayed.graph.by_kind(NodeKind.CRITIQUE)[0]
    synthesis = replayed.graph.by_kind(NodeKind.SYNTHESIS)[0]
    assert replayed.graph.edge(synthesis.id, critique.id).kind is EdgeKind.CONTRADICTION


# --- real tools ------------------------------------------------------------------------------------


def test_the_agent_calls_a_real_mcp_server_and_a_replay_does_not_start_it(tmp_path: Any) -> None:
    import json
    import sys
    from pathlib import Path

    server = Path(sys.executable).parent / "mcp-server-time"  # the dev extra installs it
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"time": {"command": str(server), "args": ["--local-timezone", "UTC"]}}}))
    model = ScriptedBackend(default="ok")
    model.on("Tools: time.", "1. [time.get_current_time] Get the current time in Lisbon.\n2. Say it. (after 1)")
    model.on("Step: Get the current time", 'time.get_current_time: {"timezone": "Europe/Lisbon"}')
    model.on("Final answer:", "It is morning in Lisbon.")
    model.on("VERDICT", "VERDICT: ok\nREASON: fine")
    store = str(tmp_path / "runs.db")
    result = asyncio.run(agent("Tell me the time in Lisbon", tools=["mcp:time"], mcp_config=str(config), model=model,
                               store=store, controller=False))
    evidence = by_content(result, "Get the current time")
    call = evidence.extra["tool_calls"][0]
    assert (call["tool"], call["status"]) == ("time.get_current_time", "ok") and "Europe/Lisbon" in call["output"]
    config.write_text("{}")  # a replay must not need the server: it answers from the record
    with SQLiteStore(store) as opened:
        _, verdict = asyncio.run(areplay(opened, result.run_id))
    assert verdict.identical and (verdict.model_calls, verdict.tool_calls, verdict.tools_replayed) == (0, 0, 1)


def test_a_stored_agent_run_lists_a_folder_holding_a_name_that_is_not_utf8_and_finishes(tmp_path: Any) -> None:
    import os

    from thoughtloom.store.runs import open_run, run_ids

    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "plan.txt").write_text("Lisbon in May\n")
    with open(os.fsencode(folder) + b"/\xff.txt", "wb") as fh:
        fh.write(b"a name from another encoding\n")
    model = ScriptedBackend(default="ok")
    model.on("Tools: files", "1. [files] List the notes folder.\n2. Say what is there. (after 1)")
    model.on("Step: List the notes", 'files: {"path": "."}')
    model.on("Final answer:", "Two notes.")
    model.on("VERDICT", "VERDICT: ok\nREASON: fine")
    store = str(tmp_path / "runs.db")
    result = asyncio.run(agent("What notes are there?", tools=["files"], read_roots=[str(folder)], model=model,
                               store=store, controller=False))
    listing = by_content(result, "List the notes").extra["tool_calls"][0]
    assert listing["status"] == "ok" and "\\xff.txt" in listing["output"] and "plan.txt" in listing["output"]
    assert result.answer == "Two notes." and result.store_error is None
    with SQLiteStore(store) as opened:
        assert open_run(opened, run_ids(opened)[0]).status == "finished"


def test_the_built_in_python_tool_runs_a_code_step_in_the_sandbox() -> None:
    model = ScriptedBackend(default="ok")
    model.on("Tools: python", "1. [python] Compute 2 to the power 20.\n2. Report it. (after 1)")
    model.on("Step: Compute 2", "```python\nprint(2 ** 20)\n```")
    model.on("Final answer:", "2**20 = 1048576")
    model.on("VERDICT", "VERDICT: ok\nREASON: fine")
    result = asyncio.run(agent("What is 2 to the power 20?", tools=["python"], model=model, controller=False))
    code = result.graph.by_kind(NodeKind.CODE)[0]
    assert code.status is NodeStatus.SUCCEEDED and code.extra["text"] == "1048576"
    assert code.extra["tool_calls"][0]["tool"] == "python"


# --- the command line ------------------------------------------------------------------------------


@pytest.mark.parametrize("args, fragment", [
    (["--tools", "calc,shell"], "shell"),
    (["--tools", "calc,,python"], "empty name"),
    (["--tools", "calc, "], "empty name"),
    (["--tools", "calc,python,calc"], "names 'calc' twice"),
    (["--tools", ","], "names nothing"),
    (["--tools", "docs"], "--knowledge"),
    (["--tools", "files"], "--allow-read"),
    (["--tools", "mcp:time"], "--mcp-config"),
    (["--tools", "mcp:time", "--mcp-config", "/nonexistent/mcp.json"], "/nonexistent/mcp.json"),
    (["--tools", "mcp:time", "--mcp-config", "/dev/zero"], "/dev/zero is a device, not a regular file"),
    (["--on-failure", "retry"], "--on-failure"),
    (["--parallel", "0"], "--parallel"),
    (["--bridge-hops", "-1"], "--bridge-hops must be at least 0"),
])
def test_bad_agent_options_are_one_line_exit_2_before_any_model_call(args: list[str], fragment: str) -> None:
    from test_cli import assert_one_line_error, loom

    proc = loom("agent", "Plan a picnic", "--quiet", "--no-store", "--model", "openai-compatible:http://127.0.0.1:9@m",
                *args)
    assert_one_line_error(proc, fragment)


def test_loom_agent_prints_the_answer_the_trace_and_a_mermaid_picture(server: Any, tmp_path: Any) -> None:
    import json

    from test_cli import loom

    server.responder = trip_reply
    picture = tmp_path / "trip.mmd"
    proc = loom("agent", TRIP, "--quiet", "--no-store", "--json", "--mermaid", str(picture),
                "--model", f"openai-compatible:{server.url}@scripted#chat")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["answer"].startswith("Flights") and out["agent"]["summary"]["tool_calls"] == 1
    kinds = [n["kind"] for n in out["agent"]["nodes"]]
    assert kinds[:2] == ["input", "plan"] and kinds[-3:] == ["synthesis", "critique", "solution"]
    mermaid = picture.read_text()
    assert "evidence: Add up flights and hotel" in mermaid and "-->|dependency|" in mermaid


def served(model: ScriptedBackend) -> Callable[[Any], Any]:
    """A script's rules (each rule's first reply), served as chat replies by the OpenAI-compatible test server."""
    from openai_server import Reply

    def reply(seen: Any) -> Any:
        text = "\n".join(m["content"] for m in seen.body["messages"])
        answer = next((rule.replies[0] for rule in reversed(model.rules) if rule.when in text), "ok")
        return Reply(200, {
            "id": "x", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": answer}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
        })

    return reply


#: The trip script of trip_model, served by the OpenAI-compatible test server.
trip_reply = served(trip_model())


def test_an_agent_run_the_wall_budget_cuts_off_mid_tool_call_still_shows_the_steps_it_worked(server: Any) -> None:
    from test_cli import loom

    script = trip_model()
    script.on("Tools: python", PLAN.replace("[calc]", "[python]"))
    # A tool call that outlasts the run's wall budget: the budget, not the tool, ends it.
    script.on("Step: Add up", "import time\ntime.sleep(60)")
    server.responder = served(script)
    proc = loom("agent", TRIP, "--quiet", "--no-store", "--json", "--tools", "python", "--budget-seconds", "3",
                "--tool-timeout", "120", "--model", f"openai-compatible:{server.url}@scripted#chat")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["termination_reason"] == "budget_wall_s", out["termination_reason"]
    assert out["agent"]["nodes"], out["agent"]


def test_a_huge_calculation_the_model_asks_for_ends_within_the_runs_budget(server: Any) -> None:
    from test_cli import loom
    from test_tools_builtin import SLOW_EXPRESSIONS

    script = trip_model()
    script.on("Step: Add up", "calc: " + json.dumps({"expression": SLOW_EXPRESSIONS[0]}))
    server.responder = served(script)
    started = time.monotonic()
    proc = loom("agent", TRIP, "--quiet", "--no-store", "--json", "--tools", "calc", "--budget-seconds", "5",
                "--tool-timeout", "3", "--model", f"openai-compatible:{server.url}@scripted#chat")
    took = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr
    assert took < scaled(30), took  # a hang guard: the calculation alone held the event loop for 15-118 s
    out = json.loads(proc.stdout)
    # The budget, overrun by one tool call at most (and what a loaded machine adds to finishing the run).
    assert out["stats"]["wall_s"] <= 5 + 3 + scaled(0.5), out["stats"]
    assert "agent" in out, out["termination_reason"]
    calls = [c for n in out["agent"]["nodes"] for c in n.get("tool_calls", [])]
    assert any("too large to compute exactly" in (c.get("error") or "") for c in calls), calls


def test_a_tool_call_request_carries_the_tools_schema_and_the_reply_is_read_from_json() -> None:
    model = trip_model()
    model.on("Step: Add up", '{"tool": "calc", "args": {"expression": "300 + 300"}}')
    result = asyncio.run(run(model))
    asked = [c for c in model.calls if c.purpose == "tool_choice"][0]
    schema = json.loads(asked.schema)
    assert schema["properties"]["tool"] == {"enum": ["calc"]} and schema["properties"]["args"] == Calc.spec.parameters
    assert by_content(result, "Add up").extra["text"] == "300 + 300 = 600"


def test_a_replanned_run_is_stored_and_replays_into_the_same_graph(tmp_path: Any) -> None:
    model = trip_model()
    model.on("Step: Add up", 'calc: {"expression": "300 + sqrt(300)"}', 'calc: {"expression": "300 + 300"}')
    store = str(tmp_path / "runs.db")
    result = asyncio.run(agent(TRIP, model=model, store=store, controller=False, seed=3))
    retry = next(n for n in result.graph if "retry_of" in n.extra)
    check = by_content(result, "Check the total")
    assert retry.id > check.id and retry.id in result.graph.parents(check.id)  # a later node holds an earlier one
    with SQLiteStore(store) as opened:
        replayed, verdict = asyncio.run(areplay(opened, result.run_id))
    assert verdict.identical, str(verdict)
    assert replayed.graph.parents(check.id) == result.graph.parents(check.id)


def test_an_interrupted_agent_run_resumes_from_its_record_and_finishes(tmp_path: Any) -> None:
    from thoughtloom.run.execute import execute
    from thoughtloom.run.grants import Grants
    from thoughtloom.run.session import resume_session
    from thoughtloom.store.runs import open_run, run_ids

    store = str(tmp_path / "runs.db")
    slow = trip_model(latency_s=0.2)

    async def interrupted() -> Any:  # cancelled (Ctrl-C) midway: the engine returns what it has
        return await asyncio.wait_for(agent(TRIP, model=slow, store=store, controller=False, seed=3), 0.7)

    assert asyncio.run(interrupted()).termination_reason is StopReason.INTERRUPTED
    sent_before = len(slow.calls)
    assert 0 < sent_before < 8
    fresh = trip_model()
    with SQLiteStore(store) as opened:
        run = open_run(opened, run_ids(opened)[0])
        assert run.status == "interrupted"
        spec, session = resume_session(opened, store, run, Grants())  # its model is an object: nothing to grant
        from dataclasses import replace

        result = asyncio.run(execute(replace(spec, model=fresh), session=session))
    assert result.answer == "Flights 300 EUR and hotel 300 EUR: 600 EUR in all."
    assert session.replayed > 0 and session.live_calls == len(fresh.calls) < 8


def test_a_question_researched_in_documents_replays_after_the_folder_is_gone(tmp_path: Any) -> None:
    import shutil

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "ship.md").write_text("# The ship\nThe Argo was built by Argus, with the help of Athena.\n")
    model = ScriptedBackend(default="ok")
    model.on("Question: Who built the Argo?", "Argus.")
    model.on("Answer in a few words", "Argus.")
    store = str(tmp_path / "runs.db")
    result = asyncio.run(agent("Who built the Argo?", tools=["docs"], knowledge=str(docs), model=model, store=store,
                               controller=False))
    question = result.graph.by_kind(NodeKind.QUESTION)[0]
    assert "Argus" in question.extra["tool_calls"][0]["output"] and result.answer == "Argus."
    shutil.rmtree(docs)
    with SQLiteStore(store) as opened:
        _, verdict = asyncio.run(areplay(opened, result.run_id))
    assert verdict.identical and (verdict.model_calls, verdict.tool_calls, verdict.tools_replayed) == (0, 0, 1)


def film_folder(tmp_path: Any, *, with_page: bool = False) -> Any:
    """Document A names the director of Harbour Lights, B where she was born; four directors born elsewhere rank
    above B for the question's own words (with_page: B says it holds the film too, so the first search finds it)."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "harbour_lights.md").write_text("# Harbour Lights\nHarbour Lights was directed by Jane Doe.\n")
    also = " She directed Harbour Lights." if with_page else ""
    (docs / "jane_doe.md").write_text(f"# Jane Doe\nJane Doe was born in Leeds.{also}\n")
    for i, name in enumerate(("Mary Major", "Tom Tall", "Ada Park", "Ben Hill"), 1):
        (docs / f"d{i}.md").write_text(f"# {name}\n{name} was a director, born in York, where the director of a "
                                       "film was born.\n")
    return docs


def film_model(hop_reply: str = "NAME: Jane Doe") -> ScriptedBackend:
    """Answers from B's passage when it was read, and names the director when asked who it is."""
    model = ScriptedBackend(default="ok")
    model.on("Answer in a few words", "I do not know.")
    model.on("Jane Doe was born in Leeds", "Leeds (jane_doe.md:1-2)")
    model.on("Who or what is the director of Harbour Lights?", hop_reply)
    return model


def researched(question: str, docs: Any, model: ScriptedBackend, **config: Any) -> Any:
    result = asyncio.run(agent(question, tools=["docs"], knowledge=str(docs), model=model, controller=False,
                               **config))
    node = result.graph.by_kind(NodeKind.QUESTION)[0]
    return result, node, [call["args"]["query"] for call in node.extra["tool_calls"]]


BRIDGE = "Where was the director of Harbour Lights born?"


def test_a_bridge_question_searches_again_for_the_entity_its_passages_name_and_answers_from_both(
        tmp_path: Any) -> None:
    result, node, queries = researched(BRIDGE, film_folder(tmp_path), film_model())
    assert len(queries) == 2 and queries[0] == BRIDGE and "Jane Doe" in queries[1]
    first, second = node.extra["tool_calls"]
    assert "harbour_lights.md" in first["output"] and "jane_doe.md" not in first["output"]
    assert second["output"].startswith("1. jane_doe.md:1-2")
    assert result.answer == "Leeds (jane_doe.md:1-2)"
    assert node.extra["result"]["hops"] == [{"name": "Jane Doe", "how": "named by the model"}]


@pytest.mark.parametrize("reply", ["The director.", "NAME: John Smith", "NAME: none", "NAME: Harbour Lights"])
def test_a_hop_reply_naming_no_new_entity_of_the_passages_falls_back_to_the_name_they_write(
        tmp_path: Any, reply: str) -> None:
    result, node, queries = researched(BRIDGE, film_folder(tmp_path), film_model(reply))
    assert len(queries) == 2 and "Jane Doe" in queries[1]
    assert result.answer == "Leeds (jane_doe.md:1-2)"
    (hop,) = node.extra["result"]["hops"]
    assert hop["name"] == "Jane Doe" and hop["how"].startswith("found in the passages")


@pytest.mark.parametrize("question, with_page, why", [
    ("Who directed Harbour Lights?", False, "not a bridge question"),
    (BRIDGE, True, "Jane Doe's own page is among the passages"),
])
def test_a_question_whose_first_passages_hold_the_answer_is_searched_once(
        tmp_path: Any, question: str, with_page: bool, why: str) -> None:
    model = film_model()
    _, node, queries = researched(question, film_folder(tmp_path, with_page=with_page), model)
    assert queries == [question]
    assert node.extra["result"]["hops"] == [{"name": None, "how": why}]


def test_bridge_hops_zero_answers_a_bridge_question_after_one_search(tmp_path: Any) -> None:
    model = film_model()
    result, _, queries = researched(BRIDGE, film_folder(tmp_path), model, bridge_hops=0)
    assert queries == [BRIDGE] and result.answer == "I do not know."
    assert not any("Who or what is" in call.prompt.as_text() for call in model.calls)


def test_a_bridge_questions_two_searches_and_its_hop_replay_after_the_folder_is_gone(tmp_path: Any) -> None:
    import shutil

    docs = film_folder(tmp_path)
    store = str(tmp_path / "runs.db")
    result = asyncio.run(agent(BRIDGE, tools=["docs"], knowledge=str(docs), model=film_model(), store=store,
                               controller=False))
    shutil.rmtree(docs)
    with SQLiteStore(store) as opened:
        _, verdict = asyncio.run(areplay(opened, result.run_id))
    assert verdict.identical and (verdict.model_calls, verdict.tool_calls, verdict.tools_replayed) == (0, 0, 2)


@pytest.mark.parametrize("flag, searches", [((), 2), (("--bridge-hops", "0"), 1)])
def test_loom_agent_bridge_hops_sets_the_follow_up_searches_as_loom_research_does(
        server: Any, tmp_path: Any, capsys: pytest.CaptureFixture[str], flag: tuple[str, ...], searches: int) -> None:
    from thoughtloom.cli.main import main

    server.responder = served(film_model())
    code = main(["agent", BRIDGE, "--tools", "docs", "--knowledge", str(film_folder(tmp_path)), *flag, "--quiet",
                 "--no-store", "--json", "--model", f"openai-compatible:{server.url}@scripted#chat"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    (question,) = [n for n in out["agent"]["nodes"] if n["kind"] == "question"]
    queries = [c["args"]["query"] for c in question["tool_calls"]]
    assert len(queries) == searches and queries[0] == BRIDGE
    if searches == 2:
        assert queries[1] == "Jane Doe born" and out["answer"] == "Leeds (jane_doe.md:1-2)"


@pytest.mark.local_model
def test_the_embedded_agent_searches_again_for_the_bridge_entity_its_first_passages_name(tmp_path: Any) -> None:
    from benchdata import hotpot_paragraphs

    # Dev question 1: "... held by the woman who portrayed Corliss Archer in the film Kiss and Tell?"; the film's
    # page names Shirley Temple, whose own page (not found by the question's words) holds the answer.
    folder = tmp_path / "paragraphs"
    row = hotpot_paragraphs(1, folder)
    result = asyncio.run(agent(row["question"], tools=["docs"], knowledge=str(folder), model="local",
                               controller=False, seed=0))
    first, second = result.graph.by_kind(NodeKind.QUESTION)[0].extra["tool_calls"]
    assert "Shirley Temple" in first["output"] and "# Shirley Temple\n" not in first["output"]
    assert second["args"]["query"].startswith("Shirley Temple")
