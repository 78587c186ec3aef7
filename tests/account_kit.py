"""Shared by the account tests (sessions, sign-in throttling, the account page and commands): signing
in to the Board over plain HTTP through the real form, reading a page's CSRF token, and clients that
speak from a chosen loopback address (127.0.0.0/8 is all loopback, so each is another client)."""

from __future__ import annotations

import re

import httpx

from board_kit import PASSWORD


def client_from(base: str, address: str = "127.0.0.1", **kw) -> httpx.AsyncClient:
    """A client whose connections leave from `address`, so the server sees it as that client."""
    transport = httpx.AsyncHTTPTransport(local_address=address)
    return httpx.AsyncClient(base_url=base, transport=transport, timeout=kw.pop("timeout", 60), **kw)


async def login_token(client: httpx.AsyncClient) -> str:
    """The sign-in form's token (the client's session cookie, if any, is dropped first)."""
    client.cookies.delete("sb_session")
    page = await client.get("/login")
    return re.search(r'name="login_token" value="([^"]+)"', page.text).group(1)


async def try_sign_in(client: httpx.AsyncClient, name: str, password: str = PASSWORD,
                      token: str | None = None) -> httpx.Response:
    """POST the sign-in form (fetching the form's token first unless given)."""
    token = token or await login_token(client)
    client.cookies.set("sb_login", token)
    return await client.post("/login", data={"name": name, "password": password, "login_token": token})


async def sign_in(base: str, name: str, password: str = PASSWORD, address: str = "127.0.0.1") -> str:
    """Sign in through the form; returns the `sb_session` cookie value."""
    async with client_from(base, address) as client:
        r = await try_sign_in(client, name, password)
        assert r.status_code == 303, (r.status_code, r.text[:300])
        return r.cookies["sb_session"]


async def signed_in_status(base: str, cookie: str) -> int:
    """200 when the cookie is accepted for `/todos`, 303 (to the sign-in form) when it is not."""
    async with httpx.AsyncClient(base_url=base, timeout=30) as client:
        r = await client.get("/todos", cookies={"sb_session": cookie})
        assert r.status_code in (200, 303), r.status_code
        if r.status_code == 303:
            assert r.headers["location"].startswith("/login")
        return r.status_code


def csrf_of(html: str) -> str:
    return re.search(r'name="csrf_token" value="([^"]+)"', html).group(1)


async def post_with_session(base: str, cookie: str, path: str, data: dict | None = None,
                            page: str = "/todos") -> httpx.Response:
    """A signed-in POST carrying the CSRF token read from `page`."""
    async with httpx.AsyncClient(base_url=base, timeout=30, cookies={"sb_session": cookie}) as client:
        shown = await client.get(page)
        assert shown.status_code == 200, shown.status_code
        return await client.post(path, data={"csrf_token": csrf_of(shown.text), **(data or {})})
