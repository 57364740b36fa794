"""How full a session is: one definition for the TUI's overview, gauge and chart and for
``memman sessions`` (docs/tui.md, "How full").

- **sent**: the tokens the newest context request sent (messages, cached tool results, tool
  definitions, reply priming), from the session's usage series;
- **history**: the whole log as written (every entry, compressed ones included, with the reply
  priming), as the same usage point counted it;

both divided by **the session's budget** (``max_tokens`` of ``memman_session_open``), whatever
budget a request passed. A request with its own ``max_tokens`` is reported beside them as
``last request: 57 / 60``. Before any request there is no usage point: the figures come from a
preview (``memman_session_context`` with ``peek``) and are marked as such.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Fullness:
    budget: int  #: the session's budget
    sent_tokens: int | None  #: None: unknown (no request and no preview)
    history_tokens: int | None
    preview: bool = False  #: the figures come from a preview, not a request
    request_budget: int | None = None  #: the last request's own budget, when not the session's
    request_tokens: int | None = None  #: what that request sent

    @property
    def sent_usage(self) -> float | None:
        return None if self.sent_tokens is None or not self.budget else round(
            self.sent_tokens / self.budget, 4)

    @property
    def history_usage(self) -> float | None:
        return None if self.history_tokens is None or not self.budget else round(
            self.history_tokens / self.budget, 4)

    @property
    def last_request(self) -> str:
        """``last request: 57 / 60`` when the newest request had its own budget, else ''."""
        if self.request_budget is None:
            return ""
        return f"last request: {self.request_tokens or 0:,} / {self.request_budget:,}"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "budget": self.budget, "sent_tokens": self.sent_tokens,
            "sent_usage": self.sent_usage, "history_tokens": self.history_tokens,
            "history_usage": self.history_usage, "preview": self.preview, "last_request": None}
        if self.request_budget is not None:
            out["last_request"] = {"tokens": self.request_tokens, "budget": self.request_budget}
        return out


def point_usage(point: dict[str, Any], budget: int, key: str) -> float | None:
    """A usage point's ``sent`` or ``history`` share of the session's ``budget`` (the point's
    own ``budget`` is the request's)."""
    tokens = point.get(f"{key}_tokens")
    if not isinstance(tokens, (int, float)) or not budget:
        return None
    return round(tokens / budget, 4)


def as_session_budget(points: list[dict[str, Any]], budget: int) -> list[dict[str, Any]]:
    """The points with ``sent_usage`` / ``history_usage`` against the session's budget."""
    if not budget:
        return list(points)
    return [{**p, "sent_usage": point_usage(p, budget, "sent"),
             "history_usage": point_usage(p, budget, "history")} for p in points]


def fullness(overview: dict[str, Any], points: list[dict[str, Any]] | None = None,
             preview: dict[str, Any] | None = None) -> Fullness:
    """The session's fullness from its overview row (its budget), its newest usage points
    and, before any request, a preview answer (``sent_tokens`` / ``history_tokens``)."""
    budget = int(overview.get("max_tokens") or 0)
    last = points[-1] if points else None
    if last is not None:
        sent = next((p.get("sent_tokens") for p in reversed(points or [])
                     if isinstance(p.get("sent_tokens"), int)), None)
        ctx = next((p for p in reversed(points or []) if p.get("kind") == "context"), None)
        req_budget = req_tokens = None
        if ctx is not None and ctx.get("budget") and int(ctx["budget"]) != budget:
            req_budget, req_tokens = int(ctx["budget"]), ctx.get("sent_tokens")
        return Fullness(budget, sent, last.get("history_tokens"), False, req_budget, req_tokens)
    if preview is not None:
        return Fullness(budget, preview.get("sent_tokens"),
                        preview.get("history_tokens"), True)
    return Fullness(budget, None, None)
