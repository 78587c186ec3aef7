"""`switchboard serve` as a user meets it: the banner appears once the port is listening and matches
the README's tour; a busy port is one line naming the port and how to choose another, exit 1."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import httpx

from conftest import ROOT, free_port, make_settings
from switchboard.web.server import banner

BANNER_FIRST_LINE = "Switchboard is running"


def serve_env(pg_uri: str, port: int) -> dict:
    env = dict(os.environ)
    env.update({"SWITCHBOARD_DATABASE_URL": pg_uri, "SWITCHBOARD_PORT": str(port), "SWITCHBOARD_HOST": "127.0.0.1",
                "SWITCHBOARD_LOG_FORMAT": "json", "SWITCHBOARD_SECRET_KEY": "test-secret-key-" + "k" * 32})
    return env


def start(pg_uri: str, port: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "switchboard", "serve"], env=serve_env(pg_uri, port),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def test_the_banner_is_printed_once_the_port_is_listening(pg_uri):
    port = free_port()
    proc = start(pg_uri, port)
    try:
        deadline = time.monotonic() + 60
        while True:
            line = proc.stderr.readline()
            assert line or proc.poll() is None, "serve exited before printing the banner"
            if BANNER_FIRST_LINE in line:
                break
            assert time.monotonic() < deadline, "no banner"
        # At the moment the banner shows, the port answers: no retry, no wait.
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            pass
        assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200
    finally:
        stop(proc)


def test_a_second_server_on_a_busy_port_says_which_port_in_one_line(pg_uri):
    port = free_port()
    first = start(pg_uri, port)
    try:
        deadline = time.monotonic() + 60
        while BANNER_FIRST_LINE not in first.stderr.readline():
            assert first.poll() is None and time.monotonic() < deadline, "the first server did not start"
        second = subprocess.run([sys.executable, "-m", "switchboard", "serve"], env=serve_env(pg_uri, port),
                                capture_output=True, text=True, timeout=60, cwd=ROOT)
    finally:
        stop(first)
    assert second.returncode == 1
    assert second.stdout == ""
    lines = second.stderr.strip().splitlines()
    assert lines == [f"error: port {port} on 127.0.0.1 is already in use; choose another with "
                     "SWITCHBOARD_PORT (or --port)"], second.stderr
    assert BANNER_FIRST_LINE not in second.stderr


def test_the_banner_tour_is_the_readme_tour(pg_uri):
    text = banner(make_settings(pg_uri))
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    commands = [ln.strip() for ln in text.splitlines() if ".venv/bin/switchboard" in ln]
    assert any("user add alice --password-stdin" in c for c in commands)
    for command in commands:
        # Each command, up to its first placeholder or quoted value, is a command of the README's tour.
        stem = command.split(" | ")[-1].split(" <")[0].split(" '")[0]
        assert stem in readme, stem
    assert "export SWITCHBOARD_USER=alice" in text and "export SWITCHBOARD_USER=alice" in readme


async def test_the_startup_heap_is_frozen_out_of_the_garbage_collector(monkeypatch):
    """Once the app has started, `serve` freezes everything allocated so far (modules, schemas, the
    app): the collector never scans it again. Without it, every full collection walked the whole
    startup heap, and a bulk push of 1,000 todos over HTTP cost the server about 30 % more CPU
    (docs/benchmarks.md, "Bulk push")."""
    import gc

    import uvicorn

    from switchboard.web import server as server_module

    calls: list[str] = []

    async def started(self, sockets=None) -> None:
        calls.append("startup")
        self.started = True

    monkeypatch.setattr(uvicorn.Server, "startup", started)
    monkeypatch.setattr(gc, "freeze", lambda: calls.append("freeze"))
    monkeypatch.setattr(server_module, "banner", lambda settings: calls.append("banner") or "")
    config = uvicorn.Config(lambda scope, receive, send: None, lifespan="off")
    await server_module._Server(config, make_settings("postgresql://unused")).startup()
    assert calls == ["startup", "freeze", "banner"]
