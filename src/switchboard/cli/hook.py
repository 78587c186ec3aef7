"""`switchboard hook add|list|remove|enable|deliveries`: notify hooks (signed outbound webhooks) of an
endpoint's todo events. The signing secret is printed once, by `add`."""

from __future__ import annotations

from typing import Optional

import typer

from .common import emit, human, run

app = typer.Typer(no_args_is_help=True, help="Notify hooks: signed webhooks for an endpoint's todo events.")
UserOpt = typer.Option(None, "--user", help="Act as this human (default: SWITCHBOARD_USER).")
JsonOpt = typer.Option(False, "--json", help="Print one JSON object.")


@app.command("add")
def hook_add(slug: str = typer.Argument(..., help="The endpoint whose todo events are sent."),
             url: str = typer.Option(..., "--url", help="https target that receives the events."),
             event: list[str] = typer.Option([], "--event", help="todo.created, todo.ready, todo.completed or "
                                                                  "todo.dead_lettered (repeatable; default all)."),
             user: Optional[str] = UserOpt, as_json: bool = JsonOpt) -> None:
    """Subscribe a URL to an endpoint's todo events; prints the signing secret once."""
    from ..core import hooks

    async def work(core):
        return await hooks.add(core, await human(core, user), slug, url=url, events=event or None)

    hook, secret = run(work)

    def text(o: dict) -> None:
        h = o["hook"]
        typer.echo(f"hook {h['hook_id']} on {h['endpoint']}\n  url:     {h['url']}\n"
                   f"  events:  {', '.join(h['events'])}\n  secret:  {o['signing_secret']}   (shown once; "
                   "verify the webhook-signature header with it)")

    emit({"hook": hook, "signing_secret": secret}, as_json, text)


@app.command("list")
def hook_list(slug: str = typer.Argument(..., help="The endpoint."), user: Optional[str] = UserOpt,
              as_json: bool = JsonOpt) -> None:
    """List an endpoint's notify hooks (never their secrets)."""
    from ..core import hooks

    async def work(core):
        return await hooks.list_for_endpoint(core, await human(core, user), slug)

    rows = run(work)

    def text(o: dict) -> None:
        if not o["hooks"]:
            typer.echo("no notify hooks")
        for h in o["hooks"]:
            state = "enabled" if h["enabled"] else f"disabled ({h['disabled_reason']})"
            typer.echo(f"{h['hook_id']}  {state}  {h['url']}  [{', '.join(h['events'])}]  "
                       f"last: {h['last_status'] or '-'} at {h['last_attempt_at'] or '-'}")

    emit({"hooks": rows}, as_json, text)


@app.command("remove")
def hook_remove(hook_id: str = typer.Argument(..., metavar="ID"), user: Optional[str] = UserOpt,
                as_json: bool = JsonOpt) -> None:
    """Remove a notify hook with its pending notifications."""
    from ..core import hooks

    async def work(core):
        return await hooks.remove(core, await human(core, user), hook_id)

    removed = run(work)
    emit({"removed": removed}, as_json, lambda o: typer.echo(f"removed hook {o['removed']['hook_id']}"))


@app.command("enable")
def hook_enable(hook_id: str = typer.Argument(..., metavar="ID"), user: Optional[str] = UserOpt,
                as_json: bool = JsonOpt) -> None:
    """Turn a hook disabled after repeated failures back on (its failure count starts again at 0)."""
    from ..core import hooks

    async def work(core):
        return await hooks.enable(core, await human(core, user), hook_id)

    hook = run(work)
    emit({"hook": hook}, as_json, lambda o: typer.echo(f"enabled hook {o['hook']['hook_id']}"))


@app.command("deliveries")
def hook_deliveries(slug: str = typer.Argument(..., help="The endpoint."),
                    limit: int = typer.Option(20, "--limit"), user: Optional[str] = UserOpt,
                    as_json: bool = JsonOpt) -> None:
    """The delivery log: the newest notifications and how their last attempt went."""
    from ..core import hooks

    async def work(core):
        return await hooks.deliveries(core, await human(core, user), slug=slug, limit=limit)

    rows = run(work)

    def text(o: dict) -> None:
        if not o["deliveries"]:
            typer.echo("no deliveries")
        for d in o["deliveries"]:
            typer.echo(f"{d['created_at']}  {d['event']:<19} {d['todo_id']}  {d['state']:<9} "
                       f"attempts {d['attempts']}  last {d['last_status_code'] or d['last_result'] or '-'}")

    emit({"deliveries": rows}, as_json, text)
