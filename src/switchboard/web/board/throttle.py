"""Sign-in throttling and the password-check gate (docs/decisions.md, "Sign-in throttling").

Failed sign-ins are counted per (account, client address) and per client address, never per account
alone: guesses from one address slow that address down, and the account still signs in from any
other address. After a number of free failures, each further failure doubles the wait before the next
attempt with that key (1 s, 2 s, 4 s ... at most 5 minutes); while a wait runs, sign-in answers 429
with `Retry-After` without checking the password. An attempt is counted when it starts, before the
password is checked, so concurrent guesses cannot all slip past the count; a success takes its own
count back and clears the (account, address) key. A key is forgotten after a quiet quarter of an hour.

Above the keys, a global ceiling: password checks start at most `GLOBAL_RATE` a second (bucket of
`GLOBAL_BURST`), whoever asks, and at most `VERIFY_CONCURRENCY` run at once in worker threads. Past
the ceiling sign-in answers 429 for a second or two; this bounds what a guesser with many addresses
can try against any account, and the CPU that argon2 takes from everything else the server does.

Refused sign-ins are logged at most once a second per reason (`quiet`): the first refusal at once,
the ones after it counted into the next line, so a crowd of guesses writes a handful of lines instead
of one per guess.

The state is kept in this process's memory: a rate limit needs no durability, and with several
serving processes each enforces its own limits (the ceiling multiplies by the number of processes).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

PAIR_FREE_FAILURES = 5
ADDRESS_FREE_FAILURES = 20
MAX_WAIT_SECONDS = 300
FORGET_AFTER_SECONDS = 900
GLOBAL_RATE = 10.0
GLOBAL_BURST = 20
VERIFY_CONCURRENCY = 1
REFUSAL_LOG_SECONDS = 1.0
_MAX_KEYS = 50_000


@dataclass
class _Record:
    failures: int
    last: float


class LoginThrottle:
    def __init__(self, clock=time.monotonic, *, rate: float = GLOBAL_RATE, burst: int = GLOBAL_BURST,
                 concurrency: int = VERIFY_CONCURRENCY) -> None:
        self._clock = clock
        self._records: dict[str, _Record] = {}
        self._rate = rate
        self._burst = float(burst)
        self._tokens = float(burst)
        self._refilled = clock()
        self._concurrency = concurrency
        self._gate: asyncio.Semaphore | None = None
        self._logged: dict[str, float] = {}  # reason -> when a refusal of that kind was last logged
        self._unlogged: dict[str, int] = {}  # reason -> refusals since, not logged

    # ------------------------------------------------------------------------- per-key counts

    @staticmethod
    def keys(account: str, address: str | None) -> list[tuple[str, int]]:
        where = address or "unknown"
        return [(f"pair:{account.lower()}\x00{where}", PAIR_FREE_FAILURES),
                (f"address:{where}", ADDRESS_FREE_FAILURES)]

    def _fresh(self, key: str) -> _Record | None:
        rec = self._records.get(key)
        if rec and self._clock() - rec.last > max(FORGET_AFTER_SECONDS, MAX_WAIT_SECONDS):
            del self._records[key]
            return None
        return rec

    def wait_seconds(self, account: str, address: str | None) -> int:
        """Seconds until the next attempt with this account from this address is allowed (0: go ahead)."""
        wait = 0.0
        for key, free in self.keys(account, address):
            rec = self._fresh(key)
            if rec is None or rec.failures < free:
                continue
            delay = min(2 ** (rec.failures - free), MAX_WAIT_SECONDS)
            wait = max(wait, rec.last + delay - self._clock())
        return max(0, math.ceil(wait))

    def failed(self, account: str, address: str | None) -> None:
        """Count an attempt as failed (called when it starts; `succeeded` takes it back)."""
        now = self._clock()
        if len(self._records) >= _MAX_KEYS:
            self._records = {k: r for k, r in self._records.items() if now - r.last <= FORGET_AFTER_SECONDS}
        for key, _ in self.keys(account, address):
            rec = self._fresh(key)
            if rec is None:
                self._records[key] = _Record(1, now)
            else:
                rec.failures += 1
                rec.last = now

    def confirm_failure(self, account: str, address: str | None) -> None:
        """The counted attempt's password was wrong: its wait runs from now, the end of the check."""
        now = self._clock()
        for key, _ in self.keys(account, address):
            rec = self._records.get(key)
            if rec is not None:
                rec.last = max(rec.last, now)

    def forgive(self, account: str, address: str | None) -> None:
        """Take back one counted attempt whose password was never checked."""
        for key, _ in self.keys(account, address):
            rec = self._records.get(key)
            if rec is not None:
                rec.failures -= 1
                if rec.failures <= 0:
                    del self._records[key]

    def succeeded(self, account: str, address: str | None) -> None:
        """The password was right: clear this account's count from this address, take back the
        address's count for this attempt."""
        pair, address_key = (key for key, _ in self.keys(account, address))
        self._records.pop(pair, None)
        rec = self._records.get(address_key)
        if rec is not None:
            rec.failures -= 1
            if rec.failures <= 0:
                del self._records[address_key]

    # ------------------------------------------------------------------------ global ceiling

    def admit(self) -> int:
        """Take one password check from the global bucket: 0 when admitted, else seconds to wait."""
        now = self._clock()
        self._tokens = min(self._burst, self._tokens + (now - self._refilled) * self._rate)
        self._refilled = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return 0
        return max(1, math.ceil((1.0 - self._tokens) / self._rate))

    @asynccontextmanager
    async def verifying(self) -> AsyncIterator[None]:
        """Hold one of the few password-check slots (the check itself runs in a worker thread)."""
        if self._gate is None:
            self._gate = asyncio.Semaphore(self._concurrency)
        async with self._gate:
            yield

    # ------------------------------------------------------------------------- quiet refusals

    def quiet(self, reason: str) -> int | None:
        """Whether to log this refusal: None to stay quiet (it is counted), else log it now along
        with the returned number of refusals of this kind left unlogged since the last line."""
        now = self._clock()
        last = self._logged.get(reason)
        if last is not None and now - last < REFUSAL_LOG_SECONDS:
            self._unlogged[reason] = self._unlogged.get(reason, 0) + 1
            return None
        self._logged[reason] = now
        return self._unlogged.pop(reason, 0)
