"""The OpenAPI 3.1 document of the human API, generated from the operation table (`routes.py`) and
its pydantic models, and a reference page rendered from that document on the server.

Nothing here is written by hand twice: paths, parameters, bodies and answers come from the table and
the models the handlers validate with; the error answers are the statuses of `kit.STATUS`.
The page is plain HTML (no script, no inline style, no third-party asset), so it passes the Board's
Content Security Policy as it is.
"""

from __future__ import annotations

import html
import json
import re
from functools import lru_cache
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode, models_json_schema

from ... import __version__
from . import models as m
from .kit import MAX_BODY_BYTES
from .routes import OPERATIONS, Operation

REF = "#/components/schemas/{model}"
ID_PATTERN = r"^[A-Za-z0-9_@:-][A-Za-z0-9_.@:-]{0,63}$"
_PARAM = re.compile(r"\{(\w+)\}")
PATH_HELP = {
    "slug": "The endpoint's slug.", "id": "The todo's id.", "hook_id": "The notify hook's id.",
    "ref": "The token's id or display prefix.", "key": "The setting's name.", "team": "The team's slug.",
    "human": "A member's user name.", "sink_id": "The notification sink's id.",
    "intake": "The intake's id or name.", "item": "A quarantined delivery's id (a number).",
    "scope": "Whose queue: `endpoint:<endpoint-slug>` or `team:<team-slug>`.",
    "queue": "The queue's name (a team queue's name without the `team:<team-slug>/` of its label).",
}
# An intake's id or name: 1-64 characters, no control character and none of / ? # % \ (core/intakes.py),
# and never `.` or `..`, which a URL resolves away.
_NAME_CHAR = r"[^\x00-\x1f\x7f/?#%\\]"
_NAME_PATTERN = (rf"^(?:[^.\x00-\x1f\x7f/?#%\\]{_NAME_CHAR}{{0,63}}|\.[^.\x00-\x1f\x7f/?#%\\]{_NAME_CHAR}{{0,62}}"
                 rf"|\.\.{_NAME_CHAR}{{1,62}})$")
# Path parameters with another form than an id.
PATH_PATTERN = {"scope": r"^(endpoint|team):[A-Za-z0-9_@:-][A-Za-z0-9_.@:-]{0,63}$", "queue": m.QUEUE_PATTERN,
                "intake": _NAME_PATTERN, "item": r"^[0-9]{1,18}$"}
ERRORS = {
    400: "Bad input (`invalid`): the field, parameter or header is named in `argument`; nothing changed.",
    401: "No valid API token (`unauthorized`).",
    403: "The token is read-only and this is a write, the route is for admins, or your team role does not "
         "allow it (`forbidden`).",
    404: "No such object, or it is another human's: the same body either way (`not_found`).",
    409: "Not in a state this applies to (`conflict`), or admission control defers claims on the todo's "
         "queue for now (`deferred`, with `queue`, `reason`, `pending` and `next_eligible_at`).",
    413: f"The body is over {MAX_BODY_BYTES} bytes (`too_large`).",
    429: "This token's rate limit (`rate_limited`); retry after `Retry-After` seconds.",
    503: "The database did not answer in time (`unavailable`); retry after `Retry-After` seconds. The call "
         "may or may not have taken effect.",
}
TAGS = [
    ("endpoints", "Agents' MCP endpoints: vend (the credential shown once), list, show, revoke."),
    ("todos", "Push, list, show and act on todos as their owner (the owner-action table)."),
    ("teams", "Teams of humans: members with roles, team queues (`team:<team-slug>/<queue>`) granted to "
              "members' endpoints, and pushes to them."),
    ("admission", "Admission control per queue: limits on leases in flight and claims per window, and a "
                  "pause switch."),
    ("hooks", "Notify hooks: signed webhooks of an endpoint's or a team's todo events."),
    ("sinks", "Notification sinks: chat webhooks (Slack, Discord, Microsoft Teams, generic JSON) for dead "
              "letters, stuck queues and a daily digest; yours or a team's."),
    ("intakes", "Webhook intakes: signed webhooks from GitHub and other systems become todos on one of your "
                "endpoints' queues, shaped by routing rules; deliveries no rule matched wait in a quarantine to be "
                "replayed or dropped."),
    ("settings", "Operator settings kept in the database, and a sweep on demand (admins only)."),
    ("tokens", "Your own API tokens, with a scope and an expiry."),
]
_RETRY_AFTER = {"Retry-After": {"description": "Seconds to wait.", "schema": {"type": "integer"}}}


def _models(ops: list[Operation]) -> tuple[list[tuple[type[BaseModel], JsonSchemaMode]], dict]:
    wanted: list[tuple[type[BaseModel], JsonSchemaMode]] = [(m.ErrorReply, "serialization")]
    for op in ops:
        if op.body is not None:
            wanted.append((op.body, "validation"))
        wanted.append((op.reply, "serialization"))
    unique = list(dict.fromkeys(wanted))
    refs, schema = models_json_schema(unique, ref_template=REF)
    return unique, {"refs": refs, "defs": schema.get("$defs", {})}


def _parameters(op: Operation) -> list[dict]:
    params = [{"name": name, "in": "path", "required": True, "description": PATH_HELP.get(name, name),
               "schema": {"type": "string", "pattern": PATH_PATTERN.get(name, ID_PATTERN)}}
              for name in _PARAM.findall(op.path)]
    if op.query is not None:
        schema = op.query.model_json_schema(ref_template=REF)
        for name, prop in schema.get("properties", {}).items():
            description = prop.pop("description", "")
            prop.pop("title", None)
            # A query parameter is absent or text, never null: drop pydantic's `null` arm.
            arms = [a for a in prop.pop("anyOf", []) if a != {"type": "null"}]
            if len(arms) == 1:
                prop.update(arms[0])
            elif arms:
                prop["anyOf"] = arms
            if prop.get("default", 0) is None:
                del prop["default"]
            params.append({"name": name, "in": "query", "required": name in schema.get("required", []),
                           "description": description, "schema": prop})
    for header, description in op.headers:
        params.append({"name": header, "in": "header", "required": False, "description": description,
                       "schema": {"type": "string", "minLength": 1, "maxLength": 200}})
    return params


def _errors(op: Operation) -> dict:
    statuses = [400, 401, 403, 404, 429, 503]
    if op.write:
        statuses += [409, 413]
    out = {}
    for status in sorted(statuses):
        entry: dict[str, Any] = {"description": ERRORS[status],
                                 "content": {"application/json": {"schema": {"$ref": REF.format(model="ErrorReply")}}}}
        if status == 401:
            entry["headers"] = {"WWW-Authenticate": {"description": 'Bearer realm="switchboard"',
                                                     "schema": {"type": "string"}}}
        if status in (429, 503):
            entry["headers"] = _RETRY_AFTER
        out[str(status)] = entry
    return out


def build(ops: list[Operation] | None = None) -> dict:
    ops = OPERATIONS if ops is None else ops
    _, schemas = _models(ops)
    refs = schemas["refs"]
    paths: dict[str, dict] = {}
    for op in ops:
        reply = refs[(op.reply, "serialization")]
        answer = {"description": "OK", "content": {"application/json": {"schema": reply}}}
        responses = {str(op.status): answer, **{str(s): answer for s in op.also}, **_errors(op)}
        entry: dict[str, Any] = {"operationId": op.name, "tags": [op.tag], "summary": op.summary,
                                 "responses": dict(sorted(responses.items()))}
        if op.description:
            entry["description"] = op.description
        params = _parameters(op)
        if params:
            entry["parameters"] = params
        if op.body is not None:
            entry["requestBody"] = {"required": False, "content": {
                "application/json": {"schema": refs[(op.body, "validation")]}}}
        if op.admin:
            entry["x-admin"] = True
        paths.setdefault(op.path, {})[op.method.lower()] = entry
    return {
        "openapi": "3.1.0",
        "info": {"title": "Switchboard human API", "version": __version__,
                 "description": "Act on your endpoints, todos, teams, queues, hooks, sinks, intakes and tokens as "
                                "yourself "
                                "(`docs/api.md`). Every route takes an API token: `Authorization: Bearer sbh_…`."},
        "servers": [{"url": "/"}],
        "tags": [{"name": n, "description": d} for n, d in TAGS],
        "security": [{"bearer": []}],
        "paths": paths,
        "components": {
            "schemas": schemas["defs"],
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer",
                                           "description": "A human API token (`sbh_…`), read or write scope."}},
        },
    }


@lru_cache(maxsize=1)
def document_bytes() -> bytes:
    return json.dumps(build(), separators=(",", ":"), ensure_ascii=False).encode("utf-8")


# ------------------------------------------------------------------------------------ the page

def _schema_text(schema: dict, defs: dict) -> str:
    """A short type name for a property schema."""
    if not isinstance(schema, dict):
        return "nothing" if schema is False else "any JSON"
    if "$ref" in schema:
        return schema["$ref"].rsplit("/", 1)[-1]
    if "anyOf" in schema:
        parts = [_schema_text(s, defs) for s in schema["anyOf"]]
        return " or ".join(dict.fromkeys(parts))
    if "enum" in schema:
        return " | ".join(json.dumps(v) for v in schema["enum"])
    if "const" in schema:
        return json.dumps(schema["const"])
    kind = schema.get("type")
    if kind == "array":
        return "list of " + _schema_text(schema.get("items", {}), defs)
    if kind == "object" and "additionalProperties" in schema:
        return "object of " + _schema_text(schema["additionalProperties"], defs)
    return kind or "any JSON"


def _limits(schema: dict) -> str:
    bits = []
    for key, word in (("minLength", "min length"), ("maxLength", "max length"), ("minimum", "min"),
                      ("maximum", "max")):
        if key in schema:
            bits.append(f"{word} {schema[key]}")
    return ", ".join(bits)


def _model_table(name: str, defs: dict) -> str:
    model = defs.get(name, {})
    props = model.get("properties", {})
    if not props and model.get("additionalProperties") is False:
        return (f"<p id=\"schema-{html.escape(name)}\"><code>{html.escape(name)}</code>: "
                "no fields (send nothing or <code>{}</code>).</p>")
    if not props:
        return (f"<p id=\"schema-{html.escape(name)}\"><code>{html.escape(name)}</code>: "
                f"{html.escape(_schema_text(model, defs))}</p>")
    required = set(model.get("required", []))
    rows = []
    for prop, schema in props.items():
        rows.append(
            f"<tr><td><code>{html.escape(prop)}</code>{' (required)' if prop in required else ''}</td>"
            f"<td>{html.escape(_schema_text(schema, defs))}</td><td>{html.escape(_limits(schema))}</td>"
            f"<td>{_text(schema.get('description', ''))}</td></tr>")
    return (f"<table id=\"schema-{html.escape(name)}\"><caption>{html.escape(name)}</caption><thead><tr>"
            "<th scope=\"col\">field</th><th scope=\"col\">type</th><th scope=\"col\">limits</th>"
            "<th scope=\"col\">meaning</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table>")


def _text(value: str) -> str:
    """Escaped text with `code` spans as <code>."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(value))


def render_page(doc: dict) -> str:
    defs = doc["components"]["schemas"]
    esc = html.escape
    toc, sections, used = [], [], []
    for tag in doc["tags"]:
        ops = [(path, method, op) for path, item in doc["paths"].items() for method, op in item.items()
               if tag["name"] in op["tags"]]
        if not ops:
            continue
        toc.append(f"<li><a href=\"#tag-{esc(tag['name'])}\">{esc(tag['name'])}</a></li>")
        parts = [f"<section aria-labelledby=\"tag-{esc(tag['name'])}\"><h2 id=\"tag-{esc(tag['name'])}\">"
                 f"{esc(tag['name'])}</h2><p>{esc(tag['description'])}</p>"]
        for path, method, op in ops:
            parts.append(f"<h3 id=\"op-{esc(op['operationId'])}\"><code>{method.upper()} {esc(path)}</code></h3>")
            parts.append(f"<p><strong>{esc(op['summary'])}</strong>"
                         + (" (admins only)" if op.get("x-admin") else "")
                         + (" (needs a write token)" if method != "get" else "") + "</p>")
            if op.get("description"):
                parts.append(f"<p>{_text(op['description'])}</p>")
            params = op.get("parameters", [])
            if params:
                parts.append("<table><caption>parameters</caption><thead><tr><th scope=\"col\">name</th>"
                             "<th scope=\"col\">in</th><th scope=\"col\">type</th><th scope=\"col\">meaning</th>"
                             "</tr></thead><tbody>")
                for p in params:
                    parts.append(f"<tr><td><code>{esc(p['name'])}</code></td><td>{esc(p['in'])}</td>"
                                 f"<td>{esc(_schema_text(p['schema'], defs))}</td><td>{_text(p.get('description', ''))}"
                                 "</td></tr>")
                parts.append("</tbody></table>")
            body = op.get("requestBody")
            if body:
                ref = body["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[-1]
                used.append(ref)
                parts.append(f"<p>Body: <a href=\"#schema-{esc(ref)}\"><code>{esc(ref)}</code></a></p>")
            answers, refusals = [], []
            for status, resp in op["responses"].items():
                if status.startswith(("4", "5")):
                    refusals.append(f"<a href=\"#status-{esc(status)}\">{esc(status)}</a>")
                    continue
                schema = resp.get("content", {}).get("application/json", {}).get("schema", {})
                ref = schema.get("$ref", "").rsplit("/", 1)[-1]
                used.append(ref)
                answers.append(f"<code>{esc(status)}</code> <a href=\"#schema-{esc(ref)}\"><code>{esc(ref)}</code></a>")
            parts.append(f"<p>Answer: {', '.join(answers)}. Refusals: {', '.join(refusals)}.</p>")
        parts.append("</section>")
        sections.append("".join(parts))
    used.append("ErrorReply")
    seen: list[str] = []
    for name in used:
        if name not in seen:
            seen.append(name)
    # Nested models (a todo's attempts, a list's items) get their tables too.
    i = 0
    while i < len(seen):
        for prop in defs.get(seen[i], {}).get("properties", {}).values():
            for ref in re.findall(r'"\$ref": "#/components/schemas/(\w+)"', json.dumps(prop)):
                if ref not in seen:
                    seen.append(ref)
        i += 1
    models = "".join(_model_table(name, defs) for name in seen)
    return (
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
        f"<title>{esc(doc['info']['title'])} reference</title>"
        "<link rel=\"stylesheet\" href=\"/api/v1/docs.css\"></head><body><main>"
        f"<h1>{esc(doc['info']['title'])} <small>{esc(doc['info']['version'])}</small></h1>"
        f"<p>{_text(doc['info']['description'])}</p>"
        "<p>The machine-readable document: <a href=\"/api/v1/openapi.json\">/api/v1/openapi.json</a> "
        "(OpenAPI 3.1).</p>"
        "<nav aria-label=\"contents\"><ul>" + "".join(toc)
        + "<li><a href=\"#errors\">errors</a></li><li><a href=\"#schemas\">bodies</a></li></ul></nav>"
        "<section aria-labelledby=\"errors\"><h2 id=\"errors\">Errors</h2><p>Every refusal is "
        "<code>{\"error\": {\"code\", \"message\", \"argument\"}}</code> and changes nothing.</p><dl>"
        + "".join(f"<dt id=\"status-{s}\"><code>{s}</code></dt><dd>{_text(t)}</dd>" for s, t in ERRORS.items())
        + "</dl></section>"
        + "".join(sections)
        + "<section aria-labelledby=\"schemas\"><h2 id=\"schemas\">Bodies</h2>" + models + "</section>"
        "</main></body></html>")


@lru_cache(maxsize=1)
def page_bytes() -> bytes:
    return render_page(build()).encode("utf-8")


STYLE = b"""body{font:15px/1.5 system-ui,sans-serif;margin:0;color:#1b1b1b;background:#fff}
main{max-width:60rem;margin:0 auto;padding:1rem 1.5rem}
code{font-family:ui-monospace,monospace;font-size:.92em}
h3{margin-top:2rem;border-top:1px solid #ddd;padding-top:1rem}
table{border-collapse:collapse;margin:.5rem 0 1rem;width:100%}
caption{text-align:left;font-weight:600;padding:.25rem 0}
th,td{border:1px solid #ccc;padding:.25rem .5rem;text-align:left;vertical-align:top}
a{color:#0b57d0}
@media (prefers-color-scheme:dark){body{background:#121212;color:#e8e8e8}a{color:#8ab4f8}th,td{border-color:#444}}
"""
