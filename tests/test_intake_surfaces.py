"""Webhook intakes on the human API's operation table and on the CLI's backend (docs/intake.md,
docs/api.md).

Over the API, `/api/v1/intakes…` keep their paths, statuses and answers and are in the OpenAPI
document (tag `intakes`); the create answer (the URL, its token and the secret, shown once) is never
cached; bad input is 400 `invalid` naming the field, as on every operation of the table, and changes
nothing.

Over the CLI, `switchboard intake …` runs the same script on this machine's database (as
`SWITCHBOARD_USER`) and against a running server after `switchboard login` (its database unreachable
from the CLI), with the same output; a quarantined delivery comes from a signed webhook posted to the
URL `create` printed. Another human's intake answers exactly like an unknown one, locally and remotely.

A real server and real PostgreSQL; no mocks.
"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

import httpx
import pytest

import cli_twins
from cli_twins import Person, make_people
from conftest import core_for, make_settings, run_async, start_thread_server
from core_world import sql
from mcp_support import vend
from switchboard.core import api_tokens, intakes
from test_intake import body_of, github_post

cli_server, config_dirs = cli_twins.cli_server, cli_twins.config_dirs  # the fixtures
# What differs between the two runs of the intake commands besides ids and times.
INTAKE_PATTERNS = ((r"sbi_[A-Za-z0-9_-]+", "<sbi>"), (r"\b[0-9a-f]{64}\b", "<secret>"),
                   (r'"item_id": \d+', '"item_id": <item>'), (r"(?m)^\d+  ", "<item>  "),
                   (r"dropped \d+", "dropped <item>"))
ISSUES = [{"name": "issues", "filter": "event == 'issues'", "title": "body.issue.title"}]
HMAC_SECRET = "an-hmac-secret-of-the-sender"
ROUTES = {"/api/v1/intakes": {"get": "intake_list", "post": "intake_create"},
          "/api/v1/intakes/{intake}": {"get": "intake_show", "delete": "intake_remove"},
          "/api/v1/intakes/{intake}/rules": {"put": "intake_rules_set"},
          "/api/v1/intakes/{intake}/disable": {"post": "intake_disable"},
          "/api/v1/intakes/{intake}/enable": {"post": "intake_enable"},
          "/api/v1/intakes/{intake}/quarantine": {"get": "intake_quarantine"},
          "/api/v1/intakes/{intake}/quarantine/{item}": {"get": "intake_quarantine_show",
                                                         "delete": "intake_quarantine_drop"},
          "/api/v1/intakes/{intake}/quarantine/{item}/replay": {"post": "intake_replay"}}


@pytest.fixture(scope="module")
def server(pg_uri):
    srv = start_thread_server(make_settings(pg_uri))
    yield srv
    srv.stop()


class Owner:
    def __init__(self, base: str, token: str, slug: str) -> None:
        self.slug = slug
        self.http = httpx.Client(base_url=base + "/api/v1", headers={"Authorization": f"Bearer {token}"},
                                 timeout=30)

    def create(self, **fields) -> dict:
        r = self.http.post("/intakes", json={"name": f"in-{uuid.uuid4().hex[:6]}", "endpoint": self.slug, **fields})
        assert r.status_code == 201, r.text
        return r.json()


async def owner(core, base: str, name: str = "alice") -> Owner:
    agent = await vend(core, name, queues=["inbox"])
    token, _ = await api_tokens.create(core, agent.human)
    return Owner(base, token, agent.slug)


async def stored(core) -> list[dict]:
    """The intakes, their quarantines, the delivery ids seen and the todos: what a refusal leaves as it was."""
    return (await sql(core, "SELECT * FROM intakes ORDER BY id") + await sql(core, "SELECT * FROM intake_quarantine")
            + await sql(core, "SELECT * FROM intake_seen") + await sql(core, "SELECT id, state FROM todos"))


def push_delivery(made: dict, delivery: str, body: dict | None = None) -> httpx.Response:
    return github_post(made["url"], body_of(body or {"ref": "refs/heads/main"}), secret=made["secret"],
                       event="push", delivery=delivery)


# ------------------------------------------------------------------------------------- the API

async def test_the_openapi_document_lists_the_intake_routes(server):
    doc = httpx.get(server.url + "/api/v1/openapi.json", timeout=30).json()
    paths = doc["paths"]
    for path, methods in ROUTES.items():
        assert {m: op["operationId"] for m, op in paths[path].items()} == methods, path
        for op in paths[path].values():
            assert op["tags"] == ["intakes"] and {"400", "401", "403", "404"} <= set(op["responses"]), path
    assert {p for p in paths if p.startswith("/api/v1/intakes")} == set(ROUTES)
    create = paths["/api/v1/intakes"]["post"]
    assert "201" in create["responses"] and create["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/IntakeRequest"}
    replay = paths["/api/v1/intakes/{intake}/quarantine/{item}/replay"]["post"]
    assert {"200", "201", "409"} <= set(replay["responses"])
    quarantine = {p["name"]: p for p in paths["/api/v1/intakes/{intake}/quarantine"]["get"]["parameters"]}
    assert set(quarantine) == {"intake", "limit"} and quarantine["limit"]["in"] == "query"
    params = {p["name"]: p for p in paths["/api/v1/intakes/{intake}/quarantine/{item}"]["get"]["parameters"]}
    assert params["intake"]["description"] == "The intake's id or name."
    assert params["item"]["description"].startswith("A quarantined delivery's id")
    for name in ("gh", "github issues", "...", ".x", str(uuid.uuid4())):
        assert re.fullmatch(params["intake"]["schema"]["pattern"].strip("^$"), name), name
    for name in (".", "..", "a/b", "a%b", "x" * 65):
        assert not re.fullmatch(params["intake"]["schema"]["pattern"].strip("^$"), name), name
    [token_ref] = [p for p in paths["/api/v1/tokens/{ref}/revoke"]["post"]["parameters"] if p["name"] == "ref"]
    assert token_ref["description"] == "The token's id or display prefix."  # the tokens' own `ref`
    schemas = doc["components"]["schemas"]
    assert schemas["IntakeRequest"]["properties"]["source"]["enum"] == list(intakes.SOURCES)
    assert set(schemas["IntakeRequest"]["required"]) == {"name", "endpoint", "source"}
    assert schemas["IntakeRequest"]["additionalProperties"] is False
    assert schemas["IntakeRulesRequest"]["required"] == ["rules"]
    assert schemas["IntakeRule"]["required"] == ["title"] and schemas["IntakeRule"]["additionalProperties"] is False
    assert "intakes" in [t["name"] for t in doc["tags"]]
    page = httpx.get(server.url + "/api/v1/docs", timeout=30).text
    assert "POST /api/v1/intakes/{intake}/quarantine/{item}/replay" in page


async def test_the_create_answer_is_shown_once_and_never_cached(core, server):
    alice = await owner(core, server.url)
    r = alice.http.post("/intakes", json={"name": "gh", "endpoint": alice.slug, "source": "github",
                                          "rules": ISSUES})
    assert r.status_code == 201 and r.headers["cache-control"] == "no-store", r.text
    made = r.json()
    assert set(made) == {"intake", "url", "token", "secret"}
    assert made["url"] == server.settings.public_base_url + "/webhooks/w/" + made["token"]
    assert made["token"].startswith(made["intake"]["token_prefix"]) and len(made["secret"]) == 64
    assert made["intake"]["rules"] == ISSUES
    for path in ("/intakes", "/intakes/gh", f"/intakes/{made['intake']['intake_id']}"):
        r = alice.http.get(path)
        assert r.status_code == 200 and "cache-control" not in r.headers, path
        assert made["token"] not in r.text and made["secret"] not in r.text, path
    # A rule's field sent as null is left out, as the core stores it.
    r = alice.http.put("/intakes/gh/rules", json={"rules": [{"title": "'x'", "kind": None}]})
    assert r.status_code == 200 and r.json()["intake"]["rules"] == [{"title": "'x'"}]
    r = alice.http.put("/intakes/gh/rules", json={"rules": None})
    assert r.status_code == 200 and r.json()["intake"]["rules"] == []


async def test_a_replay_that_finds_the_live_todo_answers_200(core, server):
    alice = await owner(core, server.url)
    made = alice.create(source="github", rules=ISSUES)
    ref = made["intake"]["intake_id"]
    assert push_delivery(made, "p-1").json()["status"] == "quarantined"
    [held] = alice.http.get(f"/intakes/{ref}/quarantine", params={"limit": 5}).json()["quarantine"]
    # Every delivery now makes the todo with key `k`; a second one is accepted, and the replay finds it.
    assert alice.http.put(f"/intakes/{ref}/rules", json={"rules": [{"title": "'t'", "key": "'k'"}]}).status_code == 200
    accepted = push_delivery(made, "p-2").json()
    assert accepted["status"] == "accepted"
    r = alice.http.post(f"/intakes/{ref}/quarantine/{held['item_id']}/replay")
    assert r.status_code == 200, r.text
    assert r.json()["created"] is False and r.json()["todo"]["id"] == accepted["todo_id"]
    assert alice.http.get(f"/intakes/{ref}/quarantine").json() == {"quarantine": []}


async def test_bad_input_is_400_naming_the_field_and_changes_nothing(core, server):
    alice = await owner(core, server.url)
    made = alice.create(name="gh", source="github", rules=ISSUES)
    assert push_delivery(made, "p-1").json()["status"] == "quarantined"
    [held] = alice.http.get("/intakes/gh/quarantine").json()["quarantine"]
    good = {"name": "new", "endpoint": alice.slug, "source": "github"}
    create_cases = [
        ({"source": "gitlab"}, "source"), ({"source": None}, "source"), ({"source": 1}, "source"),
        ({"name": 7}, "name"), ({"name": ""}, "name"), ({"name": "x" * 65}, "name"), ({"name": "a/b"}, "name"),
        ({"name": "gh"}, "name"),  # taken: a conflict naming it
        ({"endpoint": None}, "endpoint"), ({"endpoint": ["x"]}, "endpoint"), ({"queue": 5}, "queue"),
        ({"queue": "elsewhere"}, "queue"), ({"secret": "short"}, "secret"), ({"secret": 10 ** 20}, "secret"),
        ({"source": "standard", "secret": "not-a-whsec-secret-at-all"}, "secret"),
        ({"rules": "[]"}, "rules"), ({"rules": {"title": "'x'"}}, "rules"), ({"rules": ["title"]}, "rules[0]"),
        ({"rules": [{"title": 7}]}, "rules[0].title"), ({"rules": [{"filter": "event"}]}, "rules[0].title"),
        ({"rules": [{"title": "'x'", "priority": "`1`"}]}, "rules[0].priority"),
        ({"rules": [{"title": "'x'"}, {"title": "body.["}]}, "rules[1].title"),
        ({"rules": [{"title": "'x'", "max_attempts": 3}]}, "rules[0].max_attempts"),
        ({"rules": [{"title": "'x'"}] * 51}, "rules"), ({"colour": "red"}, "colour"),
    ]
    before = await stored(core)
    for change, argument in create_cases:
        r = alice.http.post("/intakes", json={**good, **change})
        code = "conflict" if change == {"name": "gh"} else "invalid"
        assert r.status_code == (409 if code == "conflict" else 400), (change, r.text)
        assert (r.json()["error"]["code"], r.json()["error"].get("argument")) == (code, argument), (change, r.text)
    for field in ("name", "endpoint", "source"):
        r = alice.http.post("/intakes", json={k: v for k, v in good.items() if k != field})
        assert r.status_code == 400 and r.json()["error"]["argument"] == field, (field, r.text)
    for raw in (b"[1]", b"{not json", b"null"):
        r = alice.http.post("/intakes", content=raw, headers={"Content-Type": "application/json"})
        assert r.status_code == 400 and r.json()["error"]["argument"] == "body", raw
    for body, argument in (({}, "rules"), ({"rules": "[]"}, "rules"), ({"rules": [{"title": "length(`"}]},
                           "rules[0].title"), ({"rules": [], "name": "x"}, "name")):
        r = alice.http.put("/intakes/gh/rules", json=body)
        assert r.status_code == 400 and r.json()["error"]["argument"] == argument, (body, r.text)
    for action in ("disable", "enable"):
        r = alice.http.post(f"/intakes/gh/{action}", json={"enabled": False})
        assert r.status_code == 400 and r.json()["error"]["argument"] == "enabled", r.text
        r = alice.http.post(f"/intakes/gh/{action}", content=b"[1]")
        assert r.status_code == 400 and r.json()["error"]["argument"] == "body", r.text
    for params, argument in (({"limit": "many"}, "limit"), ({"surplus": "1"}, "surplus"),
                             ([("limit", "1"), ("limit", "2")], "limit")):
        r = alice.http.get("/intakes/gh/quarantine", params=params)
        assert r.status_code == 400 and r.json()["error"]["argument"] == argument, (params, r.text)
    for path in ("/intakes/gh/quarantine/x", "/intakes/gh/quarantine/0",
                 f"/intakes/nosuch/quarantine/{held['item_id']}"):
        r = alice.http.get(path)
        assert r.status_code == 404 and r.json()["error"]["code"] == "not_found", path
    assert await stored(core) == before
    assert alice.http.get("/intakes/gh").json()["intake"]["rules"] == ISSUES


# ------------------------------------------------------------------------------------- the CLI

def _humans(uri: str) -> tuple[list[str], list[str], str]:
    """An owner with an endpoint and an outsider, their API tokens, and the owner's endpoint's slug."""

    async def go():
        async with core_for(uri) as c:
            tag = uuid.uuid4().hex[:6]
            agent = await vend(c, f"own-{tag}", queues=["inbox"])
            outsider = await vend(c, f"out-{tag}", queues=["inbox"])
            toks = [(await api_tokens.create(c, a.human))[0] for a in (agent, outsider)]
            return [agent.human.name, outsider.human.name], toks, agent.slug

    return run_async(go())


def _people(live, config_dirs: Path, *, remote: bool) -> tuple[list[Person], str]:
    names, toks, slug = _humans(live[1])
    known = {slug: "<endpoint>", names[0]: "<owner>", names[1]: "<outsider>"}
    # The URL `create` prints is the server's; locally the CLI shares the server's database.
    crew = make_people(live, config_dirs, names, toks, known, remote=remote, env={"SWITCHBOARD_BASE_URL": None},
                       local_env={"SWITCHBOARD_BASE_URL": live[0].url}, patterns=INTAKE_PATTERNS)
    return crew, slug


def _script(owner: Person, outsider: Person, slug: str) -> dict:
    """Every intake command, text and --json, and their refusals; a delivery posted to the printed URL."""
    owner.run("intake", "list")
    made = owner.ok("intake", "create", "gh", "--endpoint", slug, "--source", "github", "--rules", json.dumps(ISSUES))
    assert made["url"].endswith("/webhooks/w/" + made["token"]) and made["intake"]["rules"] == ISSUES
    intake_id = made["intake"]["intake_id"]
    text = owner.run("intake", "create", "hm", "--endpoint", slug, "--source", "hmac", "--secret", HMAC_SECRET,
                     "--queue", "inbox").stdout
    assert "url:     http" in text and HMAC_SECRET in text
    owner.refused("intake", "create", "gh", "--endpoint", slug, "--source", "github", code="conflict",
                  argument="name")
    owner.refused("intake", "create", "gl", "--endpoint", slug, "--source", "gitlab", code="invalid",
                  argument="source")
    owner.refused("intake", "create", "gl", "--endpoint", "nosuchslug00", "--source", "github", code="not_found",
                  argument="endpoint")
    owner.refused("intake", "create", "gl", "--endpoint", slug, "--source", "github", "--rules", '{"title": 1}',
                  code="invalid", argument="rules")
    owner.run("intake", "create", "gl", "--endpoint", slug, "--source", "github", "--rules", "[", code=2)

    listed = owner.ok("intake", "list")["intakes"]
    assert [i["name"] for i in listed] == ["gh", "hm"] and made["secret"] not in json.dumps(listed)
    owner.run("intake", "list")
    owner.run("intake", "show", "gh")
    assert owner.ok("intake", "show", intake_id)["intake"]["name"] == "gh"
    owner.run("intake", "rules", "gh")
    owner.refused("intake", "rules", "gh", "--set", '[{"title": "body.["}]', code="invalid",
                  argument="rules[0].title")

    assert owner.ok("intake", "disable", "gh")["intake"]["enabled"] is False
    assert push_delivery(made, "p-0").status_code == 401  # paused: answered like an unknown URL
    owner.run("intake", "enable", "gh")
    assert push_delivery(made, "p-1").json()["status"] == "quarantined"
    assert push_delivery(made, "p-2").json()["status"] == "quarantined"
    owner.run("intake", "quarantine", "gh")
    first, second = sorted(owner.ok("intake", "quarantine", "gh")["quarantine"], key=lambda d: d["item_id"])
    item, other = str(first["item_id"]), str(second["item_id"])
    owner.run("intake", "quarantine", "gh", item)
    assert owner.ok("intake", "quarantine", "gh", item)["item"]["document"]["delivery"] == "p-1"
    error = owner.refused("intake", "replay", "gh", item, code="conflict", argument="rules")
    assert error["message"] == "still quarantined: no rule matched (event 'push')"
    owner.run("intake", "quarantine", "gh", other, "--drop")
    rules = [{"title": "join(' ', ['push', delivery])"}]
    assert owner.ok("intake", "rules", "gh", "--set", json.dumps(rules)) == {"rules": rules}
    owner.run("intake", "replay", "gh", item)
    assert owner.ok("intake", "quarantine", "gh") == {"quarantine": []}

    # Unknown intakes and deliveries, including names a URL could not carry as they are.
    for ref in ("nosuch", "", ".", ".."):
        owner.refused("intake", "show", ref, code="not_found", argument="intake")
    for missing in ("999999999", "abc", "0", ""):
        owner.refused("intake", "quarantine", "gh", missing, code="not_found", argument="item")
        owner.refused("intake", "replay", "gh", missing, code="not_found", argument="item")
    owner.refused("intake", "quarantine", "nosuch", "", code="not_found", argument="intake")
    dots = owner.ok("intake", "create", "..", "--endpoint", slug, "--source", "bearer")["intake"]
    assert owner.ok("intake", "show", "..")["intake"]["intake_id"] == dots["intake_id"]
    owner.run("intake", "remove", "..")

    _outsider_sees_an_unknown_intake(outsider, intake_id, item)
    owner.run("intake", "remove", "hm")
    assert owner.ok("intake", "remove", "gh")["removed"]["intake_id"] == intake_id
    assert owner.ok("intake", "list") == {"intakes": []}
    return made


def _outsider_sees_an_unknown_intake(outsider: Person, intake_id: str, item: str) -> None:
    nowhere = str(uuid.uuid4())
    for args in (("show", "{}"), ("rules", "{}"), ("rules", "{}", "--set", "[]"), ("disable", "{}"),
                 ("enable", "{}"), ("quarantine", "{}"), ("quarantine", "{}", item),
                 ("quarantine", "{}", item, "--drop"), ("replay", "{}", item), ("remove", "{}")):
        for as_json in (("--json",), ()):
            theirs = outsider.invoke("intake", *[intake_id if a == "{}" else a for a in args], *as_json)
            unknown = outsider.invoke("intake", *[nowhere if a == "{}" else a for a in args], *as_json)
            assert theirs.exit_code == unknown.exit_code == 1, (args, theirs.stdout, theirs.stderr)
            assert (theirs.stdout, theirs.stderr) == (unknown.stdout, unknown.stderr), args
            assert "intake not found" in theirs.stdout + theirs.stderr
    assert outsider.invoke("intake", "list", "--json").stdout.strip() == '{"intakes": []}'


def test_the_intake_commands_locally_and_after_login_give_the_same_output(cli_server, config_dirs):
    srv, uri = cli_server
    local, slug_l = _people(cli_server, config_dirs, remote=False)
    far, slug_r = _people(cli_server, config_dirs, remote=True)
    made_l = _script(*local, slug_l)
    made_r = _script(*far, slug_r)
    for near, remote in zip(local, far, strict=True):
        for a, b in zip(near.transcript(), remote.transcript(), strict=True):
            assert a == b, f"\nlocal:  {a}\nremote: {b}"
        assert len(near.runs) == len(remote.runs)
    # Both printed the server's URL for the intake, and the posted deliveries reached it.
    for made in (made_l, made_r):
        assert made["url"].startswith(srv.url + "/webhooks/w/sbi_")
    # The remote runs went through the server: their database is unreachable from the CLI.
    assert far[0].env["SWITCHBOARD_DATABASE_URL"] == cli_twins.NOWHERE_DB
    done = far[0].invoke("intake", "list", "--user", far[1].name)
    assert done.exit_code == 2 and "--user" in done.stderr
