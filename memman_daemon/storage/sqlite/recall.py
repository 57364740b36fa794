"""The SQL of the recall index's table group: ``recall_vectors`` (the search model's vector of
each session entry, written in batches by the background embedder) and ``recall_exclusions``
(entries a session no longer recalls). Caller: ``recall/index.py`` (``RecallIndex``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from memman_daemon.storage.sqlite.store import Op, Store


def vectors_op(rows: list[tuple[int, str, str, np.ndarray]]) -> list[Op]:
    """Upsert (entry id, session id, model, unit vector) rows."""
    return [("INSERT OR REPLACE INTO recall_vectors(entry_id, session_id, model, embedding) "
             "VALUES (?,?,?,?)", (eid, sid, model, np.asarray(v, dtype="<f4").tobytes()))
            for eid, sid, model, v in rows]


def delete_entry_op(entry_id: int) -> Op:
    return ("DELETE FROM recall_vectors WHERE entry_id=?", (entry_id,))


def exclude_op(session_id: str, entry_id: int, at: float) -> Op:
    return ("INSERT OR REPLACE INTO recall_exclusions(session_id, entry_id, at) VALUES (?,?,?)",
            (session_id, entry_id, at))


def include_op(session_id: str, entry_id: int) -> Op:
    return ("DELETE FROM recall_exclusions WHERE session_id=? AND entry_id=?",
            (session_id, entry_id))


async def vectors(store: Store, model: str) -> list[tuple[int, bytes]]:
    """Every stored vector of ``model``: (entry id, float32 bytes)."""
    rows = await store.fetchall(
        "SELECT entry_id, embedding FROM recall_vectors WHERE model=?", (model,))
    return [(r[0], r[1]) for r in rows]


async def exclusions(store: Store) -> list[tuple[Any, ...]]:
    return [tuple(r) for r in await store.fetchall(
        "SELECT session_id, entry_id FROM recall_exclusions")]


class LocalRecall:
    """The recall index's storage in the local file: vectors and exclusions. Nothing crosses
    hosts, so the hand-over calls are no-ops (``storage/recall.py``, ``RecallStorage``)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def attach(self, local: Any, on_change: Any, model: Any) -> None:
        pass

    async def load(self) -> None:
        pass

    async def close(self) -> None:
        pass

    async def vectors(self, model: str) -> list[tuple[int, bytes]]:
        return await vectors(self.store, model)

    async def save_vectors(self, rows: list[tuple[int, str, str, np.ndarray]]) -> None:
        await self.store.write(vectors_op(rows))

    async def exclusions(self) -> list[tuple[str, int]]:
        return [(r[0], r[1]) for r in await exclusions(self.store)]

    def exclude_op(self, session_id: str, entry_id: int, at: float) -> Op:
        return exclude_op(session_id, entry_id, at)

    def include_op(self, session_id: str, entry_id: int) -> Op:
        return include_op(session_id, entry_id)

    def arrived(self, s: Any, entries: Any) -> None:
        pass

    def removed(self, entry_ids: list[int]) -> None:
        pass

    def session_removed(self, session_id: str) -> None:
        pass

    def stats(self) -> dict[str, Any]:
        return {}
