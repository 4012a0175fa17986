"""Native tool calling: the agent's tools as function definitions on the wire, the model's calls read back,
through the OpenAI-compatible and Anthropic test servers; names mapped both ways; malformed calls; replay."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from typing import Any

import pytest
from openai_server import FakeOpenAIServer, Reply, Seen, serve, tool_call_choice
from test_agent import TRIP, Calc, by_content, trip_model
from test_anthropic_backend import root

from thoughtloom.api import agent, areplay
from thoughtloom.cli.main import main
from thoughtloom.llm.anthropic_backend import AnthropicBackend
from thoughtloom.llm.errors import ModelConfigError
from thoughtloom.llm.openai_backend import OpenAIBackend
from thoughtloom.llm.registry import make_backend, native_tools, parse_model_spec
from thoughtloom.llm.tool_calls import (
    FUNCTION_NAME,
    FunctionDefinition,
    ToolCall,
    definitions_text,
    function_names,
    read_tool_calls,
    tool_calls_text,
)
from thoughtloom.llm.types import GenerateRequest, Message, Prompt
from thoughtloom.store.sqlite import SQLiteStore
from thoughtloom.tasks.agent import ToolCallError, parse_native_tool_call
from thoughtloom.tools import ToolSpec

CALC = FunctionDefinition("calc", "exact arithmetic", Calc.spec.parameters)


def ask_with_tools(*functions: FunctionDefinition) -> GenerateRequest:
    return GenerateRequest(Prompt(messages=(Message("user", "Add 300 and 300."),)),
                           tools=definitions_text(functions or (CALC,)))


# --- names ---------------------------------------------------------------------------------------


MCP_NAMES = ["calc", "time.get_current_time", "files/read file", "x" * 80, "a.b", "a_b", "a:b", "ünïcode", "",
             "-dash_ok-"]


def test_function_names_are_valid_unique_and_map_back_to_each_tool() -> None:
    names = function_names(MCP_NAMES)
    assert all(FUNCTION_NAME.match(f) for f in names.values()), names
    assert len(set(names.values())) == len(MCP_NAMES)
    back = {f: tool for tool, f in names.items()}
    assert [back[names[t]] for t in MCP_NAMES] == MCP_NAMES


def test_a_valid_name_is_its_own_function_name_and_others_keep_their_readable_part() -> None:
    names = function_names(MCP_NAMES)
    assert names["calc"] == "calc" and names["a_b"] == "a_b" and names["-dash_ok-"] == "-dash_ok-"
    assert names["time.get_current_time"].startswith("time_get_current_time_")
    assert names["a.b"] != names["a_b"] and names["a:b"] != names["a.b"]


def test_function_names_are_the_same_in_every_run_whatever_the_order() -> None:
    assert function_names(MCP_NAMES) == function_names(reversed(MCP_NAMES))
    assert function_names(["time.now"])["time.now"] == function_names(["time.now", "calc"])["time.now"]


# --- the OpenAI-compatible endpoint ----------------------------------------------------------------


async def test_function_definitions_go_in_the_chat_tools_field_and_the_calls_come_back(
        server: FakeOpenAIServer) -> None:
    server.tool_arguments = '{"expression": "300 + 300"}'
    backend = OpenAIBackend("m", base_url=server.url, native_tools=True)
    try:
        completion = await backend.generate(ask_with_tools())
    finally:
        await backend.aclose()
    assert server.seen[0].body["tools"] == [{"type": "function", "function": {
        "name": "calc", "description": "exact arithmetic", "parameters": Calc.spec.parameters}}]
    assert read_tool_calls(completion.texts[0]) == ([ToolCall("calc", '{"expression": "300 + 300"}')], "")


async def test_a_request_without_tools_sends_no_tools_field(server: FakeOpenAIServer) -> None:
    backend = OpenAIBackend("m", base_url=server.url, native_tools=True)
    try:
        completion = await backend.generate(GenerateRequest(Prompt(messages=(Message("user", "Hi"),))))
    finally:
        await backend.aclose()
    assert "tools" not in server.seen[0].body and completion.texts == ("sample 0",)


def test_only_a_chat_endpoint_can_take_native_tools() -> None:
    with pytest.raises(ModelConfigError, match="chat endpoint"):
        OpenAIBackend("m", base_url="http://127.0.0.1:9/v1", api="completions", native_tools=True)


@pytest.mark.parametrize(("spec", "mode", "native"), [
    ("openai:gpt-4o", "auto", True),
    ("anthropic:claude-test", "auto", True),
    ("openai-compatible:http://127.0.0.1:9/v1@m", "auto", False),  # a server takes tools only when set up for them
    ("openai-compatible:http://127.0.0.1:9/v1@m", "native", True),
    ("openai:gpt-4o", "text", False),
    ("local", "auto", False),
    ("local", "text", False),
])
def test_auto_is_native_where_it_is_known_to_work(spec: str, mode: str, native: bool) -> None:
    assert native_tools(parse_model_spec(spec, {}), mode) is native


@pytest.mark.parametrize("spec", ["local", "openai-compatible:http://127.0.0.1:9/v1@m#completions"])
def test_native_tool_calling_is_refused_where_the_endpoint_has_no_tools_field(spec: str) -> None:
    with pytest.raises(ModelConfigError, match="--tool-calling native"):
        native_tools(parse_model_spec(spec, {}), "native")


def test_the_backend_declares_the_mode_it_was_built_with() -> None:
    url = "openai-compatible:http://127.0.0.1:9/v1@m"
    assert not make_backend(url, {}).capabilities.native_tools
    assert make_backend(url, {}, tool_calling="native").capabilities.native_tools
    assert not make_backend("openai:gpt-4o", {"OPENAI_API_KEY": "k"}, tool_calling="text").capabilities.native_tools


def test_native_tool_calling_with_the_embedded_model_is_a_one_line_usage_error(
        capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["agent", TRIP, "--quiet", "--no-store", "--tools", "calc", "--model", "local",
                 "--tool-calling", "native"])
    err = capsys.readouterr().err
    assert code == 2 and "--tool-calling native" in err and len(err.strip().splitlines()) == 1, err


# --- the agent through the test server ------------------------------------------------------------------


CallsTool = Callable[[dict[str, Any]], dict[str, Any]]


def trip_server(call: CallsTool) -> Callable[[Seen], Reply]:
    """The trip script served as chat replies; a request with tools is answered by `call(request body)`, a choice."""
    script = trip_model()

    def reply(seen: Seen) -> Reply:
        if seen.body.get("tools"):
            choice = call(seen.body)
        else:
            text = "\n".join(m["content"] for m in seen.body["messages"])
            answer = next((rule.replies[0] for rule in reversed(script.rules) if rule.when in text), "ok")
            choice = {"index": 0, "message": {"role": "assistant", "content": answer}, "finish_reason": "stop"}
        return Reply(200, {"id": "x", "object": "chat.completion", "created": 0, "model": "m", "choices": [choice],
                           "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}})

    return reply


def calls(arguments: str, name: str | None = None) -> CallsTool:
    """A model that calls the first function offered (or `name`) with these arguments."""
    return lambda body: tool_call_choice(0, name or body["tools"][0]["function"]["name"], arguments)


def run_agent(server: FakeOpenAIServer, mode: str = "native", **kw: Any) -> Any:
    return asyncio.run(agent(TRIP, tools=["calc"], model=f"openai-compatible:{server.url}@m#chat", controller=False,
                             tool_calling=mode, seed=3, **kw))


def test_the_agent_sends_its_tool_as_a_function_and_runs_the_call_the_model_made(server: FakeOpenAIServer) -> None:
    server.responder = trip_server(calls('{"expression": "300 + 300"}'))
    result = run_agent(server)
    assert by_content(result, "Add up").extra["text"] == "300 + 300 = 600"
    asked = [s.body for s in server.seen if s.body.get("tools")]
    assert len(asked) == 1 and [t["function"]["name"] for t in asked[0]["tools"]] == ["calc"]
    assert "response_format" not in asked[0]  # the call's shape is the endpoint's, not a JSON reply schema
    # Every request on the wire is a call the budget counted.
    assert result.usage.calls == len(server.seen)


def test_in_text_mode_the_agent_sends_no_tools_and_reads_a_json_reply(server: FakeOpenAIServer) -> None:
    server.responder = trip_server(calls("{}"))
    result = run_agent(server, "text")
    assert not any(s.body.get("tools") for s in server.seen)
    assert by_content(result, "Add up").extra["text"] == "300 + 300 = 600"


def test_a_stored_native_run_replays_exactly_with_no_model_call(server: FakeOpenAIServer, tmp_path: Any) -> None:
    server.responder = trip_server(calls('{"expression": "300 + 300"}'))
    store = str(tmp_path / "runs.db")
    result = run_agent(server, store=store)
    sent = len(server.seen)
    with SQLiteStore(store) as opened:
        replayed, verdict = asyncio.run(areplay(opened, result.run_id))
    assert verdict.identical, str(verdict)
    assert (verdict.model_calls, verdict.tool_calls) == (0, 0) and len(server.seen) == sent
    assert str(replayed.graph_cid) == str(result.graph_cid)


def test_a_call_with_arguments_that_are_not_json_is_a_failed_step_not_a_crash(server: FakeOpenAIServer) -> None:
    server.responder = trip_server(calls('{"expression": 300 +'))
    result = run_agent(server)
    step = by_content(result, "Add up")
    assert "not valid JSON" in step.extra["error"] and result.answer
    assert result.agent()["summary"]["malformed_tool_calls"] >= 2


def test_a_call_of_a_function_never_offered_is_a_failed_step(server: FakeOpenAIServer) -> None:
    server.responder = trip_server(calls('{"path": "/etc/passwd"}', name="read_file"))
    result = run_agent(server)
    assert "'read_file', which is not one of the functions offered (calc)" in by_content(result, "Add up").extra["error"]


# --- reading a reply ---------------------------------------------------------------------------------


class Named:
    def __init__(self, name: str) -> None:
        self.spec = ToolSpec(name, "the time", {"type": "object", "properties": {"zone": {"type": "string"}}})


def test_an_mcp_tools_call_is_mapped_back_to_its_own_name() -> None:
    tool = Named("time.get_current_time").spec
    function = function_names([tool.name])[tool.name]
    reply = tool_calls_text([ToolCall(function, '{"zone": "UTC"}')])
    choice = parse_native_tool_call(reply, {tool.name: tool})
    assert (choice.tool, choice.args) == ("time.get_current_time", {"zone": "UTC"})


def test_a_reply_without_calls_is_read_as_a_text_protocol_call() -> None:
    tool = Calc.spec
    reply = tool_calls_text([], 'calc: {"expression": "2 + 3"}')
    assert parse_native_tool_call(reply, {"calc": tool}).args == {"expression": "2 + 3"}


@pytest.mark.parametrize(("reply", "said"), [
    (tool_calls_text([]), "no tool call"),
    (tool_calls_text([ToolCall("calc", "[1, 2]")]), "not a JSON object"),
    (tool_calls_text([ToolCall("calc", "{")]), "not valid JSON"),
    (tool_calls_text([ToolCall("x" * 500, "{}")]), "not one of the functions offered"),
])
def test_a_malformed_call_is_a_tool_call_error_saying_what_was_wrong(reply: str, said: str) -> None:
    with pytest.raises(ToolCallError, match=re.escape(said)) as caught:
        parse_native_tool_call(reply, {"calc": Calc.spec})
    assert len(str(caught.value)) < 300  # a hostile name is cut, not echoed whole


# --- Anthropic's messages endpoint ------------------------------------------------------------------------


def tool_use(name: str, arguments: dict[str, Any]) -> Reply:
    return Reply(200, {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
        "content": [{"type": "text", "text": "Adding."},
                    {"type": "tool_use", "id": "toolu_1", "name": name, "input": arguments}],
        "stop_reason": "tool_use", "stop_sequence": None, "usage": {"input_tokens": 40, "output_tokens": 12},
    })


async def test_anthropic_gets_the_functions_as_tools_and_its_tool_use_blocks_are_the_calls() -> None:
    with serve(FakeOpenAIServer(responder=lambda seen: tool_use("calc", {"expression": "300 + 300"}))) as fake:
        backend = make_backend("anthropic:claude-test", {"ANTHROPIC_API_KEY": "k", "ANTHROPIC_BASE_URL": root(fake)})
        assert isinstance(backend, AnthropicBackend) and backend.capabilities.native_tools
        try:
            completion = await backend.generate(ask_with_tools())
        finally:
            await backend.aclose()
    assert fake.seen[0].body["tools"] == [{"name": "calc", "description": "exact arithmetic",
                                          "input_schema": Calc.spec.parameters}]
    calls_made, text = read_tool_calls(completion.texts[0]) or ([], "")
    assert text == "Adding." and calls_made == [ToolCall("calc", json.dumps({"expression": "300 + 300"},
                                                                             separators=(",", ":")))]


# --- the run's setting ----------------------------------------------------------------------------------


def test_a_run_records_its_tool_calling_mode_and_leaves_the_default_out() -> None:
    from thoughtloom.run.spec import RunSpec, resolve

    url = "openai-compatible:http://127.0.0.1:9/v1@m"
    native = resolve(TRIP, task="agent", model=url, search={"strategy": "agent"}, tools=["calc"],
                     tool_calling="native")
    assert native.to_dict()["tool_calling"] == "native"
    assert RunSpec.from_dict(native.to_dict()).tool_calling == "native"
    auto = resolve(TRIP, task="agent", model=url, search={"strategy": "agent"}, tools=["calc"])
    assert "tool_calling" not in auto.to_dict()  # the stored form of every run before the option is unchanged
    assert RunSpec.from_dict(auto.to_dict()).tool_calling == "auto"


def test_a_backend_object_with_a_tool_calling_mode_is_refused_in_one_line() -> None:
    from thoughtloom.llm.fake import ScriptedBackend
    from thoughtloom.run.spec import SpecError, resolve

    with pytest.raises(SpecError, match=r"declares its own \(OpenAIBackend\(native_tools=...\)"):
        resolve(TRIP, task="agent", model=ScriptedBackend(), search={"strategy": "agent"}, tools=["calc"],
                tool_calling="text")


class Clock:
    """A tool named as an MCP server's tools are (server.tool): not a valid function name."""

    spec = ToolSpec("time.now", "the time now", {"type": "object", "properties": {"zone": {"type": "string"}},
                                                 "required": ["zone"]})

    async def call(self, args: dict[str, Any]) -> str:
        return f"noon in {args['zone']}"


def clock_server(seen: Seen) -> Reply:
    if seen.body.get("tools"):
        choice = tool_call_choice(0, seen.body["tools"][0]["function"]["name"], '{"zone": "Europe/Lisbon"}')
    else:
        text = "\n".join(m["content"] for m in seen.body["messages"])
        answer = ("1. [time.now] Get the time in Lisbon.\n2. Say it. (after 1)" if "Tools:" in text
                  else "It is noon in Lisbon." if "Final answer:" in text
                  else "VERDICT: ok\nREASON: fine" if "VERDICT" in text else "ok")
        choice = {"index": 0, "message": {"role": "assistant", "content": answer}, "finish_reason": "stop"}
    return Reply(200, {"id": "x", "object": "chat.completion", "created": 0, "model": "m", "choices": [choice],
                       "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}})


async def test_a_dotted_tool_name_goes_out_as_a_valid_function_name_and_its_call_comes_back(
        server: FakeOpenAIServer) -> None:
    from thoughtloom.run.gateway import build_gateway
    from thoughtloom.search.config import SearchConfig
    from thoughtloom.search.engine import search
    from thoughtloom.tasks.agent import AgentTask
    from thoughtloom.tools import Toolbox

    server.responder = clock_server
    backend = OpenAIBackend("m", base_url=server.url, native_tools=True)
    try:
        result = await search(AgentTask(), "Tell me the time in Lisbon", build_gateway(backend),
                              SearchConfig(strategy="agent"), tools=Toolbox([Clock()]))
    finally:
        await backend.aclose()
    sent = [t["function"]["name"] for s in server.seen for t in s.body.get("tools") or ()]
    assert sent == [function_names(["time.now"])["time.now"]] and FUNCTION_NAME.match(sent[0])
    call = by_content(result, "Get the time").extra["tool_calls"][0]
    assert (call["tool"], call["status"], call["output"]) == ("time.now", "ok", "noon in Europe/Lisbon")


def test_loom_agent_with_tool_calling_native_sends_the_tools_as_functions(
        server: FakeOpenAIServer, capsys: pytest.CaptureFixture[str]) -> None:
    server.responder = trip_server(calls('{"expression": "300 + 300"}'))
    code = main(["agent", TRIP, "--quiet", "--no-store", "--json", "--tools", "calc",
                 "--model", f"openai-compatible:{server.url}@m#chat", "--tool-calling", "native"])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert [s.body["tools"][0]["function"]["name"] for s in server.seen if s.body.get("tools")] == ["calc"]
    calls_made = [c for n in json.loads(out.out)["agent"]["nodes"] for c in n.get("tool_calls", [])]
    assert [(c["tool"], c["output"]) for c in calls_made] == [("calc", "300 + 300 = 600")]
