"""Oban's Python port (PyPI `oban`, pinned to OBAN_VERSION), which needs Python 3.12 or newer: it runs
in a child process on such a Python, in a side environment `.venv-peers-oban` at the project root.

The interpreter is SWITCHBOARD_PEERS_PYTHON if set, else `python3.13` or `python3.12` on PATH (a
pyenv shim that does not run is looked up with `pyenv whence`). The side environment is created on
first use and reused while it holds the pinned version; the row reads skipped, with the reason,
when there is no such Python or the install fails.

The child (bench/peers/oban_child.py) drives Oban its own documented way, answering one JSON line
per command: a pool from `Oban.create_pool`, the schema from `oban.schema.install` (what `oban
install` runs), jobs of one no-op `@worker` class put on the queue by a client-mode `Oban` with
`enqueue_many` (timed in the child), and the queue drained by a server-mode
`Oban(pool=..., queues={"bench": W})` started with `await oban.start()` on a fresh pool of 10
connections, opened before it starts (its notifier opens one more, for LISTEN). The event loop is the
harness's (uvloop or asyncio).

The clock (in the child) starts when the first job reaches the worker's `process` and stops when
Oban's telemetry (`oban.producer.ack.stop`, emitted after the acknowledging transaction) has counted
as many jobs acknowledged as were available when the run began: the last job recorded done.
Verification reads `oban_jobs` here: every one of the n jobs `completed` on its first attempt, and
the worker ran n times on n distinct jobs.

What Oban's open-source edition does per job, which the figures include: `enqueue_many` runs one
INSERT (with a `pg_notify`) per job in one transaction, and acknowledgements run one UPDATE per job,
the jobs finished since the last fetch in one transaction (bulk inserts and bulk acks are Oban Pro
features). One producer per queue fetches `W - running` jobs at a time with one `FOR UPDATE SKIP
LOCKED` statement, woken by job completions, insert notifications and the stager's poll (every
second), and waits 5 ms (jittered by up to 5 ms either way) between fetches while jobs still run.
The harness's Python CPU figure is its own process's; the child's CPU is not in it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import psycopg

from .harness import QUEUE, Database, Run, VerifyError

OBAN_VERSION = "0.7.0"
ROOT = Path(__file__).resolve().parents[2]
SIDE_VENV = ROOT / ".venv-peers-oban"
CHILD = Path(__file__).resolve().parent / "oban_child.py"
CANDIDATES = ("python3.13", "python3.12")
ENV_PYTHON = "SWITCHBOARD_PEERS_PYTHON"
REPLY_TIMEOUT_S = 900.0  # the child gives up on a stalled run itself, well before this

_side_python: str | None = None  # the side environment's interpreter, once ready
_side_reason: str | None = None  # or why it cannot be


def _version(python: str) -> tuple[int, int] | None:
    """The (major, minor) of an interpreter, or None when it does not run."""
    try:
        out = subprocess.run([python, "-c", "import sys; print(*sys.version_info[:2])"], capture_output=True,
                             text=True, timeout=30, check=True).stdout.split()
        return int(out[0]), int(out[1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


def _paths(name: str) -> list[str]:
    """Where an interpreter name leads: itself on PATH, then pyenv's versions that have it."""
    found = [p for p in [shutil.which(name) or (name if os.path.isfile(name) else None)] if p]
    if shutil.which("pyenv"):
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run(["pyenv", "whence", "--path", Path(name).name], capture_output=True, text=True,
                                 timeout=30).stdout
            found += [line.strip() for line in out.splitlines() if line.strip()]
    return found


def find_python() -> tuple[str | None, str]:
    """An interpreter of Python 3.12 or newer and its version, or None and why there is none."""
    names = [os.environ[ENV_PYTHON]] if os.environ.get(ENV_PYTHON) else list(CANDIDATES)
    seen = []
    for name in names:
        for path in _paths(name):
            v = _version(path)
            if v is not None and v >= (3, 12):
                return path, f"{v[0]}.{v[1]}"
            seen.append(f"{path} ({f'Python {v[0]}.{v[1]}' if v else 'does not run'})")
    where = f"{ENV_PYTHON}={names[0]}" if os.environ.get(ENV_PYTHON) else " or ".join(CANDIDATES) + " on PATH"
    return None, (f"needs Python ≥ 3.12: none found ({where}: {', '.join(seen) or 'not found'};"
                  f" set {ENV_PYTHON} to one)")


def _side_ok(want: str) -> bool:
    """The side environment runs Python `want` and holds oban OBAN_VERSION."""
    python = SIDE_VENV / "bin" / "python"
    if not python.exists():
        return False
    try:
        out = subprocess.run([str(python), "-c", "import sys, importlib.metadata as m;"
                              " print(*sys.version_info[:2], m.version('oban'))"],
                             capture_output=True, text=True, timeout=60, check=True).stdout.split()
    except (OSError, subprocess.SubprocessError):
        return False
    return out == [*want.split("."), OBAN_VERSION]


def ensure_side_venv() -> tuple[str | None, str | None]:
    """The side environment's interpreter (created or reused), or None and why it cannot be had."""
    global _side_python, _side_reason
    if _side_python or _side_reason:
        return _side_python, _side_reason
    base, version = find_python()
    if base is None:
        _side_reason = version
        return None, _side_reason
    if not _side_ok(version):
        print(f"  oban: installing oban=={OBAN_VERSION} into {SIDE_VENV.name} (Python {version})",
              file=sys.stderr, flush=True)
        for step in ([base, "-m", "venv", "--clear", str(SIDE_VENV)],
                     [str(SIDE_VENV / "bin" / "python"), "-m", "pip", "install", "--quiet",
                      "--disable-pip-version-check", f"oban=={OBAN_VERSION}"]):
            try:
                done = subprocess.run(step, capture_output=True, text=True, timeout=900)
            except (OSError, subprocess.SubprocessError) as e:
                _side_reason = f"could not install oban=={OBAN_VERSION} into {SIDE_VENV.name}: {e}"
                return None, _side_reason
            if done.returncode != 0:
                errors = [ln for ln in done.stderr.splitlines() if ln.strip() and not ln.startswith("WARNING")]
                last = (errors or done.stderr.splitlines() or [f"exit status {done.returncode}"])[-1]
                _side_reason = f"could not install oban=={OBAN_VERSION} into {SIDE_VENV.name}: {last.strip()}"
                return None, _side_reason
        if not _side_ok(version):
            _side_reason = f"{SIDE_VENV.name} does not import oban {OBAN_VERSION} after installing it"
            return None, _side_reason
    _side_python = str(SIDE_VENV / "bin" / "python")
    return _side_python, None


class Oban:
    key = "oban"
    label = "Oban (Python port, queue limit W)"
    enqueue_label = "Oban (Python port), `enqueue_many`"

    def __init__(self) -> None:
        self.db: Database | None = None
        self.proc: asyncio.subprocess.Process | None = None
        self.stderr: collections.deque[str] = collections.deque(maxlen=40)
        self.drain: asyncio.Task | None = None
        self.ran = 0
        self.distinct = 0

    def unavailable(self) -> str | None:
        return ensure_side_venv()[1]

    async def _call(self, cmd: str, **params) -> dict:
        assert self.proc is not None and self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write((json.dumps({"cmd": cmd, **params}) + "\n").encode())
        await self.proc.stdin.drain()
        line = await asyncio.wait_for(self.proc.stdout.readline(), REPLY_TIMEOUT_S)
        if not line:
            await asyncio.sleep(0.1)  # let the stderr reader catch the child's last words
            raise RuntimeError(f"the Oban child exited during {cmd!r}: " + " | ".join(list(self.stderr)[-5:]))
        reply = json.loads(line)
        if not reply.get("ok"):
            raise RuntimeError(f"Oban child, {cmd!r}: {reply.get('error')}")
        return reply

    async def _read_stderr(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        async for line in self.proc.stderr:
            self.stderr.append(line.decode(errors="replace").rstrip())

    async def setup(self, db: Database) -> None:
        python, reason = ensure_side_venv()
        if python is None:
            raise RuntimeError(reason)
        self.db = db
        loop = "uvloop" if type(asyncio.get_running_loop()).__module__.startswith("uvloop") else "asyncio"
        # Neither this Python's PYTHON* settings nor OBAN_* settings (which `Oban.create_pool` reads) reach the child.
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OBAN_", "PYTHON"))}
        self.proc = await asyncio.create_subprocess_exec(
            python, str(CHILD), "--loop", loop, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env=env, cwd=str(CHILD.parent))
        self.drain = asyncio.ensure_future(self._read_stderr())
        await self._call("setup", uri=db.uri, queue=QUEUE)

    async def enqueue(self, n: int) -> float:
        reply = await self._call("enqueue", n=n)
        if reply["inserted"] != n:
            raise VerifyError(f"enqueue_many inserted {reply['inserted']} of {n} jobs")
        return float(reply["seconds"])

    async def run_workers(self, w: int) -> Run:
        reply = await self._call("run", w=w)
        self.ran, self.distinct = int(reply["jobs"]), int(reply["distinct"])
        return Run(jobs=self.ran, seconds=float(reply["seconds"]))

    async def verify(self, n: int) -> None:
        assert self.db is not None
        async with await psycopg.AsyncConnection.connect(self.db.uri, autocommit=True) as conn:
            cur = await conn.execute("SELECT count(*), count(*) FILTER (WHERE state = 'completed' AND attempt = 1"
                                     " AND completed_at IS NOT NULL) FROM oban_jobs")
            total, once = await cur.fetchone()
        if total != n or once != n or self.ran != n or self.distinct != n:
            raise VerifyError(f"{once} of {total} Oban jobs completed on their first attempt, the worker ran"
                              f" {self.ran} times on {self.distinct} jobs; {n} enqueued")

    async def close(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        try:
            if proc.returncode is None and proc.stdin is not None:
                proc.stdin.write(b'{"cmd": "close"}\n')
                await proc.stdin.drain()
                proc.stdin.close()
                await asyncio.wait_for(proc.wait(), 30)
        except (OSError, TimeoutError, ConnectionError):
            pass
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
            if self.drain is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(self.drain, 5)
