"""Observability: a failing event sink is logged, not raised; --events writes the event stream as JSON Lines."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from test_cli import assert_one_line_error, loom
from test_search import game24_model as scripted_game24

from thoughtloom.llm.budget import BudgetLimits
from thoughtloom.llm.gateway import Gateway
from thoughtloom.search import SearchConfig, search
from thoughtloom.search.events import Event, EventBus, GoalFound
from thoughtloom.tasks import get_task

ONE_PATH = {"4 5 6 10": "10 - 4 = 6 (left: 5 6 6)", "5 6 6": "5 * 6 = 30 (left: 6 30)", "6 30": "30 - 6 = 24 (left: 24)"}


async def _solve_with(*sinks) -> object:
    gateway = Gateway(scripted_game24(ONE_PATH), BudgetLimits(tokens=100_000))
    return await search(get_task("game24"), "4 5 6 10", gateway, SearchConfig(strategy="bfs"), sinks=list(sinks))


async def test_a_sink_that_raises_does_not_stop_the_search(caplog: pytest.LogCaptureFixture) -> None:
    def broken(event: Event) -> None:
        raise RuntimeError("display crashed")

    seen: list[Event] = []
    with caplog.at_level(logging.DEBUG, logger="thoughtloom.search.events"):
        result = await _solve_with(broken, seen.append)
    assert result.termination_reason == "goal_reached"
    assert any(isinstance(e, GoalFound) for e in seen)  # sinks after the broken one still get every event


async def test_a_failing_sink_is_logged_in_full_once_with_its_traceback(caplog: pytest.LogCaptureFixture) -> None:
    def broken(event: Event) -> None:
        raise RuntimeError("display crashed")

    with caplog.at_level(logging.DEBUG, logger="thoughtloom.search.events"):
        await _solve_with(broken)
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1
    assert errors[0].exc_info is not None and "display crashed" in str(errors[0].exc_info[1])
    assert any(r.levelno == logging.DEBUG and "failed again" in r.getMessage() for r in caplog.records)


def test_keyboard_interrupt_in_a_sink_still_reaches_the_caller() -> None:
    def interrupted(event: Event) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        EventBus([interrupted]).emit(GoalFound(1))


def test_events_file_holds_one_json_event_per_line_from_start_to_stop(server, tmp_path: Path) -> None:
    from test_cli import game24_server_reply

    server.responder = game24_server_reply
    target = tmp_path / "events.jsonl"
    proc = loom("solve", "--task", "game24", "--model", f"openai-compatible:{server.url}@scripted#completions",
                "--quiet", "--no-store", "--events", str(target), "4 5 6 10")
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in target.read_text().splitlines()]
    assert events[0]["type"] == "search_started" and events[0]["problem"] == "4 5 6 10"
    assert events[-1]["type"] == "search_stopped" and events[-1]["reason"] == "goal_reached"
    types = {e["type"] for e in events}
    assert {"node_added", "node_scored", "budget_spent", "goal_found"} <= types
    assert all(isinstance(e["t"], float | int) for e in events)
    assert [e["t"] for e in events] == sorted(e["t"] for e in events)


def test_events_file_escapes_model_text_so_each_event_stays_one_line(tmp_path: Path) -> None:
    from thoughtloom.search.events import NodeAdded
    from thoughtloom.views.events_log import EventLog

    target = tmp_path / "events.jsonl"
    with open(target, "w", encoding="utf-8") as fh:
        log = EventLog(fh)
        log(NodeAdded(1, (0,), "hypothesis", 1, "two\nlines \x1b[31mred\u2028sep", "generate"))
    lines = target.read_text(encoding="utf-8").split("\n")
    assert len(lines) == 2 and lines[1] == ""
    assert "\x1b" not in lines[0] and "\u2028" not in lines[0]
    assert json.loads(lines[0])["content"] == "two\nlines \x1b[31mred\u2028sep"


def test_events_into_a_missing_directory_exits_2_before_any_work(tmp_path: Path) -> None:
    proc = loom("solve", "--task", "game24", "--events", str(tmp_path / "no" / "events.jsonl"), "4 5 6 10")
    assert_one_line_error(proc, "--events")
