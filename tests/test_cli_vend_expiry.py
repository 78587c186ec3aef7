"""`switchboard endpoint vend --expires-in SECONDS`: an endpoint that expires, vended from the CLI on this
machine's database and through a server after `switchboard login` (`POST /api/v1/endpoints` with
`expires_in_seconds`), with the same output; `--json` shows `expires_at` (null without the option); a
bad value is refused naming the option's field, or as a usage error naming the option, and nothing is
vended."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import psycopg

import cli_twins
from cli_twins import make_people
from conftest import core_for, run_async
from switchboard.core import api_tokens, humans

cli_server, config_dirs = cli_twins.cli_server, cli_twins.config_dirs  # the fixtures
PATTERNS = ((r"sbk_[A-Za-z0-9_-]+", "<credential>"), (r"http://[^/\"]+/mcp/", "<base>/mcp/"))


def _human(uri: str) -> tuple[str, str]:
    async def go():
        async with core_for(uri) as c:
            h = await humans.add(c, f"vender-{uuid.uuid4().hex[:6]}")
            return h.name, (await api_tokens.create(c, h))[0]

    return run_async(go())


def _endpoints(uri: str, name: str) -> list[tuple]:
    with psycopg.connect(uri) as conn:
        return conn.execute("SELECT e.slug, e.expires_at FROM endpoints e JOIN agents a ON a.id = e.agent_id "
                            "JOIN humans h ON h.id = a.human_id WHERE h.name = %s ORDER BY e.created_at",
                            (name,)).fetchall()


def _script(person, uri: str) -> None:
    before = datetime.now(UTC)
    vended = person.ok("endpoint", "vend", "--agent", "nightly", "--expires-in", "3600")
    person.known[vended["slug"]] = "<slug>"
    expires = datetime.fromisoformat(vended["expires_at"].replace("Z", "+00:00"))
    assert 3590 <= (expires - before).total_seconds() <= 3610, vended
    assert _endpoints(uri, person.name) == [(vended["slug"], expires)]
    # Without the option: no expiry, and `expires_at` is there as null.
    plain = person.ok("endpoint", "vend", "--agent", "daily")
    person.known[plain["slug"]] = "<slug2>"
    assert "expires_at" in plain and plain["expires_at"] is None
    text = person.run("endpoint", "vend", "--agent", "nightly", "--expires-in", "600").stdout
    person.known[text.split()[1]] = "<slug3>"  # "endpoint <slug> for agent nightly"
    assert "  expires:    " in text and "never" not in text, text

    # A bad value: refused (the field named, exit 1) or a usage error (the option named, exit 2); nothing vended.
    count = len(_endpoints(uri, person.name))
    for seconds in ("5", "59", "316224001", "-3600"):
        error = person.refused("endpoint", "vend", "--agent", "nightly", "--expires-in", seconds,
                               code="invalid", argument="expires_in_seconds")
        assert "expires_in_seconds" in error["message"], error
    done = person.run("endpoint", "vend", "--agent", "nightly", "--expires-in", "soon", code=2)
    assert "--expires-in" in done.stderr, done.stderr
    assert len(_endpoints(uri, person.name)) == count


def test_endpoint_vend_expires_in_locally_and_after_login_gives_the_same_output(cli_server, config_dirs):
    srv, uri = cli_server
    runs = []
    for remote in (False, True):
        name, token = _human(uri)
        [person] = make_people(cli_server, config_dirs, [name], [token], {name: "<human>"}, remote=remote,
                               patterns=PATTERNS)
        _script(person, uri)
        runs.append(person)
    for a, b in zip(runs[0].transcript(), runs[1].transcript(), strict=True):
        assert a == b, f"\nlocal:  {a}\nremote: {b}"
    assert runs[1].env["SWITCHBOARD_DATABASE_URL"] == cli_twins.NOWHERE_DB
