"""The README's command-line tour works exactly as written: on the embedded database, and against a
remote server with SWITCHBOARD_URL set (the bootstrap, `user add` and a token, on the server's
machine; the rest over HTTP)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from conftest import ROOT, create_database, make_settings, start_thread_server


def _block_after(heading: str) -> str:
    text = (ROOT / "README.md").read_text()
    section = text.split(heading, 1)[1]
    return re.search(r"```sh\n(.*?)```", section, re.S).group(1)


def test_readme_cli_tour_runs_as_written():
    # Outside pytest's temp root: pytest resets that to mode 0700, which locks out the database's
    # own system user when the suite runs as root.
    tmp_path = Path(tempfile.mkdtemp(prefix="sb-readme-"))
    try:
        _tour(tmp_path)
    finally:
        shutil.rmtree(tmp_path, ignore_errors=True)


def _tour(tmp_path: Path) -> None:
    script = _block_after("## A tour from the command line")
    (tmp_path / ".venv").symlink_to(ROOT / ".venv")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWITCHBOARD_")}
    env["SWITCHBOARD_DATA_DIR"] = str(tmp_path / "data")
    run = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stderr
    todo = json.loads((tmp_path / "todo.json").read_text())["todo"]
    assert todo["state"] == "pending" and todo["title"] == "Fix the flaky login test"
    assert todo["id"] in run.stdout  # `todo show` and `todo list` printed it
    endpoint = json.loads((tmp_path / "endpoint.json").read_text())
    assert endpoint["credential"].startswith("sbk_") and endpoint["queues"] == ["inbox"]
    # The last command let go of the embedded server: nothing is left running on the data dir.
    assert not (tmp_path / "data" / "pgdata" / "postmaster.pid").exists()


def test_the_tour_files_are_ignored_and_no_credential_is_written_into_a_config():
    written = set(re.findall(r"> (\S+\.jsonl?)(?!\S)", _block_after("## A tour from the command line")))
    assert written == {"endpoint.json", "todo.json", "todos.jsonl"}
    ignored = subprocess.run(["git", "check-ignore", *sorted(written)], cwd=ROOT, capture_output=True, text=True)
    assert ignored.returncode == 0 and ignored.stdout.split() == sorted(written), ignored.stdout
    text = (ROOT / "README.md").read_text()
    mcp_json = re.search(r"a project `\.mcp\.json`:\n\n```json\n(.*?)```", text, re.S).group(1)
    server = json.loads(mcp_json)["mcpServers"]["switchboard"]
    assert server["headers"] == {"Authorization": "Bearer ${SWITCHBOARD_CREDENTIAL}"}
    assert "sbk_" not in mcp_json


BOOTSTRAP = "user add"
NOWHERE_DB = "postgresql://sb:sb@127.0.0.1:1/nowhere?connect_timeout=2"


def test_readme_cli_tour_runs_as_written_against_a_remote_server(pg_server):
    """The same tour with SWITCHBOARD_URL set: after its `user add` (a bootstrap step on the server's
    machine), a token is made there and SWITCHBOARD_URL and SWITCHBOARD_TOKEN are exported; every later
    line goes over HTTP, with a local database URL nothing listens on."""
    uri = create_database(pg_server)
    srv = start_thread_server(make_settings(uri))
    tmp_path = Path(tempfile.mkdtemp(prefix="sb-readme-remote-"))
    try:
        script = _block_after("## A tour from the command line")
        lines = script.splitlines(keepends=True)
        at = next(i for i, line in enumerate(lines) if BOOTSTRAP in line) + 1
        switch = (
            'export SWITCHBOARD_TOKEN=$(.venv/bin/switchboard token create --json | '
            'python3 -c \'import json,sys; print(json.load(sys.stdin)["token"])\')\n'
            f'export SWITCHBOARD_URL={srv.url}\n'
            f'export SWITCHBOARD_DATABASE_URL="{NOWHERE_DB}"\n')
        (tmp_path / ".venv").symlink_to(ROOT / ".venv")
        env = {k: v for k, v in os.environ.items() if not k.startswith("SWITCHBOARD_")}
        env.update(SWITCHBOARD_DATABASE_URL=uri, XDG_CONFIG_HOME=str(tmp_path / "config"))
        run = subprocess.run(["bash", "-euo", "pipefail", "-c", "".join(lines[:at]) + switch + "".join(lines[at:])],
                             cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
        assert run.returncode == 0, run.stderr
        todo = json.loads((tmp_path / "todo.json").read_text())["todo"]
        assert todo["state"] == "pending" and todo["title"] == "Fix the flaky login test"
        assert todo["source"] == "api"  # pushed over HTTP, not on a database
        assert todo["id"] in run.stdout
        endpoint = json.loads((tmp_path / "endpoint.json").read_text())
        assert endpoint["credential"].startswith("sbk_") and endpoint["queues"] == ["inbox"]
        assert not (tmp_path / "config" / "switchboard").exists()  # the environment, no saved login
    finally:
        srv.stop()
        shutil.rmtree(tmp_path, ignore_errors=True)
