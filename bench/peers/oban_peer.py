"""Oban's Python port (PyPI `oban`): it needs Python 3.12 or newer.

On an older Python the row reads "skipped: needs Python ≥ 3.12". On 3.12 or newer it still reads
skipped until this module drives it (its own schema install, `insert_all` for the bulk enqueue, a
queue with `limit` W and a no-op worker), verified like the others: every job `completed`.
"""

from __future__ import annotations

import sys

from .harness import Database, Run


class Oban:
    key = "oban"
    label = "Oban (Python port)"
    enqueue_label = "Oban (Python port), `insert_all`"

    def unavailable(self) -> str | None:
        if sys.version_info < (3, 12):
            return "needs Python ≥ 3.12"
        return "not driven yet (bench/peers/oban_peer.py)"

    async def setup(self, db: Database) -> None:
        raise NotImplementedError

    async def enqueue(self, n: int) -> float:
        raise NotImplementedError

    async def run_workers(self, w: int) -> Run:
        raise NotImplementedError

    async def verify(self, n: int) -> None:
        raise NotImplementedError

    async def close(self) -> None:
        pass
