"""What a newcomer meets first, from a fresh clone: the example worker's answer to a wrong credential,
what `make run` and `make test` do, where the README tour writes its files, and the log format."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import ROOT, make_settings, start_thread_server
from mcp_support import vend

WORKER = ROOT / "examples" / "worker.py"
UNAUTHORIZED = "worker: unauthorized: check SWITCHBOARD_CREDENTIAL and the endpoint slug"


@pytest.fixture(scope="module")
def server(pg_uri):
    srv = start_thread_server(make_settings(pg_uri))
    yield srv
    srv.stop()


def run_worker(url: str, credential: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, SWITCHBOARD_MCP_URL=url, SWITCHBOARD_CREDENTIAL=credential)
    return subprocess.run([sys.executable, str(WORKER), "--once"], env=env, capture_output=True, text=True,
                          timeout=60, cwd=ROOT)


async def test_the_example_worker_says_unauthorized_in_one_line(core, server):
    a = await vend(core)
    wrong_credential = run_worker(a.url(server.url), "sbk_" + "x" * 40)
    wrong_slug = run_worker(server.url + "/mcp/nosuchslug1", a.credential)
    for run in (wrong_credential, wrong_slug):
        assert run.returncode != 0
        assert run.stderr.strip() == UNAUTHORIZED, run.stderr
        assert "Traceback" not in run.stderr and "ExceptionGroup" not in run.stderr
