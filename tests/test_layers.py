"""The layers, read from the source: no module imports a higher layer, not even lazily inside a
function or under `TYPE_CHECKING`; the composition root builds its surfaces with plain imports.

Bottom to top: `config`/`logs`/`hostnames`/`stopping`, then `db` (where the database is, the pool, LISTEN), `core` (the
rules; no surface), `runtime` (opens the database and the core; owns `Component`), then the surfaces
`mcp` (agents), `web` (HTTP: the Board, the APIs, metrics, hooks; `web/app.py` composes everything),
`cli` and `relay`. docs/architecture.md draws the same picture.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src" / "switchboard"
PACKAGE = "switchboard"

SURFACES = ("mcp", "web", "cli", "relay")
# What each layer must never import (prefixes of module names under `switchboard`).
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "config": ("db", "core", "runtime", *SURFACES),
    "logs": ("db", "core", "runtime", *SURFACES),
    "hostnames": ("db", "core", "runtime", *SURFACES),
    "stopping": ("db", "core", "runtime", *SURFACES),
    "db": ("core", "runtime", *SURFACES),
    "core": ("runtime", *SURFACES),
    "runtime": SURFACES,
    "mcp": ("web", "cli", "relay"),
    "web": ("cli", "relay"),
}
COMPOSITION = ("web/app.py", "cli/__init__.py")


def module_name(path: Path, src: Path = SRC) -> str:
    parts = list(path.relative_to(src).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([PACKAGE, *parts])


def imports_of(path: Path, src: Path = SRC) -> list[tuple[int, str]]:
    """Every `switchboard.*` module a file imports, anywhere in it (functions, TYPE_CHECKING blocks,
    try blocks), resolved to absolute names: (line, module)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    here = module_name(path, src)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            # `from . import x` names submodules: record each one.
            if node.module is None:
                found.extend((node.lineno, f"{target}.{alias.name}") for alias in node.names)
            else:
                found.append((node.lineno, target))
    return [(line, name) for line, name in found if name == PACKAGE or name.startswith(PACKAGE + ".")]


def layer_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def violations(src: Path = SRC) -> list[str]:
    out = []
    for path in sorted(src.rglob("*.py")):
        layer = layer_of(module_name(path, src))
        banned = FORBIDDEN.get(layer, ())
        for line, name in imports_of(path, src):
            target = layer_of(name)
            if target in banned:
                out.append(f"{path.relative_to(src)}:{line}: {layer} imports {name}")
    return out


def test_no_module_imports_a_higher_layer():
    """A lower layer that needs something from a higher one gets it passed in (a constructor
    argument, a callback), or the shared piece moves down to the lowest layer that uses it."""
    assert violations() == []


def test_the_reader_sees_lazy_and_type_checking_imports(tmp_path):
    """The check catches the forms it is meant to catch, on a probe package laid out like ours."""
    (tmp_path / "core").mkdir()
    (tmp_path / "core" / "probe.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..web.app import Surfaces\n"
        "def f():\n    from switchboard.mcp import server\n    import switchboard.cli\n"
        "    from .. import relay\n", encoding="utf-8")
    (tmp_path / "web").mkdir()
    (tmp_path / "web" / "fine.py").write_text("from ..core import probe\nfrom ..mcp import server\n", encoding="utf-8")
    found = [v.split(": ", 1)[1] for v in violations(tmp_path)]
    assert found == ["core imports switchboard.web.app", "core imports switchboard.mcp",
                     "core imports switchboard.cli", "core imports switchboard.relay"]


def test_the_composition_imports_its_parts_by_name():
    """No `importlib` (or `__import__`) in the app's composition or the CLI's command groups: a part
    that is missing fails at import, loudly, instead of being skipped."""
    for rel in COMPOSITION:
        tree = ast.parse((SRC / rel).read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                assert not any(a.name.split(".")[0] == "importlib" for a in node.names), rel
            elif isinstance(node, ast.ImportFrom):
                assert (node.module or "").split(".")[0] != "importlib", rel
            elif isinstance(node, ast.Name):
                assert node.id != "__import__", rel
