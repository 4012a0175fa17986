"""LM-free retrieval recall on HotpotQA: how much of the gold support the top k retrieved windows hold.

Each question's ten paragraphs are written as the research lane writes them (one sentence per line under
a "# Title" heading, `eval.citations.sentence_files`), the question alone is the query, and the top k
windows are taken from one of three rankers over the same windows:

- index:  the knowledge index (SQLite FTS5 bm25, title weighted), as the docs tool and research lane use it;
- memory: `grounding.ranking.rank` (bm25s) over the same windows, title line included, as an in-memory ranking;
- hybrid: the knowledge index with `retrieval="hybrid"` (bm25 and MiniLM embeddings, reciprocal-rank fusion;
  needs the `embed` extra).

For k in --ks it prints, averaged over the questions with bootstrap intervals: the recall of the gold
supporting paragraphs (a paragraph counts when one of its windows is retrieved), the recall of the gold
supporting sentences, and the share of questions with every supporting sentence retrieved. No model is called.

    .venv/bin/python benchmarks/hotpotqa_retrieval_recall.py --data-dir DIR [--limit 50] [--ranker index] [--ks 2,4]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from statistics import fmean

# This checkout's code, not the installed copy (the venv may belong to another checkout).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from thoughtloom.eval.citations import cited_facts, sentence_files
from thoughtloom.eval.datasets import Problem, load_dataset
from thoughtloom.eval.lanes import agent_task
from thoughtloom.eval.stats import mean_ci
from thoughtloom.grounding.knowledge import KnowledgeBase, split_passages

RANKERS = ("index", "memory", "hybrid")


def retrieved(problem: Problem, ranker: str, k: int) -> list[str]:
    """The docs citations ("docs:FILE:A-B") of the top k windows for the problem's question."""
    query = agent_task(problem)
    files = sentence_files(problem)
    if ranker == "memory":
        from thoughtloom.grounding.ranking import rank

        windows = [(name, p) for name, text in files.items() for p in split_passages(text)]
        titled = [f"{files[name].splitlines()[0]}\n{p.text}" for name, p in windows]
        return [f"docs:{windows[i][0]}:{windows[i][1].line_start}-{windows[i][1].line_end}"
                for i, _ in rank(query, titled, limit=k)]
    with tempfile.TemporaryDirectory(prefix="thoughtloom-recall-") as folder:
        for name, text in files.items():
            (Path(folder) / name).write_text(text, encoding="utf-8")
        # Without the keyword for the plain index, so the script also measures checkouts from before it existed.
        kb = KnowledgeBase.open(folder) if ranker == "index" else KnowledgeBase.open(folder, retrieval="hybrid")
        with kb:
            return [f"docs:{c.ref()}" for c in kb.search(query, limit=k)]


def shown(label: str, values: list[float]) -> str:
    """Mean and bootstrap interval of per-question values."""
    lo, hi = mean_ci(values) or (values[0], values[0])
    return f"{label} {fmean(values):.3f} [{lo:.3f}, {hi:.3f}]"


def main() -> None:
    """Print paragraph recall, sentence recall and full-support rate at each k for one ranker."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", required=True, help="the benchmark data folder (hotpotqa/ inside)")
    parser.add_argument("--limit", type=int, default=50, help="the first N dev questions (default 50)")
    parser.add_argument("--ranker", choices=RANKERS, default="index")
    parser.add_argument("--ks", default="2,4", help="comma-separated k values (default 2,4)")
    args = parser.parse_args()
    ks = sorted({int(k) for k in args.ks.split(",")})
    problems = [p for p in load_dataset("hotpotqa", args.data_dir).problems[:args.limit] if p.supporting_facts]
    started = time.perf_counter()
    top = {p.id: retrieved(p, args.ranker, max(ks)) for p in problems}
    seconds = time.perf_counter() - started
    print(f"ranker={args.ranker}  questions={len(problems)}  ({seconds:.1f} s)")
    for k in ks:
        paragraphs, sentences, complete = [], [], []
        for p in problems:
            found = cited_facts(p, top[p.id][:k])
            gold = set(p.supporting_facts)
            gold_titles = {title for title, _ in gold}
            paragraphs.append(len(gold_titles & {title for title, _ in found}) / len(gold_titles))
            sentences.append(len(gold & found) / len(gold))
            complete.append(float(gold <= found))
        print(f"k={k}: " + "   ".join([shown("paragraph recall", paragraphs), shown("sentence recall", sentences),
                                     shown("all support found", complete)]))


if __name__ == "__main__":
    main()
