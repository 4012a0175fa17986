"""Sweep throughput on Ray: units/s with 1, 2 and 4 workers against a 200 ms-latency scripted server.

Usage: .venv/bin/python benchmarks/ray_sweep.py [UNITS]   (needs the 'ray' extra and ../shared/data)
One local Ray runtime (2 CPUs, no dashboard) runs the io lane on the first UNITS Game of 24
puzzles (default 40), one unit in flight per worker, against the scripted OpenAI-compatible
server of the tests answering every call after 200 ms. A worker then finishes at most 5 units/s,
so N workers could reach 5N units/s until the model limit (--model-concurrency) caps the calls in
flight. The last row caps the cluster at 2 calls at once with 4 workers. Each row starts from an
empty run directory; "wall" includes starting the worker processes, "steady" is the rate between
the first and the last finished unit. Prints a Markdown table; writes nothing else.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]  # this checkout and the tests' scripted server

from openai_server import Reply, Seen, serve

from thoughtloom.eval.datasets import load_dataset
from thoughtloom.eval.ray_sweep import RaySettings, run_protocol_on_ray
from thoughtloom.eval.results import ResultsStore
from thoughtloom.eval.runner import (
    BenchOptions,
    build_protocol,
    prepare_run_dir,
    run_protocol,
)
from thoughtloom.llm.registry import make_backend

DATA = ROOT.parent / "shared" / "data"
LATENCY_S = 0.2


def reply(seen: Seen) -> Reply:
    """Every completion after LATENCY_S: a wrong step (the answer does not matter here)."""
    n = int(seen.body.get("n") or 1)
    body = {"id": "x", "object": "text_completion", "created": 0, "model": "m",
            "choices": [{"index": i, "text": " 1 + 1 = 2", "finish_reason": "stop", "logprobs": None} for i in range(n)],
            "usage": {"prompt_tokens": 50, "completion_tokens": 5 * n, "total_tokens": 50 + 5 * n}}
    return Reply(200, body, LATENCY_S)


def sweep(url: str, units: int, workers: int | None, limit: int | None) -> tuple[float, float, int]:
    """One sweep from an empty directory: wall seconds, steady units/s, units written."""
    datasets = {"game24": load_dataset("game24", str(DATA))}
    protocol = build_protocol(BenchOptions(tasks=["game24"], lanes=["io"], model=f"openai-compatible:{url}@m#completions",
                                           limit=units, selection="first", budget_tokens=1000, data_dir=str(DATA)),
                              datasets)
    finished: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        prepare_run_dir(protocol, out)
        store = ResultsStore(out)
        started = time.perf_counter()
        if workers is None:  # the local executor, one process, one unit at a time
            backend = make_backend(protocol.model)

            async def local() -> None:
                try:
                    await run_protocol(protocol, backend, store, datasets=datasets, jobs=1,
                                       progress=lambda _: finished.append(time.perf_counter()))
                finally:
                    await backend.aclose()

            asyncio.run(local())
        else:
            settings = RaySettings(workers=workers, jobs=1, model_concurrency=limit)
            asyncio.run(run_protocol_on_ray(protocol, store, datasets, settings,
                                            progress=lambda _: finished.append(time.perf_counter())))
        wall = time.perf_counter() - started
        records = store.load().values()
        done = len(records)
        reasons = Counter(r.stop_reason for r in records)
        if set(reasons) != {"done"}:
            sys.exit(f"{units} units ended {dict(reasons)}: {next((r.error for r in records if r.error), '')}")
    steady = (len(finished) - 1) / (finished[-1] - finished[0]) if len(finished) > 1 else 0.0
    return wall, steady, done


def main() -> None:
    import ray

    units = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    if not (DATA / "game24" / "24_dev.csv").is_file():
        sys.exit(f"benchmark data not found at {DATA}")
    before = os.getloadavg()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, object_store_memory=100 * 1024 * 1024)
    rows = []
    try:
        with serve() as server:
            server.responder = reply
            for label, workers, limit in (("local, 1 process", None, None), ("ray, 1 worker", 1, None),
                                          ("ray, 2 workers", 2, None), ("ray, 4 workers", 4, None),
                                          ("ray, 4 workers, --model-concurrency 2", 4, 2)):
                server.peak_in_flight = 0
                seen = len(server.seen)
                wall, steady, done = sweep(server.url, units, workers, limit)
                assert done == units, f"{label}: {done} of {units} units written"
                assert len(server.seen) - seen == units, f"{label}: {len(server.seen) - seen} calls for {units} units"
                rows.append((label, wall, units / wall, steady, server.peak_in_flight))
    finally:
        ray.shutdown()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores, load average (1/5/15 min) before "
          f"{' '.join(f'{x:.2f}' for x in before)}, after {' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
          f"{units} io units, {LATENCY_S * 1000:.0f} ms per call, one unit in flight per worker\n")
    print("| executor | wall s | units/s (wall) | units/s (steady) | peak calls at the server |")
    print("|---|---|---|---|---|")
    for label, wall, rate, steady, peak in rows:
        print(f"| {label} | {wall:.1f} | {rate:.1f} | {steady:.1f} | {peak} |")


if __name__ == "__main__":
    main()
