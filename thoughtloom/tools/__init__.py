"""Tools a run may call (calculator, sandboxed Python, document search, file reading, MCP servers), behind one
Toolbox."""

from .base import Tool, ToolConfigError, ToolError, ToolResult, ToolSpec
from .registry import TOOL_NAMES, build_toolbox, parse_tool_names
from .toolbox import Toolbox, ToolLimits

__all__ = [
    "TOOL_NAMES", "Tool", "ToolConfigError", "ToolError", "ToolLimits", "ToolResult", "ToolSpec", "Toolbox",
    "build_toolbox", "parse_tool_names",
]
