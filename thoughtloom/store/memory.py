"""A dict-backed BlockStore for one process: replay computes its graph here without touching disk."""

from __future__ import annotations

from collections.abc import Iterable

from .blocks import CID, CorruptBlock, MissingBlock, verify
from .store import ClosesOnExit


class MemoryStore(ClosesOnExit):
    """Blocks and refs in dicts; verifies like the persistent stores (put refuses, get re-checks)."""

    def __init__(self) -> None:
        self.blocks: dict[CID, bytes] = {}
        self._refs: dict[str, CID] = {}

    def put(self, cid: CID, data: bytes) -> None:
        """Store one block (idempotent); CorruptBlock if `data` does not hash to `cid`."""
        if not verify(cid, data):
            raise CorruptBlock(cid, "refusing to store data that does not match its CID")
        self.blocks.setdefault(cid, bytes(data))

    def put_many(self, items: Iterable[tuple[CID, bytes]]) -> None:
        """Store many blocks, all or none."""
        staged = list(items)
        for cid, data in staged:
            if not verify(cid, data):
                raise CorruptBlock(cid, "refusing to store data that does not match its CID")
        for cid, data in staged:
            self.blocks.setdefault(cid, bytes(data))

    def get(self, cid: CID) -> bytes:
        """The block's bytes, verified."""
        data = self.blocks.get(cid)
        if data is None:
            raise MissingBlock(cid, "memory")
        if not verify(cid, data):
            raise CorruptBlock(cid)
        return data

    def has(self, cid: CID) -> bool:
        """Whether the block is stored."""
        return cid in self.blocks

    def set_ref(self, name: str, cid: CID) -> None:
        """Point the named ref at `cid`."""
        self._refs[name] = cid

    def get_ref(self, name: str) -> CID | None:
        """The CID a ref points at, or None."""
        return self._refs.get(name)

    def refs(self, prefix: str = "") -> dict[str, CID]:
        """All refs whose name starts with `prefix`, sorted by name."""
        return {k: v for k, v in sorted(self._refs.items()) if k.startswith(prefix)}

    def delete_ref(self, name: str) -> None:
        """Remove a ref (no error if absent)."""
        self._refs.pop(name, None)
