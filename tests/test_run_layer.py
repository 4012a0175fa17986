"""The run layer: one way to resolve a run's settings and one way to build it, from every entry point."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from openai_server import FakeOpenAIServer
from test_cli import game24_server_reply, loom

from thoughtloom import solve
from thoughtloom.api import asolve
from thoughtloom.control import ControlReport
from thoughtloom.control.controller import ControlSettings
from thoughtloom.control.profiles import get_profile
from thoughtloom.llm.fake import ScriptedBackend
from thoughtloom.llm.limits import LimitedBackend, SharedSlots
from thoughtloom.llm.wrapper import BackendWrapper
from thoughtloom.run.options import spec_from_options
from thoughtloom.run.spec import RunSpec, SpecError, resolve
from thoughtloom.search.stop import StopReason
from thoughtloom.store.runs import RecordingBackend

PUZZLE = "4 5 6 10"


@pytest.fixture
def game24_model(server: FakeOpenAIServer) -> str:
    """A model spec pointing at the scripted game24 server."""
    server.responder = game24_server_reply
    return f"openai-compatible:{server.url}@scripted#completions"


# --- resolving: task defaults, then the profile, then explicit settings --------------------------


def test_the_tasks_defaults_apply_when_nothing_else_is_said() -> None:
    spec = resolve(PUZZLE, task="game24")
    assert (spec.config.breadth, spec.config.beam, spec.config.max_depth) == (5, 5, 3)


def test_the_profile_overrides_the_task_defaults_and_sets_the_hard_depth() -> None:
    spec = resolve(PUZZLE, task="game24", profile="code_generation")
    profile = get_profile("code_generation")
    assert spec.config.beam == profile.search["beam"]
    assert spec.config.max_depth == profile.hard_depth
    assert spec.control is not None and spec.control.acceptable_threshold == profile.acceptable_threshold
    assert spec.grounding == profile.grounding


def test_explicit_settings_override_the_profile() -> None:
    spec = resolve(PUZZLE, task="game24", profile="code_generation", search={"beam": 2, "max_depth": 4},
                   control={"acceptable_threshold": 0.6}, grounding={"boost": 1.5})
    assert (spec.config.beam, spec.config.max_depth) == (2, 4)
    assert spec.control is not None and spec.control.acceptable_threshold == 0.6
    assert spec.grounding.boost == 1.5


def test_the_profile_names_the_task_when_none_is_given() -> None:
    assert resolve("write slugify", profile="code_generation").task_name == "code"


def test_an_empty_task_name_is_an_error_not_the_general_task() -> None:
    with pytest.raises(SpecError, match="empty task name"):
        resolve("hi", task="")


def test_control_false_is_a_plain_search() -> None:
    assert resolve(PUZZLE, task="game24", control=False).control is None


def test_cli_options_and_python_arguments_resolve_to_the_same_spec() -> None:
    from_cli = spec_from_options({"task": "game24", "problem": PUZZLE, "profile": "strategic_planning", "beam": 2,
                                  "seed": 7, "acceptable": 0.6, "budget_tokens": 5000, "model": "local"})
    from_python = resolve(PUZZLE, task="game24", profile="strategic_planning", search={"beam": 2, "seed": 7},
                          control={"acceptable_threshold": 0.6}, budget=from_cli.budget)
    assert from_cli.to_dict() == from_python.to_dict()


def test_a_spec_survives_its_stored_form() -> None:
    spec = resolve(PUZZLE, task="game24", profile="design", search={"seed": 3}, grounding={"boost": 1.3})
    assert RunSpec.from_dict(json.loads(json.dumps(spec.to_dict()))).to_dict() == spec.to_dict()


def test_hybrid_retrieval_survives_the_stored_form_and_bm25_leaves_it_as_before(tmp_path: Path) -> None:
    hybrid = resolve("Why is the sky blue?", knowledge=tmp_path, retrieval="hybrid")
    assert RunSpec.from_dict(json.loads(json.dumps(hybrid.to_dict()))).retrieval == "hybrid"
    plain = resolve("Why is the sky blue?", knowledge=tmp_path)
    assert "retrieval" not in plain.to_dict()  # runs stored before the option keep their stored form
    assert RunSpec.from_dict(plain.to_dict()).retrieval == "bm25"


# --- backend wrappers ------------------------------------------------------------------------------


def test_a_wrapper_forwards_every_attribute_it_does_not_override() -> None:
    inner = ScriptedBackend()
    inner.follows_choices = True
    inner.pricing = "price list"  # type: ignore[attr-defined]
    inner.something_new = 42  # type: ignore[attr-defined]
    for wrapper in (BackendWrapper(inner), LimitedBackend(inner, SharedSlots(2))):
        assert wrapper.name == inner.name
        assert wrapper.follows_choices is True
        assert wrapper.pricing == "price list"
        assert wrapper.something_new == 42
    assert LimitedBackend(inner, SharedSlots(1)).max_concurrency == 1  # what the limit changes, it overrides


def test_wrappers_pass_the_capabilities_of_the_backend_they_wrap_on() -> None:
    from thoughtloom.llm.types import capabilities_of

    inner = ScriptedBackend(scores_choices=True, native_tools=True)
    for wrapper in (BackendWrapper(inner), LimitedBackend(inner, SharedSlots(2)), RecordingBackend(inner, None)):
        assert capabilities_of(wrapper) == inner.capabilities


def test_a_run_with_role_models_can_do_only_what_every_model_can() -> None:
    from thoughtloom.llm.budget import Pricing
    from thoughtloom.llm.routing import RoutedBackend

    run = ScriptedBackend(scores_choices=True, follows_choices=True, native_tools=True, pricing=Pricing(1, 2))
    role = ScriptedBackend(scores_choices=True, pricing=Pricing(3, 4))
    routed = RoutedBackend(run, {"evaluator": role}).capabilities
    assert (routed.scores_choices, routed.follows_choices, routed.native_tools) == (True, False, False)
    assert routed.pricing == Pricing(1, 2) and routed.route_pricing == (("evaluator", Pricing(3, 4)),)


def test_the_recording_wrapper_is_a_backend_wrapper() -> None:
    assert issubclass(RecordingBackend, BackendWrapper)


# --- one search from every entry point -------------------------------------------------------------


def _graph_cid(store: Path, run_id: str) -> str:
    proc = loom("show", run_id, "--store", str(store), "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["graph"]


def test_the_same_spec_gives_the_same_graph_from_python_the_cli_the_bench_and_replay(
        game24_model: str, tmp_path: Path) -> None:
    store = tmp_path / "runs.db"
    common = ["--task", "game24", "--model", game24_model, "--seed", "5", "--concurrency", "1",
              "--budget-tokens", "4000"]
    cli = loom("solve", *common, "--store", str(store), "--json", "--quiet", PUZZLE)
    assert cli.returncode == 0, cli.stderr
    cli_out = json.loads(cli.stdout)
    assert cli_out["run_id"] and cli_out["store"] == str(store)  # a script goes from --json to `loom export`
    from thoughtloom.llm.budget import BudgetLimits

    py = solve(PUZZLE, task="game24", model=game24_model, seed=5, concurrency=1,
               budget=BudgetLimits(tokens=4000), store=str(store))
    data = tmp_path / "data"
    (data / "game24").mkdir(parents=True)
    (data / "game24" / "24_dev.csv").write_text(f"Rank,Puzzles\n1,{PUZZLE}\n", encoding="utf-8")
    bench = loom("bench", "--tasks", "game24", "--lanes", "tot", "--model", game24_model, "--data-dir", str(data),
                 "--limit", "1", "--seed", "5", "--budget-tokens", "4000", "--param", "tot.concurrency=1",
                 "--store", str(store), "--out", str(tmp_path / "bench"), "--no-plot", "--quiet")
    assert bench.returncode == 0, bench.stderr
    record = json.loads((tmp_path / "bench" / "results.jsonl").read_text().splitlines()[0])
    replay = loom("replay", cli_out["run_id"], "--store", str(store))
    assert replay.returncode == 0, replay.stdout + replay.stderr
    graphs = {cli_out["graph_cid"], py.graph_cid, record["graph"], _graph_cid(store, cli_out["run_id"])}
    assert len(graphs) == 1, graphs
    assert f"identical graph {cli_out['graph_cid']}" in replay.stdout


# --- the Python API -------------------------------------------------------------------------------


def test_asolve_applies_a_profile_exactly_as_the_cli_flag() -> None:
    fake = ScriptedBackend(default="1 + 1 = 2 (left: 2)")
    result = asyncio.run(asolve(PUZZLE, task="game24", model=fake, profile="strategic_planning", max_nodes=5))
    profile = get_profile("strategic_planning")
    assert result.config["beam"] == profile.search["beam"]
    assert result.config["max_depth"] == profile.hard_depth
    assert isinstance(result.control, ControlReport) and result.control.profile == "strategic_planning"


def test_solve_works_inside_a_running_event_loop() -> None:
    fake = ScriptedBackend(default="1 + 1 = 2 (left: 2)")

    async def notebook_cell() -> Any:
        return solve(PUZZLE, task="game24", model=fake, max_nodes=5, controller=False)

    result = asyncio.run(notebook_cell())
    assert result.termination_reason in set(StopReason)


def test_a_backend_object_passed_in_is_left_open_for_its_owner() -> None:
    closed: list[bool] = []
    fake = ScriptedBackend(default="1 + 1 = 2 (left: 2)")

    async def aclose() -> None:
        closed.append(True)

    fake.aclose = aclose  # type: ignore[method-assign]
    solve(PUZZLE, task="game24", model=fake, max_nodes=5)
    assert closed == []


def test_a_run_stored_from_python_resumes_and_replays_like_a_cli_run(game24_model: str, tmp_path: Path) -> None:
    store = tmp_path / "runs.db"
    result = solve(PUZZLE, task="game24", model=game24_model, seed=2, concurrency=1, store=str(store))
    replay = loom("replay", str(result.run_id), "--store", str(store))
    assert replay.returncode == 0, replay.stdout + replay.stderr
    assert f"identical graph {result.graph_cid}" in replay.stdout


# --- stored runs from before specs were stored ----------------------------------------------------

FIXTURE = Path(__file__).parent / "fixtures" / "legacy_run.db"


def test_a_run_stored_with_cli_options_before_specs_still_replays(tmp_path: Path) -> None:
    store = tmp_path / "legacy.db"
    store.write_bytes(FIXTURE.read_bytes())
    runs = loom("runs", "--store", str(store), "--json")
    assert runs.returncode == 0, runs.stderr
    run_id = json.loads(runs.stdout.splitlines()[0])["id"]
    replay = loom("replay", run_id, "--store", str(store))
    assert replay.returncode == 0, replay.stdout + replay.stderr
    assert "identical graph" in replay.stdout


# --- the package's shape --------------------------------------------------------------------------


def test_a_run_is_assembled_only_in_the_run_layer() -> None:
    root = Path(__file__).parents[1] / "thoughtloom"
    builders = []
    for path in root.rglob("*.py"):
        rel = path.relative_to(root).as_posix()
        if rel.startswith("run/") or rel == "llm/gateway.py":
            continue
        text = path.read_text(encoding="utf-8")
        if "Gateway(" in text.replace("class Gateway(", "") or "make_gateway(" in text.replace("def make_gateway(", ""):
            builders.append(rel)
    assert builders == []


def test_control_settings_keep_their_defaults_in_a_spec() -> None:
    assert resolve("hi").control == ControlSettings.from_profile(get_profile("default"))


# --- the controller in Python: on by default, its profile's settings kept --------------------------


def test_settings_from_a_profile_bring_its_search_and_grounding_settings_to_the_run() -> None:
    profile = get_profile("code_generation")
    spec = resolve(PUZZLE, task="game24", control=ControlSettings.from_profile(profile))
    assert spec.profile == "code_generation"
    assert (spec.config.beam, spec.config.max_nodes, spec.config.max_depth) == (
        profile.search["beam"], profile.search["max_nodes"], profile.hard_depth)
    assert spec.grounding == profile.grounding
    assert spec.control is not None and (spec.control.soft_depth, spec.control.hard_depth) == (8, 15)


def test_settings_from_a_profile_resolve_as_the_cli_resolves_that_profile() -> None:
    from_cli = spec_from_options({"task": "game24", "problem": PUZZLE, "profile": "design", "model": "local"})
    from_python = resolve(PUZZLE, task="game24", control=ControlSettings.from_profile(get_profile("design")),
                          budget=from_cli.budget)
    assert from_python.to_dict() == from_cli.to_dict()


def test_settings_from_one_profile_with_another_profile_named_is_refused() -> None:
    with pytest.raises(SpecError, match="profile 'design'.*profile 'debugging'"):
        resolve(PUZZLE, task="game24", profile="debugging", control=ControlSettings.from_profile(get_profile("design")))


def test_a_controller_built_from_a_profile_runs_with_that_profiles_search_settings() -> None:
    from thoughtloom.control import Controller

    fake = ScriptedBackend(responder=lambda request, index: "7" if "scale of 0 to 10" in request.prompt.as_text()
                           else "a step")
    controller = Controller(ControlSettings.from_profile(get_profile("strategic_planning")))
    result = solve("plan a launch", task="general", model=fake, controller=controller, max_depth=1)
    assert result.config["beam"] == get_profile("strategic_planning").search["beam"]
    assert isinstance(result.control, ControlReport) and result.control.thresholds.acceptable == 0.65


def test_python_runs_the_controller_with_the_profile_by_default() -> None:
    fake = ScriptedBackend(responder=lambda request, index: "7" if "scale of 0 to 10" in request.prompt.as_text()
                           else "a step")
    result = solve("a question", model=fake, max_depth=1)
    assert isinstance(result.control, ControlReport) and result.control.profile == "default"
    assert result.control.depth_limits.hard == 1 + 3  # the default profile's depth negotiation
    assert solve("a question", model=fake, max_depth=1, controller=False).control is None


def test_stored_specs_from_before_depth_negotiation_keep_their_fixed_limit() -> None:
    old = resolve(PUZZLE, task="game24").to_dict()
    assert old["control"] is not None
    del old["control"]["depth_margin"], old["control"]["hard_depth"], old["control"]["profile"]
    control = RunSpec.from_dict(old).control
    assert control is not None and control.depth_margin == 0 and control.hard_depth is None


def legacy_manifest(**options: Any) -> Any:
    """A manifest in the form runs were stored in before specs: `loom solve`'s options, as anyone may write them."""
    from thoughtloom.store.manifest import Manifest

    return Manifest(run_id="r1", model="local", backend="local:qwen2.5-coder-0.5b", max_concurrency=1,
                    supports_batch=False, task="general", problem="p", config={}, budget={},
                    cli={"problem": "Add two numbers.", "model": "local", **options})


def test_a_run_stored_before_specs_reads_no_task_file_it_names_until_the_file_is_granted(tmp_path: Path) -> None:
    from thoughtloom.run.grants import GrantError, Grants
    from thoughtloom.run.session import spec_of

    secret = tmp_path / "not-a-task.toml"
    secret.write_text("password = hunter2 [\n", encoding="utf-8")  # read, it would fail to parse, naming its text
    with pytest.raises(GrantError, match=rf"^this run asks for the task file {secret};.* --task-file {secret}$"):
        spec_of(legacy_manifest(task_file=str(secret)), Grants(), live=False, cli=True)


def test_a_run_stored_before_specs_imports_no_scorer_it_names_until_the_scorer_is_granted() -> None:
    from thoughtloom.run.grants import GrantError, Grants
    from thoughtloom.run.session import spec_of

    with pytest.raises(GrantError, match=r"this run asks for the scorer never_imported_here:score;"):
        spec_of(legacy_manifest(scorer="never_imported_here:score"), Grants(), live=False, cli=True)
    assert "never_imported_here" not in sys.modules
