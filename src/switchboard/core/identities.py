"""Humans' identities at sign-in providers: a human is found by (issuer, subject).

The same subject at another issuer is another identity, so another human unless an operator links
both to one. A first sign-in creates the human (with no password) and the identity in one
transaction, naming the human after a hint from the provider (preferred_username, email, login),
made unique; when the provider does not allow sign-up, only identities an operator linked sign in.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from typing import Any

from . import human_sessions, shapes
from .errors import Conflict, Invalid
from .models import Core, HumanCaller
from .queries import Q

GITHUB_ISSUER = "https://github.com"
_NOT_NAME = re.compile(r"[^A-Za-z0-9_.@-]+")
_NAME_BASE_MAX = 56  # room for a "-" and a suffix within the 64 characters of a name


class Refused(Exception):
    """Sign-in is refused for this identity: `reason` is `disabled` or `not_enrolled`."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class SignIn:
    human: HumanCaller
    created: bool  # this sign-in created the human


class _Raced(Exception):
    """Another first sign-in of the same identity committed first; read it again."""


def _text(value: Any, argument: str, limit: int) -> str:
    if not isinstance(value, str) or not value or len(value) > limit \
            or any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        raise Invalid(f"{argument} must be 1-{limit} characters of text", argument=argument)
    return value


def name_base(hint: Any) -> str:
    """A user-name stem from a provider's hint: the allowed characters only, starting with a letter
    or digit; `user` when nothing usable is left."""
    text = _NOT_NAME.sub("-", hint if isinstance(hint, str) else "")
    text = text.lstrip("_.@-")[:_NAME_BASE_MAX].rstrip("-")
    return text or "user"


async def _create_human(conn: Any, hint: Any) -> HumanCaller:
    base = name_base(hint)
    while True:
        candidates = [base] + [f"{base}-{n}" for n in range(2, 10)] + [f"{base}-{secrets.token_hex(3)}"]
        cur = await conn.execute(Q.identities.taken_names, {"names": candidates})
        taken = {r["name"] for r in await cur.fetchall()}
        for name in candidates:
            if name in taken:
                continue
            cur = await conn.execute(Q.identities.insert_human, {"name": name})
            row = await cur.fetchone()
            if row is not None:
                return HumanCaller(human_id=row["id"], name=row["name"])


async def _sign_in_once(core: Core, issuer: str, subject: str, hint: Any, create: bool) -> SignIn:
    params = {"issuer": issuer, "subject": subject}
    async with core.pool.connection() as conn, conn.transaction():
        cur = await conn.execute(Q.identities.find, params)
        row = await cur.fetchone()
        if row is not None:
            if row["disabled_at"] is not None:
                raise Refused("disabled")
            await conn.execute(Q.identities.touch, params)
            return SignIn(HumanCaller(human_id=row["id"], name=row["name"]), created=False)
        if not create:
            raise Refused("not_enrolled")
        human = await _create_human(conn, hint)
        cur = await conn.execute(Q.identities.insert, {**params, "human_id": human.human_id, "signed_in": True})
        if await cur.fetchone() is None:
            raise _Raced  # rolls the new human back too
        return SignIn(human, created=True)


async def sign_in(core: Core, issuer: str, subject: str, *, hint: Any = None, create: bool = True) -> SignIn:
    """The human of a verified identity: found, or (when `create`) created with it. Raises Refused
    for a disabled human, or for an unknown identity when sign-up is off."""
    issuer = _text(issuer, "issuer", 512)
    subject = _text(subject, "subject", 255)
    try:
        return await _sign_in_once(core, issuer, subject, hint, create)
    except _Raced:
        return await _sign_in_once(core, issuer, subject, hint, create=False)


async def link(core: Core, human: HumanCaller, issuer: Any, subject: Any) -> dict[str, Any]:
    """Link an identity to an existing human; an identity linked already (to anyone) is a conflict."""
    issuer = _text(issuer, "issuer", 512)
    subject = _text(subject, "subject", 255)
    async with core.pool.connection() as conn:
        cur = await conn.execute(Q.identities.insert, {"issuer": issuer, "subject": subject,
                                                       "human_id": human.human_id, "signed_in": False})
        row = await cur.fetchone()
    if row is None:
        raise Conflict("that identity is linked to a user already", argument="subject")
    return {"issuer": row["issuer"], "subject": row["subject"], "created_at": shapes.ts(row["created_at"])}


async def unlink(core: Core, human: HumanCaller, issuer: Any, subject: Any) -> bool:
    """Remove one of the human's identities; False when the human holds no such identity."""
    async with core.pool.connection() as conn:
        cur = await conn.execute(Q.identities.unlink, {"human_id": human.human_id, "issuer": issuer,
                                                       "subject": subject})
        return await cur.fetchone() is not None


async def of_human(core: Core, human: HumanCaller) -> list[dict[str, Any]]:
    async with core.pool.connection() as conn:
        cur = await conn.execute(Q.identities.of_human, {"human_id": human.human_id})
        return [{"issuer": r["issuer"], "subject": r["subject"], "created_at": shapes.ts(r["created_at"]),
                 "last_sign_in_at": shapes.ts(r["last_sign_in_at"])}
                for r in await cur.fetchall()]


async def clear_password(core: Core, human: HumanCaller) -> int:
    """Turn password sign-in off for a human (their identities still sign in) and end every Board
    session of the human, in one transaction. Returns how many live sessions were ended."""
    async with core.pool.connection() as conn, conn.transaction():
        await conn.execute(Q.identities.clear_password, {"id": human.human_id})
        return await human_sessions.end_all(core, human.human_id, conn)
