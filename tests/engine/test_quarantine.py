"""Background work that fails on a session quarantines it (issue 22): no loop of tracebacks,
the session named in memman_stats and `memman status`, tried again later, and the daemon
serves everyone meanwhile."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from tests.helpers import running_daemon

SWEEP_S = 0.02


async def until(cond, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.02)


async def test_failing_background_compression_quarantines_the_session(
        caplog: pytest.LogCaptureFixture) -> None:
    # compression out of reach while the entries go in (a fold that finished before the
    # writes were refused would leave nothing to fail), brought within reach after
    compression = {"max_entries": 10_000, "min_entries": 5, "recent_window": 5,
                   "check_interval_s": SWEEP_S, "quarantine_retry_s": 600.0}
    async with running_daemon(compression=compression) as d, d.client() as c:
        eng = d.app.engine
        await c.session_open("s", {})
        store = d.app.store
        for i in range(30):
            await c.session_add("s", {"role": "user", "content": f"entry number {i} " * 5})
        with caplog.at_level(logging.WARNING, logger="memman_daemon.engine.session_engine"):
            # the database refuses writes (set on the writer's own connection): the fold fails
            await store.on_writer(lambda db: db.execute("PRAGMA query_only = ON"))
            d.app.config.compression.max_entries = 20  # the next sweep folds the session
            await until(lambda: "s" in eng.quarantine)
            # many sweeps later: still one failure, one traceback, no loop
            sweeps = 50
            await asyncio.sleep(SWEEP_S * sweeps)
            assert eng.quarantine["s"]["failures"] == 1
            failed = [r for r in caplog.records if "automatic compression of session s" in
                      r.getMessage()]
            assert len(failed) == 1 and failed[0].exc_info is not None
            stats = await c.stats()
            q = stats["session_engine"]["quarantined"]["s"]
            assert "refused the write" in q["error"] and q["failures"] == 1
            assert await c.ping() == "pong"
            assert (await c.session_get("s", {}))["entries"]  # reads still served
            # writes come back and the retry time passes: compressed, no longer quarantined
            await store.on_writer(lambda db: db.execute("PRAGMA query_only = OFF"))
            eng.quarantine["s"]["retry_mono"] = 0.0
            await until(lambda: "s" not in eng.quarantine)
            await until(lambda: eng.counters["compressions"] >= 1)


def test_memman_status_lists_a_quarantined_session(capsys: pytest.CaptureFixture[str]) -> None:
    from memman_cli import cli

    stats = {"version": "x", "pid": 1, "uptime_s": 1.0, "socket": "/s", "database": "/d",
             "database_bytes": 0, "store": {"synchronous": "NORMAL"}, "clients": 1,
             "requests": 1, "errors": 0, "sessions": 1, "entries": 1,
             "session_engine": {"quarantined": {"s9": {"error": "StoreError: disk full",
                                                        "failures": 2, "retry_in_s": 600.0}}}}

    class FakeClient:
        def __enter__(self): return self
        def __exit__(self, *a): return False
        def stats(self): return stats

    orig = cli._client
    cli._client = lambda args: FakeClient()
    try:
        assert cli.main(["status"]) == 0
    finally:
        cli._client = orig
    out = capsys.readouterr().out
    assert "quarantined session s9" in out and "disk full" in out


def test_the_tui_header_names_quarantined_sessions() -> None:
    from memman_tui.widgets.daemon_header import quarantine_label

    assert quarantine_label({"session_engine": {"quarantined": {}}}) is None
    label = quarantine_label({"session_engine": {"quarantined": {"s2": {}, "s1": {}}}})
    assert label == "2 quarantined: s1, s2 (memman status)"
