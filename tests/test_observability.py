"""Observability: a failing event sink is logged, not raised; --events writes the event stream as JSON Lines."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest
from benchdata import needs
from machine import scaled
from test_cli import assert_one_line_error, loom
from test_search import game24_model as scripted_game24

from thoughtloom.grounding.types import GroundingResult, Thought
from thoughtloom.llm.budget import BudgetLimits
from thoughtloom.llm.errors import BudgetExceeded, TransientModelError
from thoughtloom.llm.fake import ScriptedBackend
from thoughtloom.llm.gateway import Gateway, RetryPolicy
from thoughtloom.llm.types import GenerateRequest, Prompt
from thoughtloom.search import SearchConfig, search
from thoughtloom.search.events import Event, EventBus, GoalFound
from thoughtloom.tasks import get_task
from thoughtloom.views.logs import TerminalFormatter, log_level

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


# --- logging: the library logs what it does; the CLI shows it with -v / --log-level ---------------

FAST = RetryPolicy(max_attempts=3, base_delay_s=0.001)


def _records(caplog: pytest.LogCaptureFixture, logger: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == logger]


async def test_a_retried_transient_error_is_logged_with_its_attempt(caplog: pytest.LogCaptureFixture) -> None:
    fake = ScriptedBackend(default="ok", failures=[TransientModelError("503 busy")])
    with caplog.at_level(logging.INFO, logger="thoughtloom.llm.gateway"):
        await Gateway(fake, retry=FAST).generate(GenerateRequest(Prompt("x")))
    assert any("attempt 1 of 3" in m and "503 busy" in m and "retrying" in m
               for m in _records(caplog, "thoughtloom.llm.gateway"))


async def test_a_budget_refusal_is_logged_with_the_limit(caplog: pytest.LogCaptureFixture) -> None:
    gw = Gateway(ScriptedBackend(default="ok"), BudgetLimits(calls=1), retry=FAST)
    await gw.generate(GenerateRequest(Prompt("x"), purpose="value"))
    with caplog.at_level(logging.INFO, logger="thoughtloom.llm.gateway"), pytest.raises(BudgetExceeded):
        await gw.generate(GenerateRequest(Prompt("x"), purpose="value"))
    assert any(m.startswith("budget refused a value call (calls limit)")
               for m in _records(caplog, "thoughtloom.llm.gateway"))


class _Checker:
    """A grounder that verifies every thought."""

    name = "checker"

    def can_ground(self, thought: Thought) -> bool:
        return True

    async def ground(self, thought: Thought) -> GroundingResult:
        return GroundingResult("checker", True, True, "ran it", 1.0)


async def test_grounding_a_thought_is_logged_with_its_verdict(caplog: pytest.LogCaptureFixture) -> None:
    gateway = Gateway(scripted_game24(ONE_PATH), BudgetLimits(tokens=100_000))
    with caplog.at_level(logging.INFO, logger="thoughtloom.search.grounding_step"):
        await search(get_task("game24"), "4 5 6 10", gateway, SearchConfig(strategy="bfs"), grounders=[_Checker()])
    assert any("grounded by checker: verified" in m for m in _records(caplog, "thoughtloom.search.grounding_step"))


async def test_a_failed_tool_call_is_logged_with_its_status(caplog: pytest.LogCaptureFixture) -> None:
    from thoughtloom.tools.registry import build_toolbox

    box = await build_toolbox(["calc"])
    with caplog.at_level(logging.INFO, logger="thoughtloom.tools.toolbox"):
        await box.call("shell\x1b[2J", {"cmd": "rm"})
    await box.aclose()
    assert _records(caplog, "thoughtloom.tools.toolbox") == [
        "tool 'shell\\x1b[2J' unknown_tool: \"no tool 'shell\\\\x1b[2J' was granted (granted: calc)\""]


def test_log_lines_on_the_terminal_escape_model_text() -> None:
    record = logging.LogRecord("thoughtloom.llm.gateway", logging.INFO, __file__, 1,
                               "call failed: %s", ("\x1b]0;owned\x07\u202e",), None)
    line = TerminalFormatter().format(record)
    assert line == "loom: info thoughtloom.llm.gateway: call failed: \\x1b]0;owned\\x07\\u202e"


def test_log_level_from_flags() -> None:
    assert (log_level(0, None), log_level(1, None), log_level(2, None)) == (logging.WARNING, logging.INFO, logging.DEBUG)
    assert log_level(2, "error") == logging.ERROR  # --log-level wins over -v


def _retry_server(server) -> str:
    from openai_server import Reply
    from test_cli import game24_server_reply

    calls = []

    def reply(seen):
        calls.append(seen)
        if len(calls) == 1:
            return Reply(503, {"error": {"message": "overloaded"}})
        return game24_server_reply(seen)

    server.responder = reply
    return f"openai-compatible:{server.url}@scripted#completions"


@pytest.mark.parametrize("flags", [("-v",), ("--log-level", "info")], ids=["-v", "--log-level"])
def test_verbose_cli_shows_retries_on_stderr(server, flags: tuple[str, ...]) -> None:
    proc = loom("solve", *flags, "--task", "game24", "--model", _retry_server(server), "--quiet", "--no-store",
                "4 5 6 10")
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"^loom: info thoughtloom\.llm\.gateway: .*transient error \(attempt 1 of \d\).*retrying",
                     proc.stderr, re.MULTILINE), proc.stderr


def test_without_flags_the_cli_logs_no_retries(server) -> None:
    proc = loom("solve", "--task", "game24", "--model", _retry_server(server), "--quiet", "--no-store", "4 5 6 10")
    assert proc.returncode == 0, proc.stderr
    assert "retrying" not in proc.stderr and proc.stderr == ""


def test_verbose_also_works_before_the_command(server) -> None:
    proc = loom("-v", "solve", "--task", "game24", "--model", _retry_server(server), "--quiet", "--no-store",
                "4 5 6 10")
    assert "retrying" in proc.stderr, proc.stderr


# --- the live progress line on a terminal ------------------------------------------------------

def _loom_on_a_terminal(columns: int, *args: str) -> str:
    """Run loom with stdin, stdout and stderr on a pseudo-terminal `columns` wide; what the terminal received."""
    import fcntl
    import os
    import pty
    import struct
    import subprocess
    import sys
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    proc = subprocess.Popen([sys.executable, "-m", "thoughtloom", *args], stdin=slave, stdout=slave, stderr=slave,
                            env={**env, "TERM": "xterm"}, cwd=Path(__file__).parents[1])
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # the other side closed: the process is gone
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=scaled(60))
    os.close(master)
    return b"".join(chunks).decode("utf-8", "replace")


def test_the_progress_line_fits_an_80_column_terminal(server) -> None:
    from test_cli import game24_server_reply

    server.responder = game24_server_reply
    shown = _loom_on_a_terminal(80, "solve", "--task", "game24", "--no-store", "--no-interactive", "--budget-tokens",
                                "200000", "--model", f"openai-compatible:{server.url}@scripted#completions",
                                "4 5 6 10")
    # Where the line is erased before a redraw (\r ESC[K or ESC[1G ESC[2K): what follows, up to a new line.
    drawn = [part.split("\r\n")[0] for part in re.split(r"\r\x1b\[K|\x1b\[1G\x1b\[2K", shown)[1:]]
    statuses = [d for d in drawn if d.startswith("nodes ")]
    assert statuses, shown
    assert all(len(s) <= 79 for s in statuses), statuses
    assert statuses[-1].endswith("…")  # the full line (tokens of 200,000, calls, time) is wider than 80
    assert "stopped: goal_reached" in shown


# --- loom bench: an ETA on every progress line but the last ---------------------------------------

def test_eta_is_the_pace_so_far_times_the_runs_left() -> None:
    from thoughtloom.eval.runner import eta_text

    assert eta_text(10.0, 2, 3) == "15s"
    assert eta_text(60.0, 1, 3) == "3m00s"
    assert eta_text(100.0, 1, 40) == "1h06m"


@needs("game24/24_dev.csv")
def test_bench_progress_shows_an_eta_until_the_last_run(server, tmp_path: Path) -> None:
    from test_bench_cli import DATA, completions, spec

    server.responder = completions({})
    proc = loom("bench", "--tasks", "game24", "--model", spec(server), "--data-dir", str(DATA), "--out",
                str(tmp_path / "run"), "--select", "first", "--lanes", "io,cot", "--limit", "2", "--budget-tokens",
                "2000")
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if re.match(r"loom bench: \[\d+/4\]", line)]
    assert len(lines) == 4, proc.stderr
    assert all(re.search(r" · ETA \d+s$", line) for line in lines[:3]), lines
    assert "ETA" not in lines[3]


def test_a_log_record_on_a_terminal_erases_the_progress_line_first() -> None:
    import io

    from thoughtloom.views.logs import TerminalHandler

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    stream = Tty()
    stream.write("nodes 7 (pruned 0, rejected 1) · depth")  # a progress line, drawn without a line end
    TerminalHandler(stream).handle(logging.LogRecord("thoughtloom.x", logging.INFO, __file__, 1, "retrying", (), None))
    assert stream.getvalue() == "nodes 7 (pruned 0, rejected 1) · depth\x1b[1G\x1b[2Kloom: info thoughtloom.x: retrying\n"


@pytest.mark.local_model
def test_events_and_logs_from_a_run_on_the_embedded_model(tmp_path: Path) -> None:
    target = tmp_path / "events.jsonl"
    proc = loom("solve", "--task", "game24", "--quiet", "--no-store", "--seed", "1", "--budget-tokens", "1500",
                "--events", str(target), "--log-level", "debug", "4 5 6 10", timeout=scaled(900))
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in target.read_text().splitlines()]
    assert events[0]["type"] == "search_started" and events[-1]["type"] == "search_stopped"
    assert any(e["type"] == "budget_spent" for e in events)
    # Every log record is one escaped line of ours (llama.cpp's own log stays out unless configured).
    lines = [line for line in proc.stderr.splitlines() if line]
    assert lines and all(line.startswith(("loom: debug ", "loom: info ")) for line in lines), lines


async def test_every_answered_call_is_logged_at_debug(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="thoughtloom.llm.gateway"):
        await Gateway(ScriptedBackend(default="ok"), retry=FAST).generate(GenerateRequest(Prompt("x"), purpose="value"))
    assert any(m.startswith("value call to fake:scripted: 1 samples,") for m in _records(caplog, "thoughtloom.llm.gateway"))
