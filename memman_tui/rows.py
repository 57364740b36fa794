"""Daemon answers -> table rows: the overview, cache and scratchpad cells. Plain functions, no
widgets.

Field names are the ones ``memman.types`` lists for each answer (``SessionOverview``,
``CacheEntry``, ``Candidate``); a field the daemon may leave out is read with ``.get``.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text

from memman_tui.widgets.countdown import ago, countdown_text
from memman_tui.widgets.gauge import band

MARK_STYLE = {"kept": "green", "dropped": "red", "summarized": "cyan", "pinned": "bold magenta",
              "compressed": "cyan", "marked": "yellow"}

#: overview columns: (key, label) — key is also the sort key. "sent" and "hist" are the
#: daemon's sent_usage / history_usage of the session's newest usage-series point.
OVERVIEW_COLUMNS: tuple[tuple[str, str], ...] = (
    ("session_id", "session"), ("user_id", "user"), ("sent", "sent"), ("history", "hist"),
    ("trend", "sent over time"), ("entries", "entries"), ("exchanges", "exch"),
    ("cache", "cache"), ("scratch", "pad"), ("llm_calls", "LLM"), ("updated_at", "active"),
)


def used_tokens(ov: dict[str, Any]) -> int:
    return int(ov.get("active_tokens") or 0)


def llm_calls(ov: dict[str, Any]) -> int:
    """LLM calls made for this session: every counter that names the LLM
    (llm_compressions, compression_llm, gap_llm, ...)."""
    counters = ov.get("counters") or {}
    return int(sum(v for k, v in counters.items() if "llm" in k and isinstance(v, int)))


def sort_value(ov: dict[str, Any], key: str, cache: int | None, scratch: int | None,
               point: dict[str, Any] | None = None) -> Any:
    if key in ("sent", "trend"):
        return float((point or {}).get("sent_usage") or 0.0)
    if key == "history":
        return float((point or {}).get("history_usage") or 0.0)
    if key == "cache":
        return cache or 0
    if key == "scratch":
        return scratch or 0
    if key == "llm_calls":
        return llm_calls(ov)
    if key == "entries":
        return int(ov.get("entries") or 0)
    value = ov.get(key)
    return value if value is not None else ""


def usage_cell(share: float | None, bar: int = 5) -> Text:
    """``███░░ 53%`` in the band's colour; ``-`` when the daemon has no point yet."""
    if share is None:
        return Text("-", "grey50")
    _name, style = band(int(share * 10000), 10000)
    out = Text()
    filled = min(bar, round(share * bar))
    out.append("█" * filled, style)
    out.append("░" * (bar - filled), "grey37")
    out.append(f" {share * 100:3.0f}%", style)
    return out


def series_cells(points: list[dict[str, Any]] | None, spark_width: int = 12,
                 budget: int = 0, preview: dict[str, Any] | None = None
                 ) -> tuple[Text, Text, Text]:
    """The sent, hist and trend cells of an overview row, from the session's usage series,
    against the session's ``budget`` (``memman.fullness``: a request's own budget does not
    change how full the session is)."""
    from memman.fullness import as_session_budget
    from memman_tui.widgets.chart import sparkline, usage_values

    points = as_session_budget(points or [], budget) if points else points
    if not points and preview is not None and budget:
        # no request yet: the preview, marked `*` (the overview's subtitle says so)
        sent_p = float(preview.get("sent_tokens") or 0) / budget
        hist_p = float(preview.get("history_tokens") or 0) / budget
        sent_c = usage_cell(sent_p)
        sent_c.append("*", "italic grey62")
        hist_c = Text(f"{hist_p * 100:3.0f}%", band(int(hist_p * 10000), 10000)[1])
        hist_c.append("*", "italic grey62")
        return sent_c, hist_c, Text("-", "grey50")
    last = points[-1] if points else None
    sent = None if last is None else last.get("sent_usage")
    hist = None if last is None else last.get("history_usage")
    hist_text = Text("-", "grey50") if hist is None else Text(
        f"{float(hist) * 100:3.0f}%", band(int(float(hist) * 10000), 10000)[1])
    trend = sparkline(usage_values(points or []), spark_width) if points else Text("-", "grey50")
    return usage_cell(None if sent is None else float(sent)), hist_text, trend


def overview_row(ov: dict[str, Any], now: float, cache: int | None, scratch: int | None,
                 marked: bool = False, points: list[dict[str, Any]] | None = None,
                 spark_width: int = 12,
                 series: tuple[Text, Text, Text] | None = None) -> tuple[Any, ...]:
    """One overview row; ``series`` (from :func:`series_cells`) may be passed in when the
    caller keeps it between repaints (it only changes with a new usage point)."""
    sid = Text(("● " if marked else "") + str(ov.get("session_id", "?")),
               "bold yellow" if marked else "")
    sent_cell, hist_cell, trend_cell = series or series_cells(
        points, spark_width, int(ov.get("max_tokens") or 0))
    return (
        sid,
        user_cell(ov),
        sent_cell,
        hist_cell,
        trend_cell,
        f"{ov.get('active_entries', 0)}/{ov.get('entries', 0)}",
        str(ov.get("exchanges", 0)),
        "-" if cache is None else str(cache),
        "-" if scratch is None else str(scratch),
        str(llm_calls(ov)),
        ago(now, ov.get("updated_at")),
    )


def user_cell(ov: dict[str, Any]) -> str:
    """The user, and for a coding agent's conversation (``memman hook``) its agent and the
    project's folder name: ``ana · claude-code api``."""
    user = str(ov.get("user_id", "-"))
    agent, project = ov.get("agent") or "", ov.get("project") or ""
    if not agent and not project:
        return user
    return f"{user} · {agent or '-'} {project.rstrip('/').rsplit('/', 1)[-1] or project}"


def overview_matches(ov: dict[str, Any], query: str) -> bool:
    if not query:
        return True
    q = query.lower()
    return any(q in str(ov.get(k, "")).lower()
               for k in ("session_id", "user_id", "tenant_id", "model", "agent", "project"))


# --- session screen ---------------------------------------------------------------------


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


def as_list(result: Any, key: str) -> list[dict[str, Any]]:
    """The maps under ``key`` of an answer; [] when the answer is not a map (UNAVAILABLE, an
    error shown elsewhere)."""
    if isinstance(result, dict) and isinstance(result.get(key), list):
        return [x for x in result[key] if isinstance(x, dict)]
    return []


def cache_key(item: dict[str, Any]) -> str:
    return str(item["key"])


def cache_cells(item: dict[str, Any], now: float, marked: bool) -> tuple[Any, ...]:
    remaining = item.get("remaining_duration") or 0
    total = item.get("original_duration")
    total = (remaining if total is None else total) or 1
    expires = item.get("expires_at")
    ttl_total = item.get("ttl_s")
    if expires and float(expires) <= now:  # past its TTL: evicted on the next lookup
        ttl = Text("expired", "bold red")
    elif expires:
        left = max(0.0, float(expires) - now)
        ttl = countdown_text(left, float(ttl_total or max(left, 1)), 6, "s")
    else:
        ttl = Text("no TTL", "grey50")
    params = item.get("parameters")
    name = str(item.get("tool_name") or "?")
    call = Text(f"{name}({_short(params, 24)})" if params is not None else name)
    key = Text(("● " if marked else "") + cache_key(item)[:8], "bold yellow" if marked else "")
    hits = int(item.get("hits") or 0)
    last_hit = item.get("last_hit_at")
    hit_text = Text(str(hits), "bold blue" if hits else "")
    if last_hit and now - float(last_hit) < 10:  # a hit just now stands out
        hit_text = Text(f"{hits} ● hit", "bold reverse blue")
    return (countdown_text(float(remaining), float(total), 6, "x"), ttl, hit_text, key, call)


def _short(value: Any, n: int = 40) -> str:
    if isinstance(value, dict):
        s = ", ".join(f"{k}={v!r}" for k, v in value.items())
    else:
        s = str(value)
    return s if len(s) <= n else s[: n - 1] + "…"


def snippet_id(item: dict[str, Any]) -> Any:
    """The id of a promotion candidate (``memman_scratchpad_candidates``)."""
    return item["snippet_id"]


def scratch_rows(candidates: Any) -> list[dict[str, Any]]:
    """Snippets with their promotion score and reasons, best first (from
    memman_scratchpad_candidates: reading the scratchpad itself would count as LRU use)."""
    out = as_list(candidates, "candidates")
    out.sort(key=lambda r: -(r.get("score") or 0))
    return out


def reasons_short(item: dict[str, Any]) -> str:
    parts = item.get("parts")
    if isinstance(parts, dict):
        abbrev = {"salience": "sal", "surprisal": "sur", "frequency": "freq", "explicit": "expl"}
        return " ".join(f"{abbrev.get(k, k)} {float(p.get('value') or 0):.2f}"
                        for k, p in parts.items() if isinstance(p, dict))
    return ""


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
    text = str(item.get("text") or "").replace("\n", " ")
    return (ident, score_text, Text(promoted_to(item), "magenta"), text[:70], reasons_short(item))
