"""LM-free control for supporting-fact precision on HotpotQA: cite the top passages of one document search.

Each question's paragraphs are written as the research lane writes them (one sentence per line), one
full-text search for the question runs over them (the docs tool's index, bm25), and its top k
passages are "cited". With a `loom bench` run directory, k is also matched per question to the number
of passages the research lane's answer cited there. No model is called.

    .venv/bin/python benchmarks/hotpotqa_cite_control.py [--limit 10] [--data-dir DIR] [RUN_DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from statistics import fmean

# This checkout's code, not the installed copy (the venv may belong to another checkout).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from thoughtloom.eval.citations import cited_facts, sentence_files, support_precision
from thoughtloom.eval.datasets import Problem, load_dataset
from thoughtloom.eval.lanes import agent_task
from thoughtloom.eval.stats import mean_ci
from thoughtloom.grounding.knowledge import KnowledgeBase


def top_passages(problem: Problem, k: int) -> list[str]:
    """The docs citations of the k best passages for the problem's question in its sentence corpus."""
    if k <= 0:
        return []
    with tempfile.TemporaryDirectory(prefix="thoughtloom-control-") as folder:
        for name, text in sentence_files(problem).items():
            (Path(folder) / name).write_text(text, encoding="utf-8")
        with KnowledgeBase.open(folder) as kb:
            return [f"docs:{c.ref()}" for c in kb.search(agent_task(problem), limit=k)]


def line(label: str, values: list[float | None]) -> str:
    """Mean precision over the questions that cite, its bootstrap interval, and the per-question values."""
    got = [v for v in values if v is not None]
    if not got:
        return f"{label}: no question cites a sentence"
    lo, hi = mean_ci(got) or (got[0], got[0])
    shown = ", ".join("-" if v is None else f"{v:.2f}" for v in values)
    return f"{label}: {fmean(got):.2f} [{lo:.2f}, {hi:.2f}] ({len(got)}/{len(values)})   per question: {shown}"


def main() -> None:
    """Print the control's precision for k = 1, 2, 3 and, with a run directory, k matched to the research lane."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", nargs="?", help="a loom bench run directory with research lane records")
    parser.add_argument("--limit", type=int, default=10, help="the first N questions (default 10)")
    parser.add_argument("--data-dir", help="benchmark data (default: as loom bench finds it)")
    args = parser.parse_args()
    problems = load_dataset("hotpotqa", args.data_dir).problems[:args.limit]
    for k in (1, 2, 3):
        print(line(f"top-{k} passages", [support_precision(cited_facts(p, top_passages(p, k)), p.supporting_facts)
                                         for p in problems]))
    if args.run_dir:
        cited = {}
        for row in map(json.loads, (Path(args.run_dir) / "results.jsonl").read_text(encoding="utf-8").splitlines()):
            if row["lane"] == "research" and row["task"] == "hotpotqa":
                cited[row["problem_id"]] = sum(c.startswith("docs:") for c in row.get("citations") or ())
        matched = [p for p in problems if p.id in cited]
        print(line("top-k, k = the research answer's docs citations",
                   [support_precision(cited_facts(p, top_passages(p, cited[p.id])), p.supporting_facts)
                    for p in matched]))


if __name__ == "__main__":
    main()
