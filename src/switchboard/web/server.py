"""`switchboard serve`: uvicorn around the app, with a friendly first screen.

The port is bound before anything else starts, so a busy port is one line on stderr (which port, and
`SWITCHBOARD_PORT` to choose another) and exit status 1, not a traceback after a banner. The banner
is printed once uvicorn is listening on that port.
"""

from __future__ import annotations

import errno
import gc
import socket
import sys

import uvicorn

from .. import logs
from ..config import Settings
from . import transport
from .app import create_app

EXIT_PORT_BUSY = 1


class PortBusy(Exception):
    pass


def banner(settings: Settings) -> str:
    base = settings.public_base_url
    where = "external PostgreSQL" if settings.database_url else f"embedded PostgreSQL in {settings.data_dir}"
    log_format = "text" if logs.choose_format(settings.log_format, sys.stderr) == "text" else "JSON lines"
    return (
        f"\nSwitchboard is running ({where}).\n"
        f"  Board:   {base}/\n"
        f"  MCP:     {base}/mcp/<slug>\n"
        f"  Health:  {base}/healthz\n"
        f"  Logs:    {log_format} on stderr (SWITCHBOARD_LOG_FORMAT={settings.log_format}; "
        "auto is text on a terminal, JSON otherwise)\n\n"
        "First endpoint, from another terminal (README.md, 'A tour from the command line'):\n"
        "  export SWITCHBOARD_USER=alice\n"
        "  echo 'choose-a-passphrase' | .venv/bin/switchboard user add alice --password-stdin\n"
        "  .venv/bin/switchboard endpoint vend --agent fixer --queue inbox\n"
        "  .venv/bin/switchboard todo push <slug> --title 'first todo'\n")


def bind(host: str, port: int) -> list[socket.socket]:
    """Listening sockets for every address of `host` (as asyncio would bind them); PortBusy when the
    port is taken."""
    sockets: list[socket.socket] = []
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        for family, kind, proto, _, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen(2048)
            sock.setblocking(False)
    except OSError as exc:
        for sock in sockets:
            sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise PortBusy(port) from None
        raise
    return sockets


class _Server(uvicorn.Server):
    """Prints the banner once the sockets are serving (after the lifespan's startup completed)."""

    def __init__(self, config: uvicorn.Config, settings: Settings) -> None:
        super().__init__(config)
        self.settings = settings

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        # Everything allocated so far (modules, schemas, the app and its pools) lives as long as the
        # process: out of the collector's sight, a full collection no longer walks it. A bulk push of
        # 1,000 todos cost the server about 30 % more CPU without this (docs/decisions.md D43).
        gc.freeze()
        if self.started and not self.should_exit:
            print(banner(self.settings), file=sys.stderr, flush=True)


def serve(settings: Settings) -> None:
    logs.configure(settings.log_level, settings.log_format)
    try:
        sockets = bind(settings.host, settings.port)
    except PortBusy:
        print(f"error: port {settings.port} on {settings.host} is already in use; choose another with "
              f"SWITCHBOARD_PORT (or --port)", file=sys.stderr, flush=True)
        raise SystemExit(EXIT_PORT_BUSY) from None
    app = create_app(settings)
    config = uvicorn.Config(app, host=settings.host, port=settings.port, log_config=None, access_log=False,
                            lifespan="on", proxy_headers=False, server_header=False,
                            timeout_graceful_shutdown=5, **transport.server_options(settings))
    try:
        _Server(config, settings).run(sockets=sockets)
    finally:
        for sock in sockets:
            sock.close()
