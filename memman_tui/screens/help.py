"""`?`: every key of the app, the screen below and the focused widget."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Label, Static

from memman_tui import keymap


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark", "close", "Close")]

    def __init__(self, sections: list[tuple[str, list[keymap.Key]]]) -> None:
        super().__init__()
        self.sections = sections

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog help"):
            yield Label("memman tui — keys", classes="dialog-title")
            table: DataTable = DataTable(id="help-keys", cursor_type="row", zebra_stripes=True)
            table.add_columns("where", "key", "does")
            for section, keys in self.sections:
                for key, _action, desc, tooltip, _show in keys:
                    table.add_row(section, keymap.display_key(key), f"{desc}: {tooltip}")
            yield table
            yield Static("Esc closes · bands: <60% ok, 60% warn, 80% prune, 90% aggressive, "
                         "100% emergency", classes="dialog-hint")

    def action_close(self) -> None:
        self.dismiss(None)
