"""The one HTTP download behind `loom data fetch` and `loom models fetch`: a deadline, a size cap, one-line errors.

A server is not trusted to behave: it may stall, trickle a byte at a time, send more than it should,
never end, or send something that is not HTTP at all. `stream` therefore

- ends the whole download at an overall deadline (not only when one read waits too long): a watchdog
  shuts the connection's socket when the deadline passes, whatever the download is waiting for, and
  the name lookup (which no socket timeout reaches) is given up at the same deadline;
- reads at most `max_bytes` (the pinned size of the file, or a documented cap), refusing the answer as
  soon as the server announces or sends more;
- hands the body over block by block, so the caller streams it to a file and never holds it whole;
- turns every failure (a bad URL, a refused connection, a broken status line or header, a body cut
  short or badly chunked, the deadline) into one DownloadError line naming the URL.
"""

from __future__ import annotations

import functools
import http.client
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

#: Bytes read per step.
CHUNK = 1 << 20
#: Seconds one read may wait for the server before the download is abandoned (the deadline may come first).
IDLE_TIMEOUT_S = 30.0
#: The default deadline is this many seconds, plus the expected size at DEADLINE_RATE bytes a second.
DEADLINE_BASE_S = 60.0
DEADLINE_RATE = 256 * 1024
#: The cap on a download whose size is not pinned (a data set's original that is checked only after its split).
UNPINNED_MAX_BYTES = 128 * 1024 * 1024


class DownloadError(ValueError):
    """A download that failed or was refused; its message is one line naming the URL."""


def default_deadline(size: int) -> float:
    """Seconds a download of `size` bytes may take by default: a minute plus the size at 256 KiB/s."""
    return DEADLINE_BASE_S + size / DEADLINE_RATE


def stream(url: str, *, max_bytes: int, deadline_s: float, pinned: bool = True,
           idle_s: float = IDLE_TIMEOUT_S) -> Iterator[bytes]:
    """The body of a GET of `url`, block by block: at most `max_bytes` of it, all of it within `deadline_s`.

    `pinned`: `max_bytes` is the file's pinned size (else a cap on a file whose size is not known).

    Raises DownloadError (one line naming the URL) for anything but a complete answer. Close the
    iterator (or exhaust it) to release the connection.
    """
    _check_url(url)
    deadline = _Deadline(deadline_s)
    try:
        yield from _body(url, max_bytes, deadline, idle_s, pinned)
    finally:
        deadline.cancel()


def _check_url(url: str) -> None:
    """A one-line refusal of anything but an http(s) URL with a host (and a valid port)."""
    def invalid(why: str) -> DownloadError:
        return DownloadError(f"cannot download {url}: not a valid http:// or https:// URL ({why})")

    if any(ord(c) < 33 or ord(c) == 127 for c in url):
        raise invalid("it holds a space or a control character")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise invalid(str(exc)) from None
    if parts.scheme not in ("http", "https"):
        raise invalid(f"the scheme is {parts.scheme + ':' if parts.scheme else 'missing'}")
    if not parts.hostname:
        raise invalid("no host")
    if port == 0:
        raise invalid("port 0")


def _body(url: str, max_bytes: int, deadline: _Deadline, idle_s: float, pinned: bool) -> Iterator[bytes]:
    """stream's work, once the URL is known to be one and the deadline is running."""
    limit = f"the pinned {max_bytes:,} bytes" if pinned else f"the {max_bytes:,}-byte cap on a file of no pinned size"

    def failed(what: str) -> DownloadError:
        if deadline.expired:
            return DownloadError(f"cannot download {url}: not finished within its deadline of {deadline.seconds:g} s "
                                 f"(the server is too slow or stalled)")
        return DownloadError(f"cannot download {url}: {what}")

    def broken(exc: BaseException) -> str:
        detail = str(exc).strip()[:200] or type(exc).__name__
        return f"the server's answer is not valid HTTP ({type(exc).__name__}: {detail})"

    def lost(exc: BaseException) -> str:
        if isinstance(exc, TimeoutError):
            return f"the server sent nothing for {min(idle_s, deadline.seconds):g} s"
        return str(getattr(exc, "strerror", None) or exc)

    opener = urllib.request.build_opener(_WatchedHTTP(deadline), _WatchedHTTPS(deadline))
    try:
        response = opener.open(url, timeout=min(idle_s, deadline.seconds))
    except urllib.error.HTTPError as exc:
        exc.close()
        # A 3xx here is a redirect urllib would not follow (to another scheme, or too many): it says which.
        why = f" ({str(exc.reason)[:200]})" if 300 <= exc.code < 400 else ""
        raise failed(f"HTTP {exc.code}{why}") from None
    except urllib.error.URLError as exc:
        reason = exc.reason
        if isinstance(reason, http.client.HTTPException):
            raise failed(broken(reason)) from None
        raise failed(lost(reason) if isinstance(reason, BaseException) else str(reason)) from None
    except http.client.HTTPException as exc:  # a broken status line or headers
        raise failed(broken(exc)) from None
    except (OSError, ValueError, OverflowError) as exc:  # a refused or reset connection; an unusable address
        raise failed(lost(exc)) from None
    with response:
        announced = response.length
        if announced is not None and announced > max_bytes:
            raise failed(f"the server announces {announced:,} bytes, more than {limit}")
        got = 0
        while True:
            try:
                # One byte past the cap is enough to know the answer is too long.
                block = response.read(min(CHUNK, max_bytes + 1 - got))
            except http.client.IncompleteRead as exc:
                got += len(exc.partial)
                if response.chunked:
                    raise failed(f"the server's answer is not valid HTTP (a broken chunked body after {got:,} "
                                 f"bytes)") from None
                raise failed(f"the connection closed after {got:,} of {got + (exc.expected or 0):,} bytes") from None
            except http.client.HTTPException as exc:
                raise failed(broken(exc)) from None
            except (OSError, ValueError) as exc:  # the connection's failure (the caller's writes are not in here)
                raise failed(lost(exc)) from None
            if deadline.expired:
                raise failed("")
            if not block:
                if announced is not None and got < announced:
                    raise failed(f"the connection closed after {got:,} of {announced:,} bytes")
                return
            got += len(block)
            if got > max_bytes:
                raise failed(f"the server sent more than {limit}")
            yield block


class _Deadline:
    """The whole download's deadline: when it passes, every socket the download opened is shut, which
    wakes a read blocked on a server that trickles or stalls."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.expired = False
        self._end = time.monotonic() + seconds
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True
        self._timer.start()

    def left(self) -> float:
        """Seconds until the deadline (0 once it has passed)."""
        return max(0.0, self._end - time.monotonic())

    def connect(self, address: tuple[str, int], timeout: Any, source_address: Any = None) -> socket.socket:
        """socket.create_connection, watched: the socket is shut at the deadline."""
        if isinstance(timeout, (int, float)):  # else http.client's "no timeout given" marker
            timeout = max(0.001, min(timeout, self.left()))
        sock = self._open(self._resolve(*address), timeout, source_address)
        with self._lock:
            if self.expired:
                sock.close()
                raise TimeoutError("the deadline passed")
            self._sockets.append(sock)
        return sock

    def _resolve(self, host: str, port: int) -> list[tuple[Any, ...]]:
        """The host's addresses, or TimeoutError at the deadline: a name lookup blocks in the C library
        where no socket timeout reaches it, so it runs in a thread the download stops waiting for."""
        found: list[list[tuple[Any, ...]]] = []
        failed: list[OSError] = []

        def lookup() -> None:
            try:
                found.append(socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM))
            except OSError as exc:
                failed.append(exc)

        worker = threading.Thread(target=lookup, name="download-dns", daemon=True)
        worker.start()
        worker.join(self.left())
        if failed:
            raise failed[0]
        if not found:  # the join gave up: the deadline has passed
            self.expired = True
            raise TimeoutError(f"looking up {host} did not finish within the deadline")
        return found[0]

    @staticmethod
    def _open(addresses: list[tuple[Any, ...]], timeout: Any, source_address: Any) -> socket.socket:
        """A connection to the first of the resolved addresses that answers (create_connection's order)."""
        error: OSError = OSError("the name resolved to no address")
        for *_, sockaddr in addresses:
            try:
                return socket.create_connection(sockaddr[:2], timeout, source_address)
            except OSError as exc:
                error = exc
        raise error

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            for sock in self._sockets:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass  # already closed

    def cancel(self) -> None:
        """Stop the watchdog (the download is over)."""
        self._timer.cancel()


def _watched(deadline: _Deadline, connection: type[http.client.HTTPConnection], *args: Any,
             **kwargs: Any) -> http.client.HTTPConnection:
    conn = connection(*args, **kwargs)
    # http.client opens its socket through this attribute (HTTPS wraps the same socket in TLS): the one
    # place every connection of a download, redirects and TLS handshakes included, can be watched.
    conn._create_connection = deadline.connect  # type: ignore[attr-defined]
    return conn


class _WatchedHTTP(urllib.request.HTTPHandler):
    def __init__(self, deadline: _Deadline) -> None:
        super().__init__()
        self._deadline = deadline

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(functools.partial(_watched, self._deadline, http.client.HTTPConnection), req)


class _WatchedHTTPS(urllib.request.HTTPSHandler):
    def __init__(self, deadline: _Deadline) -> None:
        super().__init__()
        self._deadline = deadline

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(functools.partial(_watched, self._deadline, http.client.HTTPSConnection), req,
                            context=self._context)  # type: ignore[attr-defined]  # set by HTTPSHandler, not in typeshed
