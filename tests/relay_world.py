"""Helpers for the relay's end-to-end tests: a real server, a human with an API token, an endpoint on the
epic's queue, and the relay run as a real `switchboard relay` process (or in-process for quick commands)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from conftest import ROOT, core_for, run_async
from switchboard.core import api_tokens, endpoints, humans, todos

EXAMPLE = ROOT / "examples" / "relay"


@dataclass
class World:
    url: str  # the endpoint's MCP URL
    token: str
    credential: str
    pg_uri: str
    human_name: str
    dir: Path

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SWITCHBOARD_")}
        env.update(SWITCHBOARD_URL=self.url, SWITCHBOARD_API_TOKEN=self.token, SWITCHBOARD_CREDENTIAL=self.credential,
                   PYTHONUNBUFFERED="1")
        env.update(extra)
        return env

    # ---------------------------------------------------------------------------------- the relay

    def relay(self, *args: str, timeout: float = 90, env: dict | None = None) -> subprocess.CompletedProcess:
        """`switchboard relay ARGS` as a process, in the epic's directory."""
        return subprocess.run([sys.executable, "-m", "switchboard", "relay", *args], cwd=self.dir,
                              env=env or self.env(), capture_output=True, text=True, timeout=timeout)

    def start_relay(self, *args: str) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "switchboard", "relay", *args], cwd=self.dir, env=self.env(),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)

    def cli(self, *args: str, env: dict | None = None) -> tuple[int, str, str]:
        """The relay's CLI in this process (in a thread, so its event loop is its own), on this epic."""
        from typer.testing import CliRunner

        from switchboard.relay.cli import app

        argv = list(args)
        if argv[0] == "init":
            argv[1] = str(self.dir / argv[1])
        else:
            argv += ["--epic", str(self.dir / "epic.yml")]
        wanted = env or self.env()
        # CliRunner only sets what it is given: unset the SWITCHBOARD_* variables the caller left out.
        overlay = {k: None for k in os.environ if k.startswith("SWITCHBOARD_") and k not in wanted}
        overlay.update(wanted)
        box: dict = {}

        def target() -> None:
            box["r"] = CliRunner().invoke(app, argv, env=overlay, catch_exceptions=False)

        t = threading.Thread(target=target)
        t.start()
        t.join(120)
        r = box["r"]
        return r.exit_code, r.stdout, r.stderr

    def status(self) -> dict:
        code, out, err = self.cli("status", "--json")
        assert code == 0, err
        return json.loads(out)

    # ---------------------------------------------------------------------------- the server side

    def server_views(self, queue: str) -> list[dict]:
        """Every todo on the queue in the owner's view (all attempts), read straight from the core."""
        async def read() -> list[dict]:
            async with core_for(self.pg_uri) as core:
                h = await humans.by_name(core, self.human_name)
                rows = await todos.list_for_human(core, h, queue=queue, limit=500)
                return [await todos.get(core, h, r["id"]) for r in rows]

        return run_async(read())

    def sql(self, query: str, params: tuple = ()) -> list[tuple]:
        import psycopg

        with psycopg.connect(self.pg_uri, autocommit=True) as conn:
            cur = conn.execute(query, params)
            return cur.fetchall() if cur.description else []

    def sweep(self) -> dict:
        from switchboard.core import sweeps

        async def go() -> dict:
            async with core_for(self.pg_uri) as core:
                return (await sweeps.sweep_once(core)).as_dict()

        return run_async(go())

    # -------------------------------------------------------------------------------- the build dir

    def runs(self) -> list[tuple[str, int, str, int]]:
        path = self.dir / "build" / "runs.log"
        if not path.exists():
            return []
        out = []
        for line in path.read_text().splitlines():
            task, attempt, mode, pid = line.split(" ")[:4]
            out.append((task, int(attempt), mode, int(pid)))
        return out

    def prior(self, task: str, attempt: int) -> dict:
        return json.loads((self.dir / "build" / "prior" / f"{task}.{attempt}.json").read_text())

    def ledger(self) -> dict:
        return yaml.safe_load((self.dir / "attempt-ledger.yml").read_text())

    def wait_for_run(self, task: str, attempt: int, timeout: float = 60) -> tuple:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for run in self.runs():
                if run[0] == task and run[1] == attempt:
                    return run
            time.sleep(0.05)
        raise AssertionError(f"{task} attempt {attempt} never started")


def make_world(pg_uri: str, server_url: str, directory: Path, *, queues: tuple[str, ...] = ("relay-demo",)) -> World:
    async def setup() -> tuple[str, str, str]:
        async with core_for(pg_uri) as core:
            h = await humans.add(core, "ops", "password123")
            token, _ = await api_tokens.create(core, h)
            ep, credential = await endpoints.vend(core, h, agent="relay", queues=list(queues))
            return token, credential, ep["slug"]

    token, credential, slug = run_async(setup())
    return World(url=f"{server_url}/mcp/{slug}", token=token, credential=credential, pg_uri=pg_uri,
                 human_name="ops", dir=directory)


def write_epic(directory: Path, data: dict) -> Path:
    """An epic file beside a copy of the scripted worker."""
    directory.mkdir(parents=True, exist_ok=True)
    shutil.copy(EXAMPLE / "scripted.py", directory / "scripted.py")
    path = directory / "epic.yml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path
