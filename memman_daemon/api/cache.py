"""Protocol methods of the tool-result cache: lookup, put, list, evict (over ``ToolCache``)."""

from __future__ import annotations

from typing import Any

from memman import names
from memman.cache_state import format_cache_state
from memman_daemon.rpc import Call, handles


@handles(names.CACHE_LOOKUP)
def cache_lookup(call: Call, session_id: str, tool: str,
                 params: dict[str, Any]) -> dict[str, Any] | None:
    e = call.app.cache.lookup(session_id, tool, params)
    return None if e is None else e.to_wire()


@handles(names.CACHE_PUT)
async def cache_put(call: Call, session_id: str, tool: str, params: dict[str, Any], result: Any,
                    opts: dict[str, Any]) -> dict[str, Any]:
    e = await call.app.cache.put(session_id, tool, params, result, opts, call.client_name)
    return e.to_wire()


@handles(names.CACHE_LIST)
async def cache_list(call: Call, session_id: str) -> dict[str, Any]:
    cache = call.app.cache
    call.app.sessions.get(session_id)
    entries = [e.to_wire() for e in cache.entries(session_id)]
    counters = cache.session_counters.get(session_id, {})
    return {"entries": entries, "counters": {k: counters.get(k, 0) for k in
                                             ("hits", "misses", "puts", "expired", "evicted")},
            "state": format_cache_state(entries, call.app.clock.now())}


@handles(names.CACHE_EVICT)
async def cache_evict(call: Call, session_id: str, key: str) -> dict[str, Any]:
    return {"evicted": await call.app.cache.evict(session_id, key, call.client_name)}
