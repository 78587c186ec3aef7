"""`switchboard intake create|list|show|rules|enable|disable|remove|quarantine|replay`: webhook intakes
(docs/intake.md).

An intake turns signed webhooks from another system into todos on one of your endpoints' queues.
`create` prints the URL (its token) and the secret once. INTAKE is an intake's id or name. Like every
queue command, on this machine's database or, after `switchboard login`, on the server's API.
"""

from __future__ import annotations

import json

import typer

from .backend import backend
from .common import emit, printable, read_json_arg

app = typer.Typer(no_args_is_help=True, help="Webhook intakes: signed webhooks from other systems become todos.")
UserOpt = typer.Option(None, "--user", help="Local-admin act: on this machine's database, act as this human without "
                                             "their credential (default: SWITCHBOARD_USER). Refused against a "
                                             "remote server, where the API token's human acts.")
JsonOpt = typer.Option(False, "--json", help="Print one JSON object.")
IntakeArg = typer.Argument(..., metavar="INTAKE", help="The intake's id or name.")


def _summary(i: dict) -> str:
    state = "enabled" if i["enabled"] else "disabled"
    return (f"{printable(i['name'])}  {i['source']}  -> {i['endpoint']}/{i['queue']}  {state}  "
            f"rules {len(i['rules'])}  accepted {i['accepted']}  duplicates {i['duplicates']}  "
            f"quarantined {i['held']} held  verify failures {i['verify_failures']}")


@app.command("create")
def intake_create(name: str = typer.Argument(..., help="A name for the intake, unique among yours."),
                  endpoint: str = typer.Option(..., "--endpoint", help="The endpoint whose queue gets the todos."),
                  source: str = typer.Option(..., "--source", help="github, standard, hmac or bearer."),
                  queue: str | None = typer.Option(None, "--queue",
                                                      help="The queue (needed when the endpoint has several)."),
                  secret: str | None = typer.Option(None, "--secret",
                                                       help="Use this secret (default: a fresh one is made)."),
                  rules: str | None = typer.Option(None, "--rules", help="Routing rules: JSON, @file or @-."),
                  user: str | None = UserOpt, as_json: bool = JsonOpt) -> None:
    """Make an intake; prints its URL and secret once."""
    parsed = read_json_arg(rules, "rules")
    out = backend(user).intake_create(name=name, endpoint=endpoint, source=source, queue=queue, secret=secret,
                                      rules=parsed)

    def text(o: dict) -> None:
        i = o["intake"]
        typer.echo(f"intake {printable(i['name'])} ({i['intake_id']}) -> {i['endpoint']}/{i['queue']}\n"
                   f"  url:     {o['url']}\n  secret:  {o['secret']}\n"
                   "  (both shown once: paste them into the sender's webhook settings now)")

    emit(out, as_json, text)


@app.command("list")
def intake_list(user: str | None = UserOpt, as_json: bool = JsonOpt) -> None:
    """Your intakes with their counters (never a secret)."""
    out = backend(user).intake_list()

    def text(o: dict) -> None:
        if not o["intakes"]:
            typer.echo("no intakes")
        for i in o["intakes"]:
            typer.echo(_summary(i))

    emit(out, as_json, text)


@app.command("show")
def intake_show(ref: str = IntakeArg, user: str | None = UserOpt, as_json: bool = JsonOpt) -> None:
    """One intake: its target, counters and rules."""
    out = backend(user).intake_show(ref)

    def text(o: dict) -> None:
        i = o["intake"]
        typer.echo(_summary(i))
        typer.echo(f"  id: {i['intake_id']}  url token: {i['token_prefix']}…  created {i['created_at']}")
        typer.echo(printable(json.dumps(i["rules"], indent=2), multiline=True))

    emit(out, as_json, text)


@app.command("rules")
def intake_rules(ref: str = IntakeArg,
                 set_: str | None = typer.Option(None, "--set", help="Replace the rules: JSON, @file or @-."),
                 user: str | None = UserOpt, as_json: bool = JsonOpt) -> None:
    """Print an intake's routing rules, or replace them with --set (every expression is checked)."""
    parsed = read_json_arg(set_, "set")
    where = backend(user)
    intake = (where.intake_show(ref) if set_ is None else where.intake_set_rules(ref, parsed))["intake"]
    emit({"rules": intake["rules"]}, as_json,
         lambda o: typer.echo(printable(json.dumps(o["rules"], indent=2), multiline=True)))


def _set_enabled(ref: str, enabled: bool, user: str | None, as_json: bool) -> None:
    emit(backend(user).intake_set_enabled(ref, enabled), as_json, lambda o: typer.echo(_summary(o["intake"])))


@app.command("disable")
def intake_disable(ref: str = IntakeArg, user: str | None = UserOpt, as_json: bool = JsonOpt) -> None:
    """Pause an intake: its URL answers 401, as for an unknown one, and nothing is stored."""
    _set_enabled(ref, False, user, as_json)


@app.command("enable")
def intake_enable(ref: str = IntakeArg, user: str | None = UserOpt, as_json: bool = JsonOpt) -> None:
    """Resume a paused intake."""
    _set_enabled(ref, True, user, as_json)


@app.command("remove")
def intake_remove(ref: str = IntakeArg, user: str | None = UserOpt, as_json: bool = JsonOpt) -> None:
    """Delete an intake with its quarantine; its URL stops working at once."""
    emit(backend(user).intake_remove(ref), as_json,
         lambda o: typer.echo(f"removed intake {printable(o['removed']['name'])}"))


@app.command("quarantine")
def intake_quarantine(ref: str = IntakeArg,
                      item: str | None = typer.Argument(None, help="One quarantined delivery, shown in full."),
                      drop: bool = typer.Option(False, "--drop", help="Drop ITEM instead of showing it."),
                      user: str | None = UserOpt, as_json: bool = JsonOpt) -> None:
    """List the deliveries held back (no rule matched, or the rule failed); show or drop one."""
    where = backend(user)
    if item is None:
        out = where.intake_quarantine(ref)
    elif drop:
        out = where.intake_drop(ref, item)
    else:
        out = where.intake_quarantined(ref, item)

    def text(o: dict) -> None:
        if "dropped" in o:
            typer.echo(f"dropped {o['dropped']['item_id']}")
        elif "item" in o:
            d = o["item"]
            typer.echo(f"{d['item_id']}  {d['received_at']}  event {printable(d['event'] or '-')}  "
                       f"delivery {printable(d['delivery'] or '-')}\n  reason: {printable(d['reason'])}")
            typer.echo(printable(json.dumps(d["document"], indent=2), multiline=True))
        elif not o["quarantine"]:
            typer.echo("nothing quarantined")
        else:
            for d in o["quarantine"]:
                typer.echo(f"{d['item_id']}  {d['received_at']}  {printable(d['event'] or '-'):<16} "
                           f"{printable(d['reason'])}")

    emit(out, as_json, text)


@app.command("replay")
def intake_replay(ref: str = IntakeArg, item: str = typer.Argument(..., help="The quarantined delivery."),
                  user: str | None = UserOpt, as_json: bool = JsonOpt) -> None:
    """Route a quarantined delivery again with the current rules; on success it becomes a todo."""
    emit(backend(user).intake_replay(ref, item), as_json,
         lambda o: typer.echo(f"{'created' if o['created'] else 'found live'} todo {o['todo']['id']}: "
                              f"{printable(o['todo']['title'])}"))
