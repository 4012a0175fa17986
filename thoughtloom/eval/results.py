"""Results streamed to disk one line per (data set, lane, problem), so an interrupted run resumes.

Each finished problem is appended to results.jsonl and fsynced before the next starts; a run
killed mid-problem loses only that problem. Appends take an exclusive file lock, so several
processes (`loom bench --workers N`) can share one results file.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .. import filelocks

RESULTS_FILE = "results.jsonl"
MANIFEST_FILE = "manifest.json"


@dataclass(frozen=True, slots=True)
class Record:
    """One lane's outcome on one problem."""

    task: str
    lane: str
    problem_id: str
    index: int
    seed: int | None
    answer: str | None
    solved: bool
    errors: float | None
    #: any of the lane's candidates solved it (cot_sc, best_of_n); None for one-answer lanes
    any_correct: bool | None
    candidates: int
    tokens: int
    input_tokens: int
    output_tokens: int
    calls: int
    wall_s: float
    stop_reason: str
    error: str | None = None
    #: Search lanes whose runs were stored (`loom bench --store`): the run and its graph's CID.
    run_id: str | None = None
    graph: str | None = None
    #: HotpotQA: the answer's F1 against the gold (solved is the exact match)
    f1: float | None = None
    #: The agent lane: tool calls made on this problem (None: a lane without tools)
    tool_calls: int | None = None
    #: The research lane: its answer's citations, the [title, sentence id] pairs they cite, and the share
    #: of those that are gold supporting facts (None: a lane that does not cite, or an answer citing no sentence)
    citations: list[str] | None = None
    cited: list[list[str | int]] | None = None
    support_precision: float | None = None
    #: The set's partial scores by name (crosswords: letters, words), each in [0, 1]; None: the set has none
    parts: dict[str, float] | None = None
    #: `--executor ray`: how many times the unit was re-run because its worker died (None: run locally)
    retries: int | None = None

    @property
    def key(self) -> tuple[str, str, str]:
        """What identifies a finished unit of work."""
        return (self.task, self.lane, self.problem_id)


class ResultsStore:
    """The results file of one run directory."""

    def __init__(self, out_dir: str | os.PathLike[str]) -> None:
        self.dir = Path(out_dir)
        self.path = self.dir / RESULTS_FILE

    def load(self) -> dict[tuple[str, str, str], Record]:
        """Finished records by key; a line cut short by a kill is ignored (its problem reruns)."""
        out: dict[tuple[str, str, str], Record] = {}
        if not self.path.is_file():
            return out
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                rec = Record(**json.loads(line))
            except (ValueError, TypeError):
                continue
            out[rec.key] = rec
        return out

    @contextmanager
    def _locked(self) -> Iterator[Any]:
        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a+b") as fh:
            # Without file locks (no fcntl) one process writes: the bench refuses several (llm/limits.py).
            locked = filelocks.available() and filelocks.lock(fh.fileno(), wait=True)
            try:
                yield fh
            finally:
                if locked:
                    filelocks.unlock(fh.fileno())

    def append(self, record: Record) -> None:
        """Write one record durably (a partial last line from a killed run is closed off first)."""
        data = (json.dumps(asdict(record), ensure_ascii=False) + "\n").encode()
        with self._locked() as fh:
            fh.seek(0, os.SEEK_END)
            if fh.tell() > 0:
                fh.seek(-1, os.SEEK_END)
                if fh.read(1) != b"\n":
                    fh.write(b"\n")
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
