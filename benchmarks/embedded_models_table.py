"""One table per data set comparing the embedded models, from the runs embedded_models.sh wrote.

Usage: .venv/bin/python benchmarks/embedded_models_table.py OUT
Reads every OUT/*/summary.json (a finished `loom bench` run) and prints, per data set, one row per
(lane, model): success with its 95% Wilson interval (HotpotQA: exact match, and mean F1 with its
bootstrap interval), mean tokens and mean seconds per problem, and problems lost to model errors.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def rows(out: Path) -> list[tuple[str, str, dict[str, Any]]]:
    found = []
    for summary in sorted(out.glob("*/summary.json")):
        data = json.loads(summary.read_text())
        model = data["manifest"]["model"].removeprefix("local:")
        for s in data["summaries"]:
            found.append((s["task"], model, s))
    return found


def quality(s: dict[str, Any]) -> str:
    low, high = s["rate_ci"]
    text = f"{s['solved']}/{s['n']} = {s['rate']:.0%} [{low:.0%}, {high:.0%}]"
    if s.get("mean_f1") is not None:
        f_low, f_high = s["mean_f1_ci"]
        text += f"; F1 {s['mean_f1']:.2f} [{f_low:.2f}, {f_high:.2f}]"
    return text


def main() -> None:
    out = Path(sys.argv[1])
    by_task: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for task, model, s in rows(out):
        by_task.setdefault(task, []).append((model, s))
    for task, entries in by_task.items():
        metric = "exact match" if entries[0][1].get("mean_f1") is not None else "success"
        print(f"\n#### {task}\n")
        print(f"| lane | model | {metric} [95% CI] | mean tokens | mean s | model errors |")
        print("|---|---|---|---|---|---|")
        for model, s in sorted(entries, key=lambda e: (e[1]["lane"], e[0])):
            print(f"| {s['lane']} | {model} | {quality(s)} | {s['mean_tokens']:,.0f} | {s['mean_wall_s']:.1f} | "
                  f"{s['lane_errors']} |")


if __name__ == "__main__":
    main()
