"""The SQL of the ``audit`` table (the local audit log): the row a change commits with, the
filtered reads of ``memman_audit_list`` and the reads of ``memman_undo``. Callers:
``tiers/audit.py`` (``AuditLog``) and ``api/system.py`` (undo)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from memman_daemon.storage.sqlite.store import Op, Store

#: the columns in the order ``AuditRecord`` takes them (``data`` as JSON text last)
COLUMNS = "id, at, action, what, source, target, client, session_id, user_id, tenant_id, data"


def insert_op(row: tuple[Any, ...], data: dict[str, Any]) -> Op:
    """The row ``row`` (every column but ``data``, in ``COLUMNS`` order) with ``data``."""
    return (f"INSERT INTO audit({COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            (*row, json.dumps(data, ensure_ascii=False, default=str)))


async def max_id(store: Store) -> int:
    rows = await store.fetchall("SELECT max(id) FROM audit")
    return rows[0][0] or 0


def select_newest(filt: dict[str, Any], mark: Callable[[int], str] = lambda n: "?"
                  ) -> tuple[str, list[Any]]:
    """The query of ``memman_audit_list`` and its parameters, newest first. ``filt``:
    session_id, user_id, tenant_id, action, before_id, limit. ``mark(n)`` is the n-th
    parameter's placeholder (``?`` here, ``$n`` in PostgreSQL, whose audit has the same
    columns)."""
    where: list[str] = []
    params: list[Any] = []
    for k in ("session_id", "user_id", "tenant_id", "action"):
        if filt.get(k) is not None:
            params.append(filt[k])
            where.append(f"{k}={mark(len(params))}")
    if filt.get("before_id") is not None:
        params.append(int(filt["before_id"]))
        where.append(f"id<{mark(len(params))}")
    sql = f"SELECT {COLUMNS} FROM audit"
    if where:
        sql += " WHERE " + " AND ".join(where)
    params.append(int(filt.get("limit") or 100))
    return sql + f" ORDER BY id DESC LIMIT {mark(len(params))}", params


async def newest(store: Store, filt: dict[str, Any]) -> list[tuple[Any, ...]]:
    """Newest first: see ``select_newest``."""
    sql, params = select_newest(filt)
    return await store.fetchall(sql, params)


async def of_client(store: Store, client: str, actions: tuple[str, ...], session_id: str | None,
                    limit: int) -> list[tuple[Any, ...]]:
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
