"""Races decided by the database (issue 22): two memory_learn of one user and key at once —
on two connections, pipelined on one, or on two daemons sharing PostgreSQL — leave one live
row, and the later one reports the first one's value as ``previous``. 20 rounds each, against
SQLite and against a real PostgreSQL."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from memman import names
from tests.helpers import RunningDaemon, running_daemon
from tests.pg_server import fresh_db, session_server

ROUNDS = 20


async def live_rows(d: RunningDaemon, dsn: str | None, user: str, key: str) -> int:
    sql = ("SELECT count(*) FROM memories WHERE user_id={u} AND kind='preference' AND key={k} "
           "AND archived_by IS NULL")
    if dsn is None:
        rows = await d.app.store.fetchall(sql.format(u="?", k="?"), (user, key))
        return int(rows[0][0])
    conn = await asyncpg.connect(dsn)
    try:
        return int(await conn.fetchval(sql.format(u="$1", k="$2"), user, key))
    finally:
        await conn.close()


@contextlib.asynccontextmanager
async def backends(kind: str) -> AsyncIterator[tuple[RunningDaemon, RunningDaemon, str | None]]:
    """Two daemons on one store (PostgreSQL), or one daemon twice (SQLite: one per data dir)."""
    if kind == "sqlite":
        async with running_daemon() as d:
            yield d, d, None
        return
    dsn = fresh_db(session_server())
    async with running_daemon(storage={"shared": dsn}) as a, \
            running_daemon(storage={"shared": dsn}) as b:
        yield a, b, dsn


def check_round(answers: list[Any], values: list[str], recalled: Any) -> None:
    assert not [a for a in answers if isinstance(a, Exception)], answers
    previous = sorted((a["previous"] for a in answers), key=lambda p: p is not None)
    # the first to commit saw nothing; the second saw the first's value
    assert previous[0] is None, answers
    assert previous[1] in values, answers
    later = next(a for a in answers if a["previous"] is not None)
    assert recalled["value"] == later["record"]["content"]
    assert previous[1] != later["record"]["content"]


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
@pytest.mark.parametrize("how", ["two connections", "pipelined on one"])
async def test_concurrent_learns_leave_one_live_row(kind: str, how: str) -> None:
    async with backends(kind) as (a, b, dsn), a.client("a") as ca, b.client("b") as cb:
        for i in range(ROUNDS):
            key, values = f"answer_style_{i}", [f"terse, SQL first {i}", f"detailed {i}"]
            first, second = (ca, cb) if how == "two connections" else (ca, ca)
            answers = await asyncio.gather(
                first.call(names.MEMORY_LEARN, "bob", key, values[0]),
                second.call(names.MEMORY_LEARN, "bob", key, values[1]),
                return_exceptions=True)
            check_round(answers, values, await cb.call(names.MEMORY_RECALL, "bob", key))
            assert await live_rows(a, dsn, "bob", key) == 1


async def test_duplicates_from_before_are_archived_by_the_migration() -> None:
    """A database with two live rows of one key (left by the old race) is migrated: the newest
    stays live, the other is archived (kept), and recall answers the newest."""
    import sqlite3

    from memman_daemon.storage.sqlite.schema import MIGRATIONS
    from tests.helpers import short_tmpdir

    root = short_tmpdir()
    db = root / "data" / "memman.db"
    db.parent.mkdir(parents=True)
    conn = sqlite3.connect(db)
    for v, script in enumerate(MIGRATIONS[:4]):
        conn.executescript(f"BEGIN;\n{script}\nPRAGMA user_version={v + 1};\nCOMMIT;")
    row = ("INSERT INTO memories(id, user_id, type, kind, key, content, metadata, created_at, "
           "updated_at) VALUES (?, 'bob', 'semantic', 'preference', 'answer_style', ?, '{}', 1, ?)")
    conn.execute(row, (1, "terse, SQL first", 10.0))
    conn.execute(row, (2, "detailed, with charts", 20.0))
    conn.commit()
    conn.close()
    async with running_daemon(root) as d, d.client() as c:
        assert (await c.call(names.MEMORY_RECALL, "bob", "answer_style"))["value"] == \
            "detailed, with charts"
        rows = await d.app.store.fetchall(
            "SELECT id, content, archived_by FROM memories ORDER BY id")
        assert [tuple(r) for r in rows] == [(1, "terse, SQL first", 0),
                                            (2, "detailed, with charts", None)]
        r = await c.call(names.MEMORY_LEARN, "bob", "answer_style", "brief")
        assert r["previous"] == "detailed, with charts"


@pytest.mark.parametrize("key,ok", [("k", True), ("é" * 256, True), ("x" * 512, True),
                                    ("x" * 513, False), ("x" * 1000, False), ("a\x00b", False),
                                    ("", False)])
async def test_learn_keys_are_1_to_512_bytes_without_nul(key: str, ok: bool) -> None:
    from memman.errors import INVALID_PARAMS, MemmanError

    async with running_daemon() as d, d.client() as c:
        if ok:
            await c.call(names.MEMORY_LEARN, "bob", key, "v")
            assert (await c.call(names.MEMORY_RECALL, "bob", key))["value"] == "v"
            return
        with pytest.raises(MemmanError) as err:
            await c.call(names.MEMORY_LEARN, "bob", key, "v")
        assert err.value.code == INVALID_PARAMS and "key" in err.value.message
        with pytest.raises(MemmanError) as err:  # the same bound through memory_append
            await c.call(names.MEMORY_APPEND, "bob", "semantic",
                         {"content": "v", "metadata": {"key": key}})
        assert err.value.code == INVALID_PARAMS
