"""The ToT paper's 5x5 mini crosswords: the paper's letter / word / game scoring, the data file's parser,
the task's steps, a bench of every lane through a real HTTP server, and `loom data fetch crosswords`."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from benchdata import data_dir, mirror, needs
from openai_server import FakeOpenAIServer, completions_of

from thoughtloom.cli.main import main
from thoughtloom.eval.datasets import DataError, given_problems, load_dataset
from thoughtloom.eval.scoring import crossword_board, score_crosswords
from thoughtloom.eval.sources import SOURCES
from thoughtloom.tasks.base import ProblemError
from thoughtloom.tasks.crosswords import (
    CrosswordsTask,
    board_words,
    read_puzzles,
    render_clues,
)
from thoughtloom.tasks.registry import TaskOptions, get_task

FILE = "crosswords/mini0505.json"
DATA = data_dir(FILE)
pytestmark = needs(FILE)

# Game 0 of mini0505.json.
GOLD = "AGENDMOTORARTSYSALLESLEER"


def rows(board: str) -> str:
    """A board as the paper's Output lines: five rows of space-separated letters."""
    return "\n".join(" ".join(board[r * 5:(r + 1) * 5]) for r in range(5))


def puzzles() -> list[tuple[tuple[str, ...], str]]:
    return read_puzzles((DATA / FILE).read_text(encoding="utf-8"))


# --- the paper's scoring -------------------------------------------------------------------------


def test_the_gold_board_scores_every_letter_every_word_and_the_game() -> None:
    assert score_crosswords(GOLD, rows(GOLD)) == score_crosswords(GOLD, f"Thoughts:\n...\n\nOutput:\n{rows(GOLD)}")
    score = score_crosswords(GOLD, rows(GOLD))
    assert score.solved and dict(score.parts) == {"letters": 1.0, "words": 1.0}


def test_one_wrong_letter_costs_one_letter_and_the_two_words_through_it() -> None:
    wrong = "X" + GOLD[1:]  # cell 0: in h1 and v1
    score = score_crosswords(GOLD, rows(wrong))
    assert not score.solved and dict(score.parts) == {"letters": 24 / 25, "words": 8 / 10}


def test_rows_are_read_as_the_papers_code_reads_them() -> None:
    # Lower case counts, a row written without spaces counts, only the last five lines are rows.
    reply = "a guess first\n" + "\n".join(GOLD[r * 5:(r + 1) * 5].lower() for r in range(5))
    assert score_crosswords(GOLD, reply).solved
    # A short row is padded with empty cells; a row of six letters is refused (its cells stay empty).
    assert crossword_board("A G E\nMOTORS") == "AGE__" + "_" * 20
    assert score_crosswords(GOLD, None).parts == (("letters", 0.0), ("words", 0.0))


def test_three_rows_fill_the_top_three_rows_only() -> None:
    three = "\n".join(rows(GOLD).splitlines()[:3])
    score = score_crosswords(GOLD, three)
    # 15 letters; the three full rows are right, no column is complete.
    assert dict(score.parts) == {"letters": 15 / 25, "words": 3 / 10}


# --- the data file -------------------------------------------------------------------------------


def test_the_data_file_holds_156_games_of_ten_clues_and_25_letters() -> None:
    games = puzzles()
    assert len(games) == 156
    clues, gold = games[0]
    assert clues[0] == "An agendum; something to be done" and clues[9] == "Desiccator; more dry"
    assert gold == GOLD and board_words(gold)[:2] == ["AGEND", "MOTOR"] and board_words(gold)[5] == "AMASS"


@pytest.mark.parametrize("text, message", [
    ("{}", "JSON list"),
    ('[[["a clue"], ["A"]]]', "puzzle 0 is not"),
    (json.dumps([[["c"] * 10, ["A"] * 24]]), "puzzle 0 is not"),
])
def test_a_malformed_data_file_is_refused_naming_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        read_puzzles(text)


def test_the_data_set_is_the_papers_20_test_games() -> None:
    dataset = load_dataset("crosswords", DATA)
    assert [p.id for p in dataset.problems] == [str(i) for i in range(0, 100, 5)]
    first = dataset.problems[0]
    assert first.gold == GOLD and first.text.splitlines()[0] == "h1. An agendum; something to be done"


def test_a_broken_data_file_in_the_data_dir_is_a_one_line_error(tmp_path: Path) -> None:
    (tmp_path / "crosswords").mkdir()
    (tmp_path / FILE).write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(DataError, match="cannot read .*mini0505.json: puzzle 0 is not"):
        load_dataset("crosswords", tmp_path)


# --- the task ------------------------------------------------------------------------------------


def task() -> CrosswordsTask:
    built = get_task("crosswords", TaskOptions(data=DATA / FILE))
    assert isinstance(built, CrosswordsTask)
    return built


def test_a_problem_needs_a_clue_for_every_slot() -> None:
    clues = render_clues(puzzles()[0][0])
    assert task().parse_problem(clues).clues == puzzles()[0][0]
    with pytest.raises(ProblemError, match="v5 missing"):
        task().parse_problem("\n".join(clues.splitlines()[:9]))
    with pytest.raises(ProblemError, match='lines like "h1. A lunar valley"'):
        task().parse_problem("fill the grid")


def test_a_word_that_would_change_a_placed_letter_is_rejected() -> None:
    t = task()
    problem = t.parse_problem(render_clues(puzzles()[0][0]))
    assert t.validate(problem, [], "h1. agend (certain)").thought == "h1. AGEND"
    verdict = t.validate(problem, ["h1. AGEND"], "v1. BLAST")
    assert not verdict.ok and "letter 1 is A" in (verdict.note or "")
    assert t.validate(problem, ["h1. AGEND"], "v1. AMASS").ok
    assert not t.validate(problem, ["h1. AGEND"], "h1. AGEND").ok  # nothing new
    assert t.compose_answer(problem, ["h1. AGEND", "v1. AMASS"], None) == (
        "A G E N D\nM _ _ _ _\nA _ _ _ _\nS _ _ _ _\nS _ _ _ _")


def test_proposals_are_ranked_by_the_papers_summed_confidence() -> None:
    t = task()
    problem = t.parse_problem(render_clues(puzzles()[0][0]))
    reply = "h1. agend (low)\nv1. amass (high)\nh1. agend (medium)\nh2. motor (certain)\nnot a step"
    assert t.parse_proposals(problem, [], reply) == ["h2. MOTOR", "v1. AMASS", "h1. AGEND"]


def test_the_lm_free_steps_are_other_games_words_that_fit_the_most_constrained_slot() -> None:
    t = task()
    games = puzzles()
    problem = t.parse_problem(render_clues(games[0][0]))
    others = {w for clues, gold in games[1:] for w in board_words(gold)}
    assert set(t.vocabulary(problem)) == others  # game 0's own words only where another game has them
    steps = t.legal_steps(problem, ["h1. AGEND", "h2. MOTOR"])
    assert steps and all(t.validate(problem, ["h1. AGEND", "h2. MOTOR"], s).ok for s in steps)
    slot = {s.split(".")[0] for s in steps}
    assert len(slot) == 1 and slot <= {"v1", "v2", "v3", "v4", "v5"}  # a column has two letters now
    assert CrosswordsTask().legal_steps(problem, []) == ()  # without the data file, no vocabulary


def test_with_a_vocabulary_a_board_no_word_fits_is_a_dead_end() -> None:
    t = task()
    problem = t.parse_problem(render_clues(puzzles()[0][0]))
    assert not t.is_terminal(problem, ["h1. AGEND"])
    assert t.is_terminal(problem, ["h1. ZZZZZ", "h2. ZZZZZ"])  # no word starts "ZZ"
    assert not CrosswordsTask().is_terminal(problem, ["h1. ZZZZZ", "h2. ZZZZZ"])  # the model may still know one


# --- the bench through a real HTTP server --------------------------------------------------------


def respond_solving(solved_h1: str):
    """A model that knows game 0 (its h1 clue is `solved_h1`, its board GOLD) and nothing else, for every
    prompt form (game 5 has another h1 clue)."""

    def respond(request, i: int) -> str:
        text = request.prompt.text or ""
        if text.startswith("Evaluate if there exists"):
            return "sure"
        if text.startswith("Let's play a 5 x 5 mini crossword"):
            if f"h1. {solved_h1}:" not in text:
                return "h1. wrong (low)"
            words = board_words(GOLD)
            return "\n".join(f"h{n}. {w.lower()} (high)" for n, w in enumerate(words[:5], 1))
        last = text.rsplit("Input:\n", 1)[-1]
        if not last.startswith(f"h1. {solved_h1}\n"):
            return "Q Q Q Q Q"
        board = rows(GOLD)
        return board if text.endswith("Output:\n") else f"h1. x: AGEND\n\nOutput:\n{board}"

    return respond


def test_a_bench_of_two_games_runs_every_lane_through_http_and_reports_letters_and_words(
        server: FakeOpenAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    games = puzzles()
    assert games[5][0][0] != games[0][0][0]
    server.responder = completions_of(respond_solving(games[0][0][0]))
    out = tmp_path / "run"
    code = main(["bench", "--tasks", "crosswords", "--lanes", "io,cot,cot_sc,tot,dfs,mcts,random", "--ids", "0,5",
                 "--model", f"openai-compatible:{server.url}@m#completions", "--data-dir", str(DATA),
                 "--out", str(out), "--budget-tokens", "20000", "--no-plot"])
    printed = capsys.readouterr().out
    assert code == 0
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    by = {(r["lane"], r["problem_id"]): r for r in records}
    assert len(by) == 14  # every lane that applies (best_of_n, react, got, cove ... are left out, with why)
    for lane in ("io", "cot", "cot_sc", "tot", "dfs"):
        assert by[(lane, "0")]["solved"] and by[(lane, "0")]["parts"] == {"letters": 1.0, "words": 1.0}, lane
    # MCTS's playouts and the controller may settle before the last row: its board is scored all the same.
    assert by[("mcts", "0")]["parts"]["letters"] > 0.5
    assert not any(r["solved"] for (lane, pid), r in by.items() if pid == "5")
    # The control fills boards with other games' words, ends at dead ends, and never calls the model.
    control = [by[("random", "0")], by[("random", "5")]]
    assert all(r["answer"] and r["stop_reason"] != "model_error" for r in control), control
    assert "mean letters [95% CI]" in printed and "mean words [95% CI]" in printed
    seen = len(server.seen)
    assert main(["bench", "--tasks", "crosswords", "--lanes", "random", "--ids", "0,5", "--no-plot",
                 "--model", f"openai-compatible:{server.url}@m#completions", "--data-dir", str(DATA),
                 "--out", str(tmp_path / "control")]) == 0
    assert len(server.seen) == seen


# --- loom data fetch -----------------------------------------------------------------------------


def test_data_fetch_crosswords_writes_the_pinned_file_and_bench_finds_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, server: FakeOpenAIServer) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("THOUGHTLOOM_DATA", raising=False)
    monkeypatch.delenv("THOUGHTLOOM_DATA_URL", raising=False)
    with mirror(DATA) as url:
        assert main(["data", "fetch", "crosswords", "--from", url]) == 0
    written = tmp_path / "xdg" / "thoughtloom" / "data" / FILE
    assert written.read_bytes() == (DATA / FILE).read_bytes()
    assert SOURCES["crosswords"].files[0].upstream.endswith("/src/tot/data/crosswords/mini0505.json")
    server.responder = completions_of(lambda request, i: "Q Q Q Q Q")
    code = main(["bench", "--tasks", "crosswords", "--lanes", "io", "--limit", "1", "--no-plot",
                 "--model", f"openai-compatible:{server.url}@m#completions", "--out", str(tmp_path / "run")])
    assert code == 0 and len(server.seen) == 1


def test_a_download_with_other_bytes_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    (tmp_path / "m" / "crosswords").mkdir(parents=True)
    (tmp_path / "m" / FILE).write_bytes((DATA / FILE).read_bytes().replace(b"\"A\"", b"\"B\"", 1))
    with mirror(tmp_path / "m") as url:
        assert main(["data", "fetch", "crosswords", "--from", url]) != 0
    assert "SHA-256" in capsys.readouterr().err
    assert not (tmp_path / "xdg" / "thoughtloom" / "data" / FILE).exists()


def test_a_puzzle_given_as_text_has_no_gold_so_it_is_unchecked() -> None:
    given = given_problems(render_clues(puzzles()[0][0]), "crosswords")
    assert given.spec.metric == "unchecked"
    assert not asyncio.run(given.score(given.problems[0], rows(GOLD))).solved


def test_scoring_is_the_same_through_the_data_set() -> None:
    dataset = load_dataset("crosswords", DATA)
    score = asyncio.run(dataset.score(dataset.problems[0], rows(GOLD)))
    assert score.solved and dict(score.parts)["words"] == 1.0
