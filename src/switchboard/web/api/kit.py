"""What every human API route shares: the token, its scope and rate limit, the body and query read
through the route's models, the error envelope and status of each code, and one log line a request.

Errors are `{"error": {"code", "message", "argument"?}}` with the status of their code (`STATUS`, the
one place). A database that did not answer in time (or could not be reached) is 503 with
`Retry-After`; a client that left before its answer is logged as 499 (nobody reads the answer).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
from pydantic import BaseModel, ValidationError
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response

from ...config import REQUEST_BODY_MAX_BYTES
from ...core import api_tokens
from ...core.api_tokens import TokenCaller
from ...core.errors import CoreError, Invalid

log = logging.getLogger("switchboard.api")

MAX_BODY_BYTES = REQUEST_BODY_MAX_BYTES
# `deferred`: admission control refuses an owner's claim on a queue for now (the body says why and
# until when), a state of the queue as `conflict` is a state of the todo.
STATUS = {"invalid": 400, "unauthorized": 401, "forbidden": 403, "not_found": 404, "conflict": 409,
          "deferred": 409, "too_large": 413, "rate_limited": 429, "unavailable": 503, "internal": 500}
UNAUTHORIZED_HEADERS = {"WWW-Authenticate": 'Bearer realm="switchboard"'}
RETRY_UNAVAILABLE_SECONDS = 1
LIMITER_MAX_KEYS = 10_000


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, headers: dict | None = None,
                 argument: str | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.headers, self.argument = status, code, message, headers, argument

    def to_dict(self) -> dict:
        body = {"code": self.code, "message": self.message}
        if self.argument is not None:
            body["argument"] = self.argument
        return body


def error(status: int, body: dict, headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"error": body}, status_code=status, headers=headers)


# ------------------------------------------------------------------------------------- rate limits

class TokenLimiter:
    """One token bucket per API token: `per_minute` requests a minute, at most `burst` saved up.
    In memory, per serving process (a deployment of N processes allows N times as much)."""

    def __init__(self, per_minute: int, burst: int) -> None:
        self.rate = per_minute / 60.0
        self.burst = float(burst)
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()

    def take(self, key: str) -> float:
        """0 when the request may go; otherwise the seconds until it may."""
        now = time.monotonic()
        tokens, last = self._buckets.pop(key, (self.burst, now))
        tokens = min(self.burst, tokens + (now - last) * self.rate)
        wait = 0.0 if tokens >= 1.0 else (1.0 - tokens) / self.rate
        self._buckets[key] = (tokens - 1.0 if wait == 0.0 else tokens, now)
        while len(self._buckets) > LIMITER_MAX_KEYS:
            self._buckets.popitem(last=False)
        return wait


def limiter(request: Request) -> TokenLimiter:
    """This process's limiter, built with the app (web/app.py `compose`): per process, as documented."""
    return request.app.state.surfaces.api_limiter


# ------------------------------------------------------------------------------------ the caller

async def authenticate(request: Request) -> TokenCaller:
    header = request.headers.get("authorization", "")
    caller = None
    if header[:7].lower() == "bearer ":
        caller = await api_tokens.resolve(request.app.state.ctx.core, header[7:].strip())
    if caller is None:
        raise ApiError(401, "unauthorized", "a valid API token is required", UNAUTHORIZED_HEADERS)
    return caller


def admit(request: Request, caller: TokenCaller, *, write: bool, admin: bool = False) -> None:
    """The rate limit, then the token's scope, then the admin flag."""
    wait = limiter(request).take(caller.token_id)
    if wait > 0:
        raise ApiError(429, "rate_limited", "too many requests with this token; retry later",
                       {"Retry-After": str(max(1, math.ceil(wait)))})
    if write and not caller.can_write:
        raise ApiError(403, "forbidden", "this token's scope is read; writes need a write token")
    if admin and not caller.is_admin:
        raise ApiError(403, "forbidden", "only an admin may do this")


# ---------------------------------------------------------------------------------- body and query

def _printable(name: Any) -> str:
    return "".join(ch if ch.isprintable() else "?" for ch in str(name)[:64])


async def read_raw(request: Request) -> bytes:
    """The request body within the cap (413 past it)."""
    length = request.headers.get("content-length")
    if length is not None and (not length.isdigit() or int(length) > MAX_BODY_BYTES):
        raise ApiError(413, "too_large", f"request body over {MAX_BODY_BYTES} bytes")
    raw = bytearray()
    async for chunk in request.stream():
        raw.extend(chunk)
        if len(raw) > MAX_BODY_BYTES:
            raise ApiError(413, "too_large", f"request body over {MAX_BODY_BYTES} bytes")
    return bytes(raw)


def invalid_from(exc: ValidationError, where: str = "body") -> Invalid:
    """The first validation error as the core's `invalid`, naming the field."""
    errors = exc.errors(include_url=False)
    # An unknown field is named before a missing one, as the fields are read.
    err = next((e for e in errors if e.get("type") == "extra_forbidden"), errors[0])
    loc = [p for p in err.get("loc", ()) if not isinstance(p, int)]
    kind = err.get("type", "")
    if kind == "json_invalid" or not loc:
        if where == "query":
            return Invalid("bad query parameters", argument="query")
        return Invalid("the body must be a JSON object", argument="body")
    name = _printable(loc[0])
    path = err.get("loc", ())
    # Inside a list of objects (todos[3].title, or todos[3] when it is not an object); a bad item of
    # a list of strings keeps naming the list.
    if any(isinstance(p, int) for p in path[:-1]) or (path and isinstance(path[-1], int)
                                                       and kind in ("model_type", "model_attributes_type")):
        name = "".join(f"[{p}]" if isinstance(p, int) else (f".{_printable(p)}" if n else _printable(p))
                       for n, p in enumerate(path))
    if kind == "extra_forbidden":
        return Invalid(f"unknown {'parameter' if where == 'query' else 'field'} {name}", argument=name)
    if kind == "missing":
        return Invalid(f"{name} is required", argument=name)
    return Invalid(f"{name}: {err.get('msg', 'invalid')}", argument=name)


def parse_body(raw: bytes, model: type[BaseModel]) -> BaseModel:
    if not raw.strip():
        raw = b"{}"
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        raise invalid_from(exc) from None
    except (ValueError, RecursionError):
        raise Invalid("the body must be a JSON object", argument="body") from None


def parse_query(request: Request, model: type[BaseModel]) -> BaseModel:
    params: dict[str, Any] = {}
    for name, value in request.query_params.multi_items():
        if name in params:
            raise Invalid(f"{_printable(name)} given more than once", argument=_printable(name))
        params[name] = value
    params = {k: v for k, v in params.items() if v != ""}  # `?state=` means no filter, as before
    try:
        return model.model_validate(params)
    except ValidationError as exc:
        raise invalid_from(exc, "query") from None


def given(model: BaseModel | None) -> dict[str, Any]:
    """The fields the caller sent (so an absent field reaches the core as absent, not as null)."""
    if model is None:
        return {}
    return {name: getattr(model, name) for name in model.model_fields_set}


# -------------------------------------------------------------------------------------- the frame

async def handle(request: Request, work: Callable[[TokenCaller], Awaitable[Response]], *, write: bool,
                 admin: bool = False) -> Response:
    """Authenticate and admit the caller, run `work`, map errors to their status, log one line."""
    started = time.perf_counter()
    caller: TokenCaller | None = None
    reason = None
    try:
        caller = await authenticate(request)
        admit(request, caller, write=write, admin=admin)
        response = await work(caller)
    except ApiError as exc:
        response = error(exc.status, exc.to_dict(), exc.headers)
    except CoreError as exc:
        status = STATUS.get(exc.code, 500)
        headers = None
        if status == 503:
            headers = {"Retry-After": str(RETRY_UNAVAILABLE_SECONDS)}
        elif status == 401:
            headers = UNAUTHORIZED_HEADERS
        response = error(status, exc.to_dict(), headers)
    except psycopg.OperationalError as exc:  # the database is down or unreachable: as a stall, retry later
        # A lost connection, or a transaction PostgreSQL rolled back (a deadlock, a serialization
        # failure): retryable. Logged with its SQLSTATE, since a deadlock is a defect to find.
        log.warning("api request failed on the database", extra={
            "method": request.method, "path": request.url.path[:256], "sqlstate": exc.sqlstate})
        response = error(503, {"code": "unavailable", "message": "database unavailable; retry"},
                         {"Retry-After": str(RETRY_UNAVAILABLE_SECONDS)})
    except ClientDisconnect:
        response, reason = Response(status_code=499), "client_disconnect"
    except asyncio.CancelledError:
        _log(request, 499, caller, started, "client_disconnect")
        raise
    except Exception:
        log.exception("api request failed", extra={"method": request.method, "path": request.url.path})
        response = error(500, {"code": "internal", "message": "internal error"})
    _log(request, response.status_code, caller, started, reason)
    return response


def _log(request: Request, status: int, caller: TokenCaller | None, started: float, reason: str | None) -> None:
    extra = {"method": request.method, "path": request.url.path[:256], "status": status,
             "human": caller.human.name if caller else None,
             "latency_ms": round((time.perf_counter() - started) * 1000, 2)}
    if reason:
        extra["reason"] = reason
    log.info("api request", extra=extra)


def json_reply(body: Any, status: int = 200, *, secret: bool = False) -> JSONResponse:
    """A JSON answer; one that carries a secret shown once is never stored by a cache."""
    return JSONResponse(body, status_code=status, headers={"Cache-Control": "no-store"} if secret else None)
