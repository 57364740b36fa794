"""The SQL of user memory in the local SQLite file: ``memories`` (one row per stored record),
its FTS5 index ``memories_fts`` and ``memory_vectors`` (one vector per record, with the model
that made it). The rows to write, as ops for ``Store.write``, and every read. Caller:
``tiers/user_memory.py`` (``UserMemory``) and undo in ``api/system.py``; the shared store's
PostgreSQL tables have their own SQL (``shared_store/user_memory.py``).

Rows are returned as the database gives them, columns in ``COLUMNS`` order (``MemoryRecord``
reads them); ``metadata`` stays JSON text.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from memman_daemon.storage.sqlite.store import Op, Store

COLUMNS = "id, user_id, type, kind, key, content, metadata, created_at, updated_at, archived_by"


def prefixed(alias: str) -> str:
    """``COLUMNS`` of table alias ``alias``."""
    return ", ".join(f"{alias}.{c.strip()}" for c in COLUMNS.split(","))


def _marks(n: int) -> str:
    return ",".join("?" * n)


# --- writes ---------------------------------------------------------------------------------
#: the columns an upsert of a record rewrites (all but its id)
_SET = ", ".join(f"{c.strip()}=excluded.{c.strip()}" for c in COLUMNS.split(",")[1:])


def upsert_op(row: tuple[Any, ...]) -> Op:
    """The record ``row`` (``COLUMNS`` order, ``metadata`` as JSON text), inserted or updated
    by its id. Not ``INSERT OR REPLACE``: that would delete another live preference of the same
    user and key to make room; here the unique index ``memories_live`` refuses it (an
    ``IntegrityError``: a concurrent writer got there first, see ``UserMemory.learn``)."""
    return (f"INSERT INTO memories({COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?) "
            f"ON CONFLICT(id) DO UPDATE SET {_SET}", row)


def vector_op(record_id: int, vec: np.ndarray, model: str) -> Op:
    return ("INSERT OR REPLACE INTO memory_vectors(id, dim, embedding, model) VALUES (?,?,?,?)",
            (record_id, int(vec.shape[0]), vec.astype(np.float32).tobytes(), model))


def late_vector_op(record_id: int, vec: np.ndarray, model: str) -> Op:
    """A vector made in the background: stored only while its record still exists."""
    return ("INSERT OR REPLACE INTO memory_vectors(id, dim, embedding, model) "
            "SELECT ?,?,?,? WHERE EXISTS (SELECT 1 FROM memories WHERE id=?)",
            (record_id, int(vec.shape[0]), vec.astype(np.float32).tobytes(), model, record_id))


def touch_op(record_id: int, metadata: dict[str, Any], updated_at: float) -> Op:
    return ("UPDATE memories SET metadata=?, updated_at=? WHERE id=?",
            (json.dumps(metadata, ensure_ascii=False, default=str), updated_at, record_id))


def archive_op(record_id: int, summary_id: int) -> Op:
    """Archive a record behind compaction summary ``summary_id`` (0: archived, no summary)."""
    return ("UPDATE memories SET archived_by=? WHERE id=?", (summary_id, record_id))


def rewrite_op(record_id: int, content: str, metadata: dict[str, Any]) -> Op:
    return ("UPDATE memories SET content=?, metadata=? WHERE id=?",
            (content, json.dumps(metadata, ensure_ascii=False, default=str), record_id))


def unlink_summary_op(summary_id: int) -> Op:
    """The records a removed summary archived stay archived, linked to no summary."""
    return ("UPDATE memories SET archived_by=0 WHERE archived_by=?", (summary_id,))


def delete_ops(record_id: int) -> list[Op]:
    """One record and its vector."""
    return [("DELETE FROM memory_vectors WHERE id=?", (record_id,)),
            ("DELETE FROM memories WHERE id=?", (record_id,))]


def clear_ops(user_id: str, types: list[str]) -> list[Op]:
    """Every record (and vector) of these layers of the user."""
    marks = _marks(len(types))
    return [(f"DELETE FROM memory_vectors WHERE id IN (SELECT id FROM memories WHERE "
             f"user_id=? AND type IN ({marks}))", [user_id, *types]),
            (f"DELETE FROM memories WHERE user_id=? AND type IN ({marks})", [user_id, *types])]


# --- reads ----------------------------------------------------------------------------------
async def live_keyed(store: Store) -> list[tuple[Any, ...]]:
    """Every live preference, rule and playbook (the semantic and procedural layers)."""
    return await store.fetchall(
        f"SELECT {COLUMNS} FROM memories WHERE type IN ('semantic','procedural') "
        "AND archived_by IS NULL ORDER BY id")


async def episodic_counts(store: Store) -> list[tuple[str, int]]:
    """``(user_id, live episodic records)`` of each user."""
    return await store.fetchall(
        "SELECT user_id, count(*) FROM memories WHERE type='episodic' "
        "AND archived_by IS NULL GROUP BY user_id")


async def max_id(store: Store) -> int:
    rows = await store.fetchall("SELECT max(id) FROM memories")
    return rows[0][0] or 0


async def get(store: Store, record_id: int, user_id: str | None = None) -> tuple[Any, ...] | None:
    """One record (of that user), live or archived."""
    if user_id is None:
        rows = await store.fetchall(f"SELECT {COLUMNS} FROM memories WHERE id=?", (record_id,))
    else:
        rows = await store.fetchall(f"SELECT {COLUMNS} FROM memories WHERE id=? AND user_id=?",
                                    (record_id, user_id))
    return rows[0] if rows else None


async def live_by_id(store: Store, ids: list[int]) -> list[tuple[Any, ...]]:
    return await store.fetchall(
        f"SELECT {COLUMNS} FROM memories WHERE archived_by IS NULL AND id IN "
        f"({_marks(len(ids))})", ids)


async def newest(store: Store, user_id: str, type_: str, *, limit: int,
                 include_archived: bool = False, kind: str | None = None,
                 before_id: int | None = None) -> list[tuple[Any, ...]]:
    """The user's records of one layer, newest first."""
    where = "user_id=? AND type=?"
    params: list[Any] = [user_id, type_]
    if not include_archived:
        where += " AND archived_by IS NULL"
    if kind:
        where += " AND kind=?"
        params.append(kind)
    if before_id is not None:
        where += " AND id<?"
        params.append(before_id)
    return await store.fetchall(
        f"SELECT {COLUMNS} FROM memories WHERE {where} ORDER BY id DESC LIMIT ?",
        [*params, limit])


async def live_oldest_first(store: Store, user_id: str, type_: str) -> list[tuple[Any, ...]]:
    """The user's live records of one layer, oldest first (what compaction folds)."""
    return await store.fetchall(
        f"SELECT {COLUMNS} FROM memories WHERE user_id=? AND type=? "
        "AND archived_by IS NULL ORDER BY created_at, id", (user_id, type_))


async def count_archived_by(store: Store, summary_id: int) -> int:
    rows = await store.fetchall("SELECT count(*) FROM memories WHERE archived_by=?",
                                (summary_id,))
    return rows[0][0]


async def counts_by_type(store: Store, user_id: str, types: list[str]) -> list[tuple[str, int]]:
    """``(type, records)`` of these layers of the user, archived ones included."""
    return await store.fetchall(
        f"SELECT type, count(*) FROM memories WHERE user_id=? AND type IN ({_marks(len(types))}) "
        "GROUP BY type", [user_id, *types])


async def user_sizes(store: Store, user_id: str) -> tuple[dict[str, tuple[int, int]], int, int]:
    """``({type: (live records, bytes)}, archived records, vectors)`` of the user."""
    rows = await store.fetchall(
        "SELECT type, count(*), sum(length(content) + length(metadata) + length(coalesce(key,''))) "
        "FROM memories WHERE user_id=? AND archived_by IS NULL GROUP BY type", (user_id,))
    archived = await store.fetchall(
        "SELECT count(*) FROM memories WHERE user_id=? AND archived_by IS NOT NULL", (user_id,))
    vecs = await store.fetchall(
        "SELECT count(*) FROM memory_vectors v JOIN memories m ON m.id=v.id WHERE m.user_id=?",
        (user_id,))
    return {r[0]: (r[1], r[2] or 0) for r in rows}, archived[0][0], vecs[0][0]


# --- vectors --------------------------------------------------------------------------------
async def scope_vectors(store: Store, user_id: str, type_: str, model: str,
                        dim: int) -> list[tuple[int, bytes]]:
    """``(id, embedding)`` of the live records of one layer of the user, of this model."""
    return await store.fetchall(
        "SELECT v.id, v.embedding FROM memory_vectors v JOIN memories m ON m.id = v.id "
        "WHERE m.user_id=? AND m.type=? AND m.archived_by IS NULL AND v.model=? AND v.dim=?",
        (user_id, type_, model, dim))


async def count_vector_backlog(store: Store, model: str) -> int:
    """Live records with no vector of ``model``."""
    rows = await store.fetchall(
        "SELECT count(*) FROM memories m LEFT JOIN memory_vectors v ON v.id = m.id "
        "WHERE m.archived_by IS NULL AND (v.id IS NULL OR v.model <> ?)", (model,))
    return rows[0][0]


async def vector_backlog(store: Store, after: int, model: str,
                         limit: int) -> list[tuple[Any, ...]]:
    """Live records after id ``after`` with no vector of ``model``, in id order."""
    return await store.fetchall(
        f"SELECT {prefixed('m')} FROM memories m LEFT JOIN memory_vectors v ON v.id = m.id "
        "WHERE m.id > ? AND m.archived_by IS NULL AND (v.id IS NULL OR v.model <> ?) "
        "ORDER BY m.id LIMIT ?", (after, model, limit))


# --- full text ------------------------------------------------------------------------------
async def fts_ranked(store: Store, match: str, low: int, user_id: str, types: tuple[str, ...],
                     kind: str | None, limit: int) -> list[tuple[Any, ...]]:
    """The user's live records of these layers (of ``kind``) matching ``match`` from rowid
    ``low`` on, best BM25 first: ``COLUMNS`` and the BM25 score (lower is better) last."""
    filt = f"m.user_id=? AND m.type IN ({_marks(len(types))}) AND m.archived_by IS NULL"
    params: list[Any] = [user_id, *types]
    if kind:
        filt += " AND m.kind=?"
        params.append(kind)
    return await store.fetchall(
        f"SELECT {prefixed('m')}, bm25(memories_fts) AS r "
        f"FROM memories_fts JOIN memories m ON m.id = memories_fts.rowid "
        f"WHERE memories_fts MATCH ? AND memories_fts.rowid >= ? AND {filt} "
        f"ORDER BY r LIMIT ?", [match, low, *params, limit])
