"""The live event log: a bounded RichLog fed in batches, one write per refresh tick."""

from __future__ import annotations

import time
from collections import deque

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
    """Live event log; ``session_id`` narrows it to one session.

    It keeps its own bounded history, so a filter (``query_text``) searches past lines too,
    with the matches highlighted, and a frozen log (``f``) holds still while lines keep being
    collected; unfreezing shows what arrived meanwhile.
    """

    def __init__(self, session_id: str | None = None, max_lines: int = 500, **kwargs) -> None:
        super().__init__(max_lines=max_lines, wrap=False, markup=False, **kwargs)
        self.session_id = session_id
        self.query_text = ""
        self.frozen = False
        self.held = 0  #: lines collected while frozen
        self.history: deque[LogLine] = deque(maxlen=max_lines)
        self.last_line: LogLine | None = None  #: newest line seen (for catch_up)

    def add_lines(self, lines: list[LogLine]) -> None:
        """Append a tick's batch in one write (one render pass, not one per line)."""
        if lines:
            self.last_line = lines[-1]
        mine = [ln for ln in lines if not self.session_id or ln.session_id == self.session_id]
        self.history.extend(mine)
        if self.frozen:
            self.held += len(mine)
            self._title()
            return
        self._write([ln for ln in mine if self._wanted(ln)])

    def _write(self, keep: list[LogLine]) -> None:
        if not keep:
            return
        skipped = max(0, len(keep) - PER_TICK)
        parts = [self._format(ln) for ln in keep[-PER_TICK:]]
        if skipped:  # a flood: say how much was folded instead of rendering it all
            parts.insert(0, Text(f"… {skipped} more events in this tick (coalesced)", "grey50"))
        self.write(Text("\n").join(parts))

    def _format(self, line: LogLine) -> Text:
        text = format_line(line, with_session=self.session_id is None)
        if self.query_text:
            text.highlight_words([self.query_text], "reverse", case_sensitive=False)
        return text

    def rerender(self) -> None:
        """Every kept line again, through the current filter (past lines included)."""
        self.clear()
        keep = [ln for ln in self.history if self._wanted(ln)]
        if keep:
            self.write(Text("\n").join(self._format(ln) for ln in keep))
        self._title()

    def set_query(self, text: str) -> None:
        self.query_text = text
        self.rerender()

    def toggle_freeze(self) -> bool:
        self.frozen = not self.frozen
        if not self.frozen:
            self.held = 0
            self.rerender()
        self._title()
        return self.frozen

    def _title(self) -> None:
        bits = []
        if self.frozen:
            bits.append(f"❄ frozen · {self.held} new held · f resumes")
        if self.query_text:
            n = sum(1 for ln in self.history if self._wanted(ln))
            bits.append(f"filter {self.query_text!r}: {n} of {len(self.history)} lines")
        self.border_subtitle = " · ".join(bits)

    def catch_up(self, history: list[LogLine]) -> None:
        """Take what arrived while this log was not being fed (another screen on top)."""
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
