"""`switchboard serve`: uvicorn around the app, with a friendly first screen."""

from __future__ import annotations

import sys

import uvicorn

from .. import logs
from ..config import Settings
from .app import AppContext, create_app


def _banner(settings: Settings) -> None:
    base = settings.public_base_url
    where = "external PostgreSQL" if settings.database_url else f"embedded PostgreSQL in {settings.data_dir}"
    print(
        f"\nSwitchboard is running ({where}).\n"
        f"  Board:   {base}/\n"
        f"  MCP:     {base}/mcp/<slug>\n"
        f"  Health:  {base}/healthz\n\n"
        "First endpoint, from another terminal:\n"
        "  .venv/bin/switchboard user add alice\n"
        "  .venv/bin/switchboard endpoint vend --user alice --agent my-agent\n"
        "  .venv/bin/switchboard todo push <slug> --user alice --title 'first todo'\n",
        file=sys.stderr, flush=True)


def serve(settings: Settings) -> None:
    logs.configure(settings.log_level, settings.log_format)

    def ready(ctx: AppContext) -> None:
        _banner(settings)

    app = create_app(settings, on_ready=ready)
    config = uvicorn.Config(app, host=settings.host, port=settings.port, log_config=None, access_log=False,
                            lifespan="on", proxy_headers=False, server_header=False,
                            timeout_graceful_shutdown=5)
    uvicorn.Server(config).run()
