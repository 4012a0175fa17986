"""IPFS block store over a node's HTTP RPC API (Kubo `/api/v0`; js-ipfs mostly compatible).

Every CID the node returns is checked against the locally computed one, and every block read is
verified against its CID: a node that lies or corrupts is reported (CorruptBlock), never trusted.
IPFS has no mutable names that fit "run/<id>/head", so refs are kept in a small local SQLite file
(`refs_path`, default `~/.thoughtloom/ipfs-refs.db`); `set_ref` also pins the target recursively
on the node, so a run's head and everything reachable from it (all earlier heads too) survive the
node's garbage collection.

Uses the standard library's urllib: the venv's HTTP client is `httpx2` (pulled in by openai), not
`httpx`, and this module needs nothing beyond plain POST requests.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from thoughtloom.store.blocks import (
    CID,
    CorruptBlock,
    MissingBlock,
    _read_varint,
    cid_bytes,
    codec_of,
    normalize,
    verify,
)
from thoughtloom.store.refs import REFS_SCHEMA, RefTable, TableRefs
from thoughtloom.store.store import ClosesOnExit, StoreError

_CODEC_NAMES = {0x71: "dag-cbor", 0x55: "raw", 0x70: "dag-pb", 0x0129: "dag-json"}
_NOT_FOUND = ("not found", "could not find", "ipld: could not find", "block not found")


def default_refs_path() -> Path:
    """Where IPFSStore keeps refs by default: next to the default SQLite store."""
    from thoughtloom.store.sqlite import default_store_path

    return default_store_path().parent / "ipfs-refs.db"


def _same_multihash(a: CID, b: CID) -> bool:
    """Whether two CIDs (any version/multibase) name the same multihash, i.e. the same bytes."""
    try:
        ma, mb = (cid_bytes(c) for c in (a, b))
        return ma[_read_varint(ma, 1)[1]:] == mb[_read_varint(mb, 1)[1]:]
    except ValueError:
        return False


class IPFSError(StoreError):
    """The IPFS node answered with an error (message from the node's JSON error body)."""


class IPFSStore(TableRefs, ClosesOnExit):
    """A BlockStore backed by an IPFS node's HTTP RPC API; refs live in a local SQLite file
    (deleting one leaves the node's pins: unpin by hand if wanted)."""

    def __init__(self, api_url: str, refs_path: Path | None = None, timeout_s: float = 30, *,
                 pin_refs: bool = True, offline: bool = False) -> None:
        # api_url: "http://127.0.0.1:5001" (with or without /api/v0).
        self.api_url = api_url.rstrip("/").removesuffix("/api/v0")
        self.timeout_s = timeout_s
        self.pin_refs = pin_refs
        self.offline = offline  # True: reads never go to the network, only the node's own blockstore
        self.refs_path = Path(refs_path) if refs_path is not None else default_refs_path()
        try:
            self.refs_path.parent.mkdir(parents=True, exist_ok=True)
            self._refs = sqlite3.connect(self.refs_path, isolation_level=None, check_same_thread=False)
            self._refs.execute("PRAGMA journal_mode=WAL")
            self._refs.execute(REFS_SCHEMA)
        except (OSError, sqlite3.Error) as e:
            raise StoreError(f"cannot open IPFS refs file {self.refs_path}: {e}") from None
        self._lock = threading.Lock()
        self._ref_table = RefTable(self._refs, self._lock, self.refs_path)
        # js-ipfs ignores Kubo's `cid-codec` (answering with a CIDv0 dag-pb key for the same bytes) and
        # wants the legacy `format` + `version=1`, which Kubo refuses alongside a custom `cid-codec`;
        # set on the first put whose answer shows the node ignored `cid-codec`.
        self._legacy_put = False

    # --- HTTP -------------------------------------------------------------------------------------

    def _call(self, command: str, params: dict[str, Any] | list[tuple[str, str]] | None = None,
              file: bytes | None = None, timeout_s: float | None = None) -> bytes:
        """POST /api/v0/<command>; the body bytes, or IPFSError carrying the node's message."""
        query = urllib.parse.urlencode(params or {}, doseq=True)
        url = f"{self.api_url}/api/v0/{command}" + (f"?{query}" if query else "")
        headers: dict[str, str] = {}
        body = b""
        if file is not None:  # Kubo takes uploads as multipart/form-data, one part named "file"
            boundary = uuid.uuid4().hex
            body = (
                (
                    f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="file"\r\n'
                    f"Content-Type: application/octet-stream\r\n\r\n"
                ).encode()
                + file
                + f"\r\n--{boundary}--\r\n".encode()
            )
            headers["Content-Type"] = f"multipart/form-data; boundary={boundary}"
        request = urllib.request.Request(url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=timeout_s or self.timeout_s) as response:
                return bytes(response.read())
        except urllib.error.HTTPError as e:
            detail = e.read().decode("utf-8", "replace")
            try:
                message = str(json.loads(detail).get("Message", detail))
            except (ValueError, AttributeError):
                message = detail.strip() or e.reason
            raise IPFSError(
                f"IPFS {command} failed ({e.code}): {message.splitlines()[0] if message else e.reason}"
            ) from None
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise StoreError(f"cannot reach IPFS node at {self.api_url}: {reason}") from None

    def _json(self, command: str, params: dict[str, Any] | None = None, file: bytes | None = None) -> Any:
        return json.loads(self._call(command, params, file))

    # --- blocks -----------------------------------------------------------------------------------

    def put(self, cid: CID, data: bytes) -> None:
        """Store one block; CorruptBlock if the node computes a different CID than ours."""
        cid = normalize(cid)
        if not verify(cid, data):
            raise CorruptBlock(cid, "refusing to store data that does not match its CID")
        codec = _CODEC_NAMES.get(codec_of(cid), hex(codec_of(cid)))
        key = None if self._legacy_put else self._put_block(data, {"cid-codec": codec})
        if self._legacy_put or (key and normalize(key) != cid and _same_multihash(key, cid)):
            # Same bytes and hash, other codec/version: a node (js-ipfs) that ignores `cid-codec`.
            self._legacy_put = True
            key = self._put_block(data, {"format": codec, "version": "1"})
        if not key or normalize(key) != cid:
            raise CorruptBlock(cid, f"IPFS node at {self.api_url} stored it as {key}")

    def _put_block(self, data: bytes, codec_params: dict[str, str]) -> str | None:
        """One block/put; the Key the node answers with (None if the answer has none)."""
        params = {**codec_params, "mhtype": "sha2-256", "mhlen": "32", "pin": "false"}
        answer = self._json("block/put", params, file=bytes(data))
        key = answer.get("Key") if isinstance(answer, dict) else None
        return str(key) if key else None

    def put_many(self, items: Iterable[tuple[CID, bytes]]) -> None:
        """Store many blocks: all verified first, then one request each (the RPC has no batch put).

        Not one transaction on the node: a failure part-way leaves some blocks stored, which is
        harmless for content-addressed blocks (nothing points at them until a ref does); a block
        that does not match its CID is caught before anything is sent.
        """
        batch = [(normalize(cid), bytes(data)) for cid, data in items]
        for cid, data in batch:
            if not verify(cid, data):
                raise CorruptBlock(cid, "refusing to store data that does not match its CID")
        for cid, data in batch:
            self.put(cid, data)

    def get(self, cid: CID) -> bytes:
        """The block's bytes, verified against the CID (MissingBlock / CorruptBlock)."""
        cid = normalize(cid)
        params = {"arg": cid, **({"offline": "true"} if self.offline else {})}
        try:
            data = self._call("block/get", params)
        except IPFSError as e:
            if any(s in str(e).lower() for s in _NOT_FOUND):
                raise MissingBlock(cid, f"IPFS node {self.api_url}") from None
            raise
        if not verify(cid, data):
            raise CorruptBlock(cid, f"IPFS node at {self.api_url} returned bytes that do not match the CID")
        return data

    def has(self, cid: CID) -> bool:
        """Whether the node holds the block locally (never fetches from the network)."""
        try:
            answer = self._json("block/stat", {"arg": normalize(cid), "offline": "true"})
        except IPFSError as e:
            if any(s in str(e).lower() for s in _NOT_FOUND):
                return False
            raise
        return bool(answer.get("Key"))

    def pin(self, cid: CID, recursive: bool = True) -> None:
        """Pin `cid` (and, recursively, everything it links to) so the node's GC keeps it."""
        self._json("pin/add", {"arg": normalize(cid), "recursive": "true" if recursive else "false"})

    def export_dag(self, root: CID) -> bytes:
        """The node's own CARv1 export of the DAG under `root` (`ipfs dag export`)."""
        return self._call("dag/export", {"arg": normalize(root)})

    def import_dag(self, car: bytes, pin_roots: bool = True) -> list[CID]:
        """Import a CARv1 with the node's `dag import`; the roots the node reports."""
        raw = self._call("dag/import", {"pin-roots": "true" if pin_roots else "false", "stats": "true"}, file=car)
        roots = []
        for line in raw.decode().splitlines():
            if line.strip():
                entry = json.loads(line)
                if "Root" in entry:
                    roots.append(normalize(entry["Root"]["Cid"]["/"]))
        return roots

    # --- refs (local) -----------------------------------------------------------------------------

    def set_ref(self, name: str, cid: CID) -> None:
        """Point the named ref at `cid` (locally) and pin it on the node if `pin_refs`."""
        cid = normalize(cid)
        if self.pin_refs:
            self.pin(cid)
        super().set_ref(name, cid)

    # --- lifecycle --------------------------------------------------------------------------------

    def close(self) -> None:
        """Close the local refs file."""
        with self._lock:
            self._refs.close()

    def __repr__(self) -> str:
        return f"IPFSStore({self.api_url!r})"
