"""The usage series over time (sent and history tokens per exchange) for the TUI's charts."""

from __future__ import annotations

from typing import Any

from memman import names
from memman.errors import invalid_params
from memman_daemon.engine.usage_series import BANDS
from memman_daemon.handlers.spine import SESSION_ID
from memman_daemon.params import COUNT, Map, Nullable
from memman_daemon.rpc import Call, Param, method


@method(names.SESSION_SERIES, Param("session_id", SESSION_ID),
        Param("opts", Map({"limit": Nullable(COUNT)}), default=dict))
def session_series(call: Call, session_id: str, opts: dict[str, Any]) -> dict[str, Any]:
    """Points oldest first: ``{at, kind, exchange, sent_tokens, history_tokens, budget,
    sent_usage, history_usage, ...}``; opts: ``limit`` (newest N points)."""
    for k in opts:
        if k != "limit":
            raise invalid_params(f"opts.{k}", "unknown option; known: limit")
    limit = opts.get("limit")
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 0):
        raise invalid_params("opts.limit", "expected a non-negative integer (points)")
    s = call.core.sessions.get(session_id)
    budget = int(s.meta.max_tokens or call.core.config.context.max_tokens)
    return {"session_id": session_id, "budget": budget, "bands": list(BANDS),
            "points": call.core.series.points(session_id, limit)}
