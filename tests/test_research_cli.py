"""`loom research`: insights printed live, the cited synthesis, --json, one-line errors; on a real HTTP model and the embedded one."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from benchdata import hotpot_paragraphs
from inprocess import loom_here
from machine import scaled
from openai_server import FakeOpenAIServer, Reply, Seen

from thoughtloom.search.events import InsightFound
from thoughtloom.views.insights import InsightPrinter

LOOM = [sys.executable, "-m", "thoughtloom"]
QUESTION = "Who built the Argo?"


def loom(*args: str, timeout: float | None = None) -> subprocess.CompletedProcess[str]:
    """Run loom in a subprocess, as a user would (timeout: default 120 s scaled to this machine)."""
    return subprocess.run([*LOOM, *args], capture_output=True, text=True,
                          timeout=scaled(120) if timeout is None else timeout, env=dict(os.environ),
                          cwd=Path(__file__).parents[1])


def chat(text: str) -> Reply:
    return Reply(200, {"id": "x", "object": "chat.completion", "created": 0, "model": "m",
                       "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                    "finish_reason": "stop"}],
                       "usage": {"prompt_tokens": 30, "completion_tokens": 10, "total_tokens": 40}})


def argo_server(seen: Seen) -> Reply:
    """The flow's prompts answered by what they ask (the last user turn)."""
    asked = seen.body["messages"][-1]["content"]
    if "Hypotheses (" in asked and "Current hypothesis" not in asked:
        return chat("1. Argus - the shipwright.\n2. Jason - he led the crew.")
    hypothesis = re.search(r"Hypothesis: (\w+)", asked)
    if "Passages:" in asked and hypothesis is not None:
        return chat("1: SUPPORTS 0.9 named\n2: SUPPORTS 0.9 again" if hypothesis.group(1) == "Argus"
                    else "1: CONTRADICTS 0.9 he only led it")
    if "Alternative hypotheses" in asked:
        return chat("1. Athena - she helped.")
    if "Hypotheses:" in asked:
        return chat("ANSWER: Argus\nWHY: the passage names him [docs:argo.md:1-2].")
    return chat("1: UNRELATED 0 nothing")


@pytest.fixture
def docs(tmp_path: Path) -> str:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "argo.md").write_text("# The Argo\nThe Argo was built by Argus, with the help of Athena.\n")
    (folder / "argus.md").write_text("# Argus\nArgus the shipwright built the Argo for Jason.\n")
    (folder / "jason.md").write_text("# Jason\nJason led the Argonauts; he did not build the ship.\n")
    return str(folder)


@pytest.fixture
def model(server: FakeOpenAIServer) -> str:
    server.responder = argo_server
    return f"openai-compatible:{server.url}@scripted#chat"


def test_loom_research_prints_insights_then_the_cited_synthesis(docs: str, model: str) -> None:
    proc = loom("research", QUESTION, "--knowledge", docs, "--model", model, "--quiet", "--no-store")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    first_answer = next(i for i, line in enumerate(lines) if line.startswith("answer:"))
    assert lines[0].startswith("[discovery] #1 0.50 Argus")
    assert any(line.startswith("[evidence]") and "docs:argo.md" in line for line in lines[:first_answer])
    assert any(line.startswith("[contradiction]") for line in lines[:first_answer])
    assert lines[first_answer].startswith("answer: Argus")
    assert "citations: docs:" in proc.stdout and "stopped by confidence_threshold" in proc.stdout


def test_loom_research_json_is_the_research_result(docs: str, model: str, capsys: pytest.CaptureFixture[str]) -> None:
    proc = loom_here(capsys, "research", QUESTION, "--knowledge", docs, "--model", model, "--json", "--quiet",
                     "--no-store")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["answer"]["answer"] == "Argus" and out["answer"]["citations"][0].startswith("docs:")
    assert out["confidence"] == out["answer"]["confidence"] > 0.9
    assert {"tree", "insights", "statistics", "transitions"} <= set(out)
    assert out["statistics"]["hypotheses_generated"] == 2 and out["insights"][0]["type"] == "discovery"
    assert out["run"]["usage"]["calls"] >= 4 and out["run"]["termination_reason"] == "confidence_reached"


def test_loom_research_shows_which_final_citations_were_verified(
        docs: str, server: FakeOpenAIServer, capsys: pytest.CaptureFixture[str]) -> None:
    def ghost(seen: Seen) -> Reply:
        asked = seen.body["messages"][-1]["content"]
        if "Hypotheses:" in asked and "Hypotheses (" not in asked:
            return chat("ANSWER: Argus\nWHY: named twice [docs:argo.md:1-2] [docs:ghost.md:7].")
        return argo_server(seen)

    server.responder = ghost
    model = f"openai-compatible:{server.url}@scripted#chat"
    text = loom_here(capsys, "research", QUESTION, "--knowledge", docs, "--model", model, "--quiet", "--no-store")
    assert text.returncode == 0, text.stderr
    cited = next(line for line in text.stdout.splitlines() if line.startswith("  citations: "))
    assert "docs:argo.md:2" in cited and "ghost" not in cited  # argo.md:1-2 narrowed to the line naming Argus
    assert "  not verified: docs:ghost.md:7 (no_source: no passage of that document was read in this run)" \
        in text.stdout.splitlines()
    out = json.loads(loom_here(capsys, "research", QUESTION, "--knowledge", docs, "--model", model, "--json",
                               "--quiet", "--no-store").stdout)
    checks = {c["ref"]: c["valid"] for c in out["answer"]["citation_checks"]}
    assert checks["docs:argo.md:2"] is True and checks["docs:ghost.md:7"] is False


def test_a_stored_research_run_replays_from_the_cli(
        docs: str, model: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = str(tmp_path / "runs.db")
    proc = loom_here(capsys, "research", QUESTION, "--knowledge", docs, "--model", model, "--json", "--quiet",
                     "--store", store)
    assert proc.returncode == 0, proc.stderr
    run_id = json.loads(proc.stdout)["run"]["run_id"]
    replay = loom_here(capsys, "replay", run_id, "--store", store)
    assert replay.returncode == 0, replay.stderr
    assert "identical" in (replay.stdout + replay.stderr)


@pytest.fixture
def hostile_docs(docs: str, tmp_path: Path) -> str:
    """The Argo documents beside a pipe, links to a secret outside the folder and to /dev/zero, a huge
    sparse file and a name that is not UTF-8."""
    folder = Path(docs)
    (tmp_path / "secret.md").write_text("Argus was paid with the vault password swordfish.\n")
    os.mkfifo(folder / "pipe.md")
    os.symlink(tmp_path / "secret.md", folder / "leak.md")
    os.symlink("/dev/zero", folder / "zero.md")
    with (folder / "huge.txt").open("wb") as fh:
        fh.write(b"Argus " * 100)
        fh.truncate(300 * 1024 * 1024)  # sparse: no 300 MB written
    with open(os.fsencode(folder) + b"/\xff.md", "wb") as fh:
        fh.write(b"Argus built it.\n")
    return docs


@pytest.mark.timeout(scaled(180))
@pytest.mark.parametrize("command", ["research", "solve"])
def test_a_knowledge_folder_with_hostile_entries_still_answers_from_the_good_files(
        hostile_docs: str, model: str, server: FakeOpenAIServer, command: str) -> None:
    proc = loom(command, QUESTION, "--knowledge", hostile_docs, "--model", model, "--quiet", "--no-store",
                timeout=scaled(120))
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr and "answer" in proc.stdout
    warned = [line for line in proc.stderr.splitlines() if "not indexed" in line]
    assert len(warned) == 1 and all(n in warned[0] for n in ("pipe.md", "leak.md", "zero.md", "huge.txt", "\\xff.md"))
    sent = json.dumps([seen.body for seen in server.seen])
    assert server.seen and "swordfish" not in sent


@pytest.mark.parametrize(("args", "said"), [
    (("--max-branches", "40"), "unbounded branching"),
    (("--pruning-threshold", "0"), "prunes nothing"),
    (("--confidence-threshold", "0.5"), "premature convergence"),
    (("--bridge-hops", "-1"), "--bridge-hops must be at least 0"),
    (("--brancher-model", "nosuch:thing"), "--brancher-model"),
])
def test_bad_research_settings_are_one_line_errors(
        docs: str, args: tuple[str, ...], said: str, capsys: pytest.CaptureFixture[str]) -> None:
    proc = loom_here(capsys, "research", QUESTION, "--knowledge", docs, "--no-store", *args)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and said in proc.stderr


def test_an_anti_pattern_allowed_explicitly_runs(docs: str, model: str, capsys: pytest.CaptureFixture[str]) -> None:
    proc = loom_here(capsys, "research", QUESTION, "--knowledge", docs, "--model", model, "--max-branches", "12",
                     "--allow", "unbounded_branching", "--quiet", "--no-store")
    assert proc.returncode == 0, proc.stderr


def test_an_empty_question_is_a_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    proc = loom_here(capsys, "research", "  ", "--no-store")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and "empty" in proc.stderr


def test_model_text_in_an_insight_is_escaped_for_the_terminal() -> None:
    out = io.StringIO()
    InsightPrinter(out, io.StringIO())(InsightFound("evidence", "\x1b[2J\x1b]0;pwned\x07 Argus", 0.8, 3, 1,
                                                    "docs:a\x1b[31m.md:1"))
    assert "\x1b" not in out.getvalue() and "\x07" not in out.getvalue() and "Argus" in out.getvalue()


@pytest.mark.local_model
@pytest.mark.timeout(scaled(900))
def test_loom_research_streams_insights_and_a_cited_synthesis_on_the_embedded_model(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "paragraphs"
    row = hotpot_paragraphs(0, folder)
    proc = loom_here(capsys, "research", row["question"], "--knowledge", str(folder), "--quiet", "--no-store",
                     "--seed", "1")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("[discovery]") and "[evidence]" in proc.stdout
    assert re.search(r"^synthesis \(.+\): ", proc.stdout, re.MULTILINE)
    assert re.search(r"citations: docs:\d\d\.md:\d", proc.stdout)


def test_the_progress_line_shows_the_flows_state_and_insights() -> None:
    from thoughtloom.search.events import FlowTransitioned, NodeAdded
    from thoughtloom.views.progress import ProgressDisplay

    progress = ProgressDisplay(io.StringIO())
    for event in (FlowTransitioned("streaming", "branch", "branching"), NodeAdded(1, (0,), "hypothesis", 1, "A", "x"),
                  InsightFound("discovery", "A", 0.5, 1, 1)):
        progress(event)
    assert progress.status().startswith("flow branching · hypotheses 1 (pruned 0) · evidence 0 · insights 1")
