"""`switchboard relay …`: run an epic of tasks through Switchboard with the attempt ledger.

Every command talks to a running server as two identities: the endpoint's MCP URL and credential (to
drain) and a human API token (to push and steer), from flags or SWITCHBOARD_URL, SWITCHBOARD_CREDENTIAL and
SWITCHBOARD_API_TOKEN. They are checked before anything else happens. Exit codes: 0 done, 1 refused or
stopped with gated tasks left, 2 usage or connection settings, 130 interrupted.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from .client import CREDENTIAL_ENV, TOKEN_ENV, URL_ENV, Connection, RelayError, Server, connection_from
from .epic import Epic, EpicError, load, parse_command

app = typer.Typer(no_args_is_help=True, add_completion=False,
                  help="Run an epic of tasks through Switchboard with the attempt ledger (docs/relay.md).")

UrlOpt = typer.Option(None, "--url", envvar=URL_ENV, show_envvar=True,
                      help="The endpoint's MCP URL (…/mcp/<slug>), as `switchboard endpoint vend` prints it.")
TokenOpt = typer.Option(None, "--api-token", envvar=TOKEN_ENV, show_envvar=True,
                        help="A human API token (sbh_…) of the endpoint's owner.")
CredentialOpt = typer.Option(None, "--credential", envvar=CREDENTIAL_ENV, show_envvar=True,
                             help="The endpoint credential (sbk_…).")
EpicOpt = typer.Option(Path("epic.yml"), "--epic", "-e", help="The epic file.")
LedgerOpt = typer.Option(None, "--ledger", help="Where the ledger view goes (default: attempt-ledger.yml beside "
                                                "the epic).")
JsonOpt = typer.Option(False, "--json", help="Print one JSON object.")



def _console() -> Console:
    """Rich output; when it goes to a file or a pipe, wide enough that table rows stay on one line."""
    console = Console()
    return console if console.is_terminal else Console(width=160)


def _fail(message: str, code: int) -> None:
    from ..cli.common import printable

    typer.echo(f"error: {printable(message)}", err=True)
    raise typer.Exit(code)


def _epic(path: Path) -> Epic:
    try:
        return load(path)
    except EpicError as exc:
        if len(exc.problems) == 1:
            _fail(f"{exc.path}: {exc.problems[0]}", 1)
        typer.echo(f"error: {exc.path} is not a usable epic:", err=True)
        for problem in exc.problems:
            typer.echo(f"  - {problem}", err=True)
        raise typer.Exit(1) from None


def _connection(url: str | None, token: str | None, credential: str | None) -> Connection:
    try:
        return connection_from(url, token, credential)
    except RelayError as exc:
        _fail(exc.message, exc.exit_code)
        raise  # unreachable


def _ledger_path(epic: Epic, ledger: Path | None) -> Path:
    return ledger if ledger is not None else epic.directory / "attempt-ledger.yml"


def _run(conn: Connection, work: Callable[[Server], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        async with Server(conn) as server:
            return await work(server)

    try:
        return asyncio.run(main())
    except RelayError as exc:
        _fail(exc.message, exc.exit_code)


def _emit(obj: dict, as_json: bool, text: Callable[[dict], None]) -> None:
    if as_json:
        sys.stdout.write(json.dumps(obj, ensure_ascii=False, default=str) + "\n")
    else:
        from ..cli.common import printable_obj  # here: the `switchboard` command imports this module

        text(printable_obj(obj))  # no control character from a task or an agent reaches the terminal


# -------------------------------------------------------------------------------------------- init

@app.command()
def init(epic_file: Path = typer.Argument(..., metavar="EPIC.yml", help="The epic to record."),
         ledger: Path | None = LedgerOpt, url: str | None = UrlOpt, api_token: str | None = TokenOpt,
         credential: str | None = CredentialOpt, as_json: bool = JsonOpt) -> None:
    """Validate the epic, record it on the server and write attempt-ledger.yml beside it."""
    from . import ledger as view
    from .state import ensure_record, load_state

    epic = _epic(epic_file)
    conn = _connection(url, api_token, credential)
    path = _ledger_path(epic, ledger)

    async def work(server: Server) -> dict:
        record, created = await ensure_record(server, epic)
        state = await load_state(server, epic)
        views = view.task_views(epic, state)
        view.write(path, view.document(epic, state, views))
        return {"epic_id": epic.id, "record": record["id"], "created": created, "tasks": epic.order,
                "queue": epic.queue, "ledger": str(path), "task_status": {t: v.status for t, v in views.items()}}

    out = _run(conn, work)
    _emit(out, as_json, lambda o: typer.echo(
        f"{'recorded' if o['created'] else 'already recorded'} epic {o['epic_id']} ({len(o['tasks'])} tasks: "
        f"{', '.join(o['tasks'])}) on queue {o['queue']} as {o['record']}\nwrote {o['ledger']}"))


# -------------------------------------------------------------------------------------------- work

@app.command()
def work(epic_file: Path = EpicOpt,
         workers: int = typer.Option(1, "--workers", "-w", min=1, max=32,
                                     help="Run up to N tasks at once where dependencies allow."),
         once: bool = typer.Option(False, "--once", help="Run one attempt, then stop."),
         worker: str | None = typer.Option(None, "--worker", help="Worker command template for every task "
                                              "(overrides the epic's), e.g. 'python3 do.py {task_id}'."),
         gate: str | None = typer.Option(None, "--gate", help="Quality gate command run after each success; "
                                            "non-zero gates the task (quality_gate_blocked)."),
         timeout_minutes: float | None = typer.Option(None, "--timeout-minutes", min=0.001,
                                                         help="Kill a worker after this long (default: the "
                                                              "epic's timeout_minutes, 15)."),
         lease_ttl: int | None = typer.Option(None, "--lease-ttl", min=1, max=86400,
                                                 help="Lease seconds per claim (default: the epic's, 300)."),
         ledger: Path | None = LedgerOpt, url: str | None = UrlOpt, api_token: str | None = TokenOpt,
         credential: str | None = CredentialOpt) -> None:
    """Push runnable tasks, claim them and run a worker per attempt until the epic is done or stuck."""
    from .display import Display
    from .loop import Options, Relay

    epic = _epic(epic_file)
    try:
        opts = Options(workers=workers, once=once, timeout_minutes=timeout_minutes, lease_ttl_seconds=lease_ttl,
                       worker=parse_command(worker, "--worker") if worker else None,
                       gate=parse_command(gate, "--gate") if gate else None)
    except EpicError as exc:
        _fail(f"{exc.path}: {'; '.join(exc.problems)}", 2)
    conn = _connection(url, api_token, credential)
    path = _ledger_path(epic, ledger)
    console = _console()

    async def run(server: Server) -> int:
        with Display(console, f"epic {epic.id}: {epic.title}") as display:
            return await Relay(server, epic, path, opts, display).run()

    code = _run(conn, run)
    raise typer.Exit(code)


# ------------------------------------------------------------------------------------------ status

@app.command()
def status(epic_file: Path = EpicOpt, url: str | None = UrlOpt, api_token: str | None = TokenOpt,
           credential: str | None = CredentialOpt, as_json: bool = JsonOpt) -> None:
    """The epic's progress from the server: each task's status and attempts (died attempts marked)."""
    from .display import attempts_line, note, task_table
    from .ledger import counts, document, task_views
    from .state import load_state

    epic = _epic(epic_file)
    conn = _connection(url, api_token, credential)

    async def work(server: Server) -> dict:
        state = await load_state(server, epic)
        views = task_views(epic, state)
        doc = document(epic, state, views)
        tasks = []
        for tid, v in views.items():
            tasks.append({
                "id": tid, "title": v.title, "status": v.status, "todo": v.todo["id"] if v.todo else None,
                "attempt": v.attempt_number if v.todo else None, "max_attempts": v.max_attempts,
                "retry_at": v.retry_at, "gate": v.gate, "waiting_on": v.waiting_on, "died": v.died,
                "attempts": [{k: e.get(k) for k in ("id", "todo", "seq", "number", "result", "died", "claimant",
                                                    "started_at", "ended_at")}
                             | {"error_category": (e.get("receipt") or {}).get("error_category")}
                             for e in doc["attempts"].get(tid, [])],
                "line": attempts_line(v), "note": note(v)})
        return {"epic_id": epic.id, "title": epic.title, "queue": epic.queue, "started_at": doc["started_at"],
                "ended_at": doc["ended_at"], "counts": counts(views),
                "complete": all(v.status == "completed" for v in views.values()), "tasks": tasks,
                "_views": views}

    out = _run(conn, work)
    views = out.pop("_views")

    def text(o: dict) -> None:
        _console().print(task_table(views, title=f"epic {o['epic_id']}: {o['title']}"))

    _emit(out, as_json, text)


# ------------------------------------------------------------------------------------------ ledger

@app.command("ledger")
def ledger_cmd(epic_file: Path = EpicOpt, ledger: Path | None = LedgerOpt, url: str | None = UrlOpt,
               api_token: str | None = TokenOpt, credential: str | None = CredentialOpt,
               as_json: bool = JsonOpt) -> None:
    """Rewrite attempt-ledger.yml from the server's attempt history (the file is only a view)."""
    from . import ledger as view
    from .state import load_state

    epic = _epic(epic_file)
    conn = _connection(url, api_token, credential)
    path = _ledger_path(epic, ledger)

    async def work(server: Server) -> dict:
        state = await load_state(server, epic)
        views = view.task_views(epic, state)
        doc = view.document(epic, state, views)
        view.write(path, doc)
        return {"ledger": str(path), "task_status": doc["task_status"],
                "attempts": sum(len(v) for v in doc["attempts"].values()), "gated_tasks": doc["gated_tasks"]}

    out = _run(conn, work)
    _emit(out, as_json, lambda o: typer.echo(f"wrote {o['ledger']}: {o['attempts']} attempts over "
                                             f"{len(o['task_status'])} tasks"))


# --------------------------------------------------------------------------------- block, unblock

@app.command()
def block(task: str = typer.Argument(..., metavar="TASK"), epic_file: Path = EpicOpt,
          reason: str | None = typer.Option(None, "--reason", help="Recorded with the gate."),
          url: str | None = UrlOpt, api_token: str | None = TokenOpt, credential: str | None = CredentialOpt,
          as_json: bool = JsonOpt) -> None:
    """Gate a task by hand (user_blocked): it is not tried again until unblocked."""
    from .manual import block as do_block

    epic = _epic(epic_file)
    conn = _connection(url, api_token, credential)
    out = _run(conn, lambda server: do_block(server, epic, task, reason))
    _emit(out, as_json, lambda o: typer.echo(f"{o['task']} gated: user_blocked ({o['todo']}, {o['how']})"))


@app.command()
def unblock(task: str = typer.Argument(..., metavar="TASK"), epic_file: Path = EpicOpt,
            url: str | None = UrlOpt, api_token: str | None = TokenOpt,
            credential: str | None = CredentialOpt, as_json: bool = JsonOpt) -> None:
    """Lift a task's gate: the owner's manual retry (fresh attempt budget, history kept)."""
    from .manual import unblock as do_unblock

    epic = _epic(epic_file)
    conn = _connection(url, api_token, credential)
    out = _run(conn, lambda server: do_unblock(server, epic, task))
    _emit(out, as_json, lambda o: typer.echo(f"{o['task']} unblocked (was {o['was']}): {o['how']} ({o['todo']})"))
