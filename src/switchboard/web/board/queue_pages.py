"""Queues: attempt outcomes over time per queue of the human's endpoints, as SVG charts and tables."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ...core import endpoints, stats
from ...core.errors import Invalid
from .chart import defs_svg, legend_items, outcome_chart
from .kit import Board, human_page

DAY_CHOICES = (7, 14, 30, 90)


@human_page
async def queues_screen(board: Board, request: Request, who) -> Response:
    raw = request.query_params.get("days", "14")
    error = None
    days = int(raw) if raw.isdigit() and int(raw) in DAY_CHOICES else 14
    if raw != str(days):
        error = f"days must be one of {', '.join(map(str, DAY_CHOICES))}; showing 14."
    endpoint = request.query_params.get("endpoint", "")[:64] or None
    try:
        queues = await stats.attempt_outcomes(board.core, who[0], days=days, endpoint=endpoint)
    except Invalid as exc:  # pragma: no cover - days is checked above
        queues, error = [], exc.message
    eps = await endpoints.list_for_human(board.core, who[0])
    charts = [(q, outcome_chart(q, f"sb-chart-{i}")) for i, q in enumerate(queues)]
    return board.page(request, who, "queues.html", status=400 if error else 200, title="Queues",
                      active="queues", charts=charts, days=days, day_choices=DAY_CHOICES, error=error,
                      eps=eps, endpoint=endpoint or "", legend=legend_items(), defs=defs_svg())


def routes() -> list[Route]:
    return [Route("/queues", queues_screen, methods=["GET"])]
