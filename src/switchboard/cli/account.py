"""Accounts: `switchboard user add|passwd|disable|enable|link|unlink` and `switchboard token create|list|revoke`.

Passwords come from a prompt on a terminal (asked twice) or from `--password-stdin`; an empty
password is refused (`user add --no-password` makes a dev-login-only user explicitly), and end of
input at the prompt is one line on stderr and exit 2. A password change or disabling a user ends
every Board session of that user; a token revocation takes effect at once in every serving process,
since every request checks the database. `user link` ties an OpenID Connect or GitHub identity to a
user, and `user passwd --clear` removes a password so that only linked identities sign in.
"""

from __future__ import annotations

import getpass
import sys

import typer
from rich.console import Console
from rich.table import Table

from .backend import backend
from .common import emit, fail_usage, run, settings

user_app = typer.Typer(no_args_is_help=True, help="Board accounts (always on this machine's database).")
token_app = typer.Typer(no_args_is_help=True, help="Human API tokens (sbh_…).")

console = Console()
UserOpt = typer.Option(None, "--user", help="Local-admin act: on this machine's database, act as this human without "
                                             "their credential (default: SWITCHBOARD_USER). Refused against a "
                                             "remote server, where the API token's human acts.")
JsonOpt = typer.Option(False, "--json", help="Print one JSON object.")
PasswordStdinOpt = typer.Option(False, "--password-stdin", help="Read the password from standard input.")


def read_password(password_stdin: bool) -> str:
    """The new password: one line of standard input, or asked twice on a terminal. Never empty."""
    if password_stdin:
        line = sys.stdin.readline()
        password = line.rstrip("\r\n") if line else ""
        if not password:
            fail_usage("no password on standard input (--password-stdin reads one line)")
        return password
    if not sys.stdin.isatty():
        fail_usage("standard input is not a terminal: give the password with --password-stdin")
    try:
        password = getpass.getpass("password: ")
        if not password:
            fail_usage("a password is required (at least 8 characters); "
                       "`user add --no-password` makes a dev-login-only user")
        again = getpass.getpass("password again: ")
    except (EOFError, KeyboardInterrupt):
        sys.stderr.write("\n")
        fail_usage("no password given (end of input)")
    if again != password:
        fail_usage("the two passwords differ")
    return password


# ------------------------------------------------------------------------------------------- users

@user_app.command("add")
def user_add(name: str, password_stdin: bool = PasswordStdinOpt,
             no_password: bool = typer.Option(False, "--no-password",
                                              help="No password: the user signs in only through the dev login."),
             as_json: bool = JsonOpt) -> None:
    """Create a Board account."""
    from ..core import humans

    if no_password and password_stdin:
        fail_usage("--no-password and --password-stdin exclude each other")
    settings()  # a configuration error is reported before any prompt
    password = None if no_password else read_password(password_stdin)

    async def work(core):
        return await humans.add(core, name, password)

    h = run(work)
    emit({"user": h.name, "id": str(h.human_id), "password": password is not None}, as_json,
         lambda o: typer.echo(f"created user {o['user']}"
                              + ("" if o["password"] else " (no password: dev login only)")))


@user_app.command("passwd")
def user_passwd(name: str, password_stdin: bool = PasswordStdinOpt,
                clear: bool = typer.Option(False, "--clear",
                                           help="Remove the password: the user signs in only with a linked "
                                                "OpenID Connect or GitHub identity."),
                as_json: bool = JsonOpt) -> None:
    """Set a user's password (or remove it with --clear); every Board session of that user ends."""
    from ..core import humans

    if clear and password_stdin:
        fail_usage("--clear and --password-stdin exclude each other")
    settings()
    if clear:
        _clear_password(name, as_json)
        return
    password = read_password(password_stdin)

    async def work(core):
        return await humans.set_password(core, await humans.by_name(core, name), password)

    ended = run(work)
    emit({"user": name, "sessions_ended": ended}, as_json,
         lambda o: typer.echo(f"password changed for {name}; {ended} Board session(s) ended"))


def _set_disabled(name: str, disabled: bool, as_json: bool) -> None:
    from ..core import humans

    async def work(core):
        return await humans.set_disabled(core, await humans.by_name(core, name), disabled)

    ended = run(work)
    if disabled:
        emit({"user": name, "disabled": True, "sessions_ended": ended}, as_json,
             lambda o: typer.echo(f"disabled {name}; {ended} Board session(s) ended"))
    else:
        emit({"user": name, "disabled": False}, as_json, lambda o: typer.echo(f"enabled {name}"))


@user_app.command("disable")
def user_disable(name: str, as_json: bool = JsonOpt) -> None:
    """Disable a user: no sign-in, every Board session ends, API tokens stop working (endpoints keep theirs)."""
    _set_disabled(name, True, as_json)


@user_app.command("enable")
def user_enable(name: str, as_json: bool = JsonOpt) -> None:
    """Enable a disabled user again (their unrevoked API tokens work again)."""
    _set_disabled(name, False, as_json)


def _clear_password(name: str, as_json: bool) -> None:
    from ..core import humans, identities

    async def work(core):
        return await identities.clear_password(core, await humans.by_name(core, name))

    ended = run(work)
    emit({"user": name, "password": False, "sessions_ended": ended}, as_json,
         lambda o: typer.echo(f"password removed for {name}; {ended} Board session(s) ended"))


@user_app.command("link")
def user_link(name: str,
              issuer: str = typer.Option(..., "--issuer", help="The provider's issuer: the OIDC issuer URL "
                                                              "exactly as in its ID tokens, or https://github.com."),
              subject: str = typer.Option(..., "--subject", help="The identity's subject at that issuer (for "
                                                                 "GitHub the numeric user id)."),
              as_json: bool = JsonOpt) -> None:
    """Link a sign-in identity (issuer and subject) to an existing user; signing in with it then signs in
    as that user. Works on the local database only."""
    from ..core import humans, identities

    settings()

    async def work(core):
        return await identities.link(core, await humans.by_name(core, name), issuer, subject)

    row = run(work)
    emit({"user": name, **row}, as_json,
         lambda o: typer.echo(f"linked {o['issuer']} subject {o['subject']} to {name}"))


@user_app.command("unlink")
def user_unlink(name: str,
                issuer: str = typer.Option(..., "--issuer", help="The identity's issuer."),
                subject: str = typer.Option(..., "--subject", help="The identity's subject at that issuer."),
                as_json: bool = JsonOpt) -> None:
    """Remove a sign-in identity from a user (their Board sessions stay until they end)."""
    from ..core import humans, identities
    from ..core.errors import NotFound

    settings()

    async def work(core):
        if not await identities.unlink(core, await humans.by_name(core, name), issuer, subject):
            raise NotFound(f"{name} has no identity with that issuer and subject", argument="subject")

    run(work)
    emit({"user": name, "issuer": issuer, "subject": subject, "unlinked": True}, as_json,
         lambda o: typer.echo(f"unlinked {issuer} subject {subject} from {name}"))


# ------------------------------------------------------------------------------------------ tokens

@token_app.command("create")
def token_create(scope: str | None = typer.Option(None, "--scope", help="write (default): everything you may do; "
                                                                        "read: only look."),
                 expires_in: int | None = typer.Option(None, "--expires-in", metavar="SECONDS",
                                                          help="The token stops working this long from now "
                                                               "(default never)."),
                 user: str | None = UserOpt, as_json: bool = JsonOpt) -> None:
    """Create a human API token (shown once) for the API, the remote CLI and the relay."""
    out = backend(user).token_create(scope=scope, expires_in_seconds=expires_in)
    emit(out, as_json, lambda o: typer.echo(f"{o['token']}\n(shown once; store it now)"))


@token_app.command("list")
def token_list(user: str | None = UserOpt, as_json: bool = JsonOpt) -> None:
    """List your API tokens (id, prefix, scope, created, expires, revoked), newest first."""
    out = backend(user).token_list()

    def text(o: dict) -> None:
        if not o["tokens"]:
            typer.echo("no tokens")
            return
        table = Table("id", "prefix", "scope", "created", "expires", "revoked")
        for t in o["tokens"]:
            table.add_row(t["id"], t["prefix"], t.get("scope") or "write", t["created_at"], t.get("expires_at") or "-",
                          t["revoked_at"] or "-")
        console.print(table)

    emit(out, as_json, text)


@token_app.command("revoke")
def token_revoke(token: str = typer.Argument(..., metavar="ID_OR_PREFIX", help="The token's id or its prefix."),
                 user: str | None = UserOpt, as_json: bool = JsonOpt) -> None:
    """Revoke one of your API tokens; every serving process refuses it from the next request."""
    out = backend(user).token_revoke(token)
    emit(out, as_json, lambda o: typer.echo(f"{'revoked' if o['revoked'] else 'already revoked'} "
                                            f"{o['token']['prefix']}… ({o['token']['id']})"))
