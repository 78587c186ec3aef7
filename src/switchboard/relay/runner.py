"""Running a worker or gate command: argv without a shell, in its own process group, with a kill timer.

A command that outlives its timeout gets SIGTERM, then SIGKILL after a grace period, for its whole process
group. On Linux the worker is also tied to the relay's life (PR_SET_PDEATHSIG), so a relay killed hard does
not leave its worker running on: the lease lapses, the server records the attempt as died, and the next
relay starts over cleanly.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

KILL_GRACE_SECONDS = 5.0
TAIL_BYTES = 4096
# Never handed to a worker: the relay's own credentials.
SECRET_ENV = ("SWITCHBOARD_API_TOKEN", "SWITCHBOARD_CREDENTIAL")


@dataclass
class ProcessResult:
    exit_code: int | None  # negative: killed by that signal
    timed_out: bool
    duration_s: float
    output_tail: str


def _tie_to_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL("libc.so.6", use_errno=True)
            libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except OSError:
            pass


def _signal_group(proc: asyncio.subprocess.Process, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


async def _stop(proc: asyncio.subprocess.Process, grace: float) -> None:
    """SIGTERM the group, then SIGKILL it if the leader is still there after `grace` seconds."""
    if proc.returncode is None:
        _signal_group(proc, signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), grace)
        except TimeoutError:
            pass
    _signal_group(proc, signal.SIGKILL)  # stragglers of the group, even when the leader left
    if proc.returncode is None:
        await proc.wait()


async def run_process(argv: list[str], *, cwd: Path, env: dict[str, str], timeout_s: float | None,
                      kill_grace_s: float = KILL_GRACE_SECONDS) -> ProcessResult:
    """Run to completion, timeout or cancellation (which stops the process and re-raises)."""
    started = time.monotonic()
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv, cwd=str(cwd), env=env, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT, start_new_session=True, preexec_fn=_tie_to_parent)
    except OSError as exc:
        return ProcessResult(exit_code=127, timed_out=False, duration_s=0.0,
                             output_tail=f"cannot start {argv[0]}: {exc.strerror or exc}")
    tail = bytearray()

    async def drain() -> None:
        assert proc.stdout is not None
        while True:
            chunk = await proc.stdout.read(8192)
            if not chunk:
                return
            tail.extend(chunk)
            if len(tail) > TAIL_BYTES:
                del tail[:-TAIL_BYTES]

    reader = asyncio.create_task(drain())
    timed_out = False
    try:
        try:
            await asyncio.wait_for(proc.wait(), timeout_s)
        except TimeoutError:
            timed_out = True
            await _stop(proc, kill_grace_s)
        _signal_group(proc, signal.SIGKILL)  # the leader is gone; leave nothing of its group behind
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(reader), 2)
    except asyncio.CancelledError:
        await asyncio.shield(_stop(proc, min(kill_grace_s, 2.0)))
        reader.cancel()
        raise
    finally:
        if not reader.done():
            reader.cancel()
    return ProcessResult(exit_code=proc.returncode, timed_out=timed_out, duration_s=time.monotonic() - started,
                         output_tail=tail.decode("utf-8", "replace"))


class AttemptFiles:
    """A private directory per attempt: the prior attempts, the task, and where the receipt goes."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="relay-attempt-"))
        os.chmod(self.dir, 0o700)
        self.prior = self.dir / "prior-attempts.json"
        self.task = self.dir / "task.json"
        self.receipt = self.dir / "receipt.json"

    def write_json(self, path: Path, data: object) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=2, ensure_ascii=False)
            fh.write("\n")

    def cleanup(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


def worker_env(extra: dict[str, str], secrets: tuple[str, ...] = ()) -> dict[str, str]:
    """The relay's environment without its credentials, plus the RELAY_* variables."""
    env = {k: v for k, v in os.environ.items() if k not in SECRET_ENV and not any(s and s in v for s in secrets)}
    env.update(extra)
    return env
