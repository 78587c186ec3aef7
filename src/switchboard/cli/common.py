"""What every command shares: running the core, printing one JSON object, exit codes 0/1/2.

Errors: one line `error: …` on stderr; with `--json`, one JSON object
`{"error": {"code", "message", "argument"?}}` on stdout instead. The exit code is the same either way.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from typing import Any, NoReturn

import psycopg
import typer

from ..config import ConfigError, load_settings

EXIT_OK, EXIT_REFUSED, EXIT_USAGE = 0, 1, 2


def _flags_show_no_type() -> None:
    """Typer's help shows every flag with a type, as if it took a value (`--json <bool>`, even
    `--help <bool>`). A flag takes none: show no type for it, in every command's help."""
    try:
        from typer.core import TyperOption
    except ImportError:  # pragma: no cover - another typer layout: its help is left as it is
        return
    shown = getattr(TyperOption, "display_type_rich", None)
    if shown is None or getattr(shown, "flags_show_no_type", False):
        return

    def display_type_rich(self, ctx):
        if getattr(self, "is_flag", False) and not getattr(self, "count", False) and self.metavar is None:
            return None
        return shown(self, ctx)

    # Typer has no option for this: its option class gets the patched printer, marked as patched.
    display_type_rich.flags_show_no_type = True  # type: ignore[attr-defined]  # a marker on a function
    TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign]  # the patch itself


_flags_show_no_type()


def json_requested() -> bool:
    """Whether the command line asked for `--json` (the parsed flag when a command is running;
    the raw arguments when parsing itself failed)."""
    try:
        from typer._click.globals import get_current_context as current
    except ImportError:  # pragma: no cover - a typer that does not vendor click
        from click import get_current_context as current  # type: ignore[no-redef]  # same function, click's own copy
    ctx = current(silent=True)
    while ctx is not None:
        if ctx.params.get("as_json"):
            return True
        ctx = ctx.parent
    args = sys.argv[1:]
    return "--json" in (args[: args.index("--")] if "--" in args else args)


def fail(code: str, message: str, exit_code: int, *, argument: str | None = None, line: str | None = None) -> NoReturn:
    """Report an error and exit: `error: <line or message>` on stderr, or with `--json` one JSON
    object on stdout."""
    if json_requested():
        error: dict[str, Any] = {"code": code, "message": message}
        if argument:
            error["argument"] = argument
        sys.stdout.write(json.dumps({"error": error}, ensure_ascii=False) + "\n")
        sys.stdout.flush()
    else:
        typer.echo(f"error: {printable(line or message)}", err=True)
    raise typer.Exit(exit_code)


def fail_usage(message: str, *, argument: str | None = None) -> NoReturn:
    fail("usage", message, EXIT_USAGE, argument=argument)


def usage_error(exc: Any) -> NoReturn:
    """A command-line parsing error (a click exception): exit 2, or the exception's own code."""
    message = " ".join(exc.format_message().split())
    where = f" (see '{exc.ctx.command_path} --help')" if getattr(exc, "ctx", None) else ""
    param = getattr(exc, "param", None)
    argument = getattr(param, "name", None) if param is not None else None
    code = exc.exit_code if exc.exit_code else EXIT_USAGE
    try:
        fail("usage", message, code, argument=argument, line=message + where)
    except typer.Exit as done:
        raise SystemExit(done.exit_code) from None


def settings():
    try:
        return load_settings()
    except ConfigError as exc:
        fail_usage(str(exc))


def run(work: Callable[..., Awaitable[Any]], *, migrate: bool = True) -> Any:
    """Open the core (embedded or external database), run `work(core)`, map core errors to exit 1."""
    from ..core.errors import CoreError
    from ..db.migrate import MigrationError
    from ..runtime import open_runtime

    cfg = settings()

    async def main() -> Any:
        # origin="cli": this process serves no /metrics, so its transitions are spooled for the
        # serving processes to count (core/metric_spool.py).
        async with open_runtime(cfg, migrate=migrate, min_size=1, max_size=4, origin="cli") as runtime:
            return await work(runtime.core)

    try:
        return asyncio.run(main())
    except CoreError as exc:
        fail(exc.code, exc.message, EXIT_REFUSED, argument=exc.argument, line=f"{exc.code}: {exc.message}")
    except MigrationError as exc:
        fail("migration_failed", str(exc), EXIT_REFUSED)
    except psycopg.OperationalError as exc:
        database_unreachable(exc)


def database_unreachable(exc: Exception) -> NoReturn:
    """The database could not be reached: one line on stderr, exit 1."""
    first = " ".join(str(exc).split("\n")[0].split())
    fail("unavailable", f"cannot reach the database: {first}", EXIT_REFUSED)


# ----------------------------------------------------------------------------------- text output
# What agents and other humans wrote (titles, summaries, agent names, hook URLs) reaches the
# operator's terminal. A terminal obeys escape sequences (set the window title, clear the screen,
# rewrite what was printed), so every human-readable printer gets its strings through `printable`.
# JSON output needs none of this: `json.dumps` escapes control characters already.

# C0 controls, DEL, C1 controls (0x9b is a one-byte CSI), and the bidirectional overrides and
# isolates that reorder what is shown.
_UNSAFE = frozenset([*range(0x00, 0x20), *range(0x7F, 0xA0), 0x200E, 0x200F, *range(0x202A, 0x202F),
                     *range(0x2066, 0x206A)])
MULTILINE_KEYS = frozenset({"summary"})  # fields whose line breaks are meant: kept (tabs too)


def printable(value: object, *, multiline: bool = False) -> str:
    """`value` as text safe for a terminal: each control character is shown as a visible escape
    (ESC as `\\x1b`), so no escape sequence can act. With `multiline`, newline and tab are kept."""
    text = value if isinstance(value, str) else str(value)
    if not any(ord(c) in _UNSAFE for c in text):
        return text
    out = []
    for c in text:
        n = ord(c)
        if n not in _UNSAFE or (multiline and c in "\n\t"):
            out.append(c)
        elif n < 0x100:
            out.append(f"\\x{n:02x}")
        else:
            out.append(f"\\u{n:04x}")
    return "".join(out)


def printable_obj(obj: Any, key: str | None = None) -> Any:
    """A copy of a JSON-like object with every string made `printable` (keys too)."""
    if isinstance(obj, str):
        return printable(obj, multiline=key in MULTILINE_KEYS)
    if isinstance(obj, dict):
        return {printable(k): printable_obj(v, k if isinstance(k, str) else None) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [printable_obj(v, key) for v in obj]
    return obj


def emit(obj: dict, as_json: bool, text: Callable[[dict], object] | None = None) -> None:
    """One JSON object on stdout, or the human-readable text of `text(obj)`, whose strings have been
    made `printable` first."""
    if as_json or text is None:
        sys.stdout.write(json.dumps(obj, default=str, ensure_ascii=False) + "\n")
    else:
        text(printable_obj(obj))


def user_name(user: str | None) -> str:
    name = user or settings().user
    if not name:
        fail_usage("name the acting user with --user NAME or SWITCHBOARD_USER", argument="user")
    return name


async def human(core, user: str | None):
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
            fail_usage(f"--{argument}: cannot read {value[1:]}: {exc.strerror}", argument=argument)
    try:
        return json.loads(value)
    except json.JSONDecodeError as exc:
        fail_usage(f"--{argument} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}",
                   argument=argument)
