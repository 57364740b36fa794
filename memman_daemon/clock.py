"""Injectable time, so TTL and recency logic is tested without sleeping."""

from __future__ import annotations

import time


class Clock:
    """Wall-clock seconds (``now``) and a monotonic clock (``monotonic``)."""

    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()


class FakeClock(Clock):
    """A clock that moves only when told to (tests)."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.t = start
        self.m = 0.0

    def now(self) -> float:
        return self.t

    def monotonic(self) -> float:
        return self.m

    def advance(self, seconds: float) -> None:
        self.t += seconds
        self.m += seconds
