"""What a newcomer meets first, from a fresh clone: the example worker's answer to a wrong credential,
what `make run` and `make test` do, where the README tour writes its files, and the log format."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, make_settings, start_thread_server
from mcp_support import vend

WORKER = ROOT / "examples" / "worker.py"
UNAUTHORIZED = "worker: unauthorized: check SWITCHBOARD_CREDENTIAL and the endpoint slug"


@pytest.fixture(scope="module")
def server(pg_uri):
    srv = start_thread_server(make_settings(pg_uri))
    yield srv
    srv.stop()


def run_worker(url: str, credential: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, SWITCHBOARD_MCP_URL=url, SWITCHBOARD_CREDENTIAL=credential)
    return subprocess.run([sys.executable, str(WORKER), "--once"], env=env, capture_output=True, text=True,
                          timeout=60, cwd=ROOT)


async def test_the_example_worker_says_unauthorized_in_one_line(core, server):
    a = await vend(core)
    wrong_credential = run_worker(a.url(server.url), "sbk_" + "x" * 40)
    wrong_slug = run_worker(server.url + "/mcp/nosuchslug1", a.credential)
    for run in (wrong_credential, wrong_slug):
        assert run.returncode != 0
        assert run.stderr.strip() == UNAUTHORIZED, run.stderr
        assert "Traceback" not in run.stderr and "ExceptionGroup" not in run.stderr


# ------------------------------------------------------------------------------- make run, make test

def make_n(target: str) -> str:
    """What `make TARGET` would run on a fresh clone (a virtualenv that does not exist yet)."""
    run = subprocess.run(["make", "-n", target, "VENV=/nonexistent/venv"], cwd=ROOT, capture_output=True,
                         text=True, timeout=30)
    assert run.returncode == 0, run.stderr
    return run.stdout


def test_make_run_installs_only_what_serving_needs_and_make_test_the_test_extras():
    run = make_n("run")
    assert "pip install --quiet -e .\n" in run and "[test]" not in run
    assert "switchboard serve" in run
    test = make_n("test")
    assert "pip install --quiet -e '.[test]'" in test and "-m pytest" in test


def test_make_test_writes_no_tracked_screenshot_and_make_screenshots_refreshes_them():
    import board_kit
    import test_a2ui_render

    env_dir = os.environ.get("SWITCHBOARD_SCREENS_DIR")
    if not env_dir:  # the suite's own default, as `make test` runs it
        for target in (board_kit.SCREENS / "board-todos.png", test_a2ui_render.SCREEN):
            assert ROOT / "docs" / "screens" not in target.parents, target
            ignored = subprocess.run(["git", "check-ignore", "-q", str(target)], cwd=ROOT)
            assert ignored.returncode == 0, f"{target} is not ignored by git"
    assert "SWITCHBOARD_SCREENS_DIR" not in make_n("test")
    screenshots = make_n("screenshots")
    assert f"SWITCHBOARD_SCREENS_DIR={ROOT}/docs/screens" in screenshots
    # Every committed screenshot is taken by a test that `make screenshots` runs: a name in docs/screens
    # comes from one of the test files its command names.
    taking = set(re.findall(r"tests/test_\w+\.py", screenshots))
    assert {"tests/test_board_screens.py", "tests/test_a2ui_render.py"} <= taking, screenshots
    named = set()
    for test in taking:
        text = (ROOT / test).read_text()
        named |= {f"board-{n}.png" for n in re.findall(r'screenshot\(page, "([a-z-]+)"', text)}
        named |= {"a2ui-todo.png"} if "a2ui-todo.png" in text else set()
    tracked = subprocess.run(["git", "ls-files", "docs/screens"], cwd=ROOT, capture_output=True, text=True).stdout
    assert {Path(line).name for line in tracked.split()} <= named


def test_the_license_is_an_spdx_string_with_a_setuptools_that_reads_it():
    import tomllib

    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert meta["project"]["license"] == "Apache-2.0"
    assert "setuptools>=77" in meta["build-system"]["requires"]


# ------------------------------------------------------------------------------------------- logs

@pytest.fixture
def logging_restored():
    import logging

    loggers = [logging.getLogger(), logging.getLogger("switchboard")]
    saved = [(lg, lg.handlers[:], lg.level, lg.propagate) for lg in loggers]
    yield
    for lg, handlers, level, propagate in saved:
        lg.handlers[:] = handlers
        lg.setLevel(level)
        lg.propagate = propagate


def test_logs_default_to_text_on_a_terminal_and_json_otherwise(logging_restored):
    import io
    import logging

    from switchboard import logs
    from switchboard.config import load_settings

    assert load_settings(database_url="postgresql://x/y").log_format == "auto"
    master, slave = os.openpty()
    with open(slave, "w") as terminal:
        logs.configure("info", "auto", stream=terminal)
        assert isinstance(logging.getLogger("switchboard").handlers[0].formatter, logs.TextFormatter)
    os.close(master)
    piped = io.StringIO()
    logs.configure("info", "auto", stream=piped)
    logging.getLogger("switchboard.test").info("hello")
    assert piped.getvalue().startswith("{")  # JSON for a pipe or a file
    for fmt, want in (("json", logs.JsonFormatter), ("text", logs.TextFormatter)):  # the setting still decides
        master, slave = os.openpty()
        with open(slave, "w") as terminal:
            logs.configure("info", fmt, stream=terminal)
            assert isinstance(logging.getLogger("switchboard").handlers[0].formatter, want)
        os.close(master)


def test_the_banner_says_which_log_format_is_in_use():
    from switchboard.config import load_settings
    from switchboard.web.server import banner

    piped = banner(load_settings(database_url="postgresql://x/y"))  # the suite's stderr is not a terminal
    assert "Logs:    JSON lines on stderr (SWITCHBOARD_LOG_FORMAT=auto" in piped
    chosen = banner(load_settings(database_url="postgresql://x/y", log_format="text"))
    assert "Logs:    text on stderr (SWITCHBOARD_LOG_FORMAT=text" in chosen
