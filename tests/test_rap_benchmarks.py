"""llm-reasoners' (RAP) Blocksworld and PrOntoQA: the plan simulator, the answer and proof scorers as the
original code scores them, the data files, `loom bench` with every lane through a real HTTP server, and
`loom data fetch` from a local mirror."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pytest
from benchdata import data_dir, mirror, needs
from openai_server import FakeOpenAIServer, Reply, Seen

from thoughtloom.cli.main import main
from thoughtloom.eval.datasets import (
    BLOCKSWORLD_BUCKETS,
    DATASETS,
    Dataset,
    Problem,
    load_dataset,
)
from thoughtloom.eval.lanes import run_lane
from thoughtloom.eval.sources import (
    BLOCKSWORLD_SPLIT_STEPS,
    BLOCKSWORLD_STEP_FILES,
    SOURCES,
    BlocksworldAssembly,
    FetchError,
    fetch,
)
from thoughtloom.llm.budget import BudgetLimits
from thoughtloom.llm.fake import ScriptedBackend
from thoughtloom.tasks.base import ProblemError
from thoughtloom.tasks.blocksworld import (
    BlocksworldTask,
    action_text,
    check_plan,
    legal_actions,
    plan_from_text,
)
from thoughtloom.tasks.prontoqa import (
    ProntoQAProofTask,
    ProntoQATask,
    gold,
    proof_conclusions,
)

BW_FILE = "blocksworld/blocksworld.jsonl"
PQ_FILE = "prontoqa/345hop_random_true.json"
DATA = data_dir(BW_FILE, PQ_FILE)
has_data = needs(BW_FILE, PQ_FILE)

# PlanBench instance-192 (generated_basic), as the data file states it.
STATEMENT = ("As initial conditions I have that, the red block is clear, the yellow block is clear, the hand is empty, "
             "the orange block is on top of the blue block, the yellow block is on top of the orange block, the red "
             "block is on the table and the blue block is on the table.\nMy goal is to have that the orange block is "
             "on top of the blue block and the yellow block is on top of the red block.")
GOLD_PLAN = "unstack the yellow block from on top of the orange block\nstack the yellow block on top of the red block"

# example1's test example in llm-reasoners' 345hop_random_true.json.
PRONTO = ("Every invertebrate is an animal. Lepidopterans are insects. Each butterfly is a lepidopteran. "
          "Each spider is not six-legged. Every arthropod is an invertebrate. Each insect is an arthropod. "
          "Every insect is six-legged. Arthropods are not bony. Animals are multicellular. Alex is a butterfly. "
          "True or false: Alex is six-legged.")
CHAIN = ("Alex is a butterfly. Each butterfly is a lepidopteran. So Alex is a lepidopteran. Lepidopterans are insects. "
         "So Alex is an insect. Every insect is six-legged. So Alex is six-legged.")


@pytest.fixture
def blocks() -> BlocksworldTask:
    return BlocksworldTask()


# --- Blocksworld: the simulator and the plan scorer -----------------------------------------------


def test_the_gold_plan_is_valid(blocks: BlocksworldTask) -> None:
    assert check_plan(blocks.parse_problem(STATEMENT), GOLD_PLAN).valid


def test_a_different_longer_plan_reaching_the_goal_is_valid_too(blocks: BlocksworldTask) -> None:
    longer = ("unstack the yellow block from on top of the orange block\nput down the yellow block\n"
              "pick up the yellow block\nstack the yellow block on top of the red block")
    assert check_plan(blocks.parse_problem(STATEMENT), longer).valid


def test_a_plan_violating_a_precondition_midway_is_invalid_at_that_step(blocks: BlocksworldTask) -> None:
    # Step 2 picks up the red block while the hand still holds the yellow one.
    plan = ("unstack the yellow block from on top of the orange block\npick up the red block\n"
            "stack the yellow block on top of the red block")
    verdict = check_plan(blocks.parse_problem(STATEMENT), plan)
    assert not verdict.valid
    assert verdict.reason == "step 2: pick up the red block needs the hand is empty"


def test_unstacking_a_block_that_is_not_on_the_named_one_is_invalid(blocks: BlocksworldTask) -> None:
    verdict = check_plan(blocks.parse_problem(STATEMENT), "unstack the yellow block from on top of the blue block")
    assert not verdict.valid and "needs the yellow block is on top of the blue block" in (verdict.reason or "")


def test_a_plan_that_stops_short_of_the_goal_is_invalid(blocks: BlocksworldTask) -> None:
    verdict = check_plan(blocks.parse_problem(STATEMENT), GOLD_PLAN.splitlines()[0])
    assert not verdict.valid
    assert verdict.reason == "after the plan, not yet: the yellow block is on top of the red block"


def test_an_empty_answer_is_no_plan(blocks: BlocksworldTask) -> None:
    assert not blocks.check_answer(blocks.parse_problem(STATEMENT), None)


def test_the_plan_is_read_line_by_line_as_llm_reasoners_reads_it() -> None:
    text = ("I will now act.\nUnstack the yellow block from on top of the orange block\n"
            "stack the yellow block\n"  # one block for a two-block operator: passed over
            "stack the yellow block on top of the red block\n[PLAN END]\npick up the blue block")
    assert plan_from_text(text) == (("unstack", "yellow", "orange"), ("stack", "yellow", "red"))


def test_the_legal_actions_are_those_whose_preconditions_hold(blocks: BlocksworldTask) -> None:
    problem = blocks.parse_problem(STATEMENT)
    assert [action_text(a) for a in legal_actions(problem.init)] == [
        "pick up the red block", "unstack the yellow block from on top of the orange block"]


def test_a_step_is_repaired_into_planbench_words_or_rejected_with_the_failed_precondition(
        blocks: BlocksworldTask) -> None:
    problem = blocks.parse_problem(STATEMENT)
    ok = blocks.validate(problem, [], "Unstack the yellow block from the orange block.")
    assert ok.ok and ok.thought == "unstack the yellow block from on top of the orange block"
    bad = blocks.validate(problem, [], "pick up the blue block")
    assert not bad.ok and bad.note == "pick up the blue block needs the blue block is clear"


def test_the_step_prompt_lists_every_legal_action_as_a_choice(blocks: BlocksworldTask) -> None:
    problem = blocks.parse_problem(STATEMENT)
    query = blocks.sample(problem, ["unstack the yellow block from on top of the orange block"])
    assert set(query.choices) == {"put down the yellow block", "stack the yellow block on top of the red block",
                                  "stack the yellow block on top of the orange block"}
    assert query.prompt.text.endswith("[PLAN]\nunstack the yellow block from on top of the orange block\n")


def test_reaching_the_goal_ends_the_search(blocks: BlocksworldTask) -> None:
    problem = blocks.parse_problem(STATEMENT)
    steps = GOLD_PLAN.splitlines()
    assert blocks.is_goal(problem, steps) and blocks.exact_value(problem, steps) == 1.0
    assert not blocks.is_goal(problem, steps[:1]) and blocks.quality(problem, steps[:1], 1.0) < 1.0


def test_a_statement_that_is_not_planbench_s_is_refused_in_one_line(blocks: BlocksworldTask) -> None:
    with pytest.raises(ProblemError, match="cannot read initial fact 'the red block is floating'"):
        blocks.parse_problem("As initial conditions I have that, the red block is floating. "
                             "My goal is to have that the red block is clear.")


# --- PrOntoQA: answer and proof accuracy ----------------------------------------------------------


def test_the_rules_entail_the_gold_answer_and_chain() -> None:
    assert gold(ProntoQATask().parse_problem(PRONTO)) == (
        True, ("Alex is a lepidopteran.", "Alex is an insect.", "Alex is six-legged."))


@pytest.mark.parametrize(("answer", "right"), [
    (f"{CHAIN} The answer is true.", True),
    ("The answer is true.", True),
    ("True", True),
    (f"{CHAIN} The answer is false.", False),
    ("I cannot tell.", False),
    (None, False),
])
def test_answer_accuracy_reads_the_stated_true_or_false(answer: str | None, right: bool) -> None:
    task = ProntoQATask()
    assert task.check_answer(task.parse_problem(PRONTO), answer) is right


@pytest.mark.parametrize(("answer", "right"), [
    (f"{CHAIN} The answer is true.", True),
    # The right answer with a skipped step is a wrong proof.
    ("Alex is a butterfly. Each butterfly is a lepidopteran. So Alex is a lepidopteran. Every insect is six-legged. "
     "So Alex is six-legged. The answer is true.", False),
    # A wrong conclusion (the rule is right, what follows from it is not).
    ("Alex is a butterfly. Each butterfly is a lepidopteran. So Alex is a lepidopteran. Lepidopterans are insects. "
     "So Alex is an arthropod. Every insect is six-legged. So Alex is six-legged. The answer is true.", False),
    ("The answer is true.", False),
])
def test_proof_accuracy_is_the_exact_match_of_the_conclusions(answer: str, right: bool) -> None:
    task = ProntoQAProofTask()
    assert task.check_answer(task.parse_problem(PRONTO), answer) is right


def test_the_conclusions_are_what_follows_each_so_as_llm_reasoners_splits_them() -> None:
    assert proof_conclusions("Alex is a cat. Cats are felines. So Alex is a feline. The answer is true.") == (
        "Alex is a feline.",)


def test_a_step_must_apply_a_rule_of_the_question_to_the_last_thing_proved() -> None:
    task = ProntoQATask()
    problem = task.parse_problem(PRONTO)
    ok = task.validate(problem, [], "Each butterfly is a lepidopteran. So Alex is a moth.")
    assert ok.ok and ok.thought == "Each butterfly is a lepidopteran. So Alex is a lepidopteran."
    assert not task.validate(problem, [], "Every insect is six-legged. So Alex is six-legged.").ok
    assert not task.validate(problem, [], "Every moth is grey. So Alex is grey.").ok
    assert task.sample(problem, []).choices == ("Each butterfly is a lepidopteran. So Alex is a lepidopteran.",)


def test_a_problem_without_a_query_is_refused_in_one_line() -> None:
    with pytest.raises(ProblemError, match="True or false: CLAIM"):
        ProntoQATask().parse_problem("Every cat is a mammal. Tom is a cat.")


# --- lanes that choose among samples -------------------------------------------------------------


async def test_best_of_n_keeps_the_plan_the_simulator_accepts_without_the_gold() -> None:
    dataset = Dataset(DATASETS["blocksworld"], [Problem("192", STATEMENT, STATEMENT, {"n_steps": 2})], "<test>")
    invalid = "\npick up the yellow block\nstack the yellow block on top of the red block\n[PLAN END]"
    replies = [invalid, invalid, f"\n{GOLD_PLAN}\n[PLAN END]"]
    fake = ScriptedBackend(responder=lambda request, i: replies[i % 3])
    outcome, _ = await run_lane("best_of_n", dataset, dataset.problems[0], fake, BudgetLimits(tokens=50_000),
                                params={"n": 3}, temperature=0.7, seed=1)
    assert outcome.answer == GOLD_PLAN and outcome.answer is not None
    assert (await dataset.score(dataset.problems[0], outcome.answer)).solved


async def test_cot_sc_votes_on_the_stated_true_or_false_not_the_wording() -> None:
    dataset = Dataset(DATASETS["prontoqa"], [Problem("1", PRONTO, PRONTO)], "<test>")
    replies = [" Alex is an insect. The answer is false.", f" {CHAIN} The answer is true.",
               " Every insect is six-legged. So Alex is six-legged. The answer is true."]
    fake = ScriptedBackend(responder=lambda request, i: replies[i % 3])
    outcome, _ = await run_lane("cot_sc", dataset, dataset.problems[0], fake, BudgetLimits(tokens=50_000),
                                params={"k": 3}, temperature=0.7, seed=1)
    assert outcome.answer is not None and outcome.answer.endswith("The answer is true.")
    assert (await dataset.score(dataset.problems[0], outcome.answer)).solved


# --- the data files -------------------------------------------------------------------------------


@has_data
def test_every_blocksworld_gold_plan_is_valid_and_as_long_as_its_bucket() -> None:
    dataset = load_dataset("blocksworld", DATA)
    task = BlocksworldTask()
    assert len(dataset.problems) == 602
    for p in dataset.problems:
        verdict = check_plan(task.parse_problem(p.text), p.gold["gold_plan"])
        assert verdict.valid and len(verdict.actions) == p.gold["n_steps"], p.id


@has_data
def test_the_step_buckets_hold_the_problems_of_that_optimal_length() -> None:
    sizes = {n: len(load_dataset(f"blocksworld_{n}", DATA).problems) for n in BLOCKSWORLD_BUCKETS}
    assert sizes == {2: 47, 4: 86, 6: 155, 8: 153, 10: 113, 12: 46}
    assert {p.gold["n_steps"] for p in load_dataset("blocksworld_6", DATA).problems} == {6}


@has_data
def test_on_every_prontoqa_example_the_entailed_answer_and_chain_are_the_files_gold() -> None:
    dataset = load_dataset("prontoqa", DATA)
    assert len(dataset.problems) == 500
    task = ProntoQATask()
    for p in dataset.problems:
        assert gold(task.parse_problem(p.text)) == (p.gold["answer"] == "True", tuple(p.gold["proof"])), p.id


@has_data
async def test_the_data_sets_score_the_files_gold_chain_right_and_its_negation_wrong() -> None:
    answers = load_dataset("prontoqa", DATA)
    proofs = load_dataset("prontoqa_proof", DATA)
    p = answers.problems[0]
    raw = json.loads((DATA / PQ_FILE).read_text())[p.id]["test_example"]["chain_of_thought"]
    chain = f"{raw[0]} " + " ".join(f"{rule} So {claim}" for rule, claim in zip(raw[1::2], raw[2::2]))
    word = p.gold["answer"].lower()
    other = "false" if word == "true" else "true"
    assert (await answers.score(p, f"{chain} The answer is {word}.")).solved
    assert not (await answers.score(p, f"{chain} The answer is {other}.")).solved
    assert (await proofs.score(p, f"{chain} The answer is {word}.")).solved
    assert not (await proofs.score(p, f"The answer is {word}.")).solved


# --- loom bench through a real HTTP server, every lane --------------------------------------------


def _completion(seen: Seen, text: str) -> Reply:
    n = int(seen.body.get("n") or 1)
    return Reply(200, {"id": "x", "object": "text_completion", "created": 0, "model": "m",
                       "choices": [{"index": i, "text": text, "finish_reason": "stop"} for i in range(n)],
                       "usage": {"prompt_tokens": 900, "completion_tokens": 20 * n, "total_tokens": 900 + 20 * n}})


def _gold_plans() -> dict[tuple[str, str], str]:
    rows = [json.loads(line) for line in (DATA / BW_FILE).read_text().splitlines() if line.strip()]
    return {(r["init_text"], r["goal_text"]): r["gold_plan_text"] for r in rows}


def _bench(server: FakeOpenAIServer, tmp_path: Path, tasks: str, lanes: str) -> list[dict[str, object]]:
    out = tmp_path / "run"
    code = main(["bench", "--tasks", tasks, "--model", f"openai-compatible:{server.url}@m#completions",
                 "--data-dir", str(DATA), "--out", str(out), "--limit", "2", "--select", "first", "--lanes", lanes,
                 "--budget-tokens", "20000", "--quiet", "--no-plot"])
    assert code == 0
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


@has_data
def test_bench_blocksworld_runs_every_lane_and_scores_plans_by_simulation(server: FakeOpenAIServer,
                                                                          tmp_path: Path) -> None:
    plans = _gold_plans()

    def respond(seen: Seen) -> Reply:
        prompt = str(seen.body.get("prompt") or "")
        init, goal = re.findall(r"I have that, (.*?)\.\nMy goal is to have that (.*?)\.\n", prompt)[-1]
        plan = plans[init, goal].splitlines()
        done = prompt.rsplit("[PLAN]", 1)[-1].strip().splitlines()
        if seen.body.get("max_tokens", 0) <= 24:  # a step: the next action of the gold plan
            return _completion(seen, plan[len(done)] if len(done) < len(plan) else "put down the red block")
        return _completion(seen, "\n" + "\n".join(plan) + "\n[PLAN END]")  # io / cot: the whole plan

    server.responder = respond
    rows = _bench(server, tmp_path, "blocksworld", "io,cot,tot,mcts,random")
    by_lane: dict[str, list[bool]] = {}
    for row in rows:
        by_lane.setdefault(str(row["lane"]), []).append(bool(row["solved"]))
    assert set(by_lane) == {"io", "cot", "tot", "mcts", "random"} and all(len(v) == 2 for v in by_lane.values())
    # io and cot give the gold plan; the search follows the gold action at each step.
    assert by_lane["io"] == by_lane["cot"] == by_lane["tot"] == [True, True]


@has_data
def test_bench_prontoqa_runs_every_lane_and_scores_answers_and_proofs(server: FakeOpenAIServer,
                                                                     tmp_path: Path) -> None:
    server.responder = lambda seen: _completion(seen, " The answer is true.")
    rows = _bench(server, tmp_path, "prontoqa,prontoqa_proof", "io,cot,tot,mcts,random")
    lanes = {(row["task"], row["lane"]) for row in rows}
    every = ("io", "cot", "tot", "mcts", "random")
    assert lanes == {(t, lane) for t in ("prontoqa", "prontoqa_proof") for lane in every}
    first_two = load_dataset("prontoqa", DATA).problems[:2]
    truth = [p.gold["answer"] == "True" for p in first_two]
    io = [bool(r["solved"]) for r in rows if r["task"] == "prontoqa" and r["lane"] == "io"]
    assert io == truth  # "true" is right exactly where the gold is True
    # No proof in "The answer is true.": io never has a right proof.
    assert not any(r["solved"] for r in rows if r["task"] == "prontoqa_proof" and r["lane"] == "io")
    # The control chooses among the rules that apply; wherever it decides the query, its chain is a right proof.
    for r in rows:
        if r["lane"] == "random" and r["answer"]:
            assert r["solved"] == ("The answer is" in str(r["answer"]))


# --- loom data fetch ------------------------------------------------------------------------------


@has_data
@pytest.mark.parametrize(("name", "path"), [("blocksworld", BW_FILE), ("prontoqa", PQ_FILE)])
def test_data_fetch_from_a_mirror_writes_the_checked_file_that_bench_then_reads(
        cache: Path, name: str, path: str, capsys: pytest.CaptureFixture[str]) -> None:
    with mirror(DATA) as url:
        assert main(["data", "fetch", name, "--from", url]) == 0
    assert "SHA-256 checked" in capsys.readouterr().out
    assert (cache / path).read_bytes() == (DATA / path).read_bytes()
    assert len(load_dataset(name).problems) == {"blocksworld": 602, "prontoqa": 500}[name]


@has_data
def test_prontoqa_is_fetched_from_its_upstream_original_checked_against_the_pin(
        cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pinned = SOURCES["prontoqa"].files[0]
    (tmp_path / "up").mkdir()
    (tmp_path / "up" / "345hop_random_true.json").write_bytes((DATA / PQ_FILE).read_bytes())
    with mirror(tmp_path / "up") as url:
        local = replace(pinned, upstream=f"{url}/345hop_random_true.json")
        monkeypatch.setitem(SOURCES, "prontoqa", replace(SOURCES["prontoqa"], files=(local,)))
        fetch("prontoqa")
    assert (cache / PQ_FILE).read_bytes() == (DATA / PQ_FILE).read_bytes()


INSTANCE_192 = "llm_planning_analysis/instances/blocksworld/generated_basic/instance-192.pddl"


def upstream_blocksworld(folder: Path) -> None:
    """llm-reasoners' step lists and test splits (under rap/) and the PlanBench instances they name (under
    planbench/), in their repositories' layouts, written into `folder` from the data folder's assembled file."""
    rows = [json.loads(line) for line in (DATA / BW_FILE).read_text().splitlines()]

    def listed(path: str, picked: list[dict[str, object]]) -> None:
        (folder / "rap" / path).parent.mkdir(parents=True, exist_ok=True)
        entries = [[f"LLMs-Planning/{r['instance_file']}", r["gold_plan"], r["n_steps"]] for r in picked]
        (folder / "rap" / path).write_text(json.dumps(entries))

    for n in BLOCKSWORLD_STEP_FILES:
        listed(f"full_data/step_{n}.json", [r for r in rows if r["n_steps"] == n])
    for version, flag in (("v1", "in_test_v1_hard"), ("v2", "in_test_v2_easy")):
        for n in BLOCKSWORLD_SPLIT_STEPS:
            listed(f"split_{version}/split_{version}_step_{n}_data.json",
                   [r for r in rows if r["n_steps"] == n and r[flag]])
    for r in rows:
        instance = folder / "planbench" / str(r["instance_file"])
        instance.parent.mkdir(parents=True, exist_ok=True)
        instance.write_text(str(r["pddl"]))


@contextmanager
def blocksworld_upstream(folder: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """`folder` (as upstream_blocksworld writes it) served from 127.0.0.1 as the set's upstream, with today's pin."""
    pinned = SOURCES["blocksworld"].files[0]
    with mirror(folder) as url:
        local = replace(pinned, assemble=BlocksworldAssembly(f"{url}/rap", f"{url}/planbench"))
        monkeypatch.setitem(SOURCES, "blocksworld", replace(SOURCES["blocksworld"], files=(local,)))
        yield


@has_data
def test_blocksworld_is_assembled_from_its_upstream_files_into_the_pinned_file_byte_for_byte(
        cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    upstream_blocksworld(tmp_path / "up")
    with blocksworld_upstream(tmp_path / "up", monkeypatch):
        assert main(["data", "fetch", "blocksworld"]) == 0
    assert (cache / BW_FILE).read_bytes() == (DATA / BW_FILE).read_bytes()


@has_data
def test_a_changed_upstream_instance_is_refused_in_one_line_and_nothing_is_written(
        cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    upstream_blocksworld(tmp_path / "up")
    instance = tmp_path / "up" / "planbench" / INSTANCE_192
    instance.write_text(instance.read_text().replace("(on d a)", "(on d b)"))
    with blocksworld_upstream(tmp_path / "up", monkeypatch):
        assert main(["data", "fetch", "blocksworld"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "refused blocksworld/blocksworld.jsonl" in err and "pinned" in err
    assert not (cache / "blocksworld").exists()


@has_data
def test_a_missing_upstream_instance_is_a_one_line_error_naming_it(
        cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    upstream_blocksworld(tmp_path / "up")
    (tmp_path / "up" / "planbench" / INSTANCE_192).unlink()
    with blocksworld_upstream(tmp_path / "up", monkeypatch):
        assert main(["data", "fetch", "blocksworld"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "instance-192.pddl" in err
    assert not (cache / "blocksworld").exists()


def test_a_failed_instance_download_stops_the_downloads_not_yet_started() -> None:
    instances = [[f"LLMs-Planning/bw/instance-{i}.pddl", "(pick-up a)\n", 2] for i in range(200)]
    fetched: list[str] = []

    def get(url: str, cap: int) -> bytes:
        if "/rap/" in url:
            return json.dumps(instances if url.endswith("step_2.json") else []).encode()
        fetched.append(url)
        if url.endswith("/instance-0.pddl"):
            raise FetchError(f"cannot download {url}: HTTP 404")
        time.sleep(0.05)
        return b"(define (problem p) (:init (handempty) (ontable a) (clear a)) (:goal (holding a)))"

    with pytest.raises(FetchError, match="instance-0.pddl"):
        BlocksworldAssembly("http://up/rap", "http://up/planbench")(get)
    assert len(fetched) < 50  # the 200 queued downloads were not all made


def test_an_upstream_step_list_that_is_not_its_layout_is_a_one_line_error(
        cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    for path in [f"full_data/step_{n}.json" for n in BLOCKSWORLD_STEP_FILES] + [
            f"split_{v}/split_{v}_step_{n}_data.json" for v in ("v1", "v2") for n in BLOCKSWORLD_SPLIT_STEPS]:
        (tmp_path / "up" / "rap" / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "up" / "rap" / path).write_text("<html>moved</html>")
    with blocksworld_upstream(tmp_path / "up", monkeypatch):
        assert main(["data", "fetch", "blocksworld"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not the layout this version reads" in err


def test_data_list_says_blocksworld_is_assembled_and_its_result_checked(
        cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["data", "list"]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("blocksworld "))
    assert "[assembled from several upstream files: the result is checked]" in line


def test_blocksworld_is_assembled_from_both_repositories_at_pinned_commits() -> None:
    assembly = SOURCES["blocksworld"].files[0].assemble
    assert isinstance(assembly, BlocksworldAssembly)
    assert "/maitrix-org/llm-reasoners/f94e5ac2cb9788c3d7d7dbf2173884ed4088e4b2/" in assembly.rap_data
    assert assembly.planbench.endswith("/karthikv792/LLMs-Planning/34e6841f81ca7708f2f8b8241504bfe8a908e40b")


def test_a_bucket_without_its_file_names_the_fetch_command_of_the_whole_set(
        cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--tasks", "blocksworld_4", "--lanes", "io", "--model", "openai-compatible:"
                 "http://127.0.0.1:9@m#completions", "--quiet", "--no-plot"]) == 2
    assert "loom data fetch blocksworld" in capsys.readouterr().err
