"""Notification sinks over the producer API (docs/notifications.md), with a human API token
(`Authorization: Bearer sbh_…`). Another human's sink answers exactly like an unknown id.

    GET    /api/v1/sinks                      -> {"sinks": [...]}
    POST   /api/v1/sinks                      {kind, url, name?, events?, stuck_minutes?, digest_hour?,
                                               timezone?} -> 201 {"sink"}
    DELETE /api/v1/sinks/{sink_id}            -> {"removed"}
    POST   /api/v1/sinks/{sink_id}/enable     -> {"sink"}
    POST   /api/v1/sinks/{sink_id}/test       -> {"test": {delivered, result, status_code, error}}
    GET    /api/v1/sinks/deliveries           ?sink_id=&limit= -> {"deliveries": [...]}
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from ..core import sinks as core_sinks
from ..core.errors import Invalid
from ..core.models import HumanCaller
from ..runtime import Component
from .api import _body as read_body
from .api import _route as human_route
from .sinks import SinkSender, send_test

FIELDS = ("kind", "url", "name", "events", "stuck_minutes", "digest_hour", "timezone")


@human_route
async def list_sinks(request: Request, human: HumanCaller) -> Response:
    return JSONResponse({"sinks": await core_sinks.list_for_owner(request.app.state.ctx.core, human)})


@human_route
async def add_sink(request: Request, human: HumanCaller) -> Response:
    body = await read_body(request, FIELDS)
    sink = await core_sinks.add(request.app.state.ctx.core, human, kind=body.get("kind"), url=body.get("url"),
                                name=body.get("name"), events=body.get("events"),
                                stuck_minutes=body.get("stuck_minutes"), digest_hour=body.get("digest_hour"),
                                timezone_name=body.get("timezone"))
    return JSONResponse({"sink": sink}, status_code=201, headers={"Cache-Control": "no-store"})


@human_route
async def remove_sink(request: Request, human: HumanCaller) -> Response:
    removed = await core_sinks.remove(request.app.state.ctx.core, human, request.path_params["sink_id"])
    return JSONResponse({"removed": removed})


@human_route
async def enable_sink(request: Request, human: HumanCaller) -> Response:
    return JSONResponse({"sink": await core_sinks.enable(request.app.state.ctx.core, human,
                                                         request.path_params["sink_id"])})


@human_route
async def test_sink(request: Request, human: HumanCaller) -> Response:
    return JSONResponse({"test": await send_test(request.app.state.ctx.core, human, request.path_params["sink_id"])})


@human_route
async def list_deliveries(request: Request, human: HumanCaller) -> Response:
    try:
        limit = int(request.query_params.get("limit", "50"))
    except ValueError:
        raise Invalid("limit must be an integer", argument="limit") from None
    rows = await core_sinks.deliveries(request.app.state.ctx.core, human,
                                       sink_id=request.query_params.get("sink_id"), limit=limit)
    return JSONResponse({"deliveries": rows})


def routes() -> list[BaseRoute]:
    return [
        Route("/api/v1/sinks", list_sinks, methods=["GET"]),
        Route("/api/v1/sinks", add_sink, methods=["POST"]),
        Route("/api/v1/sinks/deliveries", list_deliveries, methods=["GET"]),
        Route("/api/v1/sinks/{sink_id}", remove_sink, methods=["DELETE"]),
        Route("/api/v1/sinks/{sink_id}/enable", enable_sink, methods=["POST"]),
        Route("/api/v1/sinks/{sink_id}/test", test_sink, methods=["POST"]),
    ]


def component(sender: SinkSender) -> Component:
    """The sender's lifecycle and sweep-tick hook, and the API routes."""
    return Component(name="sinks", routes=routes(), start=sender.start, stop=sender.stop,
                     on_tick=sender.on_tick)
