"""Shared fixtures: one real PostgreSQL per test session (embedded, or SWITCHBOARD_TEST_DATABASE_URL),
a clean database per test, and real servers (uvicorn in a thread, or `switchboard serve` as a process).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from switchboard.config import Settings, load_settings
from switchboard.db import migrate
from switchboard.runtime import open_runtime

# The Board's fixtures (`board_server`, `browser`) for every test that asks for them by name.
pytest_plugins = ["board_kit"]

ROOT = Path(__file__).resolve().parent.parent
KEEP_TABLES = {"schema_migrations", "settings"}


# The longest files, measured with `--durations` on the 2-core machine, run first: `make test` hands
# whole files to two workers (pytest-xdist, --dist loadfile), and a long file handed out last keeps one
# worker busy while the other idles. Only the order of files changes; tests keep theirs.
LONG_FILES = ("test_cli_remote.py", "test_cli_teams.py", "test_metrics_any_process.py", "test_cli_admission.py",
              "test_soak_short.py", "test_team_races.py", "test_admission_shards.py", "test_relay_e2e.py",
              "test_stateful_teams.py", "test_cli.py", "test_bulk_push.py", "test_bulk_push_team.py", "test_oidc.py",
              "test_stateful.py", "test_revocation_everywhere.py", "test_account.py", "test_mcp_oauth.py",
              "test_api_schemathesis.py", "test_signin_throttle.py", "test_board_teams.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(LONG_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(LONG_FILES)))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def pg_server(tmp_path_factory):
    """The URI of a PostgreSQL server (not a database) the session may create databases on."""
    url = os.environ.get("SWITCHBOARD_TEST_DATABASE_URL")
    if url:
        yield url
        return
    with throwaway_pg("switchboard-test-pg-") as server:
        yield server.uri


@contextmanager
def throwaway_pg(prefix: str):
    """An embedded PostgreSQL server of a test's own: freezing or stopping it touches no other test.
    Not under pytest's basetemp: as root the server runs as another system user that must traverse
    the path, and every pytest session that starts resets /tmp/pytest-of-<user> to mode 0700."""
    from switchboard.db import embedded

    data = Path(tempfile.mkdtemp(prefix=prefix))
    server = embedded.start(data)
    try:
        yield server
    finally:
        server.release()
        shutil.rmtree(data, ignore_errors=True)


def _with_db(uri: str, dbname: str) -> str:
    return psycopg.conninfo.make_conninfo(uri, dbname=dbname)


def create_database(server_uri: str, *, target: int | None = None) -> str:
    """A new empty database on the test server, migrated to `target` (all when None). Returns its URI."""
    name = f"sb_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_uri, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    uri = _with_db(server_uri, name)
    if target != 0:
        async def run() -> None:
            async with await psycopg.AsyncConnection.connect(uri, autocommit=True) as conn:
                await migrate.migrate(conn, target=target)

        run_async(run())
    return uri


def run_async(coro):
    """Run a coroutine to completion on a fresh loop in a thread (safe inside a running loop)."""
    box: dict = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(coro)
        except BaseException as exc:
            box["error"] = exc

    t = threading.Thread(target=target)
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box.get("value")


@pytest.fixture(scope="session")
def pg_uri(pg_server) -> str:
    """The session's migrated database."""
    return create_database(pg_server)


def drop_database(pg_server: str, uri: str) -> None:
    """Drop the database `uri` names (its sessions ended first)."""
    name = psycopg.conninfo.conninfo_to_dict(uri)["dbname"]
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def terminate_lock_waiter(admin: psycopg.Connection, what: str, tries: int = 250) -> int:
    """Wait until a backend of this database waits for a lock (the statement under test, blocked by a
    row the test holds), then terminate it; its pid. `what` says which wait the test expected."""
    pid = None
    for _ in range(tries):
        row = admin.execute("SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
                            " AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()").fetchone()
        if row:
            pid = row[0]
            break
        await asyncio.sleep(0.02)
    assert pid is not None, f"{what} never waited for a lock"
    admin.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,))
    return pid


@pytest.fixture
def scratch_db(pg_server):
    """A fresh, unmigrated database for migration tests; dropped afterwards."""
    uri = create_database(pg_server, target=0)
    yield uri
    drop_database(pg_server, uri)


@pytest.fixture
def fresh_db(pg_server):
    """A fresh, migrated database of the test's own (for several serving processes on one database);
    dropped afterwards."""
    uri = create_database(pg_server)
    yield uri
    drop_database(pg_server, uri)


def make_settings(pg_uri: str, **overrides) -> Settings:
    base = dict(database_url=pg_uri, log_format="text", sweep_interval_seconds=3600,
                retention_interval_seconds=36000, hooks_allow_private=True,
                metrics_token="m" * 40, secret_key="test-secret-key-" + "k" * 32)
    base.update(overrides)
    return load_settings(**base)


def clean_database(uri: str) -> None:
    with psycopg.connect(uri, autocommit=True) as conn:
        tables = [r[0] for r in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public'").fetchall()]
        wipe = [t for t in tables if t not in KEEP_TABLES]
        if wipe:
            truncate = "TRUNCATE " + ", ".join(f'"{t}"' for t in wipe) + " RESTART IDENTITY CASCADE"
            # A server of the previous module may still be finishing a transaction over several of
            # these tables while it shuts down; TRUNCATE takes its locks one table at a time, so the
            # two can deadlock. PostgreSQL aborts one of them; when it is this one, try again.
            for attempt in range(10):
                try:
                    conn.execute(truncate)
                    break
                except (psycopg.errors.DeadlockDetected, psycopg.errors.LockNotAvailable):
                    if attempt == 9:
                        raise
                    time.sleep(0.2)
        conn.execute("UPDATE settings SET value = '50' WHERE key = 'attempt_history_max_per_todo'")
        conn.execute("UPDATE settings SET value = '30' WHERE key = 'retention_max_age_days'")
        conn.execute("UPDATE settings SET value = '500000' WHERE key = 'retention_max_rows'")


@asynccontextmanager
async def core_for(uri: str, **overrides):
    """The core of a runtime attached to an already migrated database (the app's and CLI's way in)."""
    async with open_runtime(make_settings(uri, **overrides), migrate=False, min_size=1, max_size=20) as runtime:
        yield runtime.core


@pytest.fixture
async def core(pg_uri):
    """A core on a clean database. Override settings with `core.settings = make_settings(...)`."""
    clean_database(pg_uri)
    async with core_for(pg_uri) as c:
        yield c


@pytest.fixture
async def own_core(pg_server):
    """A core on a database of its own (its URI as `.uri`), dropped afterwards: no server of this
    session works on it (sends its outbox, sweeps it)."""
    uri = create_database(pg_server)
    async with core_for(uri) as c:
        c.uri = uri
        yield c
    drop_database(pg_server, uri)


# ------------------------------------------------------------------------------------------ servers

@dataclass
class LiveServer:
    url: str
    settings: Settings
    app: object
    _server: object
    _thread: threading.Thread | None = None
    process: subprocess.Popen | None = None

    def stop(self) -> None:
        if self.process is not None:
            if self.process.poll() is None:
                self.process.terminate()
                try:
                    self.process.wait(10)
                except subprocess.TimeoutExpired:
                    self.process.kill()
            return
        self._server.should_exit = True
        if self._thread:
            self._thread.join(15)


def start_thread_server(settings: Settings) -> LiveServer:
    """The real app under uvicorn on a free port, in a thread with its own event loop."""
    import uvicorn

    from switchboard.web.app import create_app

    port = free_port()
    settings = settings.model_copy(update={"port": port, "host": "127.0.0.1"})
    app = create_app(settings)
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None, access_log=False, lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("server did not start")
        time.sleep(0.02)
    return LiveServer(url=f"http://127.0.0.1:{port}", settings=settings, app=app, _server=server, _thread=thread)


def start_process_server(pg_uri: str, env: dict | None = None) -> LiveServer:
    """`switchboard serve` as a separate process (for kill/restart and cross-process tests)."""
    import httpx

    port = free_port()
    full_env = dict(os.environ)
    full_env.update({"SWITCHBOARD_DATABASE_URL": pg_uri, "SWITCHBOARD_PORT": str(port),
                     "SWITCHBOARD_HOST": "127.0.0.1", "SWITCHBOARD_LOG_FORMAT": "json",
                     "SWITCHBOARD_HOOKS_ALLOW_PRIVATE": "1", "SWITCHBOARD_METRICS_TOKEN": "m" * 40,
                     "SWITCHBOARD_SECRET_KEY": "test-secret-key-" + "k" * 32})
    full_env.update(env or {})
    proc = subprocess.Popen([sys.executable, "-m", "switchboard", "serve"], env=full_env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=ROOT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 40
    while True:
        try:
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            out = proc.stdout.read().decode() if proc.stdout else ""
            proc.kill()
            raise RuntimeError(f"server process did not start:\n{out[-3000:]}")
        time.sleep(0.1)
    return LiveServer(url=url, settings=load_settings(database_url=pg_uri, port=port), app=None,
                      _server=None, process=proc)


@pytest.fixture
def live_server(pg_uri):
    """Factory: `srv = live_server(**setting_overrides)`; stopped after the test."""
    started: list[LiveServer] = []

    def start(**overrides) -> LiveServer:
        srv = start_thread_server(make_settings(pg_uri, **overrides))
        started.append(srv)
        return srv

    yield start
    for srv in started:
        srv.stop()


def chromium_path() -> str | None:
    for candidate in ("/usr/bin/chromium", "/usr/bin/chromium-browser"):
        if os.path.exists(candidate):
            return candidate
    return None
