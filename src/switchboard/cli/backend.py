"""Where a queue command acts: this machine's database (`Local`, through the core) or a remote
server's human API (`Remote`, over HTTP). Both answer the command's `--json` object, so each command
is written once: it parses its arguments, asks `backend(user)` and prints what comes back.

`Local` acts as the human named by `--user` (or `SWITCHBOARD_USER`): the operator of the machine
acting for anyone, a local-admin act. `Remote` acts as the human whose API token is sent, and only
as them: `--user` is refused there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import remote
from .common import EXIT_REFUSED, fail, fail_usage, human, run, settings


def backend(user: str | None = None) -> Local | Remote:
    server = remote.configured()
    if server is None:
        return Local(user)
    if user is not None:
        fail_usage(f"--user acts on this machine's database as another human; commands sent to "
                   f"{server.url} act as the API token's human (unset {remote.URL_ENV} or "
                   "`switchboard logout` to work locally)", argument="user")
    return Remote(remote.Client(server))


# The documented `--json` shapes where the API answers more than the command prints.
VENDED = ("endpoint_id", "slug", "agent", "queues", "verbs", "mcp_url", "credential", "expires_at",
          "awaiting_grant")
TOKEN_ROW = ("id", "prefix", "created_at", "revoked_at")


def _only(obj: dict, keys: tuple[str, ...]) -> dict:
    return {k: obj[k] for k in keys if k in obj}


def _without(obj: dict, *keys: str) -> dict:
    return {k: v for k, v in obj.items() if k not in keys}


def _given(**fields: Any) -> dict:
    return {k: v for k, v in fields.items() if v is not None}


def _checked(check: Callable[[], Any]) -> Any:
    """A check of the core's run on this side of the wire (a refusal is the command's own, exit 1),
    so that a remote command refuses what the local one refuses, with the same words."""
    from ..core.errors import CoreError

    try:
        return check()
    except CoreError as exc:
        fail(exc.code, exc.message, EXIT_REFUSED, argument=exc.argument, line=f"{exc.code}: {exc.message}")


def _named(value: str, empty: str) -> str:
    """A path segment naming `value` as the core reads it. A `.` or `..` segment would be resolved away
    by the URL, so its dots are sent percent-encoded; an empty one would name another route, so it is
    sent as `empty`, a value the core refuses exactly as it refuses the empty one."""
    if value in (".", ".."):
        return value.replace(".", "%2E")
    return remote.seg(value if value else empty)


# What the core refuses as it refuses an empty intake or quarantined delivery: a control character is
# no intake's name, and no delivery's id is 0.
NO_INTAKE, NO_ITEM = "\x01", "0"


def admission_scope(queue: str, endpoint: str | None) -> tuple[str, str]:
    """Where the human API names a queue identity: (`team:<team-slug>`, queue name) for a team queue's
    label, (`endpoint:<slug>`, queue) for an endpoint's queue; refused as the core refuses it."""
    from ..core import inputs
    from ..core.errors import Invalid

    def check() -> tuple[str, str]:
        label = inputs.queue(queue)
        if inputs.is_team_label(label):
            team, name = inputs.team_label(label)
            return f"team:{team}", name
        if endpoint is None:
            raise Invalid("an endpoint's queue needs the endpoint (its slug); a team queue is team:<slug>/<queue>",
                          argument="endpoint")
        return f"endpoint:{endpoint}", label

    return _checked(check)


def _window(window: dict) -> Any:
    """The core's window from the command's flags (hour, UTC, 00:00 when left out)."""
    from ..core import admission

    return admission.window(window.get("period") or "hour", window.get("tz") or "UTC",
                            window.get("start") or "00:00", window.get("weekday"))


class Local:
    """The core on this machine's database, as `--user` (default `SWITCHBOARD_USER`)."""

    def __init__(self, user: str | None) -> None:
        self.user = user

    def _mcp_url(self, slug: str) -> str:
        return f"{settings().public_base_url}/mcp/{slug}"

    def _with_url(self, ep: dict) -> dict:
        return dict(ep, mcp_url=self._mcp_url(ep["slug"]))

    # endpoints
    def endpoint_vend(self, *, agent: str, queues: list[str] | None, verbs: list[str] | None,
                      lease_ttl: int | None, expires_in_seconds: int | None = None) -> dict:
        from ..core import endpoints

        async def work(core):
            return await endpoints.vend(core, await human(core, self.user), agent=agent, queues=queues,
                                        verbs=verbs, lease_ttl=lease_ttl, expires_in_seconds=expires_in_seconds)

        ep, credential = run(work)
        out = {"endpoint_id": ep["endpoint_id"], "slug": ep["slug"], "agent": ep["agent"], "queues": ep["queues"],
               "verbs": ep["verbs"], "mcp_url": self._mcp_url(ep["slug"]), "credential": credential,
               "expires_at": ep["expires_at"]}
        if "awaiting_grant" in ep:  # team queues a member named wait for an owner's or admin's grant
            out["awaiting_grant"] = ep["awaiting_grant"]
        return out

    def endpoint_list(self) -> dict:
        from ..core import endpoints

        async def work(core):
            return await endpoints.list_for_human(core, await human(core, self.user))

        return {"endpoints": [self._with_url(e) for e in run(work)]}

    def endpoint_show(self, slug: str) -> dict:
        from ..core import endpoints

        async def work(core):
            return endpoints.public(await endpoints.get_for_human(core, await human(core, self.user), slug))

        return {"endpoint": self._with_url(run(work))}

    def endpoint_change(self, slug: str, **fields: Any) -> dict:
        from ..core import endpoint_terms

        async def work(core):
            return await endpoint_terms.change(core, await human(core, self.user), slug, **fields)

        return {"endpoint": self._with_url(run(work))}

    def endpoint_revoke(self, slug: str) -> dict:
        from ..core import endpoints

        async def work(core):
            return await endpoints.revoke(core, await human(core, self.user), slug)

        return run(work)

    # todos
    def todo_push(self, slug: str, **fields: Any) -> dict:
        from ..core import producer

        async def work(core):
            return await producer.push(core, await human(core, self.user), slug, **fields)

        todo, created = run(work)
        return {"todo": todo, "created": created}

    def todo_push_many(self, slug: str, batches: list[list[dict]], check: Callable[[list[str]], None]) -> list[dict]:
        """`check(queues)` with the endpoint's queues first, then one statement per batch, all in one
        process run; each answer is a batch's `todos:batch` reply."""
        from ..core import producer
        from ..core.endpoints import get_for_human

        async def work(core):
            h = await human(core, self.user)
            check(list((await get_for_human(core, h, slug))["scope_queues"]))
            return [producer.batch_reply(await producer.push_many(core, h, slug, batch)) for batch in batches]

        return run(work)

    def todo_list(self, slug: str | None, *, state: str | None, queue: str | None, dead_letter: bool,
                  limit: int | None, team: str | None = None) -> dict:
        from ..core import teams, todos
        from ..core.endpoints import get_for_human

        async def work(core):
            h = await human(core, self.user)
            if slug:
                await get_for_human(core, h, slug)
            if team:
                await teams.membership(core, h, team)  # outside the human's teams: not_found
            return await todos.list_for_human(core, h, endpoint=slug, queue=queue, state=state,
                                              dead_letter=dead_letter, limit=limit, team=team)

        return {"todos": run(work)}

    def team_push(self, queue: str, **fields: Any) -> dict:
        from ..core import producer

        async def work(core):
            return await producer.push_team(core, await human(core, self.user), queue, **fields)

        todo, created = run(work)
        return {"todo": todo, "created": created}

    def team_push_many(self, team: str, batches: list[list[dict]], check: Callable[[str], None]) -> list[dict]:
        """`check(team slug)` once the human is known to be a member, then one statement per batch."""
        from ..core import producer, teams

        async def work(core):
            h = await human(core, self.user)
            check((await teams.membership(core, h, team))["slug"])
            return [producer.batch_reply(await producer.push_team_many(core, h, team, batch)) for batch in batches]

        return run(work)

    # teams
    def _team(self, call: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        async def work(core):
            return await call(core, await human(core, self.user), *args, **kw)

        return run(work)

    def team_create(self, slug: str, *, name: str | None) -> dict:
        from ..core import teams

        return {"team": self._team(teams.create, slug, name)}

    def team_list(self) -> dict:
        from ..core import teams

        return {"teams": self._team(teams.list_for_human)}

    def team_show(self, slug: str) -> dict:
        from ..core import teams

        return {"team": self._team(teams.show, slug)}

    def team_add(self, slug: str, name: str, *, role: str | None) -> dict:
        from ..core import teams

        return self._team(teams.add_member, slug, name, "member" if role is None else role)

    def team_remove(self, slug: str, name: str) -> dict:
        from ..core import teams

        return self._team(teams.remove_member, slug, name)

    def team_role(self, slug: str, name: str, role: str) -> dict:
        from ..core import teams

        return self._team(teams.set_role, slug, name, role)

    def team_leave(self, slug: str) -> dict:
        from ..core import teams

        return self._team(teams.leave, slug)

    def team_delete(self, slug: str) -> dict:
        from ..core import teams

        return self._team(teams.delete, slug)

    def team_grant(self, slug: str, queue: str, endpoint: str) -> dict:
        from ..core import teams

        return self._team(teams.grant, slug, queue, endpoint)

    def team_ungrant(self, slug: str, queue: str, endpoint: str) -> dict:
        from ..core import teams

        return self._team(teams.ungrant, slug, queue, endpoint)

    # admission policies
    def policy_set(self, queue: str, endpoint: str | None, *, max_in_flight: int | None,
                   max_claims_per_window: int | None, window: dict) -> dict:
        from ..core import admission

        async def work(core):
            return await admission.set_policy(core, await human(core, self.user), queue, endpoint=endpoint,
                                              max_in_flight=max_in_flight,
                                              max_claims_per_window=max_claims_per_window,
                                              window_spec=_window(window))

        return {"policy": run(work)}

    def policy_show(self, queue: str, endpoint: str | None) -> dict:
        from ..core import admission

        return {"policy": self._team(admission.show, queue, endpoint=endpoint)}

    def policy_clear(self, queue: str, endpoint: str | None) -> dict:
        from ..core import admission

        return self._team(admission.clear, queue, endpoint=endpoint)

    def policy_list(self) -> dict:
        from ..core import admission

        return {"policies": self._team(admission.list_for_human)}

    def queue_pause(self, queue: str, endpoint: str | None, *, paused: bool) -> dict:
        from ..core import admission

        return {"policy": self._team(admission.set_paused, queue, paused, endpoint=endpoint)}

    def todo_show(self, todo_id: str) -> dict:
        from ..core import todos

        async def work(core):
            return await todos.get(core, await human(core, self.user), todo_id)

        return run(work)

    def todo_act(self, action: str, todo_id: str, fields: dict) -> dict:
        from ..core.actions import perform

        async def work(core):
            return await perform(core, await human(core, self.user), action, todo_id, via="cli", **fields)

        return {"todo": run(work)}

    # notify hooks
    def hook_add(self, slug: str, *, url: str, events: list[str] | None) -> dict:
        from ..core import hooks

        async def work(core):
            return await hooks.add(core, await human(core, self.user), slug, url=url, events=events)

        hook, secret = run(work)
        return {"hook": hook, "signing_secret": secret}

    def hook_list(self, slug: str) -> dict:
        from ..core import hooks

        async def work(core):
            return await hooks.list_for_endpoint(core, await human(core, self.user), slug)

        return {"hooks": run(work)}

    def hook_remove(self, hook_id: str) -> dict:
        from ..core import hooks

        async def work(core):
            return await hooks.remove(core, await human(core, self.user), hook_id)

        return {"removed": run(work)}

    def hook_enable(self, hook_id: str) -> dict:
        from ..core import hooks

        async def work(core):
            return await hooks.enable(core, await human(core, self.user), hook_id)

        return {"hook": run(work)}

    def hook_deliveries(self, slug: str, *, limit: int) -> dict:
        from ..core import hooks

        async def work(core):
            return await hooks.deliveries(core, await human(core, self.user), slug=slug, limit=limit)

        return {"deliveries": run(work)}

    # a team's notify hooks
    def team_hook_add(self, team: str, *, url: str, events: list[str] | None) -> dict:
        from ..core import hooks

        async def work(core):
            return await hooks.add_for_team(core, await human(core, self.user), team, url=url, events=events)

        hook, secret = run(work)
        return {"hook": hook, "signing_secret": secret}

    def team_hook_list(self, team: str) -> dict:
        from ..core import hooks

        async def work(core):
            return await hooks.list_for_team(core, await human(core, self.user), team)

        return {"hooks": run(work)}

    def team_hook_remove(self, team: str, hook_id: str) -> dict:
        from ..core import hooks

        async def work(core):
            return await hooks.remove_for_team(core, await human(core, self.user), team, hook_id)

        return {"removed": run(work)}

    def team_hook_enable(self, team: str, hook_id: str) -> dict:
        from ..core import hooks

        async def work(core):
            return await hooks.enable_for_team(core, await human(core, self.user), team, hook_id)

        return {"hook": run(work)}

    def team_hook_deliveries(self, team: str, *, limit: int) -> dict:
        from ..core import hooks

        async def work(core):
            return await hooks.deliveries_for_team(core, await human(core, self.user), team, limit=limit)

        return {"deliveries": run(work)}

    # notification sinks: the human's own
    def sink_add(self, **fields: Any) -> dict:
        from ..core import sinks

        return {"sink": self._team(sinks.add, **fields)}

    def sink_list(self) -> dict:
        from ..core import sinks

        return {"sinks": self._team(sinks.list_for_owner)}

    def sink_remove(self, sink_id: str) -> dict:
        from ..core import sinks

        return {"removed": self._team(sinks.remove, sink_id)}

    def sink_enable(self, sink_id: str) -> dict:
        from ..core import sinks

        return {"sink": self._team(sinks.enable, sink_id)}

    def sink_test(self, sink_id: str) -> dict:
        from ..web.sinks import send_test

        return {"test": self._team(send_test, sink_id)}

    def sink_deliveries(self, *, sink_id: str | None, limit: int) -> dict:
        from ..core import sinks

        return {"deliveries": self._team(sinks.deliveries, sink_id=sink_id, limit=limit)}

    # a team's notification sinks
    def team_sink_add(self, team: str, **fields: Any) -> dict:
        from ..core import sinks

        return {"sink": self._team(sinks.add_for_team, team, **fields)}

    def team_sink_list(self, team: str) -> dict:
        from ..core import sinks

        return {"sinks": self._team(sinks.list_for_team, team)}

    def team_sink_remove(self, team: str, sink_id: str) -> dict:
        from ..core import sinks

        return {"removed": self._team(sinks.remove_for_team, team, sink_id)}

    def team_sink_enable(self, team: str, sink_id: str) -> dict:
        from ..core import sinks

        return {"sink": self._team(sinks.enable_for_team, team, sink_id)}

    def team_sink_test(self, team: str, sink_id: str) -> dict:
        from ..web.sinks import send_test

        return {"test": self._team(send_test, sink_id, team=team)}

    def team_sink_deliveries(self, team: str, *, sink_id: str | None, limit: int) -> dict:
        from ..core import sinks

        return {"deliveries": self._team(sinks.deliveries_for_team, team, sink_id=sink_id, limit=limit)}

    # webhook intakes: the human's own
    def intake_create(self, **fields: Any) -> dict:
        from ..core import intakes

        intake, token, secret = self._team(intakes.create, **fields)
        return {"intake": intake, "url": settings().public_base_url + intakes.hook_path(token), "token": token,
                "secret": secret}

    def intake_list(self) -> dict:
        from ..core import intakes

        return {"intakes": self._team(intakes.list_for_human)}

    def intake_show(self, ref: str) -> dict:
        from ..core import intakes

        return {"intake": self._team(intakes.get, ref)}

    def intake_set_rules(self, ref: str, rules: Any) -> dict:
        from ..core import intakes

        return {"intake": self._team(intakes.set_rules, ref, rules)}

    def intake_set_enabled(self, ref: str, enabled: bool) -> dict:
        from ..core import intakes

        return {"intake": self._team(intakes.set_enabled, ref, enabled)}

    def intake_remove(self, ref: str) -> dict:
        from ..core import intakes

        return {"removed": self._team(intakes.remove, ref)}

    def intake_quarantine(self, ref: str) -> dict:
        from ..core import intakes

        return {"quarantine": self._team(intakes.quarantine, ref)}

    def intake_quarantined(self, ref: str, item: str) -> dict:
        from ..core import intakes

        return {"item": self._team(intakes.quarantined, ref, item)}

    def intake_drop(self, ref: str, item: str) -> dict:
        from ..core import intakes

        return {"dropped": self._team(intakes.drop, ref, item)}

    def intake_replay(self, ref: str, item: str) -> dict:
        from ..core import intakes

        todo, created = self._team(intakes.replay, ref, item)
        return {"todo": todo, "created": created}

    # operator settings and sweeps (the machine's operator: no human involved)
    def settings_get(self, key: str | None) -> dict:
        from ..core import settings_store

        async def work(core):
            if key:
                return {key: await settings_store.get(core, key)}
            return await settings_store.all_settings(core)

        return run(work)

    def settings_set(self, key: str, value: str) -> dict:
        from ..core import settings_store

        async def work(core):
            return await settings_store.set_value(core, key, value)

        return {key: run(work)}

    def sweep(self) -> dict:
        from ..core import sweeps

        async def work(core):
            return await sweeps.sweep_once(core)

        return run(work).as_dict()

    # the human's own API tokens
    def token_create(self, *, scope: str | None, expires_in_seconds: int | None) -> dict:
        from ..core import api_tokens

        async def work(core):
            h = await human(core, self.user)
            token, row = await api_tokens.create(core, h, scope_name=scope, expires_in_seconds=expires_in_seconds)
            return h.name, token, row

        name, token, row = run(work)
        return {"token": token, "id": row["id"], "prefix": row["prefix"], "user": name, "scope": row["scope"],
                "expires_at": row["expires_at"]}

    def token_list(self) -> dict:
        from ..core import api_tokens

        async def work(core):
            return await api_tokens.list_for(core, await human(core, self.user))

        return {"tokens": [_only(t, TOKEN_ROW) for t in run(work)]}

    def token_revoke(self, ref: str) -> dict:
        from ..core import api_tokens

        async def work(core):
            return await api_tokens.revoke(core, await human(core, self.user), ref)

        row, now = run(work)
        return {"token": _only(row, TOKEN_ROW), "revoked": now}


class Remote:
    """A server's human API, as the token's human. Answers are the API's, which are the CLI's
    `--json` objects (docs/api.md); only the paging cursor the CLI does not print is left out."""

    def __init__(self, client: remote.Client) -> None:
        self.api = client

    # endpoints
    def endpoint_vend(self, *, agent: str, queues: list[str] | None, verbs: list[str] | None,
                      lease_ttl: int | None, expires_in_seconds: int | None = None) -> dict:
        out = self.api.post("/endpoints", _given(agent=agent, queues=queues, verbs=verbs, lease_ttl=lease_ttl,
                                                 expires_in_seconds=expires_in_seconds))
        return _only(out, VENDED)

    def endpoint_list(self) -> dict:
        return self.api.get("/endpoints")

    def endpoint_show(self, slug: str) -> dict:
        return self.api.get(f"/endpoints/{remote.seg(slug)}")

    def endpoint_change(self, slug: str, **fields: Any) -> dict:
        return self.api.call("PATCH", f"/endpoints/{remote.seg(slug)}", body=fields)

    def endpoint_revoke(self, slug: str) -> dict:
        return _without(self.api.post(f"/endpoints/{remote.seg(slug)}/revoke"), "mcp_url")

    # todos
    def todo_push(self, slug: str, **fields: Any) -> dict:
        return self.api.post(f"/endpoints/{remote.seg(slug)}/todos", _given(**fields))

    def todo_push_many(self, slug: str, batches: list[list[dict]], check: Callable[[list[str]], None]) -> list[dict]:
        check(self.api.get(f"/endpoints/{remote.seg(slug)}")["endpoint"]["queues"])
        return [self.api.post(f"/endpoints/{remote.seg(slug)}/todos:batch", {"todos": batch}) for batch in batches]

    def todo_list(self, slug: str | None, *, state: str | None, queue: str | None, dead_letter: bool,
                  limit: int | None, team: str | None = None) -> dict:
        params = _given(state=state, queue=queue, limit=limit, dead_letter=True if dead_letter else None)
        if team:
            params["team"] = team
        if slug:
            out = self.api.get(f"/endpoints/{remote.seg(slug)}/todos", **params)
        else:
            out = self.api.get("/todos", **params)
        return {"todos": out["todos"]}

    def team_push(self, queue: str, **fields: Any) -> dict:
        from ..core import inputs

        team, _ = _checked(lambda: inputs.team_label(inputs.queue(queue)))
        return self.api.post(f"/teams/{remote.seg(team)}/todos", _given(queue=queue, **fields))

    def team_push_many(self, team: str, batches: list[list[dict]], check: Callable[[str], None]) -> list[dict]:
        check(self.api.get(f"/teams/{remote.seg(team)}")["team"]["slug"])
        return [self.api.post(f"/teams/{remote.seg(team)}/todos:batch", {"todos": batch}) for batch in batches]

    # teams
    def team_create(self, slug: str, *, name: str | None) -> dict:
        return self.api.post("/teams", _given(slug=slug, name=name))

    def team_list(self) -> dict:
        return self.api.get("/teams")

    def team_show(self, slug: str) -> dict:
        return self.api.get(f"/teams/{remote.seg(slug)}")

    def team_add(self, slug: str, name: str, *, role: str | None) -> dict:
        return self.api.post(f"/teams/{remote.seg(slug)}/members", _given(human=name, role=role))

    def team_remove(self, slug: str, name: str) -> dict:
        return self.api.delete(f"/teams/{remote.seg(slug)}/members/{remote.seg(name)}")

    def team_role(self, slug: str, name: str, role: str) -> dict:
        return self.api.call("PATCH", f"/teams/{remote.seg(slug)}/members/{remote.seg(name)}", body={"role": role})

    def team_leave(self, slug: str) -> dict:
        return self.api.post(f"/teams/{remote.seg(slug)}/leave")

    def team_delete(self, slug: str) -> dict:
        return self.api.delete(f"/teams/{remote.seg(slug)}")

    def team_grant(self, slug: str, queue: str, endpoint: str) -> dict:
        return self.api.post(f"/teams/{remote.seg(slug)}/grants", {"queue": queue, "endpoint": endpoint})

    def team_ungrant(self, slug: str, queue: str, endpoint: str) -> dict:
        return self.api.delete(f"/teams/{remote.seg(slug)}/grants", {"queue": queue, "endpoint": endpoint})

    # admission policies
    def _policy_path(self, queue: str, endpoint: str | None) -> str:
        scope, name = admission_scope(queue, endpoint)
        return f"/admission/{remote.seg(scope)}/{remote.seg(name)}"

    def policy_set(self, queue: str, endpoint: str | None, *, max_in_flight: int | None,
                   max_claims_per_window: int | None, window: dict) -> dict:
        path = self._policy_path(queue, endpoint)
        return self.api.put(path, {"max_in_flight": max_in_flight, "max_claims_per_window": max_claims_per_window,
                                   "window": _given(**window)})

    def policy_show(self, queue: str, endpoint: str | None) -> dict:
        return self.api.get(self._policy_path(queue, endpoint))

    def policy_clear(self, queue: str, endpoint: str | None) -> dict:
        return self.api.delete(self._policy_path(queue, endpoint))

    def policy_list(self) -> dict:
        return self.api.get("/admission")

    def queue_pause(self, queue: str, endpoint: str | None, *, paused: bool) -> dict:
        return self.api.post(self._policy_path(queue, endpoint) + ("/pause" if paused else "/resume"))

    def todo_show(self, todo_id: str) -> dict:
        return self.api.get(f"/todos/{remote.seg(todo_id)}")["todo"]

    def todo_act(self, action: str, todo_id: str, fields: dict) -> dict:
        return self.api.post(f"/todos/{remote.seg(todo_id)}/{remote.seg(action)}", fields)

    # notify hooks: the API names a hook under its endpoint, the CLI by its id alone
    def _hook_slug(self, hook_id: str) -> str:
        for ep in self.api.get("/endpoints")["endpoints"]:
            for h in self.api.get(f"/endpoints/{remote.seg(ep['slug'])}/hooks")["hooks"]:
                if h["hook_id"] == hook_id.strip().lower():
                    return ep["slug"]
        fail("not_found", "notify hook not found", 1, argument="hook_id", line="not_found: notify hook not found")

    def hook_add(self, slug: str, *, url: str, events: list[str] | None) -> dict:
        return self.api.post(f"/endpoints/{remote.seg(slug)}/hooks", _given(url=url, events=events))

    def hook_list(self, slug: str) -> dict:
        return self.api.get(f"/endpoints/{remote.seg(slug)}/hooks")

    def hook_remove(self, hook_id: str) -> dict:
        slug = self._hook_slug(hook_id)
        return self.api.delete(f"/endpoints/{remote.seg(slug)}/hooks/{remote.seg(hook_id)}")

    def hook_enable(self, hook_id: str) -> dict:
        slug = self._hook_slug(hook_id)
        return self.api.post(f"/endpoints/{remote.seg(slug)}/hooks/{remote.seg(hook_id)}/enable")

    def hook_deliveries(self, slug: str, *, limit: int) -> dict:
        out = self.api.get(f"/endpoints/{remote.seg(slug)}/hooks/deliveries", limit=limit)
        return {"deliveries": [_without(d, "attempt_log") for d in out["deliveries"]]}

    def team_hook_add(self, team: str, *, url: str, events: list[str] | None) -> dict:
        return self.api.post(f"/teams/{remote.seg(team)}/hooks", _given(url=url, events=events))

    def team_hook_list(self, team: str) -> dict:
        return self.api.get(f"/teams/{remote.seg(team)}/hooks")

    def team_hook_remove(self, team: str, hook_id: str) -> dict:
        return self.api.delete(f"/teams/{remote.seg(team)}/hooks/{remote.seg(hook_id)}")

    def team_hook_enable(self, team: str, hook_id: str) -> dict:
        return self.api.post(f"/teams/{remote.seg(team)}/hooks/{remote.seg(hook_id)}/enable")

    def team_hook_deliveries(self, team: str, *, limit: int) -> dict:
        out = self.api.get(f"/teams/{remote.seg(team)}/hooks/deliveries", limit=limit)
        return {"deliveries": [_without(d, "attempt_log") for d in out["deliveries"]]}

    # notification sinks: the human's own, and a team's
    def sink_add(self, **fields: Any) -> dict:
        return self.api.post("/sinks", _given(**fields))

    def sink_list(self) -> dict:
        return self.api.get("/sinks")

    def sink_remove(self, sink_id: str) -> dict:
        return self.api.delete(f"/sinks/{remote.seg(sink_id)}")

    def sink_enable(self, sink_id: str) -> dict:
        return self.api.post(f"/sinks/{remote.seg(sink_id)}/enable")

    def sink_test(self, sink_id: str) -> dict:
        return self.api.post(f"/sinks/{remote.seg(sink_id)}/test")

    def sink_deliveries(self, *, sink_id: str | None, limit: int) -> dict:
        return self.api.get("/sinks/deliveries", sink_id=sink_id, limit=limit)

    def team_sink_add(self, team: str, **fields: Any) -> dict:
        return self.api.post(f"/teams/{remote.seg(team)}/sinks", _given(**fields))

    def team_sink_list(self, team: str) -> dict:
        return self.api.get(f"/teams/{remote.seg(team)}/sinks")

    def team_sink_remove(self, team: str, sink_id: str) -> dict:
        return self.api.delete(f"/teams/{remote.seg(team)}/sinks/{remote.seg(sink_id)}")

    def team_sink_enable(self, team: str, sink_id: str) -> dict:
        return self.api.post(f"/teams/{remote.seg(team)}/sinks/{remote.seg(sink_id)}/enable")

    def team_sink_test(self, team: str, sink_id: str) -> dict:
        return self.api.post(f"/teams/{remote.seg(team)}/sinks/{remote.seg(sink_id)}/test")

    def team_sink_deliveries(self, team: str, *, sink_id: str | None, limit: int) -> dict:
        return self.api.get(f"/teams/{remote.seg(team)}/sinks/deliveries", sink_id=sink_id, limit=limit)

    # webhook intakes: the human's own
    def _intake(self, ref: str, *rest: str) -> str:
        return "/".join([f"/intakes/{_named(ref, NO_INTAKE)}", *rest])

    def _held(self, ref: str, item: str) -> str:
        return self._intake(ref, "quarantine", _named(item, NO_ITEM))

    def intake_create(self, **fields: Any) -> dict:
        return self.api.post("/intakes", _given(**fields))

    def intake_list(self) -> dict:
        return self.api.get("/intakes")

    def intake_show(self, ref: str) -> dict:
        return self.api.get(self._intake(ref))

    def intake_set_rules(self, ref: str, rules: Any) -> dict:
        return self.api.put(self._intake(ref, "rules"), {"rules": rules})

    def intake_set_enabled(self, ref: str, enabled: bool) -> dict:
        return self.api.post(self._intake(ref, "enable" if enabled else "disable"))

    def intake_remove(self, ref: str) -> dict:
        return self.api.delete(self._intake(ref))

    def intake_quarantine(self, ref: str) -> dict:
        return self.api.get(self._intake(ref, "quarantine"))

    def intake_quarantined(self, ref: str, item: str) -> dict:
        return self.api.get(self._held(ref, item))

    def intake_drop(self, ref: str, item: str) -> dict:
        return self.api.delete(self._held(ref, item))

    def intake_replay(self, ref: str, item: str) -> dict:
        return self.api.post(self._held(ref, item) + "/replay")

    # operator settings and sweeps (admins)
    def settings_get(self, key: str | None) -> dict:
        return self.api.get(f"/settings/{remote.seg(key)}" if key else "/settings")

    def settings_set(self, key: str, value: str) -> dict:
        text = value.strip()
        number: Any = int(text) if text.lstrip("+-").isdigit() and text.isascii() else value
        return self.api.put(f"/settings/{remote.seg(key)}", {"value": number})

    def sweep(self) -> dict:
        return self.api.post("/sweeps")

    # the human's own API tokens
    def token_create(self, *, scope: str | None, expires_in_seconds: int | None) -> dict:
        return self.api.post("/tokens", _given(scope=scope, expires_in_seconds=expires_in_seconds))

    def token_list(self) -> dict:
        return {"tokens": [_only(t, TOKEN_ROW) for t in self.api.get("/tokens")["tokens"]]}

    def token_revoke(self, ref: str) -> dict:
        out = self.api.post(f"/tokens/{remote.seg(ref.strip())}/revoke")
        return {"token": _only(out["token"], TOKEN_ROW), "revoked": out["revoked"]}
