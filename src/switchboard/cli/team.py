"""`switchboard team create|list|show|add|remove|role|leave|delete|grant|ungrant`: teams of humans and
their queues (SYSTEM.md section 15, issue 13).

A team queue is named `team:<team-slug>/<queue>` wherever a queue is named (`endpoint vend --queue`,
`todo push --queue`, `queue policy …`). Roles: a `member` sees and acts on the team's todos; an
`admin` also manages members and grants; an `owner` also manages owners and deletes the team. A team
the human does not belong to is `not_found`, the same answer as one that does not exist. Every
command works on this machine's database (as `--user`) and against a server (as the token's human).
"""

from __future__ import annotations

import typer

from .backend import backend
from .common import emit

app = typer.Typer(no_args_is_help=True, help="Teams: members with roles, team queues and their grants to endpoints.")
UserOpt = typer.Option(None, "--user", help="Local-admin act: on this machine's database, act as this human without "
                                             "their credential (default: SWITCHBOARD_USER). Refused against a "
                                             "remote server, where the API token's human acts.")
JsonOpt = typer.Option(False, "--json", help="Print one JSON object.")
SlugArg = typer.Argument(..., metavar="SLUG", help="The team's slug.")
HumanArg = typer.Argument(..., metavar="HUMAN", help="A human's user name.")


def _handed_back(o: dict) -> str:
    n = o.get("leases_handed_back", 0)
    return f"; {n} lease(s) handed back to the queue" if n else ""


@app.command("create")
def team_create(slug: str = SlugArg,
                name: str | None = typer.Option(None, "--name", help="A display name (default: the slug)."),
                user: str | None = UserOpt, as_json: bool = JsonOpt) -> None:
    """Create a team (slug: 1-32 lower-case letters, digits or -); you are its first owner."""
    out = backend(user).team_create(slug, name=name)
    emit(out, as_json, lambda o: typer.echo(f"created team {o['team']['slug']} ({o['team']['name']}); "
                                            f"you are its {o['team'].get('role') or 'owner'}"))


@app.command("list")
def team_list(user: str | None = UserOpt, as_json: bool = JsonOpt) -> None:
    """List the teams you belong to, with your role."""
    out = backend(user).team_list()

    def text(o: dict) -> None:
        if not o["teams"]:
            typer.echo("no teams")
        for t in o["teams"]:
            typer.echo(f"{t['slug']}  {t['name']}  role {t['role']}  members {t['members']}")

    emit(out, as_json, text)


def _show_text(o: dict) -> None:
    t = o["team"]
    typer.echo(f"team {t['slug']} ({t['name']})  your role: {t['role']}  created {t['created_at']}")
    typer.echo("members:")
    for m in t["members"]:
        typer.echo(f"  {m['name']}  {m['role']}  since {m['added_at']}")
    typer.echo("queues:" if t["queues"] else "queues: none yet")
    for q in t["queues"]:
        typer.echo(f"  {q['queue']}  pending {q['pending']}  in flight {q['in_flight']}  "
                   f"retry scheduled {q['parked']}  dead letters {q['dead']}")
    typer.echo("grants:" if t["grants"] else "grants: none")
    for g in t["grants"]:
        state = "reaches" if g["reaches"] else "does not reach (not a member, or revoked)"
        typer.echo(f"  {g['queue']} -> endpoint {g['endpoint']} (agent {g['agent']} of {g['human']})  {state}")


@app.command("show")
def team_show(slug: str = SlugArg, user: str | None = UserOpt, as_json: bool = JsonOpt) -> None:
    """Show a team: members and roles, its queues with counts, and their grants."""
    emit(backend(user).team_show(slug), as_json, _show_text)


@app.command("add")
def team_add(slug: str = SlugArg, name: str = HumanArg,
             role: str | None = typer.Option(None, "--role", help="owner, admin or member (default member; "
                                                                   "only an owner adds an owner)."),
             user: str | None = UserOpt, as_json: bool = JsonOpt) -> None:
    """Add a human to a team (owners and admins)."""
    out = backend(user).team_add(slug, name, role=role)
    emit(out, as_json, lambda o: typer.echo(f"added {o['human']} to {o['team']} as {o['role']}"))


@app.command("remove")
def team_remove(slug: str = SlugArg, name: str = HumanArg, user: str | None = UserOpt,
                as_json: bool = JsonOpt) -> None:
    """Remove a member (owners and admins; an owner only by an owner; the last owner stays). Their
    endpoints lose the team's queues at once and hand back the team todos they hold."""
    out = backend(user).team_remove(slug, name)
    emit(out, as_json, lambda o: typer.echo(f"removed {o['human']} from {o['team']}{_handed_back(o)}"))


@app.command("role")
def team_role(slug: str = SlugArg, name: str = HumanArg,
              role: str = typer.Argument(..., metavar="ROLE", help="owner, admin or member."),
              user: str | None = UserOpt, as_json: bool = JsonOpt) -> None:
    """Change a member's role (owners and admins; making or unmaking an owner takes an owner)."""
    out = backend(user).team_role(slug, name, role)
    emit(out, as_json, lambda o: typer.echo(f"{o['human']} is now {o['role']} of {o['team']}"))


@app.command("leave")
def team_leave(slug: str = SlugArg, user: str | None = UserOpt, as_json: bool = JsonOpt) -> None:
    """Leave a team (the last owner cannot: make another member owner first, or delete the team)."""
    out = backend(user).team_leave(slug)
    emit(out, as_json, lambda o: typer.echo(f"left {o['team']}{_handed_back(o)}"))


@app.command("delete")
def team_delete(slug: str = SlugArg, user: str | None = UserOpt, as_json: bool = JsonOpt) -> None:
    """Delete a team with its todos, their attempts, grants and policies (owners only)."""
    out = backend(user).team_delete(slug)
    emit(out, as_json, lambda o: typer.echo(f"deleted team {o['team']}"))


QueueArg = typer.Argument(..., metavar="QUEUE", help="The team queue: its name, or its label team:<slug>/<queue>.")
EndpointArg = typer.Argument(..., metavar="ENDPOINT", help="The endpoint's slug (a member's).")


@app.command("grant")
def team_grant(slug: str = SlugArg, queue: str = QueueArg, endpoint: str = EndpointArg,
               user: str | None = UserOpt, as_json: bool = JsonOpt) -> None:
    """Grant a team queue to a member's endpoint (owners and admins): its agent may claim there."""
    out = backend(user).team_grant(slug, queue, endpoint)
    emit(out, as_json, lambda o: typer.echo(f"granted {o['queue']} to endpoint {o['endpoint']}"))


@app.command("ungrant")
def team_ungrant(slug: str = SlugArg, queue: str = QueueArg, endpoint: str = EndpointArg,
                 user: str | None = UserOpt, as_json: bool = JsonOpt) -> None:
    """Take a team queue back from an endpoint (owners and admins); the todos it holds there go back
    to the queue."""
    out = backend(user).team_ungrant(slug, queue, endpoint)
    emit(out, as_json, lambda o: typer.echo(f"took {o['queue']} back from endpoint {o['endpoint']}"
                                            f"{_handed_back(o)}"))
