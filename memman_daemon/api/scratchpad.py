"""Protocol methods of the scratchpad: write, read, evict, promotion candidates and promote
(over ``Scratchpad`` and ``Promotion``).
"""

from __future__ import annotations

from typing import Any

from memman import names
from memman.errors import invalid_params
from memman_daemon.api.shapes import SESSION_ID
from memman_daemon.params import METADATA, ROW_ID, UNIT, Array, Bool, Id, Map, Nullable, Stored, Str
from memman_daemon.rpc import Call, Param, method


@method(names.SCRATCHPAD_WRITE, Param("session_id", SESSION_ID), Param("text", Str(min_len=1, strip_empty=True)),
        Param("opts", Map({"explicit": Bool(), "salience": Nullable(UNIT),
                           "surprisal": Nullable(UNIT), "flow": Nullable(Str()),
                           "metadata": Nullable(METADATA)}), default=dict), writes=True)
async def scratchpad_write(call: Call, session_id: str, text: str,
                           opts: dict[str, Any]) -> dict[str, Any]:
    """Add a snippet (or raise its frequency); opts: explicit, salience, surprisal, flow,
    metadata."""
    return await call.app.scratchpad.write(session_id, text, opts, call.client_name)


@method(names.SCRATCHPAD_READ, Param("session_id", SESSION_ID),
        Param("ids", Nullable(Array(ROW_ID, max_items=10_000)), default=None))
async def scratchpad_read(call: Call, session_id: str, ids: list[Any] | None) -> dict[str, Any]:
    """All snippets (or the given ids) in writing order; a read counts as use for LRU."""
    if ids is not None and not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise invalid_params("ids", "expected an array of snippet ids (integers)")
    sp = call.app.scratchpad
    snippets = await sp.read(session_id, ids)
    return {"snippets": snippets, "count": len(sp.pad(session_id)),
            "max": call.app.config.scratchpad.max_snippets}


@method(names.SCRATCHPAD_EVICT, Param("session_id", SESSION_ID), Param("snippet_id", ROW_ID), writes=True)
async def scratchpad_evict(call: Call, session_id: str, snippet_id: int) -> dict[str, Any]:
    return await call.app.scratchpad.evict(session_id, snippet_id, call.client_name)


@method(names.SCRATCHPAD_CANDIDATES, Param("session_id", SESSION_ID))
async def scratchpad_candidates(call: Call, session_id: str) -> dict[str, Any]:
    """Every snippet's promotion score (best first), with the reason for each part."""
    cfg = call.app.config.scratchpad
    return {"candidates": call.app.promotion.candidates(session_id),
            "threshold": cfg.promote_threshold,
            "weights": {"salience": cfg.salience_weight, "surprisal": cfg.surprisal_weight,
                        "frequency": cfg.frequency_weight, "explicit": cfg.explicit_weight}}


@method(names.SCRATCHPAD_PROMOTE, Param("session_id", SESSION_ID), Param("snippet_id", ROW_ID),
        Param("target", Str(choices=("preference", "rule", "playbook", "business"))),
        Param("opts", Map({"replace": Bool(), "key": Nullable(Id()),
                           "value": Nullable(Str()), "condition": Nullable(Str()),
                           "action": Nullable(Str()), "text": Nullable(Str()),
                           "flow": Nullable(Str()), "flow_dact": Nullable(Str()),
                           "slots": Nullable(Stored()), "tool_calls": Nullable(Stored()),
                           "outcome": Nullable(Str()), "user_query": Nullable(Str())}),
              default=dict), writes=True)
async def scratchpad_promote(call: Call, session_id: str, snippet_id: int, target: str,
                             opts: dict[str, Any]) -> dict[str, Any]:
    """Promote to preference, rule, playbook or business; CONFLICT unless opts.replace."""
    return await call.app.promotion.promote(session_id, snippet_id, target, opts,
                                             call.client_name)
