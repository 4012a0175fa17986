"""CARv1 export and import (the format of `ipfs dag export` / `ipfs dag import`).

Layout: varint(len(header)) + dag-cbor {"roots": [links], "version": 1}, then for each block
varint(len(cid) + len(data)) + binary CID + data. Export walks the DAG from the roots (dag-cbor
links; raw blocks are leaves) unless told which blocks to write; import verifies every block
against its CID before storing any of them.
"""

from __future__ import annotations

import io
import os
import stat
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

import libipld

from thoughtloom.store.blocks import (
    CID,
    DAG_CBOR,
    CorruptBlock,
    _is_cid,
    _varint,
    cid_bytes,
    cid_length,
    cid_str,
    codec_of,
    link,
    verify,
)
from thoughtloom.store.memory import MemoryStore
from thoughtloom.store.store import BlockStore

_IMPORT_BATCH = 5_000  # blocks per put_many while importing


def walk(store: BlockStore, roots: Iterable[CID]) -> Iterator[tuple[CID, bytes]]:
    """Every block reachable from `roots`, each once, depth-first in link order (as Kubo exports)."""
    seen: set[CID] = set()
    stack = list(reversed([str(r) for r in roots]))
    while stack:
        cid = stack.pop()
        if cid in seen:
            continue
        seen.add(cid)
        data = store.get(cid)
        yield cid, data
        if codec_of(cid) == DAG_CBOR:
            children = _child_cids(libipld.decode_dag_cbor(data))
            stack.extend(reversed([c for c in children if c not in seen]))


def _child_cids(obj: object) -> list[CID]:
    out: list[CID] = []
    todo = [obj]
    while todo:
        o = todo.pop()
        if isinstance(o, dict):
            todo.extend(reversed(list(o.values())))
        elif isinstance(o, list):
            todo.extend(reversed(o))
        elif isinstance(o, bytes) and _is_cid(o):
            out.append(cid_str(o))
    return out


def export_car(store: BlockStore, roots: list[CID], path_or_file: str | Path | BinaryIO, *,
               blocks: Iterable[CID] | None = None) -> int:
    """Write a CARv1 of `roots` (and the DAG under them, or exactly `blocks`); the number of blocks."""
    header = libipld.encode_dag_cbor({"roots": [link(r) for r in roots], "version": 1})
    items: Iterable[tuple[CID, bytes]] = walk(store, roots) if blocks is None else (
        (str(c), store.get(str(c))) for c in blocks)
    if isinstance(path_or_file, (str, Path)):
        with open(path_or_file, "wb") as f:
            return _write(f, header, items)
    return _write(path_or_file, header, items)


def _write(out: BinaryIO, header: bytes, items: Iterable[tuple[CID, bytes]]) -> int:
    out.write(_varint(len(header)) + header)
    n = 0
    for cid, data in items:
        key = cid_bytes(cid)
        out.write(_varint(len(key) + len(data)))
        out.write(key)
        out.write(data)
        n += 1
    return n


def read_car(path_or_file: str | Path | BinaryIO | bytes) -> tuple[list[CID], Iterator[tuple[CID, bytes]]]:
    """Parse a CARv1: (roots, iterator of verified (cid, data)); CorruptBlock on a mismatch, ValueError if malformed."""
    if isinstance(path_or_file, bytes):
        f: BinaryIO = io.BytesIO(path_or_file)
    elif isinstance(path_or_file, (str, Path)):
        f = open(path_or_file, "rb")  # noqa: SIM115 - closed by the iterator below
    else:
        f = path_or_file
    try:
        reader = _Reader(f)
        header_len = reader.uvarint()
        if header_len is None:
            raise ValueError("not a CAR file: empty")
        try:
            header = libipld.decode_dag_cbor(reader.exact(header_len, "header"))
        except ValueError as e:
            raise ValueError(f"not a CAR file: bad header ({e})") from None
        if not isinstance(header, dict) or header.get("version") != 1:
            version = header.get("version") if isinstance(header, dict) else None
            raise ValueError(f"unsupported CAR version {version!r} (only CARv1 is read)")
        roots = header.get("roots")
        if not isinstance(roots, list) or not all(isinstance(r, bytes) and _is_cid(r) for r in roots):
            raise ValueError("not a CAR file: the header's roots are not a list of CIDs")
    except BaseException:
        if f is not path_or_file:
            f.close()
        raise

    def blocks() -> Iterator[tuple[CID, bytes]]:
        try:
            while (size := reader.uvarint()) is not None:
                section = reader.exact(size, "block section")
                try:
                    n = cid_length(section)
                    cid = cid_str(section[:n])
                    ok = verify(section[:n], section[n:])
                except (ValueError, IndexError) as e:
                    raise ValueError(f"a block section of {size} bytes does not start with a CID ({e})") from None
                if not ok:
                    raise CorruptBlock(cid, "CAR block does not match its CID")
                yield cid, section[n:]
        finally:
            if f is not path_or_file:
                f.close()

    return [cid_str(r) for r in roots], blocks()


def import_car(store: BlockStore, path_or_file: str | Path | BinaryIO | bytes, *,
               check: Callable[[BlockStore, list[CID]], None] | None = None) -> list[CID]:
    """Verify and store every block of a CARv1; its roots. Nothing is stored if any block is corrupt,
    the file is malformed, or `check` refuses (see import_blocks)."""
    roots, blocks = read_car(path_or_file)
    # Verify all first so a bad file leaves the store untouched (blocks are content-addressed, so a
    # partial import would be harmless, but "reported, not used" is easier to reason about).
    return import_blocks(store, roots, list(blocks), check=check)


def import_blocks(store: BlockStore, roots: list[CID], items: list[tuple[CID, bytes]], *,
                  check: Callable[[BlockStore, list[CID]], None] | None = None) -> list[CID]:
    """Store a CAR's verified blocks unless `check(view, roots)` raises first (`view`: the blocks over `store`)."""
    if check is not None:
        view = CarView(store)
        view.blocks.update(items)
        check(view, roots)
    for i in range(0, len(items), _IMPORT_BATCH):
        store.put_many(items[i:i + _IMPORT_BATCH])
    return roots


class CarView(MemoryStore):
    """A CAR's verified blocks read over the store they are about to go into; writes stay in memory."""

    def __init__(self, base: BlockStore) -> None:
        super().__init__()
        self.base = base

    def get(self, cid: CID) -> bytes:
        """The CAR's block (verified while reading the file), else the store's."""
        data = self.blocks.get(cid)
        return data if data is not None else self.base.get(cid)

    def has(self, cid: CID) -> bool:
        """In the CAR or in the store."""
        return cid in self.blocks or self.base.has(cid)


_CHUNK = 1 << 20  # bytes per read: a length field claiming more than the file holds never allocates it


class _Reader:
    """Varints and length-prefixed sections of a CAR, bounded by the bytes the file really has."""

    def __init__(self, f: BinaryIO) -> None:
        self._f = f
        self._end = _size_of(f)

    def exact(self, n: int, what: str) -> bytes:
        """The next `n` bytes (ValueError if the file ends first)."""
        if n == 0 and what == "block section":
            raise ValueError("empty block section (a section holds a CID and its data)")
        if self._end is not None:
            left = self._end - self._f.tell()
            if n > left:
                raise ValueError(f"truncated CAR file: a {what} of {n} bytes, but only {left} bytes remain")
        parts: list[bytes] = []
        need = n
        while need:
            part = self._f.read(min(need, _CHUNK))
            if not part:
                raise ValueError(f"truncated CAR file: a {what} of {n} bytes ends after {n - need}")
            parts.append(part)
            need -= len(part)
        return b"".join(parts)

    def uvarint(self) -> int | None:
        """The next unsigned varint, or None at a clean end of file."""
        value = shift = 0
        for i in range(10):
            b = self._f.read(1)
            if not b:
                if i == 0:
                    return None
                raise ValueError("truncated CAR file")
            value |= (b[0] & 0x7F) << shift
            if not b[0] & 0x80:
                return value
            shift += 7
        raise ValueError("bad varint in CAR file")


def _size_of(f: BinaryIO) -> int | None:
    """The file's total size when it is a regular file or an in-memory buffer, else None (a pipe)."""
    if isinstance(f, io.BytesIO):
        return len(f.getbuffer())
    try:
        st = os.fstat(f.fileno())
    except (OSError, AttributeError, io.UnsupportedOperation):
        return None
    return st.st_size if stat.S_ISREG(st.st_mode) else None
