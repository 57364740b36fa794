"""A DataTable whose selection is a row *key* that only the user moves.

Refills (live updates) keep the selected row by its key: when that row is still there the
cursor follows it to its new position; when it is gone the selection clears and the cursor is
hidden — it never lands on another row by itself. Actions read :attr:`SafeTable.selected_key`,
so a keystroke acts on the row the user chose or on nothing.

Vertical keys follow the anchors: ``g`` / Home go to the top, ``G`` / End to the bottom.
"""

from __future__ import annotations

from typing import Any

from textual import events
from textual.binding import Binding
from textual.widgets import DataTable


class SafeTable(DataTable):
    BINDINGS = [
        Binding("home,g", "scroll_top", "Top", show=False),
        Binding("end,G", "scroll_bottom", "Bottom", show=False),
        Binding("j", "cursor_down", "Down", show=False),
        Binding("k", "cursor_up", "Up", show=False),
    ]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("cursor_type", "row")
        super().__init__(*args, **kwargs)
        self.selected_key: Any = None  #: the row the user chose; None = nothing selected
        self.filled = False  #: rows were shown at least once

    # --- filling ------------------------------------------------------------------------
    def refill(self, rows: list[tuple[Any, tuple[Any, ...]]]) -> None:
        """Replace every row; keep the selection on its row, or clear it."""
        self.clear()
        keys = []
        for key, cells in rows:
            self.add_row(*cells, key=key)
            keys.append(key)
        if not self.filled and keys and self.selected_key is None:
            self.selected_key = keys[0]  # a first fill starts at the top (not a jump)
        self.filled = self.filled or bool(keys)
        if self.selected_key in keys:
            self.show_cursor = True
            self.move_cursor(row=keys.index(self.selected_key), animate=False)
        else:
            self.selected_key = None
            self.show_cursor = False

    def row_key_at_cursor(self) -> Any:
        if self.row_count == 0:
            return None
        try:
            return self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value
        except Exception:
            return None

    def select_key(self, key: Any) -> None:
        """Select a row by key (tests, and the user's own moves)."""
        try:
            row = self.get_row_index(key)
        except Exception:
            return
        self.selected_key = key
        self.show_cursor = True
        self.move_cursor(row=row, animate=False)

    def _user_moved(self) -> None:
        self.selected_key = self.row_key_at_cursor()
        self.show_cursor = self.selected_key is not None

    def _reveal(self) -> bool:
        """A hidden cursor: the first key shows (and selects) the row under it."""
        if self.show_cursor or self.row_count == 0:
            return False
        self._user_moved()
        return True

    # --- the user's moves ----------------------------------------------------------------
    def action_cursor_down(self) -> None:
        if not self._reveal():
            super().action_cursor_down()
            self._user_moved()

    def action_cursor_up(self) -> None:
        if not self._reveal():
            super().action_cursor_up()
            self._user_moved()

    def action_page_down(self) -> None:
        super().action_page_down()
        self._user_moved()

    def action_page_up(self) -> None:
        super().action_page_up()
        self._user_moved()

    def action_scroll_top(self) -> None:
        self.show_cursor = self.row_count > 0
        super().action_scroll_top()
        self._user_moved()

    def action_scroll_bottom(self) -> None:
        self.show_cursor = self.row_count > 0
        super().action_scroll_bottom()
        self._user_moved()

    def action_select_cursor(self) -> None:
        if self.selected_key is None:
            return
        super().action_select_cursor()

    async def _on_click(self, event: events.Click) -> None:
        meta = event.style.meta
        if "row" in meta and meta.get("row", -1) >= 0 and not self.show_cursor:
            self.show_cursor = True  # a click on a row selects it even with no selection
        await super()._on_click(event)
        if "row" in meta and meta.get("row", -1) >= 0:
            self._user_moved()
