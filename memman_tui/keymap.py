"""Every key binding as data: the screens build their BINDINGS from here and the help screen
lists them. ``(key, action, description, tooltip, show)``."""

from __future__ import annotations

from textual.binding import Binding

Key = tuple[str, str, str, str, bool]

#: one verb per key on every screen: Enter opens, v shows the context as sent, y copies,
#: w writes JSON, x pins / unpins, e evicts, p promotes, c compacts, d deletes, u undoes,
#: f freezes the log, 1-6 focus a panel, g / G (Home / End) go to the top / bottom
GLOBAL: list[Key] = [
    ("q", "quit", "Quit", "Quit memman tui", True),
    ("question_mark", "help", "Help", "List every key", True),
    ("r", "refresh_now", "Refresh", "Reload everything from the daemon now", False),
    ("plus,equals_sign", "faster", "Faster", "Refresh more often (shorter interval)", False),
    ("minus", "slower", "Slower", "Refresh less often (longer interval)", False),
    ("z", "pause", "Pause", "Freeze the whole screen (a banner shows while paused)", True),
    ("u", "undo", "Undo", "Undo your last pin, unpin, evict, promotion or recall exclusion "
     "(through the daemon)",
     True),
    ("m", "memory", "Memory", "User memory and business context of the selected user", False),
    ("C", "clients", "Clients", "Who is connected: name, pid, since, req/s, subscriptions",
     False),
    ("ctrl+p", "command_palette", "Commands", "Command palette", False),
]

PANELS: list[Key] = [(str(n), f"focus_panel({n})", f"Panel {n}",
                      f"Focus panel {n} (its number is in its title)", False)
                     for n in range(1, 7)]

OVERVIEW: list[Key] = [
    ("enter", "open_session", "Open", "Open the selected session", True),
    ("v", "view_context", "Context", "The selected session's context as sent", True),
    ("slash", "filter", "Filter", "Filter sessions as you type; Esc clears", True),
    ("s", "sort", "Sort", "Sort by the next column (S reverses)", False),
    ("S", "sort_reverse", "Reverse", "Reverse the sort order", False),
    ("space", "mark", "Mark", "Mark / unmark the row (act on all marked)", False),
    ("c", "compact", "Compact", "Compact the selected / marked sessions (asks first)", False),
    ("d,delete", "delete", "Delete", "Delete the selected / marked sessions (asks first)", False),
    ("f", "freeze", "Freeze log", "Freeze / unfreeze the event log", False),
    ("escape", "back", "Back", "Clear the filter and marks", False),
    *PANELS[:2],
]

SESSION: list[Key] = [
    ("escape", "back", "Back", "Clear filter / marks, then back to the overview", True),
    ("enter", "open", "Open", "Open the selected item in full (summaries: the entries they "
     "replaced)", True),
    ("v", "view_context", "Context", "The context as sent, full screen", True),
    ("x", "pin", "Pin", "Pin / unpin the selected context message's entry (panel 1)", True),
    ("e,delete", "evict", "Evict", "Evict the selected cache entry / snippet (asks first)", False),
    ("p", "promote", "Promote", "Promote the selected snippet: choose a target (panel 4)", False),
    ("c", "compact", "Compact", "Compact this session now (asks first)", False),
    ("y", "copy", "Copy", "Copy the selected item's text", False),
    ("f", "freeze", "Freeze log", "Freeze / unfreeze the event log", False),
    ("slash", "filter", "Filter", "Filter rows and past log lines as you type; Esc clears", True),
    ("space", "mark", "Mark", "Mark / unmark the row (act on all marked)", False),
    ("tab", "app.focus_next", "Next panel", "Focus the next panel", False),
    *PANELS,
]

CONTEXT: list[Key] = [
    ("escape", "back", "Back", "Back to the previous screen", True),
    ("enter", "open", "Open", "Open the selected message in full", True),
    ("y", "copy", "Copy", "Copy the selected message's text", True),
    ("w", "write_json", "Write JSON", "Write the whole list as JSON to a file", True),
    ("d", "exclude", "Don't recall",
     "Stop recalling the selected earlier-session line in this session (u undoes)", True),
    *PANELS[:1],
]

CLIENTS: list[Key] = [
    ("escape", "back", "Back", "Back to the previous screen", True),
    *PANELS[:1],
]

MEMORY: list[Key] = [
    ("escape", "back", "Back", "Clear the search, then back", True),
    ("slash", "filter", "Search", "Search the selected tab as you type", True),
    ("n", "next_user", "Next user", "Show the next known user / tenant", True),
]


def bindings(keys: list[Key]) -> list[Binding]:
    return [Binding(k, a, d, show=s, tooltip=t) for k, a, d, t, s in keys]


def display_key(key: str) -> str:
    names = {"question_mark": "?", "slash": "/", "plus": "+", "equals_sign": "=", "minus": "-",
             "space": "Space", "escape": "Esc", "enter": "Enter", "delete": "Delete",
             "ctrl+p": "Ctrl+P", "tab": "Tab", "home": "Home", "end": "End"}
    return " / ".join(names.get(k, k) for k in key.split(","))
