"""Protocol methods of user memory (append, search, playbook, learn / recall, compact, stats,
clear, list, forget) and of the audit log that records promotions and evictions.
"""

from __future__ import annotations

from typing import Any

from memman import names
from memman.errors import NOT_FOUND, MemmanError, invalid_params
from memman_daemon.api.shapes import LIMIT
from memman_daemon.params import METADATA, ROW_ID, Bool, Float, Id, Int, Map, Nullable, Stored, Str
from memman_daemon.rpc import Call, Param, method

USER_ID = Id("u1")
MEMORY_TYPE = Str(max_bytes=64, example="episodic")
COSINE = Float(-1.0, 1.0, doc="a cosine similarity from -1 to 1")


@method(names.MEMORY_FORGET, Param("user_id", Id("u1")), Param("record_id", ROW_ID), writes=True)
async def memory_forget(call: Call, user_id: str, record_id: int) -> dict[str, Any]:
    """Delete one stored user-memory record (episodic, preference, rule, playbook, summary),
    or one entry of the user's sessions (as ``memman_memory_search`` type ``session`` names
    it: it leaves its session and recall)."""
    try:
        return await call.app.user_memory.forget(user_id, record_id, call.client_name)
    except MemmanError as exc:
        if exc.code != NOT_FOUND:
            raise
        s = call.app.recall.session_of_entry(user_id, record_id)
        if s is None:
            raise
    out = await call.app.engine.remove(s, record_id, call.client_name)
    return {"forgotten": True, "id": record_id, "session_id": s.id, "kind": "session_entry",
            "audit_id": out["audit_id"]}


@method(names.AUDIT_LIST, Param("filter", Map({
    "session_id": Nullable(Id()), "user_id": Nullable(Id()), "tenant_id": Nullable(Id()),
    "action": Nullable(Str(max_bytes=64)), "before_id": Nullable(ROW_ID),
    "limit": Nullable(LIMIT)}), default=dict))
async def audit_list(call: Call, filter: dict[str, Any]) -> dict[str, Any]:
    """Audit records, newest first; filter: session_id, user_id, tenant_id, action,
    before_id, limit (100)."""
    known = {"session_id", "user_id", "tenant_id", "action", "before_id", "limit"}
    for k in filter:
        if k not in known:
            raise invalid_params(f"filter.{k}", f"unknown key; known: {', '.join(sorted(known))}")
    return {"records": await call.app.audit.list(filter)}


@method(names.MEMORY_APPEND, Param("user_id", USER_ID), Param("type", MEMORY_TYPE),
        Param("entry", Map({
            "content": Nullable(Str()), "metadata": Nullable(METADATA), "id": Nullable(Stored()),
            "timestamp": Nullable(Float(0.0, 1e11, doc="unix seconds")),
            "key": Nullable(Id()), "condition": Nullable(Str()),
            "action": Nullable(Str()), "flow": Nullable(Str()), "flow_dact": Nullable(Str()),
            "slots": Nullable(Stored()), "tool_calls": Nullable(Stored()),
            "outcome": Nullable(Str()), "user_query": Nullable(Str()),
            "session_id": Nullable(Id())}, rest=Stored(), empty_array_ok=False)),
        writes=True)
async def memory_append(call: Call, user_id: str, type: str, entry: dict[str, Any]) -> dict[str, Any]:
    return await call.app.user_memory.append(user_id, type, entry, call.client_name)


@method(names.MEMORY_SEARCH, Param("user_id", USER_ID), Param("type", MEMORY_TYPE),
        Param("query", Str()),
        Param("opts", Map({"limit": Nullable(LIMIT), "kind": Nullable(Str(max_bytes=64)),
                           "flow": Nullable(Str()), "session_id": Nullable(Id()),
                           "threshold": Nullable(COSINE),
                           "mode": Nullable(Str(choices=("hybrid", "fts", "vector")))}),
              default=dict))
async def memory_search(call: Call, user_id: str, type: str, query: str,
                        opts: dict[str, Any]) -> dict[str, Any]:
    """Best first with scores; opts: limit, kind, flow (exact id first, then similarity),
    threshold, mode (hybrid, fts, vector), session_id. Type ``session``: what the user's
    sessions said (the recall index: BM25 + the search model), opts.session_id for one."""
    if type == "session":
        limit = opts.get("limit") or call.app.config.memory.search_limit
        results = await call.app.recall.search(user_id, query, limit, opts.get("session_id"))
        return {"results": results, "mode": "hybrid"}
    um = call.app.user_memory
    results = await um.search(user_id, type, query, opts)
    mode = "terms" if type == "working" else um.mode_for(opts)
    return {"results": results, "mode": mode}


@method(names.MEMORY_PLAYBOOK, Param("user_id", USER_ID), Param("query", Str()),
        Param("opts", Map({"flow": Nullable(Str()), "session_id": Nullable(Id()),
                           "threshold": Nullable(COSINE), "write": Bool()}), default=dict))
async def memory_playbook(call: Call, user_id: str, query: str,
                          opts: dict[str, Any]) -> dict[str, Any]:
    """The playbook for this query: opts.flow exact first, else by similarity above the
    threshold; with opts.session_id it is written to that session's scratchpad."""
    return await call.app.user_memory.playbook(user_id, query, opts, call.client_name)


@method(names.MEMORY_LEARN, Param("user_id", USER_ID), Param("key", Id("answer_style")),
        Param("value", Stored()),
        Param("opts", Map({"replace": Bool(), "metadata": Nullable(METADATA)}), default=dict),
        writes=True)
async def memory_learn(call: Call, user_id: str, key: str, value: Any,
                       opts: dict[str, Any]) -> dict[str, Any]:
    return await call.app.user_memory.learn(user_id, key, value, opts, call.client_name)


@method(names.MEMORY_RECALL, Param("user_id", USER_ID), Param("key", Id("answer_style")))
async def memory_recall(call: Call, user_id: str, key: str) -> dict[str, Any] | None:
    return await call.app.user_memory.recall(user_id, key)


@method(names.MEMORY_COMPACT, Param("user_id", USER_ID), Param("type", MEMORY_TYPE),
        Param("opts", Map({"keep_last": Int(0, 2**31, doc="a whole number >= 0"),
                           "summarize_older": Bool()}), default=dict), writes=True)
async def memory_compact(call: Call, user_id: str, type: str, opts: dict[str, Any]) -> dict[str, Any]:
    return await call.app.user_memory.compact(user_id, type, opts, call.client_name)


@method(names.MEMORY_STATS, Param("user_id", USER_ID))
async def memory_stats(call: Call, user_id: str) -> dict[str, Any]:
    return await call.app.user_memory.stats_for(user_id)


@method(names.MEMORY_CLEAR, Param("user_id", USER_ID), Param("type", MEMORY_TYPE, default=""), writes=True)
async def memory_clear(call: Call, user_id: str, type: str) -> dict[str, Any]:
    return await call.app.user_memory.clear(user_id, type, call.client_name)


@method(names.MEMORY_LIST, Param("user_id", USER_ID), Param("type", MEMORY_TYPE),
        Param("opts", Map({"limit": Nullable(LIMIT), "before_id": Nullable(ROW_ID),
                           "kind": Nullable(Str(max_bytes=64)),
                           "include_archived": Nullable(Bool())}), default=dict))
async def memory_list(call: Call, user_id: str, type: str, opts: dict[str, Any]) -> dict[str, Any]:
    return {"records": await call.app.user_memory.list(user_id, type, opts)}
