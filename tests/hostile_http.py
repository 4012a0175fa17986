"""A hostile HTTP server on 127.0.0.1: raw sockets, answering every request with a scripted byte stream.

http.server cannot send a garbage status line, a broken chunked body or a body that never ends, so
this one writes the bytes itself. Each script gets the connection's socket and a `stopped` event set
at teardown (an endless script stops there, or when the client hangs up).
"""

from __future__ import annotations

import socket
import socketserver
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

Script = Callable[[socket.socket, threading.Event], None]


def head(*lines: str) -> bytes:
    """A status line and headers, ended by the blank line."""
    return "".join(f"{line}\r\n" for line in lines).encode("latin-1") + b"\r\n"


def send(data: bytes) -> Script:
    """Send these bytes, then close."""
    return lambda conn, stopped: conn.sendall(data)


def trickle(prefix: bytes, every_s: float) -> Script:
    """Send `prefix`, then one byte every `every_s` seconds until the client hangs up."""
    def script(conn: socket.socket, stopped: threading.Event) -> None:
        conn.sendall(prefix)
        while not stopped.wait(every_s):
            conn.sendall(b"x")
    return script


def endless(prefix: bytes, sent: list[int]) -> Script:
    """Send `prefix`, then a body that never ends (64 KB at a time); bytes of body sent are added to `sent`."""
    block = b"0" * 65536

    def script(conn: socket.socket, stopped: threading.Event) -> None:
        conn.sendall(prefix)
        while not stopped.is_set():
            conn.sendall(block)
            sent[0] += len(block)
    return script


@contextmanager
def hostile(script: Script) -> Iterator[str]:
    """Serve `script` for every request on an ephemeral 127.0.0.1 port; the base URL."""
    stopped = threading.Event()

    class Handler(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            request = b""
            self.request.settimeout(10)
            try:
                while b"\r\n\r\n" not in request and len(request) < 65536:
                    got = self.request.recv(4096)
                    if not got:
                        return
                    request += got
                script(self.request, stopped)
            except OSError:  # the client hung up: what a refusal looks like from here
                pass

    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        stopped.set()
        server.shutdown()
        server.server_close()
