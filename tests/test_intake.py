"""Webhook intake (docs/intake.md) over real HTTP: verification of each source kind over the raw body,
routing rules becoming todos, redeliveries, the quarantine and its replay, and tenancy."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import psycopg
import pytest
from standardwebhooks.webhooks import Webhook

from conftest import create_database, make_settings, start_thread_server
from mcp_support import vend
from switchboard.core import api_tokens, humans, intake_rules, intakes, todos
from switchboard.core.errors import Invalid
from switchboard.web import intake_hook

GITHUB_SECRET = "It's a Secret to Everybody"
GITHUB_VECTOR = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"

ISSUE_RULE = {
    "name": "issues labelled agent",
    "filter": "event == 'issues' && body.action == 'labeled' && body.label.name == 'agent'",
    "title": "join('', ['#', to_string(body.issue.number), ' ', body.issue.title])",
    "payload": "{repo: body.repository.full_name, url: body.issue.html_url, text: body.issue.body}",
    "kind": "'issue'",
}
CI_RULE = {
    "name": "failed CI",
    "filter": "event == 'workflow_run' && body.action == 'completed' && body.workflow_run.conclusion == 'failure'",
    "title": "join(' ', ['CI failed:', body.workflow_run.name, 'on', body.workflow_run.head_branch])",
    "payload": "{run: body.workflow_run.html_url, sha: body.workflow_run.head_sha}",
    "kind": "'ci'",
    "max_attempts": "`2`",
}


def issues_labeled(number: int = 1347, label: str = "agent") -> dict:
    """An `issues` delivery as GitHub sends it (trimmed to the fields that matter, same shape)."""
    return {
        "action": "labeled",
        "issue": {
            "url": f"https://api.github.com/repos/octo-org/octo-repo/issues/{number}",
            "html_url": f"https://github.com/octo-org/octo-repo/issues/{number}",
            "id": 1_000_000 + number, "node_id": "I_kwDOABCD5M5abc", "number": number,
            "title": "Crash when the config file is empty", "state": "open", "locked": False,
            "user": {"login": "octocat", "id": 1, "type": "User"},
            "labels": [{"id": 208045946, "name": label, "color": "f29513", "default": False}],
            "body": "Steps: run with an empty config.\nExpected: a clear error.",
            "created_at": "2026-11-30T10:00:00Z", "updated_at": "2026-11-30T10:05:00Z",
        },
        "label": {"id": 208045946, "name": label, "color": "f29513", "default": False},
        "repository": {"id": 1296269, "name": "octo-repo", "full_name": "octo-org/octo-repo", "private": False,
                       "html_url": "https://github.com/octo-org/octo-repo", "default_branch": "main"},
        "sender": {"login": "octocat", "id": 1, "type": "User"},
    }


def workflow_run(conclusion: str = "failure", run_number: int = 88) -> dict:
    return {
        "action": "completed",
        "workflow_run": {
            "id": 30433642, "name": "Build", "node_id": "WFR_kwLOABCD", "head_branch": "main",
            "head_sha": "acb5820ced9479c074f688cc328bf03f341a511d", "run_number": run_number, "event": "push",
            "status": "completed", "conclusion": conclusion, "workflow_id": 159038,
            "html_url": "https://github.com/octo-org/octo-repo/actions/runs/30433642",
            "run_attempt": 1, "created_at": "2026-11-30T10:00:00Z", "updated_at": "2026-11-30T10:07:00Z",
        },
        "workflow": {"id": 159038, "name": "Build", "path": ".github/workflows/build.yml", "state": "active"},
        "repository": {"id": 1296269, "full_name": "octo-org/octo-repo"},
        "sender": {"login": "octocat", "id": 1, "type": "User"},
    }


@pytest.fixture(scope="module")
def server(pg_uri):
    srv = start_thread_server(make_settings(pg_uri))
    yield srv
    srv.stop()


class Owner:
    def __init__(self, base: str, token: str, agent) -> None:
        self.agent = agent
        self.base = base
        self.http = httpx.Client(base_url=base + "/api/v1", headers={"Authorization": f"Bearer {token}"},
                                 timeout=30)

    def create(self, **fields) -> dict:
        body = {"name": f"in-{uuid.uuid4().hex[:6]}", "endpoint": self.agent.slug, **fields}
        r = self.http.post("/intakes", json=body)
        assert r.status_code == 201, r.text
        return r.json()


async def owner(core, base: str, name: str = "alice", queues=("inbox",)) -> Owner:
    agent = await vend(core, name, queues=list(queues))
    token, _ = await api_tokens.create(core, agent.human)
    return Owner(base, token, agent)


def github_post(url: str, payload: bytes, *, secret: str, event: str, delivery: str,
                signature: str | None = None) -> httpx.Response:
    sig = signature or intake_hook.github_signature(secret, payload)
    return httpx.post(url, content=payload, timeout=30, headers={
        "Content-Type": "application/json", "User-Agent": "GitHub-Hookshot/abc123",
        "X-GitHub-Event": event, "X-GitHub-Delivery": delivery, "X-GitHub-Hook-ID": "42",
        "X-Hub-Signature-256": sig})


def body_of(obj: dict) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


async def rows(core, sql: str, params=None) -> list[dict]:
    async with core.pool.connection() as conn:
        cur = await conn.execute(sql, params or {})
        return await cur.fetchall()


async def key_of(core, todo_id: str) -> str | None:
    return (await rows(core, "SELECT idempotency_key FROM todos WHERE id = %(id)s", {"id": todo_id}))[0][
        "idempotency_key"]


def fingerprint(uri: str) -> dict:
    """Every table's content hash (the intakes' failure counters aside)."""
    out = {}
    with psycopg.connect(uri, autocommit=True) as conn:
        tables = [r[0] for r in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename").fetchall()]
        for t in tables:
            if t == "intakes":
                sql = ("SELECT md5(coalesce(string_agg(x::text, ',' ORDER BY x::text), '')) FROM "
                       "(SELECT id, name, rules, accepted, duplicates, quarantined, last_delivery_at FROM intakes) x")
            else:
                sql = f'SELECT md5(coalesce(string_agg(x::text, \',\' ORDER BY x::text), \'\')) FROM "{t}" x'
            out[t] = conn.execute(sql).fetchone()[0]
    return out


# ------------------------------------------------------------------------------------ verification

def test_github_published_test_vector():
    assert intake_hook.github_signature(GITHUB_SECRET, b"Hello, World!") == GITHUB_VECTOR
    headers = {"x-hub-signature-256": GITHUB_VECTOR, "x-github-event": "issues", "x-github-delivery": "d-1"}
    assert intake_hook.verify("github", GITHUB_SECRET, headers, b"Hello, World!") == ("issues", "d-1")
    for body, sig in [(b"Hello, World?", GITHUB_VECTOR), (b"Hello, World!", GITHUB_VECTOR[:-1] + "f"),
                      (b"Hello, World!", GITHUB_VECTOR.upper())]:
        with pytest.raises(intake_hook.VerifyFailed):
            intake_hook.verify("github", GITHUB_SECRET, {**headers, "x-hub-signature-256": sig}, body)


async def test_the_published_vector_over_http_becomes_a_todo(core, server):
    alice = await owner(core, server.url)
    made = alice.create(source="github", secret=GITHUB_SECRET, rules=[{"title": "'hello from the vector'",
                                                                       "payload": "body"}])
    r = github_post(made["url"], b"Hello, World!", secret=GITHUB_SECRET, event="push", delivery="vec-1",
                    signature=GITHUB_VECTOR)
    assert r.status_code == 202, r.text
    assert r.json()["status"] == "accepted"
    todo = await todos.get(core, alice.agent.human, r.json()["todo_id"])
    assert (todo["title"], todo["payload"], todo["source"]) == ("hello from the vector", "Hello, World!",
                                                                 "intake-github")


async def test_an_issue_labelled_agent_becomes_one_todo_and_redeliveries_make_none(core, server):
    alice = await owner(core, server.url)
    made = alice.create(source="github", rules=[ISSUE_RULE, CI_RULE])
    assert made["token"].startswith("sbi_") and made["url"].endswith("/webhooks/w/" + made["token"])
    secret = made["secret"]
    payload = body_of(issues_labeled())
    delivery = str(uuid.uuid4())
    r = github_post(made["url"], payload, secret=secret, event="issues", delivery=delivery)
    assert r.status_code == 202 and r.json()["status"] == "accepted", r.text
    todo_id = r.json()["todo_id"]
    todo = await todos.get(core, alice.agent.human, todo_id)
    assert todo["title"] == "#1347 Crash when the config file is empty"
    assert todo["payload"] == {"repo": "octo-org/octo-repo", "url": "https://github.com/octo-org/octo-repo/issues/1347",
                               "text": "Steps: run with an empty config.\nExpected: a clear error."}
    assert (todo["kind"], todo["source"], todo["queue"], await key_of(core, todo_id)) == (
        "issue", "intake-github", "inbox", delivery)

    # GitHub's "Redeliver" sends the same delivery id: no second todo, before or after the first ends.
    again = github_post(made["url"], payload, secret=secret, event="issues", delivery=delivery)
    assert again.status_code == 202 and again.json() == {"status": "duplicate", "todo_id": todo_id}
    await todos.claim(core, alice.agent.human, todo_id)
    await todos.complete(core, alice.agent.human, todo_id, summary="fixed")
    late = github_post(made["url"], payload, secret=secret, event="issues", delivery=delivery)
    assert late.json() == {"status": "duplicate", "todo_id": todo_id}
    assert len(await rows(core, "SELECT id FROM todos")) == 1

    # Another label is no work for the agent: quarantined, not a todo.
    other = github_post(made["url"], body_of(issues_labeled(7, label="question")), secret=secret, event="issues",
                        delivery=str(uuid.uuid4()))
    assert other.json()["status"] == "quarantined"
    shown = alice.http.get(f"/intakes/{made['intake']['intake_id']}").json()["intake"]
    assert (shown["accepted"], shown["duplicates"], shown["quarantined"], shown["held"]) == (1, 2, 1, 1)
    assert "secret" not in json.dumps(shown) and made["token"] not in json.dumps(shown)


async def test_a_failed_workflow_run_becomes_a_todo_and_a_green_one_does_not(core, server):
    alice = await owner(core, server.url)
    made = alice.create(source="github", rules=[ISSUE_RULE, CI_RULE])
    red = github_post(made["url"], body_of(workflow_run("failure")), secret=made["secret"], event="workflow_run",
                      delivery=str(uuid.uuid4()))
    assert red.status_code == 202 and red.json()["status"] == "accepted"
    todo = await todos.get(core, alice.agent.human, red.json()["todo_id"])
    assert (todo["title"], todo["kind"], todo["max_attempts"]) == ("CI failed: Build on main", "ci", 2)
    assert todo["payload"]["sha"] == "acb5820ced9479c074f688cc328bf03f341a511d"
    green = github_post(made["url"], body_of(workflow_run("success")), secret=made["secret"], event="workflow_run",
                        delivery=str(uuid.uuid4()))
    assert green.json()["status"] == "quarantined"
    held = alice.http.get(f"/intakes/{made['intake']['name']}/quarantine").json()["quarantine"]
    assert [h["reason"] for h in held] == ["no rule matched (event 'workflow_run')"]
    ping = github_post(made["url"], b'{"zen":"Keep it logically awesome."}', secret=made["secret"], event="ping",
                       delivery=str(uuid.uuid4()))
    assert ping.status_code == 200 and ping.json() == {"status": "pong"}
    assert len(await rows(core, "SELECT id FROM todos")) == 1
    metrics = httpx.get(server.url + "/metrics", headers={"Authorization": "Bearer " + "m" * 40}).text
    for series in ('switchboard_intake_deliveries_total{source="github",verdict="accepted"}',
                   'switchboard_intake_deliveries_total{source="github",verdict="quarantined"}',
                   'switchboard_intake_deliveries_total{source="github",verdict="ping"}'):
        assert series in metrics


async def test_a_tampered_body_is_refused_and_nothing_is_stored(core, server, pg_uri, caplog):
    alice = await owner(core, server.url)
    made = alice.create(source="github", rules=[{"title": "'anything'"}])
    payload = body_of(issues_labeled())
    signature = intake_hook.github_signature(made["secret"], payload)
    tampered = payload.replace(b"Crash", b"Crush")
    before = fingerprint(pg_uri)
    r = github_post(made["url"], tampered, secret=made["secret"], event="issues", delivery="d-tamper",
                    signature=signature)
    assert r.status_code == 401
    unknown = github_post(made["url"][:-4] + "AAAA", payload, secret=made["secret"], event="issues",
                          delivery="d-unknown")
    # An unknown token looks exactly like a wrong signature.
    assert (unknown.status_code, unknown.content) == (r.status_code, r.content)
    assert fingerprint(pg_uri) == before
    shown = alice.http.get(f"/intakes/{made['intake']['intake_id']}").json()["intake"]
    assert shown["verify_failures"] == 1 and shown["last_failure_at"] is not None
    # One log line each, without the body, the token, the secret or the signature.
    refused = [r for r in caplog.records if r.getMessage() == "intake delivery refused"]
    assert [(r.target, r.reason) for r in refused] == [(made["intake"]["intake_id"], "github:bad_signature"),
                                                       (None, "unknown:unknown_intake")]
    logged = " ".join(str(r.__dict__) for r in caplog.records)
    for secret in ("Crush", made["token"], made["token"][4:20], made["secret"], signature[7:]):
        assert secret not in logged


async def test_standard_webhooks_refuse_a_stale_timestamp_and_dedupe_a_replay(core, server, pg_uri):
    alice = await owner(core, server.url)
    made = alice.create(source="standard", rules=[{"filter": "event == 'invoice.paid'",
                                                   "title": "join(' ', ['Invoice', body.data.invoice])"}])
    assert made["secret"].startswith("whsec_")
    hook = Webhook(made["secret"])
    payload = body_of({"type": "invoice.paid", "timestamp": "2026-11-30T10:00:00Z", "data": {"invoice": "in_42"}})

    def send(msg_id: str, when: datetime) -> httpx.Response:
        return httpx.post(made["url"], content=payload, timeout=30, headers={
            "content-type": "application/json", "webhook-id": msg_id,
            "webhook-timestamp": str(int(when.timestamp())),
            "webhook-signature": hook.sign(msg_id, when, payload.decode())})

    before = fingerprint(pg_uri)
    stale = send("msg_stale", datetime.now(UTC) - timedelta(minutes=10))
    assert stale.status_code == 401 and fingerprint(pg_uri) == before
    fresh = send("msg_2b3c", datetime.now(UTC))
    assert fresh.status_code == 202 and fresh.json()["status"] == "accepted"
    todo = await todos.get(core, alice.agent.human, fresh.json()["todo_id"])
    assert (todo["title"], await key_of(core, todo["id"]), todo["source"]) == ("Invoice in_42", "msg_2b3c",
                                                                               "intake-standard")
    replayed = send("msg_2b3c", datetime.now(UTC))
    assert replayed.json() == {"status": "duplicate", "todo_id": todo["id"]}


async def test_generic_hmac_and_bearer_senders(core, server):
    alice = await owner(core, server.url)
    rule = [{"title": "body.alert", "payload": "{labels: body.labels, event: event}"}]
    signed = alice.create(source="hmac", rules=rule)
    payload = body_of({"alert": "disk full on db-1", "labels": {"severity": "page"}})

    def send_hmac(stamp: int, body: bytes = payload) -> httpx.Response:
        sig = intake_hook.hmac_signature(signed["secret"], str(stamp), body)
        return httpx.post(signed["url"], content=payload, timeout=30, headers={
            "content-type": "application/json", "X-Signature": sig, "X-Signature-Timestamp": str(stamp),
            "X-Event": "alert.firing", "X-Delivery": "alert-1"})

    assert send_hmac(int(time.time()) - 3600).status_code == 401  # outside the tolerance
    assert send_hmac(int(time.time()), body=payload + b" ").status_code == 401  # signed other bytes
    ok = send_hmac(int(time.time()))
    assert ok.status_code == 202 and ok.json()["status"] == "accepted"
    todo = await todos.get(core, alice.agent.human, ok.json()["todo_id"])
    assert todo["payload"] == {"labels": {"severity": "page"}, "event": "alert.firing"}
    assert await key_of(core, todo["id"]) == "alert-1"

    bearer = alice.create(source="bearer", rules=rule)
    wrong = httpx.post(bearer["url"], content=payload, headers={"Authorization": "Bearer nope-" + "x" * 40})
    none = httpx.post(bearer["url"], content=payload)
    assert wrong.status_code == none.status_code == 401
    right = httpx.post(bearer["url"], content=payload, headers={"Authorization": f"Bearer {bearer['secret']}"})
    assert right.status_code == 202 and right.json()["status"] == "accepted"


async def test_a_rule_error_is_quarantined_and_replayed_after_the_fix(core, server):
    alice = await owner(core, server.url)
    broken = dict(CI_RULE, title="join(' ', ['Run', body.workflow_run.run_number, 'failed'])")  # a number
    made = alice.create(source="github", rules=[broken])
    ref = made["intake"]["intake_id"]
    delivery = str(uuid.uuid4())
    r = github_post(made["url"], body_of(workflow_run()), secret=made["secret"], event="workflow_run",
                    delivery=delivery)
    assert r.json()["status"] == "quarantined"
    assert await rows(core, "SELECT id FROM todos") == []
    [held] = alice.http.get(f"/intakes/{ref}/quarantine").json()["quarantine"]
    assert held["reason"].startswith("rules[0].title failed: In function join(), invalid type")
    item = alice.http.get(f"/intakes/{ref}/quarantine/{held['item_id']}").json()["item"]
    assert item["document"]["event"] == "workflow_run" and item["document"]["delivery"] == delivery
    assert item["document"]["headers"]["x-github-hook-id"] == "42"
    assert "x-hub-signature-256" not in item["document"]["headers"]
    assert item["document"]["body"]["workflow_run"]["run_number"] == 88

    still = alice.http.post(f"/intakes/{ref}/quarantine/{held['item_id']}/replay")
    assert still.status_code == 409 and "still quarantined: rules[0].title failed" in still.json()["error"]["message"]

    fixed = dict(CI_RULE, title="join(' ', ['Run', to_string(body.workflow_run.run_number), 'failed'])")
    put = alice.http.put(f"/intakes/{ref}/rules", json={"rules": [fixed]})
    assert put.status_code == 200 and put.json()["intake"]["rules"][0]["title"] == fixed["title"]
    replay = alice.http.post(f"/intakes/{ref}/quarantine/{held['item_id']}/replay")
    assert replay.status_code == 201, replay.text
    todo = replay.json()["todo"]
    assert (todo["title"], await key_of(core, todo["id"]), todo["source"]) == ("Run 88 failed", delivery,
                                                                               "intake-github")
    assert alice.http.get(f"/intakes/{ref}/quarantine").json()["quarantine"] == []
    counts = alice.http.get(f"/intakes/{ref}").json()["intake"]
    assert (counts["accepted"], counts["quarantined"], counts["held"]) == (1, 1, 0)
    # GitHub redelivering it now finds the replayed todo.
    again = github_post(made["url"], body_of(workflow_run()), secret=made["secret"], event="workflow_run",
                        delivery=delivery)
    assert again.json() == {"status": "duplicate", "todo_id": todo["id"]}

    # Drop: another quarantined delivery, gone for good.
    github_post(made["url"], body_of(workflow_run("success")), secret=made["secret"], event="workflow_run",
                delivery=str(uuid.uuid4()))
    [other] = alice.http.get(f"/intakes/{ref}/quarantine").json()["quarantine"]
    assert alice.http.delete(f"/intakes/{ref}/quarantine/{other['item_id']}").status_code == 200
    assert alice.http.get(f"/intakes/{ref}/quarantine").json()["quarantine"] == []


async def test_bad_rules_are_refused_at_creation_naming_the_rule_and_field(core, server):
    alice = await owner(core, server.url)
    cases = [
        ([{"title": "'ok'"}, {"title": "'x'", "filter": "body.["}], "rules[1].filter"),
        ([{"filter": "event == 'issues'"}], "rules[0].title"),
        ([{"title": "'ok'", "priority": "`1`"}], "rules[0].priority"),
        ([{"title": "'ok'", "max_attempts": 3}], "rules[0].max_attempts"),
        ({"title": "'ok'"}, "rules"),
        (["title"], "rules[0]"),
        # A NUL that jsonb cannot store, and an expression nested past the parser's depth: both were 500s.
        ([{"title": "'a\u0000b'"}], "rules[0].title"),
        ([{"title": "'ok'", "kind": "!" * 1500 + "a"}], "rules[0].kind"),
    ]
    for rules, argument in cases:
        r = alice.http.post("/intakes", json={"name": "bad", "endpoint": alice.agent.slug, "source": "github",
                                              "rules": rules})
        assert r.status_code == 400, (rules, r.text)
        assert r.json()["error"]["argument"] == argument, (rules, r.json())
    for fields, argument in [({"source": "gitlab"}, "source"), ({"source": "hmac", "secret": "short"}, "secret"),
                             ({"source": "standard", "secret": "not-a-whsec-secret-at-all"}, "secret"),
                             ({"source": "github", "queue": "elsewhere"}, "queue"),
                             ({"source": "github", "name": "a/b"}, "name"),
                             ({"source": "github", "name": " "}, "name")]:
        r = alice.http.post("/intakes", json={"name": "bad", "endpoint": alice.agent.slug, **fields})
        assert r.status_code == 400 and r.json()["error"]["argument"] == argument, (fields, r.text)
    # An endpoint that is not theirs is named as the body names it.
    r = alice.http.post("/intakes", json={"name": "bad", "endpoint": "nosuchslug00", "source": "github"})
    assert r.status_code == 404 and r.json()["error"]["argument"] == "endpoint", r.text
    assert await rows(core, "SELECT id FROM intakes") == []
    # The same checks guard a rules update.
    made = alice.create(source="github", rules=[ISSUE_RULE])
    r = alice.http.put(f"/intakes/{made['intake']['intake_id']}/rules",
                       json={"rules": [ISSUE_RULE, {"title": "length(`"}]})
    assert r.status_code == 400 and r.json()["error"]["argument"] == "rules[1].title"
    assert alice.http.get(f"/intakes/{made['intake']['intake_id']}").json()["intake"]["rules"] == [ISSUE_RULE]


async def test_another_humans_intake_is_the_same_not_found(core, server):
    alice = await owner(core, server.url, "alice")
    bob = await owner(core, server.url, "bob")
    made = alice.create(source="github", rules=[{"title": "body.x"}])
    github_post(made["url"], b'{"y": 1}', secret=made["secret"], event="push", delivery="d-1")
    ref = made["intake"]["intake_id"]
    [held] = alice.http.get(f"/intakes/{ref}/quarantine").json()["quarantine"]
    ghost = str(uuid.uuid4())
    pairs = [
        ("GET", f"/intakes/{ref}", f"/intakes/{ghost}"),
        ("GET", f"/intakes/{made['intake']['name']}", "/intakes/no-such-intake"),
        ("DELETE", f"/intakes/{ref}", f"/intakes/{ghost}"),
        ("PUT", f"/intakes/{ref}/rules", f"/intakes/{ghost}/rules"),
        ("GET", f"/intakes/{ref}/quarantine", f"/intakes/{ghost}/quarantine"),
        ("GET", f"/intakes/{ref}/quarantine/{held['item_id']}", f"/intakes/{ghost}/quarantine/1"),
        ("POST", f"/intakes/{ref}/quarantine/{held['item_id']}/replay", f"/intakes/{ghost}/quarantine/1/replay"),
        ("DELETE", f"/intakes/{ref}/quarantine/{held['item_id']}", f"/intakes/{ghost}/quarantine/1"),
    ]
    for method, theirs, never in pairs:
        kw = {"json": {"rules": []}} if method == "PUT" else {}
        a = bob.http.request(method, theirs, **kw)
        b = bob.http.request(method, never, **kw)
        assert a.status_code == 404 and (a.status_code, a.content) == (b.status_code, b.content), (method, theirs)
    assert bob.http.get("/intakes").json() == {"intakes": []}
    # Alice's intake is untouched, and an item of another intake is not found on hers.
    assert alice.http.get(f"/intakes/{ref}").json()["intake"]["held"] == 1
    other = alice.create(source="github", rules=[])
    r = alice.http.get(f"/intakes/{other['intake']['intake_id']}/quarantine/{held['item_id']}")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"


async def test_body_cap_and_rate_limit(core, server):
    alice = await owner(core, server.url)
    made = alice.create(source="bearer", rules=[{"title": "'x'"}])
    big = httpx.post(made["url"], content=b"x" * (1024 * 1024 + 1),
                     headers={"Authorization": f"Bearer {made['secret']}"})
    assert big.status_code == 413
    async with httpx.AsyncClient(timeout=30) as client:
        answers = await asyncio.gather(*[
            client.post(made["url"], content=b"{}", headers={"Authorization": "Bearer wrong-" + "x" * 30})
            for _ in range(int(intake_hook.BURST) * 2)])
    statuses = [a.status_code for a in answers]
    assert statuses.count(429) >= 1 and set(statuses) <= {401, 429}


async def test_a_disabled_human_or_paused_intake_answers_like_an_unknown_one(core, server):
    alice = await owner(core, server.url)
    made = alice.create(source="bearer", rules=[{"title": "'x'"}])
    auth = {"Authorization": f"Bearer {made['secret']}"}
    assert httpx.post(made["url"], content=b"{}", headers=auth).status_code == 202
    await humans.set_disabled(core, alice.agent.human, True)
    refused = httpx.post(made["url"], content=b"{}", headers=auth)
    unknown = httpx.post(made["url"] + "x", content=b"{}", headers=auth)
    assert (refused.status_code, refused.content) == (unknown.status_code, unknown.content) == (
        401, unknown.content)
    await humans.set_disabled(core, alice.agent.human, False)
    assert httpx.post(made["url"], content=b"{}", headers=auth).status_code == 202
    # A paused intake answers the same way, until enabled again.
    ref = made["intake"]["intake_id"]
    assert alice.http.post(f"/intakes/{ref}/disable").json()["intake"]["enabled"] is False
    paused = httpx.post(made["url"], content=b"{}", headers=auth)
    assert (paused.status_code, paused.content) == (401, unknown.content)
    assert alice.http.post(f"/intakes/{ref}/enable").json()["intake"]["enabled"] is True
    assert httpx.post(made["url"], content=b"{}", headers=auth).status_code == 202


def test_bodies_are_parsed_as_json_github_form_or_text():
    doc = {"a": "b\u0000c", "\ud800k": 1}
    assert intake_hook.parse_body(json.dumps(doc).encode(), "application/json") == {"a": "bc", "k": 1}
    form = b"payload=" + json.dumps({"action": "opened"}).replace(" ", "+").encode()
    assert intake_hook.parse_body(form, "application/x-www-form-urlencoded") == {"action": "opened"}
    assert intake_hook.parse_body(b"\xffplain text", "text/plain") == "\ufffdplain text"
    deep = b"[" * 100_000 + b"]" * 100_000
    assert isinstance(intake_hook.parse_body(deep, "application/json"), str)


def test_token_buckets():
    buckets = intake_hook.TokenBuckets(rate=1, burst=2)
    assert [buckets.take(b"k", now=0.0) for _ in range(3)] == [True, True, False]
    assert buckets.take(b"k", now=1.0) is True
    assert buckets.take(b"other", now=1.0) is True


# ------------------------------------------------------------------------------------ core checks

async def test_the_quarantine_is_bounded_per_intake(core):
    agent = await vend(core, "carol")
    intake, token, _ = await intakes.create(core, agent.human, name="noisy", endpoint=agent.slug, source="github",
                                            rules=[])
    row = await intakes.by_token(core, token)
    for n in range(intakes.QUARANTINE_MAX + 5):
        out = await intakes.deliver(core, row, {"event": "push", "delivery": f"d-{n}", "headers": {}, "body": {"n": n}})
        assert out["status"] == "quarantined"
    held = await intakes.quarantine(core, agent.human, "noisy")
    assert len(held) == intakes.QUARANTINE_MAX
    assert held[0]["delivery"] == f"d-{intakes.QUARANTINE_MAX + 4}" and held[-1]["delivery"] == "d-5"
    # Retention by age.
    async with core.pool.connection() as conn:
        await conn.execute("UPDATE intake_quarantine SET received_at = now() - interval '15 days' "
                           "WHERE delivery IN ('d-5', 'd-6')")
    assert (await intakes.prune(core))[0] == 2
    assert len(await intakes.quarantine(core, agent.human, "noisy")) == intakes.QUARANTINE_MAX - 2


async def test_routing_semantics():
    doc = {"event": "issues", "delivery": "d-9", "headers": {}, "body": {"n": 0, "t": "hi", "tags": []}}
    rules = intake_rules.validate([{"filter": "body.tags", "title": "'empty list is false'"},
                                   {"filter": "body.n", "title": "body.t", "key": "body.n"}])
    shaped = intake_rules.route(rules, doc, default_max_attempts=5)
    assert (shaped.rule, shaped.title, shaped.key, shaped.payload) == (1, "hi", "0", doc["body"])
    with pytest.raises(intake_rules.RoutingFault, match="no rules"):
        intake_rules.route([], doc, default_max_attempts=5)
    long_title = intake_rules.validate([{"title": "join('', [body.t, body.t])"}])
    big = dict(doc, body={"t": "x" * 300})
    with pytest.raises(intake_rules.RoutingFault, match="title must be at most 512"):
        intake_rules.route(long_title, big, default_max_attempts=5)
    with pytest.raises(Invalid) as err:
        intake_rules.validate([{"title": "'a'", "max_attempts": "`"}])
    assert err.value.argument == "rules[0].max_attempts"


# -------------------------------------------------------------------------------------------- CLI

SB = str(Path(sys.executable).parent / "switchboard")


def test_the_cli_creates_lists_and_replays(pg_server):
    uri = create_database(pg_server)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWITCHBOARD_")}
    env.update(SWITCHBOARD_DATABASE_URL=uri, SWITCHBOARD_LOG_FORMAT="text", SWITCHBOARD_USER="dana")

    def sb(*args: str, ok: bool = True) -> subprocess.CompletedProcess:
        run = subprocess.run([SB, *args], env=env, capture_output=True, text=True, timeout=60)
        assert (run.returncode == 0) == ok, (args, run.stdout, run.stderr)
        return run

    def js(*args: str) -> dict:
        return json.loads(sb(*args, "--json").stdout)

    sb("user", "add", "dana", "--no-password")
    slug = js("endpoint", "vend", "--agent", "fixer", "--queue", "inbox")["slug"]
    made = js("intake", "create", "gh", "--endpoint", slug, "--source", "github", "--rules",
              json.dumps([{"filter": "event == 'issues'", "title": "body.issue.title"}]))
    assert made["url"].endswith("/webhooks/w/" + made["token"]) and len(made["secret"]) == 64
    listed = js("intake", "list")["intakes"]
    assert [i["name"] for i in listed] == ["gh"] and made["secret"] not in json.dumps(listed)
    bad = sb("intake", "rules", "gh", "--set", '[{"title": "body.["}]', ok=False)
    assert "rules[0].title" in bad.stderr

    async def deliver() -> None:
        from conftest import core_for

        async with core_for(uri) as c:
            row = await intakes.by_token(c, made["token"])
            await intakes.deliver(c, row, {"event": "push", "delivery": "p-1", "headers": {}, "body": {}})

    asyncio.run(deliver())
    [held] = js("intake", "quarantine", "gh")["quarantine"]
    assert held["reason"] == "no rule matched (event 'push')"
    assert js("intake", "quarantine", "gh", str(held["item_id"]))["item"]["document"]["delivery"] == "p-1"
    sb("intake", "replay", "gh", str(held["item_id"]), ok=False)  # still no rule for push
    js("intake", "rules", "gh", "--set", json.dumps([{"title": "join(' ', ['push', delivery])"}]))
    replayed = js("intake", "replay", "gh", str(held["item_id"]))
    assert replayed["created"] is True and replayed["todo"]["title"] == "push p-1"
    assert js("intake", "disable", "gh")["intake"]["enabled"] is False
    assert js("intake", "enable", "gh")["intake"]["enabled"] is True
    assert js("intake", "remove", "gh")["removed"]["name"] == "gh"
    assert js("intake", "list")["intakes"] == []
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{psycopg.conninfo.conninfo_to_dict(uri)["dbname"]}" WITH (FORCE)')

