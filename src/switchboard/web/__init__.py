"""HTTP surfaces composed into one Starlette app: health, MCP, the Board, the human API, metrics."""
