"""Named SQL statements, read once at import from `core/sql/*.sql` (procrastinate-style `-- name:` blocks).

Fragments from `fragments.sql` are spliced in with `{{name}}` (fragments may splice fragments); they
are static text from this package, never user input. Every value travels as a bound parameter.

The whole catalogue is built when this module is imported: a statement named twice in one file, a
`{{name}}` no fragment defines, or a fragment nesting too deep stops the import with `CatalogueError`
naming the file and statement. `Q.<file>.<name>` reads it; an unknown file or name is an
AttributeError at the call site. tests/test_queries.py checks that every statement is used.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from importlib import resources
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from ..db.pool import DeadlineRawCursor

if TYPE_CHECKING:
    from psycopg import AsyncConnection, AsyncCursor
    from psycopg.rows import DictRow

_BLOCK = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)
_INCLUDE = re.compile(r"\{\{(\w+)\}\}")
FRAGMENTS_FILE = "fragments"
_MAX_DEPTH = 5


class CatalogueError(Exception):
    """The SQL files are inconsistent (a duplicate name, an unknown fragment)."""


def parse(text: str, file: str) -> dict[str, str]:
    """`-- name:` blocks of one file, comment lines dropped, each line without its indentation. A name
    defined twice is an error.

    The indentation is for readers of the files; PostgreSQL does not need it, and psycopg caches its
    parse of a statement's placeholders only up to 4,096 characters (longer ones cost about 30 µs of
    Python per call): the batch claims fit once their indentation is gone."""
    parts = _BLOCK.split(text)
    out: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in out:
            raise CatalogueError(f"{file}.sql: statement {name!r} is defined twice")
        lines = [ln.strip() for ln in body.strip().splitlines() if not ln.lstrip().startswith("--")]
        out[name] = "\n".join(lines).strip()
    return out


def splice(sql: str, fragments: Mapping[str, str], where: str) -> str:
    for _ in range(_MAX_DEPTH):
        if not _INCLUDE.search(sql):
            return sql

        def one(match: re.Match[str]) -> str:
            try:
                return fragments[match.group(1)]
            except KeyError:
                raise CatalogueError(f"{where}: no fragment named {match.group(1)!r}") from None

        sql = _INCLUDE.sub(one, sql)
    if _INCLUDE.search(sql):
        raise CatalogueError(f"{where}: fragments nested deeper than {_MAX_DEPTH}")
    return sql


# psycopg parses a statement's `%(name)s` placeholders once and caches the parse only for statements up
# to this many characters (psycopg._queries.MAX_CACHED_STATEMENT_LENGTH in 3.2 and 3.3); a longer one is
# parsed again on every call, 30 to 60 µs of Python for the longest here.
PARSE_CACHE_MAX_CHARS = 4096
_PLACEHOLDER = re.compile(r"%\((\w+)\)s|%%|%")


class NativeStatement(str):
    """A statement longer than psycopg's parse cache, its placeholders turned into PostgreSQL's own
    (`$1`, `$2`, ... in `native`, `names` giving the parameter of each) when the catalogue is built,
    so that `execute` sends it through a raw cursor, which parses nothing. As a `str` it is the
    statement's text, as every other statement is."""

    native: str
    names: tuple[str, ...]


def native(sql: str, where: str) -> NativeStatement:
    names: list[str] = []

    def one(match: re.Match[str]) -> str:
        if match.group(0) == "%%":
            return "%"
        name = match.group(1)
        if name is None:
            raise CatalogueError(f"{where}: a % that is neither %(name)s nor %%")
        if name not in names:
            names.append(name)
        return f"${names.index(name) + 1}"

    out = NativeStatement(sql)
    out.native = _PLACEHOLDER.sub(one, sql)
    out.names = tuple(names)
    return out


def _read(file: str) -> str:
    return resources.files("switchboard.core.sql").joinpath(f"{file}.sql").read_text("utf-8")


def build() -> dict[str, dict[str, str]]:
    """Every statement of every SQL file but the fragments, spliced: {file: {name: sql}}."""
    fragments = parse(_read(FRAGMENTS_FILE), FRAGMENTS_FILE)
    files = sorted(p.name[:-4] for p in resources.files("switchboard.core.sql").iterdir()
                   if p.name.endswith(".sql") and p.name != f"{FRAGMENTS_FILE}.sql")
    out: dict[str, dict[str, str]] = {}
    for file in files:
        out[file] = {}
        for name, text in parse(_read(file), file).items():
            sql = splice(text, fragments, f"{file}.sql: {name}")
            long = len(sql.encode()) > PARSE_CACHE_MAX_CHARS  # psycopg measures the encoded statement
            out[file][name] = native(sql, f"{file}.sql: {name}") if long else sql
    return out


class _File:
    """One file's statements: `Q.todos.claim`."""

    def __init__(self, file: str, stmts: dict[str, str]) -> None:
        self._file = file
        self._stmts = MappingProxyType(stmts)

    def __getattr__(self, name: str) -> str:
        try:
            return self._stmts[name]
        except KeyError:
            raise AttributeError(f"no statement {name!r} in {self._file}.sql") from None

    def names(self) -> list[str]:
        return list(self._stmts)


class Queries:
    """The catalogue, built once: `Q.<file>.<statement>`."""

    def __init__(self, catalogue: dict[str, dict[str, str]]) -> None:
        self._files = {file: _File(file, stmts) for file, stmts in catalogue.items()}

    def __getattr__(self, file: str) -> _File:
        try:
            return self._files[file]
        except KeyError:
            raise AttributeError(f"no SQL file {file!r}") from None

    def files(self) -> list[str]:
        return list(self._files)


Q = Queries(build())


async def execute(conn: AsyncConnection[DictRow], sql: str, params: Mapping[str, Any]) -> AsyncCursor[DictRow]:
    """`conn.execute(sql, params)`, except that a NativeStatement goes through a raw cursor with its
    parameters in order: the same statement and values, without psycopg parsing it on every call."""
    if isinstance(sql, NativeStatement):
        cur: AsyncCursor[DictRow] = DeadlineRawCursor(conn)
        return await cur.execute(sql.native, [params[name] for name in sql.names])
    return await conn.execute(sql, params)


async def one(cur: AsyncCursor[DictRow]) -> DictRow:
    """The row a statement always returns (INSERT … RETURNING, a count, a lock probe)."""
    row = await cur.fetchone()
    if row is None:
        raise RuntimeError("a statement that always returns a row returned none")
    return row
