"""`switchboard todo push --from-file`: a bad line is refused in words a person reads once (its line
number, then the field and what is wrong with it), locally and after `switchboard login` alike, and
nothing is pushed."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import psycopg

import cli_twins
from cli_twins import make_people
from conftest import core_for, run_async
from switchboard.core import api_tokens, humans

cli_server, config_dirs = cli_twins.cli_server, cli_twins.config_dirs  # the fixtures

# (the bad second line, the message, the argument)
BAD_LINES = (
    ({"titel": "Resize image 2"}, 'line 2: unknown field "titel"; nothing was pushed', "line 2.titel"),
    ({"title": "t", "max_attempts": 0}, "line 2: max_attempts must be an integer from 1 to 100; nothing was pushed",
     "line 2.max_attempts"),
    ({"title": "t", "queue": "elsewhere"},
     "line 2: queue elsewhere is not one of this endpoint's queues (inbox); nothing was pushed", "line 2.queue"),
    ({"title": "t", "queue": "team:Bad"},
     "line 2: queue: a team queue is team:<team-slug>/<queue>: the slug 1-32 lower-case letters, digits or - "
     "starting with a letter or digit, the queue 1-64 letters, digits or _.:-; nothing was pushed", "line 2.queue"),
    ([1], "line 2: must be a JSON object; nothing was pushed", "line 2"),
)


def _human(uri: str) -> tuple[str, str]:
    async def go():
        async with core_for(uri) as c:
            h = await humans.add(c, f"pusher-{uuid.uuid4().hex[:6]}")
            return h.name, (await api_tokens.create(c, h))[0]

    return run_async(go())


def _todos(uri: str, slug: str) -> int:
    with psycopg.connect(uri) as conn:
        return conn.execute("SELECT count(*) FROM todos t JOIN endpoints e ON e.id = t.endpoint_id WHERE e.slug = %s",
                            (slug,)).fetchone()[0]


def test_a_bad_line_is_named_once_locally_and_remotely(cli_server, config_dirs):
    srv, uri = cli_server
    for remote in (False, True):
        name, token = _human(uri)
        [person] = make_people(cli_server, config_dirs, [name], [token], {name: "<human>"}, remote=remote)
        slug = person.ok("endpoint", "vend", "--agent", "resizer", "--queue", "inbox")["slug"]
        path = Path(config_dirs / f"todos-{remote}.jsonl")
        for bad, message, argument in BAD_LINES:
            path.write_text(json.dumps({"title": "Resize image 1"}) + "\n" + json.dumps(bad) + "\n", encoding="utf-8")
            error = person.refused("todo", "push", slug, "--from-file", str(path), code="invalid", argument=argument)
            assert error["message"] == message, (remote, error)
            done = person.run("todo", "push", slug, "--from-file", str(path), code=1)
            assert done.stderr == f"error: {message}\n", (remote, done.stderr)
        assert _todos(uri, slug) == 0
