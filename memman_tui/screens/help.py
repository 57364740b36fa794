"""`?`: every key of the app, the screen below and the focused widget (wraps to fit; scrolls)."""

from __future__ import annotations

from rich.table import Table
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Label, Static

from memman_tui import keymap


def keys_table(sections: list[tuple[str, list[keymap.Key]]]) -> Table:
    table = Table(expand=True, show_edge=False, pad_edge=False, box=None)
    table.add_column("where", style="grey62", no_wrap=True, ratio=1)
    table.add_column("key", style="bold", no_wrap=True, ratio=1)
    table.add_column("does", ratio=6)
    for section, keys in sections:
        for key, _action, desc, tooltip, _show in keys:
            table.add_row(section, keymap.display_key(key), f"{desc}: {tooltip}")
    return table


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark", "close", "Close"),
                Binding("j,down", "down", show=False), Binding("k,up", "up", show=False),
                Binding("g,home", "top", show=False), Binding("G,end", "bottom", show=False)]

    def __init__(self, sections: list[tuple[str, list[keymap.Key]]]) -> None:
        super().__init__()
        self.sections = sections
        self.table = keys_table(sections)  #: what the dialog lists (tests read it)

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog help"):
            yield Label("memman tui — keys (j/k scroll, Esc closes)", classes="dialog-title")
            with VerticalScroll(id="help-keys"):
                yield Static(self.table, id="help-table")
            yield Static("sent = what the last request sent ÷ the session's budget; history "
                         "= the whole log as written ÷ the same budget. Bands: <60% ok, 60% "
                         "warn, 80% prune, 90% aggressive, 100% emergency", classes="dialog-hint")

    def action_down(self) -> None:
        self.query_one("#help-keys", VerticalScroll).scroll_down(animate=False)

    def action_up(self) -> None:
        self.query_one("#help-keys", VerticalScroll).scroll_up(animate=False)

    def action_top(self) -> None:
        self.query_one("#help-keys", VerticalScroll).scroll_home(animate=False)

    def action_bottom(self) -> None:
        self.query_one("#help-keys", VerticalScroll).scroll_end(animate=False)

    def action_close(self) -> None:
        self.dismiss(None)
