"""Named SQL statements, loaded once from `core/sql/*.sql` (procrastinate-style `-- name:` blocks).

Fragments from `fragments.sql` are spliced in with `{{name}}`; they are static text from this
package, never user input. Every value travels as a bound parameter.
"""

from __future__ import annotations

import re
from functools import lru_cache
from importlib import resources

_BLOCK = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)
_INCLUDE = re.compile(r"\{\{(\w+)\}\}")


def _parse(text: str) -> dict[str, str]:
    parts = _BLOCK.split(text)
    out: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2]):
        lines = [ln for ln in body.strip().splitlines() if not ln.lstrip().startswith("--")]
        out[name] = "\n".join(lines).strip()
    return out


@lru_cache(maxsize=None)
def _fragments() -> dict[str, str]:
    return _parse(resources.files("switchboard.core.sql").joinpath("fragments.sql").read_text("utf-8"))


@lru_cache(maxsize=None)
def load(file: str) -> dict[str, str]:
    text = resources.files("switchboard.core.sql").joinpath(f"{file}.sql").read_text("utf-8")
    frags = _fragments()
    stmts = _parse(text)
    for _ in range(3):  # fragments may include fragments
        stmts = {k: _INCLUDE.sub(lambda m: frags[m.group(1)], v) for k, v in stmts.items()}
    return stmts


class Queries:
    """Attribute access to one file's statements: `Q.todos.claim`."""

    def __getattr__(self, file: str) -> "_File":
        return _File(load(file))


class _File:
    def __init__(self, stmts: dict[str, str]) -> None:
        self._stmts = stmts

    def __getattr__(self, name: str) -> str:
        try:
            return self._stmts[name]
        except KeyError:
            raise AttributeError(name) from None


Q = Queries()
