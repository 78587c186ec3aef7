"""The agent surface: Streamable HTTP MCP at /mcp/<slug> (official SDK, low-level Server)."""
