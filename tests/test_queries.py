"""The SQL catalogue: built once at import, every statement defined once, every `{{fragment}}`
resolved, and every statement and fragment used (a statement nobody runs is dead SQL to maintain)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from switchboard.core import queries, todos
from switchboard.core.queries import CatalogueError, Q

SRC = Path(queries.__file__).resolve().parent.parent  # src/switchboard
SQL = Path(queries.__file__).resolve().parent / "sql"
USE = re.compile(r"\bQ\.(\w+)\.(\w+)\b")


def used_in_src() -> set[tuple[str, str]]:
    found: set[tuple[str, str]] = set()
    for path in SRC.rglob("*.py"):
        found.update(USE.findall(path.read_text(encoding="utf-8")))
    return found


def test_the_catalogue_is_built_once_at_import():
    assert Q.todos is Q.todos  # the same object each time, not re-read per access
    assert set(Q.files()) == {p.stem for p in SQL.glob("*.sql")} - {"fragments"}


def test_every_fragment_resolves_and_nothing_is_left_to_splice():
    for file in Q.files():
        for name in getattr(Q, file).names():
            assert "{{" not in getattr(getattr(Q, file), name), f"{file}.{name}"


def test_every_statement_in_src_exists_and_every_statement_is_used():
    used = used_in_src()
    defined = {(file, name) for file in Q.files() for name in getattr(Q, file).names()}
    assert used - defined == set(), "referenced but not defined"
    assert defined - used == set(), "defined but never used in src"


def test_every_fragment_is_spliced_somewhere():
    fragments = queries.parse((SQL / "fragments.sql").read_text("utf-8"), "fragments")
    texts = [p.read_text("utf-8") for p in SQL.glob("*.sql")]
    unused = [f for f in fragments if not any("{{" + f + "}}" in t for t in texts)]
    assert unused == []


def test_a_bad_catalogue_is_refused_naming_where():
    with pytest.raises(CatalogueError, match=r"x\.sql: statement 'a' is defined twice"):
        queries.parse("-- name: a\nSELECT 1\n-- name: a\nSELECT 2\n", "x")
    with pytest.raises(CatalogueError, match=r"x\.sql: b: no fragment named 'nope'"):
        queries.splice("SELECT {{nope}}", {}, "x.sql: b")
    with pytest.raises(CatalogueError, match="nested deeper"):
        queries.splice("{{loop}}", {"loop": "{{loop}}"}, "x.sql: c")
    with pytest.raises(AttributeError, match="no statement 'nope' in todos.sql"):
        Q.todos.nope  # noqa: B018  (reading it is what raises)


# Up to this length psycopg keeps its parse of a statement's %(name)s placeholders (psycopg/_queries.py,
# MAX_CACHED_STATEMENT_LENGTH); a longer statement is parsed again on every call, about 30 µs of Python.
PSYCOPG_PARSE_CACHE = 4096
HOT = ("claim_next", "claim_next_one", "claim_next_batch", "claim_next_batch_one", "claim_next_team_one", "claim",
       "complete", "fail", "complete_batch", "fail_batch", "heartbeat", "release")


@pytest.mark.parametrize("name", HOT)
def test_the_claim_and_close_statements_fit_psycopgs_parse_cache(name):
    """The catalogue keeps the files' indentation out of the statements; with it the batch claims were
    4,343 characters, parsed afresh on every call (bench/group_bench.py: 15 µs of Python per todo in
    groups of four)."""
    sql = getattr(Q.todos, name)
    assert len(sql.encode()) <= PSYCOPG_PARSE_CACHE, f"{name}: {len(sql.encode())} bytes"


def test_the_statements_keep_no_indentation_but_keep_their_lines():
    body = queries.parse("-- name: s\nSELECT 1\n    FROM t  -- a note stays on its line\n  WHERE x\n", "f")["s"]
    assert body == "SELECT 1\nFROM t  -- a note stays on its line\nWHERE x"


def test_the_closed_columns_are_the_attempt_fields_the_python_folds():
    """`closed_columns` (SQL) and todos.CLOSED_COLUMNS (Python) name the same columns in the same order,
    each the attempt-row field shapes.attempt reads: a column the Python does not fold would be left in
    the todo row, one it folds and the SQL lacks would fail every complete and fail."""
    fragment = queries.parse((SQL / "fragments.sql").read_text("utf-8"), "fragments")["closed_columns"]
    # each column as it is (`a.seq AS "closed.seq"`) or with its empty value read as NULL
    # (`nullif(a.notes, '[]'::jsonb) AS "closed.notes"`)
    pairs = re.findall(r'a\.(\w+)(?:, [^)]*\))? AS "(closed\.\w+)"', fragment)
    assert [(alias, column) for column, alias in pairs] == list(todos.CLOSED_COLUMNS)
    assert all(alias == f"closed.{column}" for column, alias in pairs)


def test_statements_longer_than_the_parse_cache_go_native():
    """A statement psycopg would parse on every call carries its PostgreSQL form (queries.execute sends
    it through a raw cursor); the shorter ones are plain text. The limit is psycopg's own."""
    import psycopg._queries

    assert queries.PARSE_CACHE_MAX_CHARS == psycopg._queries.MAX_CACHED_STATEMENT_LENGTH
    long = []
    for file in Q.files():
        for name in getattr(Q, file).names():
            sql = getattr(getattr(Q, file), name)
            over = len(sql.encode()) > queries.PARSE_CACHE_MAX_CHARS
            assert isinstance(sql, queries.NativeStatement) == over, (file, name)
            if over:
                long.append(name)
                assert "%(" not in sql.native and sql.native.count("$1") >= 1
    assert "claim_next_mixed" in long and "claim_next_team_group" in long


def test_the_native_form_numbers_each_name_once_and_unescapes_percent():
    s = queries.native("SELECT %(a)s, %(b)s, %(a)s WHERE x LIKE 'agent:%%'", "f.sql: s")
    assert s.native == "SELECT $1, $2, $1 WHERE x LIKE 'agent:%'" and s.names == ("a", "b")
    assert s == "SELECT %(a)s, %(b)s, %(a)s WHERE x LIKE 'agent:%%'"  # the text is unchanged
    with pytest.raises(queries.CatalogueError, match="f.sql: s"):
        queries.native("SELECT %s", "f.sql: s")
