"""A hostile model cannot drive the user's terminal or the Mermaid picture: its text is escaped.

The scripted server answers every request with escape sequences (clear screen, window title, an
OSC 8 link), C1 CSI, a bidi override and Mermaid/HTML syntax; loom solve, show, runs and the Mermaid
file must show that text, never emit it raw.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from openai_server import FakeOpenAIServer, always
from test_cli import loom

from thoughtloom.search.events import ControlDecision, ThoughtGrounded
from thoughtloom.views.progress import ProgressDisplay
from thoughtloom.views.terminal import terminal_json, terminal_text

# Mermaid syntax first: labels are cut at 70 characters.
HOSTILE = (
    '"] click n0 <img src=x> `md` #quot; '
    "\x1b[2J\x1b]0;pwned\x07\x1b]8;;http://evil\x07x\x1b]8;;\x07 \u202eevil\u202c \x9b31m"
)
RAW = ("\x1b", "\x07", "\x9b", "\u202e")


#: Every answer, chat or completion, is HOSTILE (sent as JSON, escapes and all, as a server may).
hostile_reply = always(HOSTILE)


@pytest.fixture
def hostile_model(server: FakeOpenAIServer) -> str:
    """A model spec for a server whose every reply is HOSTILE."""
    server.responder = hostile_reply
    return f"openai-compatible:{server.url}@m"


def solve(model: str, *extra: str) -> tuple[str, str]:
    """loom solve of a general problem on the hostile model; stdout and stderr."""
    proc = loom("solve", "--model", model, "--depth", "1", "--breadth", "2", "--budget-calls", "6", *extra,
                "plan a picnic")
    assert proc.returncode == 0, proc.stderr
    return proc.stdout, proc.stderr


def assert_nothing_raw(*texts: str) -> None:
    for text in texts:
        for char in RAW:
            assert char not in text, f"raw {char!r} in {text!r}"


def test_terminal_text_shows_controls_bidi_and_bad_bytes_as_escapes() -> None:
    shown = terminal_text("a\x1b[2J\x07\r\x7f\x9b\u202e\u2066\udcff\nb\tc")
    assert shown == "a\\x1b[2J\\x07\\x0d\\x7f\\x9b\\u202e\\u2066\\xff\\nb\tc"


def test_terminal_text_keeps_line_breaks_when_asked() -> None:
    assert terminal_text("def f():\n\treturn '\x1b'", newlines=True) == "def f():\n\treturn '\\x1b'"


def test_terminal_json_is_the_same_json_without_raw_controls() -> None:
    value = {"answer": HOSTILE, "bad\udcff": "\x7f"}
    text = terminal_json(value, indent=2)
    assert_nothing_raw(text)
    assert "\x7f" not in text and "\udcff" not in text
    assert json.loads(text) == value


def test_solve_text_output_and_progress_show_escapes_not_raw_sequences(hostile_model: str) -> None:
    out, err = solve(hostile_model)
    assert_nothing_raw(out, err)
    assert "\\x1b]0;pwned\\x07" in out
    assert "\\u202eevil" in out


def test_progress_lines_show_program_output_and_reasons_escaped() -> None:
    stream = io.StringIO()
    display = ProgressDisplay(stream)
    display(ThoughtGrounded(node_id=1, grounder="code", verified=False, passed=0, failed=1, before=0.5, after=0.1,
                            evidence=HOSTILE))
    display(ControlDecision(kind="depth", decision="stop", reason=HOSTILE))
    shown = stream.getvalue()
    assert_nothing_raw(shown)
    assert shown.count("\\x1b]0;pwned\\x07") == 2
    assert len(shown.splitlines()) == 2


def test_solve_json_output_carries_the_text_exactly_and_escaped(hostile_model: str) -> None:
    out, err = solve(hostile_model, "--json", "--quiet")
    assert_nothing_raw(out, err)
    contents = [step["content"] for step in json.loads(out)["best_path"]]
    assert any(HOSTILE.strip() in c for c in contents)


def test_mermaid_labels_cannot_inject_syntax_html_or_escapes(hostile_model: str, tmp_path: Path) -> None:
    target = tmp_path / "g.mmd"
    solve(hostile_model, "--quiet", "--mermaid", str(target))
    text = target.read_text(encoding="utf-8")
    assert_nothing_raw(text)
    assert "<img" not in text and "`" not in text
    assert not re.search(r"^\s*click\b", text, re.M)
    nodes = [line for line in text.splitlines() if re.match(r"\s+n\d+\[", line)]
    assert len(nodes) > 1
    for line in nodes:  # one quoted string per label: the model's quote did not end it
        assert re.fullmatch(r'\s+n\d+\["[^"]*"\]', line), line
    assert "#quot;" in text and "#lt;img" in text and "#35;quot;" in text


def test_show_and_runs_print_stored_model_text_escaped(hostile_model: str) -> None:
    solve(hostile_model, "--quiet")
    runs = loom("runs")
    assert runs.returncode == 0, runs.stderr
    assert_nothing_raw(runs.stdout, runs.stderr)
    run_id = json.loads(loom("runs", "--json").stdout.splitlines()[0])["id"]
    for args in (("show", run_id), ("show", run_id, "--json"), ("runs", "--json")):
        proc = loom(*args)
        assert proc.returncode == 0, proc.stderr
        assert_nothing_raw(proc.stdout, proc.stderr)
    assert "\\x1b]0;pwned" in loom("show", run_id).stdout
