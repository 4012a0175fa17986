"""`loom bench` on a user's labelled data set (JSON Lines or CSV) through the scripted OpenAI-compatible server:
scores by the task file's checker or --metric, the winner line, shots, and the refusals."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from openai_server import FakeOpenAIServer, Reply, Seen, always

from thoughtloom.cli.main import main

ROOT = Path(__file__).resolve().parents[1]
UNITS = ROOT / "examples" / "units.toml"
UNITS_SET = ROOT / "examples" / "units.jsonl"
ROWS = [json.loads(line) for line in UNITS_SET.read_text(encoding="utf-8").splitlines()]


def answering(right: set[str], wrong: str = "1") -> Callable[[Seen], Reply]:
    """A chat responder: the gold answer for the problems whose id is in `right` (found by their text in the
    request's last user turn), `wrong` for the others."""
    golds = {row["problem"]: (row["answer"] if row["id"] in right else wrong) for row in ROWS}

    def respond(seen: Seen) -> Reply:
        asked = seen.body["messages"][-1]["content"]
        said = next((gold for problem, gold in golds.items() if problem in asked), wrong)
        n = int(seen.body.get("n") or 1)
        return always(f"Final answer: {said}")(Seen(seen.path, {**seen.body, "n": n}, seen.headers))

    return respond


def bench(server: FakeOpenAIServer, out: Path, tasks: str, *extra: str) -> list[str]:
    return ["bench", "--tasks", tasks, "--model", f"openai-compatible:{server.url}@m", "--out", str(out),
            "--budget-tokens", "4000", "--no-plot", "--quiet", *extra]


def records(out: Path) -> dict[tuple[str, str], dict[str, object]]:
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    return {(r["lane"], r["problem_id"]): r for r in rows}


def test_the_example_task_file_and_labelled_set_are_scored_in_every_lane(
        server: FakeOpenAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    server.responder = answering({"km-m", "h-min", "kg-g", "ft-in", "mi-km", "lb-kg"})
    out = tmp_path / "run"
    code = main(bench(server, out, f"{UNITS}:{UNITS_SET}", "--lanes", "io,cot,cot_sc,tot"))
    printed = capsys.readouterr().out
    assert code == 0
    for lane in ("io", "cot", "cot_sc", "tot"):
        assert f"| {lane} | 10 | 6/10 = 60% [" in printed
    # 16.09 and 9.98 are the rounded golds: the file's numeric checker (0.5%) takes "16.09" exactly too.
    assert records(out)[("io", "mi-km")]["solved"] is True and records(out)[("io", "day-h")]["solved"] is False
    assert "winner on " in printed and "not separated from" in printed and "by the 95% intervals" in printed


def test_the_winner_line_names_the_lane_ahead_beyond_the_intervals(
        server: FakeOpenAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ids = {row["id"] for row in ROWS}

    def respond(seen: Seen) -> Reply:
        # Chain of thought (its prompt asks for reasoning) is right every time; the direct answer never is.
        cot = "Reason step by step" in json.dumps(seen.body)
        return answering(ids if cot else set())(seen)

    server.responder = respond
    out = tmp_path / "run"
    assert main(bench(server, out, f"{UNITS}:{UNITS_SET}", "--lanes", "io,cot")) == 0
    printed = capsys.readouterr().out
    winner = next(line for line in printed.splitlines() if line.startswith("winner on "))
    assert ": cot, success 100% [" in winner and "tokens and" in winner and "s per problem" in winner
    assert winner.endswith("ahead of every other lane beyond the 95% intervals")


def test_a_csv_set_with_mapped_fields_is_scored_by_the_metric_named(
        server: FakeOpenAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "capitals.csv"
    data.write_text("key,question,gold\nfr,What is the capital of France?,Paris\n"
                    "jp,What is the capital of Japan?,Tokyo\nit,What is the capital of Italy?,Rome\n", encoding="utf-8")
    server.responder = always("Answer: The capital is Paris")
    out = tmp_path / "run"
    code = main(bench(server, out, f"general:{data}", "--lanes", "io,cot", "--metric", "contains",
                      "--fields", "problem=question,answer=gold,id=key"))
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "| io | 3 | 1/3 = 33% [" in printed and "| cot | 3 | 1/3 = 33% [" in printed
    assert records(out)[("io", "fr")]["solved"] is True and records(out)[("io", "jp")]["solved"] is False


def test_the_f1_metric_reports_mean_f1(server: FakeOpenAIServer, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "people.jsonl"
    data.write_text('{"problem": "Who was the 44th US president?", "answer": "Barack Obama"}\n', encoding="utf-8")
    server.responder = always("Answer: Obama")
    assert main(bench(server, tmp_path / "run", f"general:{data}", "--lanes", "io", "--metric", "f1")) == 0
    printed = capsys.readouterr().out
    assert "mean F1 [95% CI]" in printed and "| io | 1 | 0/1 = 0% [" in printed and "| 0.67 [" in printed


def test_shots_from_a_train_file_are_shown_before_each_problem(server: FakeOpenAIServer, tmp_path: Path) -> None:
    shots = tmp_path / "train.jsonl"
    shots.write_text('{"problem": "How many metres are in 9 kilometres?", "answer": "9000"}\n', encoding="utf-8")
    server.responder = answering(set())
    assert main(bench(server, tmp_path / "run", f"general:{UNITS_SET}", "--lanes", "io", "--metric", "numeric",
                      "--shots", str(shots), "--limit", "2")) == 0
    for seen in server.seen:
        turns = [m["content"] for m in seen.body["messages"]]
        assert "Question: How many metres are in 9 kilometres?" in turns and "Answer: 9000" in turns


@pytest.mark.parametrize("shots_row", [
    '{"problem": "How many metres are in 4 kilometres?", "answer": "4000"}\n',
    '{"problem": "  how many metres are in 4   kilometres? ", "answer": "4000"}\n',
])
def test_a_problem_that_is_also_a_shot_is_refused_before_any_call(server: FakeOpenAIServer, tmp_path: Path,
                                                                   shots_row: str,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    shots = tmp_path / "train.jsonl"
    shots.write_text(shots_row, encoding="utf-8")
    code = main(bench(server, tmp_path / "run", f"general:{UNITS_SET}", "--lanes", "io", "--metric", "numeric",
                      "--shots", str(shots)))
    err = capsys.readouterr().err
    assert code == 2 and server.seen == []
    assert f"problem km-m of general:{UNITS_SET} is also a shot (--shots {shots} line 1)" in err
    assert err.count("\n") == 1


def test_a_task_files_own_example_as_a_problem_is_refused(server: FakeOpenAIServer, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "set.jsonl"
    data.write_text('{"id": "a", "problem": "How many seconds are in 3 minutes?", "answer": "180"}\n', encoding="utf-8")
    assert main(bench(server, tmp_path / "run", f"{UNITS}:{data}", "--lanes", "io")) == 2
    assert "problem a of" in capsys.readouterr().err and server.seen == []


@pytest.mark.parametrize(("rows", "extra", "said"), [
    ('{"problem": "q"}\n', ("--metric", "exact"), 'line 1: no field "answer"'),
    ('{"question": "q", "answer": "1"}\n', ("--metric", "exact"), 'field "problem" must hold the problem as text'),
    ('{"problem": "q", "answer": "many"}\n', ("--metric", "numeric"), "the numeric checker needs a number"),
    ('{"problem": "q", "answer": "1"}\n', ("--metric", "closest"), "--metric: unknown checker 'closest'"),
    ('{"problem": "q", "answer": "1"}\n', ("--metric", "exact", "--fields", "gold"), "write ROLE=FIELD"),
    ('{"problem": "q", "answer": "1"}\n', ("--metric", "exact", "--fields", "label=x"), "ROLE is problem, answer or id"),
])
def test_bad_labelled_rows_and_options_are_one_line_and_exit_2(server: FakeOpenAIServer, tmp_path: Path, rows: str,
                                                               extra: tuple[str, ...], said: str,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "set.jsonl"
    data.write_text(rows, encoding="utf-8")
    assert main(bench(server, tmp_path / "run", f"general:{data}", "--lanes", "io", *extra)) == 2
    err = capsys.readouterr().err
    assert said in err and err.count("\n") == 1 and server.seen == []


def test_a_resumed_run_imports_a_custom_checker_only_when_named_again(server: FakeOpenAIServer, tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str],
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "mine.py").write_text("def same(answer, gold):\n    return str(gold) in (answer or '')\n",
                                      encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    server.responder = answering({"km-m"})
    out = tmp_path / "run"
    assert main(bench(server, out, f"general:{UNITS_SET}", "--lanes", "io", "--metric", "mine:same")) == 0
    assert "| io | 10 | 1/10 = 10% [" in capsys.readouterr().out
    assert main(["bench", "--resume", str(out), "--quiet", "--no-plot"]) == 2
    err = capsys.readouterr().err
    assert "this run scores answers with mine:same" in err and f"--resume {out} --metric mine:same" in err
    assert main(["bench", "--resume", str(out), "--quiet", "--no-plot", "--metric", "mine:same"]) == 0
    assert "| io | 10 | 1/10 = 10% [" in capsys.readouterr().out


def test_an_unlabelled_set_keeps_its_old_form_and_leaves_io_out(server: FakeOpenAIServer, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "set.jsonl"
    data.write_text('{"id": "a", "problem": "Name a colour."}\n', encoding="utf-8")
    server.responder = always("Final answer: red")
    assert main(bench(server, tmp_path / "run", f"math:{data}", "--lanes", "io,tot")) == 0
    captured = capsys.readouterr()
    assert "lane io has no prompt" in captured.err and "label its rows" in captured.err
    assert "| tot | 1 |" in captured.out


def test_a_custom_checker_that_fails_stops_the_bench_in_one_line_keeping_what_was_scored(
        server: FakeOpenAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "fragile.py").write_text("def check(answer, gold):\n    if gold == '72':\n        raise ValueError('no')\n"
                                         "    return True\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    server.responder = answering(set())
    out = tmp_path / "run"
    assert main(bench(server, out, f"general:{UNITS_SET}", "--lanes", "io", "--metric", "fragile:check",
                      "--select", "first")) == 2
    err = capsys.readouterr().err
    assert "problem ft-in: checker fragile:check failed: ValueError: no" in err and err.count("\n") == 1
    assert {pid for _, pid in records(out)} == {"km-m", "h-min", "kg-g"}  # the rows before it stay recorded
