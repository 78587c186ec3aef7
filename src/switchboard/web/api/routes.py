"""The human API's operations, one table (`OPERATIONS`): method, path, models, scope and handler.

The Starlette routes and the OpenAPI document (`openapi.py`) are both built from this table; each
handler gets its body and query already validated by the operation's models and calls the same core
function the CLI command of the same name calls, answering the CLI's `--json` shape.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import Response

from ...core import (
    actions,
    admission,
    api_tokens,
    endpoint_terms,
    endpoints,
    hooks,
    inputs,
    intakes,
    producer,
    settings_store,
    sinks,
    sweeps,
    teams,
    todos,
)
from ...core.api_tokens import TokenCaller
from ...core.errors import Invalid
from ..sinks import send_test
from . import models as m
from .kit import ApiError, handle, json_reply, parse_body, parse_query, read_raw

IDEMPOTENCY_HEADER = "Idempotency-Key"


@dataclass
class Call:
    """One admitted request: the caller, the validated body and query, the path parameters."""

    request: Request
    caller: TokenCaller
    body: BaseModel | None
    query: BaseModel | None

    @property
    def core(self):
        return self.request.app.state.ctx.core

    @property
    def human(self):
        return self.caller.human

    def path(self, name: str) -> str:
        return self.request.path_params[name]

    def fields(self) -> dict[str, Any]:
        """The body fields the caller sent (an absent field stays absent, as on the CLI)."""
        if self.body is None:
            return {}
        return {name: getattr(self.body, name) for name in self.body.model_fields_set}


Run = Callable[[Call], Awaitable[Response]]


@dataclass(frozen=True)
class Operation:
    method: str
    path: str
    name: str          # the operationId
    tag: str
    summary: str
    run: Run
    reply: type[BaseModel]
    status: int = 200
    body: type[BaseModel] | None = None
    query: type[BaseModel] | None = None
    admin: bool = False
    description: str = ""
    headers: tuple[tuple[str, str], ...] = field(default=())  # (request header, description)
    also: tuple[int, ...] = ()  # other success statuses, answering the same reply

    @property
    def write(self) -> bool:
        return self.method not in ("GET", "HEAD")


def endpoint_for(op: Operation) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        async def work(caller: TokenCaller) -> Response:
            query = parse_query(request, op.query) if op.query else None
            body = parse_body(await read_raw(request), op.body) if op.body else None
            return await op.run(Call(request, caller, body, query))

        return await handle(request, work, write=op.write, admin=op.admin)

    endpoint.__name__ = op.name
    return endpoint


def _mcp_url(call: Call, slug: str) -> str:
    return f"{call.request.app.state.ctx.settings.public_base_url}/mcp/{slug}"


def _with_url(call: Call, ep: dict) -> dict:
    return dict(ep, mcp_url=_mcp_url(call, ep["slug"]))


# -------------------------------------------------------------------------------------- endpoints

async def vend(call: Call) -> Response:
    f = call.fields()
    try:
        ep, credential = await endpoints.vend(call.core, call.human, agent=f.get("agent"), queues=f.get("queues"),
                                              verbs=f.get("verbs"), lease_ttl=f.get("lease_ttl"),
                                              expires_in_seconds=f.get("expires_in_seconds"))
    except Invalid as exc:  # the core names one queue or verb (the CLI's repeatable flags); the body has lists
        if exc.argument in ("queue", "verb"):
            exc.argument += "s"
        raise
    out = {"endpoint_id": ep["endpoint_id"], "slug": ep["slug"], "agent": ep["agent"], "queues": ep["queues"],
           "verbs": ep["verbs"], "mcp_url": _mcp_url(call, ep["slug"]), "credential": credential,
           "expires_at": ep["expires_at"]}
    if "awaiting_grant" in ep:  # team queues a plain member named wait for an owner's or admin's grant
        out["awaiting_grant"] = ep["awaiting_grant"]
    return json_reply(out, 201, secret=True)


async def list_endpoints(call: Call) -> Response:
    rows = await endpoints.list_for_human(call.core, call.human)
    return json_reply({"endpoints": [_with_url(call, e) for e in rows]})


async def show_endpoint(call: Call) -> Response:
    row = await endpoints.get_for_human(call.core, call.human, call.path("slug"))
    return json_reply({"endpoint": _with_url(call, endpoints.public(row))})


async def change_endpoint(call: Call) -> Response:
    out = await endpoint_terms.change(call.core, call.human, call.path("slug"), **call.fields())
    return json_reply({"endpoint": _with_url(call, out)})


async def revoke_endpoint(call: Call) -> Response:
    out = await endpoints.revoke(call.core, call.human, call.path("slug"))
    return json_reply(_with_url(call, out))


# ------------------------------------------------------------------------------------------ todos

def _push_fields(call: Call) -> dict[str, Any]:
    """The push body's fields, with the `Idempotency-Key` header as the todo's key."""
    f = call.fields()
    header = call.request.headers.get(IDEMPOTENCY_HEADER)
    if header is not None:
        key = inputs.text(header, IDEMPOTENCY_HEADER, max_chars=inputs.KEY_MAX_CHARS, required=True)
        if f.get("key") is not None and f["key"] != key:
            raise Invalid(f"the body's key and the {IDEMPOTENCY_HEADER} header differ; send one of them",
                          argument=IDEMPOTENCY_HEADER)
        f["key"] = key
    return f


async def push_todo(call: Call) -> Response:
    f = _push_fields(call)
    todo, created = await producer.push(call.core, call.human, call.path("slug"), source="api", **f)
    return json_reply({"todo": todo, "created": created}, 201 if created else 200)


def _no_batch_key_header(call: Call) -> None:
    """A batch's keys are per todo (each item's `key`): one header cannot name them, so it is refused
    rather than ignored (ignored, a retried batch would push every todo again)."""
    if IDEMPOTENCY_HEADER.lower() in call.request.headers:
        raise Invalid(f"a batch takes no {IDEMPOTENCY_HEADER} header; give each todo its own key",
                      argument=IDEMPOTENCY_HEADER)


async def push_todos(call: Call) -> Response:
    _no_batch_key_header(call)
    body = call.body
    assert isinstance(body, m.PushManyRequest)
    items = [item.model_dump(exclude_unset=True) for item in body.todos]
    results = await producer.push_many(call.core, call.human, call.path("slug"), items, source="api")
    reply = producer.batch_reply(results)
    return json_reply(reply, 201 if reply["created"] else 200)


async def _list(call: Call, slug: str | None, team: str | None = None) -> Response:
    q = call.query
    assert isinstance(q, m.TodoListQuery)
    if slug is not None:
        await endpoints.get_for_human(call.core, call.human, slug)  # another human's slug is not_found
    if team is not None:
        await teams.membership(call.core, call.human, team)  # a team they are not in is not_found
    limit = inputs.count(q.limit, "limit", default=inputs.LIST_LIMIT_DEFAULT, low=1, high=inputs.OWNER_LIST_LIMIT_MAX)
    offset = q.offset or 0
    rows = await todos.list_for_human(call.core, call.human, endpoint=slug, queue=q.queue, state=q.state,
                                      dead_letter=q.dead_letter, limit=limit, offset=offset, team=team)
    more = len(rows) == limit and offset + limit <= inputs.OFFSET_MAX
    return json_reply({"todos": rows, "next_offset": offset + limit if more else None})


async def list_endpoint_todos(call: Call) -> Response:
    return await _list(call, call.path("slug"))


async def list_todos(call: Call) -> Response:
    assert isinstance(call.query, m.AllTodosQuery)
    return await _list(call, call.query.endpoint, call.query.team)


async def show_todo(call: Call) -> Response:
    q = call.query
    todo = await todos.get(call.core, call.human, call.path("id"),
                           attempts_limit=q.attempts_limit if isinstance(q, m.TodoShowQuery) else None)
    return json_reply({"todo": todo})


def _act(name: str) -> Run:
    async def run(call: Call) -> Response:
        todo = await actions.perform(call.core, call.human, name, call.path("id"), via="api", **call.fields())
        return json_reply({"todo": todo})

    return run


# ------------------------------------------------------------------------------------------ hooks

async def add_hook(call: Call) -> Response:
    f = call.fields()
    hook, secret = await hooks.add(call.core, call.human, call.path("slug"), url=f.get("url"),
                                   events=f.get("events"))
    return json_reply({"hook": hook, "signing_secret": secret}, 201, secret=True)


async def list_hooks(call: Call) -> Response:
    return json_reply({"hooks": await hooks.list_for_endpoint(call.core, call.human, call.path("slug"))})


async def remove_hook(call: Call) -> Response:
    return json_reply({"removed": await hooks.remove(call.core, call.human, call.path("hook_id"),
                                                     slug=call.path("slug"))})


async def enable_hook(call: Call) -> Response:
    return json_reply({"hook": await hooks.enable(call.core, call.human, call.path("hook_id"),
                                                  slug=call.path("slug"))})


async def hook_deliveries(call: Call) -> Response:
    assert isinstance(call.query, m.DeliveriesQuery)
    rows = await hooks.deliveries(call.core, call.human, slug=call.path("slug"), hook_id=call.query.hook_id,
                                  limit=call.query.limit, with_attempts=True)
    return json_reply({"deliveries": rows})


async def add_team_hook(call: Call) -> Response:
    f = call.fields()
    hook, secret = await hooks.add_for_team(call.core, call.human, call.path("team"), url=f.get("url"),
                                            events=f.get("events"))
    return json_reply({"hook": hook, "signing_secret": secret}, 201, secret=True)


async def list_team_hooks(call: Call) -> Response:
    return json_reply({"hooks": await hooks.list_for_team(call.core, call.human, call.path("team"))})


async def remove_team_hook(call: Call) -> Response:
    return json_reply({"removed": await hooks.remove_for_team(call.core, call.human, call.path("team"),
                                                              call.path("hook_id"))})


async def enable_team_hook(call: Call) -> Response:
    return json_reply({"hook": await hooks.enable_for_team(call.core, call.human, call.path("team"),
                                                           call.path("hook_id"))})


async def team_hook_deliveries(call: Call) -> Response:
    assert isinstance(call.query, m.DeliveriesQuery)
    rows = await hooks.deliveries_for_team(call.core, call.human, call.path("team"), hook_id=call.query.hook_id,
                                           limit=call.query.limit, with_attempts=True)
    return json_reply({"deliveries": rows})


# ------------------------------------------------------------------------------------------ sinks

async def add_sink(call: Call) -> Response:
    # The URL is shown unredacted this once (it may carry the chat's token): never cached.
    return json_reply({"sink": await sinks.add(call.core, call.human, **call.fields())}, 201, secret=True)


async def list_sinks(call: Call) -> Response:
    return json_reply({"sinks": await sinks.list_for_owner(call.core, call.human)})


async def remove_sink(call: Call) -> Response:
    return json_reply({"removed": await sinks.remove(call.core, call.human, call.path("sink_id"))})


async def enable_sink(call: Call) -> Response:
    return json_reply({"sink": await sinks.enable(call.core, call.human, call.path("sink_id"))})


async def send_sink_test(call: Call) -> Response:
    return json_reply({"test": await send_test(call.core, call.human, call.path("sink_id"))})


async def sink_deliveries(call: Call) -> Response:
    assert isinstance(call.query, m.SinkDeliveriesQuery)
    rows = await sinks.deliveries(call.core, call.human, sink_id=call.query.sink_id, limit=call.query.limit)
    return json_reply({"deliveries": rows})


async def add_team_sink(call: Call) -> Response:
    sink = await sinks.add_for_team(call.core, call.human, call.path("team"), **call.fields())
    return json_reply({"sink": sink}, 201, secret=True)


async def list_team_sinks(call: Call) -> Response:
    return json_reply({"sinks": await sinks.list_for_team(call.core, call.human, call.path("team"))})


async def remove_team_sink(call: Call) -> Response:
    return json_reply({"removed": await sinks.remove_for_team(call.core, call.human, call.path("team"),
                                                              call.path("sink_id"))})


async def enable_team_sink(call: Call) -> Response:
    return json_reply({"sink": await sinks.enable_for_team(call.core, call.human, call.path("team"),
                                                           call.path("sink_id"))})


async def send_team_sink_test(call: Call) -> Response:
    return json_reply({"test": await send_test(call.core, call.human, call.path("sink_id"), team=call.path("team"))})


async def team_sink_deliveries(call: Call) -> Response:
    assert isinstance(call.query, m.SinkDeliveriesQuery)
    rows = await sinks.deliveries_for_team(call.core, call.human, call.path("team"), sink_id=call.query.sink_id,
                                           limit=call.query.limit)
    return json_reply({"deliveries": rows})


# ---------------------------------------------------------------------------------------- intakes

def _rules(value: Any) -> Any:
    """The validated rules as the JSON the core checks and stores (a field sent as null left out)."""
    if value is None:
        return None
    return [rule.model_dump(exclude_none=True) for rule in value]


async def create_intake(call: Call) -> Response:
    f = call.fields()
    if "rules" in f:
        f["rules"] = _rules(f["rules"])
    intake, token, secret = await intakes.create(call.core, call.human, **f)
    url = call.request.app.state.ctx.settings.public_base_url + intakes.hook_path(token)
    # The URL's token and the secret are shown this once: never cached.
    return json_reply({"intake": intake, "url": url, "token": token, "secret": secret}, 201, secret=True)


async def list_intakes(call: Call) -> Response:
    return json_reply({"intakes": await intakes.list_for_human(call.core, call.human)})


async def show_intake(call: Call) -> Response:
    return json_reply({"intake": await intakes.get(call.core, call.human, call.path("intake"))})


async def set_intake_rules(call: Call) -> Response:
    assert isinstance(call.body, m.IntakeRulesRequest)
    intake = await intakes.set_rules(call.core, call.human, call.path("intake"), _rules(call.body.rules))
    return json_reply({"intake": intake})


def _intake_enabled(enabled: bool) -> Run:
    async def run(call: Call) -> Response:
        return json_reply({"intake": await intakes.set_enabled(call.core, call.human, call.path("intake"), enabled)})

    return run


async def remove_intake(call: Call) -> Response:
    return json_reply({"removed": await intakes.remove(call.core, call.human, call.path("intake"))})


async def list_quarantine(call: Call) -> Response:
    assert isinstance(call.query, m.QuarantineQuery)
    rows = await intakes.quarantine(call.core, call.human, call.path("intake"), limit=call.query.limit)
    return json_reply({"quarantine": rows})


async def show_quarantined(call: Call) -> Response:
    return json_reply({"item": await intakes.quarantined(call.core, call.human, call.path("intake"),
                                                         call.path("item"))})


async def drop_quarantined(call: Call) -> Response:
    return json_reply({"dropped": await intakes.drop(call.core, call.human, call.path("intake"), call.path("item"))})


async def replay_quarantined(call: Call) -> Response:
    todo, created = await intakes.replay(call.core, call.human, call.path("intake"), call.path("item"))
    return json_reply({"todo": todo, "created": created}, 201 if created else 200)


# ------------------------------------------------------------------------------------------ teams

async def create_team(call: Call) -> Response:
    f = call.fields()
    return json_reply({"team": await teams.create(call.core, call.human, f.get("slug"), f.get("name"))}, 201)


async def list_teams(call: Call) -> Response:
    return json_reply({"teams": await teams.list_for_human(call.core, call.human)})


async def show_team(call: Call) -> Response:
    return json_reply({"team": await teams.show(call.core, call.human, call.path("team"))})


async def delete_team(call: Call) -> Response:
    return json_reply(await teams.delete(call.core, call.human, call.path("team")))


async def add_member(call: Call) -> Response:
    f = call.fields()
    out = await teams.add_member(call.core, call.human, call.path("team"), f.get("human"),
                                 f.get("role") or "member")
    return json_reply(out, 201)


async def change_member(call: Call) -> Response:
    assert isinstance(call.body, m.RoleRequest)
    return json_reply(await teams.set_role(call.core, call.human, call.path("team"), call.path("human"),
                                           call.body.role))


async def remove_member(call: Call) -> Response:
    return json_reply(await teams.remove_member(call.core, call.human, call.path("team"), call.path("human")))


async def leave_team(call: Call) -> Response:
    return json_reply(await teams.leave(call.core, call.human, call.path("team")))


async def grant_queue(call: Call) -> Response:
    assert isinstance(call.body, m.GrantRequest)
    return json_reply(await teams.grant(call.core, call.human, call.path("team"), call.body.queue,
                                        call.body.endpoint))


async def ungrant_queue(call: Call) -> Response:
    assert isinstance(call.body, m.GrantRequest)
    return json_reply(await teams.ungrant(call.core, call.human, call.path("team"), call.body.queue,
                                          call.body.endpoint))


async def push_team_todos(call: Call) -> Response:
    _no_batch_key_header(call)
    body = call.body
    assert isinstance(body, m.TeamPushManyRequest)
    items = [item.model_dump(exclude_unset=True) for item in body.todos]
    results = await producer.push_team_many(call.core, call.human, call.path("team"), items, source="api")
    reply = producer.batch_reply(results)
    return json_reply(reply, 201 if reply["created"] else 200)


async def push_team_todo(call: Call) -> Response:
    f = _push_fields(call)
    team = (await teams.membership(call.core, call.human, call.path("team")))["slug"]  # outside: not_found
    label = inputs.team_queue_label(team, f.pop("queue", None))
    todo, created = await producer.push_team(call.core, call.human, label, source="api", **f)
    return json_reply({"todo": todo, "created": created}, 201 if created else 200)


# -------------------------------------------------------------------------------------- admission

SCOPES = ("endpoint", "team")


def _queue_identity(call: Call) -> tuple[str, str | None]:
    """The queue and endpoint of `/admission/{scope}/{queue}`: `endpoint:<slug>` names an endpoint's
    queue, `team:<team-slug>` a team queue (its label `team:<team-slug>/<queue>`)."""
    kind, sep, name = call.path("scope").partition(":")
    if not sep or kind not in SCOPES or not name:
        raise Invalid("scope is endpoint:<endpoint-slug> or team:<team-slug>", argument="scope")
    queue = call.path("queue")
    if kind == "team":
        inputs.team_slug(name, "scope")
        return f"{inputs.TEAM_PREFIX}{name}/{inputs.queue(queue)}", None
    return queue, name


def _window(body: m.PolicyRequest) -> admission.Window:
    w = body.window
    if w is None:
        return admission.window()
    return admission.window("hour" if w.period is None else w.period, "UTC" if w.tz is None else w.tz,
                            "00:00" if w.start is None else w.start, w.weekday)


async def list_policies(call: Call) -> Response:
    return json_reply({"policies": await admission.list_for_human(call.core, call.human)})


async def show_policy(call: Call) -> Response:
    queue, endpoint = _queue_identity(call)
    return json_reply({"policy": await admission.show(call.core, call.human, queue, endpoint=endpoint)})


async def set_policy(call: Call) -> Response:
    body = call.body
    assert isinstance(body, m.PolicyRequest)
    queue, endpoint = _queue_identity(call)
    policy = await admission.set_policy(call.core, call.human, queue, endpoint=endpoint,
                                        max_in_flight=body.max_in_flight,
                                        max_claims_per_window=body.max_claims_per_window,
                                        window_spec=_window(body), paused=body.paused)
    return json_reply({"policy": policy})


async def clear_policy(call: Call) -> Response:
    queue, endpoint = _queue_identity(call)
    return json_reply(await admission.clear(call.core, call.human, queue, endpoint=endpoint))


def _pause(paused: bool) -> Run:
    async def run(call: Call) -> Response:
        queue, endpoint = _queue_identity(call)
        return json_reply({"policy": await admission.set_paused(call.core, call.human, queue, paused,
                                                                endpoint=endpoint)})

    return run


# --------------------------------------------------------------------------------------- settings

async def get_settings(call: Call) -> Response:
    return json_reply(await settings_store.all_settings(call.core))


async def get_setting(call: Call) -> Response:
    key = call.path("key")
    return json_reply({key: await settings_store.get(call.core, key)})


async def set_setting(call: Call) -> Response:
    key = call.path("key")
    assert isinstance(call.body, m.SettingRequest)
    return json_reply({key: await settings_store.set_value(call.core, key, call.body.value)})


async def sweep_now(call: Call) -> Response:
    report = await sweeps.sweep_once(call.core)
    return json_reply(report.as_dict())


# ----------------------------------------------------------------------------------------- tokens

async def create_token(call: Call) -> Response:
    f = call.fields()
    token, row = await api_tokens.create(call.core, call.human, scope_name=f.get("scope"),
                                         expires_in_seconds=f.get("expires_in_seconds"))
    out = {"token": token, "id": row["id"], "prefix": row["prefix"], "user": call.human.name,
           "scope": row["scope"], "expires_at": row["expires_at"]}
    return json_reply(out, 201, secret=True)


async def list_tokens(call: Call) -> Response:
    return json_reply({"tokens": await api_tokens.list_for(call.core, call.human)})


async def revoke_token(call: Call) -> Response:
    row, now = await api_tokens.revoke(call.core, call.human, call.path("ref"))
    return json_reply({"token": row, "revoked": now})


async def me(call: Call) -> Response:
    mine = [t for t in await api_tokens.list_for(call.core, call.human) if t["id"] == call.caller.token_id]
    if not mine:  # revoked between the check and now
        raise ApiError(401, "unauthorized", "a valid API token is required")
    return json_reply({"user": call.human.name, "admin": call.caller.is_admin, "token": mine[0]})


# ------------------------------------------------------------------------------------------ table

def _action_operations() -> list[Operation]:
    return [Operation("POST", f"/api/v1/todos/{{id}}/{a.name}", f"todo_{a.name}", "todos",
                      a.help.split(";")[0].rstrip("."), _act(a.name), m.TodoReply,
                      body=m.ACTION_MODELS[a.name], description=a.help + " The `todo` answered is the todo after it.")
            for a in actions.ACTIONS.values()]


OPERATIONS: list[Operation] = [
    Operation("GET", "/api/v1/me", "me", "tokens", "Who the token acts as", me, m.Me,
              description="The token's human, whether they are an admin, and the token itself."),
    # endpoints
    Operation("POST", "/api/v1/endpoints", "endpoint_vend", "endpoints", "Vend an endpoint", vend, m.Vended,
              status=201, body=m.VendRequest,
              description="An MCP endpoint for one of your agents: its URL and credential, shown once "
                          "(`switchboard endpoint vend`)."),
    Operation("GET", "/api/v1/endpoints", "endpoint_list", "endpoints", "List your endpoints", list_endpoints,
              m.EndpointList, description="Never a credential, only its display prefix."),
    Operation("GET", "/api/v1/endpoints/{slug}", "endpoint_show", "endpoints", "Show an endpoint", show_endpoint,
              m.EndpointReply),
    Operation("PATCH", "/api/v1/endpoints/{slug}", "endpoint_change", "endpoints", "Change an endpoint's expiry or "
              "default lease", change_endpoint, m.EndpointReply, body=m.EndpointChange,
              description="Only the fields sent change. A revoked endpoint is a conflict (409)."),
    Operation("POST", "/api/v1/endpoints/{slug}/revoke", "endpoint_revoke", "endpoints", "Revoke an endpoint",
              revoke_endpoint, m.RevokedEndpoint,
              description="Its credential stops working at once and its live todos become dead letters. "
                          "Revoking a revoked endpoint changes nothing."),
    # todos
    Operation("POST", "/api/v1/endpoints/{slug}/todos", "todo_push", "todos", "Push a todo", push_todo,
              m.PushReply, status=201, also=(200,), body=m.PushRequest,
              headers=((IDEMPOTENCY_HEADER, "The todo's idempotency key (as the body's `key`; if both are "
                                            "sent they must be equal)."),),
              description="201 with `created: true`; 200 with `created: false` when a live todo already "
                          "has this key."),
    Operation("POST", "/api/v1/endpoints/{slug}/todos:batch", "todo_push_batch", "todos", "Push many todos",
              push_todos, m.PushManyReply, status=201, also=(200,), body=m.PushManyRequest,
              description=f"Up to {inputs.PUSH_BATCH_MAX} todos in one statement, answered in order, each "
                          "`created` or the live todo already holding its key (an item repeating an earlier "
                          "item's key gets that item's todo). A bad item is `invalid` naming "
                          "`todos[i].field` and nothing is pushed. 201 when any todo was created, else 200. "
                          "The body cap (1 MiB) applies: past it the answer is 413 `too_large`."),
    Operation("GET", "/api/v1/endpoints/{slug}/todos", "endpoint_todo_list", "todos", "List an endpoint's todos",
              list_endpoint_todos, m.TodoList, query=m.TodoListQuery,
              description="Newest first, paged by `offset` (`next_offset` in the answer)."),
    Operation("GET", "/api/v1/todos", "todo_list", "todos", "List your todos", list_todos, m.TodoList,
              query=m.AllTodosQuery, description="Newest first, paged by `offset` (`next_offset` in the answer)."),
    Operation("GET", "/api/v1/todos/{id}", "todo_show", "todos", "Show a todo with its attempts", show_todo,
              m.TodoReply, query=m.TodoShowQuery,
              description="The owner's view: payload, result, input and every kept attempt, newest first."),
    *_action_operations(),
    # hooks (the paths and answers they had when web/hooks.py served them)
    Operation("POST", "/api/v1/endpoints/{slug}/hooks", "hook_add", "hooks", "Add a notify hook", add_hook,
              m.HookCreated, status=201, body=m.HookRequest,
              description="A signed webhook of the endpoint's todo events; the signing secret is shown once."),
    Operation("GET", "/api/v1/endpoints/{slug}/hooks", "hook_list", "hooks", "List an endpoint's notify hooks",
              list_hooks, m.HookList, description="Never a secret; a URL's query string is redacted."),
    Operation("GET", "/api/v1/endpoints/{slug}/hooks/deliveries", "hook_deliveries", "hooks",
              "The delivery log of an endpoint's hooks", hook_deliveries, m.DeliveryList, query=m.DeliveriesQuery,
              description="Newest first, each with its attempts."),
    Operation("DELETE", "/api/v1/endpoints/{slug}/hooks/{hook_id}", "hook_remove", "hooks", "Remove a notify hook",
              remove_hook, m.HookRemoved, description="With its pending notifications."),
    Operation("POST", "/api/v1/endpoints/{slug}/hooks/{hook_id}/enable", "hook_enable", "hooks",
              "Enable a disabled notify hook", enable_hook, m.HookReply,
              description="Its failure count starts again at 0."),
    # a team's hooks
    Operation("POST", "/api/v1/teams/{team}/hooks", "team_hook_add", "hooks", "Add a notify hook to a team",
              add_team_hook, m.HookCreated, status=201, body=m.HookRequest,
              description="Owners and admins: a signed webhook of the team's todo events (the body names the "
                          "team, `endpoint` null); the signing secret is shown once. A team you are not a member "
                          "of is 404, the same body as one that does not exist; a plain member is 403."),
    Operation("GET", "/api/v1/teams/{team}/hooks", "team_hook_list", "hooks", "List a team's notify hooks",
              list_team_hooks, m.HookList,
              description="Any member. Never a secret; a URL's query string is redacted."),
    Operation("GET", "/api/v1/teams/{team}/hooks/deliveries", "team_hook_deliveries", "hooks",
              "The delivery log of a team's hooks", team_hook_deliveries, m.DeliveryList, query=m.DeliveriesQuery,
              description="Any member. Newest first, each with its attempts."),
    Operation("DELETE", "/api/v1/teams/{team}/hooks/{hook_id}", "team_hook_remove", "hooks",
              "Remove a team's notify hook", remove_team_hook, m.HookRemoved,
              description="Owners and admins, with its pending notifications."),
    Operation("POST", "/api/v1/teams/{team}/hooks/{hook_id}/enable", "team_hook_enable", "hooks",
              "Enable a team's disabled notify hook", enable_team_hook, m.HookReply,
              description="Owners and admins. Its failure count starts again at 0."),
    # notification sinks (the paths and answers they had when web/sinks_api.py served them)
    Operation("POST", "/api/v1/sinks", "sink_add", "sinks", "Add a notification sink", add_sink, m.SinkReply,
              status=201, body=m.SinkRequest,
              description="A chat webhook of yours for dead letters, stuck queues and a daily digest of every queue "
                          "of your endpoints (and of the teams you own or administer). Every field is checked "
                          "before anything is stored; the URL is shown unredacted in this answer only."),
    Operation("GET", "/api/v1/sinks", "sink_list", "sinks", "List your notification sinks", list_sinks, m.SinkList,
              description="A URL's query string is redacted."),
    Operation("GET", "/api/v1/sinks/deliveries", "sink_deliveries", "sinks", "The messages of your sinks",
              sink_deliveries, m.SinkDeliveryList, query=m.SinkDeliveriesQuery,
              description="Newest first, each with how its last attempt went."),
    Operation("DELETE", "/api/v1/sinks/{sink_id}", "sink_remove", "sinks", "Remove a notification sink",
              remove_sink, m.SinkRemoved, description="With its queued messages."),
    Operation("POST", "/api/v1/sinks/{sink_id}/enable", "sink_enable", "sinks",
              "Enable a disabled notification sink", enable_sink, m.SinkReply,
              description="Its failure count starts again at 0."),
    Operation("POST", "/api/v1/sinks/{sink_id}/test", "sink_test", "sinks", "Send a test message to a sink",
              send_sink_test, m.SinkTestReply,
              description="Posted now, not through the queue; the answer says how it went (`delivered`). It never "
                          "counts towards disabling the sink."),
    # a team's notification sinks
    Operation("POST", "/api/v1/teams/{team}/sinks", "team_sink_add", "sinks", "Add a notification sink to a team",
              add_team_sink, m.SinkReply, status=201, body=m.SinkRequest,
              description="Owners and admins: a chat webhook of the team's dead letters, stuck queues and digest "
                          "(`owner` names the team), whoever manages the team. A team you are not a member of is "
                          "404, the same body as one that does not exist; a plain member is 403."),
    Operation("GET", "/api/v1/teams/{team}/sinks", "team_sink_list", "sinks", "List a team's notification sinks",
              list_team_sinks, m.SinkList, description="Any member. A URL's query string is redacted."),
    Operation("GET", "/api/v1/teams/{team}/sinks/deliveries", "team_sink_deliveries", "sinks",
              "The messages of a team's sinks", team_sink_deliveries, m.SinkDeliveryList,
              query=m.SinkDeliveriesQuery, description="Any member. Newest first."),
    Operation("DELETE", "/api/v1/teams/{team}/sinks/{sink_id}", "team_sink_remove", "sinks",
              "Remove a team's notification sink", remove_team_sink, m.SinkRemoved,
              description="Owners and admins, with its queued messages."),
    Operation("POST", "/api/v1/teams/{team}/sinks/{sink_id}/enable", "team_sink_enable", "sinks",
              "Enable a team's disabled notification sink", enable_team_sink, m.SinkReply,
              description="Owners and admins. Its failure count starts again at 0."),
    Operation("POST", "/api/v1/teams/{team}/sinks/{sink_id}/test", "team_sink_test", "sinks",
              "Send a test message to a team's sink", send_team_sink_test, m.SinkTestReply,
              description="Owners and admins, as for your own sinks."),
    # webhook intakes (the paths and answers they had when web/intake_api.py served them)
    Operation("POST", "/api/v1/intakes", "intake_create", "intakes", "Create a webhook intake", create_intake,
              m.IntakeCreated, status=201, body=m.IntakeRequest,
              description="Signed webhooks from another system become todos on one queue of one of your endpoints, "
                          "shaped by the routing rules (`switchboard intake create`). Every rule's expressions are "
                          "compiled first; a bad one is `invalid` naming `rules[i].field`. The URL (its token) and "
                          "the secret are in this answer only."),
    Operation("GET", "/api/v1/intakes", "intake_list", "intakes", "List your intakes", list_intakes, m.IntakeList,
              description="With their counters; never a secret, only the URL token's prefix."),
    Operation("GET", "/api/v1/intakes/{intake}", "intake_show", "intakes", "Show an intake", show_intake,
              m.IntakeReply, description="Its target, counters and rules."),
    Operation("DELETE", "/api/v1/intakes/{intake}", "intake_remove", "intakes", "Remove an intake", remove_intake,
              m.IntakeRemoved, description="With its quarantine; its URL stops working at once."),
    Operation("PUT", "/api/v1/intakes/{intake}/rules", "intake_rules_set", "intakes", "Replace an intake's rules",
              set_intake_rules, m.IntakeReply, body=m.IntakeRulesRequest,
              description="Every expression is compiled first; a bad one is `invalid` naming `rules[i].field` and "
                          "the rules stay as they were."),
    Operation("POST", "/api/v1/intakes/{intake}/disable", "intake_disable", "intakes", "Pause an intake",
              _intake_enabled(False), m.IntakeReply, body=m.EmptyRequest,
              description="Its URL answers 401, as for an unknown one, and nothing is stored until it is enabled."),
    Operation("POST", "/api/v1/intakes/{intake}/enable", "intake_enable", "intakes", "Resume a paused intake",
              _intake_enabled(True), m.IntakeReply, body=m.EmptyRequest),
    Operation("GET", "/api/v1/intakes/{intake}/quarantine", "intake_quarantine", "intakes",
              "List an intake's quarantined deliveries", list_quarantine, m.QuarantineList, query=m.QuarantineQuery,
              description="The deliveries no rule matched, or whose rule failed, newest first, with the reason."),
    Operation("GET", "/api/v1/intakes/{intake}/quarantine/{item}", "intake_quarantine_show", "intakes",
              "Show a quarantined delivery", show_quarantined, m.QuarantinedReply,
              description="With the delivery document the rules saw."),
    Operation("DELETE", "/api/v1/intakes/{intake}/quarantine/{item}", "intake_quarantine_drop", "intakes",
              "Drop a quarantined delivery", drop_quarantined, m.DroppedReply, description="Gone for good."),
    Operation("POST", "/api/v1/intakes/{intake}/quarantine/{item}/replay", "intake_replay", "intakes",
              "Replay a quarantined delivery", replay_quarantined, m.Replayed, status=201, also=(200,),
              description="Routed again with the intake's current rules: 201 with `created: true` when it became a "
                          "todo, 200 with `created: false` when a live todo already had its key; either way it "
                          "leaves the quarantine. Still no todo: 409 `conflict` (`still quarantined: …`, argument "
                          "`rules`), and it stays with the new reason."),
    # teams
    Operation("POST", "/api/v1/teams", "team_create", "teams", "Create a team", create_team, m.TeamCreated,
              status=201, body=m.TeamRequest,
              description="You are its first owner (`switchboard team create`). A slug in use is a conflict (409)."),
    Operation("GET", "/api/v1/teams", "team_list", "teams", "List your teams", list_teams, m.TeamList,
              description="The teams you belong to, with your role and their member counts."),
    Operation("GET", "/api/v1/teams/{team}", "team_show", "teams", "Show a team", show_team, m.TeamReply,
              description="Members and roles, the team's queues with counts, and their grants. A team you are not "
                          "a member of is 404, the same body as one that does not exist."),
    Operation("DELETE", "/api/v1/teams/{team}", "team_delete", "teams", "Delete a team", delete_team,
              m.TeamDeleted, description="Owners only: its todos, their attempts, grants and policies go with it."),
    Operation("POST", "/api/v1/teams/{team}/members", "team_member_add", "teams", "Add a member", add_member,
              m.Membership, status=201, body=m.MemberRequest,
              description="Owners and admins (an owner only by an owner). Already a member: conflict (409)."),
    Operation("PATCH", "/api/v1/teams/{team}/members/{human}", "team_member_role", "teams",
              "Change a member's role", change_member, m.Membership, body=m.RoleRequest,
              description="Owners and admins; making or unmaking an owner takes an owner, and the last owner "
                          "stays (409)."),
    Operation("DELETE", "/api/v1/teams/{team}/members/{human}", "team_member_remove", "teams", "Remove a member",
              remove_member, m.MemberRemoved,
              description="Owners and admins (an owner only by an owner; the last owner stays, 409). Their endpoints "
                          "lose the team's queues at once, and the team todos they hold go back to the queue."),
    Operation("POST", "/api/v1/teams/{team}/leave", "team_leave", "teams", "Leave a team", leave_team, m.TeamLeft,
              description="The team todos your endpoints hold go back to the queue. The last owner cannot leave "
                          "(409)."),
    Operation("POST", "/api/v1/teams/{team}/grants", "team_grant", "teams", "Grant a team queue to an endpoint",
              grant_queue, m.Granted, body=m.GrantRequest,
              description="Owners and admins: a member's endpoint may claim on the team queue from now on."),
    Operation("DELETE", "/api/v1/teams/{team}/grants", "team_ungrant", "teams", "Take a team queue back",
              ungrant_queue, m.Granted, body=m.GrantRequest,
              description="Owners and admins: the endpoint no longer reaches the queue, and the todos it holds "
                          "there go back to it."),
    Operation("POST", "/api/v1/teams/{team}/todos", "team_todo_push", "teams", "Push a todo on a team queue",
              push_team_todo, m.PushReply, status=201, also=(200,), body=m.TeamPushRequest,
              headers=((IDEMPOTENCY_HEADER, "The todo's idempotency key (as the body's `key`; if both are "
                                            "sent they must be equal)."),),
              description="Any member may. The body is a push's, with `queue` required: the queue's name or its "
                          "label team:<team-slug>/<queue>. 201 with `created: true`; 200 with `created: false` "
                          "when a live todo of the team already has this key."),
    Operation("POST", "/api/v1/teams/{team}/todos:batch", "team_todo_push_batch", "teams",
              "Push many todos on a team's queues", push_team_todos, m.PushManyReply, status=201, also=(200,),
              body=m.TeamPushManyRequest,
              description=f"Any member may. Up to {inputs.PUSH_BATCH_MAX} todos in one statement, each naming its "
                          "queue (its name or its label team:<team-slug>/<queue> of this team), answered in order, "
                          "each `created` or the team's live todo already holding its key. A bad item is `invalid` "
                          "naming `todos[i].field` and nothing is pushed. 201 when any todo was created, else 200. "
                          "The wake-ups are one per queue: a batch rings as many idle agents as it brings todos."),
    # admission control
    Operation("GET", "/api/v1/admission", "admission_list", "admission", "List your admission policies",
              list_policies, m.PolicyList,
              description="The policies of your endpoints' queues and of your teams' queues, with usage now."),
    Operation("GET", "/api/v1/admission/{scope}/{queue}", "admission_show", "admission",
              "Show a queue's admission policy", show_policy, m.PolicyReply,
              description="`scope` is `endpoint:<endpoint-slug>` or `team:<team-slug>`. A queue without a "
                          "policy is 404."),
    Operation("PUT", "/api/v1/admission/{scope}/{queue}", "admission_set", "admission",
              "Set a queue's admission policy", set_policy, m.PolicyReply, body=m.PolicyRequest,
              description="Replaces the limits and the window (a limit left out is none; the window's fields "
                          "default to an hour from 00:00 UTC); `paused` left out stays as it was. A team queue's "
                          "policy is for the team's owners and admins."),
    Operation("DELETE", "/api/v1/admission/{scope}/{queue}", "admission_clear", "admission",
              "Clear a queue's admission policy", clear_policy, m.PolicyCleared,
              description="Its claims are no longer limited, and a pause goes with it."),
    Operation("POST", "/api/v1/admission/{scope}/{queue}/pause", "admission_pause", "admission", "Pause a queue",
              _pause(True), m.PolicyReply,
              description="No claims until it is resumed; a queue without a policy gets one that only pauses."),
    Operation("POST", "/api/v1/admission/{scope}/{queue}/resume", "admission_resume", "admission",
              "Resume a paused queue", _pause(False), m.PolicyReply,
              description="Its limits, if any, apply again."),
    # settings
    Operation("GET", "/api/v1/settings", "settings_get_all", "settings", "Every operator setting", get_settings,
              m.SettingsMap, admin=True),
    Operation("GET", "/api/v1/settings/{key}", "settings_get", "settings", "One operator setting", get_setting,
              m.SettingsMap, admin=True),
    Operation("PUT", "/api/v1/settings/{key}", "settings_set", "settings", "Change an operator setting",
              set_setting, m.SettingsMap, body=m.SettingRequest, admin=True),
    Operation("POST", "/api/v1/sweeps", "sweep_once", "settings", "Run the sweeps once", sweep_now, m.SweepReport,
              admin=True, description="The reaper, retry scheduler, endpoint expiry and retention, once, now "
                                      "(`switchboard sweep --once`); the server also runs them on its own."),
    # tokens
    Operation("POST", "/api/v1/tokens", "token_create", "tokens", "Create an API token", create_token,
              m.TokenCreated, status=201, body=m.TokenRequest,
              description="For yourself, with a scope (`read` or `write`) and an optional expiry; shown once."),
    Operation("GET", "/api/v1/tokens", "token_list", "tokens", "List your API tokens", list_tokens, m.TokenList,
              description="Newest first, revoked and expired ones included; never a token, only its prefix."),
    Operation("POST", "/api/v1/tokens/{ref}/revoke", "token_revoke", "tokens", "Revoke one of your API tokens",
              revoke_token, m.TokenRevoked,
              description="Named by its id or prefix; refused from the next request on, in every process."),
]
