"""Faults around the daemon: a subscriber that never reads, a database that refuses writes
(read-only, full). The daemon keeps serving everyone else and recovers when the cause is gone."""

from __future__ import annotations

import asyncio

import pytest

from memman import errors
from memman.errors import MemmanError
from tests.helpers import running_daemon
from tests.wire import RawConn

GUARD = 30.0
BIG = "x" * 4000  # each event carries the entry: ~4 KB


async def test_never_reading_subscriber_is_dropped_while_others_keep_receiving() -> None:
    cap = 64 * 1024
    async with running_daemon(limits={"subscriber_buffer_bytes": cap}) as d, \
            d.client("writer") as writer, d.client("reader") as reader:
        await writer.session_open("busy", {})
        received: list[dict] = []
        await reader.subscribe(["session"], {"session_id": "busy"},
                               lambda name, p: received.append(p))
        async with RawConn.open(d.socket) as lazy:
            sub = await lazy.call(1, "memman_subscribe", ["session"], {"session_id": "busy"})
            assert sub[2] is None
            subs_before = len(d.app.events.subscriptions)
            assert subs_before == 2
            # the lazy subscriber now stops reading; writes go on until the daemon drops it
            # (the kernel's socket buffers hold some, then the cap: bounded by a count)
            writes = 0
            for writes in range(1, 5000):
                await writer.session_add("busy", {"role": "user", "content": f"{writes} {BIG}"})
                if len(d.app.events.subscriptions) < subs_before:
                    break
            assert len(d.app.events.subscriptions) == 1, f"not dropped after {writes} writes"
            more = 20
            for i in range(more):
                await writer.session_add("busy", {"role": "user", "content": f"after {i}"})
            out = await lazy.outcome(GUARD)  # what was buffered, then the close
            assert out.closed
        for _ in range(int(GUARD / 0.01)):
            if len(received) >= writes + more:
                break
            await asyncio.sleep(0.01)
        added = [p for p in received if p["kind"] == "entry_added"]
        assert len(added) == writes + more  # the reader missed nothing
        assert [p["seq"] for p in received] == list(range(1, len(received) + 1))
        assert await writer.ping() == "pong"


@pytest.mark.parametrize("fault,pragma,undo", [
    ("read-only", "PRAGMA query_only = ON", "PRAGMA query_only = OFF"),
    ("full", "PRAGMA max_page_count = {pages}", "PRAGMA max_page_count = 1073741823"),
])
async def test_database_refusing_writes(fault: str, pragma: str, undo: str) -> None:
    async with running_daemon() as d, d.client("agent") as c, d.client("other") as other:
        await c.session_open("s", {})
        for i in range(5):
            await c.session_add("s", {"role": "user", "content": f"before {i}"})
        store = d.app.store  # the fault is set on the writer's own connection, on its thread
        pages = await store.on_writer(lambda db: db.execute("PRAGMA page_count").fetchone()[0])
        await store.on_writer(lambda db: db.execute(pragma.format(pages=pages)))
        failures = 0
        for i in range(50):  # enough content to need a new page when the file is "full"
            try:
                await c.session_add("s", {"role": "user", "content": f"during {i} {BIG}"})
            except MemmanError as exc:
                assert exc.code == errors.STORAGE_ERROR
                assert "refused the write" in exc.message and "daemon keeps running" in exc.message
                failures += 1
        assert failures == 50, f"{fault}: only {failures} of 50 writes were refused"
        # the daemon stays up: reads, other clients, new connections
        assert await other.ping() == "pong"
        got = await c.session_get("s", {})
        assert [e["content"] for e in got["entries"]] == [f"before {i}" for i in range(5)]
        async with d.client("fresh") as fresh:
            assert (await fresh.stats())["store"]["write_errors"] >= 50
        # the cause goes away: writes succeed again
        await store.on_writer(lambda db: db.execute(undo))
        r = await c.session_add("s", {"role": "user", "content": "after"})
        assert r["id"] > 0
        got = await c.session_get("s", {})
        assert [e["content"] for e in got["entries"]][-1] == "after"
        assert len(got["entries"]) == 6


def _immutable(path, on: bool) -> bool:
    """chattr +i / -i: a directory no one may add files to, root included (False when the
    file system or the process cannot)."""
    import shutil
    import subprocess

    if shutil.which("chattr") is None:
        return False
    done = subprocess.run(["chattr", "+i" if on else "-i", str(path)], capture_output=True)
    return done.returncode == 0


async def test_agent_md_edit_in_a_read_only_directory_is_a_storage_error_with_nothing_stored(
) -> None:
    """A promotion to agent.md whose directory refuses new files: -32003 naming the file, and
    nothing stored (the edit used to be committed, then answered -32603 when the file could
    not be written). Once the directory takes files again, the same promotion succeeds."""
    from pathlib import Path

    from memman import names

    async with running_daemon() as d, d.client("agent") as c:
        await c.session_open("s1", {"user_id": "u1", "tenant_id": "acme"})
        snip = (await c.call(names.SCRATCHPAD_WRITE, "s1", "Invoices go out on the 3rd."))
        path = Path(d.app.config.agent_md_path("acme"))
        path.parent.mkdir(parents=True, exist_ok=True)
        if not _immutable(path.parent, True):
            pytest.skip("chattr +i is not available here")
        try:
            with pytest.raises(MemmanError) as ei:
                await c.call(names.SCRATCHPAD_PROMOTE, "s1", snip["snippet"]["id"], "business")
            assert ei.value.code == errors.STORAGE_ERROR, ei.value
            assert str(path) in ei.value.message and "nothing was changed" in ei.value.message
            assert not path.exists()
            hits = (await c.call(names.DOCS_SEARCH, "acme", "invoices 3rd"))["results"]
            assert not [h for h in hits if h["doc_id"] == "agent.md"]
        finally:
            _immutable(path.parent, False)
        r = await c.call(names.SCRATCHPAD_PROMOTE, "s1", snip["snippet"]["id"], "business")
        assert r["changed"] and "Invoices go out on the 3rd." in path.read_text()
