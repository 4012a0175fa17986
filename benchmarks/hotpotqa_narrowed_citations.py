"""Offline: a stored run's research citations narrowed as the final answer's are now, and their support re-scored.

Reads a `loom bench` run directory's research rows (answer and final citations) and applies the
research flow's `narrowed_citations` to them over the question's sentence files: a cited window
that holds the answer span cites the line(s) it sits in. The passages "read" are the cited windows
themselves (a final citation always names a passage the run read). Prints supporting-fact precision
(over the answers that cite a sentence) and recall (|cited & gold| / |gold|) before and after. No
model is called.

    .venv/bin/python benchmarks/hotpotqa_narrowed_citations.py [--data-dir DIR] RUN_DIR
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from statistics import fmean
from typing import Any

# This checkout's code, not the installed copy (the venv may belong to another checkout).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from thoughtloom.eval.citations import cited_facts, sentence_files, support_precision
from thoughtloom.eval.datasets import Problem, load_dataset
from thoughtloom.eval.stats import mean_ci
from thoughtloom.grounding.citations import parse_reference
from thoughtloom.search.research.evidence import narrowed_citations


def windows(problem: Problem, cited: list[str]) -> dict[str, str]:
    """The text of each cited docs window in the problem's sentence files."""
    files = sentence_files(problem)
    out = {}
    for ref in cited:
        where = parse_reference(ref)
        if where is not None and where.path in files:
            out[ref] = "\n".join(files[where.path].split("\n")[where.line_start - 1: where.line_end])
    return out


def scores(problem: Problem, row: dict[str, Any], narrow: bool) -> tuple[float | None, float]:
    """One question's support precision (None when it cites no sentence) and recall."""
    cited = list(row.get("citations") or ())
    if narrow:
        cited = list(narrowed_citations(row.get("answer"), cited, windows(problem, cited)))
    facts = cited_facts(problem, cited)
    gold = set(problem.supporting_facts)
    return support_precision(facts, problem.supporting_facts), len(facts & gold) / len(gold) if gold else 0.0


def shown(values: list[float]) -> str:
    """Mean, bootstrap interval, count."""
    lo, hi = mean_ci(values) or (0.0, 0.0)
    return f"{fmean(values):.3f} [{lo:.2f}, {hi:.2f}] ({len(values)})" if values else "-"


def main() -> None:
    """Print precision and recall of the stored citations and of the same citations narrowed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", help="a loom bench run directory with research lane records")
    parser.add_argument("--data-dir", help="benchmark data (default: as loom bench finds it)")
    args = parser.parse_args()
    rows = {}
    for row in map(json.loads, (Path(args.run_dir) / "results.jsonl").read_text(encoding="utf-8").splitlines()):
        if row["lane"] == "research" and row["task"] == "hotpotqa":
            rows[row["problem_id"]] = row
    problems = [p for p in load_dataset("hotpotqa", args.data_dir).problems if p.id in rows]
    for label, narrow in (("stored", False), ("narrowed", True)):
        got = [scores(p, rows[p.id], narrow) for p in problems]
        citing = [(precision, recall) for precision, recall in got if precision is not None]
        print(f"{label}: precision {shown([p for p, _ in citing])}; recall {shown([r for _, r in citing])} where "
              f"it cites, {shown([r for _, r in got])} over all")


if __name__ == "__main__":
    main()
