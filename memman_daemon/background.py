"""One time budget for the daemon's background work.

Background work — the timelines' per-entry analysis, compression's summaries, the embedding
prefetch, the recall index's rows of new entries — runs on the same event loop (or under the
same GIL) as the requests. While clients are being served it takes at most ``[limits]
background_share`` of the time: after each slice of ``t`` seconds, ``t * (1 - share) / share``
seconds are owed to requests before the next background slice. The owed time is only paid
while requests keep coming: as soon as ``SLICE_S`` passes with none, the daemon is idle and the
next slice starts. So a burst of durable adds is served at the rate of the add path alone, the
work it leaves behind is done right after it, and a client polling now and then does not slow
that catch-up down.

The budget is global, not per task: two kinds of background work running together share it.
Work that must keep up with the requests that make it (the recall index's rows of a burst of
adds) takes a share of its own (``turn(share)``).

Long-lived state built in the background (every entry's analysis) is moved out of the garbage
collector's sight as it grows (``grew``), as start-up does for what it loaded
(``server.tune_gc``): otherwise each full collection walks all of it (~100-250 ms at 60,000
analysed entries, every other client held meanwhile).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from memman_daemon.component import Component

#: a slice of background work should stay under this (seconds): what a request may wait behind
#: it; also how long without a request counts as idle
SLICE_S = 0.005
#: entries of long-lived state built since the last freeze that make the next one
FREEZE_EVERY = 10_000


def _libc_trim() -> Any:
    """glibc's ``malloc_trim``, or None (another C library)."""
    with contextlib.suppress(OSError, AttributeError):
        return ctypes.CDLL("libc.so.6").malloc_trim
    return None


_TRIM = _libc_trim()


#: glibc ``mallopt`` parameters (malloc.h)
_M_MMAP_THRESHOLD, _M_ARENA_MAX = -3, -8
#: allocations from this size up are mapped on their own and unmapped when freed
MMAP_THRESHOLD = 128 * 1024
#: heaps the C library keeps for the worker threads
ARENAS = 2


#: how long the event loop's thread may keep the GIL from a worker thread that waits for it
#: (Python's default: 5 ms). A worker's file reads and imports give the GIL up and take it
#: back at every call, and behind a busy event loop each take waited the whole interval: the
#: relevance model's 0.65 s of loading took 7 s during a 60,000-entry restart (1.5 s at 1 ms)
SWITCH_INTERVAL_S = 0.001


def tune_switching() -> None:
    """Worker threads (the models' loads, SQLite, the embedder) are not starved by the loop."""
    sys.setswitchinterval(SWITCH_INTERVAL_S)


def tune_malloc() -> bool:
    """Keep the C heap from holding what the embedder freed (glibc; False elsewhere). By
    default glibc raises its mmap threshold to the largest block freed so far (up to 32 MB),
    so after the first batches the embedder's buffers (ONNX Runtime's activations, numpy's
    token outputs) come from the heap, freed among long-lived small blocks where no trim can
    reach them, and each worker thread adds a heap of its own. A fixed threshold and two
    heaps: the daemon's RSS while 20,000 entries were embedded over 80,000 loaded went from a
    1,189 MB peak to under 1 GB (docs/performance.md)."""
    with contextlib.suppress(OSError, AttributeError):
        mallopt = ctypes.CDLL("libc.so.6").mallopt
        ok = mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
        return bool(mallopt(_M_ARENA_MAX, ARENAS) == 1 and ok)
    return False


async def release_memory() -> bool:
    """Hand the C heap's free pages back to the system (glibc's ``malloc_trim``), in a worker
    thread: the embedder's batches (token outputs of ~0.4 MB a text, freed by other threads)
    leave the heap fragmented, ~5 KB an embedded entry that the process keeps otherwise. False
    where there is no such call."""
    if _TRIM is None:
        return False
    await asyncio.to_thread(_TRIM, 0)
    return True


class BackgroundShare(Component):
    """Paces background work: ``async with share.turn(): <one slice>``."""

    stats_key = "background"

    def __init__(self, share: Callable[[], float]) -> None:
        self._share = share  #: read each time, so a config reload takes effect
        #: set by the server: how many requests have come in so far
        self.requests: Callable[[], int] = lambda: 0
        self._lock = asyncio.Lock()
        self._owed = 0.0  #: seconds owed to requests before the next slice
        self._mark = 0  #: requests counted when the last slice started
        self.work_s = 0.0
        self.waited_s = 0.0
        self.slices = 0
        self.longest_s = 0.0  #: the longest slice so far: what a request waited behind one
        self._grown = 0  #: entries of long-lived state built since the last freeze
        self.freezes = 0

    @asynccontextmanager
    async def turn(self, share: float | None = None) -> AsyncIterator[None]:
        """Wait for this task's turn, then run one slice of background work (``share``: this
        work's own share of the time, when it must keep up with the requests that make it:
        the recall index's rows of a burst of adds)."""
        async with self._lock:
            await self._yield_to_requests()
            self._mark = self.requests()
            t0 = time.perf_counter()
            try:
                yield
            finally:
                worked = time.perf_counter() - t0
                self.work_s += worked
                self.slices += 1
                self.longest_s = max(self.longest_s, worked)
                share = min(1.0, max(0.01, self._share() if share is None else share))
                self._owed = worked * (1 - share) / share

    async def _yield_to_requests(self) -> None:
        """Pay the owed time while requests keep coming in; stop at the first quiet step."""
        if self._owed <= 0:
            return
        t0 = time.monotonic()
        end = t0 + self._owed
        # requests that arrived during the slice are read in the loop's next two passes
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        seen = self.requests()
        if seen == self._mark:
            end = t0  # none came in while the slice ran: idle
        while (left := end - time.monotonic()) > 0:
            await asyncio.sleep(min(left, SLICE_S))
            n = self.requests()
            if n == seen:
                break  # no request for a whole step: idle
            seen = n
        self.waited_s += time.monotonic() - t0
        self._owed = 0.0

    def grew(self, entries: int) -> None:
        """Background work built long-lived state for ``entries`` entries: past
        ``FREEZE_EVERY`` of them, the young garbage is collected (a generation-0 pass: a few
        ms) and everything the collector tracks is frozen out of its sight. What is frozen is
        still freed when it is dropped (reference counts); only a cycle frozen as garbage
        stays, and the young pass leaves few."""
        self._grown += entries
        if self._grown >= FREEZE_EVERY:
            self._grown = 0
            gc.collect(0)
            gc.freeze()
            self.freezes += 1

    def stats(self) -> dict[str, Any]:
        return {"work_s": round(self.work_s, 3), "waited_s": round(self.waited_s, 3),
                "slices": self.slices, "longest_slice_ms": round(self.longest_s * 1000, 1),
                "gc_freezes": self.freezes}
