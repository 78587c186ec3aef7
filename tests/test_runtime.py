"""The runtime and the composition root: one way to open the database and the core, one LISTEN
connection the surfaces share, surfaces built with their collaborators, and a surface that cannot be
built stops the app naming it."""

from __future__ import annotations

import time

import pytest

from conftest import make_settings
from switchboard.core import sweeps
from switchboard.runtime import Runtime, RuntimeClosed, open_runtime
from switchboard.web.app import CompositionError, create_app


async def test_open_runtime_opens_the_core_and_the_listener_and_closes_them(pg_uri):
    settings = make_settings(pg_uri)
    runtime = Runtime(settings)
    with pytest.raises(RuntimeClosed):
        runtime.core  # noqa: B018  (reading it is what raises)
    async with open_runtime(settings, runtime=runtime, listen=True, min_size=1, max_size=2) as opened:
        assert opened is runtime and runtime.is_open
        async with runtime.core.pool.connection() as conn:
            assert (await (await conn.execute("SELECT 1 AS one")).fetchone())["one"] == 1
        await runtime.listener.wait_connected()
        assert runtime.listener.backend_pid is not None
    assert not runtime.is_open and not runtime.listener.connected.is_set()
    with pytest.raises(RuntimeClosed):
        runtime.core  # noqa: B018  (reading it is what raises)


async def test_open_runtime_refuses_a_runtime_built_with_other_settings(pg_uri):
    with pytest.raises(ValueError, match="other settings"):
        async with open_runtime(make_settings(pg_uri), runtime=Runtime(make_settings(pg_uri))):
            pass


def test_the_surfaces_share_the_runtime_listener_and_get_their_collaborators(live_server):
    srv = live_server(a2ui=True)
    runtime, surfaces = srv.app.state.ctx, srv.app.state.surfaces
    assert runtime.is_open
    # The LISTEN connection comes up in the background: the app serves before it has (a loaded
    # machine once asserted it in the same instant and found it not yet connected).
    deadline = time.monotonic() + 10
    while not runtime.listener.connected.is_set() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert runtime.listener.connected.is_set()
    assert surfaces.hooks.listener is runtime.listener and surfaces.doorbell.listener is runtime.listener
    assert surfaces.hooks.on_wakeups in runtime.listener.on_batch
    assert surfaces.doorbell.on_wakeups in runtime.listener.on_batch
    assert surfaces.doorbell.resync in runtime.listener.on_reconnect
    assert surfaces.hooks.metrics is surfaces.metrics.metrics
    assert surfaces.mcp.providers == [surfaces.a2ui]
    assert surfaces.mcp.observe_tool_call == surfaces.metrics.metrics.observe_tool_call
    assert surfaces.doorbell.mcp is surfaces.mcp and surfaces.doorbell.sessions is surfaces.mcp.sessions
    assert surfaces.board.core is runtime.core
    assert not hasattr(sweeps, "TICK_HOOKS")  # tick hooks are passed in, not registered globally


def test_a_surface_that_cannot_be_built_stops_the_app_naming_it(pg_uri, tmp_path):
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    with pytest.raises(CompositionError, match="the board surface could not be built"):
        create_app(make_settings(pg_uri, secret_key=None, data_dir=not_a_dir))
