"""Queues: the admission policy of each queue of the human's endpoints (usage, a pause switch, a form
to set or clear it; the routes are in `admission_pages.py`), and attempt outcomes over time per queue,
as SVG charts and tables. Team queues' policies are on their team's page."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ...core import admission, endpoints, inputs, stats
from ...core.errors import Invalid
from . import admission_view
from .chart import defs_svg, legend_items, outcome_chart
from .kit import Board, human_page

DAY_CHOICES = (7, 14, 30, 90)


def _admission_rows(eps: list[dict[str, Any]], policies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per queue of each active endpoint (team queues aside), with its policy or None."""
    by_key = {(p["endpoint"], p["queue"]): p for p in policies if p.get("endpoint")}
    rows: list[dict[str, Any]] = []
    for e in eps:
        if e["state"] != "active":
            continue
        for q in e["queues"]:
            if inputs.is_team_label(q):
                continue
            rows.append({"endpoint": e["slug"], "agent": e["agent"], "queue": q,
                         "policy": by_key.get((e["slug"], q)), "key": f"e{len(rows)}"})
    return rows


async def render_queues(board: Board, request: Request, who, *, status: int = 200, error: str | None = None,
                        policy_failed: dict[str, Any] | None = None) -> Response:
    """The Queues screen (also rendered again, with the message, by a refused policy form)."""
    raw = request.query_params.get("days", "14")
    days = int(raw) if raw.isdigit() and int(raw) in DAY_CHOICES else 14
    if raw != str(days) and error is None:
        error, status = f"days must be one of {', '.join(map(str, DAY_CHOICES))}; showing 14.", 400
    endpoint = request.query_params.get("endpoint", "")[:64] or None
    try:
        queues = await stats.attempt_outcomes(board.core, who[0], days=days, endpoint=endpoint)
    except Invalid as exc:  # pragma: no cover - days is checked above
        queues, error = [], exc.message
    eps = await endpoints.list_for_human(board.core, who[0])
    policies = await admission.list_for_human(board.core, who[0])
    admission_rows = _admission_rows(eps, policies)
    charts = [(q, outcome_chart(q, f"sb-chart-{i}")) for i, q in enumerate(queues)]
    notice = admission_view.NOTICES.get(request.query_params.get("done", "")) if status == 200 else None
    return board.page(
        request, who, "queues.html", status=status, title="Queues", active="queues", charts=charts, days=days,
        day_choices=DAY_CHOICES, error=error, notice=notice, eps=eps, endpoint=endpoint or "",
        legend=legend_items(), defs=defs_svg(), admission_rows=admission_rows,
        policy_values=lambda r: admission_view.form_values(r["policy"], r["queue"], r["endpoint"], policy_failed),
        **admission_view.context(policy_failed))


@human_page
async def queues_screen(board: Board, request: Request, who) -> Response:
    return await render_queues(board, request, who)


def routes() -> list[Route]:
    return [Route("/queues", queues_screen, methods=["GET"])]
