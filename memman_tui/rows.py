"""Daemon answers -> table rows. Plain functions, tolerant of missing keys, no widgets.

The engine and tiers answers are read defensively (``.get`` with fallbacks) so a field added or
renamed by the daemon shows as "-" rather than crashing a panel.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rich.text import Text

from memman_tui.widgets.countdown import ago, countdown_text
from memman_tui.widgets.gauge import gauge_text

MARK_STYLE = {"kept": "green", "dropped": "red", "summarized": "cyan", "pinned": "bold magenta",
              "compressed": "cyan", "marked": "yellow"}

#: overview columns: (key, label) — key is also the sort key
OVERVIEW_COLUMNS: tuple[tuple[str, str], ...] = (
    ("session_id", "session"), ("user_id", "user"), ("tokens", "tokens used / budget"),
    ("entries", "entries"), ("exchanges", "exch"), ("summary_bytes", "summary B"),
    ("cache", "cache"), ("scratch", "scratch"), ("llm_calls", "LLM"), ("updated_at", "last activity"),
)


def first(d: dict[str, Any], *keys: str, default: Any = None) -> Any:
    for k in keys:
        if k in d and d[k] is not None:
            return d[k]
    return default


def used_tokens(ov: dict[str, Any]) -> int:
    return int(first(ov, "context_tokens", "active_tokens", default=0) or 0)


def llm_calls(ov: dict[str, Any]) -> int:
    """LLM calls made for this session: every counter that names the LLM
    (llm_compressions, compression_llm, gap_llm, ...)."""
    if "llm_calls" in ov:
        return int(ov["llm_calls"] or 0)
    counters = ov.get("counters") or {}
    return int(sum(v for k, v in counters.items() if "llm" in k and isinstance(v, int)))


def sort_value(ov: dict[str, Any], key: str, cache: int | None, scratch: int | None) -> Any:
    if key == "tokens":
        budget = ov.get("max_tokens") or 1
        return used_tokens(ov) / budget
    if key == "cache":
        return cache or 0
    if key == "scratch":
        return scratch or 0
    if key == "llm_calls":
        return llm_calls(ov)
    value = ov.get(key)
    return value if value is not None else ""


def overview_row(ov: dict[str, Any], now: float, cache: int | None, scratch: int | None,
                 marked: bool = False) -> tuple[Any, ...]:
    sid = Text(("● " if marked else "") + str(ov.get("session_id", "?")),
               "bold yellow" if marked else "")
    return (
        sid,
        str(ov.get("user_id", "-")),
        gauge_text(used_tokens(ov), int(ov.get("max_tokens") or 8000), 10, label=False),
        f"{ov.get('active_entries', 0)}/{ov.get('entries', 0)}",
        str(ov.get("exchanges", 0)),
        f"{ov.get('summary_bytes', 0):,}",
        "-" if cache is None else str(cache),
        "-" if scratch is None else str(scratch),
        str(llm_calls(ov)),
        ago(now, ov.get("updated_at")),
    )


def overview_matches(ov: dict[str, Any], query: str) -> bool:
    if not query:
        return True
    q = query.lower()
    return any(q in str(ov.get(k, "")).lower() for k in ("session_id", "user_id", "tenant_id", "model"))


# --- session screen ---------------------------------------------------------------------


@dataclass
class ContextRow:
    """One entry of the context window as the LLM would receive it."""

    entry_id: int
    role: str
    type: str
    tokens: int
    score: float | None
    mark: str  #: kept / dropped / summarized / pinned
    pinned: bool
    content: str
    reason: str = ""  #: why the context builder kept or dropped it
    next_out: bool = False  #: in the compaction preview: would go next


def _entry_mark(e: dict[str, Any]) -> str:
    mark = first(e, "decision", "mark", "status", "state")
    if mark:
        return str(mark)
    if e.get("summary_id") is not None:
        return "compressed"
    return "kept"


def context_rows(preview: Any, session: Any, *, recent_window: int = 10,
                 min_entries: int = 5) -> list[ContextRow]:
    """The window as the LLM would receive it: memman_session_preview's per-entry decisions
    joined with the entries' content from memman_session_get; the raw log when preview is
    missing. Entries already compressed into a summary are left out (the summaries panel
    expands them)."""
    log: list[dict[str, Any]] = []
    if isinstance(session, dict):
        log = [e for e in session.get("entries") or [] if isinstance(e, dict)]
    content = {first(e, "id", "entry_id"): e for e in log}
    decided: list[dict[str, Any]] = []
    if isinstance(preview, dict):
        decided = [e for e in first(preview, "entries", default=[]) or [] if isinstance(e, dict)]
    source = decided or log
    rows = []
    for e in source:
        eid = int(first(e, "entry_id", "id", default=0))
        full = {**content.get(eid, {}), **e}
        mark = _entry_mark(full)
        if mark == "compressed":
            continue
        text = full.get("content") or ""
        if not text and full.get("tool_calls"):
            text = "→ " + ", ".join(
                f"{(c.get('function') or {}).get('name', '?')}"
                f"({(c.get('function') or {}).get('arguments', '')})"
                for c in full["tool_calls"])
        rows.append(ContextRow(
            entry_id=eid, role=str(full.get("role", "?")), type=str(full.get("type", "message")),
            tokens=int(full.get("tokens") or 0), score=full.get("score"), mark=mark,
            pinned=bool(full.get("pinned")), content=str(text),
            reason=str(full.get("reason") or "")))
    planned = preview.get("compaction") if isinstance(preview, dict) else None
    if isinstance(planned, dict) and isinstance(planned.get("entry_ids"), list):
        going = set(planned["entry_ids"])  # the engine's own plan (its configured window)
        for r in rows:
            r.next_out = r.entry_id in going
    else:  # an older daemon: estimate with seed 004's defaults
        mark_compaction(rows, recent_window, min_entries)
    return rows


def mark_compaction(rows: list[ContextRow], recent_window: int, min_entries: int) -> None:
    """Flag what `c` (compact now) would take next: active entries older than the newest
    ``recent_window``, except pinned entries and system prompts — when there are at least
    ``min_entries`` of them (seed 004's defaults)."""
    older = rows[:-recent_window] if recent_window else rows
    take = [r for r in older if not r.pinned and r.type != "context" and r.role != "system"]
    if len(take) >= min_entries:
        for r in take:
            r.next_out = True


def context_cells(row: ContextRow, marked: bool) -> tuple[Any, ...]:
    mark = Text(row.mark, MARK_STYLE.get(row.mark, ""))
    if row.pinned:
        mark.append(" pinned", MARK_STYLE["pinned"])
    if row.next_out:
        mark.append(" ▸next", "bold yellow")
    score = "-" if row.score is None else f"{float(row.score):.2f}"
    ident = Text(("● " if marked else "") + str(row.entry_id), "bold yellow" if marked else "")
    content = row.content.replace("\n", " ")
    return (ident, row.role, row.type, f"{row.tokens:,}", score, mark, content[:200])


def summaries_of(session: Any, context: Any) -> list[dict[str, Any]]:
    for src in (session, context):
        if isinstance(src, dict):
            items = src.get("summaries")
            if isinstance(items, dict):
                items = list(items.values())
            if items:
                return [s for s in items if isinstance(s, dict)]
    return []


def summary_label(s: dict[str, Any]) -> Text:
    ratio = s.get("ratio")
    n = len(s.get("entry_ids") or [])
    text = Text()
    text.append(f"#{s.get('id', '?')} ", "bold")
    text.append(f"{n} entries, {s.get('original_tokens', '?')}→{s.get('tokens', '?')} tok ")
    if isinstance(ratio, (int, float)):
        text.append(f"ratio {ratio:.1f}x ", "cyan")
    text.append(f"[{s.get('source', '?')}] ", "grey62")
    text.append(str(s.get("content", ""))[:80].replace("\n", " "), "italic")
    return text


def as_list(result: Any, *keys: str) -> list[dict[str, Any]]:
    if isinstance(result, dict):
        for k in keys:
            if isinstance(result.get(k), list):
                return [x for x in result[k] if isinstance(x, dict)]
        return []
    if isinstance(result, list):
        return [x for x in result if isinstance(x, dict)]
    return []


def cache_key(item: dict[str, Any]) -> str:
    return str(first(item, "key", "cache_key", "id", default="?"))


def cache_cells(item: dict[str, Any], now: float, marked: bool) -> tuple[Any, ...]:
    remaining = first(item, "remaining_duration", "remaining", default=0) or 0
    total = first(item, "original_duration", "duration", default=remaining) or 1
    expires = first(item, "expires_at", "ttl_expires_at")
    ttl_total = first(item, "ttl_s", "ttl", default=None)
    if expires:
        left = max(0.0, float(expires) - now)
        ttl = countdown_text(left, float(ttl_total or max(left, 1)), 6, "s")
    else:
        ttl = Text("no TTL", "grey50")
    params = item.get("parameters")
    name = str(first(item, "tool_name", "tool", default="?"))
    call = f"{name}({_short(params, 24)})" if params is not None else name
    key = Text(("● " if marked else "") + cache_key(item)[:8], "bold yellow" if marked else "")
    return (countdown_text(float(remaining), float(total), 6, "x"), ttl,
            str(first(item, "hits", default=0)), key, call)


def _short(value: Any, n: int = 40) -> str:
    if isinstance(value, dict):
        s = ", ".join(f"{k}={v!r}" for k, v in value.items())
    else:
        s = str(value)
    return s if len(s) <= n else s[: n - 1] + "…"


def snippet_id(item: dict[str, Any]) -> Any:
    return first(item, "snippet_id", "id")


def scratch_rows(candidates: Any) -> list[dict[str, Any]]:
    """Snippets with their promotion score and reasons, best first (from
    memman_scratchpad_candidates: reading the scratchpad itself would count as LRU use)."""
    out = as_list(candidates, "candidates", "snippets", "items")
    out.sort(key=lambda r: -(r.get("score") or 0))
    return out


def reasons_short(item: dict[str, Any]) -> str:
    parts = item.get("parts")
    if isinstance(parts, dict):
        abbrev = {"salience": "sal", "surprisal": "sur", "frequency": "freq", "explicit": "expl"}
        return " ".join(f"{abbrev.get(k, k)} {float(p.get('value') or 0):.2f}"
                        for k, p in parts.items() if isinstance(p, dict))
    reasons = item.get("reasons") or []
    return ", ".join(map(str, reasons))


def reasons_long(item: dict[str, Any]) -> str:
    parts = item.get("parts")
    if isinstance(parts, dict):
        return "; ".join(f"{k} {float(p.get('value') or 0):.2f}×{p.get('weight', '?')}: "
                         f"{p.get('reason', '')}" for k, p in parts.items() if isinstance(p, dict))
    return reasons_short(item)


def promoted_to(item: dict[str, Any]) -> str:
    promoted = item.get("promoted") or []
    if isinstance(promoted, list):
        return ",".join(str(p.get("target", p)) if isinstance(p, dict) else str(p)
                        for p in promoted)
    return str(promoted)


def scratch_cells(item: dict[str, Any], marked: bool) -> tuple[Any, ...]:
    score = item.get("score")
    candidate = item.get("candidate", (score or 0) >= 0.6)
    score_text = Text("-" if score is None else f"{float(score):.2f}",
                      "bold green" if candidate else "")
    if candidate:
        score_text.append(" ★", "bold green")
    ident = Text(("● " if marked else "") + str(snippet_id(item)), "bold yellow" if marked else "")
    text = str(first(item, "text", "content", default="")).replace("\n", " ")
    return (ident, score_text, Text(promoted_to(item), "magenta"), text[:70], reasons_short(item))
