"""The ``audit`` table of the local SQLite file: the audit group (``SqliteAudit``, under
``tiers/audit.py``'s ``AuditLog``) and the reads of ``memman_undo`` (``api/system.py``)."""

from __future__ import annotations

import itertools
import json
import sqlite3
from typing import Any

from memman_daemon.storage.audit import COLUMNS, AuditRecord, select_newest, select_promotion
from memman_daemon.storage.sqlite.store import Op, Store


class SqliteAudit:
    """The audit group (``storage/audit.py``) in the local file; ids count up from the
    highest in use."""

    host = None

    def __init__(self, store: Store) -> None:
        self.store = store
        self._ids = itertools.count(1)

    async def load(self) -> None:
        rows = await self.store.fetchall("SELECT max(id) FROM audit")
        self._ids = itertools.count((rows[0][0] or 0) + 1)

    async def ensure_ids(self, n: int) -> None:
        pass  # counted here, never short

    def take_id(self) -> int:
        return next(self._ids)

    def insert_op(self, rec: AuditRecord) -> Op:
        return (f"INSERT INTO audit({COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?)", rec.row())

    async def newest(self, filt: dict[str, Any]) -> list[AuditRecord]:
        return [AuditRecord.from_row(r)
                for r in await self.store.fetchall(*select_newest(filt, lambda n: "?"))]

    async def newest_promotion(self, client: str, session_id: str | None,
                               after: float | None) -> AuditRecord | None:
        rows = await self.store.fetchall(*select_promotion(client, session_id, after,
                                                           lambda n: "?"))
        return AuditRecord.from_row(rows[0]) if rows else None


# --- memman_undo's reads ----------------------------------------------------------------------
async def of_client(store: Store, client: str, actions: tuple[str, ...], session_id: str | None,
                    limit: int) -> list[sqlite3.Row]:
    """The client's newest ``limit`` records of these actions (of one session), newest first."""
    where = ["client=?", f"action IN ({','.join('?' * len(actions))})"]
    params: list[Any] = [client, *actions]
    if session_id is not None:
        where.append("session_id=?")
        params.append(session_id)
    return await store.fetchall(
        f"SELECT {COLUMNS} FROM audit WHERE {' AND '.join(where)} ORDER BY id DESC LIMIT ?",
        [*params, limit])


async def later(store: Store, after_id: int, action: str, **columns: Any
                ) -> list[tuple[int, dict[str, Any]]]:
    """(id, data) of the records of ``action`` after ``after_id`` whose ``columns`` match
    (undo: was the scope of an action deleted since?), oldest first."""
    where = ["id>?", "action=?", *(f"{k}=?" for k in columns)]
    rows = await store.fetchall(f"SELECT id, data FROM audit WHERE {' AND '.join(where)} "
                                "ORDER BY id", [after_id, action, *columns.values()])
    return [(r[0], json.loads(r[1])) for r in rows]


async def undo_data(store: Store) -> list[str]:
    """The ``data`` of every undo record (each names the record it reversed)."""
    return [r[0] for r in await store.fetchall("SELECT data FROM audit WHERE action='undo'")]
