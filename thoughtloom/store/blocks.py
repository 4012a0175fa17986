"""IPLD blocks: dag-cbor and raw encoding, CIDv1 (sha2-256) addressing, verification.

A block is `(cid, data)`: `data` the encoded bytes, `cid` the canonical CIDv1 string (base32
multibase, "b..."). Node-like objects are encoded as dag-cbor by libipld (Rust); large content goes
in separate `raw` (0x55) blocks. Links between blocks are `Link` values (a `bytes` subclass holding
the binary CID), which encode as dag-cbor tag 42 and come back from `decode` as `Link` again.

libipld writes *any* `bytes` value whose prefix parses as a CID as a tag-42 link, so a plain
`bytes` value that looks like a CID would silently change meaning; `encode` refuses such values
(wrap real links with `link()`), which also keeps the output byte-identical to the pure-Python
reference codec (`dag-cbor` + `multiformats`).
"""

from __future__ import annotations

import gc
import hashlib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any, Self

import libipld

CID = str
"""A CID in canonical string form: CIDv1, base32 lower-case multibase ("b...")."""

DAG_CBOR = 0x71
RAW = 0x55
SHA2_256 = 0x12
SHA2_512 = 0x13
IDENTITY = 0x00

# CIDv1 header for the two codecs this package writes: version 1, codec, sha2-256, 32-byte digest.
_PREFIX = {DAG_CBOR: b"\x01\x71\x12\x20", RAW: b"\x01\x55\x12\x20"}


class MissingBlock(KeyError):
    """A block is not in the store."""

    def __init__(self, cid: CID, where: str = "store") -> None:
        super().__init__(cid)
        self.cid = cid
        self.where = where

    def __str__(self) -> str:  # KeyError would repr() the argument; keep it one readable line
        return f"block {self.cid} not found in {self.where}"


class CorruptBlock(ValueError):
    """A block's bytes do not hash to its CID (or a backend returned a different CID)."""

    def __init__(self, cid: CID, detail: str = "data does not match its CID") -> None:
        super().__init__(f"corrupt block {cid}: {detail}")
        self.cid = cid


class Link(bytes):
    """A link to another block: the binary CID; encodes as a dag-cbor tag-42 link."""

    __slots__ = ()

    def __new__(cls, cid: CID | bytes) -> Self:
        """Make a link from a CID string or binary CID."""
        return super().__new__(cls, cid_bytes(cid) if isinstance(cid, str) else cid)

    @property
    def cid(self) -> CID:
        """The canonical CID string."""
        return cid_str(self)

    def __str__(self) -> str:
        return cid_str(self)

    def __repr__(self) -> str:
        return f"Link({cid_str(self)!r})"

    def __reduce__(self) -> tuple[Any, ...]:  # pickle/copy as a Link, not as bytes
        return (Link, (bytes(self),))


def link(cid: CID | bytes) -> Link:
    """A `Link` to `cid` (string or binary), for storing in an object passed to `encode`."""
    return Link(cid)


# --- CID string <-> bytes -------------------------------------------------------------------------


def cid_str(cid: bytes) -> CID:
    """The canonical string form (base32 multibase) of a binary CID."""
    if cid[:1] == b"\x12":  # CIDv0 (bare sha2-256 multihash): upgrade, as Kubo does for v1 output
        cid = b"\x01\x70" + bytes(cid)
    return libipld.encode_multibase("b", bytes(cid))  # Rust; base64.b32encode is ~15x slower


def cid_bytes(cid: CID) -> bytes:
    """The binary form of a CID string (base32 "b..." fast path; other multibases and CIDv0 too)."""
    if cid[:1] == "b":
        try:
            return libipld.decode_multibase(cid)[1]
        except ValueError:
            raise ValueError(f"not a CID: {cid!r}") from None
    try:
        parts = libipld.decode_cid(cid)
    except ValueError:
        raise ValueError(f"not a CID: {cid!r}") from None
    mh = _varint(parts["hash"]["code"]) + _varint(parts["hash"]["size"]) + parts["hash"]["digest"]
    return b"\x01" + _varint(parts["codec"]) + mh  # CIDv0 becomes its CIDv1 (dag-pb) equivalent


def normalize(cid: CID | bytes) -> CID:
    """The canonical string form of any CID (string in any multibase, v0, or binary)."""
    if isinstance(cid, (bytes, bytearray, memoryview)):
        return cid_str(bytes(cid))
    if cid[:1] == "b" and cid == cid.lower():
        return cid
    return cid_str(cid_bytes(cid))


def codec_of(cid: CID | bytes) -> int:
    """The multicodec of a CID (0x71 dag-cbor, 0x55 raw, ...)."""
    if type(cid) is str:
        # The first 25 bits of a base32 CIDv1 (version, codec, hash code) fix "bafyre" / "bafkre".
        if cid.startswith("bafyre"):
            return DAG_CBOR
        if cid.startswith("bafkre"):
            return RAW
    b = cid_bytes(cid) if isinstance(cid, str) else cid
    if b[:1] == b"\x12":
        return 0x70
    code, _ = _read_varint(b, 1)
    return code


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _read_varint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """(value, position after it); ValueError if truncated or longer than 9 bytes."""
    value = shift = 0
    for i in range(pos, min(pos + 9, len(buf))):
        byte = buf[i]
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, i + 1
        shift += 7
    raise ValueError("bad varint")


def cid_length(buf: bytes | memoryview, pos: int = 0) -> int:
    """Length in bytes of the binary CID starting at `buf[pos]` (for CAR parsing)."""
    if buf[pos] == 0x12 and pos + 1 < len(buf) and buf[pos + 1] == 0x20:
        return 34  # CIDv0
    version, p = _read_varint(buf, pos)
    if version != 1:
        raise ValueError(f"unsupported CID version {version}")
    _, p = _read_varint(buf, p)  # codec
    _, p = _read_varint(buf, p)  # hash function
    size, p = _read_varint(buf, p)
    if p + size > len(buf):
        raise ValueError("truncated CID")
    return p + size - pos


# --- hashing and verification ---------------------------------------------------------------------


def cid_of(data: bytes, codec: int = DAG_CBOR) -> CID:
    """The CIDv1 (sha2-256) of `data` under `codec`."""
    prefix = _PREFIX.get(codec) or (b"\x01" + _varint(codec) + b"\x12\x20")
    return cid_str(prefix + hashlib.sha256(data).digest())


def verify(cid: CID | bytes, data: bytes) -> bool:
    """Whether `data` hashes to `cid` (sha2-256, sha2-512 or identity multihashes; else ValueError)."""
    b = cid_bytes(cid) if isinstance(cid, str) else bytes(cid)
    if len(b) == 36 and b[0] == 1 and b[2:4] == b"\x12\x20" and b[1] < 0x80:  # v1 sha2-256: fast path
        return hashlib.sha256(data).digest() == b[4:]
    if b[:1] == b"\x12":  # CIDv0
        code, p = SHA2_256, 1
    else:
        _, p = _read_varint(b, 0)
        _, p = _read_varint(b, p)
        code, p = _read_varint(b, p)
    size, p = _read_varint(b, p)
    digest = b[p:]
    if len(digest) != size:
        return False
    if code == SHA2_256:
        return hashlib.sha256(data).digest() == digest
    if code == SHA2_512:
        return hashlib.sha512(data).digest() == digest
    if code == IDENTITY:
        return bytes(data) == digest
    raise ValueError(f"unsupported multihash 0x{code:x} in {normalize(b)}")


# --- encoding -------------------------------------------------------------------------------------


def _check(obj: Any) -> None:
    """Refuse plain bytes that libipld would misread as a link (see module docstring)."""
    t = type(obj)
    if t is dict:
        for v in obj.values():
            tv = type(v)
            if tv is dict or tv is list or tv is bytes:
                _check(v)
    elif t is list:
        for v in obj:
            tv = type(v)
            if tv is dict or tv is list or tv is bytes:
                _check(v)
    elif t is bytes:
        try:
            libipld.decode_cid(obj)
        except ValueError:
            return
        raise ValueError("plain bytes value parses as a CID; wrap links with link(), "
                         "store other binary data in a raw block")


def encode(obj: Any) -> tuple[CID, bytes]:
    """Encode `obj` as a dag-cbor block: (CIDv1 sha2-256, bytes). Links must be `Link` values."""
    _check(obj)
    data = libipld.encode_dag_cbor(obj)
    return cid_str(_PREFIX[DAG_CBOR] + hashlib.sha256(data).digest()), data


def raw(data: bytes) -> tuple[CID, bytes]:
    """A raw (0x55) block holding `data` as is, for large content."""
    data = bytes(data)
    return cid_str(_PREFIX[RAW] + hashlib.sha256(data).digest()), data


def _links_to_link(obj: Any) -> Any:
    """Turn libipld's decoded links (bare CID bytes) into `Link` values, in place.

    Iterative and inlined (no call per container or per value): this walk is most of `decode`'s
    cost, and loading a graph decodes every node.
    """
    t = type(obj)
    if t is bytes:
        return _new_bytes(Link, obj) if _is_cid(obj) else obj
    if t is not dict and t is not list:
        return obj
    stack = [obj]
    pop, push = stack.pop, stack.append
    while stack:
        o = pop()
        if type(o) is dict:
            for k, v in o.items():
                tv = type(v)
                if tv is bytes:
                    if (len(v) == 36 and v[0] == 1 and v[2:4] == b"\x12\x20") or _is_cid(v):
                        o[k] = _new_bytes(Link, v)
                elif tv is dict or tv is list:
                    push(v)
        else:
            for i, v in enumerate(o):
                tv = type(v)
                if tv is bytes:
                    if (len(v) == 36 and v[0] == 1 and v[2:4] == b"\x12\x20") or _is_cid(v):
                        o[i] = _new_bytes(Link, v)
                elif tv is dict or tv is list:
                    push(v)
    return obj


_new_bytes = bytes.__new__  # Link(b) without the str/bytes dispatch of Link.__new__


def _is_cid(b: bytes) -> bool:
    # libipld returns tag-42 links and byte strings alike as bytes; our own blocks never hold byte
    # strings that parse as CIDs (encode refuses them), so "parses as a CID" means "was a link".
    if len(b) == 36 and b[0] == 1 and b[2:4] == b"\x12\x20" and b[1] < 0x80:
        return True  # CIDv1 sha2-256, the only kind this package writes
    try:
        libipld.decode_cid(b)
    except ValueError:
        return False
    return True


def decode(data: bytes) -> Any:
    """Decode a dag-cbor block; links come back as `Link` values (use `.cid` for the string)."""
    return _links_to_link(libipld.decode_dag_cbor(data))


def decode_block(cid: CID, data: bytes) -> Any:
    """Decode a block by its CID's codec: dag-cbor -> objects, raw -> bytes."""
    codec = codec_of(cid)
    if codec == DAG_CBOR:
        return decode(data)
    if codec == RAW:
        return bytes(data)
    raise ValueError(f"cannot decode codec 0x{codec:x} of {cid}")


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic GC: decoding allocates many dicts, which would trigger repeated full
    collections (~1 s per 100k nodes); decoded blocks hold no reference cycles to collect."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def decode_many(items: Iterable[tuple[CID, bytes]]) -> list[Any]:
    """Decode many blocks by their CIDs' codecs (faster than one by one: GC paused)."""
    with gc_paused():
        return [decode_block(cid, data) for cid, data in items]


def links(obj: Any) -> list[Link]:
    """All links in a decoded object, in encounter order (duplicates kept)."""
    out: list[Link] = []
    stack = [obj]
    while stack:
        o = stack.pop()
        t = type(o)
        if t is Link:
            out.append(o)
        elif t is dict:
            stack.extend(reversed(list(o.values())))
        elif t is list:
            stack.extend(reversed(o))
    return out
