"""Board sign-in state: the secret, the signed session cookie, CSRF tokens and the sign-in form token.

- The session cookie `sb_session` is an itsdangerous-signed `{h: human id, s: session id}` with a
  12-hour lifetime, HttpOnly, SameSite=Lax, Path=/, and Secure when the base URL is https.
- The session itself lives in the database (`board_sessions`, the id stored as SHA-256) and is
  checked on every request: signing out, a password change or disabling the human ends it in every
  serving process and across restarts. A signed cookie whose session is not live is refused.
- The CSRF token is HMAC-SHA256 over the session id: bound to the session, no storage.
- The sign-in forms (password and dev login) carry a token that must equal the `sb_login` cookie, so
  a foreign page cannot sign a browser into another account (login CSRF).
- The secret is `SWITCHBOARD_SECRET_KEY`, else one generated per data directory and kept in
  `<data dir>/board-secret` with mode 0600.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from uuid import UUID

from itsdangerous import BadSignature, URLSafeTimedSerializer

from ...core import human_sessions
from ...core.models import Core, HumanCaller

SESSION_COOKIE = "sb_session"
LOGIN_COOKIE = "sb_login"
SESSION_SECONDS = 12 * 3600
LOGIN_FORM_SECONDS = 3600
SECRET_FILE = "board-secret"


def load_secret(secret_key: str | None, data_dir: Path) -> bytes:
    """The configured secret, else the one kept for this data directory (created 0600 on first use)."""
    if secret_key:
        return secret_key.encode("utf-8")
    data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = data_dir / SECRET_FILE
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        if path.stat().st_mode & 0o077:
            os.chmod(path, 0o600)
        value = path.read_text("ascii").strip()
        if len(value) < 32:
            raise RuntimeError(f"the Board secret file {SECRET_FILE} in the data directory is too short") from None
        return value.encode("ascii")
    value = secrets.token_hex(32)
    with os.fdopen(fd, "w", encoding="ascii") as f:
        f.write(value + "\n")
    return value.encode("ascii")


@dataclass(frozen=True)
class Session:
    human_id: UUID
    sid: str


class Sessions:
    def __init__(self, secret: bytes, *, secure: bool) -> None:
        self.secure = secure
        self._serializer = URLSafeTimedSerializer(secret, salt="switchboard-board-session")
        self._csrf_key = hmac.new(secret, b"switchboard-csrf-key", hashlib.sha256).digest()

    # ------------------------------------------------------------------------------ sessions

    async def start(self, core: Core, human_id: UUID) -> tuple[str, Session]:
        """Start a session in the database; returns the cookie value and the session."""
        sid = await human_sessions.start(core, human_id, SESSION_SECONDS)
        session = Session(human_id, sid)
        return self.seal(session), session

    def seal(self, session: Session) -> str:
        """The signed cookie value for a session."""
        return self._serializer.dumps({"h": str(session.human_id), "s": session.sid})

    def read(self, value: str | None) -> Session | None:
        """The signed cookie's session, checked for signature and age only (see `resolve`)."""
        if not value or len(value) > 512:
            return None
        try:
            data = self._serializer.loads(value, max_age=SESSION_SECONDS)
            session = Session(UUID(data["h"]), str(data["s"]))
        except (BadSignature, KeyError, TypeError, ValueError):
            return None
        return session

    @staticmethod
    async def resolve(core: Core, session: Session) -> HumanCaller | None:
        """The signed-in human when the session is live in the database and is that human's."""
        human = await human_sessions.resolve(core, session.sid)
        if human is None or human.human_id != session.human_id:
            return None
        return human

    @staticmethod
    async def end(core: Core, session: Session) -> None:
        await human_sessions.end(core, session.sid)

    def cookie_args(self) -> dict:
        return {"httponly": True, "samesite": "lax", "secure": self.secure, "path": "/"}

    # ---------------------------------------------------------------------------------- CSRF

    def csrf_token(self, session: Session) -> str:
        return hmac.new(self._csrf_key, b"switchboard-csrf:" + session.sid.encode(), hashlib.sha256).hexdigest()

    def csrf_ok(self, session: Session, presented: str | None) -> bool:
        if not presented or len(presented) > 128:
            return False
        return hmac.compare_digest(self.csrf_token(session).encode(), presented.encode("utf-8", "replace"))

    # ------------------------------------------------------------------------ sign-in forms

    @staticmethod
    def new_login_token() -> str:
        return secrets.token_urlsafe(24)

    @staticmethod
    def login_token_ok(cookie: str | None, field: str | None) -> bool:
        if not cookie or not field or len(cookie) > 128 or len(field) > 128:
            return False
        return hmac.compare_digest(cookie.encode("utf-8", "replace"), field.encode("utf-8", "replace"))
