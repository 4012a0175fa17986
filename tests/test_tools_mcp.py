"""The MCP client against real servers: mcp-server-time and mcp-server-fetch (stdio, from PyPI), the
npm filesystem server (stdio via node), and a small SDK server (tests/mcp_double.py) over stdio,
streamable HTTP and SSE. Every server is a real process, started once for the module."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import http.server
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from machine import scaled

pytest.importorskip("mcp", reason="the MCP SDK is the 'mcp' extra: pip install -e '.[mcp]'")

from thoughtloom.tools import ToolConfigError, ToolLimits, Toolbox, build_toolbox  # noqa: E402
from thoughtloom.tools.mcp import MCPConnection, ServerConfig, connect, connect_all, load_mcp_config  # noqa: E402

#: The servers are started once, on the module's event loop: the tests that use them run on it too.
module_loop = pytest.mark.asyncio(loop_scope="module")

HERE = Path(__file__).parent
BIN = Path(sys.executable).parent  # the console scripts of the interpreter running the tests
#: The npm filesystem server, installed by the tests into a cache beside the venv.
FS_PACKAGE = "@modelcontextprotocol/server-filesystem"
FS_VERSION = "2026.8.31"


# ---------------------------------------------------------------------------- fixtures


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_listening(port: int, proc: subprocess.Popen[bytes], timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the test MCP server exited with status {proc.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return
        time.sleep(0.05)
    raise RuntimeError(f"the test MCP server did not listen on port {port} within {timeout_s:g} s")


@pytest.fixture(scope="module")
def web_servers() -> Iterator[dict[str, str]]:
    """The SDK test server over streamable HTTP and over SSE, each a subprocess on 127.0.0.1."""
    ports = {"http": _free_port(), "sse": _free_port()}
    procs = {
        kind: subprocess.Popen([sys.executable, str(HERE / "mcp_double.py"), kind, str(port)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for kind, port in ports.items()
    }
    try:
        for kind, port in ports.items():
            _wait_listening(port, procs[kind])
        yield {"http": f"http://127.0.0.1:{ports['http']}/mcp", "sse": f"http://127.0.0.1:{ports['sse']}/sse"}
    finally:
        for proc in procs.values():
            proc.terminate()
        for proc in procs.values():
            proc.wait(timeout=10)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A web page served by http.server on 127.0.0.1, for the fetch server to read."""
    root = tmp_path_factory.mktemp("site")
    (root / "loom.html").write_text(
        "<html><head><title>Looms</title></head><body><h1>Weaving</h1>"
        "<p>The warp threads run lengthwise on the loom.</p></body></html>", encoding="utf-8")

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:  # not on the test's stderr
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(root)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/loom.html"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(scope="session")
def fs_server(request: pytest.FixtureRequest) -> Path:
    """The npm filesystem server's entry script, installed once (pinned) into a cache beside the venv."""
    npm, node = shutil.which("npm"), shutil.which("node")
    if npm is None or node is None:
        pytest.skip("npm and node are needed to run the npm filesystem MCP server (apt-get install nodejs npm)")
    in_venv = sys.prefix != sys.base_prefix
    base = Path(sys.prefix) / "npm-mcp" if in_venv else Path(request.config.cache.mkdir("npm-mcp"))
    package = base / "node_modules" / "@modelcontextprotocol" / "server-filesystem"
    entry = package / "dist" / "index.js"
    installed = None
    with contextlib.suppress(OSError, ValueError, KeyError):
        installed = json.loads((package / "package.json").read_text(encoding="utf-8"))["version"]
    if installed != FS_VERSION or not entry.exists():
        done = subprocess.run(
            [npm, "install", "--prefix", str(base), "--no-audit", "--no-fund", f"{FS_PACKAGE}@{FS_VERSION}"],
            capture_output=True, text=True, timeout=scaled(600), check=False,
        )
        if done.returncode != 0 or not entry.exists():
            tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
            pytest.fail(f"npm install {FS_PACKAGE}@{FS_VERSION} into {base} failed: {tail}")
    return entry


@pytest.fixture(scope="module")
def fs_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The one folder the filesystem server may read, and a secret beside it."""
    base = tmp_path_factory.mktemp("fs")
    root = base / "shared"
    root.mkdir()
    (root / "notes.txt").write_text("the shuttle carries the weft\n", encoding="utf-8")
    (base / "secret.txt").write_text("outside the root\n", encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def config_file(tmp_path_factory: pytest.TempPathFactory, web_servers: dict[str, str]) -> Path:
    """An mcpServers config naming every server the module talks to (the npm one is added on its own)."""
    servers = {
        "time": {"command": str(BIN / "mcp-server-time"), "args": ["--local-timezone", "UTC"]},
        "fetch": {"command": str(BIN / "mcp-server-fetch"), "args": ["--ignore-robots-txt", "--allow-private-ips"]},
        "double": {"command": sys.executable, "args": [str(HERE / "mcp_double.py"), "stdio"],
                   "env": {"GRANTED": "yes", "FROM_PARENT": "${TL_TEST_GRANTED}"}},
        "plain": {"command": sys.executable, "args": [str(HERE / "mcp_double.py"), "stdio"]},
        "http": {"url": web_servers["http"]},
        "sse": {"url": web_servers["sse"]},
        "broken": {"command": sys.executable,
                   "args": ["-c", "import sys; print('no API key given', file=sys.stderr); sys.exit(3)"]},
        "missing": {"command": "thoughtloom-no-such-mcp-server"},
    }
    path = tmp_path_factory.mktemp("mcp") / "mcp.json"
    path.write_text(json.dumps({"mcpServers": servers}), encoding="utf-8")
    return path


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def conns(config_file: Path) -> AsyncIterator[dict[str, MCPConnection]]:
    """The working servers, started together once; a granted and an ungranted variable are set while they start."""
    configs = load_mcp_config(config_file, ["time", "fetch", "double", "http", "sse"])
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TL_TEST_GRANTED", "passed on")
        mp.setenv("TL_TEST_SECRET", "sk-not-for-servers")
        started = await connect_all(configs.values())
    yield {c.name: c for c in started}
    for c in started:
        await c.aclose()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def fs_conn(fs_server: Path, fs_root: Path) -> AsyncIterator[MCPConnection]:
    """The npm filesystem server, allowed to read `fs_root` only."""
    config = ServerConfig("fs", "stdio", command=shutil.which("node") or "node", args=(str(fs_server), str(fs_root)))
    conn = await connect(config)
    yield conn
    await conn.aclose()


def box_of(*connections: MCPConnection, limits: ToolLimits = ToolLimits()) -> Toolbox:
    """A Toolbox over the connections' tools (the fixture, not the box, closes them)."""
    return Toolbox([t for c in connections for t in c.tools], limits)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped by its parent) counts as gone.
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    return True


# ------------------------------------------------------------------------------ config


def test_a_missing_config_file_is_one_line_that_says_what_to_pass(tmp_path: Path) -> None:
    with pytest.raises(ToolConfigError, match="does not exist; pass a JSON file") as err:
        load_mcp_config(tmp_path / "nope.json")
    assert "\n" not in str(err.value)


@pytest.mark.timeout(scaled(20))
@pytest.mark.parametrize("kind", ["fifo", "device", "huge"])
def test_a_config_that_is_not_a_small_regular_file_is_refused_in_one_line(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "mcp.json"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        os.symlink("/dev/zero", path)
    else:
        with path.open("wb") as fh:
            fh.truncate(300 * 1024 * 1024)  # sparse
    with pytest.raises(ToolConfigError, match="not a regular file|larger than") as err:
        load_mcp_config(path)
    assert "\n" not in str(err.value) and "MCP config" in str(err.value)


def test_a_config_that_is_not_json_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "mcp.json"
    path.write_text('{"mcpServers": {\n  "time": {"command": "x",}\n}}', encoding="utf-8")
    with pytest.raises(ToolConfigError, match=r"not valid JSON \(line 2"):
        load_mcp_config(path)


def test_an_unknown_server_name_lists_the_configured_ones(config_file: Path) -> None:
    with pytest.raises(ToolConfigError, match=r"no MCP server 'tiem' .*configured: broken, double, fetch, http, missing, plain, sse, time\)"):
        load_mcp_config(config_file, ["tiem"])


def test_a_server_without_command_or_url_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {"odd": {"args": ["x"]}}}), encoding="utf-8")
    with pytest.raises(ToolConfigError, match="'odd' .* has neither a \"command\" .* nor a \"url\""):
        load_mcp_config(path)


def test_a_url_ending_in_sse_is_an_sse_server_and_others_streamable_http(config_file: Path) -> None:
    configs = load_mcp_config(config_file)
    assert (configs["sse"].transport, configs["http"].transport, configs["time"].transport) == ("sse", "http", "stdio")


@module_loop
async def test_an_unset_variable_in_env_is_refused_before_starting(tmp_path: Path) -> None:
    config = ServerConfig("keyed", "stdio", command="thoughtloom-no-such-mcp-server",
                          env={"API_KEY": "${TL_TEST_UNSET_VARIABLE}"}, source="mcp.json")
    with pytest.raises(ToolConfigError, match=r"asks for \$\{TL_TEST_UNSET_VARIABLE\}, which is not set"):
        await connect(config)


# -------------------------------------------------------------------- stdio: time, fetch


@module_loop
async def test_a_servers_tools_are_named_server_dot_tool_with_its_own_schema(conns: dict[str, MCPConnection]) -> None:
    specs = {t.spec.name: t.spec for t in conns["time"].tools}
    assert {"time.get_current_time", "time.convert_time"} <= set(specs)
    schema = specs["time.get_current_time"].parameters
    assert schema["required"] == ["timezone"] and schema["properties"]["timezone"]["type"] == "string"
    assert specs["time.get_current_time"].description


@module_loop
async def test_the_time_server_answers_a_call(conns: dict[str, MCPConnection]) -> None:
    result = await box_of(conns["time"]).call("time.get_current_time", {"timezone": "Asia/Tokyo"})
    assert result.ok, result.error
    assert json.loads(result.output)["timezone"] == "Asia/Tokyo"


@module_loop
async def test_an_error_result_from_the_server_is_a_tool_error(conns: dict[str, MCPConnection]) -> None:
    result = await box_of(conns["time"]).call("time.get_current_time", {"timezone": "Nowhere/Atlantis"})
    assert result.status == "error"
    assert "Invalid timezone" in (result.error or "")


@module_loop
async def test_arguments_the_servers_schema_rejects_never_reach_it(conns: dict[str, MCPConnection]) -> None:
    box = box_of(conns["time"])
    result = await box.call("time.get_current_time", {"zone": "UTC"})
    assert result.status == "invalid" and "timezone" in (result.error or "")
    assert (box.invalid, box.live_calls) == (1, 0)


@module_loop
async def test_the_fetch_server_reads_a_local_page(conns: dict[str, MCPConnection], site: str) -> None:
    result = await box_of(conns["fetch"]).call("fetch.fetch", {"url": site})
    assert result.ok, result.error
    assert "warp threads run lengthwise" in result.output


# ---------------------------------------------------------------- stdio: npm filesystem


@module_loop
async def test_the_filesystem_server_reads_inside_its_root(fs_conn: MCPConnection, fs_root: Path) -> None:
    result = await box_of(fs_conn).call("fs.read_text_file", {"path": str(fs_root / "notes.txt")})
    assert result.ok, result.error
    assert "the shuttle carries the weft" in result.output


@module_loop
async def test_the_filesystem_server_refuses_outside_its_root(fs_conn: MCPConnection, fs_root: Path) -> None:
    result = await box_of(fs_conn).call("fs.read_text_file", {"path": str(fs_root.parent / "secret.txt")})
    assert result.status == "error"
    assert "outside allowed directories" in (result.error or "")
    assert "outside the root" not in (result.error or "") + result.output


# ----------------------------------------------------------------- http, sse, the double


@module_loop
async def test_a_streamable_http_server_is_reached_by_url(conns: dict[str, MCPConnection]) -> None:
    result = await box_of(conns["http"]).call("http.add", {"a": 2, "b": 40})
    assert (result.status, result.output) == ("ok", "42")


@module_loop
async def test_an_sse_server_is_reached_by_url(conns: dict[str, MCPConnection]) -> None:
    result = await box_of(conns["sse"]).call("sse.add", {"a": 20, "b": 22})
    assert (result.status, result.output) == ("ok", "42")


@module_loop
async def test_a_stdio_server_sees_only_the_variables_its_entry_grants(conns: dict[str, MCPConnection]) -> None:
    result = await box_of(conns["double"]).call("double.environment", {})
    env = json.loads(result.output)["env"]
    assert env["GRANTED"] == "yes" and env["FROM_PARENT"] == "passed on"
    assert "TL_TEST_SECRET" not in env and "TL_TEST_GRANTED" not in env
    assert set(env) <= {"GRANTED", "FROM_PARENT", "HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "LC_CTYPE"}


@module_loop
async def test_a_servers_error_message_reaches_the_model_on_one_line(conns: dict[str, MCPConnection]) -> None:
    result = await box_of(conns["double"]).call("double.fail", {"message": "the loom\njammed"})
    assert result.status == "error"
    assert (result.error or "").endswith("the loom jammed")  # the SDK server prefixes "Error executing tool fail: "


@module_loop
async def test_non_text_content_is_summarized(conns: dict[str, MCPConnection]) -> None:
    result = await box_of(conns["http"]).call("http.picture", {})
    assert result.output.startswith("[image: image/png, about ")


@module_loop
async def test_a_timed_out_call_leaves_the_connection_usable(conns: dict[str, MCPConnection]) -> None:
    box = box_of(conns["double"], limits=ToolLimits(timeout_s=0.3))
    slow = await box.call("double.slow", {"seconds": 5})
    assert slow.status == "timeout"
    after = await box.call("double.add", {"a": 1, "b": 1})
    assert (after.status, after.output) == ("ok", "2")


# ------------------------------------------------------------------------- lifecycle


@module_loop
async def test_a_server_that_exits_at_start_is_one_line_naming_it_and_its_complaint(config_file: Path) -> None:
    with pytest.raises(ToolConfigError) as err:
        await connect(load_mcp_config(config_file, ["broken"])["broken"])
    message = str(err.value)
    assert message.startswith("MCP server 'broken' (") and sys.executable in message
    assert "no API key given" in message and "\n" not in message


@module_loop
async def test_a_server_that_never_answers_is_given_up_after_the_start_timeout() -> None:
    # It reads stdin and says nothing (the SDK's shutdown closes stdin, so it ends at once).
    config = ServerConfig("mute", "stdio", command=sys.executable, args=("-c", "import sys; sys.stdin.read()"))
    started = time.monotonic()
    with pytest.raises(ToolConfigError, match=r"^MCP server 'mute' \(.*\) did not answer within 0.5 s"):
        await connect(config, timeout_s=0.5)
    assert time.monotonic() - started < 5


@module_loop
async def test_a_command_that_does_not_exist_is_one_line(config_file: Path) -> None:
    with pytest.raises(ToolConfigError, match="'missing' .*command not found"):
        await connect(load_mcp_config(config_file, ["missing"])["missing"])


@module_loop
async def test_aclose_from_another_task_stops_the_server_process(config_file: Path) -> None:
    conn = await connect(load_mcp_config(config_file, ["plain"])["plain"])
    pid = json.loads(await conn.call("environment", {}))["pid"]
    assert _alive(pid)
    await asyncio.create_task(conn.aclose())  # not the task that started it
    assert not conn.connected
    assert not _alive(pid)


@module_loop
async def test_calls_after_the_server_died_are_tool_errors(config_file: Path) -> None:
    conn = await connect(load_mcp_config(config_file, ["plain"])["plain"])
    try:
        pid = json.loads(await conn.call("environment", {}))["pid"]
        os.kill(pid, signal.SIGKILL)
        result = await box_of(conn, limits=ToolLimits(timeout_s=10)).call("plain.add", {"a": 1, "b": 2})
        assert result.status == "error"
        assert (result.error or "").startswith("MCP server 'plain' is not connected: the server closed the connection")
        assert not conn.connected
    finally:
        await conn.aclose()


@contextlib.contextmanager
def watching_starts() -> Iterator[list[MCPConnection]]:
    """Every connection MCPConnection.start makes while the block runs, in order."""
    started: list[MCPConnection] = []
    real_start = MCPConnection.start

    async def spy(config: ServerConfig, **kwargs: float) -> MCPConnection:
        conn = await real_start(config, **kwargs)
        started.append(conn)
        return conn

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(MCPConnection, "start", spy)
        yield started


@module_loop
async def test_a_server_that_fails_closes_the_ones_already_started(config_file: Path) -> None:
    configs = load_mcp_config(config_file, ["plain", "broken"])
    with watching_starts() as started, pytest.raises(ToolConfigError, match="'broken'"):
        await connect_all(configs.values())
    assert [c.name for c in started] == ["plain"]
    assert not started[0].connected


@module_loop
async def test_build_toolbox_grants_one_servers_tools_by_mcp_name(config_file: Path) -> None:
    box = await build_toolbox(["calc", "mcp:time"], mcp_config=config_file)
    try:
        assert box.names == ["calc", "time.convert_time", "time.get_current_time"]
        assert (await box.call("time.get_current_time", {"timezone": "UTC"})).ok
    finally:
        await box.aclose()


@module_loop
async def test_build_toolbox_leaves_nothing_running_when_a_server_fails(config_file: Path) -> None:
    with watching_starts() as seen, pytest.raises(ToolConfigError, match="'missing'"):
        await build_toolbox(["mcp:time", "mcp:missing"], mcp_config=config_file)
    assert [c.name for c in seen] == ["time"] and not seen[0].connected


@module_loop
async def test_mcp_tools_without_a_config_say_which_option_to_give() -> None:
    with pytest.raises(ToolConfigError, match="--mcp-config FILE"):
        await build_toolbox(["mcp:time"])


# ------------------------------------------------------------------ loom's own process


def _without_ptrace_capability() -> list[str]:
    """A command prefix under which a program and what it starts lack CAP_SYS_PTRACE.

    Root reads every process's /proc files whatever they allow; a user (or root with no
    capabilities, which is what the prefix makes of root) reads only what another process of its
    uid leaves readable: what the test is about.
    """
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("as root, needs setpriv (util-linux) to run loom without capabilities")
    return [setpriv, "--inh-caps=-all", "--bounding-set=-all"]


#: The key loom is started with, in its own environment only.
LOOMS_KEY = "sk-loom-own-key-4a1f9c"


def _adding_agent(seen: Any) -> Any:
    """A chat model that plans one call of double.add, makes it, and answers (served over HTTP)."""
    from openai_server import Reply

    text = "\n".join(m["content"] for m in seen.body["messages"])
    script = (("VERDICT", "VERDICT: ok\nREASON: fine"), ("Final answer:", "2 + 40 = 42"),
              ("Step: Add", 'double.add: {"a": 2, "b": 40}'),
              ("Tools:", "1. [double.add] Add 2 and 40.\n2. Say the sum. (after 1)"))
    reply = next((answer for when, answer in script if when in text), "ok")
    return Reply(200, {"id": "x", "object": "chat.completion", "created": 0, "model": "m",
                       "choices": [{"index": 0, "message": {"role": "assistant", "content": reply},
                                    "finish_reason": "stop"}],
                       "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}})


@pytest.fixture(scope="module")
def agent_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    """`loom agent --tools mcp:double` run once, the key in its environment; its output and the server's report."""
    from openai_server import serve
    from test_cli import LOOM

    if not sys.platform.startswith("linux"):
        pytest.skip("/proc/PID/environ is Linux's")
    base = tmp_path_factory.mktemp("neighbours")
    report, config = base / "neighbour.json", base / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"double": {
        "command": sys.executable, "args": [str(HERE / "mcp_double.py"), "stdio", "--parent-report", str(report)]}}}))
    with serve() as server:
        server.responder = _adding_agent
        proc = subprocess.run(
            [*_without_ptrace_capability(), *LOOM, "agent", "Add 2 and 40", "--quiet", "--no-store", "--json",
             "--tools", "mcp:double", "--mcp-config", str(config), "--model", f"openai-compatible:{server.url}@m#chat"],
            capture_output=True, text=True, timeout=scaled(120), check=False,
            env={**os.environ, "OPENAI_API_KEY": LOOMS_KEY}, cwd=base,
        )
    return proc, report


def test_a_stdio_server_cannot_read_the_keys_in_looms_own_environment(agent_run: Any) -> None:
    # Before: the server's environment was filtered, but /proc/<loom>/environ held OPENAI_API_KEY for it to read.
    proc, report = agent_run
    assert report.exists(), proc.stderr  # the server was started and looked
    seen = json.loads(report.read_text(encoding="utf-8"))["seen"]
    assert LOOMS_KEY not in seen
    assert seen.startswith("PermissionError"), seen


def test_a_loom_closed_to_its_neighbours_still_calls_its_servers_tools(agent_run: Any) -> None:
    proc, _ = agent_run
    assert proc.returncode == 0, proc.stderr
    calls = [c for node in json.loads(proc.stdout)["agent"]["nodes"] for c in node.get("tool_calls", [])]
    assert [(c["tool"], c["status"], c["output"]) for c in calls] == [("double.add", "ok", "42")]
