"""The producer API (SYSTEM.md §8): humans put todos on their endpoints' queues and act on them.

Every route takes a human API token (`Authorization: Bearer sbh_…`, `switchboard token create`) and
acts as that human: another human's endpoint or todo is `not_found`, byte-identical to an id that
never existed. Errors are `{"error": {"code", "message", "argument"?}}` with the status of their code.

    POST /api/v1/endpoints/{slug}/todos   {title, queue?, payload?, kind?, key?, max_attempts?, assignee?}
                                          -> 201 {"todo", "created": true} | 200 {"todo", "created": false}
    GET  /api/v1/endpoints                -> {"endpoints": [...]}
    GET  /api/v1/endpoints/{slug}/todos   ?state=&queue=&dead_letter=&limit=&offset= -> {"todos": [...]}
    GET  /api/v1/todos/{id}               -> {"todo": owner view with every attempt}
    POST /api/v1/todos/{id}/<action>      {the action's fields}                      -> {"todo"}

The actions and their fields are the owner-action table (core/actions.py): claim {lease_ttl_seconds?},
complete {result?, summary?, artifact?}, fail {result?, summary?, artifact?, retry?}, release {summary?,
artifact?}, extend {lease_ttl_seconds?}, retry {}, cancel {}, input {payload, lease_ttl_seconds?}.

Statuses (`STATUS`, the one place): invalid 400, unauthorized 401, forbidden 403, not_found 404 (an
unknown action too), conflict 409, too_large 413, internal 500.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..config import REQUEST_BODY_MAX_BYTES
from ..core import actions, endpoints, humans, producer, todos
from ..core.errors import CoreError, Invalid
from ..core.models import HumanCaller
from ..runtime import Component

log = logging.getLogger("switchboard.api")

MAX_BODY_BYTES = REQUEST_BODY_MAX_BYTES
STATUS = {"invalid": 400, "forbidden": 403, "not_found": 404, "conflict": 409, "internal": 500}
UNAUTHORIZED_HEADERS = {"WWW-Authenticate": 'Bearer realm="switchboard"'}

CREATE_FIELDS = ("title", "queue", "payload", "kind", "key", "max_attempts", "assignee")


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, headers: dict | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.headers = status, code, message, headers


def _error(status: int, body: dict, headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"error": body}, status_code=status, headers=headers)


async def _human(request: Request) -> HumanCaller:
    header = request.headers.get("authorization", "")
    human = None
    if header[:7].lower() == "bearer ":
        human = await humans.resolve_token(request.app.state.ctx.core, header[7:].strip())
    if human is None:
        raise ApiError(401, "unauthorized", "a valid API token is required", UNAUTHORIZED_HEADERS)
    return human


async def _body(request: Request, allowed: tuple[str, ...]) -> dict:
    """The JSON object body (empty when there is none), with only `allowed` fields, within the cap."""
    length = request.headers.get("content-length")
    if length is not None and (not length.isdigit() or int(length) > MAX_BODY_BYTES):
        raise ApiError(413, "too_large", f"request body over {MAX_BODY_BYTES} bytes")
    raw = bytearray()
    async for chunk in request.stream():
        raw.extend(chunk)
        if len(raw) > MAX_BODY_BYTES:
            raise ApiError(413, "too_large", f"request body over {MAX_BODY_BYTES} bytes")
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        raise Invalid("the body must be a JSON object", argument="body") from None
    if not isinstance(body, dict):
        raise Invalid("the body must be a JSON object", argument="body")
    for key in body:
        if key not in allowed:
            name = "".join(ch if ch.isprintable() else "?" for ch in str(key)[:64])
            raise Invalid(f"unknown field {name}", argument=name)
    return body


Handler = Callable[[Request, HumanCaller], Awaitable[Response]]


def _route(fn: Handler) -> Callable[[Request], Awaitable[Response]]:
    """Authenticate, map errors to JSON with their status, and log one line per request."""

    async def endpoint(request: Request) -> Response:
        started = time.perf_counter()
        human: HumanCaller | None = None
        try:
            human = await _human(request)
            response = await fn(request, human)
        except ApiError as exc:
            response = _error(exc.status, {"code": exc.code, "message": exc.message}, exc.headers)
        except CoreError as exc:
            response = _error(STATUS.get(exc.code, 500), exc.to_dict())
        except Exception:
            log.exception("api request failed", extra={"method": request.method})
            response = _error(500, {"code": "internal", "message": "internal error"})
        log.info("api request", extra={
            "method": request.method, "path": request.url.path, "status": response.status_code,
            "human": human.name if human else None,
            "latency_ms": round((time.perf_counter() - started) * 1000, 2)})
        return response

    endpoint.__name__ = fn.__name__
    return endpoint


def _query_int(request: Request, name: str) -> int | None:
    """Decode an integer query parameter; absent or empty leaves it to the core's default."""
    value = request.query_params.get(name)
    if value is None or value == "":
        return None
    try:
        return int(value)
    except ValueError:
        raise Invalid(f"{name} must be an integer", argument=name) from None


# ------------------------------------------------------------------------------------------ routes

@_route
async def push_todo(request: Request, human: HumanCaller) -> Response:
    body = await _body(request, CREATE_FIELDS)
    todo, created = await producer.push(request.app.state.ctx.core, human, request.path_params["slug"],
                                        source="api", **{k: body.get(k) for k in CREATE_FIELDS})
    return JSONResponse({"todo": todo, "created": created}, status_code=201 if created else 200)


@_route
async def list_endpoints(request: Request, human: HumanCaller) -> Response:
    return JSONResponse({"endpoints": await endpoints.list_for_human(request.app.state.ctx.core, human)})


@_route
async def list_todos(request: Request, human: HumanCaller) -> Response:
    core = request.app.state.ctx.core
    slug = request.path_params["slug"]
    await endpoints.get_for_human(core, human, slug)  # another human's slug is not_found
    q = request.query_params
    rows = await todos.list_for_human(
        core, human, endpoint=slug, queue=q.get("queue") or None, state=q.get("state") or None,
        dead_letter=q.get("dead_letter", "").lower() in ("1", "true", "yes"),
        limit=_query_int(request, "limit"), offset=_query_int(request, "offset"))
    return JSONResponse({"todos": rows})


@_route
async def get_todo(request: Request, human: HumanCaller) -> Response:
    todo = await todos.get(request.app.state.ctx.core, human, request.path_params["id"])
    return JSONResponse({"todo": todo})


@_route
async def act_on_todo(request: Request, human: HumanCaller) -> Response:
    action = actions.ACTIONS.get(request.path_params["action"])
    if action is None:
        raise ApiError(404, "not_found", "no such action")
    body = await _body(request, action.field_names)
    todo = await actions.perform(request.app.state.ctx.core, human, action.name, request.path_params["id"],
                                 via="api", **body)
    return JSONResponse({"todo": todo})


def component() -> Component:
    return Component(name="api", routes=[
        Route("/api/v1/endpoints", list_endpoints, methods=["GET"]),
        Route("/api/v1/endpoints/{slug}/todos", push_todo, methods=["POST"]),
        Route("/api/v1/endpoints/{slug}/todos", list_todos, methods=["GET"]),
        Route("/api/v1/todos/{id}", get_todo, methods=["GET"]),
        Route("/api/v1/todos/{id}/{action}", act_on_todo, methods=["POST"]),
    ])
