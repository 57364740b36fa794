"""Methods of the tiers: tool cache, injection, scratchpad and promotion, audit log, user
memory and business documents. Each is a thin shim over its component in
``memman_daemon.tiers``; docs/protocol.md lists params, results and errors."""

from __future__ import annotations

import inspect
from typing import Any

from memman import names
from memman.cache_state import format_cache_state
from memman.errors import invalid_params
from memman_daemon.handlers.spine import SESSION_ID
from memman_daemon.params import (
    METADATA,
    ROW_ID,
    UNIT,
    Array,
    Bool,
    Float,
    Id,
    Int,
    Map,
    Nullable,
    Stored,
    Str,
)
from memman_daemon.rpc import Call, Param, method


async def _answer(value: Any) -> Any:
    """A tier's answer: read from memory (SQLite tiers) or from the shared store (awaited)."""
    return await value if inspect.isawaitable(value) else value

TOOL = Str(min_len=1, max_bytes=1024, doc="a tool name")
TOOL_PARAMS = Map(rest=Stored(), doc="a map (the tool's parameters)", empty_array_ok=True)
DURATION = Int(1, 2**31, doc="a whole number of exchanges >= 1")
TTL = Nullable(Float(0.0, 1e10, doc="seconds (a finite number >= 0)"))
CACHE_OPTS = Map({"duration": DURATION, "ttl_s": TTL, "call_id": Nullable(Str(max_bytes=1024))})
LIMIT = Int(0, 10_000, doc="an integer from 0 (the default) to 10000")
USER_ID = Id("u1")
TENANT_ID = Id("t1")
MEMORY_TYPE = Str(max_bytes=64, example="episodic")
COSINE = Float(-1.0, 1.0, doc="a cosine similarity from -1 to 1")

# --- tool cache and injection -------------------------------------------------------------


@method(names.CACHE_LOOKUP, Param("session_id", SESSION_ID), Param("tool", TOOL),
        Param("params", TOOL_PARAMS))
def cache_lookup(call: Call, session_id: str, tool: str,
                 params: dict[str, Any]) -> dict[str, Any] | None:
    """The cached result (its duration refreshed), or nil on a miss. A plain function: it is
    answered inline, as fast as any in-memory read."""
    e = call.core.cache.lookup(session_id, tool, params)
    return None if e is None else e.to_wire()


@method(names.CACHE_PUT, Param("session_id", SESSION_ID), Param("tool", TOOL),
        Param("params", TOOL_PARAMS), Param("result", Stored()),
        Param("opts", CACHE_OPTS, default=dict), writes=True)
async def cache_put(call: Call, session_id: str, tool: str, params: dict[str, Any], result: Any,
                    opts: dict[str, Any]) -> dict[str, Any]:
    """Cache a tool result; opts: duration (exchanges), ttl_s (seconds), call_id."""
    e = await call.core.cache.put(session_id, tool, params, result, opts, call.client_name)
    return e.to_wire()


@method(names.CACHE_LIST, Param("session_id", SESSION_ID))
async def cache_list(call: Call, session_id: str) -> dict[str, Any]:
    """Every cached entry of the session (oldest first), its counters and the
    FUNCTION CACHE STATE block."""
    cache = call.core.cache
    call.core.sessions.get(session_id)
    entries = [e.to_wire() for e in cache.entries(session_id)]
    counters = cache.session_counters.get(session_id, {})
    return {"entries": entries, "counters": {k: counters.get(k, 0) for k in
                                             ("hits", "misses", "puts", "expired", "evicted")},
            "state": format_cache_state(entries, call.core.clock.now())}


@method(names.CACHE_EVICT, Param("session_id", SESSION_ID), Param("key", Str(min_len=1, max_bytes=1024)),
        writes=True)
async def cache_evict(call: Call, session_id: str, key: str) -> dict[str, Any]:
    """Evict the entry with this key ("*": every entry of the session)."""
    return {"evicted": await call.core.cache.evict(session_id, key, call.client_name)}


@method(names.SESSION_INJECT, Param("session_id", SESSION_ID), Param("prompt_injection", Str()),
        Param("tool_results", Array(Map({
            "tool": TOOL, "tool_name": TOOL, "params": TOOL_PARAMS, "parameters": TOOL_PARAMS,
            "result": Stored(), "duration": DURATION, "ttl_s": TTL,
            "call_id": Nullable(Str(max_bytes=1024))}, required=("result",),
            empty_array_ok=False)), default=list), writes=True)
async def session_inject(call: Call, session_id: str, prompt_injection: str,
                         tool_results: list[Any]) -> dict[str, Any]:
    """One-time context injection; a second call fails with ALREADY_DONE (-32006)."""
    return await call.core.injection.inject(session_id, prompt_injection, tool_results,
                                            call.client_name)


# --- scratchpad, promotion, audit ---------------------------------------------------------


@method(names.SCRATCHPAD_WRITE, Param("session_id", SESSION_ID), Param("text", Str(min_len=1, strip_empty=True)),
        Param("opts", Map({"explicit": Bool(), "salience": Nullable(UNIT),
                           "surprisal": Nullable(UNIT), "flow": Nullable(Str()),
                           "metadata": Nullable(METADATA)}), default=dict), writes=True)
async def scratchpad_write(call: Call, session_id: str, text: str,
                           opts: dict[str, Any]) -> dict[str, Any]:
    """Add a snippet (or raise its frequency); opts: explicit, salience, surprisal, flow,
    metadata."""
    return await call.core.scratchpad.write(session_id, text, opts, call.client_name)


@method(names.SCRATCHPAD_READ, Param("session_id", SESSION_ID),
        Param("ids", Nullable(Array(ROW_ID, max_items=10_000)), default=None))
async def scratchpad_read(call: Call, session_id: str, ids: list[Any] | None) -> dict[str, Any]:
    """All snippets (or the given ids) in writing order; a read counts as use for LRU."""
    if ids is not None and not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise invalid_params("ids", "expected an array of snippet ids (integers)")
    sp = call.core.scratchpad
    snippets = await sp.read(session_id, ids)
    return {"snippets": snippets, "count": len(sp.pad(session_id)),
            "max": call.core.config.scratchpad.max_snippets}


@method(names.SCRATCHPAD_EVICT, Param("session_id", SESSION_ID), Param("snippet_id", ROW_ID), writes=True)
async def scratchpad_evict(call: Call, session_id: str, snippet_id: int) -> dict[str, Any]:
    return await call.core.scratchpad.evict(session_id, snippet_id, call.client_name)


@method(names.SCRATCHPAD_CANDIDATES, Param("session_id", SESSION_ID))
async def scratchpad_candidates(call: Call, session_id: str) -> dict[str, Any]:
    """Every snippet's promotion score (best first), with the reason for each part."""
    cfg = call.core.config.scratchpad
    return {"candidates": call.core.promotion.candidates(session_id),
            "threshold": cfg.promote_threshold,
            "weights": {"salience": cfg.salience_weight, "surprisal": cfg.surprisal_weight,
                        "frequency": cfg.frequency_weight, "explicit": cfg.explicit_weight}}


@method(names.SCRATCHPAD_PROMOTE, Param("session_id", SESSION_ID), Param("snippet_id", ROW_ID),
        Param("target", Str(choices=("preference", "rule", "playbook", "business"))),
        Param("opts", Map({"replace": Bool(), "key": Nullable(Str(max_bytes=1024)),
                           "value": Nullable(Str()), "condition": Nullable(Str()),
                           "action": Nullable(Str()), "text": Nullable(Str()),
                           "flow": Nullable(Str()), "flow_dact": Nullable(Str()),
                           "slots": Nullable(Stored()), "tool_calls": Nullable(Stored()),
                           "outcome": Nullable(Str()), "user_query": Nullable(Str())}),
              default=dict), writes=True)
async def scratchpad_promote(call: Call, session_id: str, snippet_id: int, target: str,
                             opts: dict[str, Any]) -> dict[str, Any]:
    """Promote to preference, rule, playbook or business; CONFLICT unless opts.replace."""
    return await call.core.promotion.promote(session_id, snippet_id, target, opts,
                                             call.client_name)


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
    return {"records": await call.core.audit.list(filter)}


# --- user memory --------------------------------------------------------------------------


@method(names.MEMORY_APPEND, Param("user_id", USER_ID), Param("type", MEMORY_TYPE),
        Param("entry", Map({
            "content": Nullable(Str()), "metadata": Nullable(METADATA), "id": Nullable(Stored()),
            "timestamp": Nullable(Float(0.0, 1e11, doc="unix seconds")),
            "key": Nullable(Str(max_bytes=1024)), "condition": Nullable(Str()),
            "action": Nullable(Str()), "flow": Nullable(Str()), "flow_dact": Nullable(Str()),
            "slots": Nullable(Stored()), "tool_calls": Nullable(Stored()),
            "outcome": Nullable(Str()), "user_query": Nullable(Str()),
            "session_id": Nullable(Id())}, rest=Stored(), empty_array_ok=False)),
        writes=True)
async def memory_append(call: Call, user_id: str, type: str, entry: dict[str, Any]) -> dict[str, Any]:
    return await call.core.user_memory.append(user_id, type, entry, call.client_name)


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
    threshold, mode (hybrid, fts, vector), session_id."""
    um = call.core.user_memory
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
    return await call.core.user_memory.playbook(user_id, query, opts, call.client_name)


@method(names.MEMORY_LEARN, Param("user_id", USER_ID), Param("key", Str(min_len=1, max_bytes=1024)),
        Param("value", Stored()),
        Param("opts", Map({"replace": Bool(), "metadata": Nullable(METADATA)}), default=dict),
        writes=True)
async def memory_learn(call: Call, user_id: str, key: str, value: Any,
                       opts: dict[str, Any]) -> dict[str, Any]:
    return await call.core.user_memory.learn(user_id, key, value, opts, call.client_name)


@method(names.MEMORY_RECALL, Param("user_id", USER_ID), Param("key", Str(max_bytes=1024)))
async def memory_recall(call: Call, user_id: str, key: str) -> dict[str, Any] | None:
    return await _answer(call.core.user_memory.recall(user_id, key))


@method(names.MEMORY_COMPACT, Param("user_id", USER_ID), Param("type", MEMORY_TYPE),
        Param("opts", Map({"keep_last": Int(0, 2**31, doc="a whole number >= 0"),
                           "summarize_older": Bool()}), default=dict), writes=True)
async def memory_compact(call: Call, user_id: str, type: str, opts: dict[str, Any]) -> dict[str, Any]:
    return await call.core.user_memory.compact(user_id, type, opts, call.client_name)


@method(names.MEMORY_STATS, Param("user_id", USER_ID))
async def memory_stats(call: Call, user_id: str) -> dict[str, Any]:
    return await call.core.user_memory.stats_for(user_id)


@method(names.MEMORY_CLEAR, Param("user_id", USER_ID), Param("type", MEMORY_TYPE, default=""), writes=True)
async def memory_clear(call: Call, user_id: str, type: str) -> dict[str, Any]:
    return await call.core.user_memory.clear(user_id, type, call.client_name)


@method(names.MEMORY_LIST, Param("user_id", USER_ID), Param("type", MEMORY_TYPE),
        Param("opts", Map({"limit": Nullable(LIMIT), "before_id": Nullable(ROW_ID),
                           "kind": Nullable(Str(max_bytes=64)),
                           "include_archived": Nullable(Bool())}), default=dict))
async def memory_list(call: Call, user_id: str, type: str, opts: dict[str, Any]) -> dict[str, Any]:
    return {"records": await call.core.user_memory.list(user_id, type, opts)}


# --- business context ---------------------------------------------------------------------


@method(names.DOCS_ADD, Param("tenant_id", TENANT_ID), Param("doc", Map({
    "content": Str(min_len=1, strip_empty=True), "doc_id": Nullable(Id()),
    "title": Nullable(Str(max_bytes=4096)), "source": Nullable(Str(max_bytes=4096)),
    "metadata": Nullable(METADATA)}, required=("content",), empty_array_ok=False)), writes=True)
async def docs_add(call: Call, tenant_id: str, doc: dict[str, Any]) -> dict[str, Any]:
    """Add or replace a document: doc = {content, doc_id?, title?, source?, metadata?}."""
    return await call.core.docs.add(tenant_id, doc)


@method(names.DOCS_SEARCH, Param("tenant_id", TENANT_ID), Param("query", Str()),
        Param("opts", Map({"limit": Nullable(LIMIT),
                           "candidates": Nullable(Int(1, 100_000, doc="a positive integer"))}),
              default=dict))
async def docs_search(call: Call, tenant_id: str, query: str, opts: dict[str, Any]) -> dict[str, Any]:
    """~100 candidates reranked to 10; opts: limit, candidates."""
    docs = call.core.docs
    return {"results": await docs.search(tenant_id, query, opts),
            "mode": "hybrid" if call.core.embedder.enabled else "fts"}


@method(names.DOCS_LIST, Param("tenant_id", TENANT_ID))
async def docs_list(call: Call, tenant_id: str) -> dict[str, Any]:
    return {"docs": await _answer(call.core.docs.list(tenant_id)),
            "agent_md": str(call.core.agent_md.path(tenant_id))}


@method(names.DOCS_DELETE, Param("tenant_id", TENANT_ID), Param("doc_id", Id()), writes=True)
async def docs_delete(call: Call, tenant_id: str, doc_id: str) -> dict[str, Any]:
    return await call.core.docs.delete(tenant_id, doc_id, call.client_name)
