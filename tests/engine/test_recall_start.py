"""A restarted daemon answers before its recall index is loaded: the index's rows are read
after the socket serves, in slices; a read of the index waits for them, and what it answers
then is what a daemon that had loaded first would answer (scoped, with the changes made
meanwhile). The real daemon on a real socket and SQLite file; the load is held at its start
by a gate so that "meanwhile" is certain, not a race."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from memman_daemon.recall.index import RecallIndex
from tests.engine.test_recall import MARCH, texts
from tests.helpers import running_daemon, short_tmpdir


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch) -> asyncio.Event:
    """The recall index's load waits while the returned event is clear (set at first: the
    daemon that writes the data dir loads at once)."""
    gate = asyncio.Event()
    gate.set()
    load_rows = RecallIndex._load_rows

    async def gated(self: RecallIndex) -> None:
        await gate.wait()
        await load_rows(self)

    monkeypatch.setattr(RecallIndex, "_load_rows", gated)
    return gate


@pytest.fixture
def root() -> Iterator[Path]:
    """A data dir of the test's own, removed after it."""
    path = short_tmpdir()
    yield path
    shutil.rmtree(path, ignore_errors=True)


async def _written(root: Path) -> dict[str, list[int]]:
    """The past sessions written by a first daemon, their vectors stored; each session's
    entry ids."""
    async with running_daemon(root) as d, d.client() as c:
        await _past(c)
        assert await d.app.recall.drained(60)
        return {sid: [e["id"] for e in (await c.session_get(sid))["entries"]]
                for sid in ("p1", "p2")}


async def _past(c) -> None:
    await c.session_open("p1", {"user_id": "ana"})
    await c.session_add("p1", {"role": "user", "content": "My sister Maja lives in Ljubljana.",
                               "created_at": MARCH})
    await c.session_add("p1", {"role": "user", "content": "My locker code is 4417.",
                               "metadata": {"private": True}, "created_at": MARCH + 60})
    await c.session_add("p1", {"role": "user", "content": "The violin teacher is called Oskar.",
                               "created_at": MARCH + 120})
    await c.session_open("p2", {"user_id": "ana"})
    await c.session_add("p2", {"role": "user", "content": "Maja adopted a greyhound named Pip.",
                               "created_at": MARCH + 86400})
    await c.session_open("b1", {"user_id": "bob"})
    await c.session_add("b1", {"role": "user", "content": "Maja from accounting sold her kayak.",
                               "created_at": MARCH + 3600})


async def test_the_socket_answers_while_the_index_loads_and_a_context_waits_for_it(
        held: asyncio.Event, root: Path) -> None:
    await _written(root)
    held.clear()
    async with running_daemon(root) as d, d.client() as c:
        # serving, and the index not loaded: pings, reads and writes of the log answer
        assert d.app.recall.stats()["loading"] is True
        await c.ping()
        assert len((await c.session_get("p1"))["entries"]) == 3
        # changes while it loads: a past entry removed, a session deleted, one added
        p1 = (await c.session_get("p1"))["entries"]
        teacher = next(e["id"] for e in p1 if "violin" in e["content"])
        await c.session_remove("p1", teacher)
        await c.session_delete("p2")
        await c.session_add("p1", {"role": "user", "content": "Maja plays the cello.",
                                   "created_at": MARCH + 180})
        await c.session_open("q", {"user_id": "ana"})
        await c.session_add("q", {"role": "user", "content": "What do I know about Maja, "
                                  "my sister? And who teaches the violin? My locker code?",
                                  "created_at": MARCH + 2 * 86400})
        ctx = asyncio.create_task(c.session_context("q", {"max_tokens": 2000}))
        await asyncio.sleep(0.3)
        assert not ctx.done()  # it waits for the index, it does not answer from half of it
        await c.ping()  # and others are served meanwhile
        assert d.app.recall.stats()["loading"] is True
        held.set()
        body = texts(await asyncio.wait_for(ctx, 60))
        assert d.app.recall.stats()["loading"] is False
        assert "lives in Ljubljana" in body and "plays the cello" in body
        assert "violin teacher" not in body  # removed while it loaded
        assert "greyhound" not in body  # its session deleted while it loaded
        assert "4417" not in body  # private: its own session only
        assert "kayak" not in body  # another user's
        st = d.app.recall.stats()
        # p1's two public entries, the private one, the added one and q's question
        assert st["entries"] == 5
        # the stored vectors were read, only the new entries are embedded
        assert await d.app.recall.drained(60)
        assert d.app.recall.stats()["embedded"] == 2


async def test_memory_search_and_exclusion_during_the_load_see_every_row(
        held: asyncio.Event, root: Path) -> None:
    p2 = (await _written(root))["p2"][0]
    held.clear()
    async with running_daemon(root) as d, d.client() as c:
        await c.session_open("q", {"user_id": "ana"})
        search = asyncio.create_task(c.call("memman_memory_search", "ana", "session",
                                            "greyhound", {}))
        exclude = asyncio.create_task(c.call("memman_recall_exclude", "q", p2, True))
        await asyncio.sleep(0.3)
        assert not search.done() and not exclude.done()
        held.set()
        found = await asyncio.wait_for(search, 60)
        assert [r["id"] for r in found["results"]] == [p2]
        assert (await asyncio.wait_for(exclude, 60))["excluded"] is True


async def test_a_damaged_stored_vector_is_embedded_again_and_the_rest_load(root: Path) -> None:
    import sqlite3

    p1 = (await _written(root))["p1"]
    db = root / "data" / "memman.db"
    # one vector cut short, another entry's token vectors cut short (a disk error, a
    # hand edit): the start leaves them out instead of failing or dropping the rest
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE recall_vectors SET embedding=x'00010203' WHERE entry_id=?",
                     (p1[0],))
        conn.execute("UPDATE recall_tokens SET packed=x'0001' WHERE entry_id=?", (p1[2],))
    async with running_daemon(root) as d, d.client() as c:
        await d.app.recall.loaded()
        st = d.app.recall.stats()
        assert st["entries"] == 5 and st["pending_vectors"] == 2
        assert await d.app.recall.drained(60)
        assert d.app.recall.stats()["embedded"] == 2
        await c.session_open("q", {"user_id": "ana"})
        await c.session_add("q", {"role": "user", "content": "Where does my sister live?"})
        assert "Ljubljana" in texts(await c.session_context("q", {"max_tokens": 2000}))


async def test_while_the_index_loads_its_entries_count_as_pending_vectors(
        held: asyncio.Event, root: Path) -> None:
    """A client that waits for ``pending_vectors`` to reach 0 (a benchmark, a script before
    it asks) must not stop while the start has not read which entries have a vector: until
    then each of them counts, and the ones added meanwhile too. Once loaded, only those
    with no stored vector are left."""
    p1 = (await _written(root))["p1"]
    import sqlite3

    with sqlite3.connect(root / "data" / "memman.db") as conn:  # one stored vector lost
        conn.execute("DELETE FROM recall_vectors WHERE entry_id=?", (p1[2],))
    held.clear()
    async with running_daemon(root) as d, d.client() as c:
        st = (await c.call("memman_stats"))["recall"]
        assert st["loading"] is True and st["pending_vectors"] == 5  # ana's 4, bob's 1
        await c.session_add("p1", {"role": "user", "content": "Maja plays the cello."})
        assert (await c.call("memman_stats"))["recall"]["pending_vectors"] == 6
        held.set()
        await d.app.recall.loaded()
        # the lost vector and the added entry: read from the store, nothing else waits
        assert d.app.recall.stats()["pending_vectors"] == 2
        assert await d.app.recall.drained(60)
        assert (await c.call("memman_stats"))["recall"]["pending_vectors"] == 0
