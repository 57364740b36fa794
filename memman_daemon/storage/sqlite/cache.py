"""The SQL of the ``tool_cache`` table: one row per cached tool result (the entry as JSON,
keyed by session and cache key). Caller: ``tiers/cache.py`` (``ToolCache``), and undo in
``api/system.py`` through it."""

from __future__ import annotations

import json
from typing import Any

from memman_daemon.storage.sqlite.store import Op, Store


def put_op(session_id: str, key: str, wire: dict[str, Any]) -> Op:
    return ("INSERT OR REPLACE INTO tool_cache(session_id, key, data) VALUES (?,?,?)",
            (session_id, key, json.dumps(wire, ensure_ascii=False)))


def delete_op(session_id: str, key: str) -> Op:
    return ("DELETE FROM tool_cache WHERE session_id=? AND key=?", (session_id, key))


def delete_session_op(session_id: str) -> Op:
    return ("DELETE FROM tool_cache WHERE session_id=?", (session_id,))


async def all_entries(store: Store) -> list[dict[str, Any]]:
    """Every stored entry, as written."""
    return [json.loads(r[0]) for r in await store.fetchall("SELECT data FROM tool_cache")]
