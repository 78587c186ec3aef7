"""Switchboard: a durable work queue for AI agents, spoken over MCP, that remembers every attempt."""

__version__ = "0.1.0"
