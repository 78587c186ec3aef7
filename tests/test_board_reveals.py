"""The Board's one-time reveals work across serving processes (docs/decisions.md D62): the credential of
an endpoint vended on the Board, and a new intake's URL and secret, reach the page the form's redirect
opens on whichever process that lands, once; the database keeps them only sealed, under the SHA-256
of the ticket's key; another human, a second look, an expired ticket or another Board secret gets the
"no longer shown" page."""

from __future__ import annotations

import re
import uuid

import httpx
import psycopg
import pytest

from account_kit import csrf_of, sign_in
from board_kit import PASSWORD
from conftest import core_for, make_settings, run_async, start_thread_server
from switchboard.core import endpoints, humans
from switchboard.core.secrets import sha256
from switchboard.web.board.reveal import Reveals


@pytest.fixture
def database(fresh_db):
    return fresh_db


@pytest.fixture
def two_processes(database):
    """Two serving processes' apps (uvicorn threads) on one database and one Board secret."""
    first, second = start_thread_server(make_settings(database)), start_thread_server(make_settings(database))
    yield first, second
    first.stop()
    second.stop()


def _core(uri: str, fn, *args, **kwargs):
    async def go():
        async with core_for(uri) as core:
            return await fn(core, *args, **kwargs)

    return run_async(go())


def _rows(uri: str) -> list[tuple]:
    with psycopg.connect(uri) as conn:
        return conn.execute("SELECT id_hash, human_id, kind, sealed, expires_at - now() FROM board_reveals").fetchall()


async def _post_form(base: str, cookie: str, page: str, path: str, data: dict) -> httpx.Response:
    async with httpx.AsyncClient(base_url=base, timeout=30, cookies={"sb_session": cookie}) as client:
        shown = await client.get(page)
        assert shown.status_code == 200, shown.status_code
        return await client.post(path, data={"csrf_token": csrf_of(shown.text), **data})


async def _get(base: str, cookie: str, path: str) -> httpx.Response:
    async with httpx.AsyncClient(base_url=base, timeout=30, cookies={"sb_session": cookie}) as client:
        return await client.get(path)


async def test_a_credential_vended_on_one_process_is_shown_once_by_another(database, two_processes):
    first, second = two_processes
    ada = _core(database, humans.add, f"ada{uuid.uuid4().hex[:6]}", PASSWORD)
    bob = _core(database, humans.add, f"bob{uuid.uuid4().hex[:6]}", PASSWORD)
    ada_cookie, bob_cookie = await sign_in(first.url, ada.name), await sign_in(first.url, bob.name)

    r = await _post_form(first.url, ada_cookie, "/endpoints/vend", "/endpoints/vend",
                         {"agent": "builder", "queues": "inbox", "verbs": ["claim_next", "complete"],
                          "lease_ttl": "300"})
    assert r.status_code == 303, r.text[:500]
    path = r.headers["location"]
    key = path.rsplit("/", 1)[1]
    assert path.startswith("/endpoints/vended/") and len(key) >= 43

    # Kept sealed: the row is found by the key's SHA-256, and holds neither the key nor the credential.
    (row,) = _rows(database)
    id_hash, human_id, kind, sealed, left = row
    assert (bytes(id_hash), human_id, kind) == (sha256(key), ada.human_id, "endpoint")
    assert 540 < left.total_seconds() <= 600
    assert b"sbk_" not in bytes(sealed) and key.encode() not in bytes(sealed)

    # Another human with the key: the gone page, and the ticket stays for its human.
    other = await _get(second.url, bob_cookie, path)
    assert other.status_code == 410 and "sbk_" not in other.text
    shown = await _get(second.url, ada_cookie, path)  # the redirect landed on the other process
    assert shown.status_code == 200, shown.text[:500]
    assert shown.headers["cache-control"] == "no-store"
    credential = re.search(r"sbk_[A-Za-z0-9_-]{43}", shown.text).group(0)
    assert credential.encode() not in bytes(sealed)
    resolved = _core(database, endpoints.resolve_credential, credential)
    assert resolved is not None and f"/mcp/{resolved['slug']}" in shown.text

    # Once: a second look, on either process, is the gone page; nothing is left in the table.
    for srv in (first, second):
        again = await _get(srv.url, ada_cookie, path)
        assert again.status_code == 410 and "sbk_" not in again.text
    assert _rows(database) == []


async def test_an_intake_secret_is_shown_once_by_another_process(database, two_processes):
    first, second = two_processes
    ada = _core(database, humans.add, f"ada{uuid.uuid4().hex[:6]}", PASSWORD)
    ep, _ = _core(database, endpoints.vend, ada, agent="hooked", queues=["issues"])
    cookie = await sign_in(second.url, ada.name)
    r = await _post_form(second.url, cookie, "/intakes", "/intakes",
                         {"name": "gh", "endpoint": ep["slug"], "source": "github", "queue": "issues",
                          "secret": "", "rules": ""})
    assert r.status_code == 303, r.text[:500]
    path = r.headers["location"]
    assert path.startswith("/intakes/created/")
    shown = await _get(first.url, cookie, path)
    assert shown.status_code == 200, shown.text[:500]
    assert "/webhooks/w/" in shown.text and ep["slug"] in shown.text
    assert (await _get(first.url, cookie, path)).status_code == 410
    assert (await _get(second.url, cookie, path)).status_code == 410


async def test_an_expired_ticket_or_another_secret_opens_nothing(database, two_processes):
    first, _ = two_processes
    ada = _core(database, humans.add, f"ada{uuid.uuid4().hex[:6]}", PASSWORD)
    cookie = await sign_in(first.url, ada.name)
    r = await _post_form(first.url, cookie, "/endpoints/vend", "/endpoints/vend",
                         {"agent": "late", "queues": "inbox", "verbs": ["claim_next"], "lease_ttl": "300"})
    path = r.headers["location"]
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("UPDATE board_reveals SET expires_at = now() - interval '1 second'")
    gone = await _get(first.url, cookie, path)
    assert gone.status_code == 410 and "sbk_" not in gone.text

    async def sealed_under_one_secret_opened_under_another(core):
        key = await Reveals(b"a" * 40).put(core, ada.human_id, "endpoint", {"credential": "sbk_x"})
        wrong = await Reveals(b"b" * 40).take(core, ada.human_id, "endpoint", key)
        key2 = await Reveals(b"a" * 40).put(core, ada.human_id, "endpoint", {"credential": "sbk_y"})
        wrong_kind = await Reveals(b"a" * 40).take(core, ada.human_id, "intake", key2)
        right = await Reveals(b"a" * 40).take(core, ada.human_id, "endpoint", key2)
        garbage = await Reveals(b"a" * 40).take(core, ada.human_id, "endpoint", "x" * 500)
        return wrong, wrong_kind, right, garbage

    wrong, wrong_kind, right, garbage = _core(database, sealed_under_one_secret_opened_under_another)
    assert (wrong, wrong_kind, right, garbage) == (None, None, {"credential": "sbk_y"}, None)
