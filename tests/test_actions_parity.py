"""The owner-action table (core/actions.py) walked on every surface: the producer API over real HTTP,
the Board over real HTTP (a signed-in session and its CSRF token), and the `switchboard` command as a
subprocess. Each offers every action of the table, performs it with the same outcome as the core,
refuses the same way (each surface with its own documented status), and the Board's drawer offers
exactly the actions that apply to a todo as it stands (a due retry can be claimed)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from conftest import make_settings, start_thread_server
from mcp_support import push, vend
from switchboard.core import actions, api_tokens, endpoints, todos
from switchboard.core.states import TodoState

SB = str(Path(sys.executable).parent / "switchboard")

# Each surface's answer for each kind of outcome (documented in web/api.py, web/board/todo_pages.py,
# cli/common.py).
API_STATUS = {"ok": 200, "invalid": 400, "not_found": 404, "conflict": 409}
BOARD_STATUS = {"ok": 303, "invalid": 422, "not_found": 404, "conflict": 409}
CLI_EXIT = {"ok": 0, "invalid": 1, "not_found": 1, "conflict": 1}

# What each action is given on every surface.
FIELDS = {
    "claim": {"lease_ttl_seconds": 600},
    "complete": {"summary": "finished by hand", "result": {"ok": True}},
    "fail": {"summary": "stuck", "retry": False},
    "release": {"summary": "handing back", "artifact": "mcp://cairn/run7"},
    "extend": {"lease_ttl_seconds": 900},
    "retry": {},
    "cancel": {},
    "input": {"payload": {"branch": "main"}},
}


@pytest.fixture(scope="module")
def server(pg_uri):
    srv = start_thread_server(make_settings(pg_uri))
    yield srv
    srv.stop()


class World:
    """One human with an agent endpoint, signed in on every surface."""

    def __init__(self, core, server, agent, token: str, pg_uri: str) -> None:
        self.core, self.server, self.agent = core, server, agent
        self.human = agent.human
        self.api = httpx.Client(base_url=server.url + "/api/v1", headers={"Authorization": f"Bearer {token}"},
                                timeout=30)
        self.board = httpx.Client(base_url=server.url, timeout=30)
        page = self.board.get("/login")
        login_token = re.search(r'name="login_token" value="([^"]+)"', page.text).group(1)
        signed = self.board.post("/login", data={"name": self.human.name, "password": "password123",
                                                 "login_token": login_token, "next": "/todos"},
                                 follow_redirects=True)
        assert signed.status_code == 200 and signed.url.path == "/todos", signed.status_code
        self.csrf = re.search(r'name="csrf_token" value="([^"]+)"', signed.text).group(1)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("SWITCHBOARD_")}
        self.env.update(SWITCHBOARD_DATABASE_URL=pg_uri, SWITCHBOARD_LOG_FORMAT="text",
                        SWITCHBOARD_USER=self.human.name)

    async def caller(self):
        return endpoints.caller_from_row(await endpoints.resolve_credential(self.core, self.agent.credential))

    # --------------------------------------------------------------------------- one action, a surface

    def via_api(self, name: str, todo_id: str, fields: dict) -> tuple[str, str]:
        r = self.api.post(f"/todos/{todo_id}/{name}", json=fields)
        kind = {v: k for k, v in API_STATUS.items()}.get(r.status_code, str(r.status_code))
        return kind, "" if kind == "ok" else json.dumps(r.json()["error"])

    def via_board(self, name: str, todo_id: str, fields: dict) -> tuple[str, str]:
        form = {"csrf_token": self.csrf}
        for key, value in fields.items():
            form[key] = value if isinstance(value, str) else json.dumps(value)
        r = self.board.post(f"/todos/{todo_id}/{name}", data=form, follow_redirects=False)
        kind = {v: k for k, v in BOARD_STATUS.items()}.get(r.status_code, str(r.status_code))
        return kind, "" if kind == "ok" else re.sub(r"<[^>]+>", " ", r.text)

    def via_cli(self, name: str, todo_id: str, fields: dict) -> tuple[str, str]:
        args = [SB, "todo", name, todo_id, "--json"]
        for key, value in fields.items():
            flag = "--" + key.replace("_", "-")
            if isinstance(value, bool):
                args.append(flag if value else f"--no-{key.replace('_', '-')}")
            else:
                args += [flag, value if isinstance(value, str) else json.dumps(value)]
        run = subprocess.run(args, env=self.env, capture_output=True, text=True, timeout=60)
        if run.returncode == 0:
            assert len(run.stdout.splitlines()) == 1 and "todo" in json.loads(run.stdout)
            return "ok", ""
        text = run.stdout + run.stderr  # with --json an error may be one JSON object on stdout
        match = re.search(r'"code": "(\w+)"', run.stdout) or re.search(r"error: (\w+)", run.stderr)
        kind = match.group(1) if match else f"exit {run.returncode}"
        assert CLI_EXIT.get(kind) == run.returncode, (kind, run.returncode, text)
        return kind, text

    async def via_core(self, name: str, todo_id: str, fields: dict) -> tuple[str, str]:
        try:
            await actions.perform(self.core, self.human, name, todo_id, via="test", **fields)
        except Exception as exc:  # the core's refusal, compared with the surfaces'
            return getattr(exc, "code", type(exc).__name__), str(exc)
        return "ok", ""

    async def do(self, surface: str, name: str, todo_id: str, fields: dict) -> tuple[str, str]:
        if surface == "core":
            return await self.via_core(name, todo_id, fields)
        return getattr(self, f"via_{surface}")(name, todo_id, fields)

    # ------------------------------------------------------------------------------ todos to act on

    async def todo_where(self, name: str) -> str:
        """A fresh todo the action `name` applies to."""
        agent = await self.caller()
        if name in ("claim", "cancel"):
            return (await push(self.core, self.agent, f"for {name}"))["id"]
        t = await push(self.core, self.agent, f"for {name}", max_attempts=1 if name == "retry" else 5)
        await todos.claim(self.core, agent, t["id"], claimant="worker-1")
        if name == "retry":
            await todos.fail(self.core, agent, t["id"], summary="broke")
        elif name == "input":
            await todos.request_input(self.core, agent, t["id"], question="which branch?")
        return t["id"]

    async def done_todo(self) -> str:
        agent = await self.caller()
        t = await push(self.core, self.agent, "finished")
        await todos.claim(self.core, agent, t["id"])
        await todos.complete(self.core, agent, t["id"])
        return t["id"]

    async def outcome(self, todo_id: str) -> dict:
        """What the action did, without what legitimately differs (times, the claimant's surface)."""
        t = await todos.get(self.core, self.human, todo_id)
        newest = t["attempts"][0] if t["attempts"] else {}
        return {
            "state": t["state"], "dead_letter": t["dead_letter"], "owner_is_human": t.get("owner") == self.human.owner,
            "attempt": t["attempt"], "result": t["result"], "input": t.get("input"),
            "attempts": len(t["attempts"]), "outcome": newest.get("outcome"),
            "disposition": newest.get("disposition"), "claimer_kind": newest.get("claimer_kind"),
            "summary": newest.get("summary"), "artifact": newest.get("artifact"),
            "heartbeat": newest.get("last_heartbeat_at") is not None,
            "owner_extended": newest.get("owner_extended_at") is not None,
        }


SURFACES = ("core", "api", "board", "cli")


@pytest.fixture
async def world(core, server, pg_uri):
    agent = await vend(core, "parity", queues=["inbox"])
    token, _ = await api_tokens.create(core, agent.human)
    w = World(core, server, agent, token, pg_uri)
    yield w
    w.api.close()
    w.board.close()


@pytest.mark.parametrize("name", list(actions.ACTIONS))
async def test_each_surface_performs_the_action_with_the_same_outcome(world, name):
    fields = FIELDS[name]
    assert set(fields) <= set(actions.ACTIONS[name].field_names)
    seen = {}
    for surface in SURFACES:
        tid = await world.todo_where(name)
        before = await todos.get(world.core, world.human, tid)
        assert actions.ACTIONS[name].applies(before)
        assert await world.do(surface, name, tid, fields) == ("ok", ""), surface
        seen[surface] = await world.outcome(tid)
    assert seen["api"] == seen["core"] and seen["board"] == seen["core"] and seen["cli"] == seen["core"], seen


@pytest.mark.parametrize("name", list(actions.ACTIONS))
async def test_an_action_that_does_not_apply_is_a_conflict_everywhere_and_changes_nothing(world, name):
    tid = await world.done_todo()
    assert not actions.ACTIONS[name].applies(await todos.get(world.core, world.human, tid))
    before = await world.outcome(tid)
    for surface in SURFACES:
        kind, _ = await world.do(surface, name, tid, FIELDS[name])
        assert kind == "conflict", (surface, kind)
    assert await world.outcome(tid) == before


async def test_a_bad_argument_is_invalid_everywhere_naming_it_and_changes_nothing(world):
    for name, fields, argument in (("release", {"artifact": "file:///etc/passwd"}, "artifact"),
                                   ("fail", {"summary": "x", "result": {"s": "a\x00b"}}, "result"),
                                   ("extend", {"lease_ttl_seconds": "soon"}, "lease_ttl_seconds")):
        tid = await world.todo_where(name)
        before = await world.outcome(tid)
        for surface in SURFACES:
            if surface == "cli" and argument == "lease_ttl_seconds":
                continue  # the command line refuses a non-integer itself, as a usage error
            kind, message = await world.do(surface, name, tid, fields)
            assert kind == "invalid", (surface, name, kind, message)
            assert argument in message, (surface, message)
        assert await world.outcome(tid) == before


async def test_an_unknown_id_is_not_found_everywhere(world):
    for surface in SURFACES:
        assert (await world.do(surface, "cancel", "td_nope", {}))[0] == "not_found", surface


def _offered(html: str) -> set[str]:
    return set(re.findall(r'id="sb-act-([a-z]+)"', html))


async def test_every_surface_offers_the_table(world):
    from switchboard.cli import todo_app

    commands = {c.name for c in todo_app.registered_commands}
    assert set(actions.ACTIONS) <= commands
    assert world.api.post("/todos/td_x/dance", json={}).status_code == 404
    for name, action in actions.ACTIONS.items():
        r = world.api.post(f"/todos/td_x/{name}", json={"surprise": 1})
        assert r.status_code == 400 and r.json()["error"]["argument"] == "surprise", name  # fields come from the table
        help_text = subprocess.run([SB, "todo", name, "--help"], env=world.env, capture_output=True, text=True,
                                   timeout=60).stdout
        for field in action.fields:
            assert "--" + field.name.replace("_", "-") in help_text, (name, field.name)


async def test_the_drawer_offers_exactly_what_applies_including_a_due_retry(world):
    agent = await world.caller()
    situations = {}
    for name in actions.ACTIONS:
        situations[name] = await world.todo_where(name)
    situations["done"] = await world.done_todo()
    due = await push(world.core, world.agent, "due retry", max_attempts=3)
    await todos.claim(world.core, agent, due["id"])
    await todos.fail(world.core, agent, due["id"], summary="flaky")
    async with world.core.pool.connection() as conn:
        await conn.execute("UPDATE todos SET next_retry_at = now() - interval '1 second' WHERE id = %s",
                           (due["id"],))
    situations["due retry"] = due["id"]
    for label, tid in situations.items():
        todo = await todos.get(world.core, world.human, tid)
        expected = {a.name for a in actions.available(todo)}
        page = world.board.get(f"/todos/{tid}")
        assert page.status_code == 200
        assert _offered(page.text) == expected, (label, todo["state"])
    due_todo = await todos.get(world.core, world.human, due["id"])
    assert due_todo["state"] == TodoState.FAILED and "claim" in _offered(world.board.get(f"/todos/{due['id']}").text)
    assert world.via_board("claim", due["id"], {})[0] == "ok"
    assert (await todos.get(world.core, world.human, due["id"]))["state"] == TodoState.CLAIMED
