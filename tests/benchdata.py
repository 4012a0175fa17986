"""Where the tests find benchmark data: where a user keeps it, else beside a development checkout.

The order is the product's own (thoughtloom.tasks.datadir): $THOUGHTLOOM_DATA, then the cache that
`loom data fetch NAME` fills; last, the `shared/data` folder next to this repository, when there is
one. A test that needs files none of them holds is skipped with the command that fetches them.
"""

from __future__ import annotations

import functools
import json
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from thoughtloom.eval.sources import SOURCES
from thoughtloom.tasks.datadir import DATA_ENV, cache_data_dir

#: The development checkout's data folder (absent from a user's clone).
BESIDE_CHECKOUT = Path(__file__).resolve().parents[2] / "shared" / "data"


def candidates() -> list[Path]:
    """The data folders to look in, in order."""
    given = os.environ.get(DATA_ENV)
    return [*([Path(given).expanduser()] if given else []), cache_data_dir(), BESIDE_CHECKOUT]


def data_dir(*files: str) -> Path:
    """The first data folder holding every one of `files` (relative paths), else the first folder looked in."""
    for folder in candidates():
        if all((folder / f).exists() for f in files):
            return folder
    return candidates()[0]


def data_file(path: str) -> Path:
    """One data file (a path relative to the data folder), from the first folder that holds it."""
    return data_dir(path) / path


def fetch_names(*files: str) -> list[str]:
    """The `loom data fetch` names that provide these files (files no data set provides are left out)."""
    names = []
    for f in files:
        for name, source in SOURCES.items():
            if any(d.path == f or d.path.startswith(f.rstrip("/") + "/") for d in source.files):
                names.append(name)
    return list(dict.fromkeys(names))


def missing_reason(*files: str) -> str:
    """Why a test that needs `files` is skipped, and what to run to enable it."""
    names = fetch_names(*files)
    if not names:
        return f"benchmark data {', '.join(files)} not found: set {DATA_ENV} to a folder holding it"
    return f"benchmark data not found: run `loom data fetch {' '.join(names)}` (or set {DATA_ENV} to a folder holding it)"


def needs(*files: str) -> pytest.MarkDecorator:
    """Skip unless some data folder holds every one of `files`."""
    found = all((data_dir(*files) / f).exists() for f in files)
    return pytest.mark.skipif(not found, reason=missing_reason(*files))


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        """Serve without writing a log line per request."""


@contextmanager
def mirror(folder: Path) -> Iterator[str]:
    """Serve `folder` over HTTP on an ephemeral 127.0.0.1 port; its base URL."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(folder)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def hotpot_paragraphs(index: int, folder: Path) -> Any:
    """HotpotQA dev question `index` (of the first 50), its ten paragraphs written into `folder` (made here) one
    Markdown file each, its title as heading; the test is skipped when the data set is not here."""
    name = "hotpotqa/hotpot_dev_distractor_first50.json"
    data = data_file(name)
    if not data.exists():
        pytest.skip(missing_reason(name))
    row = json.loads(data.read_text())[index]
    folder.mkdir()
    for i, (title, sentences) in enumerate(zip(row["context"]["title"], row["context"]["sentences"]), 1):
        (folder / f"{i:02d}.md").write_text(f"# {title}\n{' '.join(s.strip() for s in sentences)}\n")
    return row
