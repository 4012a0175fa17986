"""Speed of the embedded model on its main job: the game24 search on the first dev puzzles.

Usage (the script measures the checkout it lives in; copy it into another checkout to measure that one):
    .venv/bin/python benchmarks/embedded_speed.py [--limit 20] [--model local] [--seed 1]
        [--budget-tokens N] [--threads N] [--written] [--data-dir DIR] [--out FILE]

Runs `thoughtloom.asolve(puzzle, task="game24", model=backend, seed=SEED)` (the library's entry
point, with the game24 task's default settings, whatever they are at this commit) on the first
`--limit` puzzles of shared/data/game24/24_dev.csv, one after another in one process, the model
loaded once. Per puzzle and in total it records wall seconds, calls, the tokens the calls reported,
whether the answer is right, and from the engine: prompt tokens actually evaluated (the rest came
from its prefix cache) and tokens generated. Writes a JSON file (default
embedded_speed-<commit>.json in the working directory) and prints a summary with the load average
before and after. Works at commits before the engine kept its own counters: it then counts the
prompt tokens llama.cpp decodes while the engine loads a prompt.

--written runs the workload of the commits before the model chose among legal steps: the backend's
choice scoring is hidden, so the model writes its steps and samples its values (evaluation value,
no re-asks), which measures the engine on generation at the settings of those commits.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

# The checkout this script lives in, not whichever one the interpreter has installed.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from thoughtloom import asolve
from thoughtloom.eval.datasets import load_dataset
from thoughtloom.llm.budget import BudgetLimits
from thoughtloom.llm.registry import make_backend

try:  # absent at commits before backends were wrapped; --written needs it
    from thoughtloom.llm.wrapper import BackendWrapper
except ImportError:  # pragma: no cover - old checkouts
    BackendWrapper = None  # type: ignore[assignment,misc]


def commit() -> str:
    root = Path(__file__).resolve().parent.parent
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()
        return out + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


class LegacyProbe:
    """Prompt tokens evaluated, for engines without counters: llama_decode rows while a prompt loads."""

    def __init__(self, engine: Any) -> None:
        self.prompt_evaluated = 0
        self.generated = 0
        loading = [False]
        real_ll = engine.ll
        probe = self

        class Counting:
            def __getattr__(self, name: str) -> Any:
                return getattr(real_ll, name)

            def llama_decode(self, ctx: Any, batch: Any) -> int:
                if loading[0]:
                    probe.prompt_evaluated += batch.n_tokens
                return real_ll.llama_decode(ctx, batch)

            def llama_sampler_sample(self, *args: Any) -> int:
                probe.generated += 1
                return real_ll.llama_sampler_sample(*args)

        load_prompt = engine._load_prompt

        def counted_load(*args: Any) -> Any:
            loading[0] = True
            try:
                return load_prompt(*args)
            finally:
                loading[0] = False

        engine.ll = Counting()
        engine._load_prompt = counted_load

    def snapshot(self) -> dict[str, int]:
        return {"prompt_evaluated": self.prompt_evaluated, "generated": self.generated}


class Writing(BackendWrapper if BackendWrapper is not None else object):  # type: ignore[misc]
    """The embedded backend with its choice scoring hidden: the search writes and samples, as before choices."""

    scores_choices = False
    follows_choices = False


def counters(backend: Any) -> Any:
    """A zero-argument function returning the engine's cumulative counters as a dict."""
    if hasattr(backend, "engine_stats"):
        return lambda: {k: v for k, v in backend.engine_stats().items() if isinstance(v, (int, float))}
    return LegacyProbe(backend._engine()).snapshot


def diff(after: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
    return {k: after[k] - before.get(k, 0) for k in after}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    dataset = load_dataset("game24", args.data_dir)
    problems = dataset.select(args.limit, "first")
    backend = make_backend(args.model)
    if args.threads:
        backend.n_threads = args.threads
    t0 = time.perf_counter()
    backend.load()
    load_s = time.perf_counter() - t0
    read = counters(backend)
    budget = BudgetLimits(tokens=args.budget_tokens) if args.budget_tokens else None
    overrides: dict[str, Any] = {}
    model: Any = backend
    if args.written:
        model = Writing(backend)
        overrides = {"evaluation": "value", "reasks": 0}
    rows = []
    for problem in problems:
        before = read()
        t0 = time.perf_counter()
        result = await asolve(problem.text, task="game24", model=model, seed=args.seed, budget=budget, **overrides)
        wall = time.perf_counter() - t0
        engine = diff(read(), before)
        solved = (await dataset.score(problem, result.answer)).solved
        row = {"id": problem.id, "puzzle": problem.text, "wall_s": round(wall, 3), "calls": result.usage.calls,
               "input_tokens": result.usage.input_tokens, "output_tokens": result.usage.output_tokens,
               "solved": bool(solved), "stopped": result.termination_reason, "engine": engine}
        rows.append(row)
        print(f"{problem.id:>4} {problem.text:<12} {wall:7.1f} s  {row['calls']:3d} calls  "
              f"{row['input_tokens']:6d} in / {row['output_tokens']:5d} out  "
              f"evaluated {engine.get('prompt_evaluated', 0):6d}  {'solved' if solved else ''}", flush=True)
    return {"load_s": round(load_s, 2), "rows": rows}


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    walls = [r["wall_s"] for r in rows]
    calls = sum(r["calls"] for r in rows)
    evaluated = sum(r["engine"].get("prompt_evaluated", 0) for r in rows)
    out_tokens = sum(r["output_tokens"] for r in rows)
    return {
        "puzzles": len(rows),
        "solved": sum(r["solved"] for r in rows),
        "wall_s_total": round(sum(walls), 1),
        "wall_s_per_puzzle_mean": round(statistics.mean(walls), 2),
        "wall_s_per_puzzle_median": round(statistics.median(walls), 2),
        "calls": calls,
        "input_tokens_reported": sum(r["input_tokens"] for r in rows),
        "prompt_tokens_evaluated": evaluated,
        "prompt_tokens_evaluated_per_call": round(evaluated / calls, 1) if calls else None,
        "output_tokens": out_tokens,
        # Output tokens over the whole search time (prompt reading included): what a user waits for.
        "output_tokens_per_s": round(out_tokens / sum(walls), 2) if walls else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=20, help="puzzles, from the first (default 20)")
    parser.add_argument("--model", default="local", help="model spec (default: local, the default embedded model)")
    parser.add_argument("--seed", type=int, default=1, help="search seed (default 1)")
    parser.add_argument("--budget-tokens", type=int, help="token budget per puzzle (default: none, as asolve)")
    parser.add_argument("--threads", type=int, help="llama.cpp threads (default: every core)")
    parser.add_argument("--written", action="store_true",
                        help="hide choice scoring: steps written and values sampled, as before choices existed")
    parser.add_argument("--data-dir", help="folder holding game24/ (default: $THOUGHTLOOM_DATA, else what `loom data fetch game24` wrote)")
    parser.add_argument("--out", help="JSON file to write (default embedded_speed-<commit>.json)")
    args = parser.parse_args()
    rev = commit()
    load_before = os.getloadavg()
    print(f"commit {rev}; load average {' '.join(f'{x:.2f}' for x in load_before)}; {os.cpu_count()} cores", flush=True)
    measured = asyncio.run(run(args))
    load_after = os.getloadavg()
    result = {
        "commit": rev, "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "python": sys.version.split()[0],
        "machine": platform.machine(), "cores": os.cpu_count(),
        "load_before": [round(x, 2) for x in load_before], "load_after": [round(x, 2) for x in load_after],
        "settings": {"limit": args.limit, "model": args.model, "seed": args.seed, "budget_tokens": args.budget_tokens,
                     "threads": args.threads, "selection": "first", "written": args.written},
        "load_s": measured["load_s"], "summary": summary(measured["rows"]), "puzzles": measured["rows"],
    }
    out = Path(args.out or f"embedded_speed-{rev}.json")
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["summary"], indent=2))
    print(f"load average after {' '.join(f'{x:.2f}' for x in load_after)}; wrote {out}")


if __name__ == "__main__":
    main()
