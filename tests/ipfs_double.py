"""An in-process HTTP double of the Kubo RPC endpoints IPFSStore uses, on 127.0.0.1 in a thread.

Implements POST /api/v0/{block/put, block/get, block/stat, pin/add, pin/ls, dag/export, dag/import}
with Kubo's JSON shapes (errors: HTTP 500 {"Message", "Code": 0, "Type": "error"}; GET: 405),
blocks in memory. Fault modes for the verification tests: `corrupt_reads` flips a byte in every
block returned, `lie_on_put` answers block/put with some other CID, `ignore_cid_codec` behaves
like js-ipfs (it ignores Kubo's `cid-codec` and keys the block as dag-pb unless the older
`format=` parameter is given).
"""

from __future__ import annotations

import io
import json
import threading
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from thoughtloom.store.blocks import CID, MissingBlock, cid_of, normalize
from thoughtloom.store.car import export_car, read_car

CODECS = {"raw": 0x55, "dag-cbor": 0x71, "dag-pb": 0x70, "dag-json": 0x0129}


@dataclass
class IPFSDouble:
    """The double's state, shared with the handler threads."""

    blocks: dict[CID, bytes] = field(default_factory=dict)
    pins: set[CID] = field(default_factory=set)
    calls: list[str] = field(default_factory=list)
    corrupt_reads: bool = False
    lie_on_put: bool = False
    ignore_cid_codec: bool = False
    url: str = ""

    # The read side of a BlockStore, so the package's CAR writer can walk the double's blocks.
    def get(self, cid: CID) -> bytes:
        try:
            return self.blocks[cid]
        except KeyError:
            raise MissingBlock(cid, "ipfs double") from None

    def has(self, cid: CID) -> bool:
        return cid in self.blocks


class _Error(Exception):
    def __init__(self, message: str, status: int = 500) -> None:
        super().__init__(message)
        self.status = status


def _multipart_file(content_type: str, body: bytes) -> bytes:
    """The first part's payload of a multipart/form-data body."""
    boundary = content_type.split("boundary=", 1)[1].strip().strip('"').encode()
    part = body.split(b"--" + boundary)[1]
    payload = part.split(b"\r\n\r\n", 1)[1]
    return payload[:-2] if payload.endswith(b"\r\n") else payload


def _handler(state: IPFSDouble) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:  # keep test output quiet
            pass

        def do_GET(self) -> None:
            # Kubo's RPC is POST-only since 0.5 (browsers must not trigger it cross-site).
            self._send(405, b"405 - Method Not Allowed\n", "text/plain")

        def do_POST(self) -> None:
            url = urllib.parse.urlsplit(self.path)
            query = urllib.parse.parse_qs(url.query)
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            command = url.path.removeprefix("/api/v0/")
            state.calls.append(command)
            try:
                handler = getattr(self, "_" + command.replace("/", "_"), None)
                if handler is None:
                    raise _Error("404 page not found", 404)
                handler(query, body)
            except _Error as e:
                payload = json.dumps({"Message": str(e), "Code": 0, "Type": "error"}).encode()
                self._send(e.status, payload, "application/json")

        def _send(self, status: int, payload: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def _json(self, obj: object) -> None:
            self._send(200, (json.dumps(obj) + "\n").encode(), "application/json")

        def _arg(self, query: dict[str, list[str]]) -> CID:
            if "arg" not in query:
                raise _Error("argument \"cid\" is required", 400)
            try:
                return normalize(query["arg"][0])
            except ValueError:
                raise _Error(f"invalid path {query['arg'][0]!r}: invalid cid") from None

        def _need(self, cid: CID) -> bytes:
            if cid not in state.blocks:
                raise _Error(f"block was not found locally (offline): ipld: could not find {cid}")
            return state.blocks[cid]

        def _block_put(self, query: dict[str, list[str]], body: bytes) -> None:
            data = _multipart_file(self.headers["Content-Type"], body)
            if state.ignore_cid_codec:
                codec = CODECS.get(query["format"][0]) if "format" in query else CODECS["dag-pb"]
            else:
                codec = CODECS.get(query.get("cid-codec", ["raw"])[0])
            if codec is None or query.get("mhtype", ["sha2-256"])[0] != "sha2-256":
                raise _Error("unsupported codec or multihash", 400)
            cid = cid_of(data, codec)
            state.blocks[cid] = data
            key = cid_of(data + b"!", codec) if state.lie_on_put else cid
            self._json({"Key": key, "Size": len(data)})

        def _block_get(self, query: dict[str, list[str]], body: bytes) -> None:
            data = self._need(self._arg(query))
            if state.corrupt_reads and data:
                data = bytes([data[0] ^ 0xFF]) + data[1:]
            self._send(200, data, "text/plain")

        def _block_stat(self, query: dict[str, list[str]], body: bytes) -> None:
            cid = self._arg(query)
            self._json({"Key": cid, "Size": len(self._need(cid))})

        def _pin_add(self, query: dict[str, list[str]], body: bytes) -> None:
            cid = self._arg(query)
            self._need(cid)
            state.pins.add(cid)
            self._json({"Pins": [cid]})

        def _pin_ls(self, query: dict[str, list[str]], body: bytes) -> None:
            self._json({"Keys": {cid: {"Type": "recursive"} for cid in state.pins}})

        def _dag_export(self, query: dict[str, list[str]], body: bytes) -> None:
            root = self._arg(query)
            self._need(root)
            out = io.BytesIO()
            export_car(state, [root], out)  # type: ignore[arg-type]  # the double is read-only here
            self._send(200, out.getvalue(), "application/vnd.ipld.car")

        def _dag_import(self, query: dict[str, list[str]], body: bytes) -> None:
            car = _multipart_file(self.headers["Content-Type"], body)
            try:
                roots, blocks = read_car(car)
                items = list(blocks)
            except ValueError as e:
                raise _Error(f"import failed: {e}") from None
            for cid, data in items:
                state.blocks[cid] = data
            lines = []
            for root in roots:
                if query.get("pin-roots", ["true"])[0] == "true":
                    state.pins.add(root)
                lines.append(json.dumps({"Root": {"Cid": {"/": root}, "PinErrorMsg": ""}}))
            if query.get("stats", ["false"])[0] == "true":
                lines.append(json.dumps({"Stats": {"BlockCount": len(items),
                                                   "BlockBytesCount": sum(len(d) for _, d in items)}}))
            self._send(200, ("\n".join(lines) + "\n").encode(), "application/json")

    return Handler


@contextmanager
def serve_ipfs() -> Iterator[IPFSDouble]:
    """Run the double on an ephemeral 127.0.0.1 port for the duration of the block."""
    state = IPFSDouble()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    server.daemon_threads = True
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), name="ipfs-double", daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)

