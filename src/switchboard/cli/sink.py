"""`switchboard sink add|list|remove|enable|test`: chat notification sinks (Slack, Discord, Microsoft
Teams, generic JSON) for dead letters, stuck queues and a daily digest (docs/notifications.md)."""

from __future__ import annotations

import typer

from .common import emit, human, run

app = typer.Typer(no_args_is_help=True, help="Notification sinks: dead letters, stuck queues and a digest, to chat.")
UserOpt = typer.Option(None, "--user", help="Act as this human (default: SWITCHBOARD_USER).")
JsonOpt = typer.Option(False, "--json", help="Print one JSON object.")


def _line(s: dict) -> str:
    state = "enabled" if s["enabled"] else f"disabled ({s['disabled_reason'] or 'by hand'})"
    return (f"{s['sink_id']}  {s['name']} [{s['kind']}]  {state}  {s['url']}\n"
            f"    events: {', '.join(s['events'])}; stuck after {s['stuck_minutes']} min; "
            f"digest at {s['digest_hour']:02d}:00 {s['timezone']}; "
            f"last: {s['last_status'] or '-'} at {s['last_attempt_at'] or '-'}")


@app.command("add")
def sink_add(kind: str = typer.Argument(..., help="slack, discord, teams or generic."),
             url: str = typer.Argument(..., help="The chat's incoming-webhook URL (https)."),
             name: str | None = typer.Option(None, "--name", help="A label (default: the kind)."),
             event: list[str] = typer.Option([], "--event", help="dead_letter, queue_stuck or digest "
                                                                  "(repeatable; default all)."),
             stuck_minutes: int | None = typer.Option(None, "--stuck-minutes",
                                                         help="A queue is stuck when a todo waits this long "
                                                              "with no claim (default 30)."),
             digest_hour: int | None = typer.Option(None, "--digest-hour", help="Local hour of the digest, "
                                                                                  "0-23 (default 9)."),
             timezone: str | None = typer.Option(None, "--timezone", help="IANA time zone of the digest "
                                                                            "hour (default UTC)."),
             user: str | None = UserOpt, as_json: bool = JsonOpt) -> None:
    """Add a sink for every queue of your endpoints."""
    from ..core import sinks

    async def work(core):
        return await sinks.add(core, await human(core, user), kind=kind, url=url, name=name,
                               events=event or None, stuck_minutes=stuck_minutes, digest_hour=digest_hour,
                               timezone_name=timezone)

    sink = run(work)
    emit({"sink": sink}, as_json, lambda o: typer.echo("added " + _line(o["sink"])))


@app.command("list")
def sink_list(user: str | None = UserOpt, as_json: bool = JsonOpt) -> None:
    """List your sinks (URL queries redacted)."""
    from ..core import sinks

    async def work(core):
        return await sinks.list_for_owner(core, await human(core, user))

    rows = run(work)

    def text(o: dict) -> None:
        if not o["sinks"]:
            typer.echo("no notification sinks")
        for s in o["sinks"]:
            typer.echo(_line(s))

    emit({"sinks": rows}, as_json, text)


@app.command("remove")
def sink_remove(sink_id: str = typer.Argument(..., metavar="ID"), user: str | None = UserOpt,
                as_json: bool = JsonOpt) -> None:
    """Remove a sink with its queued messages."""
    from ..core import sinks

    async def work(core):
        return await sinks.remove(core, await human(core, user), sink_id)

    removed = run(work)
    emit({"removed": removed}, as_json, lambda o: typer.echo(f"removed sink {o['removed']['sink_id']}"))


@app.command("enable")
def sink_enable(sink_id: str = typer.Argument(..., metavar="ID"), user: str | None = UserOpt,
                as_json: bool = JsonOpt) -> None:
    """Turn a sink disabled after repeated failures back on (its failure count starts again at 0)."""
    from ..core import sinks

    async def work(core):
        return await sinks.enable(core, await human(core, user), sink_id)

    sink = run(work)
    emit({"sink": sink}, as_json, lambda o: typer.echo(f"enabled sink {o['sink']['sink_id']}"))


@app.command("test")
def sink_test(sink_id: str = typer.Argument(..., metavar="ID"), user: str | None = UserOpt,
              as_json: bool = JsonOpt) -> None:
    """Send a test message now and say how it went (exit 1 when it was not delivered)."""
    from ..web.sinks import send_test

    async def work(core):
        return await send_test(core, await human(core, user), sink_id)

    outcome = run(work)

    def text(o: dict) -> None:
        t = o["test"]
        shown = f"HTTP {t['status_code']}" if t["status_code"] is not None else t["result"]
        typer.echo(("delivered" if t["delivered"] else f"not delivered: {t['error'] or shown}") + f" ({shown})")

    emit({"test": outcome}, as_json, text)
    if not outcome["delivered"]:
        raise typer.Exit(1)
