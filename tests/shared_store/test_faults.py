"""The shared store going away: PostgreSQL is stopped (immediate mode, as a crash) in the
middle of a stream of writes and started again. Shared-tier calls answer -32010 meanwhile,
sessions are served throughout, `memman status` says what is going on, the daemons reconnect
by themselves, and every acknowledged write is there afterwards — read from the other daemon."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from typing import Any

import asyncpg
import pytest

from memman import names
from memman.errors import (
    INVALID_PARAMS,
    SHARED_UNAVAILABLE,
    STORAGE_ERROR,
    MemmanError,
    SharedStoreUnavailable,
)
from memman_daemon.clock import FakeClock
from memman_tui.widgets.daemon_header import shared_label
from tests.helpers import running_daemon
from tests.pg_server import PgServer, require_pg


@pytest.fixture(scope="module")
def pg() -> Iterator[PgServer]:
    """Its own server: these tests stop it."""
    require_pg()
    with PgServer() as server:
        yield server


async def until(cond: Any, timeout: float = 30.0) -> None:
    async def poll() -> None:
        while not (await cond() if asyncio.iscoroutinefunction(cond) else cond()):
            await asyncio.sleep(0.05)
    await asyncio.wait_for(poll(), timeout)


async def memman_cli(*args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "memman_cli.cli", *args, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode or 0, out.decode(), err.decode()


async def test_postgres_stopped_mid_run_loses_no_acknowledged_write(pg: PgServer) -> None:
    dsn = pg.create_db("faults")
    storage = {"shared": dsn, "shared_timeout_s": 3.0, "shared_backoff_max_s": 0.5}
    async with running_daemon(clock=FakeClock(), storage=storage) as a, \
            running_daemon(clock=FakeClock(), storage=storage) as b, \
            a.client() as ca, a.client() as cs, b.client() as cb:
        await cs.session_open("work", {"user_id": "ana"})
        states: list[str] = []  # what a TUI subscribed to `stats` is told
        await cs.subscribe(["stats"], {}, lambda n, p: states.append(
            p["shared"]["state"]) if p.get("kind") == "shared_store" else None)
        acked: dict[str, str] = {}
        refused: list[MemmanError] = []
        session_adds = {"ok": 0, "during_outage": 0}
        outage = asyncio.Event()
        stop = asyncio.Event()

        async def writer() -> None:
            i = 0
            while not stop.is_set():
                key, value = f"k{i}", f"value {i}"
                try:
                    await ca.call(names.MEMORY_LEARN, "ana", key, value)
                    acked[key] = value
                except MemmanError as exc:
                    refused.append(exc)
                    await asyncio.sleep(0.02)
                i += 1

        async def sessions() -> None:  # the session path never waits for PostgreSQL
            n = 0
            while not stop.is_set():
                await cs.session_add("work", {"role": "user", "content": f"message {n}"})
                session_adds["ok"] += 1
                if outage.is_set():
                    session_adds["during_outage"] += 1
                n += 1
                await asyncio.sleep(0.01)

        tasks = [asyncio.create_task(writer()), asyncio.create_task(sessions())]
        await until(lambda: len(acked) >= 20)
        await asyncio.to_thread(pg.stop, "immediate")
        outage.set()
        await until(lambda: len(refused) >= 3)
        # the answers say what happened and what to do
        assert all(e.code == SHARED_UNAVAILABLE for e in refused), refused
        assert all(isinstance(e, SharedStoreUnavailable) for e in refused)
        assert "retry" in refused[-1].message and "retry_in_s" in refused[-1].data
        # reads of shared tiers answer the same clear error; local ones keep working
        with pytest.raises(MemmanError) as ei:
            await cb.call(names.MEMORY_RECALL, "ana", "k0")
        assert ei.value.code == SHARED_UNAVAILABLE
        # bad input is still named as such (-32602), not blamed on the outage
        with pytest.raises(MemmanError) as ei:
            await cb.call(names.MEMORY_LEARN, "ana", "", "v")
        assert ei.value.code == INVALID_PARAMS and "key" in ei.value.message
        with pytest.raises(MemmanError) as ei:
            await cb.call(names.DOCS_ADD, "acme", {"content": 3})
        assert ei.value.code == INVALID_PARAMS and "doc.content" in ei.value.message
        await until(lambda: session_adds["during_outage"] >= 5)
        ctx = await cs.call(names.SESSION_GET, "work")
        assert len(ctx["entries"]) >= session_adds["ok"]
        # status says so (memman status, and memman_stats for the TUI)
        stats = await cs.stats()
        shared = stats["shared"]
        assert shared["state"] == "down" and shared["last_error"]
        label, style = shared_label(stats)  # the TUI's header line
        assert "DOWN" in label and "reconnecting" in label and "red" in style
        code, out, err = await memman_cli("--socket", str(a.socket), "status")
        assert code == 0, err
        assert "shared" in out and "down" in out and "reconnecting" in out
        code, out, _ = await memman_cli("--socket", str(a.socket), "--json", "status")
        assert json.loads(out)["shared"]["state"] == "down"
        await asyncio.to_thread(pg.start)
        outage.clear()
        # both daemons reconnect by themselves; writes are acknowledged again
        await until(lambda: a.app.shared.state == "up" and b.app.shared.state == "up")
        before = len(acked)
        await until(lambda: len(acked) >= before + 10)
        stop.set()
        await asyncio.gather(*tasks)
        assert a.app.shared.reconnects >= 1
        assert states[:1] == ["down"] and states[-1] == "up"
        # every acknowledged write is in the shared store, read through the other daemon
        for key, value in acked.items():
            got = await cb.call(names.MEMORY_RECALL, "ana", key)
            assert got is not None and got["value"] == value, key
        code, out, _ = await memman_cli("--socket", str(b.socket), "status")
        assert "— up" in out


async def test_a_daemon_starts_while_postgres_is_down_and_connects_later(pg: PgServer) -> None:
    dsn = pg.create_db("latecomer")
    await asyncio.to_thread(pg.stop, "fast")
    try:
        storage = {"shared": dsn, "shared_timeout_s": 2.0, "shared_backoff_max_s": 0.3}
        async with running_daemon(clock=FakeClock(), storage=storage) as d, d.client() as c:
            await c.session_open("s1", {"user_id": "ana"})  # sessions serve from the start
            await c.session_add("s1", {"role": "user", "content": "hello"})
            with pytest.raises(MemmanError) as ei:
                await c.call(names.MEMORY_LEARN, "ana", "k", "v")
            assert ei.value.code == SHARED_UNAVAILABLE
            assert (await c.stats())["shared"]["state"] == "down"
            await asyncio.to_thread(pg.start)
            await until(lambda: d.app.shared.state == "up")
            await c.call(names.MEMORY_LEARN, "ana", "k", "v")
            assert (await c.call(names.MEMORY_RECALL, "ana", "k"))["value"] == "v"
    finally:
        if not pg.running():
            pg.start()


async def test_a_server_that_refuses_writes_is_an_error_not_an_outage(pg: PgServer) -> None:
    """A read-only server (a standby, say): writes answer -32003 saying why, reads work, the
    store stays up."""
    dsn = pg.create_db("readonly")
    async with running_daemon(clock=FakeClock(), storage={"shared": dsn}) as d, d.client() as c:
        await c.call(names.MEMORY_LEARN, "ana", "tone", "brief")
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute("ALTER DATABASE readonly SET default_transaction_read_only = on")
            await conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE "
                               "datname = 'readonly' AND pid <> pg_backend_pid()")
        finally:
            await conn.close()
        await until(lambda: d.app.shared.reconnects >= 1 and d.app.shared.state == "up")
        with pytest.raises(MemmanError) as ei:
            await c.call(names.MEMORY_LEARN, "ana", "tone", "formal")
        assert ei.value.code == STORAGE_ERROR and "read-only" in ei.value.message
        assert (await c.call(names.MEMORY_RECALL, "ana", "tone"))["value"] == "brief"
        assert d.app.shared.state == "up"


async def test_a_shared_call_that_outlives_its_deadline_answers_retry(pg: PgServer) -> None:
    """A server that does not answer in time (here: a table locked by someone else) costs a
    caller at most storage.shared_timeout_s, then -32010; the store stays up and the next call
    works."""
    dsn = pg.create_db("deadline")
    storage = {"shared": dsn, "shared_timeout_s": 1.0}
    async with running_daemon(clock=FakeClock(), storage=storage) as d, d.client() as c:
        await c.call(names.MEMORY_LEARN, "ana", "tone", "brief")
        blocker = await asyncpg.connect(dsn)
        try:
            tx = blocker.transaction()
            await tx.start()
            await blocker.execute("LOCK TABLE memories IN ACCESS EXCLUSIVE MODE")
            with pytest.raises(SharedStoreUnavailable) as ei:
                await c.call(names.MEMORY_LEARN, "ana", "tone", "formal")
            assert "did not answer within 1s" in ei.value.message
            await c.session_open("s1", {"user_id": "ana"})  # sessions are not held up
            await tx.rollback()
        finally:
            await blocker.close()
        assert d.app.shared.state == "up"
        await c.call(names.MEMORY_LEARN, "ana", "tone", "formal")
        assert (await c.call(names.MEMORY_RECALL, "ana", "tone"))["value"] == "formal"


async def test_a_newer_schema_found_later_is_refused_then_followed_back_when_restored(
        pg: PgServer) -> None:
    """The shared schema's version moves past this daemon's (an upgrade elsewhere), then back
    (that upgrade undone): the daemon says "refused" meanwhile and comes back by itself."""
    dsn = pg.create_db("restored")
    storage = {"shared": dsn, "shared_timeout_s": 3.0, "shared_backoff_max_s": 0.3}
    async with running_daemon(storage=storage) as d, d.client() as c:
        store = d.app.storage.pg  # type: ignore[attr-defined]
        await c.call(names.MEMORY_LEARN, "ana", "tz", "UTC")
        admin = await asyncpg.connect(dsn)
        try:
            await admin.execute("UPDATE memman_schema SET version = version + 1")
            # the daemon's connections end (a restart of the server, say): it reconnects
            await admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE "
                                "datname = current_database() AND pid <> pg_backend_pid()")
            await until(lambda: store.state == "refused")
            with pytest.raises(MemmanError):
                await c.call(names.MEMORY_LEARN, "ana", "tz", "CET")
            await admin.execute("UPDATE memman_schema SET version = version - 1")
            await until(lambda: store.state == "up")
        finally:
            await admin.close()
        await c.call(names.MEMORY_LEARN, "ana", "tz", "CET")
        assert (await c.call(names.MEMORY_RECALL, "ana", "tz"))["value"] == "CET"


async def test_sigterm_while_the_shared_schema_migration_waits_exits_0(pg: PgServer) -> None:
    """A daemon whose shared-store migration waits for another's (the migrators' advisory
    lock) stops on SIGTERM with exit code 0, not killed by the signal mid-start."""
    import signal
    import subprocess

    from tests.helpers import daemon_env, short_tmpdir

    dsn = pg.create_db("sigterm")
    holder = await asyncpg.connect(dsn)
    try:
        await holder.execute("SELECT pg_advisory_lock(7301)")  # another daemon migrating
        root = short_tmpdir()
        (root / "no-config.toml").write_text("[storage]\nshared_timeout_s = 60\n")
        with open(root / "daemon.log", "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "memman_daemon", "--socket", str(root / "s" / "m.sock"),
                 "--data-dir", str(root / "data"), "--shared", dsn],
                env=daemon_env(root), stdout=log, stderr=subprocess.STDOUT)
        try:
            async def waiting() -> bool:
                return await holder.fetchval("SELECT count(*) > 0 FROM pg_locks WHERE "
                                             "locktype = 'advisory' AND NOT granted")

            await until(waiting, timeout=60)
            proc.send_signal(signal.SIGTERM)
            assert await asyncio.to_thread(proc.wait, 60) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    finally:
        await holder.close()
