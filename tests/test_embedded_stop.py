"""Stopping the embedded server when it does not answer (db/embedded.py `release`).

A stalled PostgreSQL (played by SIGSTOP, as tests/test_hardening_database.py plays it) never finishes
a fast shutdown. `switchboard serve` then waited out pg_ctl's whole wait and logged that the server
"was already stopped"; now the stop says it did not happen, tries an immediate shutdown, and gives up
in bounded time, saying the server is left running.
"""

from __future__ import annotations

import logging
import time

import psycopg
import pytest

from conftest import throwaway_pg
from switchboard.db import embedded
from test_hardening_database import Frozen


@pytest.fixture
def own_server():
    with throwaway_pg("switchboard-test-stop-pg-") as server:
        yield server


def test_a_stalled_server_is_given_up_on_in_bounded_time_and_said_so(own_server, monkeypatch, caplog):
    monkeypatch.setattr(embedded, "FAST_STOP_SECONDS", 2)
    monkeypatch.setattr(embedded, "IMMEDIATE_STOP_SECONDS", 2)
    with caplog.at_level(logging.WARNING, logger="switchboard.db"), Frozen(own_server.pgdata):
        started = time.monotonic()
        stopped = own_server.release()
        took = time.monotonic() - started
    assert stopped is False and took < 10
    events = [getattr(r, "event", None) for r in caplog.records]
    assert events.count("postgres_stop_slow") == 2 and "postgres_not_stopped" in events
    assert not any("already stopped" in r.getMessage() for r in caplog.records)
    # Running again, it acts on the shutdown it was sent while stalled: the immediate one.
    for _ in range(100):
        if not own_server.postmaster_running():
            break
        time.sleep(0.1)
    assert not own_server.postmaster_running()
    assert own_server.release() is True  # nothing left to stop


def test_a_running_server_stops_with_a_fast_shutdown(own_server, caplog):
    with psycopg.connect(own_server.uri) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
    with caplog.at_level(logging.WARNING, logger="switchboard.db"):
        assert own_server.release() is True
    assert not own_server.postmaster_running()
    assert not [r for r in caplog.records if r.name == "switchboard.db"]
