"""Lanes, the parity audit, streaming + resume and the reports, on a scripted model (no real model)."""

from __future__ import annotations

import asyncio
import csv
import json
from pathlib import Path

import pytest

from thoughtloom.eval.datasets import DATASETS, Dataset, Problem
from thoughtloom.eval.lanes import LaneError, check_lane, majority, run_lane
from thoughtloom.eval.protocol import AuditError, Protocol, audit
from thoughtloom.eval.report import (
    format_table,
    summarize,
    write_csv,
    write_json,
    write_plot,
)
from thoughtloom.eval.results import ResultsStore
from thoughtloom.eval.runner import (
    BenchOptions,
    build_protocol,
    compare_strategies,
    prepare_run_dir,
    run_protocol,
)
from thoughtloom.llm.budget import BudgetLimits
from thoughtloom.llm.fake import ScriptedBackend

PUZZLES = ["1 1 4 6", "1 1 11 11", "1 1 3 8", "2 3 5 12"]


def game24(n: int = 4) -> Dataset:
    """A small in-memory Game of 24 set (ids r1..rn), scored with the benchmark's rule."""
    problems = [Problem(f"r{i + 1}", t, t, [int(x) for x in t.split()]) for i, t in enumerate(PUZZLES[:n])]
    return Dataset(DATASETS["game24"], problems, "<test>")


def opts(**kw: object) -> BenchOptions:
    base: dict[str, object] = {"tasks": ["game24"], "lanes": ["io", "cot"], "model": "fake:scripted", "limit": 4,
                               "selection": "first", "budget_tokens": 2000}
    base.update(kw)
    return BenchOptions(**base)  # type: ignore[arg-type]


async def lane(name: str, backend: ScriptedBackend, *, problem: int = 0, params: dict | None = None,
               tokens: int = 2000) -> object:
    ds = game24()
    outcome, _ = await run_lane(name, ds, ds.problems[problem], backend, BudgetLimits(tokens=tokens),
                                params=params or {}, temperature=0.7, seed=1)
    return outcome


async def test_io_reads_the_answer_line_of_the_few_shot_completion() -> None:
    fake = ScriptedBackend().on("Input: 1 1 4 6\nAnswer:", " 1 * 1 * 4 * 6 = 24\n")
    out = await lane("io", fake)
    assert out.answer == "Answer: 1 * 1 * 4 * 6 = 24"
    assert fake.calls[0].prompt.text.endswith("Input: 1 1 4 6\nAnswer:")  # a base-model completion prompt


async def test_cot_sc_returns_the_majority_and_any_of_k_is_only_a_separate_candidate_list() -> None:
    right, wrong = "Answer: 1 * 1 * 4 * 6 = 24", "Answer: 1 + 1 + 4 + 6 = 24"
    fake = ScriptedBackend()
    replies = iter([f"x\n{wrong}", f"y\n{right}", f"z\n{wrong}"])
    fake.responder = lambda req, i: next(replies)
    out = await lane("cot_sc", fake, params={"k": 3})
    assert out.answer == wrong  # the majority, though a minority candidate was right
    assert out.candidates == [wrong, right, wrong]
    assert len(fake.calls) == 1 and fake.calls[0].n == 3  # k samples in one call


async def test_best_of_n_picks_the_candidate_the_validator_accepts() -> None:
    right, wrong = "Answer: 1 * 1 * 4 * 6 = 24", "Answer: 1 + 1 + 4 + 6 = 24"
    replies = iter([wrong, wrong, right])
    fake = ScriptedBackend(responder=lambda req, i: next(replies))
    out = await lane("best_of_n", fake, params={"n": 3})
    assert out.answer == right


@pytest.mark.parametrize("name", ["gsm8k", "hotpotqa"])
def test_best_of_n_is_refused_where_no_check_can_fail_without_the_gold(name: str) -> None:
    with pytest.raises(LaneError, match="only repeat cot_sc's vote"):
        check_lane("best_of_n", Dataset(DATASETS[name], [], "<test>"))


@pytest.mark.parametrize("name", ["game24", "mbpp", "sorting32"])
def test_best_of_n_runs_where_a_check_can_fail(name: str) -> None:
    check_lane("best_of_n", Dataset(DATASETS[name], [], "<test>"))


async def test_react_acts_through_an_exact_calculator() -> None:
    fake = ScriptedBackend()
    fake.on("Input: 1 1 4 6\nThought:", " multiply all.\nCalculate: 1 * 1 * 4 * 6")
    fake.on("Calculate: 1 * 1 * 4 * 6\nResult: 24\n", "Answer: 1 * 1 * 4 * 6 = 24")
    out = await lane("react", fake, params={"max_steps": 3})
    assert out.answer == "Answer: 1 * 1 * 4 * 6 = 24"
    assert "Calculate: 1 * 1 * 4 * 6\nResult: 24\n" in fake.calls[1].prompt.text  # the tool's, not the model's


async def test_tot_lane_runs_the_search_engine_on_the_task() -> None:
    fake = ScriptedBackend(default="sure")
    fake.on("Input: 1 1 4 6\nPossible next steps:\n", "1 * 1 = 1 (left: 1 4 6)")
    fake.on("Input: 1 4 6\nPossible next steps:\n", "4 * 6 = 24 (left: 1 24)")
    fake.on("Input: 1 24\nPossible next steps:\n", "1 * 24 = 24 (left: 24)")
    out = await lane("tot", fake, params={"beam": 1, "breadth": 1})
    assert out.stop_reason == "goal_reached"
    assert game24().problems[0].gold and out.answer and "= 24" in out.answer


async def test_random_lane_searches_without_asking_the_model_and_counts_tokens_as_it_would() -> None:
    fake = ScriptedBackend()  # any call to it would fail: it has no replies
    outcome, spend = await run_lane("random", game24(), game24().problems[0], fake, BudgetLimits(tokens=20_000),
                                    params={}, temperature=0.7, seed=1)
    assert fake.calls == [] and outcome.error is None
    assert spend.calls > 0 and spend.input_tokens > 0  # counted in the fake's words, as its own calls would be


async def test_random_lane_gives_the_same_outcome_for_the_same_seed() -> None:
    runs = [await run_lane("random", game24(), game24().problems[3], ScriptedBackend(), BudgetLimits(tokens=20_000),
                           params={}, temperature=0.7, seed=4) for _ in range(2)]
    assert runs[0][0].answer == runs[1][0].answer and runs[0][1] == runs[1][1]


def test_random_lane_is_refused_on_tasks_that_list_no_valid_steps() -> None:
    with pytest.raises(LaneError, match="lists its valid steps"):
        check_lane("random", Dataset(DATASETS["gsm8k"], [], ""))


async def test_a_lane_out_of_budget_gives_no_answer_instead_of_overspending() -> None:
    fake = ScriptedBackend(default="Answer: 1 * 1 * 4 * 6 = 24")
    out = await lane("cot", fake, tokens=20)  # the prompt alone is larger
    assert out.answer is None and out.stop_reason.startswith("budget")
    assert fake.calls == []


def test_lanes_that_cannot_run_are_refused_before_any_model_call() -> None:
    with pytest.raises(LaneError, match="unknown lane"):
        check_lane("magic", game24())
    with pytest.raises(LaneError, match="react"):
        check_lane("react", Dataset(DATASETS["sorting32"], [], ""))


def test_majority_votes_on_the_value_for_number_answers() -> None:
    ds = Dataset(DATASETS["gsm8k"], [], "")
    assert majority(ds, ["The answer is 7.", "so 8", "The answer is 7", None]) == "The answer is 7."


async def test_cot_sc_on_hotpotqa_votes_on_answers_the_span_rules_kept() -> None:
    question = "Who founded the town of Brisk?"
    problem = Problem("0", question, question, "Ada Venn", question=question)
    ds = Dataset(DATASETS["hotpotqa"], [problem], "<test>")
    fake = ScriptedBackend()
    replies = iter(["x\nAnswer: Yes", "y\nAnswer: Yes.", "z\nAnswer: Ada Venn."])
    fake.responder = lambda req, i: next(replies)
    outcome, _ = await run_lane("cot_sc", ds, problem, fake, BudgetLimits(tokens=20_000), params={"k": 3},
                                temperature=0.7, seed=1)
    # Two bare "yes" to a "Who ...?" question are no answers, so they cannot outvote the name.
    assert outcome.answer == "Ada Venn" and outcome.candidates == [None, None, "Ada Venn"]


# --- the parity audit ----------------------------------------------------------------------


def test_a_fair_protocol_passes_the_parity_audit() -> None:
    proto = build_protocol(opts(lanes=["io", "cot", "cot_sc"]), {"game24": game24()})
    checks = audit(proto)
    assert any(c.startswith("budget_tokens: equal") for c in checks)
    assert proto.plan("cot_sc").params == {"k": 5}
    assert all(p.problems == {"game24": ["r1", "r2", "r3", "r4"]} for p in proto.lanes)


def test_a_lane_with_a_larger_budget_is_refused_in_one_line() -> None:
    proto = build_protocol(opts(lane_overrides={"cot": {"budget_tokens": 8000}}), {"game24": game24()})
    with pytest.raises(AuditError) as err:
        audit(proto)
    msg = str(err.value)
    assert "\n" not in msg and "lane cot has budget_tokens 8000 but lane io has 2000" in msg


@pytest.mark.parametrize(("override", "word"), [({"temperature": 0.0}, "temperature"), ({"model": "other"}, "model"),
                                                ({"problems": ["r1"]}, "problems")])
def test_any_undeclared_difference_is_refused(override: dict, word: str) -> None:
    proto = build_protocol(opts(lane_overrides={"cot": override}), {"game24": game24()})
    with pytest.raises(AuditError, match=word):
        audit(proto)


def test_a_declared_difference_is_allowed_and_reported() -> None:
    proto = build_protocol(opts(lane_overrides={"cot": {"budget_tokens": 8000}}, declared_differences=["budget_tokens"]),
                           {"game24": game24()})
    assert "budget_tokens: differs by declaration" in audit(proto)


def test_the_manifest_round_trips_and_a_different_protocol_cannot_resume_a_run(tmp_path: Path) -> None:
    proto = build_protocol(opts(), {"game24": game24()})
    prepare_run_dir(proto, tmp_path)
    stored = json.loads((tmp_path / "manifest.json").read_text())
    assert Protocol.from_dict(stored).fingerprint() == proto.fingerprint()
    assert {"tasks", "problems", "lanes", "model", "temperature", "budget_tokens", "seed", "code_version"} <= set(stored)
    other = build_protocol(opts(budget_tokens=3000), {"game24": game24()})
    with pytest.raises(ValueError, match="different protocol"):
        prepare_run_dir(other, tmp_path)


# --- running, streaming, resuming ----------------------------------------------------------


async def test_results_stream_to_disk_and_a_rerun_does_not_redo_finished_problems(tmp_path: Path) -> None:
    ds = game24()
    proto = build_protocol(opts(), {"game24": ds})
    store = ResultsStore(tmp_path)
    fake = ScriptedBackend(default="Answer: 1 * 1 * 4 * 6 = 24")
    first = await run_protocol(proto, fake, store, datasets={"game24": ds})
    assert first.done == 8 and len(fake.calls) == 8
    lines = (tmp_path / "results.jsonl").read_text().splitlines()
    assert len(lines) == 8
    # A kill mid-write leaves half a line: that unit is redone, the others are not.
    (tmp_path / "results.jsonl").write_text("\n".join(lines[:5]) + "\n" + lines[5][:30])
    again = await run_protocol(proto, fake, store, datasets={"game24": ds})
    assert (again.done, again.skipped) == (3, 5) and len(fake.calls) == 8 + 3
    assert len(store.load()) == 8


async def test_every_lane_on_a_problem_gets_the_same_seed_and_problems_differ() -> None:
    ds = game24()
    proto = build_protocol(opts(lanes=["io", "cot", "cot_sc"], seed=100), {"game24": ds})
    fake = ScriptedBackend(default="Answer: 1 * 1 * 4 * 6 = 24")
    stats = await run_protocol(proto, fake, None, datasets={"game24": ds})
    seeds = {(r.problem_id, r.lane): r.seed for r in stats.records}
    assert seeds[("r1", "io")] == seeds[("r1", "cot")] == seeds[("r1", "cot_sc")] == 100
    assert seeds[("r2", "io")] == 101
    assert [c.seed for c in fake.calls[:3]] == [100, 100, 100]


async def test_concurrent_problems_share_one_global_model_concurrency_limit() -> None:
    ds = game24()
    proto = build_protocol(opts(), {"game24": ds})
    fake = ScriptedBackend(default="Answer: 1 * 1 * 4 * 6 = 24", latency_s=0.02)
    await run_protocol(proto, fake, None, datasets={"game24": ds}, jobs=4, model_concurrency=2)
    assert fake.peak_in_flight == 2
    fake2 = ScriptedBackend(default="x", latency_s=0.02)
    await run_protocol(proto, fake2, None, datasets={"game24": ds}, jobs=4, model_concurrency=1)
    assert fake2.peak_in_flight == 1


async def test_the_limit_holds_across_processes_through_lock_files(tmp_path: Path) -> None:
    from thoughtloom.llm.limits import SharedSlots

    a, b = SharedSlots(1, tmp_path), SharedSlots(1, tmp_path)  # two "processes" sharing one slot
    order: list[str] = []

    async def hold(slots: SharedSlots, name: str) -> None:
        async with slots:
            order.append(f"{name}+")
            await asyncio.sleep(0.1)
            order.append(f"{name}-")

    await asyncio.gather(hold(a, "a"), hold(b, "b"))
    assert order in (["a+", "a-", "b+", "b-"], ["b+", "b-", "a+", "a-"])


# --- reports -------------------------------------------------------------------------------


async def test_table_json_csv_and_png_are_written_and_well_formed(tmp_path: Path) -> None:
    ds = game24()
    proto = build_protocol(opts(lanes=["io", "cot_sc"]), {"game24": ds})
    right = "Answer: 1 * 1 * 4 * 6 = 24"
    fake = ScriptedBackend(default="Answer: 1 + 1 = 2")
    fake.on("Input: 1 1 4 6\nAnswer:", right)
    stats = await run_protocol(proto, fake, None, datasets={"game24": ds})
    sums = summarize(stats.records, {"game24": "rate"}, ["io", "cot_sc"], {"game24": 4})
    io = sums[0]
    assert (io.lane, io.n, io.solved, io.rate) == ("io", 4, 1, 0.25)
    assert io.rate_ci[0] < 0.25 < io.rate_ci[1] and io.any_of_k is None
    assert sums[1].any_of_k == 0.0 and sums[1].mean_tokens > 0
    table = format_table(sums)
    assert "| io | 4 | 1/4 = 25% [" in table and "any@k" in table
    write_json(tmp_path / "s.json", proto.to_dict(), sums, audit(proto))
    data = json.loads((tmp_path / "s.json").read_text())
    assert data["summaries"][0]["lane"] == "io" and data["manifest"]["budget_tokens"] == 2000 and data["parity_audit"]
    write_csv(tmp_path / "s.csv", sums)
    rows = list(csv.DictReader((tmp_path / "s.csv").open()))
    assert [r["lane"] for r in rows] == ["io", "cot_sc"] and rows[0]["solved"] == "1"
    pytest.importorskip("matplotlib")
    assert write_plot(tmp_path / "p.png", sums) is None
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_errors_metric_tasks_report_median_errors_and_solved_count() -> None:
    from thoughtloom.eval.results import Record

    recs = [Record("sorting32", "io", str(i), i, 0, "[]", e == 0, e, None, 0, 10, 8, 2, 1, 0.1, "done")
            for i, e in enumerate([0, 2, 4, 300])]
    (s,) = summarize(recs, {"sorting32": "errors"}, ["io"], {"sorting32": 4})
    assert (s.median_errors, s.solved) == (3.0, 1)
    assert "median errors" in format_table([s])


def f1_records() -> list:
    from thoughtloom.eval.results import Record

    return [Record("hotpotqa", "io", str(i), i, 0, "Answer: x", f == 1.0, None, None, 0, 10, 8, 2, 1, 0.1, "done",
                   f1=f) for i, f in enumerate([1.0, 0.5, 0.0, 1.0])]


def test_f1_metric_reports_em_rate_and_mean_f1_with_intervals() -> None:
    (s,) = summarize(f1_records(), {"hotpotqa": "f1"}, ["io"], {"hotpotqa": 4})
    assert (s.metric, s.solved, s.rate, s.mean_f1) == ("f1", 2, 0.5, 0.625)
    assert s.rate_ci[0] < 0.5 < s.rate_ci[1]
    assert s.mean_f1_ci is not None and 0.0 <= s.mean_f1_ci[0] < 0.625 < s.mean_f1_ci[1] <= 1.0
    assert s.median_errors is None


def test_f1_table_has_an_em_and_a_mean_f1_column() -> None:
    sums = summarize(f1_records(), {"hotpotqa": "f1"}, ["io"], {"hotpotqa": 4})
    lo, hi = sums[0].mean_f1_ci or (0, 0)
    table = format_table(sums)
    assert "| lane | n | EM [95% CI] | mean F1 [95% CI] | any@k |" in table
    assert "| io | 4 | 2/4 = 50% [" in table and f"| 0.62 [{lo:.2f}, {hi:.2f}] | - |" in table


def test_f1_csv_and_json_carry_the_mean_f1_and_its_interval(tmp_path: Path) -> None:
    sums = summarize(f1_records(), {"hotpotqa": "f1"}, ["io"], {"hotpotqa": 4})
    write_csv(tmp_path / "s.csv", sums)
    (row,) = list(csv.DictReader((tmp_path / "s.csv").open()))
    assert (row["metric"], row["rate"], row["mean_f1"]) == ("f1", "0.5000", "0.6250")
    assert float(row["mean_f1_ci_low"]) < 0.625 < float(row["mean_f1_ci_high"])
    write_json(tmp_path / "s.json", {}, sums, [])
    (summary,) = json.loads((tmp_path / "s.json").read_text())["summaries"]
    assert summary["mean_f1"] == 0.625 and len(summary["mean_f1_ci"]) == 2


def test_other_metrics_leave_the_f1_columns_empty(tmp_path: Path) -> None:
    from thoughtloom.eval.results import Record

    recs = [Record("game24", "io", "1", 0, 0, "x", True, None, None, 0, 10, 8, 2, 1, 0.1, "done")]
    sums = summarize(recs, {"game24": "rate"}, ["io"], {"game24": 1})
    assert sums[0].mean_f1 is None and "F1" not in format_table(sums)
    write_csv(tmp_path / "s.csv", sums)
    assert list(csv.DictReader((tmp_path / "s.csv").open()))[0]["mean_f1"] == ""


async def test_compare_strategies_on_one_problem_returns_each_lanes_result_and_its_summary() -> None:
    fake = ScriptedBackend(default="Answer: 1 * 1 * 4 * 6 = 24")
    out = await compare_strategies("1 1 4 6", ["io", "cot", "cot_sc"], task="game24", model=fake, budget_tokens=2000)
    assert list(out) == ["io", "cot", "cot_sc"]
    (io,) = out["io"]
    assert io.answer == "1 * 1 * 4 * 6 = 24" and io.record.solved
    assert io.outcome.replies == ("Answer: 1 * 1 * 4 * 6 = 24",)
    assert out.summaries["io"].solved == 1 and out.summaries["cot_sc"].any_of_k == 1.0
    assert len(out.records) == 3 and "| cot_sc | 1 |" in out.table()


async def test_a_crashing_lane_is_recorded_as_unsolved_and_the_run_goes_on(monkeypatch: pytest.MonkeyPatch) -> None:
    from thoughtloom.eval import lanes as lanes_module

    async def broken(*args: object) -> object:
        raise RuntimeError("bug in a strategy")

    monkeypatch.setitem(lanes_module._SAMPLERS, "io", broken)
    ds = game24(2)
    proto = build_protocol(opts(limit=2), {"game24": ds})
    fake = ScriptedBackend(default="Answer: 1 * 1 * 4 * 6 = 24")
    stats = await run_protocol(proto, fake, None, datasets={"game24": ds})
    io = [r for r in stats.records if r.lane == "io"]
    assert [r.stop_reason for r in io] == ["lane_crashed", "lane_crashed"] and not any(r.solved for r in io)
    assert io[0].error == "RuntimeError: bug in a strategy"
    assert sum(r.lane == "cot" for r in stats.records) == 2  # the other lane still ran
    sums = summarize(stats.records, {"game24": "rate"}, ["io", "cot"], {"game24": 2})
    assert sums[0].lane_errors == 2
    assert "io: 2 of 2 problems ended in a model error, a crash or an unsupported step" in format_table(sums)
