"""Board sessions live in the database (issue 12, item 1): a signed-out cookie stays refused after a
restart and on every other serving process; a password change or a disabled account ends every
session of that human; only the SHA-256 of a session id is stored."""

from __future__ import annotations

import uuid

import psycopg
import pytest

from account_kit import post_with_session, sign_in, signed_in_status
from board_kit import PASSWORD
from conftest import make_settings, run_async, start_thread_server
from switchboard.core import api_tokens, humans
from switchboard.core.secrets import sha256
from switchboard.web.board.sessions import Sessions


@pytest.fixture
def database(fresh_db):
    return fresh_db


@pytest.fixture
def servers(database):
    """Factory of serving processes' apps (uvicorn threads) on one database and one secret."""
    started = []

    def start():
        srv = start_thread_server(make_settings(database))
        started.append(srv)
        return srv

    yield start
    for srv in started:
        srv.stop()


def _add_human(uri: str, password: str = PASSWORD):
    from conftest import core_for

    async def go():
        async with core_for(uri) as core:
            return await humans.add(core, f"s{uuid.uuid4().hex[:8]}", password)

    return run_async(go())


def _core_call(uri: str, fn, *args):
    from conftest import core_for

    async def go():
        async with core_for(uri) as core:
            return await fn(core, *args)

    return run_async(go())


async def test_a_signed_out_cookie_stays_refused_after_a_restart_and_elsewhere(database, servers):
    human = _add_human(database)
    first, second = servers(), servers()
    cookie = await sign_in(first.url, human.name)
    assert await signed_in_status(first.url, cookie) == 200
    assert await signed_in_status(second.url, cookie) == 200  # one session, valid on every process
    out = await post_with_session(first.url, cookie, "/logout")
    assert out.status_code == 303 and out.headers["location"] == "/login"
    # The attack: keep the old cookie and present it again, to the other process and after a restart.
    assert await signed_in_status(second.url, cookie) == 303
    first.stop()
    restarted = servers()
    assert await signed_in_status(restarted.url, cookie) == 303
    with psycopg.connect(database) as conn:
        (ended,) = conn.execute("SELECT count(*) FROM board_sessions WHERE human_id = %s AND revoked_at IS NOT NULL",
                                (human.human_id,)).fetchone()
    assert ended == 1


async def test_a_password_change_ends_every_session_of_that_human(database, servers):
    human, bystander = _add_human(database), _add_human(database)
    srv = servers()
    cookies = [await sign_in(srv.url, human.name) for _ in range(3)]
    other = await sign_in(srv.url, bystander.name)
    assert [await signed_in_status(srv.url, c) for c in cookies] == [200, 200, 200]
    ended = _core_call(database, humans.set_password, human, "a-brand-new-password")
    assert ended == 3
    assert [await signed_in_status(srv.url, c) for c in cookies] == [303, 303, 303]
    assert await signed_in_status(srv.url, other) == 200  # another human's session is untouched
    await sign_in(srv.url, human.name, "a-brand-new-password")


async def test_disabling_a_human_ends_their_sessions_sign_in_and_tokens(database, servers):
    human = _add_human(database)
    srv = servers()
    cookie = await sign_in(srv.url, human.name)
    token, _ = _core_call(database, api_tokens.create, human)
    import httpx

    async with httpx.AsyncClient(base_url=srv.url, headers={"Authorization": f"Bearer {token}"}) as api:
        assert (await api.get("/api/v1/endpoints")).status_code == 200
        assert _core_call(database, humans.set_disabled, human, True) == 1
        assert await signed_in_status(srv.url, cookie) == 303
        assert (await api.get("/api/v1/endpoints")).status_code == 401
        from account_kit import client_from, try_sign_in

        async with client_from(srv.url) as client:
            assert (await try_sign_in(client, human.name)).status_code == 401
        _core_call(database, humans.set_disabled, human, False)
        assert (await api.get("/api/v1/endpoints")).status_code == 200
        assert await signed_in_status(srv.url, cookie) == 303  # an ended session stays ended
        await sign_in(srv.url, human.name)


async def test_only_the_hash_of_a_session_id_is_stored(database, servers):
    human = _add_human(database)
    srv = servers()
    cookie = await sign_in(srv.url, human.name)
    session = Sessions(srv.settings.secret_key.encode(), secure=False).read(cookie)
    assert session is not None and session.human_id == human.human_id
    with psycopg.connect(database) as conn:
        rows = conn.execute("SELECT id_hash, expires_at - created_at AS lifetime, revoked_at FROM board_sessions"
                            " WHERE human_id = %s", (human.human_id,)).fetchall()
        dump = str(conn.execute("SELECT board_sessions::text FROM board_sessions").fetchall())
    assert len(rows) == 1 and bytes(rows[0][0]) == sha256(session.sid) and rows[0][2] is None
    assert rows[0][1].total_seconds() == 12 * 3600
    assert session.sid not in dump
