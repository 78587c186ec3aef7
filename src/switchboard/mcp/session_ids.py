"""Session ids that name the process which issued them, so a reverse proxy can route by prefix.

A session-era MCP session lives in the memory of the one process that answered its `initialize`;
every later request of that session must reach the same process. The proxy cannot learn which one
from the first request (it carries no `Mcp-Session-Id` yet), and a hash of the id would send later
requests to whichever process the hash picks. So with `SWITCHBOARD_INSTANCE_ID=<id>` each process
issues ids of the form `<id>.<32 hex digits>`, and the proxy maps the prefix to that process
(`deploy/nginx.conf`, docs/deploy.md). Without the setting ids stay the SDK's plain 32 hex digits.

The SDK's `StreamableHTTPSessionManager` takes no id generator, so `tag_session_ids` wraps its
`_admit_session` (a private method; mcp is pinned in pyproject.toml): the plain id it chose is
replaced before anything has seen it, since admission runs without an await and the session's server
task starts only afterwards.
"""

from __future__ import annotations

import re
from typing import Any

INSTANCE_ID_PATTERN = r"^[a-z0-9][a-z0-9-]{0,31}$"  # SWITCHBOARD_INSTANCE_ID
SEPARATOR = "."

_TAGGED = re.compile(r"^([a-z0-9][a-z0-9-]{0,31})\.[0-9a-f]{32}$")


def instance_of(session_id: str) -> str | None:
    """The instance id a tagged session id carries; None for a plain one."""
    m = _TAGGED.match(session_id)
    return m.group(1) if m else None


def tag_session_ids(manager: Any, instance_id: str | None) -> None:
    """Make `manager` (a `StreamableHTTPSessionManager`) issue `<instance_id>.<hex>` session ids.
    Does nothing when `instance_id` is unset."""
    if not instance_id:
        return
    if not re.match(INSTANCE_ID_PATTERN, instance_id):
        raise ValueError(f"instance id {instance_id!r} must match {INSTANCE_ID_PATTERN}")
    prefix = instance_id + SEPARATOR
    admit = manager._admit_session

    def admit_tagged(requestor: Any) -> Any:
        transport = admit(requestor)
        if transport is None:  # the SDK's own session limit refused it
            return None
        plain = transport.mcp_session_id
        tagged = prefix + plain
        instances = manager._server_instances
        owners = manager._session_owners
        instances[tagged] = instances.pop(plain)
        if plain in owners:
            owners[tagged] = owners.pop(plain)
        transport.mcp_session_id = tagged
        return transport

    manager._admit_session = admit_tagged
