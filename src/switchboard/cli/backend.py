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
from .common import fail, fail_usage, human, run, settings


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
VENDED = ("endpoint_id", "slug", "agent", "queues", "verbs", "mcp_url", "credential")
TOKEN_ROW = ("id", "prefix", "created_at", "revoked_at")


def _only(obj: dict, keys: tuple[str, ...]) -> dict:
    return {k: obj[k] for k in keys if k in obj}


def _without(obj: dict, *keys: str) -> dict:
    return {k: v for k, v in obj.items() if k not in keys}


def _given(**fields: Any) -> dict:
    return {k: v for k, v in fields.items() if v is not None}


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
                      lease_ttl: int | None) -> dict:
        from ..core import endpoints

        async def work(core):
            return await endpoints.vend(core, await human(core, self.user), agent=agent, queues=queues,
                                        verbs=verbs, lease_ttl=lease_ttl)

        ep, credential = run(work)
        return {"endpoint_id": ep["endpoint_id"], "slug": ep["slug"], "agent": ep["agent"], "queues": ep["queues"],
                "verbs": ep["verbs"], "mcp_url": self._mcp_url(ep["slug"]), "credential": credential}

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
                  limit: int | None) -> dict:
        from ..core import todos
        from ..core.endpoints import get_for_human

        async def work(core):
            h = await human(core, self.user)
            if slug:
                await get_for_human(core, h, slug)
            return await todos.list_for_human(core, h, endpoint=slug, queue=queue, state=state,
                                              dead_letter=dead_letter, limit=limit)

        return {"todos": run(work)}

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
                      lease_ttl: int | None) -> dict:
        out = self.api.post("/endpoints", _given(agent=agent, queues=queues, verbs=verbs, lease_ttl=lease_ttl))
        return _only(out, VENDED)

    def endpoint_list(self) -> dict:
        return self.api.get("/endpoints")

    def endpoint_show(self, slug: str) -> dict:
        return self.api.get(f"/endpoints/{remote.seg(slug)}")

    def endpoint_revoke(self, slug: str) -> dict:
        return _without(self.api.post(f"/endpoints/{remote.seg(slug)}/revoke"), "mcp_url")

    # todos
    def todo_push(self, slug: str, **fields: Any) -> dict:
        return self.api.post(f"/endpoints/{remote.seg(slug)}/todos", _given(**fields))

    def todo_push_many(self, slug: str, batches: list[list[dict]], check: Callable[[list[str]], None]) -> list[dict]:
        check(self.api.get(f"/endpoints/{remote.seg(slug)}")["endpoint"]["queues"])
        return [self.api.post(f"/endpoints/{remote.seg(slug)}/todos:batch", {"todos": batch}) for batch in batches]

    def todo_list(self, slug: str | None, *, state: str | None, queue: str | None, dead_letter: bool,
                  limit: int | None) -> dict:
        params = _given(state=state, queue=queue, limit=limit, dead_letter=True if dead_letter else None)
        if slug:
            out = self.api.get(f"/endpoints/{remote.seg(slug)}/todos", **params)
        else:
            out = self.api.get("/todos", **params)
        return {"todos": out["todos"]}

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
