"""Usage over time: a sparkline per session (overview) and a chart (session screen).

Both draw the daemon's usage series (``memman_session_series``): ``sent_usage`` (what the LLM
received, against the budget) and ``history_usage`` (the whole active log). The chart draws
band lines at 60 / 80 / 90 / 100 % of the budget and marks compactions (``C``) and context
requests that pruned (``p``) under the bars. History past 200 % is clipped (``▲``).
"""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from memman_tui.widgets.gauge import band

BLOCKS = "▁▂▃▄▅▆▇█"
BANDS = (0.6, 0.8, 0.9, 1.0)


def usage_values(points: list[dict[str, Any]], key: str = "sent_usage") -> list[float]:
    """One value per point; a point that does not know its sent tokens repeats the last."""
    out: list[float] = []
    last = 0.0
    for p in points:
        v = p.get(key)
        if isinstance(v, (int, float)):
            last = float(v)
        out.append(last)
    return out


def sparkline(values: list[float], width: int = 12) -> Text:
    """``▂▃▅▇█`` of the newest ``width`` values on a 0..100 % scale, each in its band colour."""
    text = Text()
    vals = values[-width:]
    text.append(" " * (width - len(vals)))
    for v in vals:
        i = min(len(BLOCKS) - 1, max(0, round(min(v, 1.0) * (len(BLOCKS) - 1))))
        text.append(BLOCKS[i], band(int(v * 1000), 1000)[1])
    return text


class UsageChart(Widget):
    """Sent and history tokens per point, with band lines and compaction / prune marks."""

    DEFAULT_CSS = "UsageChart { height: 1fr; min-height: 6; }"
    can_focus = True  #: panel [2] takes focus like the others (nothing to select in it)

    points: reactive[list[dict[str, Any]]] = reactive(list, always_update=True)

    def render(self) -> Text:
        width, height = self.size.width, self.size.height
        pts = self.points
        label_w = 5
        cols = max(1, width - label_w)
        rows = max(2, height - 2)
        shown = pts[-cols:]
        sent = usage_values(shown, "sent_usage")
        hist = usage_values(shown, "history_usage")
        lines: list[Text] = []
        legend = Text()
        if shown:
            legend.append(f"sent {sent[-1]:.0%}", "bold green")
            legend.append(f" history {hist[-1]:.0%}", "bold cyan")
        legend.append("  █ sent ░ history C compaction p prune · exchange", "grey62")
        if not shown:
            legend = Text("no points yet: one per context request, exchange and compaction",
                          "grey50")
        lines.append(legend)
        # the scale shows the bands: history far past the budget is clipped at 200 % (the
        # legend gives its value) so the sent bars stay readable
        top = min(2.0, max(1.1, max([*sent, *hist, 0.0]) * 1.05))
        band_row = {b: rows - 1 - min(rows - 1, int(b / top * rows)) for b in BANDS}
        row_band = {r: b for b, r in band_row.items()}
        for r in range(rows):
            lo = top * (rows - 1 - r) / rows  # the value at the bottom of this row
            b = row_band.get(r)
            line = Text()
            line.append(f"{b:>4.0%} " if b is not None else " " * label_w,
                        band(int(b * 1000), 1000)[1] if b is not None else "")
            for i in range(cols):
                if i < len(shown):
                    if sent[i] > lo:
                        line.append("█", band(int(sent[i] * 1000), 1000)[1])
                        continue
                    if hist[i] > lo:
                        line.append("▲" if r == 0 and hist[i] > top else "░", "cyan")
                        continue
                if b is not None:
                    line.append("┄", band(int(b * 1000), 1000)[1])
                else:
                    line.append(" ")
            lines.append(line)
        marks = Text(" " * label_w)
        for p in shown:
            if p.get("kind") == "compaction":
                marks.append("C", "bold cyan")
            elif p.get("pruned"):
                marks.append("p", "bold yellow")
            elif p.get("kind") == "exchange":
                marks.append("·", "grey62")
            else:
                marks.append(" ")
        lines.append(marks)
        for line in lines:
            line.truncate(width, overflow="crop")
        return Text("\n").join(lines)
