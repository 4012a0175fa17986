"""Storage: blocks written and read per second, and saving / loading a 100k-node graph.

Usage: .venv/bin/python benchmarks/store.py
Blocks are node-like dag-cbor objects (~250 bytes) like a ThoughtGraph node: id, kind, ~80-char
content, status, score, depth, meta {created_at, cost_tokens, creator}, parent links. Stores:
SQLiteStore on a temp file, and CachedStore in front of it. `save` = encode every node + put_many
(one transaction) + chunked index blocks + a head block + set the head ref; `load` = read the ref,
then get + verify + decode every block walking from the head (cold: a fresh process-like store and
cache; warm: the same CachedStore again). Best of 3. Prints tables; writes nothing but temp files.
"""

from __future__ import annotations

import gc
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from thoughtloom.store.blocks import CID, Link, encode, link
from thoughtloom.store.cache import CachedStore
from thoughtloom.store.sqlite import SQLiteStore
from thoughtloom.store.store import BlockStore, get_obj, get_objs

N_GRAPH = 100_000
N_BLOCKS = 20_000
CHUNK = 4096  # links per index block: ~150 KB, under IPFS's 1 MiB block limit
REPEATS = 3
TARGETS = {"save": 5.0, "load": 3.0}


def node(i: int, parents: list[Link]) -> dict[str, Any]:
    return {"id": f"n{i:06d}", "kind": "thought", "content": f"step {i}: " + "consider the remaining numbers " * 2 + "ok",
            "status": "scored", "score": (i % 97) / 97, "depth": len(str(i)),
            "meta": {"created_at": 1_760_000_000.0 + i / 1000, "cost_tokens": 40 + i % 50, "creator": "gemma-3-270m"},
            "parents": parents}


def build_nodes(n: int) -> list[dict[str, Any]]:
    """Node dicts without links yet: parent links depend on the parents' CIDs (set while saving)."""
    return [node(i, []) for i in range(n)]


def save(store: BlockStore, nodes: list[dict[str, Any]], run: str = "bench") -> CID:
    """Encode all nodes (a 10-ary tree: parent of i is (i-1)//10), store them, write index + head."""
    cids: list[CID] = []
    blocks: list[tuple[CID, bytes]] = []
    for i, n in enumerate(nodes):
        n["parents"] = [link(cids[(i - 1) // 10])] if i else []
        cid, data = encode(n)
        cids.append(cid)
        blocks.append((cid, data))
    chunks = [encode({"nodes": [link(c) for c in cids[k:k + CHUNK]]}) for k in range(0, len(cids), CHUNK)]
    head = encode({"run": run, "count": len(cids), "chunks": [link(c) for c, _ in chunks], "prev": None})
    store.put_many([*blocks, *chunks, head])
    store.set_ref(f"run/{run}/head", head[0])
    return head[0]


def load(store: BlockStore, run: str = "bench") -> list[Any]:
    """Every node, decoded, by walking from the head ref."""
    head_cid = store.get_ref(f"run/{run}/head")
    assert head_cid is not None
    head = get_obj(store, head_cid)
    out = []
    for chunk in get_objs(store, [c.cid for c in head["chunks"]]):
        out.extend(get_objs(store, [n.cid for n in chunk["nodes"]]))
    return out


def best(fn: Callable[[], float]) -> float:
    times = []
    for _ in range(REPEATS):
        gc.collect()
        times.append(fn())
    return min(times)


def timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def block_rates(tmp: Path) -> list[tuple[str, float]]:
    blocks = [encode(node(i, [])) for i in range(N_BLOCKS)]
    rows: list[tuple[str, float]] = []
    k = 0

    def fresh() -> SQLiteStore:
        nonlocal k
        k += 1
        return SQLiteStore(tmp / f"rates{k}.db")

    def put_each() -> float:
        with fresh() as s:
            return timed(lambda: [s.put(c, d) for c, d in blocks[:5000]]) / 5000 * N_BLOCKS

    def put_many() -> float:
        with fresh() as s:
            return timed(lambda: s.put_many(blocks))

    rows.append(("SQLite put (one transaction each)", N_BLOCKS / best(put_each)))
    rows.append(("SQLite put_many (one transaction)", N_BLOCKS / best(put_many)))
    encode_t = best(lambda: timed(lambda: [encode(node(i, [])) for i in range(N_BLOCKS)]))
    rows.append(("encode (build dict + dag-cbor + CID)", N_BLOCKS / encode_t))
    with fresh() as s:
        s.put_many(blocks)
        rows.append(("SQLite get (verified)", N_BLOCKS / best(lambda: timed(lambda: [s.get(c) for c, _ in blocks]))))
        cids = [c for c, _ in blocks]
        rows.append(("SQLite get_many (batched, verified)",
                     N_BLOCKS / best(lambda: timed(lambda: s.get_many(cids)))))
        rows.append(("SQLite get_objs (batched get + decode)",
                     N_BLOCKS / best(lambda: timed(lambda: get_objs(s, cids)))))
        rows.append(("SQLite get_obj (get + decode)",
                     N_BLOCKS / best(lambda: timed(lambda: [get_obj(s, c) for c, _ in blocks]))))
        cached = CachedStore(s, capacity=N_BLOCKS)

        def cold() -> float:
            cached.clear()
            return timed(lambda: [get_obj(cached, c) for c, _ in blocks])

        rows.append(("CachedStore get_obj, cold (all misses)", N_BLOCKS / best(cold)))
        [get_obj(cached, c) for c, _ in blocks]
        rows.append(("CachedStore get_obj, warm (all hits)",
                     N_BLOCKS / best(lambda: timed(lambda: [get_obj(cached, c) for c, _ in blocks]))))
    return rows


def graph_times(tmp: Path) -> list[tuple[str, float, float | None]]:
    rows: list[tuple[str, float, float | None]] = []
    k = 0

    def save_once() -> float:
        nonlocal k
        k += 1
        nodes = build_nodes(N_GRAPH)  # building the dicts is the engine's job, not timed
        with SQLiteStore(tmp / f"graph{k}.db") as s:
            return timed(lambda: save(s, nodes))

    rows.append(("save 100k nodes (SQLite)", best(save_once), TARGETS["save"]))
    path = tmp / f"graph{k}.db"

    def load_sqlite() -> float:
        with SQLiteStore(path) as s:
            t = timed(lambda: load(s))
            assert len(load(s)) == N_GRAPH
            return t

    def load_cached_cold() -> float:
        with CachedStore(SQLiteStore(path), capacity=N_GRAPH + 100) as c:
            return timed(lambda: load(c))

    rows.append(("load 100k nodes (SQLite)", best(load_sqlite), TARGETS["load"]))
    rows.append(("load 100k nodes (CachedStore, cold)", best(load_cached_cold), TARGETS["load"]))
    with CachedStore(SQLiteStore(path), capacity=N_GRAPH + 100) as c:
        load(c)
        rows.append(("load 100k nodes (CachedStore, warm)", best(lambda: timed(lambda: load(c))), TARGETS["load"]))
    size = path.stat().st_size + (path.with_name(path.name + "-wal").stat().st_size
                                  if path.with_name(path.name + "-wal").exists() else 0)
    rows.append((f"(store file: {size / 1e6:.1f} MB for {N_GRAPH + 27} blocks)", 0.0, None))
    return rows


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="tl-store-bench-") as d:
        tmp = Path(d)
        print(f"load average at start: {os.getloadavg()[0]:.2f}")
        print(f"Blocks/s ({N_BLOCKS} node-like blocks of ~{len(encode(node(1, []))[1])} bytes; best of {REPEATS})")
        print(f"{'operation':<42} {'blocks/s':>10}")
        for name, rate in block_rates(tmp):
            print(f"{name:<42} {rate:>10,.0f}")
        print()
        print(f"{N_GRAPH // 1000}k-node graph (best of {REPEATS})")
        print(f"{'operation':<42} {'seconds':>8} {'target':>7}  ok")
        for name, secs, target in graph_times(tmp):
            if target is None:
                print(name)
            else:
                print(f"{name:<42} {secs:>8.2f} {target:>6.1f}s  {'yes' if secs < target else 'NO'}")
        print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    sys.exit(main())
