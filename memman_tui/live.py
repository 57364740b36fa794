"""Live state fed by daemon events, drained once per refresh tick.

The event callback runs for every event (50/s or more); it only updates dictionaries and marks
what changed. The app drains :class:`LiveState` at most once per refresh interval and repaints
only the rows that changed — a flood on one session becomes one row update per tick. When the
backlog grows past ``max_pending`` (backpressure) or events went missing (``missed``: the client
library checks each subscription's ``seq``, ``memman.reconnect``; nothing here checks it again),
the detail is dropped and a full resync is requested instead.

No textual import here: this is plain data, tested on its own.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from memman import names


@dataclass
class LogLine:
    """One line of the live event log."""

    at: float  #: unix seconds (daemon time when the payload carries it)
    event: str  #: event name without the memman_ prefix, e.g. "session_event"
    kind: str
    session_id: str | None
    text: str


@dataclass
class Drained:
    """What changed since the last drain."""

    sessions: set[str] = field(default_factory=set)  #: overview rows to repaint
    removed: set[str] = field(default_factory=set)  #: sessions deleted
    detail: set[str] = field(default_factory=set)  #: sessions whose detail panels are stale
    stale: set[str] = field(default_factory=set)  #: overview changed but the event had no row
    memory: bool = False  #: user memory or docs changed
    lines: list[LogLine] = field(default_factory=list)
    resync: bool = False  #: events were missed: reload everything
    events: int = 0  #: events folded into this drain
    series: set[str] = field(default_factory=set)  #: sessions with new usage-series points
    #: notifications to show: (severity, text) — threshold crossings, cache expiries,
    #: snippets written again after an eviction
    alerts: list[tuple[str, str]] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.sessions or self.removed or self.detail or self.stale or self.memory
                    or self.lines or self.resync or self.series or self.alerts)


def describe(event: str, payload: dict[str, Any]) -> str:
    """A short human line for the event log."""
    kind = payload.get("kind", "?")
    bits: list[str] = []
    entry = payload.get("entry")
    if isinstance(entry, dict) and event != names.SESSION_EVENT:  # e.g. a cache entry
        for key in ("tool_name", "key", "remaining_duration", "ttl_s"):
            if entry.get(key) is not None:
                bits.append(f"{key}={str(entry[key])[:24]}")
    elif isinstance(entry, dict):
        content = str(entry.get("content") or "")
        if not content and entry.get("tool_calls"):
            calls = entry["tool_calls"]
            content = ", ".join(str((c.get("function") or {}).get("name", "?")) for c in calls)
        bits.append(f"{entry.get('role', '?')}/{entry.get('type', '?')} "
                    f"{entry.get('tokens', '?')} tok: {content[:60]!r}")
    for key in ("tool_name", "key", "snippet_id", "entry_id", "summary_id", "target", "reason",
                "ratio", "count", "evicted", "doc_id", "title"):
        if key in payload and payload[key] not in (None, ""):
            value = payload[key]
            if isinstance(value, float):
                value = f"{value:.2f}"
            bits.append(f"{key}={str(value)[:40]}")
    return f"{kind} " + " ".join(bits) if bits else str(kind)


_DETAIL_EVENTS = {names.SESSION_EVENT, names.CACHE_EVENT, names.SCRATCHPAD_EVENT}
_MEMORY_EVENTS = {names.MEMORY_EVENT, names.DOCS_EVENT}


def normalize(text: str) -> str:
    """Snippets are compared as the daemon compares them: whitespace collapsed, case folded."""
    return " ".join(text.split()).casefold()


class LiveState:
    """Session overviews, per-session tier counts, and the pending change set."""

    def __init__(self, *, max_pending: int = 5000, log_size: int = 500) -> None:
        self.sessions: dict[str, dict[str, Any]] = {}
        #: per-session cache keys and scratchpad snippet ids, kept current by events after a
        #: filled from the list methods (missing = not known yet: the overview shows "-")
        self.cache_keys: dict[str, set[str]] = {}
        self.scratch_ids: dict[str, set[Any]] = {}
        self.max_pending = max_pending
        self.log: deque[LogLine] = deque(maxlen=log_size)
        self.received = 0  #: events seen since start
        self.dropped = 0  #: events folded into a resync because of backpressure
        self._pending = Drained()
        self.stats_event: dict[str, Any] | None = None
        #: per-session usage series (memman_session_series, then series_point events)
        self.series: dict[str, list[dict[str, Any]]] = {}
        self.series_keep = 500
        #: per-session preview before any request (memman_session_context with peek): its
        #: sent_tokens / history_tokens and the overview's updated_at it was read at
        self.previews: dict[str, dict[str, Any]] = {}
        #: per-session normalized text -> id of snippets evicted (events and the audit log)
        self.evicted_texts: dict[str, dict[str, Any]] = {}
        #: per-session ids of snippets written again after an eviction of the same text
        self.rewritten: dict[str, set[Any]] = {}
        #: (session, threshold) -> may alert again (re-armed once sent falls 10 points below)
        self._armed: dict[tuple[str, float], bool] = {}

    # --- full loads ----------------------------------------------------------------------
    def load_sessions(self, rows: list[dict[str, Any]]) -> None:
        self.sessions = {r["session_id"]: r for r in rows if "session_id" in r}

    def load_series(self, sid: str, points: list[dict[str, Any]]) -> None:
        self.series[sid] = list(points)[-self.series_keep:]

    def last_point(self, sid: str) -> dict[str, Any] | None:
        pts = self.series.get(sid)
        return pts[-1] if pts else None

    def load_evictions(self, sid: str, records: list[dict[str, Any]]) -> None:
        """Evicted snippets from the audit log (a TUI started later knows them too)."""
        known = self.evicted_texts.setdefault(sid, {})
        for r in records:
            if str(r.get("source", "")).startswith("scratchpad:") and r.get("what"):
                known.setdefault(normalize(str(r["what"])), r.get("source"))

    def load_counts(self, sid: str, cache_keys: set[str] | None,
                    scratch_ids: set[Any] | None) -> None:
        if cache_keys is not None:
            self.cache_keys[sid] = cache_keys
        if scratch_ids is not None:
            self.scratch_ids[sid] = scratch_ids

    def counts(self, sid: str) -> tuple[int | None, int | None]:
        """(cache entries, scratchpad snippets) of a session; None when not known."""
        keys, ids = self.cache_keys.get(sid), self.scratch_ids.get(sid)
        return (None if keys is None else len(keys), None if ids is None else len(ids))

    # --- the event callback (hot path) -----------------------------------------------------
    def on_event(self, event: str, payload: dict[str, Any]) -> None:
        self.received += 1
        p = self._pending
        p.events += 1
        if p.events > self.max_pending:
            # backpressure: stop tracking detail, reload once on the next tick
            self.dropped += 1
            p.resync = True
            return
        if event == names.STATS_EVENT:  # the daemon's once-a-second tick: header only
            self.stats_event = payload
            return
        sid = payload.get("session_id")
        kind = payload.get("kind", "")
        overview = payload.get("session")
        if event == names.SESSION_EVENT and kind == "series_point" and sid:
            self._series_point(sid, payload.get("point"))
            return
        self._watch(event, kind, sid, payload)
        if event == names.SESSION_EVENT and kind == "deleted" and sid:
            self.sessions.pop(sid, None)
            p.removed.add(sid)
            p.sessions.discard(sid)
        elif isinstance(overview, dict) and overview.get("session_id"):
            sid = overview["session_id"]
            self.sessions[sid] = overview
            p.sessions.add(sid)
        elif sid and event == names.SESSION_EVENT:
            p.stale.add(sid)  # e.g. finalized / compressed: fetch the row once per tick
        if sid:
            self._track_counts(event, kind, sid, payload)
            if event in _DETAIL_EVENTS:
                p.detail.add(sid)
        if event in _MEMORY_EVENTS:
            p.memory = True
        at = payload.get("at") or time.time()  # events carry no time of their own: now
        line = LogLine(float(at), event.removeprefix("memman_"), str(kind), sid,
                       describe(event, payload))
        self.log.append(line)
        p.lines.append(line)
        if len(p.lines) > 200:  # the log shows the newest; older pending lines are in self.log
            del p.lines[:-200]

    def _series_point(self, sid: str, point: Any) -> None:
        if not isinstance(point, dict):
            return
        pts = self.series.setdefault(sid, [])
        before = pts[-1].get("sent_usage") if pts else None
        pts.append(point)
        if len(pts) > self.series_keep:
            del pts[: len(pts) - self.series_keep]
        self._pending.series.add(sid)
        now = point.get("sent_usage")
        if isinstance(now, (int, float)):
            for line, label, severity in ((1.0, "100 %", "error"), (0.9, "90 %", "warning")):
                armed = self._armed.setdefault((sid, line), True)
                if now < line - 0.1:  # hysteresis: a window hovering at the line alerts once
                    self._armed[(sid, line)] = True
                if now >= line and armed and (before is None or before < line):
                    self._armed[(sid, line)] = False
                    self._pending.alerts.append(
                        (severity, f"{sid}: sent crossed {label} of the budget "
                                   f"({point.get('sent_tokens'):,}/{point.get('budget'):,} "
                                   "tokens)"))
                    break

    def _watch(self, event: str, kind: str, sid: str | None, payload: dict[str, Any]) -> None:
        """Notifications: cache expiries, and snippets written again after an eviction."""
        if not sid:
            return
        if event == names.CACHE_EVENT and kind == "expired":
            self._pending.alerts.append(
                ("warning", f"{sid}: cached {payload.get('tool_name', '?')} result expired "
                            f"(key {str(payload.get('key', '?'))[:8]})"))
        elif event == names.SCRATCHPAD_EVENT and kind == "evicted" and payload.get("text"):
            self.evicted_texts.setdefault(sid, {})[normalize(str(payload["text"]))] = \
                payload.get("snippet_id")
        elif event == names.SCRATCHPAD_EVENT and kind == "written":
            snippet = payload.get("snippet") if isinstance(payload.get("snippet"), dict) else {}
            text = str(snippet.get("text") or "")
            if payload.get("restored"):
                self.evicted_texts.get(sid, {}).pop(normalize(text), None)
            elif text and normalize(text) in self.evicted_texts.get(sid, {}):
                self.rewritten.setdefault(sid, set()).add(snippet.get("id"))
                self._pending.alerts.append(
                    ("warning", f"{sid}: snippet {snippet.get('id')} was evicted before and "
                                f"is written again: {text[:60]!r}"))

    def is_rewritten(self, sid: str, snippet: dict[str, Any]) -> bool:
        """A snippet whose text was evicted before (the scratchpad panel marks it)."""
        ident = snippet.get("snippet_id", snippet.get("id"))
        if ident in self.rewritten.get(sid, set()):
            return True
        text = str(snippet.get("text") or "")
        source = self.evicted_texts.get(sid, {}).get(normalize(text))
        return source is not None and not str(source).endswith(f"#{ident}")

    def _track_counts(self, event: str, kind: str, sid: str, payload: dict[str, Any]) -> None:
        if event == names.SESSION_EVENT:
            if kind == "opened":
                self.cache_keys.setdefault(sid, set())
                self.scratch_ids.setdefault(sid, set())
            elif kind == "deleted":
                self.cache_keys.pop(sid, None)
                self.scratch_ids.pop(sid, None)
            return
        if event == names.CACHE_EVENT:
            keys = self.cache_keys.get(sid)
            if keys is None:
                return
            entry = payload.get("entry")
            key = payload.get("key") or (entry.get("key") if isinstance(entry, dict) else None)
            if kind == "put" and key:
                keys.add(key)
            elif kind in ("evicted", "expired", "removed", "deleted"):
                if key == "*":
                    keys.clear()
                else:
                    keys.discard(key)
            elif kind == "cleared":
                keys.clear()
            else:
                return
        elif event == names.SCRATCHPAD_EVENT:
            ids = self.scratch_ids.get(sid)
            if ids is None:
                return
            snippet = payload.get("snippet")
            ident = payload.get("snippet_id")
            if ident is None and isinstance(snippet, dict):
                ident = snippet.get("id")
            if kind in ("written", "updated") and ident is not None:
                ids.add(ident)
            elif kind in ("evicted", "deleted") and ident is not None:
                ids.discard(ident)
            elif kind == "cleared":
                ids.clear()
            else:
                return
        else:
            return
        if sid in self.sessions:
            self._pending.sessions.add(sid)

    def missed(self) -> None:
        """Events went missing (a gap in ``seq``, seen by the client library): what is known
        may be stale, so the next drain asks for a full reload."""
        self._pending.resync = True

    # --- the refresh tick --------------------------------------------------------------------
    def has_pending(self) -> bool:
        return not self._pending.empty

    def drain(self) -> Drained:
        out, self._pending = self._pending, Drained()
        return out
