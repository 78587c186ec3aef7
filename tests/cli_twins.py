"""The CLI run twice over one script: on this machine's database (as `SWITCHBOARD_USER`) and against
a running server after `switchboard login` (with a database the CLI cannot reach, so that the remote
run cannot quietly act locally). A test runs the same commands through both sets of people and
compares their transcripts, normalised for ids, times and secrets.

Used by tests/test_sinks_surfaces.py and tests/test_intake_surfaces.py (their fixtures `cli_server`
and `config_dirs` come from here).
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import create_database, make_settings, start_thread_server

NOWHERE_DB = "postgresql://sb:sb@127.0.0.1:1/nowhere?connect_timeout=2"
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)?")


@pytest.fixture(scope="module")
def cli_server(pg_server):
    """A server on a database of its own (the CLI runs are matched by their output)."""
    uri = create_database(pg_server)
    srv = start_thread_server(make_settings(uri))
    yield srv, uri
    srv.stop()


@pytest.fixture
def config_dirs():
    root = Path(tempfile.mkdtemp(prefix="sb-cli-twins-"))
    yield root
    shutil.rmtree(root, ignore_errors=True)


class Person:
    """One human driving the CLI. `known` maps values that differ between the two runs (names, slugs)
    to placeholders; `patterns` are further (regex, placeholder) pairs of the command family."""

    def __init__(self, name: str, env: dict, known: dict[str, str],
                 patterns: tuple[tuple[str, str], ...] = ()) -> None:
        self.name, self.env, self.known, self.patterns = name, env, known, patterns
        self.runs: list[tuple] = []
        self.runner = CliRunner()

    def invoke(self, *args: str, stdin: str | None = None):
        from switchboard.cli import app

        return self.runner.invoke(app, list(args), env=self.env, input=stdin)

    def run(self, *args: str, code: int = 0):
        """Run a command, keep it for the transcript, and check its exit code."""
        done = self.invoke(*args)
        self.runs.append((args, done.exit_code, done.stdout, done.stderr))
        assert done.exit_code == code, (args, done.stdout, done.stderr)
        return done

    def ok(self, *args: str) -> dict:
        lines = self.run(*args, "--json").stdout.splitlines()
        assert len(lines) == 1, lines
        return json.loads(lines[0])

    def refused(self, *args: str, code: str, argument: str | None = None) -> dict:
        error = json.loads(self.run(*args, "--json", code=1).stdout)["error"]
        assert (error["code"], error.get("argument")) == (code, argument), (args, error)
        return error

    def normal(self, text: str) -> str:
        for value in sorted(self.known, key=len, reverse=True):
            text = text.replace(value, self.known[value])
        for pattern, placeholder in self.patterns:
            text = re.sub(pattern, placeholder, text)
        return TIME.sub("<time>", UUID.sub("<uuid>", text))

    def transcript(self) -> list[tuple]:
        """The runs, normalised; an `invalid` refusal keeps only its code and argument (the server checks
        a body with its own models first, whose words differ from the core's)."""
        out = []
        for args, code, stdout, stderr in self.runs:
            if stdout.startswith('{"error": {"code": "invalid"'):
                stdout = json.dumps({"code": "invalid", "argument": json.loads(stdout)["error"].get("argument")})
            if stderr.startswith("error: invalid: "):
                stderr = "error: invalid: ..."
            shown = tuple("<n>" if a.isdigit() else self.normal(a) for a in args)
            out.append((shown, code, self.normal(stdout), self.normal(stderr)))
        return out


def make_people(live, config_dirs: Path, names: list[str], tokens: list[str], known: dict[str, str], *, remote: bool,
           env: dict | None = None, local_env: dict | None = None,
           patterns: tuple[tuple[str, str], ...] = ()) -> list[Person]:
    """One Person per name: locally, acting as that human on the server's database; remotely, logged in
    to the server with that human's API token. `env` is added to both, `local_env` to the local run."""
    srv, uri = live
    out = []
    for name, token in zip(names, tokens, strict=True):
        home = config_dirs / ("remote" if remote else "local") / name
        home.mkdir(parents=True)
        person_env: dict = {"XDG_CONFIG_HOME": str(home), "SWITCHBOARD_URL": None, "SWITCHBOARD_TOKEN": None,
                            "SWITCHBOARD_API_TOKEN": None, "SWITCHBOARD_LOG_FORMAT": "text", **(env or {})}
        if remote:
            person_env.update(SWITCHBOARD_DATABASE_URL=NOWHERE_DB, SWITCHBOARD_USER=None)
        else:
            person_env.update(SWITCHBOARD_DATABASE_URL=uri, SWITCHBOARD_USER=name, **(local_env or {}))
        person = Person(name, person_env, known, patterns)
        if remote:
            done = person.invoke("login", srv.url, "--token-stdin", stdin=token + "\n")
            assert done.exit_code == 0 and name in done.stdout, (done.stdout, done.stderr)
        out.append(person)
    return out
