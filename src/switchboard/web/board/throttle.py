"""Failed sign-ins are slowed per account and per client address.

After a number of free failures, each further failure doubles the wait before the next attempt on
that account or from that address (1 s, 2 s, 4 s ... at most 5 minutes). While a wait is running,
sign-in answers 429 without checking the password, so guessing gains nothing. A success clears the
account's count; an address clears after a quiet quarter of an hour.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

ACCOUNT_FREE_FAILURES = 5
ADDRESS_FREE_FAILURES = 20
MAX_WAIT_SECONDS = 300
FORGET_AFTER_SECONDS = 900
_MAX_KEYS = 50_000


@dataclass
class _Record:
    failures: int
    last: float


class LoginThrottle:
    def __init__(self, clock=time.monotonic) -> None:  # noqa: ANN001
        self._clock = clock
        self._records: dict[str, _Record] = {}

    @staticmethod
    def keys(account: str, address: str | None) -> list[tuple[str, int]]:
        return [(f"account:{account.lower()}", ACCOUNT_FREE_FAILURES),
                (f"address:{address or 'unknown'}", ADDRESS_FREE_FAILURES)]

    def _fresh(self, key: str) -> _Record | None:
        rec = self._records.get(key)
        if rec and self._clock() - rec.last > max(FORGET_AFTER_SECONDS, MAX_WAIT_SECONDS):
            del self._records[key]
            return None
        return rec

    def wait_seconds(self, account: str, address: str | None) -> int:
        """Seconds until the next attempt is allowed (0: go ahead)."""
        wait = 0.0
        for key, free in self.keys(account, address):
            rec = self._fresh(key)
            if rec is None or rec.failures < free:
                continue
            delay = min(2 ** (rec.failures - free), MAX_WAIT_SECONDS)
            wait = max(wait, rec.last + delay - self._clock())
        return max(0, int(wait + 0.999))

    def failed(self, account: str, address: str | None) -> None:
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

    def succeeded(self, account: str) -> None:
        self._records.pop(f"account:{account.lower()}", None)
