"""Serve memory: what 60 clients each sending an 8 MB body do to a running `loom serve`.

Usage: .venv/bin/python benchmarks/serve_memory.py [--clients 60] [--mb 8] [--shape string|list]
Starts `loom serve --port 0 --ctx 512 --threads 1` (the default embedded model) from this checkout,
then opens all the connections at once; each sends one POST /v1/completions whose body is valid
JSON holding an 8 MB prompt and `n: 999`, which the server refuses as soon as it has parsed it, so
the model never tokenizes or generates. The server's RSS is sampled every 20 ms from /proc: before,
at its peak, and 3 s after the last reply. Prints the replies' statuses and the three figures;
writes nothing.

Measured here (2 cores, 24 GB, 2026-11-29, 60 x 8 MB, qwen2.5-coder-0.5b loaded), one run each:
  main before issue 34, --shape string:  RSS 617 -> peak 1,055 -> after 618 MB; 60 x 400 (all 60 bodies read)
  main before issue 34, --shape list:    RSS 617 -> peak 1,089 -> after 715 MB; 60 x 400
  with the limits,      --shape string:  RSS 617 -> peak   686 -> after 634 MB; 4 x 400, 56 x 503
  with the limits,      --shape list:    RSS 617 -> peak   810 -> after 665 MB; 4 x 400, 56 x 503
The issue's figure (748 -> 2,425 -> 1,543 MB) was not reproduced with these bodies: its clients'
requests are not known; main's growth here is about one copy of every body at once (60 x 8 MB).
With the limits at most 32 MiB of bodies are held at once (4 of 8 MB); the other requests are
answered 503 with Retry-After before their bodies are read. Parsed JSON can take several times
its bytes (the list shape: ~+190 MB for 4 bodies), which the byte cap bounds but does not count.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).parents[1]


def rss_mb(pid: int) -> float:
    """The process's resident set size in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


async def one_client(port: int, body: bytes) -> str:
    """Send one request; its status, or how the connection ended."""
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        head = (f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
        writer.write(head)
        writer.write(body)
        sent = asyncio.ensure_future(writer.drain())
        status_line = await asyncio.wait_for(reader.readline(), 300)
        sent.cancel()
        writer.close()
        return status_line.split()[1].decode() if status_line else "closed"
    except (ConnectionError, OSError) as exc:
        return type(exc).__name__


async def load(port: int, clients: int, body: bytes) -> Counter[str]:
    """All clients at once; how many got each status."""
    return Counter(await asyncio.gather(*(one_client(port, body) for _ in range(clients))))


def main() -> None:
    """Run the measurement and print it."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=60)
    parser.add_argument("--mb", type=float, default=8.0)
    parser.add_argument("--shape", choices=("string", "list"), default="string",
                        help="the prompt: one string of the body's size, or a list of 20-character strings")
    args = parser.parse_args()
    size = int(args.mb * 1_000_000)
    if args.shape == "string":
        prefix, suffix = b'{"n": 999, "prompt": "', b'"}'
        body = prefix + b"a" * (size - len(prefix) - len(suffix)) + suffix
    else:
        item = b'"' + b"a" * 20 + b'",'
        body = b'{"n": 999, "prompt": [' + item * (size // len(item)) + b'"a"]}'

    proc = subprocess.Popen([sys.executable, "-m", "thoughtloom", "serve", "--port", "0", "--ctx", "512",
                             "--threads", "1"], cwd=ROOT, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        if not line.startswith("serving "):
            raise SystemExit(f"loom serve did not start: {line or proc.communicate()[1]}")
        port = int(line.rsplit(":", 1)[1].split("/")[0])
        time.sleep(1.0)
        before = rss_mb(proc.pid)
        peak = before
        done: list[Counter[str]] = []

        def run() -> None:
            done.append(asyncio.run(load(port, args.clients, body)))

        thread = threading.Thread(target=run)
        thread.start()
        while thread.is_alive():
            peak = max(peak, rss_mb(proc.pid))
            time.sleep(0.02)
        thread.join()
        end = time.monotonic() + 3.0
        while time.monotonic() < end:
            peak = max(peak, rss_mb(proc.pid))
            time.sleep(0.02)
        after = rss_mb(proc.pid)
    finally:
        proc.terminate()
        proc.communicate(timeout=30)
    statuses = ", ".join(f"{n} x {status}" for status, n in sorted(done[0].items()))
    print(f"{args.clients} clients x {args.mb:g} MB ({args.shape}): {statuses}")
    print(f"RSS {before:,.0f} MB -> peak {peak:,.0f} MB -> after {after:,.0f} MB")


if __name__ == "__main__":
    main()
