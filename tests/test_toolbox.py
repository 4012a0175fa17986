"""The Toolbox (validation, unknown tools, timeout, output cap, concurrency, record and replay) and
build_toolbox / parse_tool_names (names -> tools, with one-line errors)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from thoughtloom.tools import (
    TOOL_NAMES,
    ToolConfigError,
    ToolError,
    ToolLimits,
    ToolResult,
    ToolSpec,
    Toolbox,
    build_toolbox,
    parse_tool_names,
)


class Echo:
    """A tool that answers with its text (after `delay` seconds) and counts its calls."""

    def __init__(self, name: str = "echo", delay: float = 0.0) -> None:
        self.calls = 0
        self.delay = delay
        self.in_flight = 0
        self.most_in_flight = 0
        self._spec = ToolSpec(name, "Echo the text.", {
            "type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"],
            "additionalProperties": False,
        })

    @property
    def spec(self) -> ToolSpec:
        return self._spec

    async def call(self, args: dict[str, Any]) -> str:
        self.calls += 1
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await asyncio.sleep(self.delay)
        finally:
            self.in_flight -= 1
        if args["text"] == "fail":
            raise ToolError("asked to fail")
        return args["text"]


# ---------------------------------------------------------------------------- Toolbox


async def test_invalid_arguments_are_refused_before_the_call_and_counted() -> None:
    echo = Echo()
    box = Toolbox([echo])
    result = await box.call("echo", {"txt": "hi"})
    assert result.status == "invalid" and "'text' is a required property" in (result.error or "")
    assert (echo.calls, box.invalid, box.live_calls) == (0, 1, 0)


async def test_an_unknown_tool_is_refused_naming_the_granted_ones() -> None:
    box = Toolbox([Echo()])
    result = await box.call("ecko", {"text": "hi"})
    assert (result.status, result.error) == ("unknown_tool", "no tool 'ecko' was granted (granted: echo)")
    assert box.invalid == 1


async def test_a_call_past_the_timeout_is_cancelled_and_reported() -> None:
    box = Toolbox([Echo(delay=5)], ToolLimits(timeout_s=0.1))
    result = await box.call("echo", {"text": "hi"})
    assert (result.status, result.error) == ("timeout", "no answer within 0.1 s")


async def test_a_tools_own_failure_is_an_error_result_not_an_exception() -> None:
    result = await Toolbox([Echo()]).call("echo", {"text": "fail"})
    assert (result.status, result.error) == ("error", "asked to fail")


async def test_output_past_the_cap_is_cut_and_marked() -> None:
    result = await Toolbox([Echo()], ToolLimits(output_cap=5)).call("echo", {"text": "abcdefgh"})
    assert (result.output, result.truncated) == ("abcde", True)
    assert result.for_model() == "abcde [output cut]"


async def test_no_more_calls_run_at_once_than_the_concurrency_limit() -> None:
    echo = Echo(delay=0.05)
    box = Toolbox([echo], ToolLimits(concurrency=2))
    results = await asyncio.gather(*(box.call("echo", {"text": str(i)}) for i in range(6)))
    assert all(r.ok for r in results)
    assert (echo.calls, echo.most_in_flight) == (6, 2)


async def test_recorded_calls_are_answered_first_in_order_then_live() -> None:
    echo = Echo()
    record = [ToolResult("echo", {"text": "a"}, "ok", "first"), ToolResult("echo", {"text": "a"}, "ok", "second")]
    box = Toolbox([echo], recorded=record)
    outputs = [(await box.call("echo", {"text": "a"})).output for _ in range(3)]
    assert outputs == ["first", "second", "a"]
    assert (box.replayed, box.live_calls, echo.calls) == (2, 1, 1)


async def test_replay_refuses_calls_off_the_record_without_running_anything() -> None:
    echo = Echo()
    box = Toolbox([echo], recorded=[ToolResult("echo", {"text": "a"}, "ok", "kept")], live=False)
    on = await box.call("echo", {"text": "a"})
    off = await box.call("echo", {"text": "b"})
    assert (on.output, on.replayed) == ("kept", True)
    assert off.status == "refused" and "not in the run's record" in (off.error or "")
    assert (box.off_record, echo.calls) == (1, 0)


async def test_two_tools_with_one_name_are_a_config_error() -> None:
    with pytest.raises(ToolConfigError, match="two tools are called 'echo'"):
        Toolbox([Echo(), Echo()])


# ------------------------------------------------------------------- names and registry


def test_tool_names_parse_trimmed() -> None:
    assert parse_tool_names(" calc, python,mcp:time ") == ["calc", "python", "mcp:time"]


def test_a_repeated_tool_name_is_refused() -> None:
    with pytest.raises(ToolConfigError, match="names 'calc' twice"):
        parse_tool_names("calc,python,calc")


def test_an_unknown_tool_name_lists_the_known_ones() -> None:
    with pytest.raises(ToolConfigError, match=r"unknown tool 'calculator'; known: calc, python, docs, files, mcp, mcp:NAME"):
        parse_tool_names("calculator")


def test_an_empty_name_in_the_list_is_refused() -> None:
    with pytest.raises(ToolConfigError, match="empty name"):
        parse_tool_names("calc,,python")


def test_an_mcp_server_name_with_a_dot_is_refused() -> None:
    with pytest.raises(ToolConfigError, match="letters, digits"):
        parse_tool_names("mcp:my.server")


def test_the_known_names_are_the_documented_ones() -> None:
    assert TOOL_NAMES == ("calc", "python", "docs", "files", "mcp")


async def test_build_toolbox_grants_the_named_builtin_tools(tmp_path: Path) -> None:
    box = await build_toolbox(["calc", "files"], read_roots=[tmp_path])
    assert box.names == ["calc", "files"]
    assert (await box.call("calc", {"expression": "6*7"})).output == "6*7 = 42"


async def test_docs_without_a_knowledge_folder_says_which_option_to_give() -> None:
    with pytest.raises(ToolConfigError, match="^docs needs --knowledge DIR"):
        await build_toolbox(["docs"])


async def test_files_without_a_folder_says_which_option_to_give() -> None:
    with pytest.raises(ToolConfigError, match="^files needs --allow-read DIR"):
        await build_toolbox(["calc", "files"])


async def test_docs_over_a_knowledge_folder_searches_it_and_closes_with_the_box(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("The shuttle carries the weft.\n", encoding="utf-8")
    box = await build_toolbox(["docs"], knowledge=tmp_path)
    result = await box.call("docs", {"query": "shuttle"})
    assert result.output == "1. a.md:1\na: The shuttle carries the weft."  # after its title, the file name
    await box.aclose()
    result = await box.call("docs", {"query": "shuttle"})
    assert result.status == "error"  # the index is closed with the box


async def test_an_empty_knowledge_folder_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ToolConfigError, match="no documents in"):
        await build_toolbox(["docs"], knowledge=tmp_path)
