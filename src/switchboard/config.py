"""Settings read from SWITCHBOARD_* environment variables (SYSTEM.md section 14).

A bad value stops start-up with a message naming the variable.
"""

from __future__ import annotations

import ipaddress
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import platformdirs
from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


def is_loopback(host: str) -> bool:
    """`localhost` or a loopback address (127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


REQUEST_BODY_MAX_BYTES = 1024 * 1024  # every HTTP surface's request body cap: MCP, the APIs, the Board


class ConfigError(Exception):
    """A SWITCHBOARD_* variable holds a value we cannot use."""


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SWITCHBOARD_", extra="ignore")

    database_url: str | None = None
    data_dir: Path = Field(default_factory=lambda: Path(platformdirs.user_data_dir("switchboard")))
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535)
    base_url: str | None = None

    lease_ttl_seconds: int = Field(300, ge=1, le=86400)
    sweep_interval_seconds: float = Field(30.0, gt=0, le=86400)
    retention_interval_seconds: float = Field(3600.0, gt=0)
    retry_backoff_base_seconds: float = Field(30.0, ge=0, le=86400)
    retry_backoff_max_seconds: float = Field(900.0, ge=0, le=7 * 86400)
    default_max_attempts: int = Field(5, ge=1, le=100)
    attempt_summary_from_result: bool = False
    combine_calls: bool = True  # concurrent claim_next / complete / fail of one caller share a statement

    metrics_token: str | None = None
    dev_login: bool = False
    rate_limit_rps: float = Field(20.0, gt=0)
    rate_limit_burst: int = Field(40, ge=1)
    api_rate_limit_per_minute: int = Field(600, ge=1)  # human API requests a token may make (web/api)
    api_rate_limit_burst: int = Field(60, ge=1)  # and how many at once, saved up
    mcp_auth_cache_seconds: float = Field(2.0, ge=0, le=300)  # credential lookups reused this long
    oauth_access_token_seconds: int = Field(3600, ge=1, le=86400)  # OAuth access tokens for MCP hosts
    oauth_refresh_token_seconds: int = Field(30 * 86400, ge=60, le=365 * 86400)  # and their refresh tokens
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    log_format: Literal["auto", "json", "text"] = "auto"  # auto: text on a terminal, JSON otherwise
    doorbell_gate_seconds: float = Field(60.0, ge=0)
    hooks_allow_private: bool = False
    a2ui: bool = False
    mcp_apps: bool = False  # the todo-detail view as an MCP App (mcp/apps.py)
    secret_key: str | None = None
    user: str | None = None
    header_timeout_seconds: float = Field(10.0, gt=0, le=600)  # a request's head must arrive within this
    body_timeout_seconds: float = Field(30.0, gt=0, le=3600)  # and its whole body within this after the head
    max_connections: int = Field(1000, ge=1)  # open HTTP connections; past it new requests get 503
    db_statement_timeout_seconds: float = Field(10.0, gt=0, le=3600)  # PostgreSQL statement_timeout
    db_lock_timeout_seconds: float = Field(5.0, gt=0, le=3600)  # PostgreSQL lock_timeout
    mcp_max_sessions_per_endpoint: int = Field(100, ge=1, le=100_000)  # live MCP sessions of one endpoint
    instance_id: str | None = Field(None, pattern=r"^[a-z0-9][a-z0-9-]{0,31}$")  # prefix of MCP session ids
    # Board sign-in with an OpenID Connect provider and with GitHub (web/board/oidc.py, docs/operations.md).
    oidc_issuer: str | None = None  # the issuer URL; discovery at <issuer>/.well-known/openid-configuration
    oidc_client_id: str | None = None
    oidc_client_secret: str | None = Field(None, validate_default=True)  # checked with the two above
    oidc_name: str | None = Field(None, max_length=40)  # the button says "Sign in with <name>"
    oidc_signup: bool = True  # a first sign-in creates the human; false: only identities linked by an operator
    github_client_id: str | None = None
    github_client_secret: str | None = Field(None, validate_default=True)
    github_signup: bool = False  # any GitHub account may sign in; off: only linked identities

    @field_validator("log_level", "log_format", mode="before")
    @classmethod
    def _lower(cls, v: object) -> object:
        return v.lower() if isinstance(v, str) else v

    @field_validator("metrics_token")
    @classmethod
    def _metrics_token_length(cls, v: str | None) -> str | None:
        if v is not None and v != "" and len(v.encode()) < 32:
            raise ValueError("must be at least 32 bytes")
        return v or None

    @field_validator("dev_login")
    @classmethod
    def _dev_login_on_loopback(cls, v: bool, info) -> bool:
        host = str(info.data.get("host", "127.0.0.1")).strip("[]").lower()
        if v and not is_loopback(host):
            raise ValueError("dev login is allowed only when SWITCHBOARD_HOST is a loopback address")
        return v

    @field_validator("oidc_issuer")
    @classmethod
    def _oidc_issuer_url(cls, v: str | None) -> str | None:
        return _issuer_url(v) if v else None

    @field_validator("oidc_client_secret")
    @classmethod
    def _oidc_complete(cls, v: str | None, info) -> str | None:
        return _complete_client("OIDC", v or None, info, issuer=True)

    @field_validator("github_client_secret")
    @classmethod
    def _github_complete(cls, v: str | None, info) -> str | None:
        return _complete_client("GITHUB", v or None, info, issuer=False)

    @property
    def public_base_url(self) -> str:
        if self.base_url:
            return self.base_url.rstrip("/")
        return f"http://{self.host}:{self.port}"


def _issuer_url(value: str) -> str:
    """An OIDC issuer: an https URL (http only on a loopback host), no query or fragment."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(value.strip())
    except ValueError:
        raise ValueError("must be the provider's issuer URL, like https://id.example.com") from None
    host = (parts.hostname or "").lower()
    if parts.scheme not in ("https", "http") or not host or parts.query or parts.fragment:
        raise ValueError("must be the provider's issuer URL, like https://id.example.com")
    if parts.scheme == "http" and not is_loopback(host):
        raise ValueError("must use https (plain http only for a provider on a loopback address)")
    return value.strip()


def _complete_client(prefix: str, secret: str | None, info, *, issuer: bool) -> str | None:
    """The client secret, when the provider's settings are all given or all absent."""
    low = prefix.lower()
    if issuer and f"{low}_issuer" not in info.data:
        return secret  # the issuer itself was refused; that error names it
    given = {f"SWITCHBOARD_{prefix}_CLIENT_ID": info.data.get(f"{low}_client_id"),
             f"SWITCHBOARD_{prefix}_CLIENT_SECRET": secret}
    if issuer:
        given = {f"SWITCHBOARD_{prefix}_ISSUER": info.data.get(f"{low}_issuer"), **given}
    missing = [k for k, v in given.items() if not v]
    if missing and len(missing) < len(given):
        label = "GitHub" if prefix == "GITHUB" else prefix
        raise ValueError(f"{label} sign-in needs {', '.join(given)} together; missing {', '.join(missing)}")
    return secret


def load_settings(**overrides: Any) -> Settings:
    """Read the environment; raise ConfigError naming the variable when a value is bad."""
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        parts = []
        for err in exc.errors():
            field = str(err["loc"][0]) if err["loc"] else "?"
            parts.append(f"SWITCHBOARD_{field.upper()}: {err['msg']}")
        raise ConfigError("; ".join(parts)) from None


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return load_settings()
