"""Every key binding as data: the screens build their BINDINGS from here and the help screen
lists them. ``(key, action, description, tooltip, show)``."""

from __future__ import annotations

from textual.binding import Binding

Key = tuple[str, str, str, str, bool]

GLOBAL: list[Key] = [
    ("q", "quit", "Quit", "Quit memman tui", True),
    ("question_mark", "help", "Help", "List every key", True),
    ("r", "refresh_now", "Refresh", "Reload everything from the daemon now", True),
    ("plus,equals_sign", "faster", "Faster", "Refresh more often (shorter interval)", False),
    ("minus", "slower", "Slower", "Refresh less often (longer interval)", False),
    ("z", "pause", "Pause", "Pause live updates (a banner shows while paused)", True),
    ("m", "memory", "Memory", "User memory and business context of the selected user", True),
    ("ctrl+p", "command_palette", "Commands", "Command palette", False),
]

OVERVIEW: list[Key] = [
    ("enter", "open_session", "Open", "Open the selected session", True),
    ("slash", "filter", "Filter", "Filter sessions as you type; Esc clears", True),
    ("s", "sort", "Sort", "Sort by the next column (S reverses)", True),
    ("S", "sort_reverse", "Reverse", "Reverse the sort order", False),
    ("space", "mark", "Mark", "Mark / unmark the row (act on all marked)", False),
    ("c", "compact", "Compact", "Compact the selected / marked sessions now", True),
    ("e,delete", "evict", "Evict", "Delete the selected / marked sessions (asks first)", False),
    ("escape", "back", "Back", "Clear the filter and marks", False),
    ("j", "cursor_down", "Down", "Move down", False),
    ("k", "cursor_up", "Up", "Move up", False),
]

SESSION: list[Key] = [
    ("escape", "back", "Back", "Clear filter / marks, then back to the overview", True),
    ("slash", "filter", "Filter", "Filter rows as you type; Esc clears", True),
    ("space", "mark", "Mark", "Mark / unmark the row (act on all marked)", False),
    ("p", "promote", "Promote", "Promote the scratchpad snippet(s): choose a target", True),
    ("e,delete", "evict", "Evict", "Evict cache entry / snippet(s) (asks first)", True),
    ("x", "pin", "Pin", "Pin / unpin the context entry(s)", True),
    ("c", "compact", "Compact", "Compact this session now", True),
    ("enter", "expand", "Expand", "Expand a summary into the entries it replaced", False),
    ("tab", "app.focus_next", "Next panel", "Focus the next panel", False),
    ("j", "cursor_down", "Down", "Move down", False),
    ("k", "cursor_up", "Up", "Move up", False),
]

MEMORY: list[Key] = [
    ("escape", "back", "Back", "Clear the search, then back", True),
    ("slash", "filter", "Search", "Search the selected tab as you type", True),
    ("u", "next_user", "User", "Show the next known user / tenant", True),
]


def bindings(keys: list[Key]) -> list[Binding]:
    return [Binding(k, a, d, show=s, tooltip=t) for k, a, d, t, s in keys]


def display_key(key: str) -> str:
    names = {"question_mark": "?", "slash": "/", "plus": "+", "equals_sign": "=", "minus": "-",
             "space": "Space", "escape": "Esc", "enter": "Enter", "delete": "Delete",
             "ctrl+p": "Ctrl+P", "tab": "Tab"}
    return " / ".join(names.get(k, k) for k in key.split(","))
