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

The per-key counts are kept in the database (core/signin_failures.py, D64), so every serving process
and every restart enforces the same ones. The ceiling, the gate and the refusal log are this
process's own: they guard its CPU and its log (with several processes the ceiling multiplies by their
number).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from ...core import signin_failures
from ...core.models import Core

PAIR_FREE_FAILURES = 5
ADDRESS_FREE_FAILURES = 20
MAX_WAIT_SECONDS = 300
FORGET_AFTER_SECONDS = 900
FORGET = max(FORGET_AFTER_SECONDS, MAX_WAIT_SECONDS)
GLOBAL_RATE = 10.0
GLOBAL_BURST = 20
VERIFY_CONCURRENCY = 1
REFUSAL_LOG_SECONDS = 1.0


class LoginThrottle:
    def __init__(self, clock=time.monotonic, *, rate: float = GLOBAL_RATE, burst: int = GLOBAL_BURST,
                 concurrency: int = VERIFY_CONCURRENCY) -> None:
        self._clock = clock
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

    async def attempt(self, core: Core, account: str, address: str | None) -> int:
        """Judge an attempt with this account from this address: 0 when it may go ahead (counted as a
        failure now, before the password is checked; `succeeded` takes it back), else the seconds to
        wait (nothing counted)."""
        return await signin_failures.attempt(core, self.keys(account, address), max_wait=MAX_WAIT_SECONDS,
                                             forget=FORGET)

    async def confirm_failure(self, core: Core, account: str, address: str | None) -> None:
        """The counted attempt's password was wrong: its wait runs from now, the end of the check."""
        await signin_failures.confirm(core, self.keys(account, address))

    async def forgive(self, core: Core, account: str, address: str | None) -> None:
        """Take back one counted attempt whose password was never checked."""
        await signin_failures.forgive(core, self.keys(account, address))

    async def succeeded(self, core: Core, account: str, address: str | None) -> None:
        """The password was right: clear this account's count from this address, take back the
        address's count for this attempt."""
        await signin_failures.succeed(core, *self.keys(account, address))

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
