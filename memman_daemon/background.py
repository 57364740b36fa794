"""One time budget for the daemon's background work.

Background work — compression's per-entry analysis and its summaries, the embedding prefetch —
runs on the same event loop (or under the same GIL) as the requests. While clients are being
served it takes at most ``[limits] background_share`` of the time: after each slice of ``t``
seconds, no background slice starts for ``t * (1 - share) / share`` seconds. So a burst of
durable adds is served at the rate of the add path alone, and the work it leaves behind is done
afterwards. When no request came in since the previous slice, the daemon is idle and the
next slice starts at once.

The budget is global, not per task: two kinds of background work running together share it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from memman_daemon.component import Component

#: a slice of background work should stay under this (seconds): what a request may wait behind it
SLICE_S = 0.005


class BackgroundShare(Component):
    """Paces background work: ``async with share.turn(): <one slice>``."""

    stats_key = "background"

    def __init__(self, share: Callable[[], float]) -> None:
        self._share = share  #: read each time, so a config reload takes effect
        #: set by the server: how many requests have come in so far (idle = unchanged)
        self.requests: Callable[[], int] = lambda: 0
        self._lock = asyncio.Lock()
        self._next = 0.0  #: monotonic time before which no slice starts
        self._seen = 0  #: requests counted when the last slice ended
        self.work_s = 0.0
        self.waited_s = 0.0
        self.slices = 0

    @asynccontextmanager
    async def turn(self) -> AsyncIterator[None]:
        """Wait for this task's turn, then run one slice of background work."""
        async with self._lock:
            while (delay := self._next - time.monotonic()) > 0:
                self.waited_s += delay
                await asyncio.sleep(delay)
            t0 = time.perf_counter()
            try:
                yield
            finally:
                worked = time.perf_counter() - t0
                self.work_s += worked
                self.slices += 1
                # busy: a request came in since the previous slice ended (its wait included)
                n = self.requests()
                if n != self._seen:
                    share = min(1.0, max(0.01, self._share()))
                    self._next = time.monotonic() + worked * (1 - share) / share
                self._seen = n

    def stats(self) -> dict[str, Any]:
        return {"work_s": round(self.work_s, 3), "waited_s": round(self.waited_s, 3),
                "slices": self.slices}
