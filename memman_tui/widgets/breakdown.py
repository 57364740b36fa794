"""How the budget is used, `/context`-style: a bar by kind and the two measures of "full".

"sent" is what the LLM receives against the session's budget; "history" is the whole active
log against the same budget. Both come from the daemon (``sent_usage`` / ``history_usage``);
the part of the budget reserved for cached tool results and tool definitions is its own
segment, never subtracted silently.
"""

from __future__ import annotations

from rich.text import Text

from memman.fullness import Fullness
from memman_tui.sent import EXTRA, KINDS, LABEL, RESERVED, STYLE, SentView
from memman_tui.widgets.gauge import band


def kind_bar(view: SentView, width: int) -> Text:
    """One cell per ``budget / width`` tokens, coloured by kind, then the free space."""
    width = max(10, width)
    text = Text()
    order = [k for k in KINDS if k not in RESERVED] + list(RESERVED)
    total = max(view.budget, view.sent_tokens, 1)
    used = 0
    for k in order:
        n = view.breakdown.get(k, 0)
        if n <= 0:
            continue
        cells = max(1, round(n / total * width))
        cells = min(cells, width - used)
        if cells <= 0:
            break
        text.append("█" * cells, STYLE[k])
        used += cells
    if used < width:
        text.append("░" * (width - used), STYLE["free"])
    return text


def breakdown_rows(view: SentView) -> list[tuple[str, str, int, float]]:
    """(kind, label, tokens, share of the budget) for every kind present, then the extras."""
    rows = []
    for k in (*KINDS, *EXTRA):
        n = view.breakdown.get(k, 0)
        if n or k in EXTRA:
            rows.append((k, LABEL[k], n, n / view.budget if view.budget else 0.0))
    return rows


def fullness_text(view: SentView | None, width: int = 60, full: Fullness | None = None) -> Text:
    """``sent ███▒▒░░ 4,210/8,000 53% · reserved 610 │ history 6,320/8,000 79%``.

    With ``full`` (``memman.fullness``: the session screen) sent and history are the newest
    request's against the session's budget — the overview's and `memman sessions`' figures —
    a request with its own budget adds ``last request: 57 / 60``, and before any request the
    preview is shown, marked ``preview``. Without it (the context view) the view's own."""
    text = Text(no_wrap=True, overflow="ellipsis")
    if view is None and (full is None or full.sent_tokens is None):
        text.append("sent -  │  history -  (waiting for the daemon)", "grey50")
        return text
    if full is not None and full.sent_tokens is not None and full.budget:
        budget, sent = full.budget, int(full.sent_tokens)
        hist = int(full.history_tokens or 0)
    else:
        assert view is not None
        budget, sent, hist = view.budget, view.sent_tokens, view.history_tokens
    bar_w = max(8, min(30, width - 62))
    reserved = view.reserved_tokens if view is not None else 0
    history_part = max(0, sent - reserved)
    cells_h = min(bar_w, round(history_part / budget * bar_w))
    cells_r = min(bar_w - cells_h, round(reserved / budget * bar_w)) if reserved else 0
    name, style = band(sent, budget)
    text.append("sent (preview) " if full is not None and full.preview else "sent ", "bold")
    text.append("█" * cells_h, style if name != "emergency" else "bold red")
    text.append("▒" * cells_r, STYLE["cached_tool_result"])
    text.append("░" * (bar_w - cells_h - cells_r), "grey37")
    text.append(f" {sent:,}/{budget:,} ")
    text.append(f"{sent / budget if budget else 0:.0%} {name}", style)
    if reserved:
        text.append(f" · reserved {reserved:,}", STYLE["cached_tool_result"])
    hname, hstyle = band(hist, budget)
    text.append("  │  history ", "bold")
    text.append(f"{hist:,}/{budget:,} ")
    text.append(f"{hist / budget if budget else 0:.0%}", hstyle)
    if full is not None and full.last_request:
        text.append(f"  │  {full.last_request}", "yellow")
    return text
