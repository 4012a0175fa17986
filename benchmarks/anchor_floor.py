"""What the side-by-side harness's workload allows an engine that keeps thoughtloom's promises.

Usage: .venv/bin/python benchmarks/anchor_floor.py [ANCHORS_DIR] [REPS]

Issue 20 asks thoughtloom's row of the shared harness (../shared/bench/anchors, bench_loom.py) to
cost no more per node, as a multiple of the harness's synchronous floor, than plain asyncio's row.
This script measures, in one sitting and interleaved, how much of that cost the harness's own code
takes and what the cheapest Python rendering of a few of the promises adds to it:

- floor: the harness's bench_sync.py (fake calls and list work, nothing else);
- plain asyncio: the harness's bench_asyncio.py (a task per call, nothing kept);
- hooks only: the same BFS calling what any engine driving this harness must call: its task's
  propose/value/state_key/parse_value, its backend's count_tokens and generate (driven inline, no
  event loop, no task) with a GenerateRequest built per call, and the beam sort;
- sketch: hooks only, plus, written straight into one function with no layering (not a design,
  a lower bound): a ThoughtGraph node per thought with its status, path, duplicate check and
  path score; a hard budget's claim and charge (the arithmetic inlined on a real Budget); a
  response-cache key, lookup and store; and a CallRecord per call. It keeps no concurrency
  slot, no events, no best-thought or goal bookkeeping, no controller, no asyncio;
- thoughtloom: the harness's bench_loom.py (the public API, the whole gateway).

Each is timed with process_time over REPS interleaved repetitions (default 5) of depth-3
searches; medians are printed as µs per node and as a multiple of the floor, then what each
promise of the sketch costs on its own (timeit). Writes nothing.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

DEFAULT_ANCHORS = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "bench", "anchors")
DEPTH, NODES = 3, 55  # depth 3: 5 + 25 + 25 scored children
PROBLEM = "common workload"


def _harness(anchors: str):  # type: ignore[no-untyped-def]
    sys.path.insert(0, os.path.abspath(anchors))
    import bench_asyncio
    import bench_loom
    import bench_sync

    return bench_sync, bench_asyncio, bench_loom


def sketches(bench_loom) -> tuple[Callable[[int], None], Callable[[int], None]]:  # type: ignore[no-untyped-def]
    """The hooks-only BFS and the promise-keeping sketch, over the harness's own task and backend."""
    from thoughtloom.graph import EdgeKind, NodeKind, NodeStatus, ThoughtGraph
    from thoughtloom.llm.budget import Budget, BudgetLimits
    from thoughtloom.llm.cache import MemoryCache, sample_key
    from thoughtloom.llm.gateway import CallRecord
    from thoughtloom.llm.types import GenerateRequest

    task, backend = bench_loom.TASK, bench_loom.CommonBackend()
    hypothesis, elaboration = NodeKind.HYPOTHESIS, EdgeKind.ELABORATION

    def drive(request: GenerateRequest) -> str:
        backend.count_tokens(request.prompt)  # what a budget's input bound needs
        coro = backend.generate(request)
        try:
            coro.send(None)
        except StopIteration as stop:
            return stop.value.texts[0]
        raise RuntimeError("the harness's backend waited at zero latency")

    def hooks_only(depth: int, beam: int = 5) -> None:
        frontier: list[tuple[str, ...]] = [()]
        for _ in range(depth):
            pool = []
            for steps in frontier:
                q = task.propose(PROBLEM, steps, 5)
                text = drive(GenerateRequest(q.prompt, 1, q.max_tokens, 0.0, q.stop, None, "propose", None, None, (), False))
                for line in text.splitlines():
                    child = steps + (line,)
                    task.state_key(PROBLEM, child)
                    q = task.value(PROBLEM, child)
                    reply = drive(GenerateRequest(q.prompt, 1, q.max_tokens, 0.0, q.stop, None, "value", None, None, (), False))
                    pool.append((task.parse_value(PROBLEM, child, [reply]), child))
            pool.sort(reverse=True)
            frontier = [s for _, s in pool[:beam]]

    def sketch(depth: int, beam: int = 5) -> None:
        graph, records, cache, budget, model = ThoughtGraph(), [], MemoryCache(), Budget(BudgetLimits()), "m"

        def call(request: GenerateRequest) -> str:
            key = sample_key(model, request, 0)
            cached = cache.get(key)
            prompt = request.prompt
            record = CallRecord(len(records), request.purpose, model, prompt.text, prompt.messages, 1,
                                request.max_tokens, request.temperature, request.stop, request.seed, (), 0, 0, 0.0,
                                0, time.time())
            records.append(record)
            if cached is not None:
                return cached
            bound = backend.count_tokens(prompt) + request.max_tokens
            budget.reserved_tokens += bound
            budget.in_flight += 1
            coro = backend.generate(request)
            try:
                coro.send(None)
            except StopIteration as stop:
                completion = stop.value
            budget.reserved_tokens -= bound
            budget.in_flight -= 1
            budget.calls += 1
            usage = completion.usage
            budget._spent_in += usage.input_tokens
            budget._spent_out += usage.output_tokens
            record.texts = completion.texts
            record.input_tokens, record.output_tokens = usage.input_tokens, usage.output_tokens
            cache.put(key, completion.texts[0])
            return completion.texts[0]

        root = graph.add_node(PROBLEM, NodeKind.INPUT)
        graph.set_status(root.id, NodeStatus.IN_PROGRESS)
        graph.succeed(root.id)
        steps_of: dict[int, tuple[str, ...]] = {root.id: ()}
        path_score: dict[int, float | None] = {root.id: None}
        seen: dict[object, int] = {}
        frontier = [root.id]
        for _ in range(depth):
            pool = []
            for parent in frontier:
                steps = steps_of[parent]
                q = task.propose(PROBLEM, steps, 5)
                text = call(GenerateRequest(q.prompt, 1, q.max_tokens, 0.0, q.stop, None, "propose", None, None, (), False))
                base = path_score[parent]
                for line in text.splitlines():
                    child = steps + (line,)
                    key = task.state_key(PROBLEM, child)
                    if key in seen:
                        continue
                    nid = graph.add_node(line, hypothesis, (parent,), elaboration, None, "generate", 0, None, None).id
                    seen[key] = nid
                    steps_of[nid] = child
                    q = task.value(PROBLEM, child)
                    reply = call(GenerateRequest(q.prompt, 1, q.max_tokens, 0.0, q.stop, None, "value", None, None, (), False))
                    score = task.parse_value(PROBLEM, child, [reply])
                    graph.node(nid).score = score
                    graph.succeed(nid)
                    path = score if base is None else base + (score - base) / len(child)
                    path_score[nid] = path
                    pool.append((path, nid))
            pool.sort(reverse=True)
            frontier = [nid for _, nid in pool[:beam]]

    return hooks_only, sketch


def pieces() -> dict[str, float]:
    """µs of each kept promise on its own, per call or per thought (timeit, median over fresh searches)."""
    import timeit

    from thoughtloom.graph import EdgeKind, NodeKind, ThoughtGraph
    from thoughtloom.llm.budget import Budget, BudgetLimits
    from thoughtloom.llm.cache import MemoryCache, sample_key
    from thoughtloom.llm.gateway import CallRecord
    from thoughtloom.llm.types import GenerateRequest, Prompt

    request = GenerateRequest(Prompt("Vr.1.2"), 1, 4, 0.0, (), None, "value", None, None, (), False)
    # Fresh structures for each repetition of one search's worth (55) of calls or thoughts, as in a search.
    now: Any = SimpleNamespace()

    def fresh() -> None:
        now.cache, now.records, now.budget, now.graph = MemoryCache(), [], Budget(BudgetLimits()), ThoughtGraph()
        now.root = now.graph.add_node(PROBLEM, NodeKind.INPUT).id
        now.graph.succeed(now.root)

    def record() -> None:
        now.records.append(CallRecord(len(now.records), "value", "m", "Vr.1.2", None, 1, 4, 0.0, (), None, (), 0, 0,
                                      0.0, 0, time.time()))

    def cached() -> None:
        key = sample_key("m", request, 0)
        now.cache.get(key)
        now.cache.put(key, "42")

    def claimed() -> None:
        now.budget.claim(10)
        now.budget.charge(10, 0.0, None, None)

    def node() -> None:
        nid = now.graph.add_node("r.1", NodeKind.HYPOTHESIS, (now.root,), EdgeKind.ELABORATION, None, "generate", 0,
                                 None, None).id
        now.graph.node(nid).score = 0.5
        now.graph.succeed(nid)

    out = {}
    for name, fn in (("call record", record), ("cache key, lookup, store", cached),
                     ("budget claim and charge (methods)", claimed), ("graph node, scored", node)):
        out[name] = statistics.median(timeit.repeat(fn, setup=fresh, number=NODES, repeat=400)) / NODES * 1e6
    return out


def _us_per_node(run: Callable[[int], None], searches: int) -> float:
    t0 = time.process_time()
    for _ in range(searches):
        run(DEPTH)
    return (time.process_time() - t0) / searches / NODES * 1e6


def main() -> None:
    """Measure every row, interleaved, and print the medians."""
    anchors = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_ANCHORS
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    bench_sync, bench_asyncio, bench_loom = _harness(anchors)
    hooks_only, sketch = sketches(bench_loom)
    rows: dict[str, tuple[Callable[[int], None], int]] = {
        "floor (bench_sync)": (bench_sync.run_search, 2000),
        "plain asyncio (bench_asyncio)": (bench_asyncio.run_search, 400),
        "hooks only": (hooks_only, 400),
        "sketch: + graph, budget, cache, records": (sketch, 400),
        "thoughtloom (bench_loom)": (bench_loom.run_search, 150),
    }
    for run, _ in rows.values():  # warm-up
        for _ in range(30):
            run(DEPTH)
    load = os.getloadavg()[0]
    times: dict[str, list[float]] = {name: [] for name in rows}
    for _ in range(reps):
        for name, (run, searches) in rows.items():
            times[name].append(_us_per_node(run, searches))
    floor = statistics.median(times["floor (bench_sync)"])
    print(f"python {sys.version.split()[0]}, load average {load:.1f} -> {os.getloadavg()[0]:.1f}; "
          f"depth-{DEPTH} searches, median of {reps} interleaved repetitions (process time)")
    print(f"{'row':<42}{'µs/node':>9}{'x floor':>9}")
    for name, samples in times.items():
        us = statistics.median(samples)
        print(f"{name:<42}{us:>9.2f}{us / floor:>9.1f}")
    print("one promise on its own, per call or thought (timeit, median of 400 searches' worth):")
    for name, us in pieces().items():
        print(f"  {name:<40}{us:>9.2f} µs")


if __name__ == "__main__":
    main()
