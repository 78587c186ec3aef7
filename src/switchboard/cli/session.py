"""`switchboard login URL` and `switchboard logout`: point the CLI at a remote server's human API.

`login` takes an API token (`sbh_…`, made with `switchboard token create` or on the Board's account
page) pasted at a prompt, or one line of standard input with `--token-stdin`; it asks the server who
the token acts as (`GET /api/v1/me`) and only then saves the URL and token in the user config
directory, in a file only this user may read (0600). The token is never printed. `logout` removes
the file; the CLI then works on this machine's database again.
"""

from __future__ import annotations

import getpass
import sys

import typer

from . import remote
from .common import emit, fail_usage

JsonOpt = typer.Option(False, "--json", help="Print one JSON object.")


def _read_token(token_stdin: bool) -> str:
    if token_stdin:
        line = sys.stdin.readline()
        token = line.strip() if line else ""
        if not token:
            fail_usage("no token on standard input (--token-stdin reads one line)", argument="token")
        return token
    if not sys.stdin.isatty():
        fail_usage("standard input is not a terminal: give the token with --token-stdin", argument="token")
    try:
        token = getpass.getpass("API token (sbh_…): ").strip()
    except (EOFError, KeyboardInterrupt):
        sys.stderr.write("\n")
        fail_usage("no token given (end of input)", argument="token")
    if not token:
        fail_usage("an API token is required (make one with `switchboard token create`)", argument="token")
    return token


def login(url: str = typer.Argument(..., help="The server's base URL, e.g. https://switchboard.example.com."),
          token_stdin: bool = typer.Option(False, "--token-stdin", help="Read the token from standard input."),
          as_json: bool = JsonOpt) -> None:
    """Sign the CLI in to a server: queue commands then go to its API as the token's human."""
    base = remote.base_url(url)
    token = _read_token(token_stdin)
    me = remote.Client(remote.Server(base, token, "login")).get("/me")
    path = remote.write_login(base, token)
    out = {"url": base, "user": me.get("user"), "admin": bool(me.get("admin")),
           "scope": (me.get("token") or {}).get("scope"), "saved": str(path)}
    emit(out, as_json, lambda o: typer.echo(f"signed in to {o['url']} as {o['user']} "
                                            f"({o['scope']} token); saved in {o['saved']}"))


def logout(as_json: bool = JsonOpt) -> None:
    """Forget the saved server and token: commands act on this machine's database again."""
    path = remote.login_path()
    removed = remote.remove_login()
    emit({"removed": removed, "path": str(path)}, as_json,
         lambda o: typer.echo(f"signed out (removed {o['path']})" if o["removed"] else "not signed in"))


def register(app: typer.Typer) -> None:
    app.command("login")(login)
    app.command("logout")(logout)
