"""`switchboard sink add|list|remove|enable|test|deliveries`: chat notification sinks (Slack, Discord,
Microsoft Teams, generic JSON) for dead letters, stuck queues and a daily digest (docs/notifications.md):
your own, or a team's (`--team <team-slug>`: added, removed, enabled and tested by the team's owners and
admins, listed by every member). Like every queue command, on this machine's database or, after
`switchboard login`, on the server's API."""

from __future__ import annotations

import typer

from .backend import backend
from .common import emit

app = typer.Typer(no_args_is_help=True, help="Notification sinks: dead letters, stuck queues and a digest, to chat.")
UserOpt = typer.Option(None, "--user", help="Local-admin act: on this machine's database, act as this human without "
                                             "their credential (default: SWITCHBOARD_USER). Refused against a "
                                             "remote server, where the API token's human acts.")
JsonOpt = typer.Option(False, "--json", help="Print one JSON object.")
TeamOpt = typer.Option(None, "--team", help="A team's sinks (its slug) instead of your own: the team's queues; "
                                            "added, removed, enabled and tested by its owners and admins.")


def _line(s: dict) -> str:
    state = "enabled" if s["enabled"] else f"disabled ({s['disabled_reason'] or 'by hand'})"
    team = s["owner"].get("team")
    return (f"{s['sink_id']}  {s['name']} [{s['kind']}]{f' of team {team}' if team else ''}  {state}  {s['url']}\n"
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
             team: str | None = TeamOpt, user: str | None = UserOpt, as_json: bool = JsonOpt) -> None:
    """Add a sink for every queue of your endpoints (or, with --team, for the team's queues)."""
    fields = dict(kind=kind, url=url, name=name, events=event or None, stuck_minutes=stuck_minutes,
                  digest_hour=digest_hour, timezone=timezone)
    where = backend(user)
    out = where.sink_add(**fields) if team is None else where.team_sink_add(team, **fields)
    emit(out, as_json, lambda o: typer.echo("added " + _line(o["sink"])))


@app.command("list")
def sink_list(team: str | None = TeamOpt, user: str | None = UserOpt, as_json: bool = JsonOpt) -> None:
    """List your sinks, or a team's with --team (URL queries redacted)."""
    where = backend(user)
    out = where.sink_list() if team is None else where.team_sink_list(team)

    def text(o: dict) -> None:
        if not o["sinks"]:
            typer.echo("no notification sinks")
        for s in o["sinks"]:
            typer.echo(_line(s))

    emit(out, as_json, text)


@app.command("remove")
def sink_remove(sink_id: str = typer.Argument(..., metavar="ID"), team: str | None = TeamOpt,
                user: str | None = UserOpt, as_json: bool = JsonOpt) -> None:
    """Remove a sink with its queued messages (a team's with --team)."""
    where = backend(user)
    out = where.sink_remove(sink_id) if team is None else where.team_sink_remove(team, sink_id)
    emit(out, as_json, lambda o: typer.echo(f"removed sink {o['removed']['sink_id']}"))


@app.command("enable")
def sink_enable(sink_id: str = typer.Argument(..., metavar="ID"), team: str | None = TeamOpt,
                user: str | None = UserOpt, as_json: bool = JsonOpt) -> None:
    """Turn a sink disabled after repeated failures back on (its failure count starts again at 0; a
    team's with --team)."""
    where = backend(user)
    out = where.sink_enable(sink_id) if team is None else where.team_sink_enable(team, sink_id)
    emit(out, as_json, lambda o: typer.echo(f"enabled sink {o['sink']['sink_id']}"))


@app.command("test")
def sink_test(sink_id: str = typer.Argument(..., metavar="ID"), team: str | None = TeamOpt,
              user: str | None = UserOpt, as_json: bool = JsonOpt) -> None:
    """Send a test message now and say how it went (exit 1 when it was not delivered; a team's sink
    with --team)."""
    where = backend(user)
    out = where.sink_test(sink_id) if team is None else where.team_sink_test(team, sink_id)

    def text(o: dict) -> None:
        t = o["test"]
        shown = f"HTTP {t['status_code']}" if t["status_code"] is not None else t["result"]
        typer.echo(("delivered" if t["delivered"] else f"not delivered: {t['error'] or shown}") + f" ({shown})")

    emit(out, as_json, text)
    if not out["test"]["delivered"]:
        raise typer.Exit(1)


@app.command("deliveries")
def sink_deliveries(sink: str | None = typer.Option(None, "--sink", metavar="ID", help="Only this sink's messages."),
                    limit: int = typer.Option(20, "--limit", help="At most this many (1-500)."),
                    team: str | None = TeamOpt, user: str | None = UserOpt, as_json: bool = JsonOpt) -> None:
    """The messages of your sinks (or a team's, with --team), newest first, and how their last attempt
    went."""
    where = backend(user)
    out = (where.sink_deliveries(sink_id=sink, limit=limit) if team is None
           else where.team_sink_deliveries(team, sink_id=sink, limit=limit))

    def text(o: dict) -> None:
        if not o["deliveries"]:
            typer.echo("no deliveries")
        for d in o["deliveries"]:
            typer.echo(f"{d['created_at']}  {d['event']:<11} {d['sink_id']}  {d['state']:<9} "
                       f"attempts {d['attempts']}  last {d['last_status_code'] or d['last_result'] or '-'}")

    emit(out, as_json, text)
