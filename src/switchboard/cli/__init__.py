"""The `switchboard` command (SYSTEM.md section 15). Every command is a thin call into the core, or
into a remote server's human API (`backend.py`, `remote.py`): each queue command is written once.

`--json` prints exactly one JSON object on stdout. Exit codes: 0 ok, 1 refused (not found, conflict,
invalid), 2 usage. Locally, commands that act on todos, endpoints and tokens act as one human
(`--user`, a local-admin act); against a server (`switchboard login`, or `SWITCHBOARD_URL` with
`SWITCHBOARD_TOKEN`) they act as the API token's human.
"""

from __future__ import annotations

import inspect
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from ..core.inputs import LIST_LIMIT_DEFAULT, OWNER_LIST_LIMIT_MAX, TEAM_PREFIX
from ..core.states import TODO_STATES
from ..relay import cli as relay_cli
from . import hook as hook_cli
from . import intake as intake_cli
from . import queue as queue_cli
from . import session as session_cli
from . import sink as sink_cli
from . import team as team_cli
from .account import token_app, user_app
from .backend import backend
from .common import EXIT_USAGE, emit, fail_usage, read_json_arg, settings, usage_error

HELP = ("Switchboard: a durable work queue for AI agents, spoken over MCP.\n\n"
        "Where commands act: after `switchboard login URL` (or with SWITCHBOARD_URL and SWITCHBOARD_TOKEN set), "
        "every queue command (endpoint, todo, team, queue, hook, sink, intake, settings, token, sweep) goes to that "
        "server's API over HTTP, acting as the token's human. Without a URL, commands work on this machine's "
        "database as its operator, acting for the human named by --user or SWITCHBOARD_USER (a local-admin act). "
        "serve, migrate and user always act on this machine's database: they bootstrap a server. relay always "
        "talks to a running server, with an endpoint's MCP URL and credential and an API token of its own "
        "(its flags, or SWITCHBOARD_URL, SWITCHBOARD_CREDENTIAL and SWITCHBOARD_API_TOKEN), and never opens the "
        "database.")

app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False, help=HELP)
endpoint_app = typer.Typer(no_args_is_help=True, help="Vend, list and revoke agent endpoints.")
todo_app = typer.Typer(no_args_is_help=True, help="Push, inspect and steer todos.")
settings_app = typer.Typer(no_args_is_help=True, help="Operator settings kept in the database.")
app.add_typer(user_app, name="user")
app.add_typer(token_app, name="token")
app.add_typer(endpoint_app, name="endpoint")
app.add_typer(todo_app, name="todo")
app.add_typer(settings_app, name="settings")

# Command groups that live beside their own feature (teams, admission, notify hooks, relay) plug in here.
app.add_typer(team_cli.app, name="team")
app.add_typer(queue_cli.app, name="queue")
app.add_typer(hook_cli.app, name="hook")
app.add_typer(sink_cli.app, name="sink")
app.add_typer(intake_cli.app, name="intake")
app.add_typer(relay_cli.app, name="relay")
session_cli.register(app)


def _unwrap_docstrings(group: typer.Typer) -> None:
    """Join each paragraph of every command's docstring into one line. The command lists show a
    command's first paragraph with its source line breaks kept, which cut a summary that spans two
    source lines in the middle of the list's column; the command's own page wraps either the same."""
    for info in group.registered_commands:
        doc = info.callback.__doc__ if info.callback is not None else None
        if doc:
            paragraphs = inspect.cleandoc(doc).split("\n\n")
            info.callback.__doc__ = "\n\n".join(" ".join(p.split()) for p in paragraphs)
    for sub in group.registered_groups:
        if sub.typer_instance is not None:
            _unwrap_docstrings(sub.typer_instance)


def _version(value: bool) -> None:
    if value:
        from .. import __version__

        typer.echo(f"switchboard {__version__}")
        raise typer.Exit()


@app.callback()
def _top(version: bool = typer.Option(False, "--version", is_eager=True, callback=_version,
                                      help="Print the version and exit.")) -> None:
    pass


console = Console()
UserOpt = typer.Option(None, "--user", help="Local-admin act: on this machine's database, act as this human without "
                                             "their credential (default: SWITCHBOARD_USER). Refused against a "
                                             "remote server, where the API token's human acts.")
JsonOpt = typer.Option(False, "--json", help="Print one JSON object.")


# ------------------------------------------------------------------------------------ serve, migrate

@app.command()
def serve(host: str | None = typer.Option(None, help="Listen address (SWITCHBOARD_HOST)."),
          port: int | None = typer.Option(None, help="Port (SWITCHBOARD_PORT).")) -> None:
    """Migrate, start the sweeps and serve HTTP: health, MCP, the Board and the APIs (on this machine's database)."""
    from ..web.server import serve as run_server

    cfg = settings()
    if host:
        cfg.host = host
    if port is not None:
        cfg.port = port
    run_server(cfg)


@app.command()
def migrate(target: int | None = typer.Option(None, "--to", help="Stop after this migration number."),
            as_json: bool = JsonOpt) -> None:
    """Apply pending database migrations (this machine's database, even with SWITCHBOARD_URL set)."""
    from ..db.database import Database

    async def work() -> list[str]:
        db = Database(settings())
        await db.start()
        try:
            return await db.migrate(target=target)
        finally:
            await db.stop()

    import asyncio

    import psycopg

    from ..db.migrate import MigrationError
    from .common import database_unreachable, fail

    try:
        applied = asyncio.run(work())
    except MigrationError as exc:
        fail("migration_failed", str(exc), 1)
    except psycopg.OperationalError as exc:
        database_unreachable(exc)
    emit({"applied": applied}, as_json,
         lambda o: typer.echo("applied: " + ", ".join(applied) if applied else "database is up to date"))


# --------------------------------------------------------------------------------------- endpoints

EXPIRES_IN_HELP = "Expire this many seconds from now (60 to 10 years); past it the sweep revokes it."


@endpoint_app.command("vend")
def endpoint_vend(agent: str = typer.Option(..., "--agent", help="The agent's name (created if new)."),
                  queue: list[str] = typer.Option(
                      [], "--queue",
                      help="Granted queue (repeatable; default inbox). A team queue is team:<team-slug>/<queue>: "
                           "a member's vend answers awaiting_grant for it, and the endpoint claims nothing there "
                           "until a team owner or admin grants it; an owner's or admin's vend is granted at once."),
                  verb: list[str] = typer.Option([], "--verb",
                                                help="Granted verb (repeatable; default the drain family)."),
                  lease_ttl: int | None = typer.Option(None, "--lease-ttl", help="Default lease, 60-86400 s."),
                  expires_in: int | None = typer.Option(None, "--expires-in", metavar="SECONDS", help=EXPIRES_IN_HELP),
                  user: str | None = UserOpt, as_json: bool = JsonOpt) -> None:
    """Vend an MCP endpoint (URL + credential shown once) for an agent.

    A team queue is named `--queue team:<team-slug>/<queue>`; you must be a member of the team (else
    not_found). An owner's or admin's vend is granted the team queue at once. A member's vend answers
    awaiting_grant with that queue: the endpoint claims nothing there until a team owner or admin grants
    it (`switchboard team grant <team-slug> <queue> <endpoint-slug>`)."""
    out = backend(user).endpoint_vend(agent=agent, queues=queue or None, verbs=verb or None, lease_ttl=lease_ttl,
                                      expires_in_seconds=expires_in)

    def text(o: dict) -> None:
        typer.echo(f"endpoint {o['slug']} for agent {o['agent']}\n  url:        {o['mcp_url']}\n"
                   f"  credential: {o['credential']}   (shown once)\n  queues:     {', '.join(o['queues'])}\n"
                   f"  verbs:      {', '.join(o['verbs'])}\n  expires:    {o.get('expires_at') or 'never'}")
        if o.get("awaiting_grant"):
            typer.echo(f"  awaiting a grant by a team owner or admin: {', '.join(o['awaiting_grant'])}")

    emit(out, as_json, text)


@endpoint_app.command("list")
def endpoint_list(user: str | None = UserOpt, as_json: bool = JsonOpt) -> None:
    """List your endpoints."""
    out = backend(user).endpoint_list()

    def text(o: dict) -> None:
        table = Table("slug", "agent", "queues", "verbs", "state", "last use")
        for e in o["endpoints"]:
            table.add_row(e["slug"], e["agent"], ",".join(e["queues"]), ",".join(e["verbs"]), e["state"],
                          e["last_used_at"] or "-")
        console.print(table)

    emit(out, as_json, text)


@endpoint_app.command("show")
def endpoint_show(slug: str, user: str | None = UserOpt, as_json: bool = JsonOpt) -> None:
    """Show one of your endpoints (never its credential, only its prefix)."""
    out = backend(user).endpoint_show(slug)

    def text(o: dict) -> None:
        e = o["endpoint"]
        typer.echo(f"endpoint {e['slug']} for agent {e['agent']}  {e['state']}\n  url:     {e['mcp_url']}\n"
                   f"  queues:  {', '.join(e['queues'])}\n  verbs:   {', '.join(e['verbs'])}\n"
                   f"  expires: {e.get('expires_at') or 'never'}\n  last use: {e.get('last_used_at') or '-'}")

    emit(out, as_json, text)


@endpoint_app.command("change")
def endpoint_change(slug: str,
                    expires_in: int | None = typer.Option(None, "--expires-in", metavar="SECONDS",
                                                          help=EXPIRES_IN_HELP),
                    no_expiry: bool = typer.Option(False, "--no-expiry", help="Never expire."),
                    lease_ttl: int | None = typer.Option(None, "--lease-ttl", metavar="SECONDS",
                                                         help="Default lease of its claims, 60-86400 s."),
                    server_lease: bool = typer.Option(False, "--server-lease",
                                                      help="Its claims take the server's default lease."),
                    user: str | None = UserOpt, as_json: bool = JsonOpt) -> None:
    """Change when one of your active endpoints expires, or its default lease (its credential, queues
    and verbs stay). What you leave out stays as it is; every serving process applies a new expiry at
    once."""
    fields: dict = {}
    for value, cleared, key, names in ((expires_in, no_expiry, "expires_in_seconds", "--expires-in or --no-expiry"),
                                       (lease_ttl, server_lease, "default_lease_ttl_seconds",
                                        "--lease-ttl or --server-lease")):
        if value is not None and cleared:
            fail_usage(f"give {names}, not both", argument=key)
        if value is not None or cleared:
            fields[key] = value
    if not fields:
        fail_usage("nothing to change: give --expires-in, --no-expiry, --lease-ttl or --server-lease")
    out = backend(user).endpoint_change(slug, **fields)

    def text(o: dict) -> None:
        e = o["endpoint"]
        lease = e.get("default_lease_ttl_seconds")
        typer.echo(f"endpoint {e['slug']} for agent {e['agent']}\n  expires: {e.get('expires_at') or 'never'}\n"
                   f"  default lease: {f'{lease} s' if lease else 'the server default'}")

    emit(out, as_json, text)


@endpoint_app.command("revoke")
def endpoint_revoke(slug: str, user: str | None = UserOpt, as_json: bool = JsonOpt) -> None:
    """Revoke an endpoint: its credential stops working and its live todos become dead letters."""
    out = backend(user).endpoint_revoke(slug)
    emit(out, as_json, lambda o: typer.echo(f"revoked {o['slug']}; {o['dead_lettered']} live todo(s) dead-lettered"))


# ------------------------------------------------------------------------------------------- todos

def _todo_line(t: dict) -> str:
    extra = " dead letter" if t.get("dead_letter") else ""
    return f"{t['id']}  {t['state']}{extra}  [{t['queue']}] {t['title']}  (attempt {t['attempt']}/{t['max_attempts']})"


@todo_app.command("push")
def todo_push(slug: str | None = typer.Argument(None, metavar="[SLUG]",
                                                help="The endpoint whose agents will drain it, or a team "
                                                     "queue team:<team-slug>/<queue>."),
              title: str | None = typer.Option(None, "--title", help="Required unless --from-file is given."),
              queue: str | None = typer.Option(None, "--queue", help="Required when the endpoint has several queues; "
                                                                     "a team queue is team:<team-slug>/<queue>."),
              payload: str | None = typer.Option(None, "--payload", help="JSON, @file or @- for stdin."),
              key: str | None = typer.Option(None, "--key", help="Idempotency key: a live duplicate is returned."),
              max_attempts: int | None = typer.Option(None, "--max-attempts", help="1-100 (default 5)."),
              assignee: str | None = typer.Option(None, "--assignee", help="Only this owner may claim it."),
              kind: str | None = typer.Option(None, "--kind", help="A label for the kind of work (free text, shown to "
                                                                     "agents and on the Board)."),
              from_file: str | None = typer.Option(
                  None, "--from-file",
                  help="Many todos: a JSON Lines file (- for stdin), one object a line with the fields above; "
                       "all lines are checked before any is pushed, in batches of 1,000."),
              team: str | None = typer.Option(None, "--team", help="With --from-file and no SLUG: the team whose "
                                                                   "queues the lines name (each line's queue)."),
              user: str | None = UserOpt, as_json: bool = JsonOpt) -> None:
    """Put a todo on an endpoint's queue (or many, with --from-file), or on a team queue: `todo push
    team:<team-slug>/<queue> --title T` (any member of the team may; or --queue team:<team-slug>/<queue>),
    or many on a team's queues: `todo push --team <team-slug> --from-file todos.jsonl`."""
    if slug is not None and slug.startswith(TEAM_PREFIX):
        # A team queue where the endpoint goes: the one-todo form, `todo push team:<team-slug>/<queue>`.
        if queue is not None or team is not None or from_file is not None:
            fail_usage(f"{slug} is a team queue, not an endpoint: push one todo with `todo push {slug} --title T`, "
                       "many with --team <team-slug> --from-file", argument="slug")
        slug, queue = None, slug
    if team is not None and (slug is not None or from_file is None):
        fail_usage("--team goes with --from-file and no SLUG (one todo on a team queue: --queue "
                   f"{TEAM_PREFIX}<team-slug>/<queue>)", argument="team")
    if slug is None and team is None and (queue is None or not queue.startswith(TEAM_PREFIX)
                                          or from_file is not None):
        fail_usage("name the endpoint (SLUG), push one todo to a team queue with --queue "
                   f"{TEAM_PREFIX}<team-slug>/<queue>, or many with --team <team-slug> --from-file",
                   argument="slug")
    if from_file is not None:
        _push_file(slug, team, from_file, user, as_json, title=title, queue=queue, payload=payload, key=key,
                   max_attempts=max_attempts, assignee=assignee, kind=kind)
        return
    if title is None:
        fail_usage("--title is required (or --from-file)", argument="title")
    body = read_json_arg(payload, "payload")
    if slug is None:
        assert queue is not None
        out = backend(user).team_push(queue, title=title, payload=body, kind=kind, key=key,
                                      max_attempts=max_attempts, assignee=assignee)
    else:
        out = backend(user).todo_push(slug, title=title, queue=queue, payload=body, kind=kind, key=key,
                                      max_attempts=max_attempts, assignee=assignee)
    emit(out, as_json, lambda o: typer.echo(("created " if o["created"] else "exists  ") + _todo_line(o["todo"])))


def _push_file(slug: str | None, team: str | None, path: str, user: str | None, as_json: bool,
               **single: object) -> None:
    from . import push_file

    given = sorted(k for k, v in single.items() if v is not None)
    if given:
        fail_usage(f"--from-file takes the todos' fields from the file, not --{given[0].replace('_', '-')}",
                   argument=given[0])
    lines = push_file.read_lines(path)
    be = backend(user)
    batches = push_file.batches([v for _, v in lines])
    if team is not None:
        replies = be.team_push_many(team, batches, lambda slug_: push_file.check(lines, [], team=slug_))
    else:
        assert slug is not None
        replies = be.todo_push_many(slug, batches, lambda queues: push_file.check(lines, queues))
    out = push_file.merge(replies)
    emit(out, as_json, lambda o: typer.echo(f"{o['created']} created, {o['existing']} existing"))


@todo_app.command("list")
def todo_list(slug: str | None = typer.Argument(None, help="Only this endpoint's todos."),
              state: str | None = typer.Option(None, "--state",
                                               help="Only this state: " + ", ".join(TODO_STATES) + "."),
              queue: str | None = typer.Option(None, "--queue"),
              team: str | None = typer.Option(None, "--team", help="Only this team's todos (its slug)."),
              dead_letter: bool = typer.Option(False, "--dead-letter", help="Only dead letters."),
              limit: int | None = typer.Option(
                  None, "--limit",
                  help=f"At most this many rows (default {LIST_LIMIT_DEFAULT}, at most {OWNER_LIST_LIMIT_MAX})."),
              user: str | None = UserOpt, as_json: bool = JsonOpt) -> None:
    """List the todos of your endpoints and of your teams, newest first."""
    out = backend(user).todo_list(slug, state=state, queue=queue, dead_letter=dead_letter, limit=limit, team=team)
    emit(out, as_json, _print_todos)


def _print_todos(o: dict) -> None:
    for t in o["todos"]:
        typer.echo(_todo_line(t))
    if not o["todos"]:
        typer.echo("no todos")


def _show_text(t: dict) -> None:
    typer.echo(_todo_line(t))
    owner = f"team {t['team']}" if t.get("team") else f"endpoint {t.get('endpoint')}"
    typer.echo(f"  {owner}  attempts {t['attempts_total']} (pruned {t['attempts_pruned']})")
    if t.get("lease_expires_at"):
        typer.echo(f"  lease until {t['lease_expires_at']} held by {t.get('owner')}")
    if t.get("next_retry_at"):
        typer.echo(f"  next retry at {t['next_retry_at']}")
    for a in t["attempts"]:
        died = "  DIED (no report)" if a["died"] else ""
        typer.echo(f"  #{a['seq']} attempt {a['attempt']} {a['claimer_kind']} {a['claimant'] or '-'}  "
                   f"{a['claimed_at']} -> {a['ended_at'] or 'open'}  "
                   f"{a['outcome'] or ''}/{a['disposition'] or ''}{died}")
        if a["summary"]:
            typer.echo(f"      summary: {a['summary']}" + (" [truncated]" if a["summary_truncated"] else ""))
        if a["artifact"]:
            typer.echo(f"      artifact: {a['artifact']}")
        for note in a.get("notes") or ([a["last_note"]] if a.get("last_note") else []):
            typer.echo(f"      note {note['at']}: {note['text']}")


@todo_app.command("show")
def todo_show(todo_id: str = typer.Argument(..., metavar="ID"), user: str | None = UserOpt,
              as_json: bool = JsonOpt) -> None:
    """Show a todo with every attempt (the owner's view)."""
    emit(backend(user).todo_show(todo_id), as_json, _show_text)


def _field_option(field) -> tuple[Any, object]:
    """The typer option of an owner-action field (core/actions.py): text as is, JSON as text, @file
    or @-, integers and booleans as typed flags."""
    flag = "--" + field.name.replace("_", "-")
    if field.kind == "boolean":
        return bool | None, typer.Option(None, f"{flag}/--no-{field.name.replace('_', '-')}", help=field.help)
    if field.kind == "integer":
        return int | None, typer.Option(None, flag, help=field.help)
    if field.kind == "json":
        help_text = field.help + " JSON, @file or @-."
        if field.required:
            return str, typer.Option(..., flag, help=help_text)
        return str | None, typer.Option(None, flag, help=help_text)
    return str | None, typer.Option(None, flag, help=field.help)


def _action_command(action) -> None:
    """`switchboard todo <action>`: one command per row of the owner-action table."""
    import inspect

    params = [inspect.Parameter("todo_id", inspect.Parameter.KEYWORD_ONLY, annotation=str,
                                default=typer.Argument(..., metavar="ID"))]
    for field in action.fields:
        kind, option = _field_option(field)
        params.append(inspect.Parameter(field.name, inspect.Parameter.KEYWORD_ONLY, annotation=kind, default=option))
    params += [inspect.Parameter("user", inspect.Parameter.KEYWORD_ONLY, annotation=str | None, default=UserOpt),
               inspect.Parameter("as_json", inspect.Parameter.KEYWORD_ONLY, annotation=bool, default=JsonOpt)]

    def command(**kw) -> None:
        todo_id, user, as_json = kw.pop("todo_id"), kw.pop("user"), kw.pop("as_json")
        fields = {}
        for field in action.fields:
            value = kw.get(field.name)
            if field.kind == "json":
                value = read_json_arg(value, field.name)
            if value is not None:
                fields[field.name] = value
        out = backend(user).todo_act(action.name, todo_id, fields)
        emit(out, as_json, lambda o: typer.echo(_todo_line(o["todo"])))

    command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]  # typer reads it
    command.__annotations__ = {p.name: p.annotation for p in params} | {"return": None}
    command.__doc__ = action.help
    command.__name__ = f"todo_{action.name}"
    todo_app.command(action.name)(command)


def _register_actions() -> None:
    from ..core.actions import ACTIONS

    for action in ACTIONS.values():
        _action_command(action)


_register_actions()


# ---------------------------------------------------------------------------------------- settings

@settings_app.command("get")
def settings_get(key: str | None = typer.Argument(None), as_json: bool = JsonOpt) -> None:
    """Show one setting, or all of them (on a remote server: admins only)."""
    emit(backend().settings_get(key), as_json, _print_settings)


def _print_settings(o: dict) -> None:
    for k, v in o.items():
        typer.echo(f"{k} = {v}")


@settings_app.command("set")
def settings_set(key: str, value: str, as_json: bool = JsonOpt) -> None:
    """Change a setting (on a remote server: admins only)."""
    emit(backend().settings_set(key, value), as_json, lambda o: typer.echo(f"{key} = {o[key]}"))


# ------------------------------------------------------------------------------------------- sweep

@app.command()
def sweep(once: bool = typer.Option(False, "--once", help="Run one pass and exit."),
          as_json: bool = typer.Option(False, "--json", help="Print one JSON object (the default).")) -> None:
    """Run the reaper, retry scheduler, endpoint expiry and retention once (on a remote server: admins only)."""
    if not once:
        fail_usage("the sweeps run inside `switchboard serve`; use --once for a single pass")
    emit(backend().sweep(), True)


def main() -> None:
    """Run the command; a usage error is one line on stderr and exit 2 (the contract of section 15)."""
    try:
        from typer._click.exceptions import ClickException, NoArgsIsHelpError
    except ImportError:  # pragma: no cover - a typer that does not vendor click
        from click.exceptions import ClickException, NoArgsIsHelpError  # type: ignore[assignment]  # click's own copies
    try:
        code = app(standalone_mode=False)
    except KeyboardInterrupt:
        raise SystemExit(130) from None
    except NoArgsIsHelpError as exc:  # a bare group: show its help
        exc.show()
        raise SystemExit(EXIT_USAGE) from None
    except ClickException as exc:
        usage_error(exc)  # one line on stderr, or one JSON object with --json
    raise SystemExit(code if isinstance(code, int) else 0)


_unwrap_docstrings(app)  # last: every command of this file is registered by now

__all__ = ["app", "main", "EXIT_USAGE"]
