"""Text that is not valid Unicode cannot crash a run.

A JSON body can carry a lone surrogate as an escape (`"\\ud800"`): Python decodes it into a str that
no UTF-8 encoder accepts, so a server's reply, its error message, a tool's output or a JSON object a
model writes into its reply would end the run when it is stored, printed or sent on. Such text is
made valid where it enters (each lone surrogate becomes U+FFFD, with a warning), and the command's
printers write what the terminal's encoding cannot hold as escapes instead of failing.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from inprocess import loom_here
from openai_server import FakeOpenAIServer, Reply, always, error_body, serve
from test_anthropic_backend import message, root
from test_agent import TRIP, served, trip_model
from test_cli import assert_one_line_error, loom

from thoughtloom.llm.errors import ModelError
from thoughtloom.llm.registry import make_backend
from thoughtloom.llm.text import valid_text, valid_value
from thoughtloom.llm.types import GenerateRequest, Prompt
from thoughtloom.tasks.agent import parse_tool_call
from thoughtloom.tasks.query import json_object
from thoughtloom.tools.base import ToolError, ToolSpec
from thoughtloom.tools.toolbox import Toolbox

LONE = "\ud800"
#: A reply holding lone surrogates once decoded from JSON (high and low, at the start and inside).
BROKEN = f"{LONE}The answer is 42.\udfff Final answer: 42 {LONE}"


#: A question for the general task (a question about numbers would go to the math task's programs).
PROBLEM = "plan a picnic"


#: Every answer, chat or completion, is BROKEN (sent as JSON, escapes and all, as a server may).
surrogate_reply = always(BROKEN)


@pytest.fixture
def broken_model(server: FakeOpenAIServer) -> str:
    """A model spec for a server whose every reply holds lone surrogates."""
    server.responder = surrogate_reply
    return f"openai-compatible:{server.url}@m"


def assert_valid(text: str) -> None:
    text.encode("utf-8")  # raises on a lone surrogate


# --- where text enters -----------------------------------------------------------------------------


def test_valid_text_replaces_each_lone_surrogate_with_the_replacement_character() -> None:
    assert valid_text(BROKEN) == "\ufffdThe answer is 42.\ufffd Final answer: 42 \ufffd"
    assert valid_text("plain é 😀") == "plain é 😀"
    assert valid_text("\ud83d\ude00 \ud83d") == "😀 \ufffd"  # a pair is one character, not two halves


def test_valid_text_logs_where_invalid_text_came_from(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        valid_text(BROKEN, "model endpoint X")
    assert "model endpoint X" in caplog.text and "U+FFFD" in caplog.text


def test_valid_value_makes_every_string_of_decoded_json_valid_keys_included() -> None:
    value = json.loads('{"\\ud800k": ["\\udc00", {"x": "\\ud800"}], "n": 1}')
    assert valid_value(value) == {"\ufffdk": ["\ufffd", {"x": "\ufffd"}], "n": 1}


async def test_the_openai_backend_answers_valid_text_for_a_reply_with_lone_surrogates(
        server: FakeOpenAIServer, backend_for: Any, caplog: pytest.LogCaptureFixture) -> None:
    server.responder = surrogate_reply
    for api in ("chat", "completions"):
        with caplog.at_level(logging.WARNING):
            completion = await backend_for(api=api).generate(GenerateRequest(Prompt("hi"), n=2))
        assert completion.texts == (valid_text(BROKEN),) * 2
        assert "U+FFFD" in caplog.text


async def test_the_openai_backend_answers_valid_text_for_a_batch_with_lone_surrogates(
        server: FakeOpenAIServer, backend_for: Any) -> None:
    server.responder = surrogate_reply
    backend = backend_for(api="completions")
    completions = await backend.generate_batch([GenerateRequest(Prompt("a")), GenerateRequest(Prompt("b"))])
    assert [c.texts for c in completions] == [(valid_text(BROKEN),)] * 2


async def test_the_anthropic_backend_answers_valid_text_for_a_reply_with_lone_surrogates() -> None:
    with serve(FakeOpenAIServer(responder=lambda seen: message(BROKEN))) as fake:
        backend = make_backend("anthropic:claude-test", {"ANTHROPIC_API_KEY": "sk-ant-test",
                                                         "ANTHROPIC_BASE_URL": root(fake)})
        try:
            completion = await backend.generate(GenerateRequest(Prompt("hi")))
        finally:
            await backend.aclose()
    assert completion.texts == (valid_text(BROKEN),)


async def test_a_server_error_message_with_lone_surrogates_is_valid_text(
        server: FakeOpenAIServer, backend_for: Any) -> None:
    server.script(Reply(400, error_body(f"bad {LONE} request")))
    with pytest.raises(ModelError) as caught:
        await backend_for().generate(GenerateRequest(Prompt("hi")))
    assert_valid(str(caught.value))
    assert "bad \ufffd request" in str(caught.value)


def test_a_json_object_a_model_writes_with_a_surrogate_escape_is_read_as_valid_text() -> None:
    data = json_object('{"answer": "42 \\ud800"}')
    assert data == {"answer": "42 \ufffd"}


class Echo:
    """A tool whose output and errors hold lone surrogates (as a tool relaying a server's JSON can)."""

    spec = ToolSpec("echo", "echoes", {"type": "object", "properties": {"text": {"type": "string"},
                                                                   "fail": {"type": "boolean"}}})

    async def call(self, args: dict[str, Any]) -> str:
        if args.get("fail"):
            raise ToolError(f"failed {LONE}")
        return f"out {LONE}"


def test_a_tool_call_whose_json_arguments_escape_a_lone_surrogate_is_read_as_valid_text() -> None:
    tools = {"echo": Echo.spec}
    for reply in ('{"tool": "echo", "args": {"text": "1 + 1 \\udfff"}}', 'echo: {"text": "1 + 1 \\udfff"}'):
        assert parse_tool_call(reply, tools).args == {"text": "1 + 1 \ufffd"}, reply


async def test_tool_output_and_tool_errors_with_lone_surrogates_come_back_as_valid_text() -> None:
    box = Toolbox([Echo()])
    ok, failed = await box.call("echo", {}), await box.call("echo", {"fail": True})
    assert ok.output == "out \ufffd" and failed.error == "failed \ufffd"


# --- the command line -------------------------------------------------------------------------------


def test_solve_with_lone_surrogates_in_every_reply_exits_0_with_the_answer(
        broken_model: str, capsys: pytest.CaptureFixture[str]) -> None:
    proc = loom_here(capsys, "solve", "--model", broken_model, "--depth", "1", "--breadth", "2", "--budget-calls", "6",
                     PROBLEM)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "answer:" in proc.stdout and "\ufffd" in proc.stdout
    assert "U+FFFD" in proc.stderr  # the warning says what was replaced


def test_solve_json_with_lone_surrogates_in_every_reply_prints_valid_json(
        broken_model: str, capsys: pytest.CaptureFixture[str]) -> None:
    proc = loom_here(capsys, "solve", "--model", broken_model, "--depth", "1", "--breadth", "2", "--budget-calls", "6",
                     "--json", "--quiet", PROBLEM)
    assert proc.returncode == 0, proc.stderr
    assert "\ufffd" in json.loads(proc.stdout)["answer"]


def test_a_run_whose_replies_held_lone_surrogates_is_stored_shown_and_viewed(
        broken_model: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    proc = loom_here(capsys, "solve", "--model", broken_model, "--depth", "1", "--breadth", "2", "--budget-calls", "6",
                     "--quiet", PROBLEM)
    assert proc.returncode == 0, proc.stderr
    run_id = json.loads(loom_here(capsys, "runs", "--json").stdout.splitlines()[0])["id"]
    assert json.loads(loom_here(capsys, "runs", "--json").stdout.splitlines()[0])["status"] == "finished"
    shown = loom_here(capsys, "show", run_id)
    assert shown.returncode == 0, shown.stderr
    assert "\ufffd" in shown.stdout
    page = tmp_path / "run.html"
    viewed = loom_here(capsys, "view", run_id, "--out", str(page))
    assert viewed.returncode == 0, viewed.stderr
    assert "\ufffd" in page.read_text(encoding="utf-8")


def test_a_server_error_with_lone_surrogates_is_one_line_exit_2(
        server: FakeOpenAIServer, capsys: pytest.CaptureFixture[str]) -> None:
    server.responder = lambda seen: Reply(400, error_body(f"no {LONE} such thing"))
    proc = loom_here(capsys, "solve", "--model", f"openai-compatible:{server.url}@m", "--quiet", "--depth", "1",
                     PROBLEM)
    assert_one_line_error(proc, "no \ufffd such thing")


def test_an_agent_tool_call_escaping_a_lone_surrogate_does_not_crash_the_run(
        server: FakeOpenAIServer, capsys: pytest.CaptureFixture[str]) -> None:
    script = trip_model()
    script.on("Step: Add up", '{"tool": "calc", "args": {"expression": "300 + 300 \\ud800"}}')
    server.responder = served(script)
    proc = loom_here(capsys, "agent", TRIP, "--quiet", "--json", "--tools", "calc", "--model",
                     f"openai-compatible:{server.url}@scripted#chat")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["answer"]
    run = json.loads(loom_here(capsys, "runs", "--json").stdout.splitlines()[0])
    assert run["status"] == "finished"


def test_the_answer_prints_on_a_terminal_whose_encoding_cannot_hold_it(server: FakeOpenAIServer) -> None:
    server.responder = lambda seen: Reply(200, {
        "id": "x", "object": "chat.completion", "created": 0, "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Final answer: café ≠ 42"},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20}})
    model = f"openai-compatible:{server.url}@m"
    for extra in ((), ("--json",)):
        proc = loom("solve", "--model", model, "--depth", "1", "--quiet", *extra, PROBLEM,
                    env={"PYTHONIOENCODING": "ascii"})
        assert proc.returncode == 0, proc.stderr
        assert "Traceback" not in proc.stderr
        assert "caf" in proc.stdout
