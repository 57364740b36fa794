"""Background work (compression's analysis and summaries, the embedding prefetch) within one
time budget: it yields to requests while clients are served, and catches up after a burst."""

from __future__ import annotations

import asyncio
import contextlib
import time

from memman_daemon.background import SLICE_S, BackgroundShare
from memman_daemon.engine import compression
from tests.engine.test_context import FILLER, add
from tests.helpers import running_daemon


def _work(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


async def test_background_waits_its_share_only_while_requests_come_in():
    requests = [0]
    bg = BackgroundShare(lambda: 0.25)
    bg.requests = lambda: requests[0]
    for _ in range(3):  # idle: no request at all, so nothing is owed between slices
        async with bg.turn():
            _work(0.01)
    assert bg.waited_s < SLICE_S and bg.slices == 3

    async def traffic() -> None:  # a request every millisecond
        while True:
            requests[0] += 1
            await asyncio.sleep(0.001)

    busy = asyncio.create_task(traffic())
    try:
        for _ in range(3):
            async with bg.turn():
                _work(0.01)
        # at a 25 % share each slice of >= 10 ms owes ~3x that to requests before the next
        # one starts: two such waits so far (the third is owed to whatever runs next)
        assert bg.waited_s >= 2 * 0.025
    finally:
        busy.cancel()
    # the traffic stopped: what is still owed ends at the first quiet step, not after 30 ms
    before = bg.waited_s
    async with bg.turn():
        pass
    assert bg.waited_s - before < 0.025


async def test_burst_of_adds_is_compressed_after_it(monkeypatch):
    # a backlog is folded a batch per summary, oldest first (1,000 by default; 100 here)
    monkeypatch.setattr(compression, "AUTO_BATCH", 100)
    sections = {"compression": {"max_entries": 40, "recent_window": 10,
                                "check_interval_s": 0.05}}
    async with running_daemon(**sections) as d, contextlib.AsyncExitStack() as stack:
        clients = [await stack.enter_async_context(d.client(f"agent{i}")) for i in range(10)]
        c = clients[0]
        await c.call("memman_session_open", "burst", {})

        async def writer(i: int) -> None:
            for k in range(60):
                await add(clients[i], "burst", f"{FILLER} writer {i} line {k}")

        await asyncio.gather(*(writer(i) for i in range(10)))
        # every add was acknowledged; compression folds the backlog in the background
        for _ in range(500):
            s = await c.call("memman_session_get", "burst", {"entries": False})
            st = await c.stats()
            if s["active_entries"] <= 40 and not st["session_engine"]["compacting"]:
                break
            await asyncio.sleep(0.02)
        assert s["active_entries"] <= 40, s
        exp = await c.call("memman_session_export", "burst")
        assert len(exp["entries"]) == 600  # nothing lost: compressed entries stay
        folded = [i for link in exp["links"] for i in link["entry_ids"]]
        assert len(folded) == len(set(folded)) >= 600 - 40
        assert st["background"]["slices"] > 0
        assert st["session_engine"]["entries_compressed"] == len(folded)
        sizes = [len(link["entry_ids"]) for link in exp["links"]]
        assert len(sizes) >= 5 and max(sizes) <= 100, sizes
        assert folded == sorted(folded)  # each summary continues where the last one ended
