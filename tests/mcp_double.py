"""A small MCP server (the SDK's MCPServer) the MCP client tests start as a real process.

    python mcp_double.py stdio          -> over stdin/stdout
    python mcp_double.py http PORT      -> streamable HTTP on 127.0.0.1:PORT/mcp
    python mcp_double.py sse PORT       -> SSE on 127.0.0.1:PORT/sse
    python mcp_double.py stdio --parent-report FILE
                                        -> first writes to FILE what it could read of the environment
                                           of the process that started it (/proc/PPID/environ)
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

from mcp.server.mcpserver import Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("double")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def environment() -> str:
    """The server's process id and its environment (names and values), as JSON."""
    return json.dumps({"pid": os.getpid(), "env": dict(os.environ)})


@server.tool()
async def slow(seconds: float) -> str:
    """Answer after `seconds`."""
    await asyncio.sleep(seconds)
    return "done"


@server.tool()
def fail(message: str) -> str:
    """Fail with `message` (an error result)."""
    raise ToolError(message)


@server.tool()
def picture() -> Image:
    """A tiny PNG image."""
    return Image(data=b"\x89PNG\r\n\x1a\n" + b"\0" * 16, format="png")


def report_parent_environment(path: str) -> None:
    """Write to `path` what this process can read of its parent's environment, or why it cannot (JSON)."""
    parent = os.getppid()
    try:
        with open(f"/proc/{parent}/environ", "rb") as f:
            seen = f.read().decode("utf-8", "replace").replace("\0", "\n")
    except OSError as exc:
        seen = f"{type(exc).__name__}: {exc.strerror}"
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"parent": parent, "seen": seen}, f)


if __name__ == "__main__":
    how = sys.argv[1]
    if sys.argv[2:3] == ["--parent-report"]:
        report_parent_environment(sys.argv[3])
    if how == "stdio":
        server.run()
    elif how == "http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    elif how == "sse":
        server.run("sse", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        raise SystemExit(f"unknown transport {how!r}")
