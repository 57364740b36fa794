"""``memman show``: the Q&A-cycle design's MEMORY STATE block, plus what the agent receives and why.

``render_memory_state`` takes the map ``memman_session_report`` builds (an export plus
``context``, ``state`` and optionally ``cache``) and returns plain text:

    === MEMORY STATE ===
    Session: ABC123 | Exchanges: 3 | Summary: 1250 bytes | LLM compressions: 1
    ...
    === FUNCTION CACHE STATE ===
    ...
    === AGENT RECEIVES (8 messages) ===
    [1] USER: Question
"""

from __future__ import annotations

from typing import Any


def _clip(text: Any, n: int = 100) -> str:
    text = " ".join(str(text or "").split())
    return text if len(text) <= n else text[: n - 1] + "…"


def render_memory_state(data: dict[str, Any]) -> str:
    meta = data.get("meta", {})
    stats = data.get("stats", {})
    counters = meta.get("counters", {}) or stats.get("counters", {})
    summary = meta.get("summary", "") or ""
    exchanges = data.get("exchanges", meta.get("exchanges", []))
    lines = ["=== MEMORY STATE ===",
             f"Session: {data.get('session_id', '?')} | Exchanges: {len(exchanges)} | "
             f"Summary: {len(summary.encode())} bytes | "
             f"LLM compressions: {counters.get('llm_compressions', 0)}"]
    entries = data.get("entries", [])
    summaries = data.get("summaries", [])
    active = [e for e in entries if e.get("summary_id") is None]
    lines.append(f"Entries: {len(entries)} ({len(active)} active, "
                 f"{len(entries) - len(active)} compressed) | Summaries: {len(summaries)} | "
                 f"Active tokens: {sum(e.get('tokens', 0) for e in active)} | "
                 f"Model: {meta.get('model', '?')} | Budget: {meta.get('max_tokens', '?')} tokens")
    for sm in summaries:
        lines.append(f"  • summary {sm['id']}: {len(sm.get('entry_ids', []))} entries, "
                     f"{sm.get('original_tokens')} → {sm.get('tokens')} tokens "
                     f"({sm.get('ratio')}x, {sm.get('source')}) — expand with "
                     f"memman_session_expand")
    usage = data.get("usage") or {}
    if usage.get("reports"):
        lines.append(f"Usage reports: {usage['reports']} | billed prompt tokens: "
                     f"{usage['prompt_tokens']} | last drift: {usage['last_drift']} | "
                     f"mean drift: {usage['mean_drift']}")
    cache = data.get("cache")
    if cache is not None:
        lines += ["", "=== FUNCTION CACHE STATE ===", f"Cached functions: {len(cache)}"]
        for c in cache:
            lines.append(f"  • {c.get('tool_name')}({c.get('parameters')}): "
                         f"{c.get('remaining_duration')}/{c.get('original_duration')} "
                         f"exchanges remaining")
    ctx = data.get("context")
    if ctx:
        msgs = ctx.get("messages", [])
        lines += ["", f"=== AGENT RECEIVES ({len(msgs)} messages) ===",
                  f"{ctx['tokens']}/{ctx['budget']} tokens ({ctx['sent_usage']:.0%}); history "
                  f"{ctx['history_tokens']} tokens = {ctx['usage']:.0%} of the budget, band "
                  f"{ctx['band'].upper()}" + (" [OVER BUDGET: pinned alone exceed it]"
                                              if ctx.get("over_budget") else ""),
                  f"Why: {ctx.get('why', '')}"]
        for i, m in enumerate(msgs, 1):
            content = m.get("content")
            if m.get("tool_calls"):
                calls = ", ".join(f"{c['function']['name']}({c['function']['arguments']})"
                                  for c in m["tool_calls"])
                content = f"{content or ''} → calls {calls}".strip()
            lines.append(f"[{i}] {m['role'].upper()}: {_clip(content)}")
        gaps = ctx.get("gaps", [])
        if gaps:
            lines += ["", f"=== DROPPED ({ctx['dropped_entries']} entries, "
                          f"{ctx['summarized_entries']} summarized) ==="]
            for g in gaps:
                where = (f"entry {g['first_id']}" if g["count"] == 1
                         else f"entries {g['first_id']}..{g['last_id']} ({g['count']} entries)")
                lines.append(f"  • {where}, {g['tokens']} tokens: {g['action']} — {g['reason']}")
        if ctx.get("rolling_summary") and ctx["rolling_summary"] != "included":
            lines.append(f"  • rolling summary: {ctx['rolling_summary']}")
    return "\n".join(lines)
