"""Every verb's results against the output schema the server lists, with a JSON Schema validator.

Each verb is driven down a success path and an error path in both protocol eras. A success must be
structured content valid against the tool's `outputSchema` as `tools/list` shows it; an error must
carry no structured content (a client validating it against the success schema would throw) and its
text must be the error body. A shape drift fails here before it fails at an agent."""

from __future__ import annotations

import jsonschema
import pytest

from conftest import make_settings, start_thread_server
from mcp_support import body, check_result, error_body, push, sdk, vend
from switchboard.core import admission
from switchboard.core.models import VERBS
from switchboard.mcp import schemas
from switchboard.mcp.tools import TOOLS


@pytest.fixture(scope="module")
def server(pg_uri):
    srv = start_thread_server(make_settings(pg_uri, retry_backoff_base_seconds=0, retry_backoff_max_seconds=0))
    yield srv
    srv.stop()


def test_every_output_schema_is_a_valid_object_schema():
    for name, tool in TOOLS.items():
        jsonschema.Draft202012Validator.check_schema(tool.output_schema)
        assert tool.output_schema["type"] == "object", name  # what MCP requires of an outputSchema
    jsonschema.Draft202012Validator.check_schema(schemas.ERROR_BODY)


def test_the_old_error_shape_fails_the_success_schemas():
    """Why errors carry no structured content: as structured content they match no verb's schema."""
    old = {"error": {"code": "not_found", "message": "todo not found"}}
    for tool in TOOLS.values():
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(old, tool.output_schema, cls=jsonschema.Draft202012Validator)


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_each_verb_success_and_error_validate_against_the_listed_schema(core, server, mode):
    a = await vend(core, queues=["work", "side"], verbs=list(VERBS))
    narrow = await vend(core, agent="narrow", queues=["work"], verbs=["list_todos"])
    work = [await push(core, a, f"w{i}", queue="work", payload={"n": i}) for i in range(2)]
    side = {name: await push(core, a, name, queue="side", max_attempts=2)
            for name in ("fenced", "retry", "release", "ask")}
    seen: dict[str, set[str]] = {verb: set() for verb in VERBS}

    async with sdk(server.url, a, mode=mode) as c:
        listed = {t.name: t.output_schema for t in (await c.list_tools()).tools}
        assert set(listed) == set(VERBS)
        assert listed == {name: tool.output_schema for name, tool in TOOLS.items()}

        async def run(verb: str, args: dict, expect_error: str | None = None) -> dict:
            result = await c.call_tool(verb, args)
            check_result(verb, result, listed[verb])  # against the schema as listed on the wire
            if expect_error is None:
                seen[verb].add("ok")
                return body(result)
            err = error_body(result)
            assert err["code"] == expect_error, (verb, err)
            seen[verb].add("error")
            return err

        await run("list_todos", {"queue": "work"})
        assert (await run("list_todos", {"state": "nope"}, "invalid"))["argument"] == "state"
        await run("get_todo", {"id": work[0]["id"]})
        await run("get_todo", {"id": "td_00000000-0000-0000-0000-000000000000"}, "not_found")

        got = await run("claim_next", {"queue": "work", "claimant": "schema/1"})
        assert got["empty"] is False and got["todo"]["id"] == work[0]["id"]
        assert (await run("claim_next", {"lease_ttl_seconds": "ten"}, "invalid"))["argument"] == "lease_ttl_seconds"
        await run("heartbeat", {"id": work[0]["id"], "lease_ttl_seconds": 120})
        await run("heartbeat", {"id": work[1]["id"]}, "conflict")  # not held
        await run("complete", {"id": work[0]["id"], "summary": "ok", "artifact": "https://ci.example/1"})
        await run("complete", {"id": work[1]["id"], "artifact": "ftp://x"}, "invalid")
        await run("claim_next", {"queue": "work"})
        await run("complete", {"id": work[1]["id"], "result": {"ok": True}})
        assert await run("claim_next", {"queue": "work"}) == {"empty": True}

        fenced = await run("claim", {"id": side["fenced"]["id"], "require_fence": True})
        assert fenced["lease_token"]
        await run("claim", {"id": side["fenced"]["id"]}, "conflict")
        await run("heartbeat", {"id": side["fenced"]["id"], "lease_token": "wrong"}, "conflict")
        await run("complete", {"id": side["fenced"]["id"], "lease_token": fenced["lease_token"]})

        await run("claim", {"id": side["retry"]["id"]})
        retry = await run("fail", {"id": side["retry"]["id"], "summary": "broke"})
        assert retry["dead_letter"] is False and retry["next_retry_at"]
        await run("claim", {"id": side["retry"]["id"]})
        dead = await run("fail", {"id": side["retry"]["id"], "summary": "broke again"})
        assert dead["dead_letter"] is True
        await run("fail", {"id": side["retry"]["id"]}, "conflict")
        history = await run("get_todo", {"id": side["retry"]["id"]})
        assert [x["outcome"] for x in history["attempts"]] == ["failed", "failed"]

        await run("claim", {"id": side["release"]["id"]})
        assert (await run("release", {"id": side["release"]["id"], "summary": "later"}))["state"] == "pending"
        await run("release", {"id": side["release"]["id"]}, "conflict")
        await run("claim", {"id": side["ask"]["id"]})
        asked = await run("request_input", {"id": side["ask"]["id"], "question": "which branch?"})
        assert asked["state"] == "input-required"
        await run("request_input", {"id": side["ask"]["id"], "question": "again?"}, "conflict")

        # Admission control (SPEC-0030): usage on a claim, deferred on an empty claim_next, the error
        # `deferred` on a claim by id, the read-only admission_status.
        assert (await run("admission_status", {})) == {"policies": []}
        await run("admission_status", {"queue": "elsewhere"}, "forbidden")
        await admission.set_policy(core, a.human, "work", endpoint=a.slug, max_in_flight=1,
                                   max_claims_per_window=10)
        extra = [await push(core, a, f"x{i}", queue="work") for i in range(2)]
        got = await run("claim_next", {"queue": "work"})
        assert got["admission"]["in_flight"] == 1 and got["admission"]["used"] == 1
        empty = await run("claim_next", {"queue": "work"})
        assert empty["empty"] is True and empty["deferred"][0]["reason"] == "in_flight_full"
        refused = await run("claim", {"id": extra[1]["id"]}, "deferred")
        assert refused["queue"] == "work" and refused["reason"] == "in_flight_full"
        status = await run("admission_status", {"queue": "work"})
        assert status["policies"][0]["status"] == "in_flight_full"
        declared = schemas.ADMISSION_STATUS_RESULT["properties"]["policies"]["items"]["properties"]
        assert set(status["policies"][0]) == set(declared)  # every field it returns is in its schema

    async with sdk(server.url, narrow, mode=mode) as n:
        result = await n.call_tool("complete", {"id": work[0]["id"]})
        check_result("complete", result, listed["complete"])
        assert error_body(result)["code"] == "forbidden"
        seen["complete"].add("forbidden")

    assert all({"ok", "error"} <= kinds for kinds in seen.values()), seen

