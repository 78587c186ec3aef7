"""`switchboard hook add|list|remove|enable|deliveries`: notify hooks (signed outbound webhooks) of an
endpoint's todo events. The signing secret is printed once, by `add`."""

from __future__ import annotations

import typer

from .backend import backend
from .common import emit

app = typer.Typer(no_args_is_help=True, help="Notify hooks: signed webhooks for an endpoint's todo events.")
UserOpt = typer.Option(None, "--user", help="Local-admin act: on this machine's database, act as this human without "
                                             "their credential (default: SWITCHBOARD_USER). Refused against a "
                                             "remote server, where the API token's human acts.")
JsonOpt = typer.Option(False, "--json", help="Print one JSON object.")


@app.command("add")
def hook_add(slug: str = typer.Argument(..., help="The endpoint whose todo events are sent."),
             url: str = typer.Option(..., "--url", help="https target that receives the events."),
             event: list[str] = typer.Option([], "--event", help="todo.created, todo.ready, todo.completed or "
                                                                  "todo.dead_lettered (repeatable; default all)."),
             user: str | None = UserOpt, as_json: bool = JsonOpt) -> None:
    """Subscribe a URL to an endpoint's todo events; prints the signing secret once."""
    out = backend(user).hook_add(slug, url=url, events=event or None)

    def text(o: dict) -> None:
        h = o["hook"]
        typer.echo(f"hook {h['hook_id']} on {h['endpoint']}\n  url:     {h['url']}\n"
                   f"  events:  {', '.join(h['events'])}\n  secret:  {o['signing_secret']}   (shown once; "
                   "verify the webhook-signature header with it)")

    emit(out, as_json, text)


@app.command("list")
def hook_list(slug: str = typer.Argument(..., help="The endpoint."), user: str | None = UserOpt,
              as_json: bool = JsonOpt) -> None:
    """List an endpoint's notify hooks (never their secrets)."""
    out = backend(user).hook_list(slug)

    def text(o: dict) -> None:
        if not o["hooks"]:
            typer.echo("no notify hooks")
        for h in o["hooks"]:
            state = "enabled" if h["enabled"] else f"disabled ({h['disabled_reason']})"
            typer.echo(f"{h['hook_id']}  {state}  {h['url']}  [{', '.join(h['events'])}]  "
                       f"last: {h['last_status'] or '-'} at {h['last_attempt_at'] or '-'}")

    emit(out, as_json, text)


@app.command("remove")
def hook_remove(hook_id: str = typer.Argument(..., metavar="ID"), user: str | None = UserOpt,
                as_json: bool = JsonOpt) -> None:
    """Remove a notify hook with its pending notifications."""
    emit(backend(user).hook_remove(hook_id), as_json, lambda o: typer.echo(f"removed hook {o['removed']['hook_id']}"))


@app.command("enable")
def hook_enable(hook_id: str = typer.Argument(..., metavar="ID"), user: str | None = UserOpt,
                as_json: bool = JsonOpt) -> None:
    """Turn a hook disabled after repeated failures back on (its failure count starts again at 0)."""
    emit(backend(user).hook_enable(hook_id), as_json, lambda o: typer.echo(f"enabled hook {o['hook']['hook_id']}"))


@app.command("deliveries")
def hook_deliveries(slug: str = typer.Argument(..., help="The endpoint."),
                    limit: int = typer.Option(20, "--limit"), user: str | None = UserOpt,
                    as_json: bool = JsonOpt) -> None:
    """The delivery log: the newest notifications and how their last attempt went."""
    out = backend(user).hook_deliveries(slug, limit=limit)

    def text(o: dict) -> None:
        if not o["deliveries"]:
            typer.echo("no deliveries")
        for d in o["deliveries"]:
            typer.echo(f"{d['created_at']}  {d['event']:<19} {d['todo_id']}  {d['state']:<9} "
                       f"attempts {d['attempts']}  last {d['last_status_code'] or d['last_result'] or '-'}")

    emit(out, as_json, text)
