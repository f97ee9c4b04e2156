"""The example tools and the example MCP server that the example agents (agents.toml) use."""
