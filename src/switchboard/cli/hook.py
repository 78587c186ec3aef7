"""`switchboard hook add|list|remove|enable|deliveries`: notify hooks (signed outbound webhooks) of an
endpoint's todo events, or of a team's (`--team <team-slug>`, managed by the team's owners and admins).
The signing secret is printed once, by `add`."""

from __future__ import annotations

import typer

from .backend import backend
from .common import emit, fail_usage

app = typer.Typer(no_args_is_help=True, help="Notify hooks: signed webhooks for an endpoint's or a team's todo events.")
UserOpt = typer.Option(None, "--user", help="Local-admin act: on this machine's database, act as this human without "
                                             "their credential (default: SWITCHBOARD_USER). Refused against a "
                                             "remote server, where the API token's human acts.")
JsonOpt = typer.Option(False, "--json", help="Print one JSON object.")
TeamOpt = typer.Option(None, "--team", help="A team's hooks (its slug) instead of an endpoint's: the team's todo "
                                            "events; added, removed and enabled by its owners and admins.")


def _one_owner(slug: str | None, team: str | None) -> None:
    if (slug is None) == (team is None):
        fail_usage("name the endpoint (its slug) or --team <team-slug>, exactly one of the two", argument="team")


def _owner(h: dict) -> str:
    return f"team {h['team']}" if h.get("team") else h["endpoint"]


@app.command("add")
def hook_add(slug: str | None = typer.Argument(None, help="The endpoint whose todo events are sent (or --team)."),
             url: str = typer.Option(..., "--url", help="https target that receives the events."),
             event: list[str] = typer.Option([], "--event", help="todo.created, todo.ready, todo.completed or "
                                                                  "todo.dead_lettered (repeatable; default all)."),
             team: str | None = TeamOpt, user: str | None = UserOpt, as_json: bool = JsonOpt) -> None:
    """Subscribe a URL to an endpoint's or a team's todo events; prints the signing secret once."""
    _one_owner(slug, team)
    where = backend(user)
    out = (where.hook_add(slug or "", url=url, events=event or None) if team is None
           else where.team_hook_add(team, url=url, events=event or None))

    def text(o: dict) -> None:
        h = o["hook"]
        typer.echo(f"hook {h['hook_id']} on {_owner(h)}\n  url:     {h['url']}\n"
                   f"  events:  {', '.join(h['events'])}\n  secret:  {o['signing_secret']}   (shown once; "
                   "verify the webhook-signature header with it)")

    emit(out, as_json, text)


@app.command("list")
def hook_list(slug: str | None = typer.Argument(None, help="The endpoint (or --team)."), team: str | None = TeamOpt,
              user: str | None = UserOpt, as_json: bool = JsonOpt) -> None:
    """List an endpoint's or a team's notify hooks (never their secrets)."""
    _one_owner(slug, team)
    where = backend(user)
    out = where.hook_list(slug or "") if team is None else where.team_hook_list(team)

    def text(o: dict) -> None:
        if not o["hooks"]:
            typer.echo("no notify hooks")
        for h in o["hooks"]:
            state = "enabled" if h["enabled"] else f"disabled ({h['disabled_reason']})"
            typer.echo(f"{h['hook_id']}  {state}  {h['url']}  [{', '.join(h['events'])}]  "
                       f"last: {h['last_status'] or '-'} at {h['last_attempt_at'] or '-'}")

    emit(out, as_json, text)


@app.command("remove")
def hook_remove(hook_id: str = typer.Argument(..., metavar="ID"), team: str | None = TeamOpt,
                user: str | None = UserOpt, as_json: bool = JsonOpt) -> None:
    """Remove a notify hook with its pending notifications (a team's with --team)."""
    where = backend(user)
    out = where.hook_remove(hook_id) if team is None else where.team_hook_remove(team, hook_id)
    emit(out, as_json, lambda o: typer.echo(f"removed hook {o['removed']['hook_id']}"))


@app.command("enable")
def hook_enable(hook_id: str = typer.Argument(..., metavar="ID"), team: str | None = TeamOpt,
                user: str | None = UserOpt, as_json: bool = JsonOpt) -> None:
    """Turn a hook disabled after repeated failures back on (its failure count starts again at 0; a
    team's with --team)."""
    where = backend(user)
    out = where.hook_enable(hook_id) if team is None else where.team_hook_enable(team, hook_id)
    emit(out, as_json, lambda o: typer.echo(f"enabled hook {o['hook']['hook_id']}"))


@app.command("deliveries")
def hook_deliveries(slug: str | None = typer.Argument(None, help="The endpoint (or --team)."),
                    limit: int = typer.Option(20, "--limit"), team: str | None = TeamOpt,
                    user: str | None = UserOpt, as_json: bool = JsonOpt) -> None:
    """The delivery log: the newest notifications and how their last attempt went."""
    _one_owner(slug, team)
    where = backend(user)
    out = (where.hook_deliveries(slug or "", limit=limit) if team is None
           else where.team_hook_deliveries(team, limit=limit))

    def text(o: dict) -> None:
        if not o["deliveries"]:
            typer.echo("no deliveries")
        for d in o["deliveries"]:
            typer.echo(f"{d['created_at']}  {d['event']:<19} {d['todo_id']}  {d['state']:<9} "
                       f"attempts {d['attempts']}  last {d['last_status_code'] or d['last_result'] or '-'}")

    emit(out, as_json, text)
