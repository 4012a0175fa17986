"""CARv1 export and import (the format of `ipfs dag export` / `ipfs dag import`).

Layout: varint(len(header)) + dag-cbor {"roots": [links], "version": 1}, then for each block
varint(len(cid) + len(data)) + binary CID + data. Export walks the DAG from the roots (dag-cbor
links; raw blocks are leaves) unless told which blocks to write; import verifies every block
against its CID before storing any of them.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Iterator
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
    """Parse a CARv1: (roots, iterator of verified (cid, data)); CorruptBlock on a mismatch."""
    if isinstance(path_or_file, bytes):
        f: BinaryIO = io.BytesIO(path_or_file)
    elif isinstance(path_or_file, (str, Path)):
        f = open(path_or_file, "rb")  # noqa: SIM115 - closed by the iterator below
    else:
        f = path_or_file
    header_len = _read_uvarint(f)
    if header_len is None:
        raise ValueError("not a CAR file: empty")
    try:
        header = libipld.decode_dag_cbor(_read_exact(f, header_len))
    except ValueError as e:
        raise ValueError(f"not a CAR file: bad header ({e})") from None
    if not isinstance(header, dict) or header.get("version") != 1:
        version = header.get("version") if isinstance(header, dict) else None
        raise ValueError(f"unsupported CAR version {version!r} (only CARv1 is read)")
    roots = [cid_str(r) for r in header.get("roots", [])]

    def blocks() -> Iterator[tuple[CID, bytes]]:
        try:
            while (size := _read_uvarint(f)) is not None:
                section = _read_exact(f, size)
                n = cid_length(section)
                cid, data = cid_str(section[:n]), section[n:]
                if not verify(section[:n], data):
                    raise CorruptBlock(cid, "CAR block does not match its CID")
                yield cid, data
        finally:
            if f is not path_or_file:
                f.close()

    return roots, blocks()


def import_car(store: BlockStore, path_or_file: str | Path | BinaryIO | bytes) -> list[CID]:
    """Verify and store every block of a CARv1; its roots. Nothing is stored if any block is corrupt."""
    roots, blocks = read_car(path_or_file)
    # Verify all first so a bad file leaves the store untouched (blocks are content-addressed, so a
    # partial import would be harmless, but "reported, not used" is easier to reason about).
    items = list(blocks)
    for i in range(0, len(items), _IMPORT_BATCH):
        store.put_many(items[i:i + _IMPORT_BATCH])
    return roots


def _read_exact(f: BinaryIO, n: int) -> bytes:
    data = f.read(n)
    if len(data) != n:
        raise ValueError("truncated CAR file")
    return data


def _read_uvarint(f: BinaryIO) -> int | None:
    """The next unsigned varint, or None at a clean end of file."""
    value = shift = 0
    for i in range(10):
        b = f.read(1)
        if not b:
            if i == 0:
                return None
            raise ValueError("truncated CAR file")
        value |= (b[0] & 0x7F) << shift
        if not b[0] & 0x80:
            return value
        shift += 7
    raise ValueError("bad varint in CAR file")
