"""The SQL of the recall index's table group: ``recall_vectors`` (the search model's vector of
each session entry, written in batches by the background embedder), ``recall_tokens`` (its
packed token vectors, ``search/late.py``, written beside it), ``recall_exclusions``
(entries a session no longer recalls) and ``recall_forgotten`` (entries a user forgot for
recall on another host, with a shared store). Caller: ``recall/index.py`` (``RecallIndex``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from memman_daemon.storage.recall import Forgotten
from memman_daemon.storage.sqlite.store import Op, Store


def vectors_op(rows: list[tuple[int, str, str, np.ndarray]]) -> list[Op]:
    """Upsert (entry id, session id, model, unit vector) rows."""
    return [("INSERT OR REPLACE INTO recall_vectors(entry_id, session_id, model, embedding) "
             "VALUES (?,?,?,?)", (eid, sid, model, np.asarray(v, dtype="<f4").tobytes()))
            for eid, sid, model, v in rows]


def tokens_op(rows: list[tuple[int, str, str, np.ndarray, int]]) -> list[Op]:
    """Upsert (entry id, session id, model, packed token vectors, tokens kept) rows."""
    return [("INSERT OR REPLACE INTO recall_tokens(entry_id, session_id, model, n, packed) "
             "VALUES (?,?,?,?,?)", (eid, sid, model, n, np.ascontiguousarray(
                 packed, dtype=np.uint8).tobytes())) for eid, sid, model, packed, n in rows]


def delete_entry_ops(entry_id: int) -> list[Op]:
    return [("DELETE FROM recall_vectors WHERE entry_id=?", (entry_id,)),
            ("DELETE FROM recall_tokens WHERE entry_id=?", (entry_id,)),
            ("DELETE FROM recall_forgotten WHERE entry_id=?", (entry_id,))]


def clear_ops(session_id: str) -> list[Op]:
    """What the recall index keeps of a session's entries (the session is cleared or
    replaced). Its forgotten entries stay: an import that brings one back keeps it forgotten."""
    return [("DELETE FROM recall_vectors WHERE session_id=?", (session_id,)),
            ("DELETE FROM recall_tokens WHERE session_id=?", (session_id,))]


def delete_session_ops(session_id: str) -> list[Op]:
    """What the recall index keeps of a deleted session, its forgotten entries too."""
    return [*clear_ops(session_id),
            ("DELETE FROM recall_forgotten WHERE session_id=?", (session_id,))]


def forgotten_ops(rows: list[Forgotten], at: float) -> list[Op]:
    """(entry id, session id, the entry's created_at, its digest): forgotten for recall."""
    return [("INSERT OR REPLACE INTO recall_forgotten(entry_id, session_id, created_at, digest, "
             "at) VALUES (?,?,?,?,?)", (eid, sid, created, digest, at))
            for eid, sid, created, digest in rows]


def exclude_op(session_id: str, entry_id: int, at: float, said: str = "") -> Op:
    """``said``: another daemon's row, what it said (``said_key``; '' for this daemon's)."""
    return ("INSERT OR REPLACE INTO recall_exclusions(session_id, entry_id, at, said) "
            "VALUES (?,?,?,?)", (session_id, entry_id, at, said))


def include_op(session_id: str, entry_id: int) -> Op:
    return ("DELETE FROM recall_exclusions WHERE session_id=? AND entry_id=?",
            (session_id, entry_id))


async def vectors(store: Store, model: str, after: int = -1, limit: int = -1
                  ) -> list[tuple[int, bytes]]:
    """The stored vectors of ``model``: (entry id, float32 bytes), in entry id order, those
    after entry ``after``, at most ``limit`` (-1: all); a start reads them a batch at a time."""
    rows = await store.fetchall(
        "SELECT entry_id, embedding FROM recall_vectors WHERE model=? AND entry_id>? "
        "ORDER BY entry_id LIMIT ?", (model, after, limit))
    return [(r[0], r[1]) for r in rows]


async def tokens(store: Store, model: str, after: int = -1, limit: int = -1
                 ) -> list[tuple[int, tuple[int, bytes]]]:
    """The stored packed token matrices of ``model``: (entry id, (tokens kept, bytes)), as
    ``vectors``."""
    rows = await store.fetchall(
        "SELECT entry_id, n, packed FROM recall_tokens WHERE model=? AND entry_id>? "
        "ORDER BY entry_id LIMIT ?", (model, after, limit))
    return [(r[0], (r[1], r[2])) for r in rows]


async def exclusions(store: Store) -> list[tuple[Any, ...]]:
    return [tuple(r) for r in await store.fetchall(
        "SELECT session_id, entry_id, said FROM recall_exclusions")]


async def forgotten(store: Store) -> list[Forgotten]:
    return [(r[0], r[1], r[2], r[3]) for r in await store.fetchall(
        "SELECT entry_id, session_id, created_at, digest FROM recall_forgotten")]


class LocalRecall:
    """The recall index's storage in the local file: vectors and exclusions. Nothing crosses
    hosts, so the hand-over calls are no-ops (``storage/recall.py``, ``RecallStorage``)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def attach(self, local: Any, on_change: Any, model: Any, digest: Any = None) -> None:
        pass

    async def load(self) -> None:
        pass

    async def close(self) -> None:
        pass

    async def vectors(self, model: str, after: int = -1, limit: int = -1
                      ) -> list[tuple[int, bytes]]:
        return await vectors(self.store, model, after, limit)

    async def save_vectors(self, rows: list[tuple[int, str, str, np.ndarray]]) -> None:
        await self.store.write(vectors_op(rows))

    async def tokens(self, model: str, after: int = -1, limit: int = -1
                     ) -> list[tuple[int, tuple[int, bytes]]]:
        return await tokens(self.store, model, after, limit)

    async def save_tokens(self, rows: list[tuple[int, str, str, np.ndarray, int]]) -> None:
        await self.store.write(tokens_op(rows))

    async def exclusions(self) -> list[tuple[str, int, str]]:
        return [(r[0], r[1], r[2]) for r in await exclusions(self.store)]

    def exclude_op(self, session_id: str, entry_id: int, at: float, said: str = "") -> Op:
        return exclude_op(session_id, entry_id, at, said)

    def include_op(self, session_id: str, entry_id: int) -> Op:
        return include_op(session_id, entry_id)

    async def write_exclusion(self, session_id: str, entry_id: int, excluded: bool, at: float,
                              ops: list[Any], said: str = "") -> None:
        op = exclude_op(session_id, entry_id, at, said) if excluded \
            else include_op(session_id, entry_id)
        await self.store.write([op, *ops])

    async def forgotten(self) -> list[Forgotten]:
        return await forgotten(self.store)

    async def forget(self, entry_id: int, ops: list[Any]) -> None:
        await self.store.write(ops)  # no other daemon's row is ever here: only ``ops``

    def resync(self) -> None:
        pass

    def arrived(self, s: Any, entries: Any) -> None:
        pass

    def removed(self, entry_ids: list[int]) -> None:
        pass

    def session_removed(self, session_id: str) -> None:
        pass

    def stats(self) -> dict[str, Any]:
        return {}
