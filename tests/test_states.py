"""The state names are written once (core/states.py): the migrations' CHECK constraints, read back from
`pg_constraint`, hold exactly the same values, and every surface that lists them reads the enums."""

from __future__ import annotations

import re

import psycopg
import pytest

from switchboard.core import gauges, invariants
from switchboard.core.states import GAUGE_STATES, TODO_STATES, AttemptOutcome, Disposition, TodoState


def _check_values(uri: str, table: str, column: str) -> set[str]:
    """The quoted values of the CHECK on `table.column` (`VALUE IN (...)` / `= ANY (ARRAY[...])`): the
    constraint of the column's domain (migration 0026)."""
    with psycopg.connect(uri, autocommit=True) as conn:
        rows = conn.execute(
            """SELECT pg_get_constraintdef(c.oid) FROM pg_constraint c
                 JOIN pg_attribute a ON a.atttypid = c.contypid
                WHERE c.contype = 'c' AND a.attrelid = %s::regclass AND a.attname = %s""",
            (table, column)).fetchall()
    assert len(rows) == 1, rows
    return set(re.findall(r"'([^']+)'::text", rows[0][0]))


@pytest.mark.parametrize("table, column, enum", [
    ("todos", "state", TodoState),
    ("todo_attempts", "outcome", AttemptOutcome),
    ("todo_attempts", "disposition", Disposition),
])
def test_enums_match_the_check_constraints(pg_uri, table, column, enum):
    assert _check_values(pg_uri, table, column) == {m.value for m in enum}


def test_every_member_is_commented_with_who_moves_it():
    import inspect

    from switchboard.core import states

    source = inspect.getsource(states)
    for enum in (TodoState, AttemptOutcome, Disposition):
        block = inspect.getsource(enum)
        for member in enum:
            line = next(ln for ln in block.splitlines() if re.match(rf"\s+{member.name} = ", ln))
            before = block.splitlines()[block.splitlines().index(line) - 1]
            assert "#" in line or before.strip().startswith("#"), (enum.__name__, member.name)
    assert "In:" in source and "Out:" in source


def test_the_surfaces_read_the_enums():
    from switchboard.cli import todo_app
    from switchboard.mcp import schemas, tools
    from switchboard.web.board import todo_pages

    assert gauges.GAUGE_STATES == GAUGE_STATES
    assert tools.TOOLS["list_todos"].input_schema["properties"]["state"]["enum"] == list(TODO_STATES)
    assert schemas.TODO_COMPACT["properties"]["state"]["enum"] == list(TODO_STATES)
    assert schemas.ATTEMPT["properties"]["outcome"]["enum"][:-1] == [o.value for o in AttemptOutcome]
    assert schemas.ATTEMPT["properties"]["disposition"]["enum"][:-1] == [d.value for d in Disposition]
    assert todo_pages.TODO_STATES == TODO_STATES
    listing = next(c for c in todo_app.registered_commands if c.name == "list")
    import inspect

    state_opt = inspect.signature(listing.callback).parameters["state"].default
    assert all(s in state_opt.help for s in TODO_STATES)
    checks = " ".join(invariants.CHECKS.values())
    for value in (TodoState.INPUT_REQUIRED, Disposition.RETRY_SCHEDULED, AttemptOutcome.REAPED):
        assert f"'{value}'" in checks


def test_no_surface_spells_the_states_out():
    """The value lists live in core/states.py alone (SQL statements excepted: they are static text)."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent / "src" / "switchboard"
    spelled = re.compile(r"""["']pending["'],\s*["']claimed["']""")
    offenders = []
    for path in root.rglob("*.py"):
        if path.name == "states.py":
            continue
        text = path.read_text(encoding="utf-8")
        literal = any(isinstance(n, ast.Constant) and n.value == TodoState.INPUT_REQUIRED.value
                      for n in ast.walk(ast.parse(text)))
        if literal or spelled.search(text):
            offenders.append(str(path.relative_to(root)))
    assert offenders == []
