"""Token gauge: used / budget as a bar, always with the number and the band's colour.

Bands follow the design's staged strategy: under 60 % nothing happens, 60-80 % warn, 80-90 %
prune, 90-100 % aggressive, over 100 % emergency. The colour is never the only signal: the
percentage and the band name are printed next to the bar.
"""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

#: (lower bound as a share of the budget, band name, style)
BANDS: tuple[tuple[float, str, str], ...] = (
    (1.00, "emergency", "bold white on red"),
    (0.90, "aggressive", "bold red"),
    (0.80, "prune", "dark_orange"),
    (0.60, "warn", "yellow"),
    (0.00, "ok", "green"),
)


def band(used: int, budget: int) -> tuple[str, str]:
    """The band name and style for ``used`` tokens of ``budget``."""
    share = used / budget if budget > 0 else 0.0
    for lower, name, style in BANDS:
        if share >= lower:
            return name, style
    return "ok", "green"


def gauge_text(used: int, budget: int, width: int = 12, *, label: bool = True) -> Text:
    """``█████░░░░░ 4,210/8,000  53%`` with the band colour on bar and number."""
    share = used / budget if budget > 0 else 0.0
    name, style = band(used, budget)
    filled = min(width, round(share * width))
    text = Text()
    bar_style = style if name != "emergency" else "bold red"
    text.append("█" * filled, bar_style)
    text.append("░" * (width - filled), "grey37")
    # tick marks for the 60/80/90 thresholds are implied by colour; the number is explicit
    text.append(f" {used:>6,}/{budget:,} ", "")
    text.append(f"{share * 100:4.0f}%", style)
    if label:
        text.append(f" {name}", style)
    return text


class TokenGauge(Widget):
    """A one-line gauge widget for the session screen header."""

    DEFAULT_CSS = """
    TokenGauge { height: 1; width: 1fr; }
    """

    used: reactive[int] = reactive(0)
    budget: reactive[int] = reactive(8000)

    def render(self) -> Text:
        width = max(10, self.size.width - 32)
        return gauge_text(self.used, self.budget, width)
