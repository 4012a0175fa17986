"""Domain profiles mean what they say: every setting a profile holds is read by the run and acted on.

The code_generation profile penalizes what no grounder could verify; the debugging profile's regression
tests can be switched off; research_synthesis requires --knowledge, poses the problem with the passages
to cite, checks every citation and applies its cross-reference threshold; design checks each thought
against its own path; `loom profiles` shows all of it.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from inprocess import loom_here
from machine import scaled
from openai_server import FakeOpenAIServer, Reply, Seen
from test_cli import assert_one_line_error, loom
from test_cli_grounding import model_spec
from test_debugging_grounder import CALC, FAILING, FIXED_CALC, TEST_CALC

from thoughtloom.api import Grants, areplay, asolve
from thoughtloom.control.profiles import PROFILES
from thoughtloom.grounding.types import GroundingResult, Thought
from thoughtloom.llm.fake import ScriptedBackend
from thoughtloom.run.spec import resolve
from thoughtloom.store.sqlite import SQLiteStore
from thoughtloom.tasks.registry import TaskOptions

QUESTION = "At what temperature does water boil?"
CITED_TRUE = "Water boils at 100 degrees Celsius at sea level [physics.md:5]."
MADE_UP_SOURCE = "Water boils at 100 degrees Celsius at sea level [chemistry.md:2]."
UNCITED_TRUE = "Water boils at 100 degrees Celsius at sea level."


def docs(tmp_path: Path) -> Path:
    folder = tmp_path / "kb"
    folder.mkdir()
    (folder / "physics.md").write_text("# Water\n\nSome intro.\n\nWater boils at 100 degrees Celsius at sea level.\n")
    (folder / "metals.md").write_text("Copper conducts electricity.\n")
    return folder


def scripted(server: FakeOpenAIServer, steps: list[str], seen: list[str] | None = None) -> str:
    """A completions model: the given steps for a step prompt (n of them), 7/10 for a value prompt, else the first step."""

    def reply(s: Seen) -> Reply:
        prompt = s.body.get("prompt") or s.body["messages"][-1]["content"]
        if seen is not None:
            seen.append(prompt)
        n = int(s.body.get("n") or 1)
        texts = ["7"] * n if "scale of 0 to 10" in prompt else (steps * n)[:n]
        return Reply(200, {
            "id": "x", "object": "text_completion", "created": 0, "model": "m",
            "choices": [{"index": i, "text": t, "finish_reason": "stop"} for i, t in enumerate(texts)],
            "usage": {"prompt_tokens": 50, "completion_tokens": 10 * n, "total_tokens": 50 + 10 * n},
        })

    server.responder = reply
    return f"openai-compatible:{server.url}@scripted#completions"


def solve_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    """`loom solve ARGS --json --quiet` run in this process (the subprocess form is tested once, below)."""
    proc = loom_here(capsys, "solve", *args, "--json", "--quiet")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


# --- loom profiles shows every setting ------------------------------------------------------------


def test_loom_profiles_shows_each_profiles_checks() -> None:
    proc = loom("profiles")
    assert proc.returncode == 0, proc.stderr
    lines = {line.split()[0]: line for line in proc.stdout.split("other settings:")[1].splitlines() if line.strip()}
    assert "require_citations=true" in lines["research_synthesis"]
    assert "cross_reference_threshold=0.7" in lines["research_synthesis"]
    assert "run_regression_tests=true" in lines["debugging"]
    assert "check_consistency=true" in lines["design"]
    assert "breadth=3" in lines["strategic_planning"]


def test_loom_profiles_json_holds_every_setting_of_every_profile() -> None:
    proc = loom("profiles", "--json")
    assert proc.returncode == 0, proc.stderr
    by_name = {p["name"]: p for p in json.loads(proc.stdout)}
    assert set(by_name) == set(PROFILES)
    assert by_name["research_synthesis"]["checks"] == {
        "run_regression_tests": None, "require_citations": True, "cross_reference_threshold": 0.7,
        "check_consistency": False,
    }
    assert by_name["code_generation"]["grounding"]["unverified_factor"] == 0.5
    assert by_name["strategic_planning"]["search"]["breadth"] == 3


# --- code_generation: a thought no grounder could verify is penalized ----------------------------


class Blind:
    """A grounder that can test nothing."""

    name = "blind"

    def can_ground(self, thought: Thought) -> bool:
        return False

    async def ground(self, thought: Thought) -> GroundingResult:
        raise AssertionError("never asked")


def test_code_generation_profile_halves_the_score_of_a_thought_no_grounder_could_verify() -> None:
    fake = ScriptedBackend(default="Paris is the capital of France.").on("scale of 0 to 10", "10")
    common: dict[str, Any] = {"task": "general", "model": fake, "grounders": [Blind()], "max_depth": 1, "breadth": 1,
                              "controller": False}
    plain = asyncio.run(asolve("What is the capital of France?", **common))
    required = asyncio.run(asolve("What is the capital of France?", profile="code_generation", **common))
    assert plain.best_path[1].score == 1.0
    assert required.best_path[1].score == 0.5


# --- debugging: regression tests can be switched off ----------------------------------------------

BREAKS_MUL = FIXED_CALC.replace("return a * b", "return a + b")


def repo(tmp_path: Path) -> Path:
    folder = tmp_path / "repo"
    folder.mkdir()
    (folder / "calc.py").write_text(CALC)
    (folder / "test_calc.py").write_text(TEST_CALC)
    return folder


def test_the_debugging_profiles_regression_tests_reach_the_debug_task(tmp_path: Path) -> None:
    options = TaskOptions(repo=repo(tmp_path), failing_test=FAILING)
    on = resolve("", task="debug", profile="debugging", task_options=options)
    off = resolve("", task="debug", profile="debugging", task_options=options, checks={"run_regression_tests": False})
    assert on.task_options.regression_tests is True and on.task_object().regression_tests is True
    assert off.task_options.regression_tests is False and off.task_object().regression_tests is False


def test_a_fix_that_breaks_another_test_fails_when_the_suite_runs(
        server: FakeOpenAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = model_spec(server, lambda p: BREAKS_MUL if "(fixed)" in p else "add() in calc.py subtracts.")
    out = solve_json(capsys, "--profile", "debugging", "--repo", str(repo(tmp_path)), "--failing-test", FAILING,
                     "--model", model, "--breadth", "1", "--depth", "2")
    fix = next(g for g in out["grounding"] if g.get("details", {}).get("kind") == "fix")
    assert fix["verified"] is False and fix["details"]["suite"]["failed"] == 1
    assert out["solved"] is False


def test_without_regression_tests_a_fix_is_judged_by_the_failing_test_alone(
        server: FakeOpenAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = model_spec(server, lambda p: BREAKS_MUL if "(fixed)" in p else "add() in calc.py subtracts.")
    out = solve_json(capsys, "--profile", "debugging", "--repo", str(repo(tmp_path)), "--failing-test", FAILING,
                     "--model", model, "--breadth", "1", "--depth", "2", "--no-regression-tests")
    fix = next(g for g in out["grounding"] if g.get("details", {}).get("kind") == "fix")
    assert fix["verified"] is True and fix["details"]["suite"] is None
    assert "the rest of the suite was not run" in fix["evidence"]


def test_no_regression_tests_is_refused_for_a_task_that_runs_no_suite() -> None:
    assert_one_line_error(loom("solve", "--task", "game24", "--no-regression-tests", "4 5 6 10"),
                          "game24", "--no-regression-tests")


# --- research_synthesis: documents required, sources posed, citations checked ------------------


def test_the_research_profile_needs_a_knowledge_folder() -> None:
    assert_one_line_error(loom("solve", "--profile", "research_synthesis", QUESTION), "research_synthesis",
                          "--knowledge")


def test_the_research_profile_poses_the_problem_with_the_passages_to_cite(
        server: FakeOpenAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    seen: list[str] = []
    model = scripted(server, [CITED_TRUE], seen)
    out = solve_json(capsys, "--profile", "research_synthesis", "--knowledge", str(docs(tmp_path)), "--model", model,
                     "--breadth", "1", "--depth", "1", QUESTION)
    assert "[physics.md:5] Water: Water boils at 100 degrees Celsius at sea level." in seen[0]  # after its title
    assert "as [file:line]" in seen[0]
    assert out["problem"] == QUESTION  # the result keeps the user's question


def test_the_research_profile_grounds_claims_and_checks_their_citations(
        server: FakeOpenAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = scripted(server, [CITED_TRUE, MADE_UP_SOURCE])
    out = solve_json(capsys, "--profile", "research_synthesis", "--knowledge", str(docs(tmp_path)), "--model", model,
                     "--breadth", "2", "--depth", "1", QUESTION)
    by_ref = {g["details"]["citation_check"]["checks"][0]["ref"]: g for g in out["grounding"]}
    good, bad = by_ref["physics.md:5"], by_ref["chemistry.md:2"]
    assert good["grounder"] == "research" and good["verified"] is True
    assert good["details"]["claims"][0]["verdict"] == "supported"
    assert good["details"]["citation_check"]["checks"][0]["status"] == "supports"
    assert bad["verified"] is False
    assert bad["details"]["citation_check"]["checks"][0]["status"] == "no_source"
    assert CITED_TRUE in [step["content"] for step in out["best_path"]]


def test_the_research_profile_does_not_verify_a_claim_that_cites_nothing(
        server: FakeOpenAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = scripted(server, [UNCITED_TRUE])
    args = ["--knowledge", str(docs(tmp_path)), "--model", model, "--breadth", "1", "--depth", "1", QUESTION]
    required = solve_json(capsys, "--profile", "research_synthesis", *args)["grounding"][0]
    plain = solve_json(capsys, *args)["grounding"][0]
    assert plain["verified"] is True
    assert required["verified"] is None
    assert required["details"]["citation_check"]["uncited_claims"] == [UNCITED_TRUE]
    assert "cite nothing (citations are required)" in required["evidence"]


def test_the_research_profiles_cross_reference_threshold_refuses_a_partial_match(
        server: FakeOpenAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # "Copper conducts electricity." covers 2 of the claim's 3 terms: enough for the judge's 2/3, not for 0.7.
    model = scripted(server, ["Copper conducts heat [metals.md:1]."])
    args = ["--knowledge", str(docs(tmp_path)), "--model", model, "--breadth", "1", "--depth", "1",
            "What does copper conduct?"]
    loose = solve_json(capsys, *args)["grounding"][0]
    strict = solve_json(capsys, "--profile", "research_synthesis", *args)["grounding"][0]
    assert loose["verified"] is True
    assert strict["verified"] is False
    assert strict["details"]["citation_check"]["checks"][0]["status"] == "unrelated"


def test_a_stored_research_profile_run_replays_into_the_same_graph_with_its_checks(tmp_path: Path) -> None:
    fake = ScriptedBackend(default=CITED_TRUE).on("scale of 0 to 10", "7").on("Final answer:", "100 degrees.")
    store, folder = str(tmp_path / "runs.db"), str(docs(tmp_path))
    result = asyncio.run(asolve(QUESTION, task="general", model=fake, profile="research_synthesis",
                                knowledge=folder, store=store, max_depth=1, breadth=1, controller=False))
    assert result.graph_cid is not None and result.grounding
    with SQLiteStore(store) as opened:
        # The folder is named again: a stored run reads no folder the caller did not grant.
        replayed, verdict = asyncio.run(areplay(opened, result.run_id, grants=Grants(knowledge=folder)))
    assert verdict.identical, str(verdict)
    assert [r.to_dict()["details"]["citation_check"] for r in replayed.grounding.values()] == \
        [r.to_dict()["details"]["citation_check"] for r in result.grounding.values()]


# --- design: each thought checked against its own path --------------------------------------------


def test_the_design_profile_fails_a_step_that_contradicts_an_earlier_one() -> None:
    first = "The service keeps sessions in Redis with a timeout of 30 minutes."
    second = "The service keeps sessions in Redis with a timeout of 60 minutes."
    fake = (ScriptedBackend(default=first).on("Step 2:", second).on("scale of 0 to 10", "8")
            .on("Final answer:", "Sessions in Redis."))
    common: dict[str, Any] = {"task": "general", "model": fake, "max_depth": 2, "breadth": 1, "controller": False}
    design = asyncio.run(asolve("Design the session store.", profile="design", **common))
    plain = asyncio.run(asolve("Design the session store.", **common))
    step2 = next(s.id for s in design.best_path if s.content == second)
    result = design.grounding[step2]
    assert result.grounder == "consistency" and result.verified is False
    assert "says 30 where the claim says 60" in result.evidence
    assert not plain.grounding


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_every_profile_resolves_to_a_run_carrying_its_checks(name: str, tmp_path: Path) -> None:
    knowledge = str(docs(tmp_path)) if PROFILES[name].checks.require_citations else None
    spec = resolve("4 5 6 10", task="game24", profile=name, knowledge=knowledge)
    assert spec.checks == PROFILES[name].checks
    assert spec.grounding == PROFILES[name].grounding


@pytest.mark.local_model
def test_the_research_profile_on_the_embedded_model_shows_the_research_grounder_and_citation_checks(
        tmp_path: Path) -> None:
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "water.md").write_text("# Water\n\nWater boils at 100 degrees Celsius at sea level.\n\n"
                                     "At higher altitudes water boils at a lower temperature.\n")
    (folder / "ice.md").write_text("# Ice\n\nIce melts at 0 degrees Celsius.\n")
    proc = loom("solve", "--profile", "research_synthesis", "--knowledge", str(folder), "--json", "--quiet",
                "--seed", "1", "--one-pass", "--budget-tokens", "6000", "--depth", "2", "--breadth", "2", QUESTION, timeout=scaled(900))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["model"].startswith("local:")
    research = [g for g in out["grounding"] if g["grounder"] == "research"]
    assert research, out["grounding"]
    for entry in research:
        check = entry["details"]["citation_check"]
        assert check["required"] is True
        assert check["cited"] == len(check["checks"]) == check["valid"] + check["invalid"]
        if check["uncited_claims"]:
            assert entry["verified"] is not True  # a claim that cites nothing is never verified here
