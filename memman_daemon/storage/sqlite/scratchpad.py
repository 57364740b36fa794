"""The SQL of the ``scratchpad`` table: one row per snippet (the snippet as JSON). Caller:
``tiers/scratchpad.py`` (``Scratchpad``)."""

from __future__ import annotations

import json
from typing import Any

from memman_daemon.storage.sqlite.store import Op, Store


def put_op(snippet_id: int, session_id: str, wire: dict[str, Any]) -> Op:
    return ("INSERT OR REPLACE INTO scratchpad(id, session_id, data) VALUES (?,?,?)",
            (snippet_id, session_id, json.dumps(wire, ensure_ascii=False, default=str)))


def delete_op(snippet_id: int) -> Op:
    return ("DELETE FROM scratchpad WHERE id=?", (snippet_id,))


async def all_snippets(store: Store) -> list[dict[str, Any]]:
    """Every stored snippet, as written."""
    return [json.loads(r[0]) for r in await store.fetchall("SELECT data FROM scratchpad")]
