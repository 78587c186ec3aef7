"""What every command shares: running the core, printing one JSON object, exit codes 0/1/2."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any, Awaitable, Callable

import psycopg
import typer

from ..config import ConfigError, load_settings

EXIT_OK, EXIT_REFUSED, EXIT_USAGE = 0, 1, 2


def fail_usage(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(EXIT_USAGE)


def settings():
    try:
        return load_settings()
    except ConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(EXIT_USAGE) from None


def run(work: Callable[..., Awaitable[Any]], *, migrate: bool = True) -> Any:
    """Open the core (embedded or external database), run `work(core)`, map core errors to exit 1."""
    from ..core.errors import CoreError
    from ..db.database import open_core
    from ..db.migrate import MigrationError

    cfg = settings()

    async def main() -> Any:
        async with open_core(cfg, run_migrations=migrate, min_size=1, max_size=4) as core:
            return await work(core)

    try:
        return asyncio.run(main())
    except CoreError as exc:
        typer.echo(f"error: {exc.code}: {exc.message}", err=True)
        raise typer.Exit(EXIT_REFUSED) from None
    except MigrationError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(EXIT_REFUSED) from None
    except psycopg.OperationalError as exc:
        database_unreachable(exc)


def database_unreachable(exc: Exception) -> None:
    """The database could not be reached: one line on stderr, exit 1."""
    first = " ".join(str(exc).split("\n")[0].split())
    typer.echo(f"error: cannot reach the database: {first}", err=True)
    raise typer.Exit(EXIT_REFUSED)


def emit(obj: dict, as_json: bool, text: Callable[[dict], None] | None = None) -> None:
    if as_json or text is None:
        sys.stdout.write(json.dumps(obj, default=str, ensure_ascii=False) + "\n")
    else:
        text(obj)


def user_name(user: str | None) -> str:
    name = user or settings().user
    if not name:
        fail_usage("name the acting user with --user NAME or SWITCHBOARD_USER")
    return name  # type: ignore[return-value]


async def human(core, user: str | None):  # noqa: ANN001
    from ..core import humans

    return await humans.by_name(core, user_name(user))


def read_json_arg(value: str | None, argument: str) -> Any:
    """JSON text, `@file`, or `@-` for standard input."""
    if value is None:
        return None
    if value == "@-":
        value = sys.stdin.read()
    elif value.startswith("@"):
        try:
            with open(value[1:], encoding="utf-8") as fh:
                value = fh.read()
        except OSError as exc:
            fail_usage(f"--{argument}: cannot read {value[1:]}: {exc.strerror}")
    try:
        return json.loads(value)
    except json.JSONDecodeError as exc:
        fail_usage(f"--{argument} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}")
