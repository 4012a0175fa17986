"""Downloads against hostile servers: `loom data fetch --from URL` and `loom models fetch --from hub` end
in one line naming the URL, exit 2, keep nothing partial and lose nothing already downloaded, whatever
the server sends; every fetch has an overall deadline and stops at the pinned size.

The servers are real sockets on 127.0.0.1 (tests/hostile_http.py); the CLI runs in a subprocess.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from hostile_http import Script, endless, head, hostile, send, trickle
from machine import scaled
from test_embedded_models import PIECES, absent_parts, cache_files, loom, make_model

from thoughtloom.eval import sources
from thoughtloom.eval.sources import SOURCES, DataFile, DataSource, FetchError
from thoughtloom.llm import models
from thoughtloom.llm.errors import ModelConfigError
from thoughtloom.llm.models import QWEN_CODER_15B, HubFile

#: What was there before the fetch: a failed fetch must leave it as it was.
EARLIER = b"an earlier download\n"
OK = "HTTP/1.1 200 OK"
#: More than an endless server can have sent once the client stopped reading (the sockets' buffers hold
#: a few MB); a client that keeps reading passes it within a second.
READ_MOST = 64 * 2**20

#: A fetch's exit code, stderr, seconds taken, and the files of the folder it writes to afterwards.
Outcome = tuple[int, str, float, list[tuple[str, bytes]]]


def fetch_data(url: str, tmp_path: Path, extra: tuple[str, ...]) -> Outcome:
    """`loom data fetch game24 --from URL` into a data folder holding an earlier 24_dev.csv."""
    folder = tmp_path / "data" / "game24"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "24_dev.csv").write_bytes(EARLIER)
    start = time.monotonic()
    proc = loom("data", "fetch", "game24", "--from", url, "--data-dir", str(tmp_path / "data"), *extra,
                env={"XDG_CACHE_HOME": str(tmp_path / "xdg")})
    took = time.monotonic() - start
    return proc.returncode, proc.stderr, took, sorted((p.name, p.read_bytes()) for p in folder.iterdir())


def fetch_model(url: str, tmp_path: Path, extra: tuple[str, ...]) -> Outcome:
    """`loom models fetch qwen2.5-coder-1.5b --from hub` from a hub at URL, into a cache holding an earlier file."""
    env = {"XDG_CACHE_HOME": str(tmp_path / "xdg"), "HF_ENDPOINT": url}
    folder = models.cache_dir(env)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "earlier.gguf").write_bytes(EARLIER)
    start = time.monotonic()
    proc = loom("models", "fetch", QWEN_CODER_15B.name, "--from", "hub", *extra, env=env)
    took = time.monotonic() - start
    return proc.returncode, proc.stderr, took, sorted((p.name, p.read_bytes()) for p in folder.iterdir())


#: Each command: how to run it, and the files a failed fetch must leave in its folder (those it found there).
FETCHES = {"data": (fetch_data, [("24_dev.csv", EARLIER)]), "models": (fetch_model, [("earlier.gguf", EARLIER)])}


def refused(which: str, script: Script, tmp_path: Path, *extra: str) -> tuple[str, float]:
    """Fetch from a hostile server; check the refusal's form (one line, exit 2, nothing partial, nothing
    lost) and return the line and how long it took."""
    run, kept = FETCHES[which]
    with hostile(script) as url:
        code, stderr, took, files = run(url, tmp_path, extra)
    assert code == 2, stderr
    assert "Traceback" not in stderr
    line = one_error(stderr)
    assert line.startswith(f"loom: error: cannot download {url}/"), stderr
    assert files == kept
    return line, took


def one_error(stderr: str) -> str:
    """The one error line (`loom models fetch` says what it downloads first, on a line of its own)."""
    lines = stderr.strip().splitlines()
    assert "Traceback" not in stderr
    assert [line.startswith("loom: error: ") for line in lines] == [False] * (len(lines) - 1) + [True], stderr
    assert all(line.startswith("loom: ") for line in lines), stderr
    return lines[-1]


both = pytest.mark.parametrize("which", ["data", "models"])


@both
def test_a_body_shorter_than_its_content_length_is_refused_in_one_line(which: str, tmp_path: Path) -> None:
    line, _ = refused(which, send(head(OK, "Content-Length: 40000") + b"a" * 100), tmp_path)
    assert "the connection closed after 100 of 40,000 bytes" in line


@both
def test_a_garbage_status_line_is_refused_in_one_line(which: str, tmp_path: Path) -> None:
    line, _ = refused(which, send(b"GARBAGE\r\n\r\n"), tmp_path)
    assert "not valid HTTP" in line


@both
def test_an_answer_with_150_headers_is_refused_in_one_line(which: str, tmp_path: Path) -> None:
    line, _ = refused(which, send(head(OK, *(f"X-Header-{i}: {i}" for i in range(150)))), tmp_path)
    assert "not valid HTTP" in line and "more than 100 headers" in line


@both
def test_a_100_kb_header_is_refused_in_one_line(which: str, tmp_path: Path) -> None:
    line, _ = refused(which, send(head(OK, "X-Big: " + "a" * 100_000)), tmp_path)
    assert "not valid HTTP" in line


@both
def test_a_broken_chunked_body_is_refused_in_one_line(which: str, tmp_path: Path) -> None:
    body = b"10\r\n0123456789abcdef\r\nzz-not-a-size\r\nxyz\r\n0\r\n\r\n"
    line, _ = refused(which, send(head(OK, "Transfer-Encoding: chunked") + body), tmp_path)
    assert "not valid HTTP" in line and "chunked" in line


@both
def test_a_body_sent_one_byte_at_a_time_is_refused_at_the_deadline(which: str, tmp_path: Path) -> None:
    line, took = refused(which, trickle(head(OK, "Content-Length: 40000"), 0.5), tmp_path, "--deadline", "2")
    assert "not finished within its deadline of 2 s" in line
    assert took < scaled(2 + 6)


@both
def test_headers_sent_one_byte_at_a_time_are_refused_at_the_deadline(which: str, tmp_path: Path) -> None:
    line, took = refused(which, trickle(b"HTTP/1.1 200 OK\r\nX-Slow: ", 0.5), tmp_path, "--deadline", "2")
    assert "not finished within its deadline of 2 s" in line
    assert took < scaled(2 + 6)


def test_an_endless_data_body_is_refused_past_the_pinned_size(tmp_path: Path) -> None:
    sent = [0]
    line, _ = refused("data", endless(head(OK, "Connection: close"), sent), tmp_path)
    assert f"more than the pinned {SOURCES['game24'].files[0].size:,} bytes" in line
    assert sent[0] < READ_MOST  # it stopped reading


@both
def test_a_body_announced_larger_than_the_pinned_size_is_refused_before_it_is_read(
        which: str, tmp_path: Path) -> None:
    sent = [0]
    line, _ = refused(which, endless(head(OK, "Content-Length: 1000000000000"), sent), tmp_path)
    assert "announces 1,000,000,000,000 bytes, more than the pinned " in line
    assert sent[0] < READ_MOST


@pytest.mark.parametrize("url", ["http://127.0.0.1:99999", "http://[::1", "ftp://127.0.0.1", "http:///no-host",
                                 "http://127.0.0.1/a b\n"])
def test_an_invalid_data_mirror_url_is_refused_in_one_line(url: str, tmp_path: Path) -> None:
    code, stderr, _, files = fetch_data(url, tmp_path, ())
    assert code == 2, stderr
    line = one_error(stderr)
    assert line.startswith("loom: error: cannot download ") and "not a valid http:// or https:// URL" in line
    assert files == FETCHES["data"][1]


@pytest.mark.parametrize("url", ["http://127.0.0.1:99999", "not-a-url", "file:///dev/zero", "http://[::1"])
def test_an_invalid_hub_endpoint_is_refused_in_one_line(url: str, tmp_path: Path) -> None:
    code, stderr, _, files = fetch_model(url, tmp_path, ())
    assert code == 2, stderr
    line = one_error(stderr)
    assert line.startswith("loom: error: cannot download ") and "not a valid http:// or https:// URL" in line
    assert files == FETCHES["models"][1]


# --- the model cache, in process (a pinned size small enough to send past) ----------------------


def test_an_endless_hub_file_is_refused_one_byte_past_its_pinned_size_and_nothing_is_kept(
        tmp_path: Path) -> None:
    root = tmp_path / "site"
    root.mkdir()
    model = absent_parts(make_model(root, hub=HubFile("org/tiny-GGUF", "tiny-q4_k_m.gguf")))
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    sent = [0]
    with hostile(endless(head(OK), sent)) as url:
        with pytest.raises(ModelConfigError, match=f"sent more than the pinned {len(b''.join(PIECES)):,} bytes"):
            models.download(model, env={**env, "HF_ENDPOINT": url})
    assert cache_files(env) == [] and sent[0] < READ_MOST


def test_the_default_deadline_grows_with_the_pinned_size() -> None:
    from thoughtloom.llm.download import default_deadline

    small = default_deadline(SOURCES["game24"].files[0].size)
    assert 30 <= small < default_deadline(QWEN_CODER_15B.size)


def test_a_file_with_no_pinned_size_is_refused_past_the_documented_cap(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pinned = SOURCES["gsm8k"].files[0]
    monkeypatch.setattr(sources, "UNPINNED_MAX_BYTES", 100_000)  # the real cap is 128 MiB: too much to send here
    sent = [0]
    with hostile(endless(head(OK), sent)) as url:
        unsized = DataFile(pinned.path, pinned.sha256, f"{url}/train.jsonl")
        monkeypatch.setitem(SOURCES, "gsm8k", DataSource("gsm8k", (unsized,), "test", "MIT"))
        with pytest.raises(FetchError, match="sent more than the 100,000-byte cap on a file of no pinned size"):
            sources.fetch("gsm8k", tmp_path)
    assert list(tmp_path.iterdir()) == [] and sent[0] < READ_MOST


def test_a_name_lookup_that_never_answers_is_abandoned_at_the_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    # A resolver that hangs blocks inside the C library, where no socket timeout reaches: the download's
    # deadline must still end it.
    from thoughtloom.llm import download

    def hanging_lookup(*args: object, **kwargs: object) -> list[tuple[object, ...]]:
        time.sleep(30)
        return []

    monkeypatch.setattr(download.socket, "getaddrinfo", hanging_lookup)
    start = time.monotonic()
    with pytest.raises(download.DownloadError, match="not finished within its deadline of 1 s"):
        list(download.stream("http://unresolvable.invalid/file", max_bytes=100, deadline_s=1))
    assert time.monotonic() - start < scaled(1 + 4)
