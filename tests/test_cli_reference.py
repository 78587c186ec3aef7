"""docs/cli.md is the CLI reference generated from the `switchboard` command itself
(`python -m switchboard.cli.reference > docs/cli.md`): it stays exactly the generator's output, so
it stays true to the commands; it names every command, argument and option; and its text is plain
Markdown (no rich markup, nothing a renderer would swallow as HTML)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import typer

from conftest import ROOT
from switchboard.cli import app
from switchboard.cli.reference import GENERATE, anchor, render

DOC = ROOT / "docs" / "cli.md"
REGENERATE = f"docs/cli.md is out of date: regenerate it from the repository root with `{GENERATE}`"


def _commands(command, ctx, path):
    """(path, command, ctx) for every visible command and group, walked independently of the generator."""
    yield path, command, ctx
    for name in getattr(command, "list_commands", lambda _ctx: [])(ctx):
        sub = command.get_command(ctx, name)
        if sub is not None and not sub.hidden:
            yield from _commands(sub, sub.context_class(sub, info_name=name, parent=ctx), f"{path} {name}")


def _all():
    root = typer.main.get_command(app)
    return list(_commands(root, root.context_class(root, info_name="switchboard"), "switchboard"))


def test_the_reference_is_the_generators_output():
    assert DOC.is_file(), REGENERATE
    assert DOC.read_text(encoding="utf-8") == render(), REGENERATE


def test_the_generator_runs_as_the_docs_say():
    env = dict(os.environ, COLUMNS="37", TERM="dumb")  # nothing of the terminal reaches the text
    run = subprocess.run([sys.executable, "-m", "switchboard.cli.reference"], cwd=ROOT, env=env,
                         capture_output=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout.decode("utf-8") == render()
    assert render().startswith("# CLI reference\n\n") and GENERATE in render().split("\n\n")[1]


def test_every_command_argument_and_option_is_in_the_reference():
    text = render()
    headings = re.findall(r"^#{2,6} `([^`]+)`$", text, re.M)
    found = _all()
    assert len(found) > 50
    assert headings == [path for path, _, _ in found]  # the order `--help` lists them, depth first
    sections = dict(zip(headings, re.split(r"^#{2,6} `[^`]+`$", text, flags=re.M)[1:], strict=True))
    for path, command, ctx in found:
        section = sections[path]
        help_option = command.get_help_option(ctx)
        for param in command.get_params(ctx):
            if param is help_option or param.hidden:
                continue
            name = param.opts[0] if param.param_type_name == "option" else (param.metavar or param.name)
            assert f"`{name}" in section or f", {name}" in section, (path, name)
        for name in getattr(command, "list_commands", lambda _ctx: [])(ctx):
            assert f"[`{name}`](#{anchor(f'{path} {name}')})" in section, (path, name)


def test_the_text_is_plain_markdown():
    text = render()
    assert "[bold" not in text and "[/" not in text and "\x1b" not in text
    # Outside code spans and fences, a `<` is escaped: `team:<slug>` is not read as an HTML tag.
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    prose = re.sub(r"(`+).+?\1", "", prose)
    assert re.search(r"(?<!\\)<", prose) is None
    # Every table row has as many cells as its header.
    for block in re.findall(r"(?:^\|.*\|\n)+", text, re.M):
        rows = block.splitlines()
        widths = {len(re.split(r"(?<!\\)\|", row)) for row in rows}
        assert len(widths) == 1, rows


def test_endpoint_vend_says_how_a_team_queue_is_named_and_granted():
    root = typer.main.get_command(app)
    vend = root.commands["endpoint"].commands["vend"]
    queue = next(p for p in vend.params if p.name == "queue")
    for text in (queue.help, vend.help):
        assert "team:<team-slug>/<queue>" in text and "awaiting_grant" in text, text
        assert "team owner or admin grants it" in text, text
    # The same words in `--help`, as a terminal shows them, and in the reference.
    env = dict(os.environ, COLUMNS="400", TERM="dumb")
    script = str(Path(sys.executable).parent / "switchboard")
    run = subprocess.run([script, "endpoint", "vend", "--help"], env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    shown = " ".join(run.stdout.replace("│", " ").split())
    assert "team:<team-slug>/<queue>" in shown and "awaiting_grant" in shown, run.stdout
    assert "until a team owner or admin grants it" in shown, run.stdout
    section = render().split("### `switchboard endpoint vend`", 1)[1].split("\n### ", 1)[0]
    assert "awaiting_grant" in section and "`--queue team:<team-slug>/<queue>`" in section
