"""Outbound HTTP to targets people register (notify hooks, notification sinks): one discipline.

- https only (`allow_private`, SWITCHBOARD_HOOKS_ALLOW_PRIVATE=1 for tests, also admits plain http);
  no control characters in the stored URL.
- The host is resolved before every attempt and every address it resolves to must be globally
  routable (`core.hooks.address_refusal`); the request then goes to the checked address itself, with
  the Host header and TLS (SNI and certificate check) naming the host, so a second lookup cannot
  send it elsewhere.
- No redirects, no proxy from the environment, a connect timeout and an attempt timeout, at most
  RESPONSE_READ_MAX bytes of the answer read.
- The outcome is a result class (`2xx`, `3xx`, `4xx`, `5xx`, `timeout`, `network`, `tls`,
  `rejected_ssrf`), the status, a short error without the URL, and whether a retry may help
  (network errors, timeouts, 408, 429 and 5xx).
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import httpx

from ..core import hooks as core_hooks

CONNECT_TIMEOUT = 5.0
ATTEMPT_TIMEOUT = 10.0
RESPONSE_READ_MAX = 64 * 1024
RETRYABLE_STATUS = (408, 429)


class Refused(Exception):
    """The target may not be contacted (scheme or address class)."""


@dataclass(frozen=True)
class Outcome:
    result: str
    status: int | None
    error: str | None
    retry: bool

    def as_tuple(self) -> tuple[str, int | None, str | None, bool]:
        return self.result, self.status, self.error, self.retry


def classify(status: int) -> tuple[str, bool]:
    """(result class, retry?) for an HTTP status."""
    if 200 <= status < 300:
        return "2xx", False
    if 300 <= status < 400:
        return "3xx", False
    if status in RETRYABLE_STATUS:
        return "4xx", True
    if 400 <= status < 500:
        return "4xx", False
    return "5xx", True


def new_client(max_connections: int) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        follow_redirects=False, trust_env=False,
        timeout=httpx.Timeout(ATTEMPT_TIMEOUT, connect=CONNECT_TIMEOUT),
        limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections))


async def resolve(host: str, port: int, *, allow_private: bool) -> str:
    """Resolve and check the target; the address to connect to. Raises `Refused` for an address that
    is not globally routable (unless `allow_private`), `httpx.ConnectError` when nothing resolves."""
    loop = asyncio.get_running_loop()
    try:
        infos = await asyncio.wait_for(loop.getaddrinfo(host, port, type=socket.SOCK_STREAM), CONNECT_TIMEOUT)
    except (TimeoutError, OSError) as exc:
        raise httpx.ConnectError(f"cannot resolve host: {type(exc).__name__}") from None
    addresses = [str(info[4][0]) for info in infos]
    if not addresses:
        raise httpx.ConnectError("host has no address")
    if not allow_private:
        for address in addresses:
            why = core_hooks.address_refusal(address)
            if why:
                raise Refused(f"target resolves to a {why}")
    return addresses[0]


async def post(client: httpx.AsyncClient | None, url: str, body: bytes, headers: dict[str, str], *,
               allow_private: bool) -> Outcome:
    """One POST attempt under the discipline above. `client` may be None only for a target that is
    refused before any connection (the check runs first)."""
    parts = urlsplit(url)
    try:
        if parts.scheme != "https" and not (allow_private and parts.scheme == "http"):
            raise Refused("target must use https")
        if core_hooks.control_characters(url):  # stored before registration refused them
            raise Refused("target URL holds control characters")
        host = parts.hostname or ""
        port = parts.port or (443 if parts.scheme == "https" else 80)
        address = await resolve(host, port, allow_private=allow_private)
    except Refused as exc:
        return Outcome("rejected_ssrf", None, str(exc), False)
    except httpx.ConnectError as exc:
        return Outcome("network", None, str(exc), True)
    ip_host = f"[{address}]" if ":" in address else address
    pinned = urlunsplit((parts.scheme, f"{ip_host}:{port}", parts.path or "/", parts.query, ""))
    headers = {"host": parts.netloc.rsplit("@", 1)[-1], **headers}
    extensions = {"sni_hostname": host} if parts.scheme == "https" else {}
    assert client is not None
    try:
        async with asyncio.timeout(ATTEMPT_TIMEOUT + 1):
            async with client.stream("POST", pinned, content=body, headers=headers, extensions=extensions) as resp:
                read = 0
                async for chunk in resp.aiter_raw():
                    read += len(chunk)
                    if read >= RESPONSE_READ_MAX:
                        break
                status = resp.status_code
    except (TimeoutError, httpx.TimeoutException):
        return Outcome("timeout", None, "timeout", True)
    except httpx.HTTPError as exc:
        cause = exc.__cause__ or exc.__context__
        if isinstance(cause, ssl.SSLError) or "SSL" in type(cause).__name__ or "certificate" in str(exc).lower():
            return Outcome("tls", None, "tls", True)
        return Outcome("network", None, type(exc).__name__, True)
    result, retry = classify(status)
    return Outcome(result, status, None if result == "2xx" else f"HTTP {status}", retry)
