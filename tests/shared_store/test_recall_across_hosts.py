"""Recall across hosts: two daemons, each with its own socket and SQLite file, on one real
PostgreSQL. What ana said in a session on A comes back, dated and sourced, in a fresh session
of hers on B; her sessions stay on A; forgetting or deleting on A removes it from B's recall;
a private entry never reaches the shared table; an entry logged while A had no shared store,
or while PostgreSQL was down, reaches B once A has it again. Forgetting on B an entry said on
A removes it from recall on both (for good: A restarts without it), while A's session keeps
it; a session's recall flag turned off on A leaves B's recall, turned on it comes back."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from memman_daemon.clock import FakeClock
from tests.helpers import RunningDaemon, running_daemon, short_tmpdir
from tests.pg_server import PgServer, fresh_db, require_pg, session_server

MARCH = 1709373600.0  # 2024-03-02 10:00 UTC
MAY = 1714557600.0  # 2024-05-01 10:00 UTC
FACT = "My cat Miso is allergic to chicken, please remember that."
SECRET = "My bank PIN hint is the blue heron, and Miso knows it."


@pytest.fixture
def dsn() -> str:
    return fresh_db(session_server())


async def until(cond: Callable[[], Awaitable[bool]], timeout: float = 30.0) -> None:
    """Wait for a condition with a deadline (never a fixed sleep)."""
    async def poll() -> None:
        while not await cond():
            await asyncio.sleep(0.05)
    await asyncio.wait_for(poll(), timeout)


def body(ctx: dict[str, Any]) -> str:
    return "\n".join(m.get("content") or "" for m in ctx["messages"])


@contextlib.asynccontextmanager
async def daemon(dsn: str, root: Path | None = None) -> AsyncIterator[RunningDaemon]:
    async with running_daemon(root, clock=FakeClock(), storage={"shared": dsn}) as d:
        yield d


async def test_a_fact_said_on_a_is_recalled_on_b_and_leaves_with_it(dsn: str) -> None:
    async with daemon(dsn) as a, daemon(dsn) as b, a.client() as ca, b.client() as cb:
        await ca.session_open("s1", {"user_id": "ana"})
        await ca.session_add("s1", {"role": "user", "content": SECRET, "created_at": MARCH,
                                    "metadata": {"private": True}})
        fact = await ca.session_add("s1", {"role": "user", "content": FACT,
                                           "created_at": MARCH + 60})
        await ca.session_add("s1", {"role": "assistant", "content": "Noted: no chicken for Miso.",
                                    "created_at": MARCH + 120})
        await ca.session_open("s2", {"user_id": "ana"})
        await ca.session_add("s2", {"role": "user", "created_at": MAY,
                                    "content": "My sister Lena moved to Porto last spring."})
        await ca.session_open("b1", {"user_id": "bob"})
        await ca.session_add("b1", {"role": "user", "content": "My dog Rex is allergic to beef.",
                                    "created_at": MARCH})

        await cb.session_open("q", {"user_id": "ana"})
        await cb.session_add("q", {"role": "user",
                                   "content": "Which food must my cat avoid, and where does my "
                                              "sister live?"})

        async def recalled() -> bool:
            text = body(await cb.session_context("q", {"max_tokens": 1000}))
            return "Miso is allergic to chicken" in text and "Lena moved to Porto" in text

        await until(recalled)
        ctx = await cb.session_context("q", {"max_tokens": 1000})
        text = body(ctx)
        assert "[2024-03-02 · session s1]" in text  # A's date and A's session
        assert "[2024-05-01 · session s2]" in text
        assert "Rex" not in text  # another user's sessions never
        assert "PIN" not in text
        rec = next(p for p in ctx["parts"] if p["kind"] == "recalled")
        assert {s["session_id"] for s in rec["sources"]} == {"s1", "s2"}
        assert ctx["tokens"] <= 1000 and not ctx["over_budget"]

        # sessions stay where they were logged
        assert [s["session_id"] for s in await cb.session_list()] == ["q"]
        assert {s["session_id"] for s in await ca.session_list()} == {"s1", "s2", "b1"}
        # the private entry never reached the shared table (only the others did)
        conn = await asyncpg.connect(dsn)
        try:
            shared = [r["content"] for r in await conn.fetch(
                "SELECT content FROM recall_rows WHERE NOT gone")]
        finally:
            await conn.close()
        assert FACT in shared and not any("PIN" in t for t in shared)

        # A embedded its entries; B takes their vectors instead of embedding them again
        assert await a.app.recall.drained(60)

        async def by_search_model() -> bool:
            got = (await cb.session_preview("q", {"max_tokens": 1000}))["recalled"]
            return bool(got) and all(r["score_parts"]["vector_model"] == "search" for r in got)

        await until(by_search_model)
        assert b.app.recall.stats()["embedded"] <= 2  # B's own question, not A's entries

        # a person on B stops recalling A's entry in this session, and undoes it
        lena = next(r["entry_id"] for r in (await cb.session_preview(
            "q", {"max_tokens": 1000}))["recalled"] if r["session_id"] == "s2")
        await cb.recall_exclude("q", lena)
        assert await _lacks(cb, "Lena moved")
        await cb.recall_exclude("q", lena, False)
        assert not await _lacks(cb, "Lena moved")

        # forgetting the entry on A, then deleting a session on A: gone from B's recall
        await ca.memory_forget("ana", fact["id"])
        await until(lambda: _lacks(cb, "Miso is allergic"))
        await ca.session_delete("s2")
        await until(lambda: _lacks(cb, "Lena moved"))


async def _lacks(c: Any, text: str, sid: str = "q") -> bool:
    return text not in body(await c.session_context(sid, {"max_tokens": 1000}))


QUESTION = "Which food must my cat avoid, and where does my sister live?"


async def _ask(c: Any, sid: str) -> None:
    """A fresh session of ana's asking the question."""
    await c.session_open(sid, {"user_id": "ana"})
    await c.session_add(sid, {"role": "user", "content": QUESTION})


async def _both(c: Any, sid: str) -> bool:
    text = body(await c.session_context(sid, {"max_tokens": 1000}))
    return "Miso is allergic" in text and "Lena moved" in text


async def _shared_row(dsn: str, d: RunningDaemon, entry_id: int) -> Any:
    """The shared row of ``d``'s entry."""
    conn = await asyncpg.connect(dsn)
    try:
        return await conn.fetchrow("SELECT * FROM recall_rows WHERE origin=$1 AND entry_id=$2",
                                   d.app.recall.storage.origin, entry_id)
    finally:
        await conn.close()


async def test_forgetting_on_b_an_entry_said_on_a_removes_it_from_recall_everywhere(
        dsn: str) -> None:
    root = short_tmpdir()
    try:
        async with daemon(dsn) as b, b.client() as cb:
            async with daemon(dsn, root) as a, a.client() as ca:
                await ca.session_open("s1", {"user_id": "ana"})
                fact = await ca.session_add("s1", {"role": "user", "content": FACT,
                                                   "created_at": MARCH})
                await ca.session_add("s1", {"role": "user", "created_at": MARCH + 60,
                                            "content": "My sister Lena moved to Porto last spring."})
                await _ask(ca, "a2")  # a session of hers on A recalls s1 too
                await _ask(cb, "q")
                assert await _both(ca, "a2")
                await until(lambda: _both(cb, "q"))
                found = (await cb.memory_search("ana", "session", "cat allergic chicken",
                                                {}))["results"]
                rid = next(r["id"] for r in found if r["text"] == FACT)
                assert rid != fact["id"]  # B's own id for A's entry

                got = await cb.memory_forget("ana", rid)
                assert got == {"forgotten": True, "id": rid, "session_id": "s1",
                               "kind": "session_entry", "audit_id": got["audit_id"]}
                # gone from B's recall at once, Lena stays
                text = body(await cb.session_context("q", {"max_tokens": 1000}))
                assert "Miso" not in text and "Lena moved" in text
                # audited on B as a removal, as a local forget is
                audit = (await cb.audit_list({"action": "remove"}))["records"]
                assert [r["id"] for r in audit] == [got["audit_id"]]
                assert audit[0]["source"] == f"session:s1#{rid}" and "Miso" in audit[0]["what"]
                assert audit[0]["user_id"] == "ana"
                # the shared row is a tombstone, its text emptied
                row = await _shared_row(dsn, a, fact["id"])
                assert row["gone"] and row["forgotten"] and row["content"] == row["text"] == ""
                # A learns of it: no session of hers on A recalls it any more ...
                await until(lambda: _lacks(ca, "Miso is allergic", "a2"))
                await _ask(ca, "a3")
                text = body(await ca.session_context("a3", {"max_tokens": 1000}))
                assert "Miso" not in text and "Lena moved" in text
                # ... and its session there keeps it (sessions are host-local)
                s1 = await ca.session_get("s1")
                assert any(e["content"] == FACT for e in s1["entries"])
                # a forget of an id B does not recall is not found, as before
                with pytest.raises(Exception, match="not found|No such|-32001"):
                    await cb.memory_forget("ana", rid)
            # A restarts on the same data dir: it neither recalls the entry nor shares it again
            async with daemon(dsn, root) as a, a.client() as ca:
                async def caught_up() -> bool:
                    shared = a.app.recall.stats()["shared"]
                    return shared["reconciled"] >= 1 and shared["queued"] == 0

                await until(caught_up)
                await _ask(ca, "a4")
                text = body(await ca.session_context("a4", {"max_tokens": 1000}))
                assert "Lena moved" in text and "Miso" not in text
                row = await _shared_row(dsn, a, fact["id"])
                assert row["gone"] and row["forgotten"] and row["content"] == ""
                await _ask(cb, "q2")
                await until(lambda: _lacks(cb, "Miso is allergic", "q2"))
                text = body(await cb.session_context("q2", {"max_tokens": 1000}))
                assert "Lena moved" in text and "Miso" not in text
        # recorded in A's own file: without the shared store too, A does not recall it
        async with running_daemon(root, clock=FakeClock()) as a, a.client() as ca:
            await _ask(ca, "a5")
            text = body(await ca.session_context("a5", {"max_tokens": 1000}))
            assert "Lena moved" in text and "Miso" not in text
            s1 = await ca.session_get("s1")
            assert any(e["content"] == FACT for e in s1["entries"])
    finally:
        shutil.rmtree(root, ignore_errors=True)


async def test_a_session_taken_out_of_recall_on_a_leaves_b_and_comes_back(dsn: str) -> None:
    async with daemon(dsn) as a, daemon(dsn) as b, a.client() as ca, b.client() as cb:
        await ca.session_open("s1", {"user_id": "ana"})
        fact = await ca.session_add("s1", {"role": "user", "content": FACT, "created_at": MARCH})
        await ca.session_open("s2", {"user_id": "ana"})
        await ca.session_add("s2", {"role": "user", "created_at": MAY,
                                    "content": "My sister Lena moved to Porto last spring."})
        await _ask(cb, "q")
        await until(lambda: _both(cb, "q"))
        assert await a.app.recall.drained(60)

        await ca.session_open("s1", {"recall": False})
        await until(lambda: _lacks(cb, "Miso is allergic"))
        assert not await _lacks(cb, "Lena moved")
        row = await _shared_row(dsn, a, fact["id"])
        assert row["gone"] and not row["forgotten"] and row["content"] == ""

        await ca.session_open("s1", {"recall": True})
        await until(lambda: _both(cb, "q"))

        # back with A's vector: B does not embed A's entry itself
        async def by_search_model() -> bool:
            got = (await cb.session_preview("q", {"max_tokens": 1000}))["recalled"]
            return any(r["session_id"] == "s1" and r["score_parts"]["vector_model"] == "search"
                       for r in got)

        await until(by_search_model)


async def test_an_entry_logged_without_the_shared_store_reaches_it_later(dsn: str) -> None:
    root = short_tmpdir()
    # A logs with no shared store at all (its SQLite file only) ...
    async with running_daemon(root, clock=FakeClock()) as a, a.client() as ca:
        await ca.session_open("s1", {"user_id": "ana"})
        await ca.session_add("s1", {"role": "user", "content": FACT, "created_at": MARCH})
    # ... then starts with one: its log is brought over, and B recalls it
    async with daemon(dsn, root) as a, daemon(dsn) as b, b.client() as cb:
        await cb.session_open("q", {"user_id": "ana"})
        await cb.session_add("q", {"role": "user", "content": "Which food must my cat avoid?"})

        async def recalled() -> bool:
            return "[2024-03-02 · session s1]" in body(
                await cb.session_context("q", {"max_tokens": 1000}))

        await until(recalled)


@pytest.fixture(scope="module")
def own_pg() -> Iterator[PgServer]:
    """Its own server: the outage test stops it."""
    require_pg()
    with PgServer() as server:
        yield server


async def test_entries_logged_while_postgres_was_down_reach_the_other_host(
        own_pg: PgServer) -> None:
    storage = {"shared": own_pg.create_db("rcl"), "shared_timeout_s": 3.0,
               "shared_backoff_max_s": 0.5}
    async with running_daemon(clock=FakeClock(), storage=storage) as a, \
            running_daemon(clock=FakeClock(), storage=storage) as b, \
            a.client() as ca, b.client() as cb:
        await ca.session_open("s1", {"user_id": "ana"})
        await asyncio.to_thread(own_pg.stop, "immediate")

        async def down() -> bool:
            return a.app.shared.state == "down" and b.app.shared.state == "down"

        await until(down)
        # acknowledged by A's session log while nothing can reach the shared table
        await ca.session_add("s1", {"role": "user", "content": FACT, "created_at": MARCH})
        await cb.session_open("q", {"user_id": "ana"})
        await cb.session_add("q", {"role": "user", "content": "Which food must my cat avoid?"})
        assert "Miso" not in body(await cb.session_context("q", {"max_tokens": 1000}))
        await asyncio.to_thread(own_pg.start)

        async def recalled() -> bool:
            return "[2024-03-02 · session s1]" in body(
                await cb.session_context("q", {"max_tokens": 1000}))

        await until(recalled, 60)
