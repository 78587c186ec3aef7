"""One-time reveals on the Board: a secret made by a form's POST (a vended credential; an intake's URL
and signing secret) reaches the page its redirect opens, once, in whichever serving process the
redirect lands (core/reveals.py keeps the ticket; docs/decisions.md D62).

The facts are JSON sealed with AES-GCM. Its key is an HMAC of the ticket's key under the Board's
secret, so the stored row opens only with both: the key travels in the redirect's path, the secret
stays with the serving processes. The ticket's kind and human are the associated data, so a row
moved to another human or kind does not open.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from ...core import reveals
from ...core.models import Core
from ...core.reveals import Kind

TICKET_SECONDS = 600
NONCE_BYTES = 12


class Reveals:
    def __init__(self, secret: bytes) -> None:
        self._secret = secret

    def _cipher(self, key: str) -> AESGCM:
        return AESGCM(hmac.new(self._secret, b"switchboard-reveal\0" + key.encode("ascii"), hashlib.sha256).digest())

    @staticmethod
    def _aad(human_id: Any, kind: Kind) -> bytes:
        return f"{kind}\0{human_id}".encode()

    async def put(self, core: Core, human_id: Any, kind: Kind, facts: dict[str, Any]) -> str:
        """Seal `facts` (JSON values) for `human_id`; the key for the redirect's path."""
        key = reveals.new_key()
        nonce = os.urandom(NONCE_BYTES)
        sealed = nonce + self._cipher(key).encrypt(nonce, json.dumps(facts).encode(), self._aad(human_id, kind))
        await reveals.put(core, human_id, kind, sealed, key=key, seconds=TICKET_SECONDS)
        return key

    async def take(self, core: Core, human_id: Any, kind: Kind, key: str) -> dict[str, Any] | None:
        """The facts, once; None for a ticket that is unknown, taken, expired, another human's or another
        kind's, or that does not open under this Board's secret."""
        sealed = await reveals.take(core, human_id, kind, key)
        if sealed is None:
            return None
        try:
            plain = self._cipher(key).decrypt(sealed[:NONCE_BYTES], sealed[NONCE_BYTES:], self._aad(human_id, kind))
        except (InvalidTag, ValueError):
            return None
        facts = json.loads(plain)
        return facts if isinstance(facts, dict) else None
