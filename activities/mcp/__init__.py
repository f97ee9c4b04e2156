"""MCP tool servers as the agent's tools.

`McpActivities(servers)` gives the activities a worker registers: `list_mcp_tools` (a
session's MCP tools as `SERVER__TOOL` specs, recorded at start), `check_mcp_input` (the
input against the tool's JSON Schema, before an approval wait) and `call_mcp_tool`. A
stdio server is started by the worker on first use and shared by every call; a
streamable HTTP server is called at its URL. Every request is bounded by the server's
`timeout_seconds`, so a dead or stuck server fails the call, never the session.
"""

from activities.mcp._activities import McpActivities

__all__ = ["McpActivities"]
