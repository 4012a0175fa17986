"""The BlockStore contract, run against every backend.

Backends: SQLiteStore (temp file), CachedStore(SQLiteStore), IPFSStore against the in-process RPC
double, and IPFSStore against a real node when THOUGHTLOOM_IPFS_API is set (e.g.
http://127.0.0.1:5001) or an `ipfs` (Kubo) binary is on PATH (a throwaway offline node is started).
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from ipfs_double import IPFSDouble, serve_ipfs

from thoughtloom.store.blocks import (
    CorruptBlock,
    MissingBlock,
    cid_bytes,
    encode,
    link,
    raw,
)
from thoughtloom.store.cache import CachedStore
from thoughtloom.store.ipfs import IPFSStore
from thoughtloom.store.sqlite import SQLiteStore
from thoughtloom.store.store import BlockStore, get_obj, put_obj


@dataclass
class Backend:
    """A store under test plus how to damage a stored block and how to reopen the store."""

    store: BlockStore
    corrupt: Callable[[str], None] | None  # None: this backend cannot be corrupted from outside
    reopen: Callable[[], BlockStore]
    unsupported: dict[str, str] = field(default_factory=dict)  # operation -> why this backend lacks it

    def skip_unless(self, operation: str) -> None:
        if reason := self.unsupported.get(operation):
            pytest.skip(reason)


# What a js-ipfs node (0.66.1, HTTP RPC: `npm install ipfs@0.66.1`, where Kubo cannot be installed) cannot do
# that Kubo can. Tests skip exactly these operations against it and still run everything else.
JS_IPFS_LIMITS = {
    "absent-lookup": "js-ipfs has no offline block lookup: block/stat and block/get of an absent block "
                     "ignore `offline` and wait on bitswap until the request times out (Kubo answers "
                     "'not found locally' at once)",
    "1mib-block": "js-ipfs caps the whole block/put request body at 1048576 bytes (413), so a 1 MiB "
                  "block plus multipart framing is refused; Kubo accepts blocks up to 1 MiB",
}


def _real_node_limits(url: str) -> dict[str, str]:
    """JS_IPFS_LIMITS if the node at `url` is js-ipfs (its /version names ipfs-core), else none."""
    request = urllib.request.Request(url.rstrip("/").removesuffix("/api/v0") + "/api/v0/version",
                                     data=b"", method="POST")
    with urllib.request.urlopen(request, timeout=10) as response:
        version = json.loads(response.read())
    return dict(JS_IPFS_LIMITS) if "ipfs-core" in version else {}


def _sqlite_corrupt(path: Path) -> Callable[[str], None]:
    def corrupt(cid: str) -> None:
        with sqlite3.connect(path) as db:  # another connection, as disk damage would look
            db.execute("UPDATE blocks SET data = data || x'00' WHERE cid = ?", (cid_bytes(cid),))
    return corrupt


@pytest.fixture(scope="module")
def double() -> Iterator[IPFSDouble]:
    with serve_ipfs() as d:
        yield d


def _real_node_url() -> Iterator[str | None]:
    """A real IPFS node's API URL: from the env, or a throwaway Kubo daemon; None if neither."""
    if url := os.environ.get("THOUGHTLOOM_IPFS_API"):
        yield url
        return
    ipfs = shutil.which("ipfs")
    if ipfs is None:
        yield None
        return
    repo = tempfile.mkdtemp(prefix="tl-ipfs-")
    env = {**os.environ, "IPFS_PATH": repo}
    subprocess.run([ipfs, "init", "--profile", "test"], env=env, check=True, capture_output=True)
    subprocess.run([ipfs, "config", "Addresses.API", "/ip4/127.0.0.1/tcp/0"], env=env, check=True)
    daemon = subprocess.Popen([ipfs, "daemon", "--offline"], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        api_file = Path(repo) / "api"  # the daemon writes its bound multiaddr here
        for _ in range(200):
            if api_file.exists() and api_file.read_text().strip():
                break
            time.sleep(0.05)
        parts = api_file.read_text().strip().split("/")  # /ip4/127.0.0.1/tcp/PORT
        yield f"http://{parts[2]}:{parts[4]}"
    finally:
        daemon.terminate()
        daemon.wait(timeout=10)
        shutil.rmtree(repo, ignore_errors=True)


@pytest.fixture(scope="module")
def real_node() -> Iterator[str | None]:
    yield from _real_node_url()


@pytest.fixture(params=["sqlite", "cached-sqlite", "ipfs-double", "ipfs-real"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    kind = request.param
    if kind in ("sqlite", "cached-sqlite"):
        path = tmp_path / "store.db"

        def open_sqlite() -> BlockStore:
            return CachedStore(SQLiteStore(path), capacity=100) if kind == "cached-sqlite" else SQLiteStore(path)

        b = Backend(open_sqlite(), _sqlite_corrupt(path), open_sqlite)
    elif kind == "ipfs-double":
        double: IPFSDouble = request.getfixturevalue("double")

        def corrupt(cid: str) -> None:
            double.corrupt_reads = True

        def open_double() -> BlockStore:
            return IPFSStore(double.url, refs_path=tmp_path / "refs.db", timeout_s=5)

        double.corrupt_reads = False
        b = Backend(open_double(), corrupt, open_double)
    else:
        url = request.getfixturevalue("real_node")
        if url is None:
            pytest.skip("no real IPFS node: put Kubo's `ipfs` on PATH (the test starts a throwaway offline daemon), "
                        "or set THOUGHTLOOM_IPFS_API to a running node's API, e.g. http://127.0.0.1:5001")

        def open_real() -> BlockStore:
            return IPFSStore(url, refs_path=tmp_path / "refs.db", timeout_s=10, offline=True)

        b = Backend(open_real(), None, open_real, _real_node_limits(url))
    try:
        yield b
    finally:
        b.store.close()
        if kind == "ipfs-double":
            request.getfixturevalue("double").corrupt_reads = False


def unique(tag: str) -> dict[str, object]:
    """A node-like object unique to this test run (so the shared double never already has it)."""
    return {"id": tag, "kind": "thought", "content": f"{tag} {time.time_ns()}", "score": 0.5,
            "meta": {"creator": "test", "cost_tokens": 3}}


def test_put_get_round_trip(backend: Backend) -> None:
    cid, data = encode(unique("a"))
    backend.store.put(cid, data)
    assert backend.store.get(cid) == data
    rcid, rdata = raw(f"large content {time.time_ns()}".encode())
    backend.store.put(rcid, rdata)
    assert backend.store.get(rcid) == rdata


def test_put_is_idempotent(backend: Backend) -> None:
    cid, data = encode(unique("idem"))
    backend.store.put(cid, data)
    backend.store.put(cid, data)
    assert backend.store.get(cid) == data


def test_has(backend: Backend) -> None:
    cid, data = encode(unique("has"))
    if "absent-lookup" not in backend.unsupported:
        assert not backend.store.has(cid)
    backend.store.put(cid, data)
    assert backend.store.has(cid)


def test_missing_block_raises_missing_block_naming_the_cid(backend: Backend) -> None:
    backend.skip_unless("absent-lookup")
    cid, _ = encode(unique("never stored"))
    with pytest.raises(MissingBlock) as info:
        backend.store.get(cid)
    assert cid in str(info.value) and "\n" not in str(info.value)


def test_corrupted_block_is_reported_not_returned(backend: Backend) -> None:
    if backend.corrupt is None:
        pytest.skip("a real node's blockstore cannot be damaged from the test")
    cid, data = encode(unique("corrupt"))
    backend.store.put(cid, data)
    backend.corrupt(cid)
    with pytest.raises(CorruptBlock) as info:
        backend.store.get(cid)
    assert cid in str(info.value) and "\n" not in str(info.value)


def test_put_refuses_data_that_does_not_match_the_cid(backend: Backend) -> None:
    cid, data = encode(unique("mismatch"))
    with pytest.raises(CorruptBlock):
        backend.store.put(cid, data + b"x")
    with pytest.raises(CorruptBlock):
        backend.store.put_many([encode(unique("fine")), (cid, data + b"x")])
    if "absent-lookup" not in backend.unsupported:
        assert not backend.store.has(cid)


def test_put_many(backend: Backend) -> None:
    blocks = [encode(unique(f"many{i}")) for i in range(50)]
    backend.store.put_many(iter(blocks))  # any iterable, including a generator
    assert all(backend.store.get(cid) == data for cid, data in blocks)
    backend.store.put_many(blocks)  # again: idempotent
    backend.store.put_many([])


def test_objects_round_trip_with_links(backend: Backend) -> None:
    content = put_obj(backend.store, {"text": "content " + str(time.time_ns())})
    parent = put_obj(backend.store, unique("parent"))
    child = {**unique("child"), "parents": [link(parent)], "content": link(content)}
    cid = put_obj(backend.store, child)
    back = get_obj(backend.store, cid)
    assert back == child and back["parents"][0].cid == parent
    assert get_obj(backend.store, back["content"].cid)["text"].startswith("content ")


def test_refs_set_get_list_delete(backend: Backend) -> None:
    s = backend.store
    a = put_obj(s, unique("head a"))
    b = put_obj(s, unique("head b"))
    assert s.get_ref("run/1/head") is None
    s.set_ref("run/1/head", a)
    s.set_ref("run/2/head", b)
    s.set_ref("other", a)
    assert s.get_ref("run/1/head") == a
    s.set_ref("run/1/head", b)  # refs are mutable
    assert s.get_ref("run/1/head") == b
    assert s.refs("run/") == {"run/1/head": b, "run/2/head": b}
    assert s.refs() == {"other": a, "run/1/head": b, "run/2/head": b}
    assert s.refs("run/%") == {} and s.refs("run/_") == {}  # the prefix is literal, not a LIKE pattern
    s.delete_ref("run/1/head")
    s.delete_ref("run/1/head")  # deleting an absent ref is fine
    assert s.get_ref("run/1/head") is None and s.has(b)  # the block stays


def test_blocks_and_refs_persist_across_reopen(backend: Backend) -> None:
    cid = put_obj(backend.store, unique("persist"))
    backend.store.set_ref("run/p/head", cid)
    backend.store.close()
    backend.store = backend.reopen()
    assert backend.store.get_ref("run/p/head") == cid
    assert get_obj(backend.store, cid)["id"] == "persist"


def test_large_blocks_1mib(backend: Backend) -> None:
    backend.skip_unless("1mib-block")
    payload = os.urandom(1 << 20)
    cid, data = raw(payload)
    backend.store.put(cid, data)
    assert backend.store.get(cid) == payload
    assert get_obj(backend.store, cid) == payload  # raw blocks decode to their bytes


def test_context_manager_closes(backend: Backend) -> None:
    with backend.reopen() as s:
        assert s.get_ref("nothing") is None
