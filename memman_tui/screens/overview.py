"""Overview: one row per session, a daemon header, and the live event log of every session."""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.message import Message
from textual.widgets import DataTable, Footer, Input, Static

from memman_tui import keymap
from memman_tui.feed import Feed
from memman_tui.live import Drained
from memman_tui.rows import (
    OVERVIEW_COLUMNS,
    overview_matches,
    overview_row,
    series_cells,
    sort_value,
)
from memman_tui.screens.base import MonitorScreen
from memman_tui.widgets.banner import Banner, RateLabel
from memman_tui.widgets.daemon_header import DaemonHeader
from memman_tui.widgets.event_log import EventLog
from memman_tui.widgets.safe_table import SafeTable


class OverviewScreen(MonitorScreen):
    BINDINGS = keymap.bindings(keymap.OVERVIEW)

    class OpenSession(Message):
        """Open a session's screen."""

        def __init__(self, session_id: str) -> None:
            super().__init__()
            self.session_id = session_id

    class DeleteSessions(Message):
        """Delete these sessions (the app asks first)."""

        def __init__(self, session_ids: list[str]) -> None:
            super().__init__()
            self.session_ids = session_ids

    def __init__(self, feed: Feed, **kwargs: Any) -> None:
        super().__init__(feed, **kwargs)
        self.sort_index = 0  # by session id: stable, rows never reorder by themselves
        self.sort_reverse = False
        self._order: list[str] = []
        self._cells: dict[str, tuple[Any, ...]] = {}  #: what each row shows now
        #: per session: (newest point id, number of points) -> its sent / hist / trend cells
        self._series: dict[str, tuple[tuple[Any, ...], tuple[Any, Any, Any]]] = {}

    def compose(self) -> ComposeResult:
        with Horizontal(classes="title-row"):
            yield Static("memman — sessions", id="title", classes="title")
            yield RateLabel(classes="rate")
        yield DaemonHeader(id="daemon")
        yield Banner(id="banner")
        table = SafeTable(id="sessions", zebra_stripes=True)
        for key, label in OVERVIEW_COLUMNS:
            table.add_column(label, key=key)
        yield table
        yield Input(placeholder="filter sessions: id, user, tenant, model", id="filter")
        yield EventLog(id="log", max_lines=self.feed.settings.log_size)
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#filter", Input).display = False
        self.query_one("#log", EventLog).border_title = "[2] events · f freezes · / filters"
        self.update_title()
        self.update_banner()

    def update_title(self) -> None:
        table = self.query_one("#sessions", DataTable)
        key, label = OVERVIEW_COLUMNS[self.sort_index]
        arrow = "▼" if self.sort_reverse else "▲"
        shown = table.row_count
        total = len(self.feed.live.sessions)
        flt = f"  filter: {self.filter_text!r}" if self.filter_text else ""
        table.border_title = f"[1] sessions {shown}/{total}  sort: {label} {arrow}{flt}"
        table.border_subtitle = ("sent / hist: % of the session's budget (* a preview: no "
                                 "request yet)")

    # --- data ------------------------------------------------------------------------------
    def visible_ids(self) -> list[str]:
        live = self.feed.live
        q = self.filter_text
        key = OVERVIEW_COLUMNS[self.sort_index][0]
        ids = [sid for sid, ov in live.sessions.items() if overview_matches(ov, q)]
        ids.sort(key=lambda sid: (sort_value(live.sessions[sid], key, *live.counts(sid),
                                             live.last_point(sid)), sid),
                 reverse=self.sort_reverse)
        return ids

    def _row(self, sid: str) -> tuple[Any, ...]:
        live = self.feed.live
        points = live.series.get(sid) or []
        width = self.spark_width()
        budget = int(live.sessions[sid].get("max_tokens") or 0)
        preview = None if points else live.previews.get(sid)
        stamp = (points[-1].get("id") if points else None, len(points), width, budget,
                 None if preview is None else preview.get("at"))
        memo = self._series.get(sid)
        if memo is None or memo[0] != stamp:  # only a new usage point changes these cells
            memo = self._series[sid] = (stamp, series_cells(points, width, budget, preview))
        return overview_row(live.sessions[sid], self.feed.clock(), *live.counts(sid),
                            marked=sid in self.marks.get("sessions", set()), series=memo[1])

    def spark_width(self) -> int:
        """The sparkline grows with the terminal: 12 points at 100-140 columns, up to 48."""
        width = self.size.width or 100
        return 12 if width < 140 else min(48, width - 128)

    def on_resize(self) -> None:
        if self._order:
            self.rebuild()

    def rebuild(self) -> None:
        table = self.query_one("#sessions", SafeTable)
        order = self.visible_ids()
        self._cells = {sid: self._row(sid) for sid in order}
        table.refill([(sid, self._cells[sid]) for sid in order])
        self._order = order
        self.update_title()

    def update_rows(self, sids: set[str]) -> None:
        """Repaint changed rows in place; rebuild only when the order changed."""
        order = self.visible_ids()
        # a new order, or many rows at once: one rebuild is cheaper than many cell updates
        # (bench/tui.py: 200 rows rebuild in ~6 ms; each changed cell costs ~40 µs)
        if order != self._order or len(sids) * 8 > len(order):
            self.rebuild()
            return
        table = self.query_one("#sessions", DataTable)
        columns = [key for key, _ in OVERVIEW_COLUMNS]
        for sid in sids:
            if sid not in self.feed.live.sessions or sid not in table.rows:
                continue
            cells = self._row(sid)
            before = self._cells.get(sid, ())
            for i, (col, value) in enumerate(zip(columns, cells, strict=True)):
                if i >= len(before) or before[i] != value:
                    table.update_cell(sid, col, value)
            self._cells[sid] = cells

    def apply(self, changes: Drained) -> None:
        if changes.lines:
            self.query_one("#log", EventLog).add_lines(changes.lines)
        if changes.removed or changes.resync:
            self.rebuild()
        elif changes.sessions or changes.series:
            self.update_rows(changes.sessions | changes.series)
        self.update_title()

    def tick(self) -> None:
        # "last activity" ages every second even without events: repaint that column only
        table = self.query_one("#sessions", DataTable)
        for sid in self._order:
            if sid in self.feed.live.sessions and sid in table.rows:
                cells = self._row(sid)
                before = self._cells.get(sid)
                if before is None or before[-1] != cells[-1]:
                    table.update_cell(sid, "updated_at", cells[-1])
                    self._cells[sid] = cells

    def reload(self) -> None:
        self.rebuild()
        self.query_one("#log", EventLog).catch_up(list(self.feed.live.log))

    # --- keys ------------------------------------------------------------------------------
    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        index = [k for k, _ in OVERVIEW_COLUMNS].index(str(event.column_key.value))
        if index == self.sort_index:
            self.sort_reverse = not self.sort_reverse
        else:
            self.sort_index, self.sort_reverse = index, False
        self.rebuild()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.data_table.id == "sessions":
            self.action_open_session()

    def action_sort(self) -> None:
        self.sort_index = (self.sort_index + 1) % len(OVERVIEW_COLUMNS)
        self.rebuild()

    def action_sort_reverse(self) -> None:
        self.sort_reverse = not self.sort_reverse
        self.rebuild()

    def action_mark(self) -> None:
        table = self.query_one("#sessions", SafeTable)
        sid = table.selected_key
        if sid is None:
            return
        self.marks.setdefault("sessions", set()).symmetric_difference_update({sid})
        cells = self._cells[sid] = self._row(sid)
        table.update_cell(sid, "session_id", cells[0])
        table.action_cursor_down()

    def selected_id(self) -> str | None:
        return self.query_one("#sessions", SafeTable).selected_key

    def _targets(self) -> list[str]:
        marks = self.marks.get("sessions", set())
        if marks:
            return sorted(marks)
        sid = self.selected_id()
        return [] if sid is None else [sid]

    def action_open_session(self) -> None:
        sid = self.selected_id()
        if sid:
            self.post_message(self.OpenSession(sid))

    def action_view_context(self) -> None:
        sid = self.selected_id()
        if sid:
            self.post_message(self.OpenContext(sid))
        else:
            self.notify("No session selected: move to one with j/k", severity="warning")

    def selected_session(self) -> dict[str, Any] | None:
        sid = self.selected_id()
        return self.feed.live.sessions.get(sid) if sid else None

    def action_compact(self) -> None:
        sids = self._targets()
        if sids:
            self.post_message(self.Compact(sids))

    def action_delete(self) -> None:
        sids = self._targets()
        if sids:
            self.post_message(self.DeleteSessions(sids))

    def action_freeze(self) -> None:
        frozen = self.query_one("#log", EventLog).toggle_freeze()
        self.notify("event log frozen (f resumes)" if frozen else "event log follows again",
                    timeout=2)

    def action_focus_panel(self, n: int) -> None:
        if n == 1:
            self.query_one("#sessions").focus()
        elif n == 2:
            self.query_one("#log").focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "filter":
            self.rebuild()
            self.query_one("#log", EventLog).set_query(event.value.strip())

    def action_back(self) -> None:
        cleared = self.clear_filter() | self.clear_marks()
        if cleared:
            self.query_one("#log", EventLog).set_query("")
            self.rebuild()
        self.query_one("#sessions", DataTable).focus()
