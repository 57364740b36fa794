"""Protocol methods of the scratchpad: write, read, evict, promotion candidates and promote
(over ``Scratchpad`` and ``Promotion``).
"""

from __future__ import annotations

from typing import Any

from memman import names
from memman_daemon.rpc import Call, handles


@handles(names.SCRATCHPAD_WRITE)
async def scratchpad_write(call: Call, session_id: str, text: str,
                           opts: dict[str, Any]) -> dict[str, Any]:
    return await call.app.scratchpad.write(session_id, text, opts, call.client_name)


@handles(names.SCRATCHPAD_READ)
async def scratchpad_read(call: Call, session_id: str, ids: list[Any] | None) -> dict[str, Any]:
    sp = call.app.scratchpad
    snippets = await sp.read(session_id, ids)
    return {"snippets": snippets, "count": len(sp.pad(session_id)),
            "max": call.app.config.scratchpad.max_snippets}


@handles(names.SCRATCHPAD_EVICT)
async def scratchpad_evict(call: Call, session_id: str, snippet_id: int) -> dict[str, Any]:
    return await call.app.scratchpad.evict(session_id, snippet_id, call.client_name)


@handles(names.SCRATCHPAD_CANDIDATES)
async def scratchpad_candidates(call: Call, session_id: str) -> dict[str, Any]:
    cfg = call.app.config.scratchpad
    return {"candidates": call.app.promotion.candidates(session_id),
            "threshold": cfg.promote_threshold,
            "weights": {"salience": cfg.salience_weight, "surprisal": cfg.surprisal_weight,
                        "frequency": cfg.frequency_weight, "explicit": cfg.explicit_weight}}


@handles(names.SCRATCHPAD_PROMOTE)
async def scratchpad_promote(call: Call, session_id: str, snippet_id: int, target: str,
                             opts: dict[str, Any]) -> dict[str, Any]:
    return await call.app.promotion.promote(session_id, snippet_id, target, opts,
                                             call.client_name)
