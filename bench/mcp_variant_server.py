"""The served app with one per-call lever of the MCP path turned back, for `mcp_bench.py --levers`.

    SWITCHBOARD_DATABASE_URL=... SWITCHBOARD_PORT=... python bench/mcp_variant_server.py VARIANT

Variants (each changes one thing against `shipped`, the app exactly as `switchboard serve` runs it):
  shipped      as shipped
  sse          POST answers as SSE streams instead of JSON bodies
  otel         the SDK's OpenTelemetry middleware put back (no exporter configured, as in production)
  asyncio-h11  uvicorn on the asyncio loop and the h11 parser instead of uvloop and httptools
  no-cache     every request resolves its credential in the database
  no-logs      log level warning: no per-request and per-call lines
  no-schema    no get_tool_input_schema: the 2026 era runs tools/list for each tools/call

With MCP_BENCH_CPROFILE=FILE the server runs under cProfile with a CPU-time clock (so time spent
waiting for PostgreSQL or for the scheduler on a busy machine is not counted) and writes its stats
to FILE when it stops.
"""

from __future__ import annotations

import cProfile
import os
import signal
import sys
import time

import uvicorn
from mcp.server._otel import OpenTelemetryMiddleware

from switchboard import logs
from switchboard.config import load_settings
from switchboard.web.app import create_app

VARIANTS = ("shipped", "sse", "otel", "asyncio-h11", "no-cache", "no-logs", "no-schema")


def main(variant: str) -> None:
    if variant not in VARIANTS:
        raise SystemExit(f"unknown variant {variant}; one of {', '.join(VARIANTS)}")
    settings = load_settings()
    logs.configure("warning" if variant == "no-logs" else settings.log_level, settings.log_format)
    app = create_app(settings)
    surface = app.state.surfaces.mcp
    if variant == "sse":
        surface.manager.json_response = False
    elif variant == "otel":
        surface.server.middleware.insert(0, OpenTelemetryMiddleware())
    elif variant == "no-cache":
        surface.credentials.ttl = 0
    elif variant == "no-schema":
        surface.server.get_tool_input_schema = None
    loop, http = ("asyncio", "h11") if variant == "asyncio-h11" else ("auto", "auto")
    config = uvicorn.Config(app, host=settings.host, port=settings.port, log_config=None, access_log=False,
                            lifespan="on", proxy_headers=False, server_header=False, loop=loop, http=http)
    server = uvicorn.Server(config)
    out = os.environ.get("MCP_BENCH_CPROFILE")
    if not out:
        server.run()
        return
    # uvicorn re-raises the SIGTERM it shut down on; with this handler in place that returns here.
    signal.signal(signal.SIGTERM, lambda *_: None)
    profiler = cProfile.Profile(time.process_time)
    try:
        profiler.runcall(server.run)
    finally:
        profiler.dump_stats(out)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "shipped")
