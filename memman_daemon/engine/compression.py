"""Compression (the compression design): old entries folded into a summary that links back to them.

When a session's active set passes ``compression.max_tokens`` tokens or ``max_entries``
entries, every active entry older than the newest ``recent_window`` entries (pinned entries and
system prompts excepted) is replaced in the context by one ``Summary`` of about ``ratio`` of
their tokens. The entries stay in the store with ``summary_id`` set; ``expand`` returns them.
Tool calls and their results are never split: the unit boundaries of the context timeline are
respected.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from memman_daemon.model import Entry, Session, Summary

if TYPE_CHECKING:
    from memman.config import CompressionConfig
    from memman_daemon.engine.window.timeline import Timeline


def needs_compression(s: Session, cfg: CompressionConfig) -> bool:
    return s.active_tokens > cfg.max_tokens or s.active_count > cfg.max_entries


#: most entries one automatic compression folds: a session that fell behind (a burst of adds
#: while compression waited for its background share) is folded oldest first, a batch per
#: summary, so no single step holds the event loop for long
AUTO_BATCH = 1000


def select(tl: Timeline, cfg: CompressionConfig, most: int | None = None) -> list[Entry]:
    """Active entries older than the recent window, whole units only; [] if fewer than min.
    The system prompt is never compressed, pinned or not; other pinned entries unless
    ``keep_pinned`` is off. ``most``: stop after the unit that reaches this many (oldest
    first)."""
    units = tl.units
    # bounded work per fold: the units before ``tl.folded`` are folded already or never folded
    # (system prompts), so a session folded a thousand entries at a time is not walked whole
    # for each batch
    start = tl.folded
    while start < len(units) and (_never(tl, units[start])
                                  or not all(e.active for e in units[start].items)):
        start += 1
    tl.folded = start
    recent = 0
    cut = len(units)
    while cut > start and recent < cfg.recent_window:
        cut -= 1
        if all(e.active for e in units[cut].items):
            recent += len(units[cut].items)
    chosen: list[Entry] = []
    for u in units[start:cut]:
        if _never(tl, u) or not all(e.active for e in u.items):
            continue
        if u.mandatory and cfg.keep_pinned:
            continue
        chosen.extend(u.items)
        if most is not None and len(chosen) >= most:
            break
    chosen.sort(key=lambda e: e.id)
    return chosen if len(chosen) >= cfg.min_entries else []


def _never(tl: Timeline, u: Any) -> bool:
    """A system prompt: never compressed, pinned or not."""
    return u.mandatory == "system" or u.first.id == tl.system_id


def iso(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t))


def summary_content(entries: list[Entry], text: str) -> str:
    return (f"[Summary of {len(entries)} earlier entries, {iso(entries[0].created_at)} - "
            f"{iso(entries[-1].created_at)} UTC]\n{text}")


def make_summary(sid: int, s: Session, entries: list[Entry], content: str, tokens: int,
                 source: str, now: float) -> Summary:
    original = sum(e.tokens for e in entries)
    return Summary(id=sid, session_id=s.id, content=content, entry_ids=[e.id for e in entries],
                   tokens=tokens, original_tokens=original,
                   ratio=round(original / max(tokens, 1), 3),
                   start=min(e.created_at for e in entries), end=max(e.created_at for e in entries),
                   created_at=now, source=source)


def summary_wire(sm: Summary) -> dict[str, Any]:
    d = sm.to_wire()
    d["time_range"] = {"start": sm.start, "end": sm.end}
    return d
