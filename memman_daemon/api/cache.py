"""Protocol methods of the tool-result cache: lookup, put, list, evict (over ``ToolCache``)."""

from __future__ import annotations

from typing import Any

from memman import names
from memman.cache_state import format_cache_state
from memman_daemon.api.shapes import DURATION, SESSION_ID, TOOL, TOOL_PARAMS, TTL
from memman_daemon.params import Map, Nullable, Stored, Str
from memman_daemon.rpc import Call, Param, method

CACHE_OPTS = Map({"duration": DURATION, "ttl_s": TTL, "call_id": Nullable(Str(max_bytes=1024))})


@method(names.CACHE_LOOKUP, Param("session_id", SESSION_ID), Param("tool", TOOL),
        Param("params", TOOL_PARAMS))
def cache_lookup(call: Call, session_id: str, tool: str,
                 params: dict[str, Any]) -> dict[str, Any] | None:
    """The cached result (its duration refreshed), or nil on a miss. A plain function: it is
    answered inline, as fast as any in-memory read."""
    e = call.app.cache.lookup(session_id, tool, params)
    return None if e is None else e.to_wire()


@method(names.CACHE_PUT, Param("session_id", SESSION_ID), Param("tool", TOOL),
        Param("params", TOOL_PARAMS), Param("result", Stored()),
        Param("opts", CACHE_OPTS, default=dict), writes=True)
async def cache_put(call: Call, session_id: str, tool: str, params: dict[str, Any], result: Any,
                    opts: dict[str, Any]) -> dict[str, Any]:
    """Cache a tool result; opts: duration (exchanges), ttl_s (seconds), call_id."""
    e = await call.app.cache.put(session_id, tool, params, result, opts, call.client_name)
    return e.to_wire()


@method(names.CACHE_LIST, Param("session_id", SESSION_ID))
async def cache_list(call: Call, session_id: str) -> dict[str, Any]:
    """Every cached entry of the session (oldest first), its counters and the
    FUNCTION CACHE STATE block."""
    cache = call.app.cache
    call.app.sessions.get(session_id)
    entries = [e.to_wire() for e in cache.entries(session_id)]
    counters = cache.session_counters.get(session_id, {})
    return {"entries": entries, "counters": {k: counters.get(k, 0) for k in
                                             ("hits", "misses", "puts", "expired", "evicted")},
            "state": format_cache_state(entries, call.app.clock.now())}


@method(names.CACHE_EVICT, Param("session_id", SESSION_ID), Param("key", Str(min_len=1, max_bytes=1024)),
        writes=True)
async def cache_evict(call: Call, session_id: str, key: str) -> dict[str, Any]:
    """Evict the entry with this key ("*": every entry of the session)."""
    return {"evicted": await call.app.cache.evict(session_id, key, call.client_name)}
