"""What every monitor screen shares: the banner, the filter input, marks, the hooks the app
calls, and the messages every screen may post.

Data down, messages up: a screen is built with the app's :class:`~memman_tui.feed.Feed` and
shows what it holds; for an action it posts a message (nested in the screen that sends it) and
the app handles it. No screen names the app (``scripts/check_cycles.py`` keeps it so).
"""

from __future__ import annotations

from typing import Any

from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Input

from memman_tui.feed import Feed
from memman_tui.live import Drained
from memman_tui.widgets.banner import Banner, RateLabel


class MonitorScreen(Screen):
    """A screen the app feeds with drained live changes (``apply``) and full reloads."""

    class OpenContext(Message):
        """Show a session's context as sent, full screen."""

        def __init__(self, session_id: str) -> None:
            super().__init__()
            self.session_id = session_id

    class Compact(Message):
        """Compact these sessions now (the app asks first)."""

        def __init__(self, session_ids: list[str]) -> None:
            super().__init__()
            self.session_ids = session_ids

    def __init__(self, feed: Feed, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.feed = feed
        self.marks: dict[str, set[Any]] = {}  #: table id -> marked row keys

    # --- hooks the app calls ---------------------------------------------------------------
    def apply(self, changes: Drained) -> None:
        """Repaint what changed; called at most once per refresh tick."""

    def tick(self) -> None:
        """Called every refresh tick (countdowns)."""

    def reload(self) -> None:
        """Fetch everything this screen shows again."""

    def on_screen_resume(self) -> None:
        self.update_banner()
        self.reload()

    def update_banner(self) -> None:
        for banner in self.query(Banner):
            banner.show_state(connection=self.feed.connection_text, paused=self.feed.paused,
                              read_only=self.feed.settings.read_only)
        for label in self.query(RateLabel):
            label.show_rate(self.feed.settings.refresh_s, self.feed.paused)

    # --- filter ----------------------------------------------------------------------------
    @property
    def filter_text(self) -> str:
        try:
            return self.query_one("#filter", Input).value.strip()
        except Exception:
            return ""

    def action_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.display = True
        box.focus()

    def clear_filter(self) -> bool:
        """Esc: clear and hide the filter; True when there was one."""
        box = self.query_one("#filter", Input)
        had = box.display or bool(box.value)
        box.value = ""
        box.display = False
        return had

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "filter":
            self.focus_main()

    def focus_main(self) -> None:
        tables = list(self.query(DataTable))
        if tables:
            tables[0].focus()

    # --- marks -----------------------------------------------------------------------------
    def current_key(self, table: DataTable) -> Any:
        if table.row_count == 0:
            return None
        try:
            return table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        except Exception:
            return None

    def toggle_mark(self, table: DataTable) -> Any:
        key = self.current_key(table)
        if key is None:
            return None
        marks = self.marks.setdefault(table.id or "", set())
        marks.symmetric_difference_update({key})
        if table.cursor_row < table.row_count - 1:
            table.move_cursor(row=table.cursor_row + 1)
        return key

    def targets(self, table: DataTable) -> list[Any]:
        """Marked rows if any, else the row under the cursor."""
        marks = self.marks.get(table.id or "", set())
        if marks:
            return sorted(marks, key=str)
        key = self.current_key(table)
        return [] if key is None else [key]

    def clear_marks(self) -> bool:
        had = any(self.marks.values())
        self.marks = {}
        return had

    def action_cursor_down(self) -> None:
        if isinstance(self.focused, DataTable):
            self.focused.action_cursor_down()

    def action_cursor_up(self) -> None:
        if isinstance(self.focused, DataTable):
            self.focused.action_cursor_up()
