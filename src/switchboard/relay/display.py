"""Progress of `relay work`: a live table of tasks by state on a terminal, one line per event otherwise."""

from __future__ import annotations

import time

from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from ..cli.common import printable
from .ledger import ICONS, TaskView, counts


def attempts_line(view: TaskView) -> str:
    """Each attempt in a few words, died attempts marked: `1 failure (test_failure), 2 DIED, 3 success`."""
    from .receipts import parse_summary

    parts = []
    for i, (_, a) in enumerate(view.attempts(), start=1):
        if a.get("died"):
            parts.append(f"{i} DIED")
            continue
        outcome = a.get("outcome")
        if outcome is None:
            parts.append(f"{i} running")
            continue
        receipt = parse_summary(a.get("summary")) or {}
        word = {"completed": "success", "failed": "failure"}.get(outcome, outcome)
        cat = receipt.get("error_category") if outcome == "failed" else None
        parts.append(f"{i} {word}" + (f" ({cat})" if cat else ""))
    return ", ".join(parts)


def note(view: TaskView) -> str:
    if view.gate:
        return f"gated: {view.gate['reason']}"
    if view.status == "blocked":
        return "waiting on " + ", ".join(view.waiting_on)
    if view.retry_at:
        return f"retry at {view.retry_at}"
    return ""


def task_table(views: dict[str, TaskView], running: dict[str, float] | None = None, title: str | None = None) -> Table:
    table = Table(title=Text(printable(title)) if title else None, title_justify="left", expand=False)
    for col in ("task", "title", "status", "attempt", "attempts", "note"):
        table.add_column(col, overflow="fold")
    now = time.monotonic()
    for tid, v in views.items():
        status = f"{ICONS[v.status]} {v.status}"
        if running and tid in running:
            status += f" {int(now - running[tid])}s"
        number = f"{v.attempt_number}/{v.max_attempts}" if v.todo else "-"
        # Titles, gate reasons and receipts come from epics and agents: no escape sequence may act.
        cells = (tid, v.title, status, number, attempts_line(v), note(v))
        table.add_row(*(Text(printable(cell)) for cell in cells))
    c = counts(views)
    table.caption = "  ".join(f"{k} {n}" for k, n in c.items())
    return table


class Display:
    def __init__(self, console: Console, epic_title: str):
        self.console = console
        self.title = epic_title
        self.live: Live | None = None
        self.views: dict[str, TaskView] = {}
        self.running: dict[str, float] = {}

    def __enter__(self) -> Display:
        if self.console.is_terminal:
            self.live = Live(console=self.console, refresh_per_second=2, transient=False,
                             get_renderable=self._render)
            self.live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None

    def _render(self) -> Table:
        return task_table(self.views, self.running, title=self.title)

    def update(self, views: dict[str, TaskView]) -> None:
        self.views = views
        if self.live is not None:
            self.live.refresh()

    def started(self, task_id: str) -> None:
        self.running[task_id] = time.monotonic()

    def finished(self, task_id: str) -> None:
        self.running.pop(task_id, None)

    def event(self, message: str) -> None:
        self.console.print(printable(message, multiline=True), markup=False, highlight=False, soft_wrap=True)
