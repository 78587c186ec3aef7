"""Credentials, API tokens and lease tokens: random, shown once, stored as SHA-256, compared in
constant time."""

from __future__ import annotations

import hashlib
import hmac
import secrets

CREDENTIAL_PREFIX = "sbk_"
HUMAN_TOKEN_PREFIX = "sbh_"


def sha256(value: str) -> bytes:
    return hashlib.sha256(value.encode("utf-8", "surrogatepass")).digest()


def same(a: bytes, b: bytes) -> bool:
    return hmac.compare_digest(a, b)


def new_credential() -> str:
    return CREDENTIAL_PREFIX + secrets.token_urlsafe(32)


def new_human_token() -> str:
    return HUMAN_TOKEN_PREFIX + secrets.token_urlsafe(32)


def new_lease_token() -> str:
    """128 random bits, base64url without padding (REQ-6)."""
    return secrets.token_urlsafe(16)


def display_prefix(secret: str) -> str:
    return secret[:12]


def new_slug() -> str:
    alphabet = "abcdefghijkmnpqrstuvwxyz23456789"
    return "".join(secrets.choice(alphabet) for _ in range(12))
