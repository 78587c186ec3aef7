"""MCP benchmark (SYSTEM.md section 16, issue 3 section 7): what one `switchboard serve` process sustains.

Measured in one run, against one server process on a fresh database:

  calls/s      tool calls/s with 1, 8 and 32 concurrent keep-alive clients (session era, one session
               per connection): `ping` (the MCP path alone) and `list_todos` (one light query)
  cycles/s     claim_next -> complete cycles/s end to end with 4 concurrent clients, next to the core's
               own cycles/s (the same two transitions called in-process with 4 asyncio workers),
               interleaved in rounds so that noise on a shared machine hits both alike; also the
               2026-07-28 era (no session) and the official SDK client (`mcp.Client`, httpx2)
  memory       the server's resident set at idle and with 200 open sessions, each holding its GET
               notification stream

The light client is raw JSON-RPC over keep-alive HTTP/1.1 on asyncio streams, so that the client is
not what is measured; its CPU per call is printed beside the rate, and so is the server's (from
/proc), and for cycles the CPU of the PostgreSQL backends on the benchmark's database (from /proc,
when the database runs on this machine). `--profile FILE` also runs `switchboard serve` under
cProfile with a CPU clock over the measured cycles only (`--profile-era 2026-07-28` for the
stateless path, `--profile-only` to skip everything else) and prints where its time per cycle goes;
`--levers` (on by default) starts one server per per-call lever turned back
(bench/mcp_variant_server.py) and prints each one's cycles/s beside the shipped server's.
`--layers` times, in this process and without sockets, each layer in front of the SDK (the app's
wrappers, Starlette's routing, the route's guard, the gateway), uvicorn's HTTP protocol with and
without the head and body deadlines, and PostgreSQL's CPU for the endpoint check each statement
makes; run it with PYTHONPATH naming another tree's src to compare trees.

    make bench                                   # after the store bench
    .venv/bin/python bench/mcp_bench.py --quick  # about 1 minute
    .venv/bin/python bench/mcp_bench.py --layers # what each layer in front of the SDK costs
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
import warnings
from dataclasses import dataclass
from pathlib import Path

import psycopg

from switchboard.config import load_settings
from switchboard.core import endpoints, humans, todos
from switchboard.core.models import Core
from switchboard.db import migrate
from switchboard.db.pool import open_pool

QUEUE = "bench"
WORKERS = 4
ROOT = Path(__file__).resolve().parent.parent
SESSION_ERA = "2025-11-25"
MODERN_ERA = "2026-07-28"


# ---------------------------------------------------------------------------------- light client

class LightClient:
    """One keep-alive HTTP/1.1 connection speaking JSON-RPC to /mcp/<slug>."""

    def __init__(self, port: int, slug: str, credential: str, era: str = SESSION_ERA) -> None:
        self.port, self.slug, self.era = port, slug, era
        self.base = (f"POST /mcp/{slug} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                     f"Authorization: Bearer {credential}\r\nContent-Type: application/json\r\n"
                     "Accept: application/json, text/event-stream\r\n").encode()
        self.session: bytes = b""
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self._id = 0

    async def open(self) -> LightClient:
        self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        if self.era == SESSION_ERA:
            result = await self.request("initialize", {"protocolVersion": SESSION_ERA, "capabilities": {},
                                                       "clientInfo": {"name": "bench", "version": "0"}})
            assert result["protocolVersion"] == SESSION_ERA, result
            await self.notify("notifications/initialized")
        return self

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            with contextlib.suppress(Exception):
                await self.writer.wait_closed()

    async def _exchange(self, payload: dict, extra: bytes = b"") -> tuple[int, bytes]:
        data = json.dumps(payload, separators=(",", ":")).encode()
        head = self.base + self.session + extra + b"Content-Length: " + str(len(data)).encode() + b"\r\n\r\n"
        self.writer.write(head + data)
        status_line = await self.reader.readline()
        status = int(status_line.split(b" ", 2)[1])
        length, chunked = 0, False
        while True:
            line = await self.reader.readline()
            if line in (b"\r\n", b""):
                break
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding" and b"chunked" in value.lower():
                chunked = True
            elif name == b"mcp-session-id":
                self.session = b"Mcp-Session-Id: " + value.strip() + b"\r\nMCP-Protocol-Version: " \
                               + SESSION_ERA.encode() + b"\r\n"
        if chunked:
            body = b""
            while True:
                size = int((await self.reader.readline()).strip(), 16)
                if size == 0:
                    await self.reader.readline()
                    break
                body += await self.reader.readexactly(size)
                await self.reader.readline()
            return status, body
        return status, (await self.reader.readexactly(length)) if length else b""

    async def request(self, method: str, params: dict | None = None) -> dict:
        self._id += 1
        params = dict(params or {})
        extra = b""
        if self.era == MODERN_ERA:
            params["_meta"] = {"io.modelcontextprotocol/protocolVersion": MODERN_ERA,
                               "io.modelcontextprotocol/clientCapabilities": {}}
            extra = f"MCP-Protocol-Version: {MODERN_ERA}\r\nMcp-Method: {method}\r\n".encode()
            if method == "tools/call":
                extra += f"Mcp-Name: {params['name']}\r\n".encode()
        status, body = await self._exchange({"jsonrpc": "2.0", "id": self._id, "method": method,
                                             "params": params}, extra)
        if status != 200:
            raise RuntimeError(f"{method}: HTTP {status} {body[:200]!r}")
        if body[:1] != b"{":  # an SSE answer: the data line carrying the response
            body = next(line[5:] for line in body.splitlines()
                        if line.startswith(b"data:") and b'"id"' in line)
        msg = json.loads(body)
        if "error" in msg:
            raise RuntimeError(f"{method}: {msg['error']}")
        return msg["result"]

    async def notify(self, method: str) -> None:
        status, _ = await self._exchange({"jsonrpc": "2.0", "method": method})
        assert status == 202, status

    async def tool(self, name: str, arguments: dict) -> dict:
        result = await self.request("tools/call", {"name": name, "arguments": arguments})
        if result.get("isError"):
            raise RuntimeError(f"{name}: {result['content'][0]['text']}")  # errors carry no structuredContent
        return result["structuredContent"]


async def open_stream(port: int, slug: str, credential: str, session_header: bytes) -> asyncio.StreamWriter:
    """A session's GET notification stream, held open (for the memory figure)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET /mcp/{slug} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {credential}\r\n"
                 "Accept: text/event-stream\r\n".encode() + session_header + b"\r\n")
    status = await reader.readline()
    assert b" 200 " in status, status
    return writer


# ------------------------------------------------------------------------------------ the server

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Served:
    proc: subprocess.Popen
    port: int

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def serve(uri: str, log_level: str, variant: str | None = None, profile_to: Path | None = None,
          src: str | None = None) -> Served:
    """`switchboard serve` as its own process; with `variant`, bench/mcp_variant_server.py instead;
    with `profile_to`, `switchboard serve` under cProfile (`serve_profiled`), stats written there;
    with `src`, the `switchboard serve` of another tree (its `src` directory first on PYTHONPATH)."""
    port = free_port()
    env = dict(os.environ, SWITCHBOARD_DATABASE_URL=uri, SWITCHBOARD_PORT=str(port), SWITCHBOARD_HOST="127.0.0.1",
               SWITCHBOARD_RATE_LIMIT_RPS="1000000", SWITCHBOARD_RATE_LIMIT_BURST="1000000",
               SWITCHBOARD_MCP_MAX_SESSIONS_PER_ENDPOINT="100000",  # the memory figure holds --sessions on one endpoint
               SWITCHBOARD_LOG_LEVEL=log_level, SWITCHBOARD_SWEEP_INTERVAL_SECONDS="3600")
    if src:
        env["PYTHONPATH"] = src
    log = open(os.environ.get("MCP_BENCH_SERVER_LOG", os.devnull), "wb")
    if profile_to is not None:
        command = [sys.executable, str(Path(__file__).resolve()), "--serve-profiled", str(profile_to)]
    elif variant:
        command = [sys.executable, str(ROOT / "bench" / "mcp_variant_server.py"), variant]
    else:
        command = [sys.executable, "-m", "switchboard", "serve"]
    proc = subprocess.Popen(command, env=env, cwd=ROOT,
                            stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                if b" 200 " in s.recv(200):
                    return Served(proc, port)
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("the server did not start")
        time.sleep(0.1)


# -------------------------------------------------------------------------------------- database

@contextlib.asynccontextmanager
async def database(keep: bool):
    """A fresh migrated database: on SWITCHBOARD_DATABASE_URL's server, else on an embedded one."""
    external = os.environ.get("SWITCHBOARD_DATABASE_URL")
    tmp = None
    server = None
    if external:
        server_uri = external
    else:
        warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
        from switchboard.db import embedded

        tmp = Path(tempfile.mkdtemp(prefix="sb-mcp-bench-"))
        server = await asyncio.to_thread(embedded.start, tmp / "pg")
        server_uri = server.uri
    name = f"sb_mcp_bench_{uuid.uuid4().hex[:8]}"
    async with await psycopg.AsyncConnection.connect(server_uri, autocommit=True) as conn:
        await conn.execute(f'CREATE DATABASE "{name}"')
    uri = psycopg.conninfo.make_conninfo(server_uri, dbname=name)
    try:
        async with await psycopg.AsyncConnection.connect(uri, autocommit=True) as conn:
            await migrate.migrate(conn)
        yield uri
    finally:
        if not keep:
            async with await psycopg.AsyncConnection.connect(server_uri, autocommit=True) as conn:
                await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        if server is not None:
            await asyncio.to_thread(server.release)
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


async def seed(core: Core, endpoint_id: str, n: int) -> None:
    async with core.pool.connection() as conn:
        await conn.execute(
            "INSERT INTO todos (id, endpoint_id, queue, title, source) "
            "SELECT 'td_' || gen_random_uuid(), %s, %s, 'bench ' || g, 'bench' FROM generate_series(1, %s) g",
            (endpoint_id, QUEUE, n))
        await conn.execute("ANALYZE todos")


async def pending(core: Core) -> int:
    async with core.pool.connection() as conn:
        cur = await conn.execute("SELECT count(*) AS n FROM todos WHERE state = 'pending'")
        return (await cur.fetchone())["n"]


# -------------------------------------------------------------------------------------- measures

@dataclass
class Rate:
    label: str
    per_s: float
    server_ms: float | None = None  # server CPU per operation
    client_ms: float | None = None  # this process's CPU per operation
    pg_ms: float | None = None  # PostgreSQL backends' CPU per operation (cycles only)

    def row(self, pg: bool = False) -> str:
        s = f"{self.server_ms:.2f}" if self.server_ms is not None else "-"
        c = f"{self.client_ms:.2f}" if self.client_ms is not None else "-"
        cells = [self.label, f"{self.per_s:,.0f}", s, c]
        if pg:
            cells.append(f"{self.pg_ms:.2f}" if self.pg_ms is not None else "-")
        return "| " + " | ".join(cells) + " |"


def _proc_cpu(pid: int) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def backends_cpu(core: Core) -> dict[int, float]:
    """CPU seconds so far of every PostgreSQL backend on the benchmark's database (the server's pool
    and this process's), read from /proc: empty when the database runs elsewhere."""
    async with core.pool.connection() as conn:
        cur = await conn.execute("SELECT pid FROM pg_stat_activity WHERE datname = current_database()")
        pids = [row["pid"] for row in await cur.fetchall()]
    found = {pid: _proc_cpu(pid) for pid in pids}
    return {pid: cpu for pid, cpu in found.items() if cpu is not None}


async def with_pg_cpu(core: Core, measure) -> tuple:
    """`measure` (a coroutine giving (ops/s, server ms, client ms, ...)) plus the PostgreSQL
    backends' CPU ms per operation, or None when it cannot be read."""
    before = await backends_cpu(core)
    t0 = time.perf_counter()
    got = await measure
    elapsed = time.perf_counter() - t0
    after = await backends_cpu(core)
    ops = got[0] * elapsed
    if not after or ops <= 0:
        return (*got, None)
    return (*got, sum(cpu - before.get(pid, 0.0) for pid, cpu in after.items()) * 1000 / ops)


async def timed(seconds: float, workers: int, step, served: Served | None) -> tuple[float, float | None, float]:
    """Run `step(i)` in `workers` loops for `seconds`: (ops/s, server CPU ms/op, client CPU ms/op)."""
    count = 0
    stop_at = time.perf_counter() + seconds

    async def loop(i: int) -> None:
        nonlocal count
        while time.perf_counter() < stop_at:
            await step(i)
            count += 1

    cpu0 = served.cpu_seconds() if served else None
    pcpu0 = time.process_time()
    t0 = time.perf_counter()
    await asyncio.gather(*(loop(i) for i in range(workers)))
    elapsed = time.perf_counter() - t0
    server_ms = (served.cpu_seconds() - cpu0) * 1000 / max(count, 1) if served else None
    return count / elapsed, server_ms, (time.process_time() - pcpu0) * 1000 / max(count, 1)


async def light_calls(served: Served, slug: str, credential: str, conc: int, seconds: float,
                      tool: str | None) -> Rate:
    clients = [await LightClient(served.port, slug, credential).open() for _ in range(conc)]
    args = {"queue": QUEUE, "limit": 1}

    async def step(i: int) -> None:
        if tool is None:
            await clients[i].request("ping")
        else:
            await clients[i].tool(tool, args)

    try:
        await timed(min(1.0, seconds / 4), conc, step, None)  # warm-up
        per_s, server_ms, client_ms = await timed(seconds, conc, step, served)
    finally:
        for c in clients:
            await c.close()
    return Rate(f"{tool or 'ping'}, {conc} client{'s' if conc > 1 else ''}", per_s, server_ms, client_ms)


async def light_cycles(served: Served, slug: str, credential: str, seconds: float,
                       era: str) -> tuple[float, float, float]:
    clients = [await LightClient(served.port, slug, credential, era).open() for _ in range(WORKERS)]

    async def step(i: int) -> None:
        got = await clients[i].tool("claim_next", {"queue": QUEUE})
        if got.get("empty"):
            raise RuntimeError("the queue ran dry: seed more todos")
        await clients[i].tool("complete", {"id": got["todo"]["id"]})

    try:
        return await timed(seconds, WORKERS, step, served)
    finally:
        for c in clients:
            await c.close()


async def core_cycles(core: Core, caller, seconds: float) -> tuple[float, None, float]:
    async def step(i: int) -> None:
        got = await todos.claim_next(core, caller, queue=QUEUE)
        if got is None:
            raise RuntimeError("the queue ran dry: seed more todos")
        await todos.complete(core, caller, got.todo["id"])

    per_s, _, client_ms = await timed(seconds, WORKERS, step, None)
    return per_s, None, client_ms


async def sdk_cycles(served: Served, slug: str, credential: str, seconds: float) -> tuple[float, float, float]:
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    url = f"http://127.0.0.1:{served.port}/mcp/{slug}"
    async with contextlib.AsyncExitStack() as stack:
        clients = []
        for _ in range(WORKERS):
            http = await stack.enter_async_context(httpx2.AsyncClient(
                headers={"Authorization": f"Bearer {credential}"}, timeout=httpx2.Timeout(30)))
            clients.append(await stack.enter_async_context(
                Client(streamable_http_client(url, http_client=http), mode="legacy")))

        async def step(i: int) -> None:
            got = (await clients[i].call_tool("claim_next", {"queue": QUEUE})).structured_content
            if got.get("empty"):
                raise RuntimeError("the queue ran dry: seed more todos")
            await clients[i].call_tool("complete", {"id": got["todo"]["id"]})

        return await timed(seconds, WORKERS, step, served)


async def memory(served: Served, slug: str, credential: str, n: int) -> tuple[float, float]:
    idle = served.rss_mb()
    clients, streams = [], []
    try:
        for _ in range(n):
            c = await LightClient(served.port, slug, credential).open()
            clients.append(c)
            streams.append(await open_stream(served.port, slug, credential, c.session))
        await asyncio.sleep(1.0)
        held = served.rss_mb()
    finally:
        for w in streams:
            w.close()
        for c in clients:
            await c.close()
    return idle, held


async def profile(uri: str, slug: str, credential: str, seconds: float, out: Path, era: str = SESSION_ERA) -> list[str]:
    """cProfile (CPU clock) of `switchboard serve` over claim_next -> complete cycles of `era`: the top
    functions by own time, per cycle."""
    import pstats

    served = serve(uri, "info", profile_to=out)
    try:
        await asyncio.sleep(0.5)
        await light_cycles(served, slug, credential, min(1.0, seconds / 4), era)
        served.proc.send_signal(signal.SIGUSR1)
        per_s, _, _ = await light_cycles(served, slug, credential, seconds, era)
        served.proc.send_signal(signal.SIGUSR2)
    finally:
        served.stop()
    stats = pstats.Stats(str(out))
    cycles = per_s * seconds
    rows = []
    for (file, line, fn), (_, ncalls, tottime, cumtime, _) in stats.stats.items():
        where = file.split("site-packages/")[-1].split("/src/")[-1]
        rows.append((tottime, cumtime, ncalls, f"{where}:{line}({fn})"))
    lines = [f"profile ({era}): {cycles:,.0f} cycles under cProfile ({per_s:,.0f}/s; the profiler slows the server)",
             "own ms/cycle  incl ms/cycle  calls/cycle  function"]
    for tottime, cumtime, ncalls, name in sorted(rows, reverse=True)[:30]:
        lines.append(f"{tottime * 1000 / cycles:12.3f}  {cumtime * 1000 / cycles:13.3f}  "
                     f"{ncalls / cycles:11.1f}  {name}")
    return lines


def serve_profiled(out: str) -> None:
    """`switchboard serve` (the shipped server: its HTTP protocol, front door and gateway) under
    cProfile with a CPU-time clock, so waiting for PostgreSQL or for a busy machine is not counted;
    the stats go to `out` when the server stops."""
    import cProfile

    from switchboard.web import server

    # uvicorn re-raises the SIGTERM it shut down on; with this handler in place that returns here.
    signal.signal(signal.SIGTERM, lambda *_: None)
    profiler = cProfile.Profile(time.process_time)
    # Only the measured cycles: SIGUSR1 starts the profiler, SIGUSR2 stops it (start-up, the board's
    # templates and the warm-up stay out).
    signal.signal(signal.SIGUSR1, lambda *_: profiler.enable())
    signal.signal(signal.SIGUSR2, lambda *_: profiler.disable())
    try:
        server.serve(load_settings())
    finally:
        profiler.disable()
        profiler.dump_stats(out)


# ------------------------------------------------------------------------------------------ main

async def figures(out: dict, core: Core, caller, uri: str, slug: str, credential: str,
                  args: argparse.Namespace) -> None:
    """calls/s, cycles/s beside the core's, and the memory figure, into `out`."""
    seconds = args.seconds
    served = serve(uri, args.log_level)
    try:
        await asyncio.sleep(1.0)
        calls: list[Rate] = []
        for tool in (None, "list_todos"):
            for conc in (1, 8, 32):
                calls.append(await light_calls(served, slug, credential, conc, seconds, tool))
                print(calls[-1].row(), file=sys.stderr)
        out["calls"] = [vars(r) for r in calls]

        core_r, light_r, modern_r, sdk_r = [], [], [], []
        for i in range(args.rounds):
            core_r.append(await with_pg_cpu(core, core_cycles(core, caller, seconds)))
            light_r.append(await with_pg_cpu(core, light_cycles(served, slug, credential, seconds, SESSION_ERA)))
            modern_r.append(await with_pg_cpu(core, light_cycles(served, slug, credential, seconds, MODERN_ERA)))
            sdk_r.append(await with_pg_cpu(core, sdk_cycles(served, slug, credential, seconds)))
            print(f"round {i + 1}: core {core_r[-1][0]:,.0f}  mcp {light_r[-1][0]:,.0f}  "
                  f"mcp-2026 {modern_r[-1][0]:,.0f}  sdk {sdk_r[-1][0]:,.0f} cycles/s", file=sys.stderr)

        def med(rs: list, label: str) -> Rate:
            server = [r[1] for r in rs if r[1] is not None]
            pg = [r[3] for r in rs if r[3] is not None]
            return Rate(label, statistics.median(r[0] for r in rs),
                        statistics.median(server) if server else None, statistics.median(r[2] for r in rs),
                        statistics.median(pg) if pg else None)

        cycles = [med(core_r, "core (in-process, 4 workers)"),
                  med(light_r, "MCP, session era, light client, 4 sessions"),
                  med(modern_r, "MCP, 2026-07-28 era, light client, 4 clients"),
                  med(sdk_r, "MCP, official SDK client, 4 sessions")]
        ratios = [lr[0] / cr[0] for lr, cr in zip(light_r, core_r, strict=True)]
        out["cycles"] = [vars(r) for r in cycles]
        out["ratio_mcp_to_core"] = {"median": statistics.median(ratios), "rounds": ratios}
        idle, held = await memory(served, slug, credential, args.sessions)
        out["rss_mb"] = {"idle": idle, f"{args.sessions}_sessions": held}
    finally:
        served.stop()


async def run(args: argparse.Namespace) -> dict:
    seconds = args.seconds
    out: dict = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                             "platform": platform.platform()}, "seconds": seconds, "rounds": args.rounds}
    async with database(args.keep) as uri:
        settings = load_settings(database_url=uri)
        pool = await open_pool(uri, min_size=WORKERS, max_size=WORKERS * 2)
        core = Core(pool=pool, settings=settings)
        human = await humans.add(core, "bench", "bench-password")
        ep, credential = await endpoints.vend(core, human, agent="bench", queues=[QUEUE], lease_ttl=1800)
        caller = endpoints.caller_from_row(await endpoints.resolve_credential(core, credential))
        slug = ep["slug"]
        # Every todo of the run exists before the server starts: a bulk insert sends one ready
        # wake-up per todo, and the doorbell of a running server would spend the rounds on them.
        await seed(core, ep["endpoint_id"], int(args.rounds * seconds * (4000 + 800 * len(LEVERS))) + 20000)
        try:
            if not args.profile_only:
                await figures(out, core, caller, uri, slug, credential, args)
            if args.levers and not args.profile_only:
                out["levers"] = await levers(uri, slug, credential, seconds, args)
            if args.profile:
                out["profile"] = await profile(uri, slug, credential, seconds, Path(args.profile), args.profile_era)
        finally:
            await pool.close()

    if "calls" in out:
        print_figures(out, args)
    if "levers" in out:
        print("\n| lever turned back (one server each) | era | server CPU ms/cycle | CPU vs shipped | cycles/s |")
        print("| --- | --- | ---: | ---: | ---: |")
        for r in out["levers"]:
            print(f"| {r['variant']} | {r['era']} | {r['server_ms']:.2f} | {r['cpu_vs_shipped']:.2f} | "
                  f"{r['per_s']:,.0f} |")
    if "profile" in out:
        print("\n" + "\n".join(out["profile"]))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    return out


def print_figures(out: dict, args: argparse.Namespace) -> None:
    print("\n| tool calls (one server process) | calls/s | server CPU ms/call | client CPU ms/call |")
    print("| --- | ---: | ---: | ---: |")
    for r in out["calls"]:
        print(Rate(**r).row())
    print("\n| claim_next -> complete | cycles/s | server CPU ms/cycle | client CPU ms/cycle "
          "| PostgreSQL CPU ms/cycle |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for r in out["cycles"]:
        print(Rate(**r).row(pg=True))
    ratio = out["ratio_mcp_to_core"]
    print(f"\nMCP end to end / core: {ratio['median']:.2f} (rounds: "
          f"{', '.join(f'{x:.2f}' for x in ratio['rounds'])}; target >= 0.3)")
    print(f"server RSS: {out['rss_mb']['idle']:.0f} MB idle, "
          f"{out['rss_mb'][f'{args.sessions}_sessions']:.0f} MB with {args.sessions} open sessions "
          "and their GET streams (target <= 200 MB)")


async def compare_trees(args: argparse.Namespace) -> None:
    """--compare-src: claim_next -> complete cycles over MCP against two servers on one database, this
    tree's and another's (PYTHONPATH naming its src), both running, measured alternately in each round
    (the order flips every round) in both protocol eras: cycles/s, the server's CPU and PostgreSQL's
    CPU per cycle, and the other tree's CPU over this tree's as the median of per-round ratios."""
    src = str(Path(args.compare_src).resolve())
    if not (Path(src) / "switchboard").is_dir():
        raise SystemExit(f"bench: --compare-src {src}: no switchboard package there (name the tree's src)")
    seconds = args.seconds
    trees = {"this tree": None, "other tree": src}
    async with database(args.keep) as uri:
        settings = load_settings(database_url=uri)
        pool = await open_pool(uri, min_size=1, max_size=2)
        core = Core(pool=pool, settings=settings)
        try:
            human = await humans.add(core, "bench", "bench-password")
            ep, credential = await endpoints.vend(core, human, agent="bench", queues=[QUEUE], lease_ttl=1800)
            slug = ep["slug"]
            await seed(core, ep["endpoint_id"], int(args.rounds * seconds * 4 * 1200) + 20000)
            served = {name: serve(uri, args.log_level, src=path) for name, path in trees.items()}
            samples: dict[tuple[str, str], list[tuple]] = {(t, e): [] for t in trees for e in (SESSION_ERA, MODERN_ERA)}
            try:
                await asyncio.sleep(1.0)
                for srv in served.values():  # warm-up: pools filled, statements prepared
                    for era in (SESSION_ERA, MODERN_ERA):
                        await light_cycles(srv, slug, credential, min(2.0, seconds / 2), era)
                for i in range(args.rounds):
                    order = list(samples) if i % 2 == 0 else list(reversed(samples))
                    for name, era in order:
                        got = await with_pg_cpu(core, light_cycles(served[name], slug, credential, seconds, era))
                        samples[(name, era)].append(got)
                        print(f"round {i + 1}: {name} ({era}) {got[0]:,.0f} cycles/s, server {got[1]:.2f} ms,"
                              f" PostgreSQL {got[3] if got[3] is not None else float('nan'):.2f} ms per cycle",
                              file=sys.stderr)
            finally:
                for srv in served.values():
                    srv.stop()
        finally:
            await pool.close()

    def ratio(name: str, era: str, k: int) -> str:
        a, b = samples[(name, era)], samples[("this tree", era)]
        if any(x[k] is None for x in a + b):
            return "-"
        return f"{statistics.median(x[k] / y[k] for x, y in zip(a, b, strict=True)):.2f}"

    print(f"\nclaim_next -> complete over MCP, 4 clients, {args.rounds} alternating rounds of {seconds:g} s;"
          f" other tree: {src}")
    print("| tree | era | cycles/s | server CPU ms/cycle | PostgreSQL CPU ms/cycle | server CPU / this tree's"
          " | PostgreSQL CPU / this tree's |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for (name, era), xs in samples.items():
        pg = [x[3] for x in xs if x[3] is not None]
        pg_ms = f"{statistics.median(pg):.2f}" if pg else "-"
        per_s, server_ms = statistics.median(x[0] for x in xs), statistics.median(x[1] for x in xs)
        print(f"| {name} | {era} | {per_s:,.0f} | {server_ms:.2f} | {pg_ms} | {ratio(name, era, 1)}"
              f" | {ratio(name, era, 3)} |")
    if args.json:
        Path(args.json).write_text(json.dumps({f"{t}, {e}": xs for (t, e), xs in samples.items()}, indent=2))


LEVERS = (("shipped", SESSION_ERA), ("sse", SESSION_ERA), ("otel", SESSION_ERA), ("asyncio-h11", SESSION_ERA),
          ("no-cache", SESSION_ERA), ("no-logs", SESSION_ERA), ("shipped", MODERN_ERA), ("no-schema", MODERN_ERA))


async def levers(uri: str, slug: str, credential: str, seconds: float, args: argparse.Namespace) -> list[dict]:
    """Session-era (and, for the schema lookup, 2026-era) cycles/s with one lever turned back per server process,
    each round visiting every variant so that drift on the machine is shared."""
    samples: dict[tuple[str, str], list[tuple[float, float]]] = {lever: [] for lever in LEVERS}
    for i in range(args.rounds):
        for variant, era in LEVERS:
            served = serve(uri, args.log_level, variant)
            try:
                await asyncio.sleep(0.5)
                await light_cycles(served, slug, credential, min(1.0, seconds / 4), era)  # warm-up
                per_s, server_ms, _ = await light_cycles(served, slug, credential, seconds, era)
            finally:
                served.stop()
            samples[(variant, era)].append((per_s, server_ms))
            print(f"levers round {i + 1}: {variant} ({era}) {per_s:,.0f} cycles/s", file=sys.stderr)
    # Server CPU per cycle is the figure to compare: cycles/s of a lone server on a shared machine
    # swings with whatever else runs at that moment, CPU time per cycle much less.
    base = {era: statistics.median(x[1] for x in samples[("shipped", era)]) for era in (SESSION_ERA, MODERN_ERA)}
    return [{"variant": v, "era": era, "per_s": statistics.median(x[0] for x in xs),
             "server_ms": statistics.median(x[1] for x in xs),
             "cpu_vs_shipped": statistics.median(x[1] for x in xs) / base[era]} for (v, era), xs in samples.items()]


# ------------------------------------------------------------------------------------ layers

LAYER_ROUNDS = 7
LIVE_FUNCTION = "switchboard_endpoint_live(uuid)"
LIVE_CHEAP = ("CREATE OR REPLACE FUNCTION switchboard_endpoint_live(ep uuid) RETURNS boolean "
              "LANGUAGE sql STABLE AS $$ SELECT true $$")


class _FakeTransport:
    """Just enough of an asyncio transport for uvicorn's HTTP protocol; completes a waiter with each
    whole response written."""

    def __init__(self) -> None:
        self.buf = bytearray()
        self.waiter: asyncio.Future | None = None

    def get_extra_info(self, name: str, default=None):
        return {"sockname": ("127.0.0.1", 8000), "peername": ("127.0.0.1", 5555)}.get(name, default)

    def write(self, data: bytes) -> None:
        self.buf += data
        end = self.buf.find(b"\r\n\r\n")
        if end < 0 or self.waiter is None or self.waiter.done():
            return
        head = bytes(self.buf[:end]).lower()
        at = head.find(b"content-length:")
        length = int(head[at + 15:].split(b"\r\n", 1)[0]) if at >= 0 else 0
        if len(self.buf) >= end + 4 + length:
            del self.buf[:end + 4 + length]
            self.waiter.set_result(None)

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def _front_scope(era: str) -> dict:
    headers = [(b"host", b"127.0.0.1:8000"), (b"authorization", b"Bearer sbk_" + b"A" * 43),
               (b"content-type", b"application/json"), (b"accept", b"application/json, text/event-stream"),
               (b"content-length", b"60")]
    if era == SESSION_ERA:
        headers += [(b"mcp-session-id", b"0" * 32), (b"mcp-protocol-version", SESSION_ERA.encode())]
    else:
        headers += [(b"mcp-protocol-version", MODERN_ERA.encode()), (b"mcp-method", b"tools/call"),
                    (b"mcp-name", b"claim_next")]
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "server": ("127.0.0.1", 8000),
            "client": ("127.0.0.1", 5555), "scheme": "http", "method": "POST", "root_path": "",
            "path": "/mcp/bench", "raw_path": b"/mcp/bench", "query_string": b"", "headers": headers,
            "state": {}, "path_params": {"slug": "bench"}}


async def front_layers(requests: int) -> list[str]:
    """CPU per request of what stands in front of the MCP SDK, in this process: the app built as
    `switchboard serve` builds it, with the SDK's app replaced by a stub that answers at once and
    the credential lookup by a fixed endpoint (the cache still runs), then with each layer taken
    out in turn; and uvicorn's HTTP protocol with the head and body deadlines against without them,
    on a fake transport. Rounds alternate the variants; medians of LAYER_ROUNDS."""
    import uuid as uuid_

    from switchboard import logs
    from switchboard.web.app import create_app

    settings = load_settings(database_url="postgresql://127.0.0.1:1/none",  # never connected
                             host="127.0.0.1", port=8000, rate_limit_rps=1e9, rate_limit_burst=10**9)
    logs.configure("info", "json", stream=open(os.devnull, "w"))  # one line per request, as served
    row = {"id": uuid_.uuid4(), "agent_id": uuid_.uuid4(), "scope_queues": [QUEUE], "scope_verbs": ["claim_next"],
           "default_lease_ttl_seconds": None, "slug": "bench", "agent_name": "bench", "expires_at": None}

    async def fixed_endpoint(core, credential):
        return dict(row)

    original = endpoints.resolve_credential
    endpoints.resolve_credential = fixed_endpoint
    try:
        return await _time_front(create_app(settings), settings, requests)
    finally:
        endpoints.resolve_credential = original


async def _time_front(app, settings, requests: int) -> list[str]:
    import uvicorn
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    from uvicorn.server import ServerState

    async def sdk_stub(scope, receive, send) -> None:
        await receive()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", b"36")]})
        await send({"type": "http.response.body", "body": b'{"jsonrpc":"2.0","id":1,"result":{}}'})

    wrappers, inner = [], app
    while type(inner).__name__ != "Starlette":
        wrappers.append(inner)
        inner = inner.app
    route = next(r for r in inner.router.routes if getattr(r, "path", "") == "/mcp/{slug}")
    front = route.app
    gateway = front if type(front).__name__ == "Gateway" else front.app
    gateway.app, gateway.core = sdk_stub, (lambda: None)

    async def receive() -> dict:
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message: dict) -> None:
        pass

    targets: dict[str, object] = {"whole front": app}
    for i, wrapper in enumerate(wrappers):
        targets[f"without {type(wrapper).__name__}"] = None if i else wrapper.app
    targets["Starlette app, route, gateway"] = inner
    if front is not gateway:
        targets[f"route front ({type(front).__name__}) and gateway"] = front
    targets["gateway alone"] = gateway
    targets["stub alone"] = sdk_stub

    results: dict[tuple[str, str], list[float]] = {}
    for era in (SESSION_ERA, MODERN_ERA):
        for rnd in range(LAYER_ROUNDS + 1):
            for name, target in targets.items():
                relink = None
                if target is None:  # an inner wrapper: link the one before it past it for now
                    i = [f"without {type(w).__name__}" for w in wrappers].index(name)
                    before, skipped = wrappers[i - 1], wrappers[i]
                    before.app, relink = skipped.app, (before, skipped)
                    target = app
                t0 = time.process_time()
                for _ in range(requests):
                    await target(_front_scope(era), receive, send)
                us = (time.process_time() - t0) * 1e6 / requests
                if relink:
                    relink[0].app = relink[1]
                if rnd:
                    results.setdefault((name, era), []).append(us)
    lines = ["| in front of the SDK, this process | session era µs/request | 2026-07-28 era µs/request |",
             "| --- | ---: | ---: |"]
    for name in targets:
        cells = [f"{statistics.median(results[(name, era)]):.1f}" for era in (SESSION_ERA, MODERN_ERA)]
        lines.append(f"| {name} | {cells[0]} | {cells[1]} |")

    # The HTTP protocol: one keep-alive connection, a small POST and a small JSON answer.
    kinds: dict[str, type] = {"uvicorn's httptools protocol": HttpToolsProtocol}
    try:
        from switchboard.web import transport
        kinds["with the head and body deadlines (web/transport.py)"] = transport.protocol_for(settings)
    except ImportError:
        pass
    request = (b"POST /x HTTP/1.1\r\nHost: 127.0.0.1:8000\r\nContent-Type: application/json\r\n"
               b"Content-Length: 2\r\n\r\n{}")
    loop = asyncio.get_running_loop()
    state = ServerState()
    configs = {}
    for name, cls in kinds.items():
        config = uvicorn.Config(sdk_stub, http=cls, lifespan="off", log_config=None, access_log=False)
        config.load()
        configs[name] = config
    protocol_us: dict[str, list[float]] = {name: [] for name in kinds}
    for rnd in range(LAYER_ROUNDS + 1):
        for name, cls in kinds.items():
            fake = _FakeTransport()
            protocol = cls(config=configs[name], server_state=state, app_state={}, _loop=loop)
            protocol.connection_made(fake)
            t0 = time.process_time()
            for _ in range(requests):
                fake.waiter = loop.create_future()
                protocol.data_received(request)
                await fake.waiter
            us = (time.process_time() - t0) * 1e6 / requests
            protocol.connection_lost(None)
            if rnd:
                protocol_us[name].append(us)
    lines += ["", "| HTTP protocol, one keep-alive connection, this process | µs/request |", "| --- | ---: |"]
    lines += [f"| {name} | {statistics.median(xs):.1f} |" for name, xs in protocol_us.items()]
    return lines


async def live_check_cost(core: Core, caller, cycles: int) -> list[str]:
    """PostgreSQL CPU per claim_next + complete cycle (the core, one connection) with the endpoint
    check every statement runs (`switchboard_endpoint_live`, migration 0008) as shipped, and with it
    replaced by `SELECT true` on this benchmark's database (put back afterwards); rounds alternate."""
    async with core.pool.connection() as conn:
        cur = await conn.execute("SELECT to_regprocedure(%s) IS NOT NULL AS here", (LIVE_FUNCTION,))
        if not (await cur.fetchone())["here"]:
            return ["(no endpoint check function in this tree)"]
        cur = await conn.execute("SELECT pg_get_functiondef(%s::regprocedure) AS d, pg_backend_pid() AS pid",
                                 (LIVE_FUNCTION,))
        got = await cur.fetchone()
    shipped, pid = got["d"], got["pid"]
    samples: dict[str, list[float]] = {"as shipped": [], "replaced by SELECT true": []}
    try:
        for rnd in range(LAYER_ROUNDS // 2 + 2):
            for name in samples:
                async with core.pool.connection() as conn:
                    await conn.execute(shipped if name == "as shipped" else LIVE_CHEAP)
                await core_cycles_n(core, caller, 50)  # plans made again with the function as it is now
                cpu0 = _proc_cpu(pid)
                await core_cycles_n(core, caller, cycles)
                cpu1 = _proc_cpu(pid)
                if rnd and cpu0 is not None and cpu1 is not None:
                    samples[name].append((cpu1 - cpu0) * 1e6 / cycles)
    finally:
        async with core.pool.connection() as conn:
            await conn.execute(shipped)
    if not all(samples.values()):
        return ["(PostgreSQL's CPU cannot be read from /proc here)"]
    return ["", "| endpoint check in each statement | PostgreSQL CPU µs per claim_next + complete |", "| --- | ---: |",
            *(f"| {name} | {statistics.median(xs):,.0f} |" for name, xs in samples.items())]


async def core_cycles_n(core: Core, caller, n: int) -> None:
    for _ in range(n):
        got = await todos.claim_next(core, caller, queue=QUEUE)
        if got is None:
            raise RuntimeError("the queue ran dry: seed more todos")
        await todos.complete(core, caller, got.todo["id"])


async def run_layers(args: argparse.Namespace) -> None:
    lines = await front_layers(args.layer_requests)
    async with database(args.keep) as uri:
        settings = load_settings(database_url=uri)
        pool = await open_pool(uri, min_size=1, max_size=1)
        try:
            core = Core(pool=pool, settings=settings)
            human = await humans.add(core, "bench", "bench-password")
            ep, credential = await endpoints.vend(core, human, agent="bench", queues=[QUEUE], lease_ttl=1800)
            caller = endpoints.caller_from_row(await endpoints.resolve_credential(core, credential))
            cycles = args.layer_requests // 4
            await seed(core, ep["endpoint_id"], (LAYER_ROUNDS // 2 + 2) * 2 * (cycles + 50) + 1000)
            lines += await live_check_cost(core, caller, cycles)
        finally:
            await pool.close()
    print("\n".join(lines))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seconds", type=float, default=10.0, help="length of each measurement (default 10)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved core/MCP rounds (default 3)")
    p.add_argument("--sessions", type=int, default=200, help="open sessions for the memory figure (default 200)")
    p.add_argument("--log-level", default="info", help="the server's SWITCHBOARD_LOG_LEVEL (default info)")
    p.add_argument("--quick", action="store_true", help="3-second measurements, 2 rounds")
    p.add_argument("--no-levers", dest="levers", action="store_false",
                   help="skip the per-lever comparison (one server process per variant)")
    p.add_argument("--profile", metavar="FILE",
                   help="also profile a server (cProfile, CPU clock) over session-era cycles; stats go to FILE")
    p.add_argument("--profile-era", choices=(SESSION_ERA, MODERN_ERA), default=SESSION_ERA,
                   help=f"the protocol era of the profiled cycles (default {SESSION_ERA}; {MODERN_ERA} is stateless)")
    p.add_argument("--profile-only", action="store_true",
                   help="only the profile (with --profile): no calls/s, cycles/s or memory figures")
    p.add_argument("--layers", action="store_true",
                   help="only the cost of each layer in front of the SDK (in this process), of the HTTP deadlines, "
                        "and PostgreSQL's cost of the endpoint check in each statement")
    p.add_argument("--layer-requests", type=int, default=5000, help="requests per --layers measurement (default 5000)")
    p.add_argument("--compare-src", metavar="SRC",
                   help="only claim_next -> complete over MCP against this tree's server and another tree's (SRC:"
                        " its src directory, e.g. from `git worktree add` or `git archive`), alternating in rounds")
    p.add_argument("--serve-profiled", metavar="FILE", help=argparse.SUPPRESS)  # the profiled server process
    p.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    p.add_argument("--keep", action="store_true", help="keep the benchmark database")
    args = p.parse_args()
    if args.serve_profiled:
        serve_profiled(args.serve_profiled)
        return
    if args.layers:
        asyncio.run(run_layers(args))
        return
    if args.profile_only and not args.profile:
        p.error("--profile-only needs --profile FILE")
    if args.quick:
        args.seconds, args.rounds = 3.0, 2
    if args.compare_src:
        asyncio.run(compare_trees(args))
        return
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
