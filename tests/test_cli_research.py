"""`loom solve --knowledge DIR`: claims in thoughts are checked against the user's documents."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from inprocess import loom_here
from openai_server import FakeOpenAIServer, Reply, Seen
from test_cli import assert_one_line_error, loom

TRUE = "Water boils at 100 degrees Celsius at sea level."
FALSE = "Water boils at 90 degrees Celsius at sea level."


def docs(tmp_path: Path) -> Path:
    folder = tmp_path / "kb"
    folder.mkdir()
    (folder / "physics.md").write_text("# Water\n\nSome intro.\n\nWater boils at 100 degrees Celsius at sea level.\n")
    return folder


def research_reply(seen: Seen) -> Reply:
    prompt = seen.body.get("prompt") or seen.body["messages"][-1]["content"]
    n = int(seen.body.get("n") or 1)
    texts = ["7"] * n if "scale of 0 to 10" in prompt else [FALSE, TRUE][:n]
    return Reply(200, {
        "id": "x", "object": "text_completion", "created": 0, "model": "m",
        "choices": [{"index": i, "text": t, "finish_reason": "stop"} for i, t in enumerate(texts)],
        "usage": {"prompt_tokens": 50, "completion_tokens": 10 * n, "total_tokens": 50 + 10 * n},
    })


def test_claims_are_checked_against_the_documents_with_citations(server: FakeOpenAIServer, tmp_path: Path) -> None:
    server.responder = research_reply
    model = f"openai-compatible:{server.url}@scripted#completions"
    # The default profile: claims are checked, citations are not required (research_synthesis requires them).
    proc = loom("solve", "--knowledge", str(docs(tmp_path)), "--model", model,
                "--breadth", "2", "--depth", "1", "--json", "At what temperature does water boil?")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    by_claim = {g["details"]["claims"][0]["claim"]: g for g in out["grounding"]}
    assert by_claim[TRUE]["verified"] is True and by_claim[TRUE]["citations"] == ["physics.md:5"]
    assert by_claim[FALSE]["verified"] is False and by_claim[FALSE]["citations"] == ["physics.md:5"]
    assert TRUE in [step["content"] for step in out["best_path"]]  # the verified claim outranks the refuted one
    assert out["stats"]["verified"] == 1 and out["stats"]["grounding_failed"] == 1


def test_the_progress_line_reports_each_grounding(server: FakeOpenAIServer, tmp_path: Path) -> None:
    server.responder = research_reply
    model = f"openai-compatible:{server.url}@scripted#completions"
    proc = loom("solve", "--knowledge", str(docs(tmp_path)), "--model", model, "--breadth", "2", "--depth", "1",
                "At what temperature does water boil?")
    assert proc.returncode == 0, proc.stderr
    assert "(research): FAILED" in proc.stderr and "(research): verified" in proc.stderr
    assert "grounding: 2 thoughts tested · 1 verified · 1 failed" in proc.stdout


def test_a_missing_knowledge_folder_exits_2_with_one_line(tmp_path: Path) -> None:
    assert_one_line_error(loom("solve", "--knowledge", str(tmp_path / "none"), "q"), str(tmp_path / "none"))


def test_a_knowledge_index_without_a_folder_exits_2() -> None:
    assert_one_line_error(loom("solve", "--knowledge-index", "x.sqlite", "q"), "--knowledge")


def test_hybrid_retrieval_without_the_embed_extra_exits_2_with_one_line(
        server: FakeOpenAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # what an environment without the extra imports
    server.responder = research_reply
    model = f"openai-compatible:{server.url}@scripted#completions"
    proc = loom_here(capsys, "solve", "--knowledge", str(docs(tmp_path)), "--retrieval", "hybrid", "--model", model,
                     "--breadth", "1", "--depth", "1", "At what temperature does water boil?")
    assert_one_line_error(proc, "pip install 'thoughtloom[embed]'")
    assert server.seen == []  # refused before any model call


def test_hybrid_retrieval_without_a_knowledge_folder_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    proc = loom_here(capsys, "solve", "--retrieval", "hybrid", "q")
    assert_one_line_error(proc, "--retrieval hybrid needs --knowledge")


def test_claims_are_checked_against_passages_found_by_hybrid_retrieval(
        server: FakeOpenAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("onnxruntime", reason="needs the 'embed' extra")
    server.responder = research_reply
    model = f"openai-compatible:{server.url}@scripted#completions"
    proc = loom_here(capsys, "solve", "--knowledge", str(docs(tmp_path)), "--retrieval", "hybrid", "--model", model,
                     "--breadth", "2", "--depth", "1", "--json", "At what temperature does water boil?")
    assert proc.returncode == 0, proc.stderr
    by_claim = {g["details"]["claims"][0]["claim"]: g for g in json.loads(proc.stdout)["grounding"]}
    assert by_claim[TRUE]["verified"] is True and by_claim[TRUE]["citations"] == ["physics.md:5"]
