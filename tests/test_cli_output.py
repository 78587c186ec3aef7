"""What the `switchboard` command prints: no terminal escape from an agent reaches the operator's
terminal, `--json` errors are one JSON object on stdout, flags show as flags in the help, and
`--version` answers. The real console script as a subprocess against a test database."""

from __future__ import annotations

import io
import json
import uuid

import pytest
from rich.console import Console

from switchboard import __version__
from switchboard.core import todos
from switchboard.relay.display import Display, task_table
from switchboard.relay.ledger import TaskView
from test_cli import _core, _user_core, cli_env, ok_json, sb  # noqa: F401 - cli_env is a fixture

# Sets the window title, clears the screen, then a one-byte CSI (C1) and a right-to-left override.
HOSTILE = "\x1b]0;PWNED\x07\x1b[2J\x1b[1;1Hall good\x9b31m\u202egnp.exe"


def assert_inert(text: str) -> None:
    for c in ("\x1b", "\x07", "\x9b", "\u202e"):
        assert c not in text, repr(text)


def test_an_agents_summary_cannot_drive_the_operators_terminal(cli_env):
    env, ep, caller = _user_core(cli_env)
    todo = ok_json(env, "todo", "push", ep["slug"], "--title", "Fix the login test")["todo"]

    async def report(core):
        await todos.claim(core, caller, todo["id"])
        await todos.fail(core, caller, todo["id"], summary=HOSTILE + "\nsecond line", result={})
    _core(env, report)

    shown = sb(env, "todo", "show", todo["id"])
    assert shown.returncode == 0, shown.stderr
    assert_inert(shown.stdout)
    assert "\\x1b]0;PWNED\\x07\\x1b[2J" in shown.stdout  # shown, visibly, not obeyed
    assert "second line" in shown.stdout  # a summary's own line breaks are kept
    listed = sb(env, "todo", "list")
    assert listed.returncode == 0 and todo["id"] in listed.stdout
    assert_inert(listed.stdout)

    # JSON output is unchanged: the exact text, escaped by JSON itself.
    raw = sb(env, "todo", "show", todo["id"], "--json")
    assert "\x1b" not in raw.stdout and "\x07" not in raw.stdout
    got = json.loads(raw.stdout)
    assert got["attempts"][0]["summary"] == HOSTILE + "\nsecond line"


def test_endpoint_list_and_errors_are_inert(cli_env):
    env, ep, _ = _user_core(cli_env)
    listed = sb(env, "endpoint", "list")
    assert listed.returncode == 0 and ep["slug"] in listed.stdout
    # An error that repeats what was typed repeats it inert.
    bad = sb(env, "todo", "show", "td_" + HOSTILE)
    assert bad.returncode == 1
    assert_inert(bad.stderr)


def test_the_relay_table_and_event_lines_are_inert():
    views = {"t1": TaskView(id="t1", title=HOSTILE, status="blocked", waiting_on=[HOSTILE],
                            gate={"reason": HOSTILE})}
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, color_system=None, width=200)
    console.print(task_table(views, title="epic " + HOSTILE))
    with Display(Console(file=out, force_terminal=False, width=200), "epic") as display:
        display.event("claimed t1: " + HOSTILE)
    assert_inert(out.getvalue())
    assert "PWNED" in out.getvalue()


# ------------------------------------------------------------------------------------ --json errors

def json_error(env: dict, *args: str, code: int, stdin: str | None = None) -> dict:
    run = sb(env, *args, stdin=stdin)
    assert run.returncode == code, (args, run.returncode, run.stdout, run.stderr)
    lines = run.stdout.splitlines()
    assert len(lines) == 1, run.stdout  # exactly one JSON object on stdout
    obj = json.loads(lines[0])
    assert list(obj) == ["error"] and {"code", "message"} <= set(obj["error"]), obj
    return obj["error"]


def test_json_errors_are_one_object_on_stdout_with_the_same_exit_codes(cli_env):
    env, ep, _ = _user_core(cli_env)
    unknown = json_error(env, "todo", "show", f"td_{uuid.uuid4()}", "--json", code=1)
    assert unknown["code"] == "not_found"
    bad_payload = json_error(env, "todo", "push", ep["slug"], "--title", "t", "--payload", "{not json", "--json",
                             code=2)
    assert bad_payload["code"] == "usage" and bad_payload["argument"] == "payload"
    invalid = json_error(env, "todo", "push", ep["slug"], "--title", "t", "--max-attempts", "0", "--json", code=1)
    assert invalid["code"] == "invalid" and invalid["argument"] == "max_attempts"
    conflict = json_error(env, "endpoint", "revoke", "no-such-slug", "--json", code=1)
    assert conflict["code"] == "not_found"
    missing = json_error(env, "todo", "push", "--json", code=2)  # a usage error found while parsing
    assert missing["code"] == "usage" and "slug" in missing["message"]
    not_int = json_error(env, "todo", "push", ep["slug"], "--title", "t", "--max-attempts", "many", "--json",
                         code=2)
    assert not_int["argument"] == "max_attempts"
    no_user = json_error(dict(cli_env), "todo", "list", "--json", code=2)
    assert no_user["argument"] == "user"
    hook = json_error(env, "hook", "add", ep["slug"], "--url", "https://h.example.com/\r\nx", "--json", code=1)
    assert hook["code"] == "invalid" and hook["argument"] == "url"
    # Without --json: one line on stderr, nothing on stdout, as before.
    plain = sb(env, "todo", "show", f"td_{uuid.uuid4()}")
    assert plain.returncode == 1 and plain.stdout == "" and plain.stderr.startswith("error: not_found")


# --------------------------------------------------------------------------------------- help, version

@pytest.mark.parametrize("command", [(), ("todo", "list"), ("todo", "push"), ("hook", "list"), ("sweep",),
                                     ("user", "add"), ("relay", "status")])
def test_flags_show_as_flags_in_the_help(cli_env, command):
    run = sb(cli_env, *command, "--help")
    assert run.returncode == 0, run.stderr
    assert "--help" in run.stdout and "<bool>" not in run.stdout, run.stdout


def test_command_lists_show_each_summary_unbroken():
    """A group's command list shows each command's first paragraph with its line breaks kept: a
    docstring wrapped in the source cut its summary mid-column (`todo push`, `team remove`)."""
    import typer

    from switchboard.cli import app

    def walk(command, path):
        for name, sub in getattr(command, "commands", {}).items():
            yield from walk(sub, (*path, name))
        if not getattr(command, "commands", None):
            yield path, command

    commands = list(walk(typer.main.get_command(app), ()))
    assert len(commands) > 50
    for path, command in commands:
        for paragraph in (command.help or "").split("\n\n"):
            assert "\n" not in paragraph, (path, paragraph)


def test_version_and_kind_help(cli_env):
    run = sb(cli_env, "--version")
    assert run.returncode == 0 and run.stdout.strip() == f"switchboard {__version__}"
    push = sb(cli_env, "todo", "push", "--help")
    line = next(line for line in push.stdout.splitlines() if "--kind" in line)
    assert "kind of work" in line


def test_the_relay_commands_text_output_is_inert(capsys):
    from switchboard.relay import cli as relay_cli

    relay_cli._emit({"task": "t1", "how": HOSTILE}, False, lambda o: print(f"{o['task']} gated ({o['how']})"))
    out = capsys.readouterr().out
    assert_inert(out)
    assert "\\x1b]0;PWNED" in out


@pytest.mark.parametrize("module", ["switchboard.relay.cli", "switchboard.relay.display", "switchboard.relay.loop",
                                    "switchboard.cli"])
def test_each_module_imports_first_without_a_cycle(module):
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr[-2000:]


def test_todo_show_prints_each_attempts_progress_notes(cli_env):
    env, ep, caller = _user_core(cli_env)
    todo = ok_json(env, "todo", "push", ep["slug"], "--title", "Resize the images")["todo"]

    async def work(core):
        await todos.claim(core, caller, todo["id"])
        await todos.heartbeat(core, caller, todo["id"], note="resized 40 of 120 images")
        await todos.heartbeat(core, caller, todo["id"], note="resized 80 of 120 images")
    _core(env, work)

    shown = sb(env, "todo", "show", todo["id"])
    assert shown.returncode == 0, shown.stderr
    lines = [line.strip() for line in shown.stdout.splitlines() if "note" in line]
    assert [line.split(": ", 1)[1] for line in lines] == ["resized 40 of 120 images", "resized 80 of 120 images"]
