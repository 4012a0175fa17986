"""CachedStore: decoded-object and byte LRUs, filled on read, bounded, counted."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from unittest import mock

import pytest

from thoughtloom.store import blocks
from thoughtloom.store.blocks import CorruptBlock, raw
from thoughtloom.store.cache import CachedStore
from thoughtloom.store.sqlite import SQLiteStore
from thoughtloom.store.store import get_obj, put_obj


@pytest.fixture
def cached(tmp_path: Path) -> CachedStore:
    return CachedStore(SQLiteStore(tmp_path / "s.db"), capacity=3)


def test_get_obj_hit_skips_fetching_and_decoding(cached: CachedStore) -> None:
    cid = put_obj(cached, {"x": 1})
    first = get_obj(cached, cid)
    with mock.patch.object(cached.store, "get", side_effect=AssertionError("fetched")), \
            mock.patch("thoughtloom.store.cache.decode_block", side_effect=AssertionError("decoded")):
        assert get_obj(cached, cid) is first
    assert cached.stats()["hits"] == 1 and cached.stats()["misses"] == 1


def test_lru_evicts_the_least_recently_used(cached: CachedStore) -> None:
    cids = [put_obj(cached, {"i": i}) for i in range(4)]
    for c in cids[:3]:
        get_obj(cached, c)
    get_obj(cached, cids[0])  # now cids[1] is the oldest
    get_obj(cached, cids[3])
    assert cached.stats()["objects"] == 3
    assert cids[1] not in cached._objs and cids[0] in cached._objs


def test_writes_do_not_fill_the_cache_so_first_reads_verify(cached: CachedStore, tmp_path: Path) -> None:
    cid = put_obj(cached, {"x": 2})
    assert cached.stats()["objects"] == cached.stats()["blocks"] == 0
    with sqlite3.connect(tmp_path / "s.db") as db:
        db.execute("UPDATE blocks SET data = x'a0'")
    with pytest.raises(CorruptBlock):
        get_obj(cached, cid)


def test_byte_budget_and_large_blocks(tmp_path: Path) -> None:
    c = CachedStore(SQLiteStore(tmp_path / "s.db"), capacity=100, max_bytes=10_000, max_block_bytes=4_000)
    big = raw(b"x" * 5_000)
    c.put(*big)
    assert c.get(big[0]) == big[1] and c.stats()["blocks"] == 0  # too large to cache
    for i in range(5):
        b = raw(bytes([i]) * 3_000)
        c.put(*b)
        c.get(b[0])
    assert c.stats()["bytes"] <= 10_000 and c.stats()["blocks"] == 3


def test_refs_pass_through_and_close_closes_the_store(cached: CachedStore) -> None:
    cid = put_obj(cached, {"h": 1})
    cached.set_ref("run/x/head", cid)
    assert cached.store.get_ref("run/x/head") == cid == cached.get_ref("run/x/head")
    assert cached.refs("run/") == {"run/x/head": cid}
    cached.delete_ref("run/x/head")
    assert cached.refs() == {}
    cached.close()
    with pytest.raises(sqlite3.ProgrammingError):
        cached.store.get_ref("x")


def test_raw_blocks_decode_to_bytes(cached: CachedStore) -> None:
    cid, data = raw(b"content")
    cached.put(cid, data)
    assert get_obj(cached, cid) == b"content" == blocks.decode_block(cid, data)
