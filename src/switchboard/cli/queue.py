"""`switchboard queue policy set|show|clear|list` and `queue pause|resume`: admission control per queue
(SPEC-0030, issue 13).

A policy belongs to one queue identity: an endpoint's queue (`QUEUE --endpoint SLUG`) or a team queue
(`team:<team-slug>/<queue>`, managed by the team's owners and admins). It caps the leases in flight
and the claims per window (an hour, a day or a week, in an IANA time zone, from a start time; a
week also from a weekday); 0 or `queue pause` stops claims until `queue resume`. `policy set`
replaces the limits and the window (a limit left out is none); the pause switch stays as it was.
"""

from __future__ import annotations

import typer

from .backend import backend
from .common import emit, fail_usage

app = typer.Typer(no_args_is_help=True, help="Admission control: per-queue limits on claims, and a pause switch.")
policy_app = typer.Typer(no_args_is_help=True, help="Set, show, clear and list admission policies.")
app.add_typer(policy_app, name="policy")

UserOpt = typer.Option(None, "--user", help="Local-admin act: on this machine's database, act as this human without "
                                             "their credential (default: SWITCHBOARD_USER). Refused against a "
                                             "remote server, where the API token's human acts.")
JsonOpt = typer.Option(False, "--json", help="Print one JSON object.")
QueueArg = typer.Argument(..., metavar="QUEUE", help="An endpoint's queue (with --endpoint), or a team queue "
                                                     "team:<team-slug>/<queue>.")
EndpointOpt = typer.Option(None, "--endpoint", help="The endpoint whose queue it is (its slug); not for a team queue.")


def _limit(value: str | None, flag: str) -> int | None:
    """A limit flag: a whole number, or `none` (no limit); left out is none too."""
    if value is None or value.strip().lower() == "none":
        return None
    text = value.strip()
    if not text.lstrip("+-").isdigit() or not text.isascii():
        fail_usage(f"{flag} takes a whole number or none, not {value!r}", argument=flag.lstrip("-").replace("-", "_"))
    return int(text)


def _of(n: int | None) -> str:
    return "no limit" if n is None else str(n)


def policy_line(p: dict) -> str:
    """Two lines: the queue and its status (PAUSED when the switch is on, whatever else holds it back),
    then the usage; the window is named only where a claim budget uses it."""
    w = p["window"]
    where = f"endpoint {p['endpoint']}" if p.get("endpoint") else "team queue"
    status = "PAUSED (the switch is on)" if p["paused"] else p["status"]
    if p["max_claims_per_window"] is None:
        claims = f"claims {p['used']} (no limit)"
    else:
        window = (f"per {w['period']} from {w['start']}" + (f" {w['weekday']}" if w["weekday"] else "")
                  + f" {w['tz']}")
        claims = (f"claims {p['used']} of {p['max_claims_per_window']} {window}, resets "
                  f"{p['window_resets_at'] or '-'}")
    return (f"{p['queue']}  ({where})  {status}\n"
            f"    in flight {p['in_flight']} of {_of(p['max_in_flight'])}; {claims}; pending {p['pending']}")


@policy_app.command("set")
def policy_set(queue: str = QueueArg, endpoint: str | None = EndpointOpt,
               max_in_flight: str | None = typer.Option(None, "--max-in-flight", metavar="N|none",
                                                        help="Leases in flight at most (0-10000; 0 pauses)."),
               max_claims: str | None = typer.Option(None, "--max-claims", metavar="N|none",
                                                     help="Claims per window at most (0-1000000; 0 pauses)."),
               period: str | None = typer.Option(None, "--period", help="The window: hour, day or week "
                                                                        "(default hour)."),
               tz: str | None = typer.Option(None, "--tz", help="The window's IANA time zone (default UTC)."),
               start: str | None = typer.Option(None, "--start", metavar="HH:MM",
                                                help="When a window starts (default 00:00)."),
               weekday: str | None = typer.Option(None, "--weekday", metavar="mon..sun",
                                                  help="The day a weekly window starts (weeks only)."),
               user: str | None = UserOpt, as_json: bool = JsonOpt) -> None:
    """Set a queue's admission policy (replacing its limits and window; the pause switch stays)."""
    out = backend(user).policy_set(queue, endpoint, max_in_flight=_limit(max_in_flight, "--max-in-flight"),
                                   max_claims_per_window=_limit(max_claims, "--max-claims"),
                                   window={"period": period, "tz": tz, "start": start, "weekday": weekday})
    emit(out, as_json, lambda o: typer.echo("set " + policy_line(o["policy"])))


@policy_app.command("show")
def policy_show(queue: str = QueueArg, endpoint: str | None = EndpointOpt, user: str | None = UserOpt,
                as_json: bool = JsonOpt) -> None:
    """Show a queue's policy with its usage now (not_found when it has none)."""
    emit(backend(user).policy_show(queue, endpoint), as_json, lambda o: typer.echo(policy_line(o["policy"])))


@policy_app.command("clear")
def policy_clear(queue: str = QueueArg, endpoint: str | None = EndpointOpt, user: str | None = UserOpt,
                 as_json: bool = JsonOpt) -> None:
    """Remove a queue's policy: its claims are no longer limited (a pause goes with it)."""
    out = backend(user).policy_clear(queue, endpoint)
    emit(out, as_json, lambda o: typer.echo(f"cleared the policy of {o['queue']}"))


@policy_app.command("list")
def policy_list(user: str | None = UserOpt, as_json: bool = JsonOpt) -> None:
    """List the policies of your endpoints' queues and of your teams' queues."""
    out = backend(user).policy_list()

    def text(o: dict) -> None:
        if not o["policies"]:
            typer.echo("no admission policies")
        for p in o["policies"]:
            typer.echo(policy_line(p))

    emit(out, as_json, text)


@app.command("pause")
def queue_pause(queue: str = QueueArg, endpoint: str | None = EndpointOpt, user: str | None = UserOpt,
                as_json: bool = JsonOpt) -> None:
    """Pause a queue: no claims until `queue resume` (a queue without a policy gets one that only pauses)."""
    out = backend(user).queue_pause(queue, endpoint, paused=True)
    emit(out, as_json, lambda o: typer.echo(f"paused {o['policy']['queue']}"))


@app.command("resume")
def queue_resume(queue: str = QueueArg, endpoint: str | None = EndpointOpt, user: str | None = UserOpt,
                 as_json: bool = JsonOpt) -> None:
    """Resume a paused queue (its limits, if any, apply again)."""
    out = backend(user).queue_pause(queue, endpoint, paused=False)
    emit(out, as_json, lambda o: typer.echo(f"resumed {o['policy']['queue']} ({o['policy']['status']})"))
