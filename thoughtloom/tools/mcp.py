"""An MCP client: servers from a config file, each server's tools as `Tool`s named `SERVER.tool`.

The config file has the common shape::

    {"mcpServers": {
        "time": {"command": "mcp-server-time", "args": ["--local-timezone", "UTC"], "env": {"TZ": "UTC"}},
        "docs": {"url": "http://127.0.0.1:8000/mcp", "headers": {"Authorization": "Bearer ${DOCS_TOKEN}"}}
    }}

A server with a `command` is started as a subprocess and spoken to over its stdin/stdout; one
with a `url` is reached over streamable HTTP, or over SSE when the url ends with `/sse` (or
`"type": "sse"` says so). `${NAME}` in an `env` or `headers` value is replaced by that variable
of thoughtloom's own environment when the server is started.

A stdio server does not inherit thoughtloom's environment: it gets the `env` its entry gives and,
from the MCP SDK's short list of safe variables, HOME, LOGNAME, PATH, SHELL, TERM and USER. So a
server's environment holds none of the user's API keys unless its entry grants them
(`"KEY": "${KEY}"`). It runs as the user, though, and could read them in `/proc/<our pid>/environ`
unless this process is non-dumpable: `loom`'s main makes it so
(`grounding.neighbours.make_process_private`), and an application embedding thoughtloom calls that
itself; starting a server does not change the process-wide flag. Its stderr goes to a temporary
file, not to the terminal; its last line explains a failed start.

The SDK's connection is a stack of anyio context managers that must be entered and exited in
one task. An `MCPConnection` therefore runs one owning task per server that holds them open
until `aclose()` (callable from any task) sets its stop event; tool calls go through the
session from the caller's task, which the SDK supports. The `mcp` package (the `mcp` extra) is
imported only when a server is started, so reading a config needs no SDK.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from ..grounding.files import FileRefused, read_utf8
from .base import ToolConfigError, ToolError, ToolSpec

if TYPE_CHECKING:
    from mcp import Client

#: Seconds a server has to start and list its tools.
DEFAULT_START_TIMEOUT_S = 30.0
#: Seconds `aclose()` waits for the owning task to shut a server down before cancelling it (the
#: SDK's own stdio shutdown takes at most about 6 s: 2 s after stdin closes, then SIGTERM, then SIGKILL).
STOP_TIMEOUT_S = 10.0
#: Pages of a server's tool list read at most (a paginator that never ends cannot hang a start).
MAX_TOOL_PAGES = 100
#: Characters of an error a tool or server reports that are kept (it is shown on one line).
MAX_ERROR_CHARS = 1000
#: The most read of a config file (a real one is a few kB): more is a wrong path, e.g. /dev/zero.
MAX_CONFIG_BYTES = 1024 * 1024
#: Bytes of a server's stderr read back to explain a failure.
STDERR_TAIL_BYTES = 4096

#: A server's name: it becomes the prefix of its tools' names (`NAME.tool`) and is written `mcp:NAME`.
SERVER_NAME = re.compile(r"^[A-Za-z0-9_-]+$")
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_HTTP_TYPES = {"http", "streamable-http", "streamable_http", "streamableHttp"}


@dataclass(frozen=True)
class ServerConfig:
    """One configured MCP server: a command to start (stdio) or a url to connect to (http, sse)."""

    name: str
    transport: str  # "stdio", "http" (streamable HTTP) or "sse"
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    source: str = ""  # the config file it came from, for messages

    def describe(self) -> str:
        """The command line or the url, as the config gives it."""
        if self.command is not None:
            return shlex.join([self.command, *self.args])
        return f"{self.url}"


def load_mcp_config(path: str | Path, names: Sequence[str] | None = None) -> dict[str, ServerConfig]:
    """The servers a JSON config file lists (all, or the ones `names` picks), checked; ToolConfigError says what to
    fix."""
    file = Path(path).expanduser()
    if not file.exists():
        raise ToolConfigError(f"MCP config {file} does not exist; pass a JSON file with an \"mcpServers\" object")
    if file.is_dir():
        raise ToolConfigError(f"MCP config {file} is a folder; pass the JSON file itself")
    try:
        data = json.loads(read_utf8(file, what="MCP config", max_bytes=MAX_CONFIG_BYTES))
    except FileRefused as exc:
        raise ToolConfigError(str(exc)) from None
    except json.JSONDecodeError as exc:
        raise ToolConfigError(
            f"MCP config {file} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}); fix the file"
        ) from None
    # "mcpServers" is the common key; VS Code's mcp.json says "servers".
    servers = data.get("mcpServers", data.get("servers")) if isinstance(data, dict) else None
    if not isinstance(servers, dict):
        raise ToolConfigError(
            f'MCP config {file} has no "mcpServers" object; write {{"mcpServers": {{"NAME": {{...}}}}}}'
        )
    if not servers:
        raise ToolConfigError(f"MCP config {file} lists no servers; add one under \"mcpServers\"")
    configs = {name: _server(name, entry, file) for name, entry in servers.items()}
    if names is None:
        return configs
    unknown = [n for n in names if n not in configs]
    if unknown:
        raise ToolConfigError(
            f"no MCP server {unknown[0]!r} in {file} (configured: {', '.join(sorted(configs))}); use one of those names"
        )
    return {n: configs[n] for n in dict.fromkeys(names)}


def _server(name: str, entry: Any, file: Path) -> ServerConfig:
    where = f"MCP server {name!r} in {file}"
    if not SERVER_NAME.match(name):
        raise ToolConfigError(f"{where}: a server name may hold only letters, digits, - and _; rename it")
    if not isinstance(entry, dict):
        raise ToolConfigError(f"{where} is not an object; give it a \"command\" or a \"url\"")
    command, url = entry.get("command"), entry.get("url")
    if command is not None and url is not None:
        raise ToolConfigError(f"{where} has both a \"command\" and a \"url\"; keep the one to use")
    kind = entry.get("type")
    if command is not None:
        if not isinstance(command, str) or not command.strip():
            raise ToolConfigError(f"{where}: \"command\" must be a non-empty string")
        args = entry.get("args", [])
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise ToolConfigError(f"{where}: \"args\" must be a list of strings")
        cwd = entry.get("cwd")
        if cwd is not None and not isinstance(cwd, str):
            raise ToolConfigError(f"{where}: \"cwd\" must be a string")
        return ServerConfig(name, "stdio", command=command, args=tuple(args), env=_strings(entry, "env", where),
                            cwd=cwd, source=str(file))
    if url is not None:
        if not isinstance(url, str) or not re.match(r"^https?://", url):
            raise ToolConfigError(f"{where}: \"url\" must be an http:// or https:// address")
        if kind is not None and kind != "sse" and kind not in _HTTP_TYPES:
            raise ToolConfigError(f"{where}: \"type\" {kind!r} is not one this client speaks over a url (http, sse)")
        sse = kind == "sse" or (kind is None and url.split("?")[0].rstrip("/").endswith("/sse"))
        return ServerConfig(name, "sse" if sse else "http", url=url, headers=_strings(entry, "headers", where),
                            source=str(file))
    raise ToolConfigError(
        f'{where} has neither a "command" (a program to start) nor a "url" (a server to reach); add one'
    )


def _strings(entry: dict[str, Any], key: str, where: str) -> dict[str, str]:
    value = entry.get(key, {})
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise ToolConfigError(f"{where}: \"{key}\" must be an object of string values")
    return dict(value)


def _expand(values: Mapping[str, str], what: str, config: ServerConfig) -> dict[str, str]:
    """`${NAME}` replaced from thoughtloom's environment; a variable that is not set is a config error."""
    out = {}
    for key, value in values.items():
        for var in _VARIABLE.findall(value):
            if var not in os.environ:
                raise ToolConfigError(
                    f"MCP server {config.name!r}: {what} {key} asks for ${{{var}}}, which is not set; "
                    f"set {var} or write the value in {config.source}"
                )
        out[key] = _VARIABLE.sub(lambda m: os.environ[m.group(1)], value)
    return out


# ------------------------------------------------------------------------ connection


class MCPConnection:
    """One running (stdio) or connected (http) MCP server and its tools; start with `await
    MCPConnection.start(config)`."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.tools: list[MCPTool] = []
        self._client: Client | None = None
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._lost: BaseException | None = None  # why the connection ended while in use
        self._errlog: IO[str] | None = None
        self._stderr_tail = ""  # the stderr hint, kept when the file is closed

    @property
    def name(self) -> str:
        """The server's name in the config."""
        return self.config.name

    @property
    def connected(self) -> bool:
        """True while tool calls can reach the server."""
        return self._client is not None

    @classmethod
    async def start(cls, config: ServerConfig, *, timeout_s: float = DEFAULT_START_TIMEOUT_S) -> MCPConnection:
        """Start or connect to the server and list its tools; ToolConfigError (one line) when it cannot."""
        try:
            import mcp  # noqa: F401
        except ImportError:
            raise ToolConfigError(
                "MCP tools need the MCP SDK: pip install 'thoughtloom[mcp]'"
            ) from None
        conn = cls(config)
        transport = conn._transport_factory()  # config errors (unset variables) before anything starts
        ready: asyncio.Future[list[Any]] = asyncio.get_running_loop().create_future()
        conn._task = asyncio.create_task(conn._own(transport, ready), name=f"mcp server {config.name}")
        try:
            await asyncio.wait({ready}, timeout=timeout_s)
        except asyncio.CancelledError:
            conn._task.cancel()  # the owner unwinds the SDK's contexts in its own task
            raise
        if not ready.done():
            # Still in the handshake, not waiting for the stop event: cancelling is how it stops.
            conn._task.cancel()
            await asyncio.wait({conn._task}, timeout=STOP_TIMEOUT_S)
            await conn.aclose()  # the hint is read after: the server may explain itself as it is stopped
            raise ToolConfigError(
                f"MCP server {config.name!r} ({config.describe()}) did not answer within {timeout_s:g} s"
                f"{conn._stderr_hint()}; check that it starts by hand"
            )
        failure = ready.exception() if not ready.cancelled() else asyncio.CancelledError("the start was cancelled")
        if failure is not None:
            await conn.aclose()
            raise ToolConfigError(
                f"MCP server {config.name!r} ({config.describe()}) did not start: {_reason(failure)}"
                f"{conn._stderr_hint()}; check its entry in {config.source or 'the MCP config'}"
            )
        conn.tools = [conn._tool(t) for t in ready.result()]
        return conn

    def _transport_factory(self) -> Any:
        """A function that enters the SDK transport on an exit stack (in the owning task) and returns it."""
        from mcp import StdioServerParameters
        from mcp.client.sse import sse_client
        from mcp.client.stdio import stdio_client
        from mcp.client.streamable_http import streamable_http_client

        config = self.config
        if config.transport == "stdio":
            assert config.command is not None
            params = StdioServerParameters(
                command=config.command, args=list(config.args), env=_expand(config.env, "env", config) or None,
                cwd=config.cwd,
            )
            # The server's stderr is kept for diagnosis, not printed between the user's progress lines.
            self._errlog = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")
            errlog = self._errlog

            async def stdio(stack: AsyncExitStack) -> Any:
                return stdio_client(params, errlog=errlog)

            return stdio
        headers = _expand(config.headers, "header", config)
        assert config.url is not None
        url = config.url
        if config.transport == "sse":

            async def sse(stack: AsyncExitStack) -> Any:
                return sse_client(url, headers=headers or None)

            return sse

        async def http(stack: AsyncExitStack) -> Any:
            if not headers:
                return streamable_http_client(url)
            import httpx2

            # The SDK's default client, with the entry's headers (its timeouts: 30 s, 300 s to read a stream).
            client = await stack.enter_async_context(
                httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=300.0))
            )
            return streamable_http_client(url, http_client=client)

        return http

    async def _own(self, transport: Any, ready: asyncio.Future[list[Any]]) -> None:
        """The owning task: enter the SDK's contexts, list the tools, hold the session until stopped."""
        from mcp import Client

        try:
            async with AsyncExitStack() as stack:
                client = await stack.enter_async_context(Client(await transport(stack)))
                listing = await _list_tools(client)
                self._client = client
                ready.set_result(listing)
                await self._stop.wait()
                self._client = None  # no new calls while the contexts unwind
        except Exception as exc:  # noqa: BLE001 - every end of the session is reported, not raised in a bare task
            if not ready.done():
                ready.set_exception(exc)
            else:
                self._lost = exc
        finally:
            self._client = None
            if not ready.done():  # cancelled before the session was up
                ready.cancel()

    def _tool(self, tool: Any) -> MCPTool:
        description = tool.description or getattr(tool, "title", None) or f"{tool.name} (MCP server {self.name})"
        spec = ToolSpec(name=f"{self.name}.{tool.name}", description=description,
                        parameters=_usable_schema(tool.input_schema))
        return MCPTool(self, tool.name, spec)

    async def call(self, tool: str, args: dict[str, Any]) -> str:
        """Call one of the server's tools; its text, or ToolError with the server's one-line complaint."""
        from mcp import MCPError

        client = self._client
        if client is None:
            why = f": {_reason(self._lost)}" if self._lost is not None else ""
            raise ToolError(f"MCP server {self.name!r} is not connected{why}{self._stderr_hint()}")
        try:
            result = await client.call_tool(tool, args)
        except MCPError as exc:
            if _closed(exc):
                # The server is gone (it exited or dropped the connection): later calls fail at once,
                # and the owning task unwinds the transport now rather than at aclose().
                self._lost, self._client = exc, None
                self._stop.set()
                raise ToolError(
                    f"MCP server {self.name!r} is not connected: {_reason(exc)}{self._stderr_hint()}"
                ) from None
            raise ToolError(f"MCP server {self.name!r}: {_flat(str(exc))}") from None
        except (OSError, RuntimeError) as exc:
            raise ToolError(f"MCP server {self.name!r} failed: {_reason(exc)}") from None
        text = content_text(result.content, result.structured_content)
        if result.is_error:
            raise ToolError(_flat(text) or f"{self.name}.{tool} reported an error without a message")
        return text

    async def aclose(self) -> None:
        """Stop the server process / close the connection (from any task); safe to call twice."""
        task = self._task
        if task is not None:
            self._stop.set()
            await asyncio.wait({task}, timeout=STOP_TIMEOUT_S)
            if not task.done():
                task.cancel()
                await asyncio.wait({task}, timeout=STOP_TIMEOUT_S)
            if task.done() and not task.cancelled():
                task.exception()  # retrieved: the owner reports through `_lost`, never by raising
        self._stderr_tail = self._stderr_hint()  # kept for messages; the file goes
        if self._errlog is not None:
            self._errlog.close()
            self._errlog = None

    def _stderr_hint(self) -> str:
        """The last line the server wrote on stderr, as ' (stderr: ...)', or ''."""
        errlog = self._errlog
        if errlog is None or errlog.closed:
            return self._stderr_tail
        try:
            errlog.flush()
            size = errlog.seek(0, os.SEEK_END)
            errlog.seek(max(0, size - STDERR_TAIL_BYTES))
            tail = errlog.read()
        except (OSError, ValueError):
            return ""
        lines = [line for line in tail.splitlines() if line.strip()]
        return f" (its stderr: {_flat(lines[-1], 300)})" if lines else ""

    def __repr__(self) -> str:
        state = "connected" if self.connected else "closed"
        return f"MCPConnection({self.name!r}, {self.config.describe()!r}, {state}, {len(self.tools)} tools)"


class MCPTool:
    """One tool of an MCP server, named `SERVER.tool`; its schema and description are the server's."""

    def __init__(self, connection: MCPConnection, tool: str, spec: ToolSpec) -> None:
        self.connection = connection
        self.tool = tool  # the server's own name for it
        self._spec = spec

    @property
    def spec(self) -> ToolSpec:
        """The tool's name (`SERVER.tool`), description and argument schema."""
        return self._spec

    async def call(self, args: dict[str, Any]) -> str:
        """Call the tool on its server."""
        return await self.connection.call(self.tool, args)


async def connect(config: ServerConfig, *, timeout_s: float = DEFAULT_START_TIMEOUT_S) -> MCPConnection:
    """Start or connect to one server (see `MCPConnection.start`)."""
    return await MCPConnection.start(config, timeout_s=timeout_s)


async def connect_all(
    configs: Iterable[ServerConfig], *, timeout_s: float = DEFAULT_START_TIMEOUT_S
) -> list[MCPConnection]:
    """Start several servers at once; if one fails, close the others and raise its ToolConfigError."""
    pending = [asyncio.ensure_future(connect(c, timeout_s=timeout_s)) for c in configs]
    try:
        outcomes = await asyncio.gather(*pending, return_exceptions=True)
    except asyncio.CancelledError:
        for fut in pending:
            fut.cancel()
        for fut in pending:
            if fut.done() and not fut.cancelled() and fut.exception() is None:
                await fut.result().aclose()
        raise
    started = [o for o in outcomes if isinstance(o, MCPConnection)]
    failures = [o for o in outcomes if isinstance(o, BaseException)]
    if failures:
        for conn in started:
            await conn.aclose()
        raise failures[0]
    return started


# --------------------------------------------------------------------------- helpers


async def _list_tools(client: Client) -> list[Any]:
    tools: list[Any] = []
    cursor: str | None = None
    for _ in range(MAX_TOOL_PAGES):
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if cursor is None:
            break
    return tools


def _usable_schema(schema: Any) -> dict[str, Any]:
    """The server's argument schema when it is a valid object schema, else one that accepts any object.

    The Toolbox validates every call against the schema; a schema jsonschema cannot use would make
    every call fail there, while the server still checks the arguments itself.
    """
    import jsonschema

    if not isinstance(schema, dict):
        return {"type": "object"}
    try:
        jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator).check_schema(schema)
    except jsonschema.exceptions.SchemaError:
        return {"type": "object"}
    return schema


def content_text(content: Sequence[Any], structured: Any = None) -> str:
    """A tool result's content as text: text items as they are, other items summarized in brackets."""
    parts: list[str] = []
    for block in content:
        kind = getattr(block, "type", "unknown")
        if kind == "text":
            parts.append(block.text)
        elif kind in ("image", "audio"):
            size = len(block.data) * 3 // 4  # base64
            parts.append(f"[{kind}: {block.mime_type}, about {size} bytes, not shown]")
        elif kind == "resource_link":
            parts.append(f"[resource link: {block.uri}" + (f" ({block.name})" if block.name else "") + "]")
        elif kind == "resource":
            res = block.resource
            text = getattr(res, "text", None)
            parts.append(text if text is not None else f"[resource {res.uri}: {res.mime_type or 'binary'}, not shown]")
        else:
            parts.append(f"[{kind} content, not shown]")
    if not parts and structured is not None:
        parts.append(json.dumps(structured, ensure_ascii=False, sort_keys=True))
    return "\n".join(parts)


def _flat(text: str, limit: int = MAX_ERROR_CHARS) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for sub in exc.exceptions for leaf in _leaves(sub)]
    return [exc]


def _reason(exc: BaseException) -> str:
    """What went wrong, in a few words, from the deepest meaningful exception (task groups nest them)."""
    leaves = [e for e in _leaves(exc) if not isinstance(e, asyncio.CancelledError)] or [exc]
    leaf = leaves[0]
    if isinstance(leaf, FileNotFoundError):
        return f"command not found ({leaf.filename or leaf})" if leaf.filename else "command not found"
    if isinstance(leaf, PermissionError):
        return f"permission denied ({leaf.filename})" if leaf.filename else "permission denied"
    text = _flat(str(leaf), 300)
    if _closed(leaf):
        return "the server closed the connection (it exited, or wrote something that is not MCP on stdout)"
    name = type(leaf).__name__
    return f"{name}: {text}" if text else name


def _closed(exc: BaseException) -> bool:
    """The SDK's "Connection closed" error (the transport ended), not a server's own -32000 error."""
    from mcp_types import CONNECTION_CLOSED

    return getattr(exc, "code", None) == CONNECTION_CLOSED and str(exc) == "Connection closed"
