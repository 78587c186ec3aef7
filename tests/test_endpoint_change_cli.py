"""`switchboard endpoint change`: an endpoint's expiry and default lease from the CLI, on this machine's
database and through a server after `switchboard login` (`PATCH /api/v1/endpoints/{slug}`), with the
same output; what is left out stays; bad input is refused naming the field and changes nothing;
another human's endpoint answers as an unknown one; a revoked one is a conflict."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import psycopg

import cli_twins
from cli_twins import make_people
from conftest import core_for, run_async
from switchboard.core import api_tokens, humans

cli_server, config_dirs = cli_twins.cli_server, cli_twins.config_dirs  # the fixtures
# What differs between the two runs besides ids and times: the credential and the server's address.
PATTERNS = ((r"sbk_[A-Za-z0-9_-]+", "<credential>"), (r"http://[^/\"]+/mcp/", "<base>/mcp/"))


def _two_humans(uri: str) -> tuple[list[str], list[str]]:
    async def go():
        async with core_for(uri) as c:
            people = [await humans.add(c, f"{n}-{uuid.uuid4().hex[:6]}") for n in ("owner", "other")]
            return [h.name for h in people], [(await api_tokens.create(c, h))[0] for h in people]

    return run_async(go())


def _row(uri: str, slug: str) -> tuple:
    with psycopg.connect(uri) as conn:
        return conn.execute("SELECT expires_at, default_lease_ttl_seconds, state FROM endpoints WHERE slug = %s",
                            (slug,)).fetchone()


def _script(people, uri: str) -> None:
    owner, other = people
    slug = owner.ok("endpoint", "vend", "--agent", "builder", "--queue", "ci", "--lease-ttl", "300")["slug"]
    owner.known[slug] = "<slug>"

    before = datetime.now(UTC)
    changed = owner.ok("endpoint", "change", slug, "--expires-in", "3600")["endpoint"]
    expires, lease, _ = _row(uri, slug)
    assert 3590 <= (expires - before).total_seconds() <= 3610 and lease == 300  # the lease stays
    assert changed["default_lease_ttl_seconds"] == 300 and changed["mcp_url"].endswith(f"/mcp/{slug}")
    owner.run("endpoint", "change", slug, "--lease-ttl", "900")
    assert _row(uri, slug)[:2] == (expires, 900)  # the expiry stays
    owner.ok("endpoint", "change", slug, "--no-expiry", "--server-lease")
    assert _row(uri, slug)[:2] == (None, None)

    # Bad input: refused naming the field, nothing changed.
    owner.refused("endpoint", "change", slug, "--expires-in", "5", code="invalid", argument="expires_in_seconds")
    owner.refused("endpoint", "change", slug, "--lease-ttl", "86401", code="invalid",
                  argument="default_lease_ttl_seconds")
    assert _row(uri, slug)[:2] == (None, None)
    for args in (("--expires-in", "3600", "--no-expiry"), ("--lease-ttl", "600", "--server-lease"), ()):
        owner.run("endpoint", "change", slug, *args, "--json", code=2)
    # Another human's endpoint is an unknown one; a revoked one is a conflict.
    other.refused("endpoint", "change", slug, "--no-expiry", code="not_found", argument="slug")
    owner.refused("endpoint", "change", "no-such-endpoint", "--no-expiry", code="not_found", argument="slug")
    owner.ok("endpoint", "revoke", slug)
    owner.refused("endpoint", "change", slug, "--lease-ttl", "600", code="conflict", argument="slug")
    assert _row(uri, slug) == (None, None, "revoked")


def test_endpoint_change_locally_and_after_login_gives_the_same_output(cli_server, config_dirs):
    srv, uri = cli_server
    runs = []
    for remote in (False, True):
        names, tokens = _two_humans(uri)
        known = {names[0]: "<owner>", names[1]: "<other>"}
        people = make_people(cli_server, config_dirs, names, tokens, known, remote=remote, patterns=PATTERNS)
        _script(people, uri)
        runs.append(people)
    for near, far in zip(*runs, strict=True):
        for a, b in zip(near.transcript(), far.transcript(), strict=True):
            assert a == b, f"\nlocal:  {a}\nremote: {b}"
    assert runs[1][0].env["SWITCHBOARD_DATABASE_URL"] == cli_twins.NOWHERE_DB
