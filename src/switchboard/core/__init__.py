"""The queue core: transitions, attempts, endpoints, humans, sweeps. All SQL lives here.

The core imports nothing from the surfaces (mcp/, web/, cli.py, relay/).
"""
