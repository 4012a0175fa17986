"""`loom data` (list / fetch / path): downloads checked against pinned SHA-256, the standard splits, and
"not found" errors that name the fetch command. The tests serve a data folder (tests/benchdata.py finds one)
from a local HTTP mirror."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from benchdata import data_dir, mirror, needs
from machine import scaled
from openai_server import FakeOpenAIServer, Reply, Seen

from thoughtloom.cli.main import main
from thoughtloom.eval import sources
from thoughtloom.eval.datasets import DataError, find_data_dir, load_dataset
from thoughtloom.eval.sources import (
    SOURCES,
    DataFile,
    DataSource,
    FetchError,
    fetch,
    game24_dev,
    game24_test,
)
from thoughtloom.tasks.base import ProblemError
from thoughtloom.tasks.got_paper import find_got_file
from thoughtloom.tasks.humaneval import find_mbpp

ROOT = Path(__file__).resolve().parents[1]
# Every file the data sets that are not test splits write: the mirror serves them all.
_PUBLIC = tuple(f.path for s in SOURCES.values() if s.split != "test" for f in s.files)
DATA = data_dir(*_PUBLIC)
pytestmark = needs(*_PUBLIC)




@pytest.fixture
def shared_mirror() -> Iterator[str]:
    """The data folder served as a mirror of the data directory's layout."""
    with mirror(DATA) as url:
        yield url


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def upstream_24_csv() -> bytes:
    """A file in the upstream 24.csv layout (LF lines, no final newline): the dev rows plus ranks 901-1000.

    The real test slice is not in the development data folder, so these 100 rows are stand-ins."""
    rows = list(csv.reader(io.StringIO((DATA / "game24" / "24_dev.csv").read_text())))
    header, dev = rows[0], rows[1:]
    stand_ins = [[str(rank), "1 2 3 4", "1", "50.00%", "1", "1"] for rank in range(901, 1001)]
    ranked = sorted(dev + stand_ins, key=lambda r: int(r[0]))
    return "\n".join(",".join(r) for r in [header, *ranked]).encode()


# --- fetch through a mirror -----------------------------------------------------------------------


def test_fetch_writes_the_set_into_the_xdg_cache_checked_against_its_pinned_sha256(
        cache: Path, shared_mirror: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["data", "fetch", "game24", "--from", shared_mirror]) == 0
    written = cache / "game24" / "24_dev.csv"
    assert sha256(written) == SOURCES["game24"].files[0].sha256
    assert written.read_bytes() == (DATA / "game24" / "24_dev.csv").read_bytes()
    assert "SHA-256 checked" in capsys.readouterr().out


def test_every_pinned_checksum_is_that_of_the_public_file_in_the_data_folder(cache: Path, shared_mirror: str) -> None:
    # The development data folder holds no standard test split, so only the other sets can be compared.
    for name in (n for n, src in SOURCES.items() if src.split != "test"):
        for path in fetch(name, base_url=shared_mirror):
            assert path.read_bytes() == (DATA / path.relative_to(cache)).read_bytes()


def test_the_base_url_can_come_from_the_environment(cache: Path, shared_mirror: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("THOUGHTLOOM_DATA_URL", shared_mirror)
    assert main(["data", "fetch", "sorting32"]) == 0
    assert (cache / "got" / "sorting" / "sorting_032.csv").is_file()


def test_a_fetched_game24_holds_the_dev_split_without_the_papers_test_ranks(cache: Path, shared_mirror: str) -> None:
    fetch("game24", base_url=shared_mirror)
    ranks = [int(p.id) for p in load_dataset("game24").problems]
    assert len(ranks) == 1262
    assert not set(ranks) & set(range(901, 1001))


def test_a_fetched_mbpp_holds_no_task_of_the_standard_test_split(cache: Path, shared_mirror: str) -> None:
    fetch("mbpp", base_url=shared_mirror)
    ids = [int(p.id.split("/")[1]) for p in load_dataset("mbpp").problems]
    assert len(ids) == 170
    assert not set(ids) & set(range(11, 511))


def test_a_corrupted_download_is_refused_in_one_line_and_nothing_is_written(
        cache: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad"
    (bad / "game24").mkdir(parents=True)
    original = (DATA / "game24" / "24_dev.csv").read_bytes()
    (bad / "game24" / "24_dev.csv").write_bytes(original.replace(b"1 1 4 6", b"1 1 4 7", 1))
    with mirror(bad) as url:
        code = main(["data", "fetch", "game24", "--from", url])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and "refused" in err and "SHA-256" in err and "Traceback" not in err
    assert not (cache / "game24").exists() or not any((cache / "game24").iterdir())


def test_a_file_missing_from_the_mirror_is_a_one_line_error(cache: Path, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    with mirror(tmp_path) as url:
        code = main(["data", "fetch", "gsm8k", "--from", url])
    err = capsys.readouterr().err
    assert code == 2 and "HTTP 404" in err and err.count("\n") == 1


# --- the upstream originals and their splits ------------------------------------------------------


def test_the_game24_split_writes_the_pinned_dev_file_byte_for_byte() -> None:
    split = game24_dev(upstream_24_csv())
    assert hashlib.sha256(split).hexdigest() == SOURCES["game24"].files[0].sha256


def test_an_upstream_fetch_checks_the_original_then_applies_the_split(
        cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    original = upstream_24_csv()
    (tmp_path / "up").mkdir()
    (tmp_path / "up" / "24.csv").write_bytes(original)
    with mirror(tmp_path / "up") as url:
        pinned = SOURCES["game24"].files[0]
        local = DataFile(pinned.path, pinned.sha256, f"{url}/24.csv", hashlib.sha256(original).hexdigest(), pinned.split)
        monkeypatch.setitem(SOURCES, "game24", DataSource("game24", (local,), "test", "MIT"))
        fetch("game24")
    assert sha256(cache / "game24" / "24_dev.csv") == pinned.sha256


def test_an_upstream_original_whose_checksum_differs_is_refused(
        cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "up").mkdir()
    (tmp_path / "up" / "24.csv").write_bytes(upstream_24_csv())
    with mirror(tmp_path / "up") as url:
        pinned = SOURCES["game24"].files[0]
        monkeypatch.setitem(SOURCES, "game24", DataSource("game24", (
            DataFile(pinned.path, pinned.sha256, f"{url}/24.csv", pinned.upstream_sha256, pinned.split),), "t", "MIT"))
        with pytest.raises(FetchError, match="refused .*24.csv: its SHA-256 is"):
            fetch("game24")


def test_the_game24_test_split_holds_exactly_the_papers_ranks_901_to_1000() -> None:
    rows = list(csv.reader(io.StringIO(game24_test(upstream_24_csv()).decode())))
    assert rows[0][:2] == ["Rank", "Puzzles"]
    assert [int(r[0]) for r in rows[1:]] == list(range(901, 1001))


def test_the_game24_dev_and_test_splits_partition_the_upstream_file() -> None:
    original = upstream_24_csv()
    dev = list(csv.reader(io.StringIO(game24_dev(original).decode())))[1:]
    test = list(csv.reader(io.StringIO(game24_test(original).decode())))[1:]
    upstream = list(csv.reader(io.StringIO(original.decode())))[1:]
    assert sorted(dev + test, key=lambda r: int(r[0])) == upstream


def test_an_upstream_fetch_of_game24_test_checks_the_original_then_writes_the_test_slice(
        cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    original = upstream_24_csv()
    (tmp_path / "up").mkdir()
    (tmp_path / "up" / "24.csv").write_bytes(original)
    pinned = SOURCES["game24_test"].files[0]
    # The real test slice is withheld here, so the pins are those of the stand-in original and its split.
    with mirror(tmp_path / "up") as url:
        local = DataFile(pinned.path, hashlib.sha256(game24_test(original)).hexdigest(), f"{url}/24.csv",
                         hashlib.sha256(original).hexdigest(), pinned.split)
        monkeypatch.setitem(SOURCES, "game24_test", DataSource("game24_test", (local,), "test", "MIT", "test"))
        assert main(["data", "fetch", "game24_test"]) == 0
    assert (cache / "game24" / "24_test.csv").read_bytes() == game24_test(original)
    assert [int(p.id) for p in load_dataset("game24_test").problems] == list(range(901, 1001))


def test_game24_test_is_pinned_to_the_same_upstream_original_as_the_dev_split() -> None:
    dev, test = SOURCES["game24"].files[0], SOURCES["game24_test"].files[0]
    assert (test.upstream, test.upstream_sha256) == (dev.upstream, dev.upstream_sha256)
    assert test.original_pinned and test.sha256 != dev.sha256


def test_the_upstream_24_csv_name_is_read_as_the_test_split_for_game24_test(tmp_path: Path) -> None:
    (tmp_path / "game24").mkdir()
    (tmp_path / "game24" / "24.csv").write_bytes(upstream_24_csv())
    assert [int(p.id) for p in load_dataset("game24_test", tmp_path).problems] == list(range(901, 1001))


def test_a_fetched_gsm8k_test_is_the_upstream_file_as_is_and_loads_its_final_numbers(
        cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The real test split is withheld here: three train problems stand in, pinned for this test.
    stand_in = b"".join((DATA / "gsm8k" / "train.jsonl").read_bytes().splitlines(keepends=True)[:3])
    (tmp_path / "up").mkdir()
    (tmp_path / "up" / "test.jsonl").write_bytes(stand_in)
    pinned = SOURCES["gsm8k_test"].files[0]
    assert pinned.split is None and pinned.upstream.endswith("/grade_school_math/data/test.jsonl")
    with mirror(tmp_path / "up") as url:
        local = DataFile(pinned.path, hashlib.sha256(stand_in).hexdigest(), f"{url}/test.jsonl")
        monkeypatch.setitem(SOURCES, "gsm8k_test", DataSource("gsm8k_test", (local,), "test", "MIT", "test"))
        fetch("gsm8k_test")
    assert (cache / "gsm8k" / "test.jsonl").read_bytes() == stand_in
    golds = [p.gold for p in load_dataset("gsm8k_test").problems]
    assert golds == [json.loads(line)["answer"].rsplit("####", 1)[1].strip() for line in stand_in.splitlines()]


def test_a_missing_test_split_names_the_command_that_fetches_it(cache: Path) -> None:
    with pytest.raises(DataError, match=r"24_test.csv not found; run `loom data fetch game24_test`"):
        load_dataset("game24_test")


def test_the_upstream_game24_name_is_read_with_the_standard_split(tmp_path: Path) -> None:
    (tmp_path / "game24").mkdir()
    (tmp_path / "game24" / "24.csv").write_bytes(upstream_24_csv())
    ranks = [int(p.id) for p in load_dataset("game24", tmp_path).problems]
    assert len(ranks) == 1262 and not set(ranks) & set(range(901, 1001))


def test_the_upstream_mbpp_name_is_read_without_its_test_split(tmp_path: Path) -> None:
    rows = json.loads((DATA / "mbpp" / "sanitized-mbpp-nontest.json").read_text())
    test_row = {**rows[0], "task_id": 11}
    (tmp_path / "mbpp").mkdir()
    (tmp_path / "mbpp" / "sanitized-mbpp.json").write_text(json.dumps([test_row, *rows], indent=4))
    ids = [p.id for p in load_dataset("mbpp", tmp_path).problems]
    assert len(ids) == 170 and "MBPP/11" not in ids


def test_the_upstream_hotpotqa_file_is_read_as_its_first_50_questions(tmp_path: Path) -> None:
    hf = json.loads((DATA / "hotpotqa" / "hotpot_dev_distractor_first50.json").read_text())
    official = [{"_id": str(i), "question": r["question"], "answer": r["answer"], "type": r["type"], "level": r["level"],
                 "supporting_facts": [list(p) for p in zip(r["supporting_facts"]["title"], r["supporting_facts"]["sent_id"])],
                 "context": [list(p) for p in zip(r["context"]["title"], r["context"]["sentences"])]}
                for i, r in enumerate(hf * 2)]  # 100 questions: the second 50 must be left out
    (tmp_path / "hotpotqa").mkdir()
    (tmp_path / "hotpotqa" / "hotpot_dev_distractor_v1.json").write_text(json.dumps(official))
    assert sources.hotpotqa_first50(json.dumps(official).encode()) == \
        (DATA / "hotpotqa" / "hotpot_dev_distractor_first50.json").read_bytes()
    assert len(load_dataset("hotpotqa", tmp_path).problems) == 50


def official_hotpotqa(questions: int = 100) -> bytes:
    """The official dev (distractor) file's layout rebuilt from the dev file, with stand-ins after the first 50."""
    hf = json.loads((DATA / "hotpotqa" / "hotpot_dev_distractor_first50.json").read_text())
    rows = [{"_id": str(i), "question": r["question"], "answer": r["answer"], "type": r["type"], "level": r["level"],
             "supporting_facts": [list(p) for p in zip(r["supporting_facts"]["title"], r["supporting_facts"]["sent_id"])],
             "context": [list(p) for p in zip(r["context"]["title"], r["context"]["sentences"])]}
            for i, r in enumerate((hf * 2)[:questions])]
    return json.dumps(rows).encode()


def pretty_sanitized_mbpp() -> bytes:
    """sanitized-mbpp.json as a copy might hold it: the dev rows plus a test-split row, pretty-printed."""
    rows = json.loads((DATA / "mbpp" / "sanitized-mbpp-nontest.json").read_text())
    return json.dumps([{**rows[0], "task_id": 11}, *rows], indent=4).encode()


@contextmanager
def upstream(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, original: bytes) -> Iterator[None]:
    """The set's upstream original served from 127.0.0.1 under its upstream file name, with today's pins."""
    pinned = SOURCES[name].files[0]
    (tmp_path / "up").mkdir(exist_ok=True)
    (tmp_path / "up" / pinned.upstream.rsplit("/", 1)[1]).write_bytes(original)
    with mirror(tmp_path / "up") as url:
        local = DataFile(pinned.path, pinned.sha256, f"{url}/{pinned.upstream.rsplit('/', 1)[1]}",
                         pinned.upstream_sha256, pinned.split)
        monkeypatch.setitem(SOURCES, name, DataSource(name, (local,), "test", "test"))
        yield


@pytest.mark.parametrize(("name", "original"), [("mbpp", pretty_sanitized_mbpp), ("hotpotqa", official_hotpotqa)])
def test_a_set_whose_original_is_unpinned_is_fetched_from_upstream_and_its_split_checked(
        name: str, original: object, cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert not SOURCES[name].files[0].original_pinned
    with upstream(name, tmp_path, monkeypatch, original()):  # type: ignore[operator]
        assert main(["data", "fetch", name]) == 0
    written = cache / SOURCES[name].files[0].path
    assert written.read_bytes() == (DATA / SOURCES[name].files[0].path).read_bytes()


def test_an_unpinned_original_with_other_content_is_refused_after_its_split(
        cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    changed = official_hotpotqa().replace(b'"answer": "yes"', b'"answer": "no"', 1)
    with upstream("hotpotqa", tmp_path, monkeypatch, changed):
        assert main(["data", "fetch", "hotpotqa"]) == 2
    err = capsys.readouterr().err
    assert "refused hotpotqa/hotpot_dev_distractor_first50.json (split of http://127.0.0.1:" in err
    assert err.count("\n") == 1 and not (cache / "hotpotqa").exists()


def test_an_original_the_split_cannot_read_is_a_one_line_error(
        cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    with upstream("mbpp", tmp_path, monkeypatch, b"<html>moved</html>"):
        assert main(["data", "fetch", "mbpp"]) == 2
    err = capsys.readouterr().err
    assert "cannot split http://127.0.0.1:" in err and "not the layout this version reads" in err
    assert err.count("\n") == 1


def test_the_mbpp_original_is_read_at_a_pinned_commit() -> None:
    assert "/google-research/google-research/30adf0ec5f35f9609c2f1d896005e184195d9146/" in SOURCES["mbpp"].files[0].upstream


# --- "not found" says how to get it ---------------------------------------------------------------


def test_a_missing_set_names_the_command_that_fetches_it(cache: Path) -> None:
    with pytest.raises(DataError, match=r"not found; run `loom data fetch gsm8k`"):
        load_dataset("gsm8k")


def test_bench_without_the_data_names_the_fetch_command_in_one_line(
        cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["bench", "--tasks", "game24", "--lanes", "io", "--limit", "1",
                 "--model", "openai-compatible:http://127.0.0.1:9/v1@m", "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "`loom data fetch game24`" in err


def test_a_missing_mbpp_names_the_command_that_fetches_it(cache: Path) -> None:
    with pytest.raises(DataError, match=r"not found; run `loom data fetch mbpp`"):
        load_dataset("mbpp")


def test_data_path_of_a_missing_set_names_the_fetch_command(cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["data", "path", "sorting64"]) == 2
    assert "`loom data fetch sorting64`" in capsys.readouterr().err


def test_data_path_prints_where_a_fetched_set_is(cache: Path, shared_mirror: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    fetch("sorting64", base_url=shared_mirror)
    capsys.readouterr()
    assert main(["data", "path", "sorting64"]) == 0
    assert capsys.readouterr().out.strip() == str(cache / "got" / "sorting" / "sorting_064.csv")


def test_data_list_says_which_sets_are_here(cache: Path, shared_mirror: str, capsys: pytest.CaptureFixture[str]) -> None:
    fetch("gsm8k", base_url=shared_mirror)
    capsys.readouterr()
    assert main(["data", "list"]) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines() if line.strip()}
    assert "here" in lines["gsm8k"] and "not fetched" in lines["game24"] and "bundled" in lines["humaneval"]


def test_data_list_marks_the_standard_test_splits(cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["data", "list"]) == 0
    out = capsys.readouterr().out
    lines = {line.split()[0]: line.split() for line in out.splitlines() if line.strip()}
    assert lines["game24_test"][1] == "test" and lines["gsm8k_test"][1] == "test" and lines["game24"][1] == "dev"
    assert lines["sorting32"][1] == "all" and lines["gsm8k"][1] == "train"
    assert "test is for a final evaluation, never for tuning prompts" in out


def test_data_list_says_which_sets_are_checked_after_their_split_only(
        cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["data", "list"]) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines() if line.strip()}
    for name in ("mbpp", "hotpotqa"):
        assert "original unpinned: its split is checked" in lines[name]
    assert "unpinned" not in lines["game24_test"] and "unpinned" not in lines["gsm8k_test"]


def test_an_unknown_set_is_a_one_line_error(cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["data", "fetch", "nope"]) == 2
    assert "choose from: game24" in capsys.readouterr().err


def test_a_projects_own_data_readme_is_not_taken_for_the_data_folder(
        cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project = tmp_path / "project"
    (project / "data").mkdir(parents=True)
    (project / "data" / "README.md").write_text("# my project's data\n")
    monkeypatch.chdir(project)
    assert find_data_dir() == cache


# --- a new user's first steps, end to end ---------------------------------------------------------


def test_from_a_clean_home_data_fetch_then_bench_game24_runs(tmp_path: Path, shared_mirror: str,
                                                            server: FakeOpenAIServer) -> None:
    def respond(seen: Seen) -> Reply:
        n = int(seen.body.get("n") or 1)
        return Reply(200, {"id": "x", "object": "text_completion", "created": 0, "model": "m",
                           "choices": [{"index": i, "text": " 1 + 1 = 2", "finish_reason": "stop", "logprobs": None}
                                       for i in range(n)],
                           "usage": {"prompt_tokens": 50, "completion_tokens": 5 * n, "total_tokens": 50 + 5 * n}})

    server.responder = respond
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("THOUGHTLOOM_")}
    env.update(HOME=str(home), XDG_CACHE_HOME=str(home / ".cache"), THOUGHTLOOM_DATA_URL=shared_mirror,
               PYTHONPATH=str(ROOT), THOUGHTLOOM_STORE=str(home / "runs.db"))

    def loom(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "thoughtloom", *args], cwd=home, env=env, capture_output=True,
                              text=True, timeout=scaled(120), check=False)

    fetched = loom("data", "fetch", "game24")
    assert fetched.returncode == 0, fetched.stderr
    bench = loom("bench", "--tasks", "game24", "--lanes", "io,cot", "--limit", "2",
                 "--model", f"openai-compatible:{server.url}@m#completions", "--out", str(home / "run"), "--quiet",
                 "--no-plot")
    assert bench.returncode == 0, bench.stderr
    summary = json.loads((home / "run" / "summary.json").read_text())
    assert [(s["lane"], s["n"]) for s in summary["summaries"]] == [("io", 2), ("cot", 2)]


@pytest.mark.local_model
def test_a_fetched_game24_runs_the_embedded_model_bench(tmp_path: Path, shared_mirror: str,
                                                        monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    # The model itself lives in the real XDG cache; the data goes to a fresh folder named by $THOUGHTLOOM_DATA.
    data = tmp_path / "data"
    assert main(["data", "fetch", "game24", "--data-dir", str(data), "--from", shared_mirror]) == 0
    monkeypatch.setenv("THOUGHTLOOM_DATA", str(data))
    out = tmp_path / "run"
    code = main(["bench", "--tasks", "game24", "--lanes", "io,cot", "--model", "local:gemma-3-270m", "--limit", "2",
                 "--budget-tokens", "600", "--out", str(out), "--quiet", "--no-plot"])
    assert code == 0
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(records) == 4 and {r["lane"] for r in records} == {"io", "cot"}


# --- solve reads GoT and MBPP items by id from the same data directory ----------------------------


def test_solve_finds_a_fetched_got_file_in_the_cache(cache: Path, shared_mirror: str) -> None:
    fetch("sorting32", base_url=shared_mirror)
    assert find_got_file(None, "sorting", "sorting_032.csv") == cache / "got" / "sorting" / "sorting_032.csv"


def test_solve_does_not_read_a_shared_data_folder_beside_the_working_directory(
        cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    beside = tmp_path / "project" / "shared" / "data" / "got" / "sorting"
    beside.mkdir(parents=True)
    (beside / "sorting_032.csv").write_bytes((DATA / "got" / "sorting" / "sorting_032.csv").read_bytes())
    monkeypatch.chdir(tmp_path / "project")
    with pytest.raises(ProblemError, match=r"run `loom data fetch sorting32`"):
        find_got_file(None, "sorting", "sorting_032.csv")


def test_a_missing_keyword_counting_file_names_its_fetch_command(cache: Path) -> None:
    with pytest.raises(ProblemError, match=r"run `loom data fetch keyword_counting`"):
        find_got_file(None, "keyword_counting", "countries.csv")


def test_solve_finds_a_fetched_mbpp_file_in_the_cache(cache: Path, shared_mirror: str,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("THOUGHTLOOM_MBPP", raising=False)
    with pytest.raises(ProblemError, match=r"run `loom data fetch mbpp` or pass --data"):
        find_mbpp()
    fetch("mbpp", base_url=shared_mirror)
    assert find_mbpp() == cache / "mbpp" / "sanitized-mbpp-nontest.json"
