"""Content-addressed storage: IPLD blocks (dag-cbor / raw, CIDv1 sha2-256) in pluggable block stores.

`blocks` encodes and verifies, `store` defines the BlockStore protocol, `sqlite` is the default
store, `ipfs` talks to an IPFS node's HTTP RPC API, `cache` is an LRU in front of any store, and
`car` moves DAGs in and out as CARv1 files.
"""

from thoughtloom.store.blocks import (
    CID,
    CorruptBlock,
    Link,
    MissingBlock,
    cid_of,
    decode,
    encode,
    link,
    raw,
    verify,
)
from thoughtloom.store.sqlite import SQLiteStore, default_store_path
from thoughtloom.store.store import BlockStore, StoreError, get_obj, put_obj

__all__ = [
    "CID",
    "BlockStore",
    "CorruptBlock",
    "Link",
    "MissingBlock",
    "SQLiteStore",
    "StoreError",
    "cid_of",
    "decode",
    "default_store_path",
    "encode",
    "get_obj",
    "link",
    "put_obj",
    "raw",
    "verify",
]
