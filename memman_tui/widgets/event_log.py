"""The live event log: a bounded RichLog fed in batches, one write per refresh tick."""

from __future__ import annotations

import time

from rich.text import Text
from textual.widgets import RichLog

from memman_tui.live import LogLine

#: most lines written per refresh tick; the rest of a flood is counted, not rendered
PER_TICK = 40

KIND_STYLE = {"entry_added": "green", "deleted": "red", "evicted": "red", "compacted": "cyan",
              "summarized": "cyan", "promoted": "magenta", "pinned": "magenta", "hit": "blue",
              "conflict": "bold red", "finalized": "yellow"}


def format_line(line: LogLine, *, with_session: bool = True) -> Text:
    text = Text()
    text.append(time.strftime("%H:%M:%S ", time.gmtime(line.at)), "grey50")
    if with_session and line.session_id:
        text.append(f"{line.session_id[:14]:<14} ", "bold")
    text.append(f"{line.event.removesuffix('_event'):<10} ", "grey62")
    text.append(line.text, KIND_STYLE.get(line.kind, ""))
    return text


class EventLog(RichLog):
    """Live event log; ``session_id`` narrows it to one session."""

    def __init__(self, session_id: str | None = None, max_lines: int = 500, **kwargs) -> None:
        super().__init__(max_lines=max_lines, wrap=False, markup=False, **kwargs)
        self.session_id = session_id
        self.query_text = ""
        self.last_line: LogLine | None = None  #: newest line written (for catch_up)

    def add_lines(self, lines: list[LogLine]) -> None:
        """Append a tick's batch in one write (one render pass, not one per line)."""
        if lines:
            self.last_line = lines[-1]
        keep = [ln for ln in lines if self._wanted(ln)]
        if not keep:
            return
        skipped = max(0, len(keep) - PER_TICK)
        parts = [format_line(ln, with_session=self.session_id is None) for ln in keep[-PER_TICK:]]
        if skipped:  # a flood: say how much was folded instead of rendering it all
            parts.insert(0, Text(f"… {skipped} more events in this tick (coalesced)", "grey50"))
        self.write(Text("\n").join(parts))

    def catch_up(self, history: list[LogLine]) -> None:
        """Write what arrived while this log was not being fed (another screen on top)."""
        start = 0
        if self.last_line is not None:
            for i in range(len(history) - 1, -1, -1):
                if history[i] is self.last_line:
                    start = i + 1
                    break
        self.add_lines(history[start:])

    def _wanted(self, line: LogLine) -> bool:
        if self.session_id and line.session_id != self.session_id:
            return False
        return not self.query_text or self.query_text.lower() in line.text.lower()
