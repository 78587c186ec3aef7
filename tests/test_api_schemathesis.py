"""The human API against its own OpenAPI document, with Schemathesis (property-based).

A live server (uvicorn on a free port, the real database) with seeded data: a human with a write
token, endpoints with todos in several states, a hook, a second token, a team, a sink of the human's
and one of the team's, an intake with a quarantined delivery. Every operation of the document gets
generated requests, valid ones and invalid ones; about half of them name a seeded object instead of a
random id, so the handlers run past `not_found` too. The checks: no 5xx, every answer matches the
document's schema for its status, every status is one the document lists, and every answer has the
documented content type and headers.
"""

from __future__ import annotations

import time

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from conftest import make_settings, start_thread_server
from mcp_support import push, vend
from switchboard.core import admission, api_tokens, endpoints, hooks, intakes, producer, sinks, teams, todos

# Schemathesis' own strategies draw with `random` inside; Hypothesis warns about it on every run.
pytestmark = pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisDeprecationWarning")
MAX_EXAMPLES = 20  # per operation and mode: 10-40 s in all, with the machine loaded or not
CHECKS = [not_a_server_error, response_schema_conformance, status_code_conformance, content_type_conformance,
          response_headers_conformance]


@pytest.fixture(scope="module")
def server(pg_uri):
    srv = start_thread_server(make_settings(pg_uri, api_rate_limit_per_minute=1_000_000,
                                            api_rate_limit_burst=1_000_000))
    yield srv
    srv.stop()


async def seed(core) -> tuple[str, dict[str, list[str]]]:
    """The write token, and real values for each path parameter."""
    agent = await vend(core, "alice", queues=["build", "deploy"])
    spare = await vend(core, "alice", agent="spare", queues=["inbox"])
    caller = endpoints.caller_from_row(await endpoints.resolve_credential(core, agent.credential))
    ids = []
    for n in range(6):
        t = await push(core, agent, f"todo {n}", queue="build", max_attempts=2)
        ids.append(t["id"])
    await todos.claim(core, caller, ids[1])
    await todos.claim(core, caller, ids[2])
    await todos.request_input(core, caller, ids[2], question="which?")
    await todos.claim(core, caller, ids[3])
    await todos.fail(core, caller, ids[3], retry=False)
    hook, _ = await hooks.add(core, agent.human, agent.slug, url="http://127.0.0.1:9/hook")
    token, _ = await api_tokens.create(core, agent.human, scope_name="write")
    _, other = await api_tokens.create(core, agent.human, scope_name="read")
    # A team with a queue, a todo on it and a policy, so the team and admission routes run past not_found.
    team = await teams.create(core, agent.human, "crew")
    await producer.push_team(core, agent.human, "team:crew/build", title="team work")
    await admission.set_policy(core, agent.human, "team:crew/build", max_in_flight=3)
    await admission.set_policy(core, agent.human, "build", endpoint=agent.slug, max_claims_per_window=100)
    # A sink of the human's and one of the team's (their test messages go nowhere: port 9 refuses).
    own_sink = await sinks.add(core, agent.human, kind="slack", url="http://127.0.0.1:9/sink")
    team_sink = await sinks.add_for_team(core, agent.human, team["slug"], kind="generic", url="http://127.0.0.1:9/team")
    # An intake whose one rule does not match a push, and a push delivery held in its quarantine.
    intake, intake_token, _ = await intakes.create(core, agent.human, name="gh", endpoint=agent.slug, source="github",
                                                   queue="build", rules=[{"filter": "event == 'issues'",
                                                                          "title": "body.issue.title"}])
    held = await intakes.deliver(core, await intakes.by_token(core, intake_token),
                                 {"event": "push", "delivery": "p-1", "headers": {}, "body": {"ref": "main"}})
    return token, {"slug": [agent.slug, spare.slug], "id": ids, "hook_id": [hook["hook_id"]],
                   "ref": [other["id"], other["prefix"]], "key": ["retention_max_age_days"],
                   "team": [team["slug"]], "human": [agent.human.name],
                   "scope": ["team:crew", f"endpoint:{agent.slug}"], "queue": ["build"],
                   "sink_id": [own_sink["sink_id"], team_sink["sink_id"]],
                   "intake": [intake["intake_id"], intake["name"]], "item": [str(held["item_id"])]}


def with_seeded(strategy, real: dict[str, list[str]]):
    """Cases whose path parameters are, half the time, seeded objects."""

    def pick(args):
        case, use_real, n = args
        if use_real and case.path_parameters:
            for name in case.path_parameters:
                if name in real:
                    case.path_parameters[name] = real[name][n % len(real[name])]
        return case

    return st.tuples(strategy, st.booleans(), st.integers(0, 10)).map(pick)


async def test_every_operation_conforms_to_the_document(core, server):
    token, real = await seed(core)
    document = httpx.get(server.url + "/api/v1/openapi.json").json()
    schema = schemathesis.openapi.from_dict(document)
    headers = {"Authorization": f"Bearer {token}"}
    failures: list[str] = []
    started = time.monotonic()
    operations = 0
    for result in schema.get_all_operations():
        operation = result.ok()
        operations += 1
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            strategy = with_seeded(operation.as_strategy(generation_mode=mode), real)

            @settings(max_examples=MAX_EXAMPLES, deadline=None, database=None, derandomize=True,
                      phases=[Phase.explicit, Phase.generate],
                      suppress_health_check=list(HealthCheck))
            @given(case=strategy)
            def run(case) -> None:
                case.call_and_validate(base_url=server.url, headers=headers, checks=CHECKS, timeout=30)

            try:
                run()
            except Exception as exc:  # schemathesis' failure group, after shrinking
                failures.append(f"{operation.method.upper()} {operation.path} ({mode.value}): {str(exc)[:1500]}")
    elapsed = time.monotonic() - started
    print(f"schemathesis: {operations} operations, {elapsed:.1f} s")
    assert operations >= 20
    assert not failures, "\n\n".join(failures)
    # The seeded token still works: nothing above revoked it (its id was never offered).
    assert httpx.get(server.url + "/api/v1/me", headers=headers).status_code == 200
