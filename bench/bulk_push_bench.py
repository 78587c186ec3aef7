"""Bulk push benchmark (issue 17, part 3): todos pushed per second by `producer.push_many` (up to
1,000 todos in one INSERT statement), by the human API's `todos:batch` route, and by a bare multi-row
INSERT, beside `producer.push` (one statement per todo), in one run.

Variants, interleaved in rounds (in alternating order) so that noise on the shared machine hits all
of them alike:

  single      `producer.push`, one call per todo, each with its own idempotency key
  bulk        `producer.push_many` with --batch todos per call (default 1,000), each with its own key
  bulk-nokey  the same without idempotency keys
  http        `POST /api/v1/endpoints/{slug}/todos:batch` with --batch todos per request, each with
              its own key, to `switchboard serve` in its own process (keep-alive connection per
              worker, a light client: request bodies encoded before the clock starts, the answer's
              status and length read, not parsed)
  raw         the bare statement: one INSERT of --batch rows per statement from raw psycopg (the same
              columns as JSON arrays zipped by ROWS FROM, each row with its own key in the unique
              index; no conflict handling, no RETURNING, no liveness check, no answers, no events)
  raw-nokey   the same without keys

Each at every --workers count (concurrent callers: asyncio tasks on one pool for the core, one
connection each for raw and http; one endpoint, two queues). The todos are the same small ones
(title, {"n": i} payload). The rates are medians over --rounds; CPU per 1,000 todos of this process,
of the server process (http) and of the embedded PostgreSQL are reported next to them. Every pushed
todo is checked to be in the database at the end, and the wake-ups a LISTEN connection received are
counted (one per queue per statement for a bulk push).

Runs on a fresh embedded PostgreSQL in a temporary directory, or on the server of
SWITCHBOARD_DATABASE_URL (its own database is created there and dropped afterwards).

    .venv/bin/python bench/bulk_push_bench.py                      # about 4 minutes on 2 cores
    .venv/bin/python bench/bulk_push_bench.py --seconds 2 --rounds 1 --workers 1   # a quick look
    .venv/bin/python bench/bulk_push_bench.py --variants bulk,http,raw --workers 4
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))

from store_bench import Databases, ServerCpu, loadavg, machine_info, postgres_server, server_facts
from switchboard.config import load_settings
from switchboard.core import api_tokens, endpoints, humans, producer
from switchboard.core.models import Core
from switchboard.db.listen import READY_CHANNEL
from switchboard.db.pool import open_pool

QUEUES = ("bulk-a", "bulk-b")
VARIANTS = ("single", "bulk", "bulk-nokey", "http", "raw", "raw-nokey")

# The bare statement: the rows as JSON arrays (the cheapest parameters for Python to build), one INSERT.
RAW_INSERT = """
INSERT INTO todos (id, endpoint_id, queue, source, title, payload, idempotency_key)
SELECT i.id, %(endpoint_id)s, i.queue, 'bench', i.title, i.payload, i.key
  FROM ROWS FROM (jsonb_array_elements_text(%(ids)s::jsonb), jsonb_array_elements_text(%(queues)s::jsonb),
                  jsonb_array_elements_text(%(titles)s::jsonb), jsonb_array_elements(%(payloads)s::jsonb),
                  jsonb_array_elements_text(%(keys)s::jsonb)) AS i(id, queue, title, payload, key)
"""


def todo_items(n: int, *, keys: bool) -> list[dict]:
    tag = uuid.uuid4().hex[:12]
    return [{"title": f"job {i}", "queue": QUEUES[i % 2], "payload": {"n": i},
             **({"key": f"{tag}-{i}"} if keys else {})} for i in range(n)]


def raw_params(endpoint_id, n: int, *, keys: bool) -> dict:
    tag = uuid.uuid4().hex[:12]
    h = os.urandom(16 * n).hex()
    return {"endpoint_id": endpoint_id, "ids": json.dumps([f"td_{h[j:j + 32]}" for j in range(0, 32 * n, 32)]),
            "queues": json.dumps([QUEUES[i % 2] for i in range(n)]),
            "titles": json.dumps([f"job {i}" for i in range(n)]),
            "payloads": "[" + ",".join(f'{{"n":{i}}}' for i in range(n)) + "]",
            "keys": json.dumps([f"{tag}-{i}" for i in range(n)]) if keys else None}


# ----------------------------------------------------------------------------------- the server

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`switchboard serve` in its own process on the benchmark's database."""

    def __init__(self, uri: str) -> None:
        self.port = free_port()
        env = dict(os.environ, SWITCHBOARD_DATABASE_URL=uri, SWITCHBOARD_PORT=str(self.port),
                   SWITCHBOARD_HOST="127.0.0.1", SWITCHBOARD_API_RATE_LIMIT_PER_MINUTE="100000000",
                   SWITCHBOARD_API_RATE_LIMIT_BURST="100000000", SWITCHBOARD_SWEEP_INTERVAL_SECONDS="3600",
                   SWITCHBOARD_LOG_LEVEL="warning")
        self.proc = subprocess.Popen([sys.executable, "-m", "switchboard", "serve"], env=env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                    if b" 200 " in s.recv(200):
                        return
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the server did not start")
            time.sleep(0.1)

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()


class HttpClient:
    """One keep-alive HTTP/1.1 connection; posts pre-encoded bodies and reads the status and body."""

    def __init__(self, port: int, path: str, token: str) -> None:
        self.port, self.path, self.token = port, path, token
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, body: bytes) -> int:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        assert self.reader is not None
        head = (f"POST {self.path} HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\nAuthorization: Bearer {self.token}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode()
        self.writer.write(head + body)
        status_line = await self.reader.readline()
        if not status_line:  # the server closed the idle connection between measurements: once more
            await self.close()
            self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
            self.writer.write(head + body)
            status_line = await self.reader.readline()
        length = 0
        while True:
            line = await self.reader.readline()
            if line in (b"\r\n", b""):
                break
            name, _, value = line.decode("latin-1").partition(":")
            if name.lower() == "content-length":
                length = int(value)
        await self.reader.readexactly(length)
        return int(status_line.split()[1])

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.reader = self.writer = None


# ------------------------------------------------------------------------------------- variants

class World:
    def __init__(self, core: Core, human, slug: str, endpoint_id, uri: str, server: Server | None, token: str):
        self.core, self.human, self.slug, self.endpoint_id = core, human, slug, endpoint_id
        self.uri, self.server, self.token = uri, server, token
        self.raw_conns: list[psycopg.AsyncConnection] = []
        self.http: list[HttpClient] = []

    async def connections(self, workers: int) -> None:
        while len(self.raw_conns) < workers:
            self.raw_conns.append(await psycopg.AsyncConnection.connect(self.uri, autocommit=True))
        if self.server is not None:
            while len(self.http) < workers:
                self.http.append(HttpClient(self.server.port, f"/api/v1/endpoints/{self.slug}/todos:batch",
                                            self.token))


async def run_variant(w: World, variant: str, workers: int, batch: int, seconds: float,
                      bodies: list[bytes] | None = None) -> int:
    deadline = time.perf_counter() + seconds

    async def single() -> int:
        done = 0
        while time.perf_counter() < deadline:
            for item in todo_items(50, keys=True):
                await producer.push(w.core, w.human, w.slug, **item)
            done += 50
        return done

    async def bulk(keys: bool) -> int:
        done = 0
        while time.perf_counter() < deadline:
            results = await producer.push_many(w.core, w.human, w.slug, todo_items(batch, keys=keys))
            assert all(created for _, created in results)
            done += len(results)
        return done

    async def raw(conn: psycopg.AsyncConnection, keys: bool) -> int:
        done = 0
        while time.perf_counter() < deadline:
            cur = await conn.execute(RAW_INSERT, raw_params(w.endpoint_id, batch, keys=keys))
            assert cur.rowcount == batch
            done += batch
        return done

    async def http(client: HttpClient) -> int:
        done = 0
        while time.perf_counter() < deadline:
            body = bodies.pop() if bodies else http_body(batch)
            status = await client.post(body)
            assert status == 201, status
            done += batch
        return done

    if variant == "single":
        runs = [single() for _ in range(workers)]
    elif variant in ("bulk", "bulk-nokey"):
        runs = [bulk(variant == "bulk") for _ in range(workers)]
    elif variant in ("raw", "raw-nokey"):
        runs = [raw(w.raw_conns[i], variant == "raw") for i in range(workers)]
    else:
        for client in w.http:  # the server closes idle keep-alive connections; start each measurement afresh
            await client.close()
        runs = [http(w.http[i]) for i in range(workers)]
    return sum(await asyncio.gather(*runs))


def http_body(batch: int) -> bytes:
    return json.dumps({"todos": todo_items(batch, keys=True)}, separators=(",", ":")).encode()


async def main(args: argparse.Namespace) -> int:
    worker_counts = [int(w) for w in args.workers.split(",")]
    variants = [v for v in args.variants.split(",") if v]
    unknown = set(variants) - set(VARIANTS)
    if unknown:
        raise SystemExit(f"unknown variants: {', '.join(sorted(unknown))}")
    started = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    load_start = loadavg()
    loads: list[float] = []
    t_start = time.perf_counter()
    with postgres_server() as (server_uri, how, pgdata):
        dbs = Databases(server_uri)
        server = None
        try:
            uri = await dbs.create("bulk")
            facts = await server_facts(uri)
            pool = await open_pool(uri, min_size=2, max_size=20)
            core = Core(pool=pool, settings=load_settings(database_url=uri, log_format="text"))
            human = await humans.add(core, "bench")
            ep, _ = await endpoints.vend(core, human, agent="bench", queues=list(QUEUES))
            token, _ = await api_tokens.create(core, human, scope_name="write")
            if "http" in variants:
                server = Server(uri)
            w = World(core, human, ep["slug"], uuid.UUID(str(ep["endpoint_id"])), uri, server, token)
            await w.connections(max(worker_counts))
            listen = await psycopg.AsyncConnection.connect(uri, autocommit=True)
            await listen.execute(f"LISTEN {READY_CHANNEL}")
            wakeups = 0

            async def count_wakeups() -> None:
                nonlocal wakeups
                async for _ in listen.notifies():
                    wakeups += 1

            counter = asyncio.create_task(count_wakeups())
            server_cpu = ServerCpu(pgdata)
            rows: dict[tuple[str, int], list[dict]] = {}
            for v in variants:  # warm-up: plans, pool connections, the server's imports
                await run_variant(w, v, 1, args.batch, 0.5)
            async with pool.connection() as conn:
                total = (await (await conn.execute("SELECT count(*) FROM todos")).fetchone())["count"]
            for r in range(args.rounds):
                for wc in worker_counts:
                    for v in (variants if r % 2 == 0 else variants[::-1]):
                        bodies = ([http_body(args.batch) for _ in range(args.http_bodies)] if v == "http" else None)
                        cpu0, srv0, t0 = time.process_time(), server_cpu.seconds(), time.perf_counter()
                        app0 = server.cpu_seconds() if server and v == "http" else None
                        n = await run_variant(w, v, wc, args.batch, args.seconds, bodies)
                        wall = time.perf_counter() - t0
                        cpu1, srv1 = time.process_time(), server_cpu.seconds()
                        app1 = server.cpu_seconds() if server and v == "http" else None
                        total += n
                        loads.append(loadavg()[0])
                        rows.setdefault((v, wc), []).append({
                            "rate": n / wall, "py_ms_per_1000": (cpu1 - cpu0) / n * 1e6,
                            "pg_ms_per_1000": (srv1 - srv0) / n * 1e6 if srv0 is not None else None,
                            "server_ms_per_1000": (app1 - app0) / n * 1e6 if app0 is not None else None})
                        print(f"round {r + 1} {v:10s} W={wc:<2d} {n / wall:>10,.0f} todos/s", file=sys.stderr)
            await asyncio.sleep(0.5)
            counter.cancel()
            await listen.close()
            for c in w.raw_conns:
                await c.close()
            for h in w.http:
                await h.close()
            async with pool.connection() as conn:
                stored = (await (await conn.execute("SELECT count(*) FROM todos")).fetchone())["count"]
            assert stored == total, f"{stored} todos stored, {total} pushed"
            await pool.close()
        finally:
            if server is not None:
                server.stop()
            await dbs.drop_all()

    def med(xs: list[dict], key: str) -> float | None:
        vals = [x[key] for x in xs if x[key] is not None]
        return statistics.median(vals) if vals else None

    def ratio(v: str, base: str, wc: int) -> float | None:
        if (v, wc) not in rows or (base, wc) not in rows:
            return None
        return statistics.median(a["rate"] / b["rate"] for a, b in zip(rows[(v, wc)], rows[(base, wc)], strict=True))

    def rnd(x: float | None, nd: int = 1) -> float | None:
        return round(x, nd) if x is not None else None

    base = "raw" if "raw" in variants else None
    table = [{"variant": v, "workers": wc, "todos_per_s": round(med(rows[(v, wc)], "rate") or 0),
              "to_raw": rnd(ratio(v, base, wc), 2) if base else None,
              "py_cpu_ms_per_1000": rnd(med(rows[(v, wc)], "py_ms_per_1000")),
              "server_cpu_ms_per_1000": rnd(med(rows[(v, wc)], "server_ms_per_1000")),
              "pg_cpu_ms_per_1000": rnd(med(rows[(v, wc)], "pg_ms_per_1000"))}
             for wc in worker_counts for v in variants]
    report = {"started": started, "seconds_total": round(time.perf_counter() - t_start),
              "machine": machine_info(), "server": facts, "postgres": how, "batch": args.batch,
              "seconds": args.seconds, "rounds": args.rounds, "todos_stored": total, "wakeups": wakeups,
              "loadavg": {"start": load_start[0], "during": [min(loads), statistics.median(loads), max(loads)],
                          "end": loadavg()[0]},
              "results": table}
    print(json.dumps(report, indent=2))
    print("\n| variant | workers | todos/s | / raw | this process CPU ms / 1,000 | server CPU ms / 1,000 |"
          " PostgreSQL CPU ms / 1,000 |", file=sys.stderr)
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |", file=sys.stderr)
    for row in table:
        print(f"| {row['variant']} | {row['workers']} | {row['todos_per_s']:,} | {row['to_raw'] or '-'} | "
              f"{row['py_cpu_ms_per_1000']} | {row['server_cpu_ms_per_1000'] or '-'} | {row['pg_cpu_ms_per_1000']} |",
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", default="1,4", help="comma-separated concurrent callers (default 1,4)")
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, of {', '.join(VARIANTS)}")
    parser.add_argument("--batch", type=int, default=1000, help="todos per push_many call (1-1000)")
    parser.add_argument("--seconds", type=float, default=3.0, help="seconds per measurement")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; medians are reported")
    parser.add_argument("--http-bodies", type=int, default=120,
                        help="request bodies encoded before each http measurement (more are made as needed)")
    sys.exit(asyncio.run(main(parser.parse_args())))
