"""`loom bench` end to end against the scripted OpenAI-compatible server: outputs, audit, kill + resume."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from benchdata import data_dir, needs
from machine import scaled
from openai_server import FakeOpenAIServer, Reply, Seen

from thoughtloom.cli.main import main

ROOT = Path(__file__).resolve().parents[1]
DATA = data_dir("game24/24_dev.csv")
pytestmark = needs("game24/24_dev.csv")


def completions(answer_for: dict[str, str], delay_s: float = 0.0):
    """A responder: completions whose text depends on the puzzle in the prompt's last 'Input:' line."""

    def respond(seen: Seen) -> Reply:
        prompt = seen.body.get("prompt") or ""
        puzzle = prompt.rsplit("Input: ", 1)[-1].splitlines()[0] if "Input: " in prompt else ""
        text = answer_for.get(puzzle, " 1 + 1 = 2")
        n = int(seen.body.get("n") or 1)
        body = {"id": "x", "object": "text_completion", "created": 0, "model": "m",
                "choices": [{"index": i, "text": text, "finish_reason": "stop", "logprobs": None} for i in range(n)],
                "usage": {"prompt_tokens": 50, "completion_tokens": 5 * n, "total_tokens": 50 + 5 * n}}
        return Reply(200, body, delay_s)

    return respond


def spec(server: FakeOpenAIServer) -> str:
    return f"openai-compatible:{server.url}@m#completions"


def bench_args(server: FakeOpenAIServer, out: Path, *extra: str) -> list[str]:
    return ["bench", "--tasks", "game24", "--model", spec(server), "--data-dir", str(DATA), "--out", str(out),
            "--select", "first", "--quiet", *extra]


def test_bench_prints_a_table_and_writes_json_csv_and_png(server: FakeOpenAIServer, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    # Puzzle rank 1 is "1 1 4 6": io answers it right, everything else is wrong.
    server.responder = completions({"1 1 4 6": " 1 * 1 * 4 * 6 = 24"})
    out = tmp_path / "run"
    code = main(bench_args(server, out, "--lanes", "io,cot,cot_sc", "--limit", "3", "--budget-tokens", "2000"))
    printed = capsys.readouterr().out
    assert code == 0
    assert "### game24" in printed and "| io | 3 | 1/3 = 33% [" in printed and "| cot_sc | 3 |" in printed
    summary = json.loads((out / "summary.json").read_text())
    assert [s["lane"] for s in summary["summaries"]] == ["io", "cot", "cot_sc"]
    assert summary["manifest"]["problems"] == {"game24": ["1", "2", "3"]}
    assert summary["parity_audit"]
    rows = list(csv.DictReader((out / "summary.csv").open()))
    assert rows[0]["lane"] == "io" and rows[0]["solved"] == "1" and rows[0]["n"] == "3"
    if os.environ.get("THOUGHTLOOM_NO_PLOT") is None:
        pytest.importorskip("matplotlib")
        assert (out / "quality_vs_tokens.png").read_bytes()[:4] == b"\x89PNG"
    assert len(server.seen) == 9  # 3 lanes x 3 problems, one call each (cot_sc: k samples in one call)


def test_an_unfair_protocol_is_refused_before_any_model_call(server: FakeOpenAIServer, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    protocol = tmp_path / "unfair.json"
    protocol.write_text(json.dumps({
        "tasks": ["game24"], "limit": 2, "budget_tokens": 1000,
        "lanes": ["io", {"lane": "cot", "budget_tokens": 5000}],
    }))
    out = tmp_path / "run"
    code = main(["bench", "--protocol", str(protocol), "--model", spec(server), "--data-dir", str(DATA),
                 "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err.count("\n") == 0 and "parity audit failed: lane cot has budget_tokens 5000 but lane io has 1000" in err
    assert server.seen == [] and not out.exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--lanes", "io,magic"], "unknown lane 'magic'"),
        (["--tasks", "chess"], "unknown data set 'chess'"),
        (["--param", "cot_sc-k=3"], "LANE.KEY=VALUE"),
        (["--lanes", "io", "--param", "tot.beam=2"], "not in --lanes"),
        (["--data-dir", "/nonexistent/data"], "no such directory"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], message: str, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["bench", "--model", "openai-compatible:http://127.0.0.1:9/v1@m", "--data-dir", str(DATA),
                 "--out", str(tmp_path / "r"), *args])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0 and message in err, err


def test_a_killed_bench_resumes_without_redoing_finished_problems(server: FakeOpenAIServer, tmp_path: Path) -> None:
    server.responder = completions({}, delay_s=0.15)
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "thoughtloom", *bench_args(server, out, "--lanes", "io,cot", "--limit", "6",
                                                            "--budget-tokens", "2000", "--no-plot")]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    results = out / "results.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if results.is_file() and len(results.read_text().splitlines()) >= 4:
            break
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    finished = {tuple(json.loads(l)[k] for k in ("lane", "problem_id"))
                for l in results.read_text().splitlines() if l.endswith("}")}
    assert 4 <= len(finished) < 12, "the run finished before it could be killed"
    before = len(server.seen)

    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=scaled(120), check=False)
    assert done.returncode == 0, done.stderr
    assert len(server.seen) - before == 12 - len(finished)  # one call per unfinished (lane, problem) only
    keys = [tuple(json.loads(l)[k] for k in ("lane", "problem_id")) for l in results.read_text().splitlines()
            if l.strip().endswith("}")]
    assert len(set(keys)) == 12 and len(keys) == 12
    assert "| io | 6 |" in done.stdout


def test_workers_split_the_problems_between_processes(server: FakeOpenAIServer, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    server.responder = completions({"1 1 4 6": " 1 * 1 * 4 * 6 = 24"})
    out = tmp_path / "run"
    code = main(bench_args(server, out, "--lanes", "io", "--limit", "4", "--budget-tokens", "1000", "--no-plot",
                           "--workers", "2", "--model-concurrency", "1"))
    assert code == 0
    assert "| io | 4 | 1/4 = 25% [" in capsys.readouterr().out
    assert len(server.seen) == 4  # each problem once, across both processes


#: HotpotQA's first three dev questions -> an instruct model's reply: right, half right, wrong.
HOTPOT_REPLIES = {
    "Were Scott Derrickson and Ed Wood of the same nationality?":
        "Scott Derrickson is American, and Ed Wood was American too.\n\nAnswer: Yes.",
    "What government position was held by the woman who portrayed Corliss Archer in the film Kiss and Tell?":
        "Shirley Temple played Corliss Archer.\n\n**Answer:** Chief of Protocol of the United States",
    "What science fantasy young adult series, told in first person, has a set of companion books narrating the "
    "stories of enslaved worlds and alien species?": "Answer: Harry Potter",
}


def chat_by_question(replies: dict[str, str]) -> Callable[[Seen], Reply]:
    """Chat replies from `replies`, chosen by the question the last user message ends with."""
    def reply(seen: Seen) -> Reply:
        question = seen.body["messages"][-1]["content"].rsplit("Question: ", 1)[-1]
        text = replies.get(question, "Answer: unknown")
        choices = [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]
        return Reply(200, {"id": "x", "object": "chat.completion", "created": 0, "model": "m", "choices": choices,
                           "usage": {"prompt_tokens": 900, "completion_tokens": 20, "total_tokens": 920}})

    return reply


def hotpot_bench(server: FakeOpenAIServer, replies: dict[str, str], tmp_path: Path,
                 capsys: pytest.CaptureFixture[str]) -> tuple[str, Path]:
    """`loom bench` of io and cot on HotpotQA's first three dev questions, the model replying `replies`:
    what it printed, and its run directory (the bench must succeed)."""
    server.responder = chat_by_question(replies)
    out = tmp_path / "run"
    code = main(["bench", "--tasks", "hotpotqa", "--lanes", "io,cot", "--model", f"openai-compatible:{server.url}@m",
                 "--data-dir", str(DATA), "--out", str(out), "--select", "first", "--limit", "3",
                 "--budget-tokens", "20000", "--quiet", "--no-plot"])
    printed = capsys.readouterr().out
    assert code == 0
    return printed, out


def test_bench_hotpotqa_reports_em_and_mean_f1_from_a_chat_model(server: FakeOpenAIServer, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    printed, out = hotpot_bench(server, HOTPOT_REPLIES, tmp_path, capsys)
    # EM: 1 of 3; F1: (1 + 2/3 + 0) / 3 = 0.56
    assert "| lane | n | EM [95% CI] | mean F1 [95% CI] | any@k |" in printed
    assert "| io | 3 | 1/3 = 33% [" in printed and "| cot | 3 | 1/3 = 33% [" in printed and "| 0.56 [" in printed
    rows = list(csv.DictReader((out / "summary.csv").open()))
    assert [(r["lane"], r["metric"], r["mean_f1"]) for r in rows] == [("io", "f1", "0.5556"), ("cot", "f1", "0.5556")]
    assert all(s.path.endswith("/chat/completions") for s in server.seen) and len(server.seen) == 6


@pytest.mark.local_model
def test_the_base_model_bench_two_puzzles_io_and_cot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    code = main(["bench", "--tasks", "game24", "--lanes", "io,cot", "--model", "local:gemma-3-270m", "--limit", "2",
                 "--budget-tokens", "600", "--data-dir", str(DATA), "--out", str(out), "--quiet", "--no-plot"])
    assert code == 0
    records = [json.loads(l) for l in (out / "results.jsonl").read_text().splitlines()]
    assert len(records) == 4 and all(0 < r["tokens"] <= 600 for r in records)
    assert "| cot | 2 |" in capsys.readouterr().out


@pytest.mark.local_model
def test_the_instruct_model_reasons_through_the_gsm8k_lanes_uncut(tmp_path: Path) -> None:
    out = tmp_path / "run"
    code = main(["bench", "--tasks", "gsm8k", "--lanes", "io,cot,react", "--model", "local:qwen2.5-coder-0.5b",
                 "--ids", "0", "--budget-tokens", "3000", "--data-dir", str(DATA), "--out", str(out), "--quiet",
                 "--no-plot"])
    assert code == 0
    records = {r["lane"]: r for r in map(json.loads, (out / "results.jsonl").read_text().splitlines())}
    assert all(r["stop_reason"] in ("done", "max_steps", "no_action") for r in records.values()), records
    cot = records["cot"]["answer"]
    # Its reasoning runs over several sentences to a stated number (a base model's "\n\n" stop
    # would have ended it after the first paragraph), and the number is read from it.
    assert cot is not None and cot.count(".") >= 2, cot
    assert records["io"]["answer"] is not None


def test_the_issue_example_runs_lanes_where_they_apply_and_says_where_they_do_not(
        server: FakeOpenAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    server.responder = completions({})
    out = tmp_path / "run"
    code = main(bench_args(server, out, "--tasks", "game24,sorting32", "--lanes", "io,cot,cot_sc,tot", "--limit", "2",
                           "--budget-tokens", "600", "--no-plot"))
    printed = capsys.readouterr().out
    assert code == 0
    assert "### game24" in printed and "### sorting32" in printed
    assert "| median errors [95% CI] | solved |" in printed  # the GoT metric for sorting
    assert "not run on sorting32: tot (" in printed and "| tot | 2 |" in printed  # tot runs on game24 only
    manifest = json.loads((out / "manifest.json").read_text())
    assert set(manifest["not_applicable"]["sorting32"]) == {"tot"}


def test_a_lane_that_does_not_apply_is_left_out_with_its_reason_on_stderr_and_in_the_summary(
        server: FakeOpenAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    server.responder = completions({"1 1 4 6": " 1 * 1 * 4 * 6 = 24"})
    out = tmp_path / "run"
    code = main(bench_args(server, out, "--lanes", "io,recursive", "--limit", "2", "--budget-tokens", "1000",
                           "--no-plot"))  # --quiet too: the reason is said all the same
    printed = capsys.readouterr()
    assert code == 0
    why = "lane recursive does not apply: task game24 has no decomposition for recursive (its steps have a fixed form)"
    assert f"loom bench: left out of game24: {why}\n" in printed.err
    assert "| io | 2 | 1/2 = 50% [" in printed.out and "| recursive |" not in printed.out
    assert f"not run on game24: recursive ({why})" in printed.out
    summary = json.loads((out / "summary.json").read_text())
    assert summary["left_out"] == [{"task": "game24", "lane": "recursive", "reason": why}]
    assert [s["lane"] for s in summary["summaries"]] == ["io"]
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert {r["lane"] for r in records} == {"io"} and len(server.seen) == 2


def test_a_bench_where_no_lane_applies_is_one_line_and_exit_2(server: FakeOpenAIServer, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    code = main(bench_args(server, tmp_path / "run", "--lanes", "recursive,cove", "--limit", "2"))
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0
    assert err == "loom: error: nothing to run: lane recursive does not apply: task game24 has no decomposition " \
                  "for recursive (its steps have a fixed form)"
    assert server.seen == [] and not (tmp_path / "run").exists()


def cove_completions(seen: Seen) -> Reply:
    """GSM8K problem 0 through CoVe: a wrong draft (70), two checks that expose it, a revision to 72."""
    prompt = seen.body.get("prompt") or ""
    prompts = prompt if isinstance(prompt, list) else [prompt]
    checks = {"How many clips did Natalia sell in May?": "Half of 48, which is 24.",
              "What is 48 + 24?": "48 + 24 = 72."}

    def one(text: str) -> str:
        asked = text.rstrip("\n").rsplit("\n", 1)[-1]
        if asked.startswith("Verification questions ("):
            return "\n".join(f"{i}. {q}" for i, q in enumerate(checks, 1))
        if "\nVerifications:\n" in text.rsplit("Question: ", 1)[-1]:
            return "Final answer: She sold 48 + 24 = 72 clips. The answer is 72."
        return f"Answer: {checks.get(asked.removeprefix('Question: '), 'She sold 48 + 22 = 70 clips.')}"

    texts = [one(p) for p in prompts]
    body = {"id": "x", "object": "text_completion", "created": 0, "model": "m",
            "choices": [{"index": i, "text": t, "finish_reason": "stop", "logprobs": None}
                        for i, t in enumerate(texts)],
            "usage": {"prompt_tokens": 50 * len(texts), "completion_tokens": 10 * len(texts),
                      "total_tokens": 60 * len(texts)}}
    return Reply(200, body)


def test_the_cove_lane_verifies_and_revises_on_gsm8k_and_is_left_out_of_game24(
        server: FakeOpenAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    server.responder = cove_completions
    out = tmp_path / "run"
    code = main(bench_args(server, out, "--tasks", "game24,gsm8k", "--lanes", "io,cove", "--limit", "1",
                           "--budget-tokens", "4000", "--no-plot"))
    printed = capsys.readouterr()
    assert code == 0
    assert "loom bench: left out of game24: lane cove does not apply: cove drafts and revises a free-text answer" \
        in printed.err
    records = {(r["task"], r["lane"]): r for r in map(json.loads, (out / "results.jsonl").read_text().splitlines())}
    assert set(records) == {("game24", "io"), ("gsm8k", "io"), ("gsm8k", "cove")}
    cove = records["gsm8k", "cove"]
    assert cove["solved"] is True and cove["stop_reason"] == "goal_reached" and "72" in cove["answer"]
    assert cove["calls"] == 5  # draft, plan, one per question (the ledger counts requests, batched or not), revision
    assert "| cove | 1 | 1/1 = 100% [" in printed.out


#: The same three questions -> replies that need the answer rules: a label, an explanation after the
#: span, and a yes to a question that is no yes/no question.
LABELLED_REPLIES = {
    "Were Scott Derrickson and Ed Wood of the same nationality?": "**Final Answer:** Yes.",
    "What government position was held by the woman who portrayed Corliss Archer in the film Kiss and Tell?":
        "Shirley Temple played Corliss Archer.\n\nAnswer: Chief of Protocol. She held it under Gerald Ford.",
    "What science fantasy young adult series, told in first person, has a set of companion books narrating the "
    "stories of enslaved worlds and alien species?": "Answer: Yes",
}


def test_bench_hotpotqa_scores_the_span_of_a_labelled_answer_and_never_a_yes_to_a_what_question(
        server: FakeOpenAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    printed, out = hotpot_bench(server, LABELLED_REPLIES, tmp_path, capsys)
    assert "| io | 3 | 2/3 = 67% [" in printed and "| cot | 3 | 2/3 = 67% [" in printed
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    for lane in ("io", "cot"):
        answers = [r["answer"] for r in sorted(records, key=lambda r: r["index"]) if r["lane"] == lane]
        # As a user gets them: the span alone, and no answer rather than a "yes" to a "What ..." question.
        assert answers == ["yes", "Chief of Protocol", None]


def test_bench_hotpotqa_answers_a_year_question_given_a_title_with_the_year_its_paragraphs_give(
        server: FakeOpenAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Question 12 asks "What year ...?"; the model answers with a document's title, as research did (issue 33).
    server.responder = chat_by_question({"What year did Guns N Roses perform a promo for a movie starring Arnold "
                                         "Schwarzenegger as a former New York Police detective?":
                                         "Answer: Arnold Schwarzenegger filmography"})
    out = tmp_path / "run"
    code = main(["bench", "--tasks", "hotpotqa", "--lanes", "io", "--model", f"openai-compatible:{server.url}@m",
                 "--data-dir", str(DATA), "--out", str(out), "--ids", "12", "--budget-tokens", "20000", "--quiet",
                 "--no-plot"])
    assert code == 0
    (record,) = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert (record["answer"], record["solved"]) == ("1999", True)
