"""The Host rule every HTTP entry point applies (against DNS rebinding): which host names this server
answers to, and how a `Host` or `Origin` header names one.

Pure functions on the settings, below every surface: the app's front door (`web/hosts.py`) and the
MCP gateway (`mcp/gateway.py`) both use them.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from .config import Settings

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def allowed_hostnames(settings: Settings) -> frozenset[str]:
    """Loopback, the configured bind host (unless a wildcard) and the host of SWITCHBOARD_BASE_URL."""
    names = set(LOOPBACK)
    if settings.host not in ("", "0.0.0.0", "::"):
        names.add(settings.host.lower().strip("[]"))
    if settings.base_url:
        host = urlsplit(settings.base_url).hostname
        if host:
            names.add(host.lower())
    return frozenset(names)


def hostname(value: str) -> str | None:
    """`host[:port]` or `[v6][:port]` → host, lower-case; None when malformed."""
    value = value.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        if end < 0 or (len(value) > end + 1 and (value[end + 1] != ":" or not value[end + 2:].isdigit())):
            return None
        return value[1:end]
    host, _, port = value.partition(":")
    if port and not port.isdigit():
        return None
    return host or None


def origin_hostname(origin: str) -> str | None:
    try:
        parts = urlsplit(origin)
        if parts.scheme not in ("http", "https"):
            return None
        return parts.hostname
    except ValueError:
        return None


def host_allowed(value: bytes | None, names: frozenset[str]) -> bool:
    return value is not None and hostname(value.decode("latin-1")) in names
