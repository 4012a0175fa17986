"""Tools a run may call (calculator, sandboxed Python, document search, file reading, MCP servers), behind one Toolbox."""

from .base import Tool, ToolConfigError, ToolError, ToolResult, ToolSpec
from .toolbox import ToolLimits, Toolbox

__all__ = ["Tool", "ToolConfigError", "ToolError", "ToolLimits", "ToolResult", "ToolSpec", "Toolbox"]
