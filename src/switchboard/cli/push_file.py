"""`switchboard todo push SLUG --from-file todos.jsonl` (or `todo push --team TEAM --from-file …` for a
team's queues): many todos from a JSON Lines file (or `-` for standard input), one object a line
with the fields of a single push (`title`, `queue`, `payload`, `kind`, `key`, `max_attempts`,
`assignee`; for a team each line names its queue); blank lines are skipped.

Every line is read and checked (JSON, an object, each field by the core's rules, the queue one of the
endpoint's) before the first todo is pushed, so a bad line is refused naming its line number and
field, with exit 1, and nothing is pushed. The todos then go in batches (at most
`PUSH_BATCH_MAX` todos and `BATCH_MAX_BYTES` of JSON each, under the server's 1 MiB body cap), each
one statement through the backend, locally or remotely. Idempotency keys make a re-run of the same
file safe: todos whose key a live todo holds come back as existing.
"""

from __future__ import annotations

import json
import sys
from typing import Any, NoReturn

from ..core.errors import Invalid
from ..core.inputs import MAX_ATTEMPTS_MIN, PUSH_BATCH_MAX
from ..core.producer import check_items
from .common import EXIT_REFUSED, fail, fail_usage

BATCH_MAX_BYTES = 768 * 1024  # of JSON per batch: the human API refuses bodies over 1 MiB


def _bad_line(number: int, message: str, field: str | None = None) -> NoReturn:
    fail("invalid", f"line {number}: {message}; nothing was pushed", EXIT_REFUSED,
         argument=f"line {number}" + (f".{field}" if field else ""))


def read_lines(path: str) -> list[tuple[int, Any]]:
    """(line number from 1, parsed JSON) of every non-blank line."""
    try:
        if path == "-":
            text = sys.stdin.read()
        else:
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
    except OSError as exc:
        fail_usage(f"--from-file: cannot read {path}: {exc.strerror}", argument="from-file")
    except UnicodeDecodeError:
        fail_usage(f"--from-file: {path} is not UTF-8 text", argument="from-file")
    out = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except (ValueError, RecursionError) as exc:
            _bad_line(number, f"not valid JSON ({getattr(exc, 'msg', 'nested too deeply')})")
        if not isinstance(value, dict):
            _bad_line(number, "must be a JSON object")
        out.append((number, value))
    if not out:
        fail_usage(f"--from-file: {path} holds no todos", argument="from-file")
    return out


def check(lines: list[tuple[int, Any]], queues: list[str], team: str | None = None) -> None:
    """The core's checks on every line (for `team`, each line names a queue of that team); the first
    bad one exits naming its line and field."""
    try:
        check_items([v for _, v in lines], queues, MAX_ATTEMPTS_MIN, team=team)
    except Invalid as exc:
        # "todos[i].field is ..." -> "line N: field is ..."; "todos[i].field: <the core's message>" (one
        # that does not begin with the field, such as `unknown field "titel"`) -> "line N: <the message>".
        index_part = (exc.argument or "todos[0]")[len("todos["):]
        index, _, field = index_part.partition("]")
        field = field.lstrip(".")
        rest = exc.message[len(exc.argument or ""):]
        words = rest[1:].strip() if rest.startswith(":") else f"{field or 'the line'} {rest.strip()}".strip()
        _bad_line(lines[int(index)][0], words, field or None)


def batches(items: list[dict]) -> list[list[dict]]:
    """Consecutive runs of at most PUSH_BATCH_MAX items and about BATCH_MAX_BYTES of JSON."""
    out: list[list[dict]] = [[]]
    size = 0
    for item in items:
        n = len(json.dumps(item, separators=(",", ":"), ensure_ascii=False).encode("utf-8")) + 1
        if out[-1] and (len(out[-1]) >= PUSH_BATCH_MAX or size + n > BATCH_MAX_BYTES):
            out.append([])
            size = 0
        out[-1].append(item)
        size += n
    return out


def merge(replies: list[dict]) -> dict:
    results = [r for reply in replies for r in reply["results"]]
    created = sum(1 for r in results if r["created"])
    return {"results": results, "created": created, "existing": len(results) - created}
