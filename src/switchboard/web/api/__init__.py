"""The human API (`/api/v1`, docs/api.md): everything the CLI does on the queue, over HTTP, as the
human whose API token (`Authorization: Bearer sbh_…`) is sent.

- `routes.py`: the operation table (method, path, models, scope, handler) and the handlers;
- `models.py`: the pydantic models every body is validated with and every answer is described by;
- `openapi.py`: the OpenAPI 3.1 document (`/api/v1/openapi.json`) and the reference page
  (`/api/v1/docs`), both generated from the table and the models;
- `kit.py`: the token, its scope (`read` tokens may only GET) and rate limit, the body cap, the error
  envelope and the status of each code, one log line a request.

Another human's endpoint, todo, hook or token is `not_found`, byte-identical to an id that never
existed. Any other path under `/api/v1/` is a JSON `not_found` (or `method_not_allowed`), not a page.
"""

from __future__ import annotations

import json

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ...runtime import Component
from .kit import STATUS, ApiError, TokenLimiter, handle
from .openapi import STYLE, document_bytes, page_bytes
from .routes import OPERATIONS, endpoint_for

__all__ = ["component", "ApiError", "STATUS", "OPERATIONS", "TokenLimiter"]

PREFIX = "/api/v1/"
_PLAIN = {404: ("not_found", "no such route"), 405: ("method_not_allowed", "method not allowed on this route")}


async def openapi_json(request: Request) -> Response:
    return Response(document_bytes(), media_type="application/json", headers={"Cache-Control": "no-cache"})


async def docs_page(request: Request) -> Response:
    return Response(page_bytes(), media_type="text/html; charset=utf-8", headers={"Cache-Control": "no-cache"})


async def docs_style(request: Request) -> Response:
    return Response(STYLE, media_type="text/css", headers={"Cache-Control": "max-age=3600"})


async def unknown_action(request: Request) -> Response:
    async def work(caller) -> Response:
        raise ApiError(404, "not_found", "no such action")

    return await handle(request, work, write=True)


class JsonMisses:
    """Under /api/v1/, the router's own plain-text 404 and 405 become the API's JSON error."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(PREFIX):
            await self.app(scope, receive, send)
            return
        replaced = False

        async def send_json(message: Message) -> None:
            nonlocal replaced
            if message["type"] == "http.response.start":
                status = message["status"]
                ctype = dict(message.get("headers", ())).get(b"content-type", b"")
                if status in _PLAIN and ctype.startswith(b"text/plain"):
                    replaced = True
                    code, text = _PLAIN[status]
                    body = json.dumps({"error": {"code": code, "message": text}}).encode()
                    headers = [(k, v) for k, v in message.get("headers", ())
                               if k.lower() not in (b"content-type", b"content-length")]
                    headers += [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
                    await send({**message, "headers": headers})
                    await send({"type": "http.response.body", "body": body, "more_body": False})
                    return
            elif message["type"] == "http.response.body" and replaced:
                return
            await send(message)

        await self.app(scope, receive, send_json)


def component() -> Component:
    routes: list[BaseRoute] = [Route("/api/v1/openapi.json", openapi_json, methods=["GET"]),
              Route("/api/v1/docs", docs_page, methods=["GET"]),
              Route("/api/v1/docs.css", docs_style, methods=["GET"])]
    routes += [Route(op.path, endpoint_for(op), methods=[op.method], name=op.name) for op in OPERATIONS]
    routes.append(Route("/api/v1/todos/{id}/{action}", unknown_action, methods=["POST"]))
    return Component(name="api", routes=routes, wrap=JsonMisses)
