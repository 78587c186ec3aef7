"""Notify hooks may only reach globally routable addresses, whatever form the address is written in.

An IPv6 address can carry an IPv4 address (IPv4-mapped, 6to4, Teredo, NAT64): a relay or translator
on the way delivers to the embedded address, so `https://[2002:7f00:1::]/h` is a way to 127.0.0.1.
Registration refuses these targets; the sender refuses them again after resolving, at every attempt.
"""

from __future__ import annotations

import httpx
import pytest

from conftest import make_settings, start_thread_server
from core_world import make_world
from switchboard.core import api_tokens, hooks
from switchboard.core.errors import Invalid

# (address, what it reaches)
REFUSED = [
    ("2002:7f00:1::", "6to4 address embedding a loopback address"),              # 6to4 of 127.0.0.1
    ("2002:a9fe:a9fe::", "6to4 address embedding a link-local address"),         # 6to4 of 169.254.169.254
    ("2002:a00:1::1", "6to4 address embedding a private address"),               # 6to4 of 10.0.0.1
    ("fec0::1", "site-local address"),
    ("::ffff:127.0.0.1", "IPv4-mapped address embedding a loopback address"),
    ("::ffff:169.254.169.254", "IPv4-mapped address embedding a link-local address"),
    ("64:ff9b::7f00:1", "NAT64 address embedding a loopback address"),           # NAT64 of 127.0.0.1
    ("64:ff9b::a9fe:a9fe", "NAT64 address embedding a link-local address"),
    # Teredo: server 65.54.227.120, client 127.0.0.1 (stored inverted); then a private Teredo server
    ("2001:0:4136:e378:8000:63bf:80ff:fffe", "Teredo address embedding a loopback address"),
    ("2001:0:a00:1:8000:63bf:f7f7:f7f7", "Teredo address embedding a private address"),
]
# Forms that carry a public IPv4 address are judged as that address (6to4, mapped and NAT64 of 8.8.8.8).
ADMITTED = ["2002:808:808::1", "::ffff:8.8.8.8", "64:ff9b::808:808", "2606:4700:4700::1111", "8.8.8.8"]


def test_every_embedding_form_is_judged_by_the_address_it_reaches():
    for address, why in REFUSED:
        assert hooks.address_refusal(address) == why, address
    for address in ADMITTED:
        assert hooks.address_refusal(address) is None, address


async def test_registration_refuses_ipv6_forms_of_private_addresses(core):
    core.settings = make_settings(core.settings.database_url, hooks_allow_private=False)
    w = await make_world(core)
    for address, why in REFUSED:
        with pytest.raises(Invalid) as exc:
            await hooks.add(core, w.h1, w.slug1, url=f"https://[{address}]/h")
        assert exc.value.argument == "url" and why in exc.value.message, address
    # Legacy spellings of 127.0.0.1 and 169.254.169.254 that the system resolver accepts.
    for host in ("127.1", "2130706433", "0x7f.0.0.1", "0177.0.0.1", "0xa9fea9fe"):
        with pytest.raises(Invalid) as exc:
            await hooks.add(core, w.h1, w.slug1, url=f"https://{host}/h")
        assert exc.value.argument == "url", host
    assert await hooks.list_for_endpoint(core, w.h1, w.slug1) == []  # nothing was stored
    added, _ = await hooks.add(core, w.h1, w.slug1, url="https://[2002:808:808::1]/h")
    assert added["url"] == "https://[2002:808:808::1]/h"


async def test_the_sender_refuses_them_after_resolving_at_every_attempt(core):
    # Stored while the check was lifted (as a target registered before this rule, or a name whose
    # address changed since): the sender resolves the host and judges each address before connecting.
    strict = make_settings(core.settings.database_url, hooks_allow_private=False)
    srv = start_thread_server(strict)
    try:
        sender = srv.app.state.surfaces.hooks
        targets = [(f"https://[{address}]/h", why) for address, why in REFUSED]
        targets.append(("https://localhost/h", "loopback address"))  # a host name, resolved by the system
        for url, why in targets:
            row = {"url": url, "message_id": "msg_test", "secret": hooks.new_secret(), "body": {}}
            result, status, error, retry = await sender.send_once(row)
            assert (result, status, retry) == ("rejected_ssrf", None, False), url
            assert error == f"target resolves to a {why}", url
    finally:
        srv.stop()


# ------------------------------------------------------------------------ control characters

async def test_a_hook_url_with_control_characters_is_refused(core, pg_uri):
    w = await make_world(core)  # the suite's settings admit http and private targets: not what is refused
    for url in ("https://hooks.example.com/in\r\nX-Injected: 1", "https://hooks.example.com/in\nx",
                "https://hooks.example.com/\tin", "https://hooks.example.com/in\x00", "https://hooks.example.com/\x1b[2J",
                "https://hooks.example.com/in\x85", "https://hooks.example.com/in\r\n"):
        with pytest.raises(Invalid) as exc:
            await hooks.add(core, w.h1, w.slug1, url=url)
        assert exc.value.argument == "url" and "control characters" in exc.value.message, repr(url)
    assert await hooks.list_for_endpoint(core, w.h1, w.slug1) == []

    # Over the API: 400 `invalid` naming `url`.
    token, _ = await api_tokens.create(core, w.h1)
    srv = start_thread_server(make_settings(pg_uri))
    try:
        r = httpx.post(f"{srv.url}/api/v1/endpoints/{w.slug1}/hooks", headers={"Authorization": f"Bearer {token}"},
                       json={"url": "https://hooks.example.com/in\r\nX-Injected: 1"}, timeout=30)
    finally:
        srv.stop()
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "invalid" and r.json()["error"]["argument"] == "url"
