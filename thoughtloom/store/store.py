"""The block store protocol every backend implements, and object helpers over it.

Contract (tests/test_store_contract.py runs it against every backend):
- `put` is idempotent (same CID, same bytes); `put_many` writes all items or none.
- `get` verifies the bytes against the CID on every read: `CorruptBlock` if they differ,
  `MissingBlock` if absent. A corrupted block is reported, never returned.
- refs are mutable named pointers ("run/<id>/head" -> CID); backends that cannot hold them natively
  (IPFS) keep them in a small local SQLite file.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from types import TracebackType
from typing import Any, Protocol, Self, runtime_checkable

from thoughtloom.store.blocks import CID, decode_block, decode_many, encode, gc_paused


class StoreError(RuntimeError):
    """A store cannot be opened or reached (one-line message naming the path or URL)."""


@runtime_checkable
class BlockStore(Protocol):
    """Content-addressed blocks plus mutable named refs."""

    def put(self, cid: CID, data: bytes) -> None:
        """Store one block (idempotent)."""
        ...

    def put_many(self, items: Iterable[tuple[CID, bytes]]) -> None:
        """Store many blocks in one transaction."""
        ...

    def get(self, cid: CID) -> bytes:
        """The block's bytes, verified against the CID (CorruptBlock / MissingBlock)."""
        ...

    def has(self, cid: CID) -> bool:
        """Whether the block is stored."""
        ...

    def set_ref(self, name: str, cid: CID) -> None:
        """Point the named ref at `cid` (create or overwrite)."""
        ...

    def get_ref(self, name: str) -> CID | None:
        """The CID a ref points at, or None."""
        ...

    def refs(self, prefix: str = "") -> dict[str, CID]:
        """All refs whose name starts with `prefix`."""
        ...

    def delete_ref(self, name: str) -> None:
        """Remove a ref (no error if absent); the blocks stay."""
        ...

    def close(self) -> None:
        """Release the store's resources."""
        ...

    def __enter__(self) -> Self: ...

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None: ...


class ClosesOnExit:
    """`with store:` closes the store when the block ends (for the classes that implement BlockStore)."""

    def close(self) -> None:
        """Release the store's resources."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def put_obj(store: BlockStore, obj: Any) -> CID:
    """Encode `obj` as dag-cbor, store it, return its CID."""
    cid, data = encode(obj)
    store.put(cid, data)
    return cid


def get_obj(store: BlockStore, cid: CID) -> Any:
    """Fetch and decode a block (dag-cbor -> objects with `Link`s, raw -> bytes); cached if the store caches."""
    getter = getattr(store, "get_obj", None)
    if getter is not None:  # CachedStore keeps decoded objects: skip decoding on a hit
        return getter(cid)
    return decode_block(cid, store.get(cid))


def get_many(store: BlockStore, cids: Iterable[CID]) -> dict[CID, bytes]:
    """Many verified blocks by CID; batched when the store can (SQLite: one query per 500)."""
    getter = getattr(store, "get_many", None)
    if getter is not None:
        return dict(getter(cids))
    return {cid: store.get(cid) for cid in dict.fromkeys(cids)}


def get_objs(store: BlockStore, cids: Sequence[CID]) -> list[Any]:
    """Many decoded blocks, in the order of `cids`; batched and cached when the store can."""
    getter = getattr(store, "get_objs", None)
    if getter is not None:
        return list(getter(cids))
    with gc_paused():  # fetching allocates row tuples too; see gc_paused
        blocks = get_many(store, cids)
        return decode_many((cid, blocks[cid]) for cid in cids)
