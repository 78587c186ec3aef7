"""The epic file: the attempt-ledger seed's schema, validated, plus the relay's own settings.

An epic is split in two parts:

- the *plan* (id, title, description, source, tasks, and the settings that shape the todos the relay
  pushes: `max_attempts_per_task`, `queue`). It is recorded on the server at `relay init` and may not
  change afterwards: a changed plan is a new epic with a new id.
- the *runtime* (worker and gate command templates, `timeout_minutes`, `lease_ttl_seconds`, the working
  directory). It is read from the file at each run and may be overridden by flags.

Every error names where in the file it is (`tasks.T2.depends_on[0]`) and what was wrong.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path
from typing import Any

import yaml

ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
TASK_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,31}$")
QUEUE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$")
PLACEHOLDERS = ("task_id", "epic_id", "todo_id", "attempt", "epic_dir")

DEFAULT_MAX_ATTEMPTS = 3
DEFAULT_TIMEOUT_MINUTES = 15.0
DEFAULT_LEASE_TTL_SECONDS = 300
DEFAULT_QUEUE = "relay"

TOP_KEYS = {"version", "id", "source", "created_at", "title", "description", "parallelization", "tasks",
            "settings", "worker", "gate", "workdir"}
TASK_KEYS = {"title", "priority", "points", "files", "depends_on", "acceptance_criteria", "spec", "phase",
             "worker", "workdir"}
SETTING_KEYS = {"max_attempts_per_task", "timeout_minutes", "lease_ttl_seconds", "queue"}


class EpicError(Exception):
    """The epic file cannot be used; `problems` lists every reason, each naming its place in the file."""

    def __init__(self, path: str, problems: list[str]):
        self.path = path
        self.problems = problems
        super().__init__(f"{path}: " + "; ".join(problems))


@dataclass(frozen=True)
class Task:
    id: str
    title: str
    priority: str | None = None
    points: int | None = None
    files: tuple[str, ...] = ()
    depends_on: tuple[str, ...] = ()
    acceptance_criteria: tuple[str, ...] = ()
    worker: tuple[str, ...] | None = None
    workdir: str | None = None

    def spec(self) -> dict:
        """The task as it travels in the todo payload (data for the worker; never a command)."""
        return {"title": self.title, "priority": self.priority, "points": self.points, "files": list(self.files),
                "depends_on": list(self.depends_on), "acceptance_criteria": list(self.acceptance_criteria)}


@dataclass
class Epic:
    id: str
    title: str
    tasks: dict[str, Task]
    order: list[str]  # dependency order, ties broken by the order in the file
    description: str | None = None
    source: str | None = None
    created_at: str | None = None
    max_attempts_per_task: int = DEFAULT_MAX_ATTEMPTS
    queue: str = DEFAULT_QUEUE
    timeout_minutes: float = DEFAULT_TIMEOUT_MINUTES
    lease_ttl_seconds: int = DEFAULT_LEASE_TTL_SECONDS
    worker: tuple[str, ...] | None = None
    gate: tuple[str, ...] | None = None
    workdir: str | None = None
    path: Path | None = None
    extra: dict = field(default_factory=dict)

    # ------------------------------------------------------------------------------ plan vs runtime

    def plan(self) -> dict:
        """What is recorded on the server and compared at every run."""
        return {
            "id": self.id, "title": self.title, "description": self.description, "source": self.source,
            "created_at": self.created_at,
            "settings": {"max_attempts_per_task": self.max_attempts_per_task, "queue": self.queue},
            "tasks": {tid: self.tasks[tid].spec() for tid in self.tasks},
        }

    def digest(self) -> str:
        return plan_digest(self.plan())

    @property
    def directory(self) -> Path:
        return self.path.parent if self.path else Path.cwd()

    def task_dir(self, task_id: str) -> Path:
        base = self.directory / (self.workdir or ".")
        sub = self.tasks[task_id].workdir
        return (base / sub).resolve() if sub else base.resolve()

    def dependents(self, task_id: str) -> list[str]:
        return [t for t in self.order if task_id in self.tasks[t].depends_on]


def plan_digest(plan: dict) -> str:
    text = json.dumps(plan, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def plan_difference(recorded: dict, current: dict) -> str:
    """Name the first place where two plans differ (for the 'plan changed' error)."""
    for key in ("id", "title", "description", "source", "created_at"):
        if recorded.get(key) != current.get(key):
            return key
    rs, cs = recorded.get("settings") or {}, current.get("settings") or {}
    for key in sorted(set(rs) | set(cs)):
        if rs.get(key) != cs.get(key):
            return f"settings.{key}"
    rt, ct = recorded.get("tasks") or {}, current.get("tasks") or {}
    for tid in list(rt) + [t for t in ct if t not in rt]:
        if tid not in ct:
            return f"tasks.{tid} (removed)"
        if tid not in rt:
            return f"tasks.{tid} (added)"
        for key in sorted(set(rt[tid]) | set(ct[tid])):
            if rt[tid].get(key) != ct[tid].get(key):
                return f"tasks.{tid}.{key}"
    return "the task order"


# ------------------------------------------------------------------------------------------ loading

def load(path: str | Path) -> Epic:
    """Read and validate an epic file. Raises EpicError naming every problem."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise EpicError(str(p), ["file not found"]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise EpicError(str(p), [f"cannot read: {exc}"]) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
        raise EpicError(str(p), [f"not valid YAML{where}: {getattr(exc, 'problem', None) or exc}"]) from None
    epic = parse(data, source_name=str(p))
    epic.path = p.resolve()
    return epic


def parse(data: Any, *, source_name: str = "epic") -> Epic:
    problems: list[str] = []
    if not isinstance(data, dict):
        raise EpicError(source_name, ["the epic must be a mapping with id, title and tasks"])

    for key in data:
        if key not in TOP_KEYS:
            problems.append(f"{key}: unknown key (allowed: {', '.join(sorted(TOP_KEYS))})")

    version = data.get("version")
    if version is not None and version != 2:
        problems.append(f"version: must be 2 (the seed's epic schema), got {version!r}")

    epic_id = data.get("id")
    if epic_id is None:
        problems.append("id: required")
    elif not isinstance(epic_id, str) or not ID_RE.match(epic_id):
        problems.append("id: must be 1-64 characters of letters, digits, '.', '_' or '-', starting with a "
                        f"letter or digit, got {epic_id!r:.80}")
    title = _text(data, "title", problems, required=True)
    description = _text(data, "description", problems)
    source = _text(data, "source", problems)
    created_at = data.get("created_at")
    if isinstance(created_at, (datetime, date)):
        created_at = created_at.isoformat().replace("+00:00", "Z")
    elif created_at is not None and not isinstance(created_at, str):
        problems.append("created_at: must be a timestamp string")
        created_at = None

    settings = data.get("settings") or {}
    if not isinstance(settings, dict):
        problems.append("settings: must be a mapping")
        settings = {}
    for key in settings:
        if key not in SETTING_KEYS:
            problems.append(f"settings.{key}: unknown setting (allowed: {', '.join(sorted(SETTING_KEYS))})")
    max_attempts = _number(settings, "max_attempts_per_task", problems, DEFAULT_MAX_ATTEMPTS, 1, 100, "settings.",
                           integer=True)
    timeout = _number(settings, "timeout_minutes", problems, DEFAULT_TIMEOUT_MINUTES, 0.001, 24 * 60, "settings.")
    lease = _number(settings, "lease_ttl_seconds", problems, DEFAULT_LEASE_TTL_SECONDS, 1, 86400, "settings.",
                    integer=True)
    queue = settings.get("queue", DEFAULT_QUEUE)
    if not isinstance(queue, str) or not QUEUE_RE.match(queue):
        problems.append(f"settings.queue: must be a queue name (letters, digits, '.', '_', ':', '-'), got {queue!r}")
        queue = DEFAULT_QUEUE

    worker = _command(data.get("worker"), "worker", problems)
    gate = _command(data.get("gate"), "gate", problems)
    workdir = _text(data, "workdir", problems)

    tasks: dict[str, Task] = {}
    raw_tasks = data.get("tasks")
    if raw_tasks is None:
        problems.append("tasks: required (a mapping of task id to task)")
        raw_tasks = {}
    elif not isinstance(raw_tasks, dict) or not raw_tasks:
        problems.append("tasks: must be a non-empty mapping of task id to task")
        raw_tasks = {}
    for raw_id, raw in raw_tasks.items():
        tid = str(raw_id)
        where = f"tasks.{tid}"
        if not TASK_ID_RE.match(tid):
            problems.append(f"{where}: a task id must be 1-32 letters, digits, '.', '_' or '-'")
            continue
        if not isinstance(raw, dict):
            problems.append(f"{where}: must be a mapping with at least a title")
            continue
        for key in raw:
            if key not in TASK_KEYS:
                problems.append(f"{where}.{key}: unknown key (allowed: {', '.join(sorted(TASK_KEYS))})")
        t_title = _text(raw, "title", problems, required=True, prefix=where + ".")
        priority = raw.get("priority")
        if priority is not None and not isinstance(priority, (str, int)):
            problems.append(f"{where}.priority: must be a string such as p1")
            priority = None
        points = raw.get("points")
        if points is not None and (isinstance(points, bool) or not isinstance(points, int) or points < 0):
            problems.append(f"{where}.points: must be a whole number, 0 or more")
            points = None
        tasks[tid] = Task(
            id=tid, title=t_title or "", priority=str(priority) if priority is not None else None, points=points,
            files=_strings(raw, "files", problems, where),
            depends_on=_strings(raw, "depends_on", problems, where),
            acceptance_criteria=_strings(raw, "acceptance_criteria", problems, where),
            worker=_command(raw.get("worker"), f"{where}.worker", problems),
            workdir=_text(raw, "workdir", problems, prefix=where + "."),
        )

    for tid, task in tasks.items():
        for i, dep in enumerate(task.depends_on):
            if dep not in tasks and dep in {str(k) for k in raw_tasks}:
                continue  # the dependency itself is invalid and was reported above
            if dep not in tasks:
                problems.append(f"tasks.{tid}.depends_on[{i}]: {tid} depends on {dep}, "
                                "which is not a task of this epic")
            if task.depends_on.count(dep) > 1 and task.depends_on.index(dep) != i:
                problems.append(f"tasks.{tid}.depends_on[{i}]: {dep} is listed twice")

    par = data.get("parallelization")
    if par is not None:
        if not isinstance(par, list):
            problems.append("parallelization: must be a list of groups")
        else:
            for i, group in enumerate(par):
                listed = group.get("tasks") if isinstance(group, dict) else None
                if not isinstance(listed, list):
                    problems.append(f"parallelization[{i}]: must have a list of tasks")
                    continue
                for name in listed:
                    if str(name) not in tasks:
                        problems.append(f"parallelization[{i}].tasks: {name} is not a task of this epic")

    if problems:
        raise EpicError(source_name, problems)

    cycle = find_cycle(tasks)
    if cycle:
        raise EpicError(source_name, ["dependency cycle: " + " -> ".join(cycle) + " (each depends on the next)"])

    extra = {"parallelization": par} if par is not None else {}
    assert isinstance(epic_id, str)  # checked above: an error otherwise
    return Epic(id=epic_id, title=title or "", tasks=tasks, order=topological_order(tasks),
                description=description, source=source, created_at=created_at, max_attempts_per_task=max_attempts,
                queue=queue, timeout_minutes=float(timeout), lease_ttl_seconds=lease, worker=worker, gate=gate,
                workdir=workdir, extra=extra)


def find_cycle(tasks: dict[str, Task]) -> list[str] | None:
    """A dependency cycle as a closed path, each task depending on the next (`T1 -> T2 -> T1`), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(tid: str) -> list[str] | None:
        state[tid] = 1
        stack.append(tid)
        for dep in tasks[tid].depends_on:
            if dep not in tasks:
                continue
            if state.get(dep) == 1:
                return stack[stack.index(dep):] + [dep]
            if dep not in state:
                found = visit(dep)
                if found:
                    return found
        stack.pop()
        state[tid] = 2
        return None

    for tid in tasks:
        if tid not in state:
            found = visit(tid)
            if found:
                return found
    return None


def topological_order(tasks: dict[str, Task]) -> list[str]:
    """Dependencies first; among tasks that are ready together, the order of the file."""
    done: list[str] = []
    placed: set[str] = set()
    while len(done) < len(tasks):
        for tid, task in tasks.items():
            if tid not in placed and all(d in placed for d in task.depends_on):
                done.append(tid)
                placed.add(tid)
                break
    return done


def render_command(template: tuple[str, ...], values: dict[str, str]) -> list[str]:
    """Fill `{task_id}`-style placeholders argument by argument. The values are relay-controlled ids."""
    return [arg.format_map(values) for arg in template]


# ------------------------------------------------------------------------------------------ helpers

def _text(data: dict, key: str, problems: list[str], *, required: bool = False, prefix: str = "") -> str | None:
    value = data.get(key)
    if value is None:
        if required:
            problems.append(f"{prefix}{key}: required")
        return None
    if not isinstance(value, str) or (required and not value.strip()):
        problems.append(f"{prefix}{key}: must be a non-empty string")
        return None
    return value


def _strings(raw: dict, key: str, problems: list[str], where: str) -> tuple[str, ...]:
    value = raw.get(key)
    if value is None:
        return ()
    if not isinstance(value, list):
        problems.append(f"{where}.{key}: must be a list")
        return ()
    out = []
    for i, item in enumerate(value):
        if isinstance(item, bool) or not isinstance(item, (str, int, float)):
            problems.append(f"{where}.{key}[{i}]: must be a string")
            continue
        out.append(str(item))
    return tuple(out)


def _number(data: dict, key: str, problems: list[str], default: float, low: float, high: float, prefix: str,
            *, integer: bool = False) -> Any:
    value = data.get(key, default)
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or not low <= value <= high:
        kind = "a whole number" if integer else "a number"
        problems.append(f"{prefix}{key}: must be {kind} from {low:g} to {high:g}, got {value!r}")
        return default
    return value


def _command(value: Any, where: str, problems: list[str]) -> tuple[str, ...] | None:
    """A command template: a string split like a shell would (no shell runs it) or a list of arguments."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            argv = shlex.split(value)
        except ValueError as exc:
            problems.append(f"{where}: cannot split the command: {exc}")
            return None
    elif isinstance(value, list) and all(isinstance(a, (str, int, float)) and not isinstance(a, bool) for a in value):
        argv = [str(a) for a in value]
    else:
        problems.append(f"{where}: must be a command string or a list of arguments")
        return None
    if not argv:
        problems.append(f"{where}: must not be empty")
        return None
    try:
        render_command(tuple(argv), {k: "x" for k in PLACEHOLDERS})
    except (KeyError, IndexError, ValueError) as exc:
        problems.append(f"{where}: unknown placeholder {exc} (allowed: "
                        + ", ".join("{" + p + "}" for p in PLACEHOLDERS) + ")")
        return None
    return tuple(argv)


def parse_command(value: str, where: str) -> tuple[str, ...]:
    """A command given on the command line (`--worker`, `--gate`)."""
    problems: list[str] = []
    argv = _command(value, where, problems)
    if problems or argv is None:
        raise EpicError(where, problems or ["empty command"])
    return argv
