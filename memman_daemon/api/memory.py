"""Protocol methods of user memory (append, search, playbook, learn / recall, compact, stats,
clear, list, forget) and of the audit log that records promotions and evictions.
"""

from __future__ import annotations

from typing import Any

from memman import names
from memman.errors import NOT_FOUND, MemmanError
from memman_daemon.rpc import Call, handles


@handles(names.MEMORY_FORGET)
async def memory_forget(call: Call, user_id: str, record_id: int) -> dict[str, Any]:
    try:
        return await call.app.user_memory.forget(user_id, record_id, call.client_name)
    except MemmanError as exc:
        if exc.code != NOT_FOUND:
            raise
        s = call.app.recall.session_of_entry(user_id, record_id)
        if s is None:
            sid, audit_id = await _forget_remote(call, user_id, record_id, exc)
            return {"forgotten": True, "id": record_id, "session_id": sid,
                    "kind": "session_entry", "audit_id": audit_id}
    out = await call.app.engine.remove(s, record_id, call.client_name)
    return {"forgotten": True, "id": record_id, "session_id": s.id, "kind": "session_entry",
            "audit_id": out["audit_id"]}


async def _forget_remote(call: Call, user_id: str, record_id: int,
                         exc: MemmanError) -> tuple[str, int]:
    """An entry of the user's session on another host, as recalled here (shared store): it
    leaves recall on every host; its session, there, keeps it. Audited here as a removal
    (no session of this host: the target names the session, ``origin`` its host)."""
    recall = call.app.recall
    row = recall.remote_row(record_id)
    if row is None or row.user_id != user_id:
        raise exc
    rec, op = call.app.audit.record(
        "remove", row.content, f"session:{row.session_id}#{record_id}", "-", call.client_name,
        user_id=row.user_id, tenant_id=row.tenant_id, entry_id=record_id, type=row.type,
        role=row.role, tokens=0, summary_ids=[], pop=False, origin=row.origin)
    await recall.forget_remote(record_id, [op])
    return row.session_id, rec.id


@handles(names.AUDIT_LIST)
async def audit_list(call: Call, filter: dict[str, Any]) -> dict[str, Any]:
    return {"records": await call.app.audit.list(filter)}


@handles(names.MEMORY_APPEND)
async def memory_append(call: Call, user_id: str, type: str, entry: dict[str, Any]) -> dict[str, Any]:
    return await call.app.user_memory.append(user_id, type, entry, call.client_name)


@handles(names.MEMORY_SEARCH)
async def memory_search(call: Call, user_id: str, type: str, query: str,
                        opts: dict[str, Any]) -> dict[str, Any]:
    if type == "session":
        limit = opts.get("limit") or call.app.config.memory.search_limit
        results = await call.app.recall.search(user_id, query, limit, opts.get("session_id"))
        return {"results": results, "mode": "hybrid"}
    um = call.app.user_memory
    results = await um.search(user_id, type, query, opts)
    mode = "terms" if type == "working" else um.mode_for(opts)
    return {"results": results, "mode": mode}


@handles(names.MEMORY_PLAYBOOK)
async def memory_playbook(call: Call, user_id: str, query: str,
                          opts: dict[str, Any]) -> dict[str, Any]:
    return await call.app.user_memory.playbook(user_id, query, opts, call.client_name)


@handles(names.MEMORY_LEARN)
async def memory_learn(call: Call, user_id: str, key: str, value: Any,
                       opts: dict[str, Any]) -> dict[str, Any]:
    return await call.app.user_memory.learn(user_id, key, value, opts, call.client_name)


@handles(names.MEMORY_RECALL)
async def memory_recall(call: Call, user_id: str, key: str) -> dict[str, Any] | None:
    return await call.app.user_memory.recall(user_id, key)


@handles(names.MEMORY_COMPACT)
async def memory_compact(call: Call, user_id: str, type: str, opts: dict[str, Any]) -> dict[str, Any]:
    return await call.app.user_memory.compact(user_id, type, opts, call.client_name)


@handles(names.MEMORY_STATS)
async def memory_stats(call: Call, user_id: str) -> dict[str, Any]:
    return await call.app.user_memory.stats_for(user_id)


@handles(names.MEMORY_CLEAR)
async def memory_clear(call: Call, user_id: str, type: str) -> dict[str, Any]:
    return await call.app.user_memory.clear(user_id, type, call.client_name)


@handles(names.MEMORY_LIST)
async def memory_list(call: Call, user_id: str, type: str, opts: dict[str, Any]) -> dict[str, Any]:
    return {"records": await call.app.user_memory.list(user_id, type, opts)}
