"""SPEC-0034 REQ-14 across processes: every closed attempt is counted exactly once in the sum of the
serving processes' /metrics, whichever process or command closed it (docs/decisions.md, "Metrics
from every process").

Two `switchboard serve` processes share one database. Transitions come from the local CLI (a
subprocess on the database: push, claim, fail, `sweep --once`, `endpoint revoke`), and from the remote
CLI (SWITCHBOARD_URL + SWITCHBOARD_TOKEN, through a server's API). Both servers are scraped and the
sums compared with what the database holds. A CLI run while no server is up is counted once, by
the server that starts later.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import httpx
import psycopg
import pytest

from conftest import create_database, start_process_server

SB = str(Path(sys.executable).parent / "switchboard")
NOWHERE_DB = "postgresql://sb:sb@127.0.0.1:1/nowhere?connect_timeout=2"
METRICS_AUTH = {"Authorization": "Bearer " + "m" * 40}
QUIET = {"SWITCHBOARD_SWEEP_INTERVAL_SECONDS": "3600"}  # no reaping by the servers themselves
_SAMPLE = re.compile(r'^(switchboard_[a-z_]+_total)\{([^}]*)\} ([0-9.e+]+)$')


def _env(tmp: Path, **extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWITCHBOARD_")}
    env.update(XDG_CONFIG_HOME=str(tmp), SWITCHBOARD_LOG_FORMAT="text")
    env.update(extra)
    return env


def sb(env: dict, *args: str) -> dict:
    done = subprocess.run([SB, *args, "--json"], env=env, capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return json.loads(done.stdout)


def scrape(url: str) -> Counter:
    """{(family, labels): value} for the counters of one process."""
    resp = httpx.get(url + "/metrics", headers=METRICS_AUTH, timeout=10)
    assert resp.status_code == 200
    out: Counter = Counter()
    for line in resp.text.splitlines():
        m = _SAMPLE.match(line)
        if m:
            labels = tuple(sorted(re.findall(r'(\w+)="([^"]*)"', m.group(2))))
            out[(m.group(1), labels)] += float(m.group(3))
    return out


def totals(urls: list[str]) -> Counter:
    total: Counter = Counter()
    for url in urls:
        total.update(scrape(url))
    return +total


def expected(uri: str) -> Counter:
    """What the database says the counters must sum to."""
    want: Counter = Counter()
    with psycopg.connect(uri) as conn:
        for queue, outcome, n in conn.execute(
                "SELECT t.queue, a.outcome, count(*) FROM todo_attempts a JOIN todos t ON t.id = a.todo_id"
                " WHERE a.ended_at IS NOT NULL GROUP BY 1, 2").fetchall():
            want[("switchboard_todo_attempts_closed_total", (("outcome", outcome), ("queue", queue)))] += n
            if outcome in ("lease_expired", "reaped"):
                want[("switchboard_lease_expired_total", (("queue", queue),))] += n
            if outcome in ("completed", "failed"):
                verb = "complete" if outcome == "completed" else "fail"
                want[("switchboard_todos_completed_total", (("outcome", verb), ("queue", queue)))] += n
        for queue, n in conn.execute("SELECT t.queue, count(*) FROM todo_attempts a JOIN todos t ON t.id = a.todo_id"
                                     " GROUP BY 1").fetchall():
            want[("switchboard_todos_claimed_total", (("queue", queue),))] += n
        for queue, source, n in conn.execute("SELECT queue, source, count(*) FROM todos GROUP BY 1, 2").fetchall():
            want[("switchboard_todos_created_total", (("queue", queue), ("source", source)))] += n
    return want


FAMILIES = ("switchboard_todo_attempts_closed_total", "switchboard_lease_expired_total",
            "switchboard_todos_completed_total", "switchboard_todos_claimed_total",
            "switchboard_todos_created_total")


def counted(urls: list[str]) -> Counter:
    return Counter({k: v for k, v in totals(urls).items() if k[0] in FAMILIES and v})


def assert_counted_once(urls: list[str], uri: str, deadline: float = 20.0) -> Counter:
    """Poll the scrapes until their sum equals the database (the drain is asynchronous), then check
    it stays equal: nothing is counted twice and the spool is empty."""
    want = expected(uri)
    end = time.monotonic() + deadline
    while True:
        got = counted(urls)
        if got == want or time.monotonic() > end:
            break
        time.sleep(0.2)
    assert got == want
    assert spooled(uri) == 0
    assert counted(urls) == want
    return got


def spooled(uri: str) -> int:
    with psycopg.connect(uri) as conn:
        return conn.execute("SELECT count(*) FROM metric_spool").fetchone()[0]


def lapse_all(uri: str) -> None:
    with psycopg.connect(uri) as conn:
        conn.execute("UPDATE todos SET lease_expires_at = now() - interval '1 minute' WHERE state = 'claimed'")
        conn.execute("UPDATE todo_attempts SET lease_expires_at = now() - interval '1 minute' WHERE ended_at IS NULL")


class Operator:
    """One human driving the CLI locally (on the database) and remotely (through a server's API)."""

    def __init__(self, uri: str, tmp: Path, server_url: str | None = None) -> None:
        self.uri = uri
        base = _env(tmp, SWITCHBOARD_DATABASE_URL=uri)
        sb(base, "user", "add", "ops", "--no-password")
        self.local = dict(base, SWITCHBOARD_USER="ops")
        token = sb(self.local, "token", "create")["token"]
        self.remote = (_env(tmp, SWITCHBOARD_DATABASE_URL=NOWHERE_DB, SWITCHBOARD_URL=server_url,
                            SWITCHBOARD_TOKEN=token) if server_url else None)

    def vend(self, agent: str, queue: str) -> str:
        return sb(self.local, "endpoint", "vend", "--agent", agent, "--queue", queue)["slug"]

    def claimed(self, slug: str, queue: str, n: int = 1) -> list[str]:
        ids = []
        for i in range(n):
            todo = sb(self.local, "todo", "push", slug, "--title", f"job {i}", "--queue", queue)["todo"]
            sb(self.local, "todo", "claim", todo["id"])
            ids.append(todo["id"])
        return ids


@pytest.fixture
def servers(pg_server):
    uri = create_database(pg_server)
    started = []
    try:
        started.append(start_process_server(uri, env=QUIET))
        started.append(start_process_server(uri, env=QUIET))
        yield uri, started
    finally:
        for srv in started:
            srv.stop()


def test_every_closed_attempt_counts_once_over_two_serving_processes(servers, tmp_path):
    uri, (a, b) = servers
    urls = [a.url, b.url]
    ops = Operator(uri, tmp_path, server_url=a.url)
    slug = ops.vend("worker", "build")

    # A local CLI fail: committed by a process without /metrics, spooled, taken by a server.
    (first,) = ops.claimed(slug, "build")
    sb(ops.local, "todo", "fail", first, "--no-retry")
    assert spooled(uri) > 0
    assert_counted_once(urls, uri)

    # A remote CLI fail: the server's own transition, counted in its memory, never spooled.
    (second,) = ops.claimed(slug, "build")
    before = spooled(uri)
    sb(ops.remote, "todo", "fail", second, "--no-retry")
    assert spooled(uri) == before
    got = assert_counted_once(urls, uri)
    assert got[("switchboard_todo_attempts_closed_total", (("outcome", "failed"), ("queue", "build")))] == 2

    # A sweep from the CLI reaping lapsed leases, taken by both servers scraped at once.
    ops.claimed(slug, "build", n=5)
    lapse_all(uri)
    assert sb(ops.local, "sweep", "--once")["reaped"] == 5
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        list(pool.map(scrape, urls * 4))
    got = assert_counted_once(urls, uri)
    assert got[("switchboard_lease_expired_total", (("queue", "build"),))] == 5
    assert got[("switchboard_todo_attempts_closed_total", (("outcome", "reaped"), ("queue", "build")))] == 5

    # An endpoint revoked from the CLI closes its open attempts `revoked`.
    doomed = ops.vend("doomed", "deploy")
    ops.claimed(doomed, "deploy", n=2)
    sb(ops.local, "endpoint", "revoke", doomed)
    got = assert_counted_once(urls, uri)
    assert got[("switchboard_todo_attempts_closed_total", (("outcome", "revoked"), ("queue", "deploy")))] == 2

    # Release and cancel from the CLI as well.
    one, two = ops.claimed(slug, "build", n=2)
    sb(ops.local, "todo", "release", one)
    sb(ops.local, "todo", "cancel", two)
    got = assert_counted_once(urls, uri)
    for outcome in ("released", "canceled"):
        assert got[("switchboard_todo_attempts_closed_total", (("outcome", outcome), ("queue", "build")))] == 1


def test_a_cli_transition_while_no_server_runs_is_counted_once_when_one_starts(pg_server, tmp_path):
    uri = create_database(pg_server)
    ops = Operator(uri, tmp_path)
    slug = ops.vend("worker", "inbox")
    (todo,) = ops.claimed(slug, "inbox")
    sb(ops.local, "todo", "fail", todo, "--no-retry")
    assert spooled(uri) == 3  # created, claimed, closed: waiting for a serving process

    srv = start_process_server(uri, env=QUIET)
    try:
        got = assert_counted_once([srv.url], uri)
        assert got[("switchboard_todo_attempts_closed_total", (("outcome", "failed"), ("queue", "inbox")))] == 1
    finally:
        srv.stop()
    # The count lived in that process; the rows are gone, so a later server does not count them again.
    srv = start_process_server(uri, env=QUIET)
    try:
        assert counted([srv.url]) == Counter()
    finally:
        srv.stop()


def test_the_sweep_tick_takes_the_spool_without_a_scrape(pg_server, tmp_path):
    uri = create_database(pg_server)
    ops = Operator(uri, tmp_path)
    slug = ops.vend("worker", "inbox")
    ops.claimed(slug, "inbox")
    assert spooled(uri) == 2
    srv = start_process_server(uri, env={"SWITCHBOARD_SWEEP_INTERVAL_SECONDS": "1"})
    try:
        end = time.monotonic() + 15
        while spooled(uri) and time.monotonic() < end:
            time.sleep(0.2)
        assert spooled(uri) == 0
        assert counted([srv.url]) == expected(uri)
    finally:
        srv.stop()


def test_the_spool_is_bounded_when_no_server_ever_runs(pg_server, tmp_path):
    """Every 1000th spooled row drops the rows more than 100000 behind it."""
    uri = create_database(pg_server)
    ops = Operator(uri, tmp_path)
    slug = ops.vend("worker", "inbox")
    with psycopg.connect(uri) as conn:
        conn.execute("INSERT INTO metric_spool (id, kind, queue) OVERRIDING SYSTEM VALUE"
                     " VALUES (5, 'claimed', 'inbox'), (101000, 'claimed', 'inbox'), (101001, 'claimed', 'inbox')")
        conn.execute("SELECT setval(pg_get_serial_sequence('metric_spool', 'id'), 200999)")
    sb(ops.local, "todo", "push", slug, "--title", "the thousandth")
    with psycopg.connect(uri) as conn:
        ids = [r[0] for r in conn.execute("SELECT id FROM metric_spool ORDER BY id").fetchall()]
    assert ids == [101001, 201000]
