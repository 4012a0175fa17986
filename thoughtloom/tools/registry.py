"""Tools by name: `calc`, `python`, `docs`, `files`, `mcp` (every configured server) and `mcp:NAME`.

`build_toolbox` turns a list of names into a `Toolbox`, opening what the tools need (the
document index, the MCP servers). Everything it needs is checked before anything starts, and a
failure while starting closes whatever was already started, so a bad `--tools` costs nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from thoughtloom.grounding.sandbox import Sandbox

from ..tasks.base import comma_list
from .base import Tool, ToolConfigError
from .builtin import CalcTool, DocsTool, FilesTool, PythonTool
from .mcp import SERVER_NAME, connect_all, load_mcp_config
from .toolbox import Toolbox, ToolLimits
from .traced import traced_tools

#: The tool names `build_toolbox` knows; an MCP server's tools are also granted as `mcp:NAME`.
TOOL_NAMES = ("calc", "python", "docs", "files", "mcp")


def _known() -> str:
    return ", ".join([*TOOL_NAMES, "mcp:NAME"])


def check_tool_name(name: str) -> str:
    """A tool name as written (trimmed) when it has a known form; ToolConfigError listing the known ones otherwise."""
    name = name.strip()
    if name in TOOL_NAMES:
        return name
    if name.startswith("mcp:"):
        server = name[4:]
        if SERVER_NAME.match(server):
            return name
        raise ToolConfigError(f"{name!r}: an MCP server name holds only letters, digits, - and _ (write mcp:NAME)")
    raise ToolConfigError(f"unknown tool {name!r}; known: {_known()}")


def parse_tool_names(text: str) -> list[str]:
    """'calc,python,mcp:time' as a list of names, each checked for form (servers are checked by build_toolbox);
    ToolConfigError for an empty, repeated or unknown name."""
    return [check_tool_name(n) for n in comma_list(text, "--tools", ToolConfigError)]


def check_grant(names: Sequence[str], *, knowledge: str | Path | None = None, read_roots: Sequence[str | Path] = (),
                mcp_config: str | Path | None = None) -> list[str]:
    """The names (forms checked, repeats dropped), once each has what it needs; ToolConfigError (one line) if not."""
    wanted = list(dict.fromkeys(check_tool_name(n) for n in names))
    if "docs" in wanted and knowledge is None:
        raise ToolConfigError("docs needs --knowledge DIR (a folder of .md/.txt documents to search)")
    if "files" in wanted and not read_roots:
        raise ToolConfigError("files needs --allow-read DIR (a folder the tool may read)")
    if any(n == "mcp" or n.startswith("mcp:") for n in wanted) and mcp_config is None:
        raise ToolConfigError("MCP tools need --mcp-config FILE (a JSON file with an \"mcpServers\" object)")
    return wanted


async def build_toolbox(
    names: Sequence[str],
    *,
    limits: ToolLimits = ToolLimits(),
    knowledge: str | Path | None = None,
    knowledge_index: str | Path | None = None,
    retrieval: str = "bm25",
    read_roots: Sequence[str | Path] = (),
    mcp_config: str | Path | None = None,
    sandbox: Sandbox | None = None,
) -> Toolbox:
    """A Toolbox granting the named tools; ToolConfigError (one line) when one cannot be set up, with nothing left
    running."""
    # Every requirement is checked before anything is opened or started.
    wanted = check_grant(names, knowledge=knowledge, read_roots=read_roots, mcp_config=mcp_config)
    servers: list[str] | None = None  # None: every configured server
    if "mcp" not in wanted:
        servers = [n[4:] for n in wanted if n.startswith("mcp:")]
    configs = {}
    if mcp_config is not None and ("mcp" in wanted or servers):
        configs = load_mcp_config(mcp_config, servers)

    tools: list[Tool] = []
    closers: list[Any] = []
    try:
        for name in wanted:
            if name == "calc":
                tools.append(CalcTool())
            elif name == "python":
                tools.append(PythonTool(sandbox))
            elif name == "files":
                tools.append(FilesTool(read_roots))
            elif name == "docs":
                docs = await asyncio.to_thread(_open_docs, knowledge, knowledge_index, retrieval)
                closers.append(docs)
                tools.append(docs)
        if configs:
            for conn in await connect_all(configs.values()):
                closers.append(conn)
                tools.extend(conn.tools)
        return Toolbox(traced_tools(tools), limits, closers=closers)
    except BaseException:
        for closer in reversed(closers):
            await closer.aclose()
        raise


def _open_docs(knowledge: str | Path | None, knowledge_index: str | Path | None, retrieval: str) -> DocsTool:
    """The docs tool over a knowledge base it opens (indexing the folder) and closes with the toolbox."""
    from thoughtloom.grounding.knowledge import KnowledgeBase, KnowledgeBaseError

    assert knowledge is not None
    try:
        kb = KnowledgeBase.open(knowledge, knowledge_index, retrieval)
    except KnowledgeBaseError as exc:
        raise ToolConfigError(str(exc)) from None
    return DocsTool(kb, owns=True)
