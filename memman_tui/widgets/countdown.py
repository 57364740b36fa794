"""Countdown bars for the tool cache: exchanges left and wall-clock TTL left."""

from __future__ import annotations

from rich.text import Text


def countdown_text(remaining: float, total: float, width: int = 10, unit: str = "") -> Text:
    """``██████░░░░ 3/5x`` — the bar shrinks as the remaining share falls."""
    share = max(0.0, min(1.0, remaining / total)) if total > 0 else 0.0
    filled = round(share * width)
    style = "green" if share > 0.5 else "yellow" if share > 0.2 else "red"
    text = Text()
    text.append("█" * filled, style)
    text.append("░" * (width - filled), "grey37")
    if unit == "s":
        text.append(f" {format_seconds(remaining)}", style)
    else:
        text.append(f" {remaining:g}/{total:g}{unit}", style)
    return text


def format_seconds(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    if seconds >= 60:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds}s"


def ago(now: float, then: float | None) -> str:
    """``12s ago`` style relative time for the last-activity column."""
    if not then:
        return "-"
    return f"{format_seconds(now - then)} ago"
