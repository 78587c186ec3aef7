"""The intake routes of the producer API (docs/intake.md, docs/api.md): a human's webhook intakes.

Same token auth, error shape and statuses as `web/api.py` (its `_route` and `_body`). `{ref}` is an
intake's id or name; another human's intake is `not_found`, byte-identical to one that never existed.

    GET    /api/v1/intakes                                 -> {"intakes": [...]}
    POST   /api/v1/intakes   {name, endpoint, source, queue?, secret?, rules?}
                                                           -> 201 {"intake", "url", "token", "secret"} (shown once)
    GET    /api/v1/intakes/{ref}                           -> {"intake"}
    PUT    /api/v1/intakes/{ref}/rules   {rules}           -> {"intake"}
    POST   /api/v1/intakes/{ref}/disable | /enable         -> {"intake"} (a disabled URL answers 401)
    DELETE /api/v1/intakes/{ref}                           -> {"removed"}
    GET    /api/v1/intakes/{ref}/quarantine                -> {"quarantine": [...]}
    GET    /api/v1/intakes/{ref}/quarantine/{item}         -> {"item"} (with the delivery document)
    POST   /api/v1/intakes/{ref}/quarantine/{item}/replay  -> {"todo", "created"} | 409 still quarantined
    DELETE /api/v1/intakes/{ref}/quarantine/{item}         -> {"dropped"}
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..core import intakes
from ..core.models import HumanCaller
from ..runtime import Component
from .api import _body, _query_int, _route

CREATE_FIELDS = ("name", "endpoint", "source", "queue", "secret", "rules")


def hook_url(request: Request, token: str) -> str:
    return request.app.state.ctx.settings.public_base_url + intakes.hook_path(token)


@_route
async def list_intakes(request: Request, human: HumanCaller) -> Response:
    return JSONResponse({"intakes": await intakes.list_for_human(request.app.state.ctx.core, human)})


@_route
async def create_intake(request: Request, human: HumanCaller) -> Response:
    body = await _body(request, CREATE_FIELDS)
    intake, token, secret = await intakes.create(request.app.state.ctx.core, human,
                                                 **{k: body.get(k) for k in CREATE_FIELDS})
    return JSONResponse({"intake": intake, "url": hook_url(request, token), "token": token, "secret": secret},
                        status_code=201, headers={"Cache-Control": "no-store"})


@_route
async def show_intake(request: Request, human: HumanCaller) -> Response:
    return JSONResponse({"intake": await intakes.get(request.app.state.ctx.core, human, request.path_params["ref"])})


@_route
async def put_rules(request: Request, human: HumanCaller) -> Response:
    body = await _body(request, ("rules",))
    intake = await intakes.set_rules(request.app.state.ctx.core, human, request.path_params["ref"],
                                     body.get("rules"))
    return JSONResponse({"intake": intake})


@_route
async def enable_intake(request: Request, human: HumanCaller) -> Response:
    await _body(request, ())
    intake = await intakes.set_enabled(request.app.state.ctx.core, human, request.path_params["ref"],
                                       request.url.path.endswith("/enable"))
    return JSONResponse({"intake": intake})


@_route
async def remove_intake(request: Request, human: HumanCaller) -> Response:
    removed = await intakes.remove(request.app.state.ctx.core, human, request.path_params["ref"])
    return JSONResponse({"removed": removed})


@_route
async def list_quarantine(request: Request, human: HumanCaller) -> Response:
    items = await intakes.quarantine(request.app.state.ctx.core, human, request.path_params["ref"],
                                     limit=_query_int(request, "limit"))
    return JSONResponse({"quarantine": items})


@_route
async def show_quarantined(request: Request, human: HumanCaller) -> Response:
    item = await intakes.quarantined(request.app.state.ctx.core, human, request.path_params["ref"],
                                     request.path_params["item"])
    return JSONResponse({"item": item})


@_route
async def replay_quarantined(request: Request, human: HumanCaller) -> Response:
    todo, created = await intakes.replay(request.app.state.ctx.core, human, request.path_params["ref"],
                                         request.path_params["item"])
    return JSONResponse({"todo": todo, "created": created}, status_code=201 if created else 200)


@_route
async def drop_quarantined(request: Request, human: HumanCaller) -> Response:
    dropped = await intakes.drop(request.app.state.ctx.core, human, request.path_params["ref"],
                                 request.path_params["item"])
    return JSONResponse({"dropped": dropped})


def component() -> Component:
    return Component(name="intake-api", routes=[
        Route("/api/v1/intakes", list_intakes, methods=["GET"]),
        Route("/api/v1/intakes", create_intake, methods=["POST"]),
        Route("/api/v1/intakes/{ref}", show_intake, methods=["GET"]),
        Route("/api/v1/intakes/{ref}", remove_intake, methods=["DELETE"]),
        Route("/api/v1/intakes/{ref}/rules", put_rules, methods=["PUT"]),
        Route("/api/v1/intakes/{ref}/enable", enable_intake, methods=["POST"]),
        Route("/api/v1/intakes/{ref}/disable", enable_intake, methods=["POST"]),
        Route("/api/v1/intakes/{ref}/quarantine", list_quarantine, methods=["GET"]),
        Route("/api/v1/intakes/{ref}/quarantine/{item}", show_quarantined, methods=["GET"]),
        Route("/api/v1/intakes/{ref}/quarantine/{item}", drop_quarantined, methods=["DELETE"]),
        Route("/api/v1/intakes/{ref}/quarantine/{item}/replay", replay_quarantined, methods=["POST"]),
    ])
