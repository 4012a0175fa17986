"""An LRU cache in front of any BlockStore: decoded objects and raw bytes, filled on read.

Reads are cached, writes go straight through without filling the cache, so a block that is
corrupted in the backing store after being written is still caught on its first read. Cached
entries were verified when they were read, and blocks never change (content addressing), so a
hit needs no re-verification. Decoded objects are shared between callers: treat them as read-only.
A lock makes it safe from threads (asyncio executors); every operation is short.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from typing import Any

from thoughtloom.store.blocks import CID, decode_block, decode_many, gc_paused
from thoughtloom.store.store import BlockStore, ClosesOnExit, get_many


class CachedStore(ClosesOnExit):
    """A BlockStore wrapper with an LRU of decoded objects and one of raw bytes."""

    def __init__(self, store: BlockStore, capacity: int = 100_000, *, max_bytes: int = 64 << 20,
                 max_block_bytes: int = 1 << 20) -> None:
        # capacity: entries in each LRU; max_bytes bounds the raw-bytes LRU, and blocks larger than
        # max_block_bytes are never cached (one large raw content block must not evict a graph).
        self.store = store
        self.capacity = capacity
        self.max_bytes = max_bytes
        self.max_block_bytes = max_block_bytes
        self._objs: OrderedDict[CID, Any] = OrderedDict()
        self._bytes: OrderedDict[CID, bytes] = OrderedDict()
        self._nbytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    # --- reads ------------------------------------------------------------------------------------

    def get(self, cid: CID) -> bytes:
        """The block's bytes (cached, else from the store, verified there)."""
        with self._lock:
            data = self._bytes.get(cid)
            if data is not None:
                self._bytes.move_to_end(cid)
                self.hits += 1
                return data
            self.misses += 1
        data = self.store.get(cid)
        self._remember_bytes(cid, data)
        return data

    def get_obj(self, cid: CID) -> Any:
        """The decoded block (cached: a hit skips fetching and decoding). Do not mutate it."""
        with self._lock:
            if cid in self._objs:
                self._objs.move_to_end(cid)
                self.hits += 1
                return self._objs[cid]
        data = self.get(cid)  # counts its own hit or miss on the bytes LRU
        obj = decode_block(cid, data)
        if len(data) <= self.max_block_bytes:
            with self._lock:
                self._objs[cid] = obj
                self._objs.move_to_end(cid)
                while len(self._objs) > self.capacity:
                    self._objs.popitem(last=False)
        return obj

    def get_many(self, cids: Iterable[CID]) -> dict[CID, bytes]:
        """Many blocks: hits from the cache, the misses in one batched read of the backing store."""
        out: dict[CID, bytes] = {}
        missing: list[CID] = []
        with self._lock:
            for cid in cids:
                data = self._bytes.get(cid)
                if data is not None:
                    self._bytes.move_to_end(cid)
                    self.hits += 1
                    out[cid] = data
                elif cid not in out:
                    missing.append(cid)
            self.misses += len(missing)
        if missing:
            fetched = get_many(self.store, missing)
            for cid, data in fetched.items():
                self._remember_bytes(cid, data)
            out.update(fetched)
        return out

    def get_objs(self, cids: Sequence[CID]) -> list[Any]:
        """Many decoded blocks in order; hits skip fetching and decoding, misses are read in a batch."""
        found: dict[CID, Any] = {}
        with self._lock:
            for cid in cids:
                if cid in self._objs:
                    self._objs.move_to_end(cid)
                    self.hits += 1
                    found[cid] = self._objs[cid]
        missing = [c for c in dict.fromkeys(cids) if c not in found]
        if missing:
            with gc_paused():
                blocks = self.get_many(missing)
            decoded = dict(zip(missing, decode_many((cid, blocks[cid]) for cid in missing), strict=True))
            with self._lock:
                for cid, obj in decoded.items():
                    if len(blocks[cid]) <= self.max_block_bytes:
                        self._objs[cid] = obj
                while len(self._objs) > self.capacity:
                    self._objs.popitem(last=False)
            found.update(decoded)
        return [found[c] for c in cids]

    def _remember_bytes(self, cid: CID, data: bytes) -> None:
        if len(data) > self.max_block_bytes:
            return
        with self._lock:
            if cid not in self._bytes:
                self._nbytes += len(data)
            self._bytes[cid] = data
            self._bytes.move_to_end(cid)
            while self._bytes and (len(self._bytes) > self.capacity or self._nbytes > self.max_bytes):
                _, old = self._bytes.popitem(last=False)
                self._nbytes -= len(old)

    def has(self, cid: CID) -> bool:
        """Whether the block is cached or stored."""
        with self._lock:
            if cid in self._bytes or cid in self._objs:
                return True
        return self.store.has(cid)

    def stats(self) -> dict[str, int]:
        """Hit/miss counters and current sizes."""
        with self._lock:
            return {"hits": self.hits, "misses": self.misses, "objects": len(self._objs),
                    "blocks": len(self._bytes), "bytes": self._nbytes}

    def clear(self) -> None:
        """Drop every cached entry (counters kept)."""
        with self._lock:
            self._objs.clear()
            self._bytes.clear()
            self._nbytes = 0

    # --- writes and refs: straight through --------------------------------------------------------

    def put(self, cid: CID, data: bytes) -> None:
        """Store one block in the backing store."""
        self.store.put(cid, data)

    def put_many(self, items: Iterable[tuple[CID, bytes]]) -> None:
        """Store many blocks in the backing store (one transaction there)."""
        self.store.put_many(items)

    def set_ref(self, name: str, cid: CID) -> None:
        """Set a ref in the backing store."""
        self.store.set_ref(name, cid)

    def get_ref(self, name: str) -> CID | None:
        """A ref from the backing store (refs are mutable: never cached)."""
        return self.store.get_ref(name)

    def refs(self, prefix: str = "") -> dict[str, CID]:
        """Refs from the backing store."""
        return self.store.refs(prefix)

    def delete_ref(self, name: str) -> None:
        """Delete a ref in the backing store."""
        self.store.delete_ref(name)

    def close(self) -> None:
        """Drop the cache and close the backing store."""
        self.clear()
        self.store.close()

    def __repr__(self) -> str:
        return f"CachedStore({self.store!r}, capacity={self.capacity})"
