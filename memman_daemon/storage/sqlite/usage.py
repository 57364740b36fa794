"""The SQL of the ``usage_series`` table: one row per point of a session's usage over time.
Caller: ``engine/usage_series.py`` (``UsageSeries``)."""

from __future__ import annotations

import json
from typing import Any

from memman_daemon.storage.sqlite.store import Op, Store

#: the columns in the order ``SeriesPoint`` takes them (``data`` as JSON text last)
COLUMNS = "id, session_id, at, kind, exchange, sent_tokens, history_tokens, budget, data"


def insert_op(row: tuple[Any, ...], data: dict[str, Any]) -> Op:
    """The point ``row`` (every column but ``data``, in ``COLUMNS`` order) with ``data``."""
    return (f"INSERT INTO usage_series({COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?)",
            (*row, json.dumps(data, default=str)))


def trim_op(session_id: str, keep: int) -> Op:
    """Drop the session's points older than its newest ``keep``."""
    return ("DELETE FROM usage_series WHERE session_id=? AND id NOT IN (SELECT id "
            "FROM usage_series WHERE session_id=? ORDER BY id DESC LIMIT ?)",
            (session_id, session_id, keep))


def delete_session_op(session_id: str) -> Op:
    return ("DELETE FROM usage_series WHERE session_id=?", (session_id,))


async def newest(store: Store, keep: int) -> list[tuple[Any, ...]]:
    """Each session's newest ``keep`` points, oldest first (``data`` decoded)."""
    rows = await store.fetchall(
        f"SELECT {COLUMNS} FROM (SELECT *, row_number() OVER (PARTITION BY session_id "
        "ORDER BY id DESC) AS n FROM usage_series) WHERE n <= ? ORDER BY id", (keep,))
    return [(*r[:8], json.loads(r[8])) for r in rows]


async def max_id(store: Store) -> int:
    rows = await store.fetchall("SELECT max(id) FROM usage_series")
    return rows[0][0] or 0
