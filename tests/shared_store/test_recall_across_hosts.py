"""Recall across hosts: two daemons, each with its own socket and SQLite file, on one real
PostgreSQL. What ana said in a session on A comes back, dated and sourced, in a fresh session
of hers on B; her sessions stay on A; forgetting or deleting on A removes it from B's recall;
a private entry never reaches the shared table; an entry logged while A had no shared store,
or while PostgreSQL was down, reaches B once A has it again."""

from __future__ import annotations

import asyncio
import contextlib
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


async def _lacks(c: Any, text: str) -> bool:
    return text not in body(await c.session_context("q", {"max_tokens": 1000}))


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
