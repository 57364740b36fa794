"""The context as sent: exactly the message list ``memman_session_context`` returns now, in
order, each message with its kind, tokens and mark, and a `/context`-style breakdown by kind
(tool definitions and free space included). Enter opens an item in full; ``y`` copies it;
``w`` writes the whole list as JSON to a file."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import DataTable, Footer, Label, Static

from memman_tui import keymap
from memman_tui.backend import UNAVAILABLE
from memman_tui.feed import Feed, Reads
from memman_tui.live import Drained
from memman_tui.screens.base import MonitorScreen
from memman_tui.sent import LABEL, SHORT_LABEL, STYLE, Part, RecalledLine, SentView, recalled_lines
from memman_tui.widgets.banner import Banner, RateLabel
from memman_tui.widgets.breakdown import breakdown_rows, fullness_text, kind_bar
from memman_tui.widgets.safe_table import SafeTable

MARK_STYLE = {"kept": "green", "summarized": "cyan", "omitted": "grey62", "pinned": "bold magenta",
              "recalled": "bright_cyan"}


def part_cells(p: Part, content_width: int) -> tuple[Any, ...]:
    content = f"{p.role}: " + p.text.replace("\n", " ⏎ ")
    if len(content) > content_width:
        content = content[: max(1, content_width - 1)] + "…"
    return (str(p.index + 1), Text(SHORT_LABEL.get(p.kind, p.kind), STYLE.get(p.kind, "")),
            f"{p.tokens:,}", Text(p.mark, MARK_STYLE.get(p.mark, "")), Text(content))


def recalled_cells(p: Part, line: RecalledLine, content_width: int) -> tuple[Any, ...]:
    # its date is said by the heading of its group in the message: shown on its row here
    content = f"[{line.date}] {line.text.removeprefix('- ')}" if line.date \
        else line.text.removeprefix("- ")
    if len(content) > content_width:
        content = content[: max(1, content_width - 1)] + "…"
    return (str(p.index + 1), Text("recalled", STYLE["recalled"]), "",
            Text(f"{line.session_id}", "bright_cyan"), Text(content))


def part_rows(view: SentView, width: int) -> list[tuple[str, tuple[Any, ...]]]:
    """One row per message; the recalled part as one row per recalled entry, with its source
    session (the entry a person may exclude with d)."""
    rows: list[tuple[str, tuple[Any, ...]]] = []
    for p in view.parts:
        lines = recalled_lines(p) if p.kind == "recalled" else []
        if not lines:
            rows.append((p.key, part_cells(p, width)))
            continue
        rows.append((p.key, part_cells(p, width)))
        rows.extend((ln.key, recalled_cells(p, ln, width)) for ln in lines)
    return rows


def export_path(directory: str | None, session_id: str, now: float) -> Path:
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in session_id)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    return Path(directory or ".") / f"memman-context-{safe}-{stamp}.json"


def fill_breakdown(table: DataTable, view: SentView | None) -> None:
    table.clear()
    if view is None:
        return
    for kind, label, tokens, share in breakdown_rows(view):
        table.add_row(Text("■ ", STYLE.get(kind, "")) + Text(label), f"{tokens:,}",
                      f"{share:.1%}", key=kind)


class ContextScreen(MonitorScreen):
    """One session's context as sent, full screen."""

    BINDINGS = keymap.bindings(keymap.CONTEXT)

    class SentLoaded(Message):
        def __init__(self, view: SentView | None, error: str = "") -> None:
            super().__init__()
            self.view = view
            self.error = error

    def __init__(self, feed: Feed, session_id: str, **kwargs: Any) -> None:
        super().__init__(feed, **kwargs)
        self.session_id = session_id
        self.view: SentView | None = None
        self.loads = 0  #: completed fetches (tests wait on it)

    def compose(self) -> ComposeResult:
        with Horizontal(classes="title-row"):
            yield Static(f"context as sent — session {self.session_id}", classes="title")
            yield RateLabel(classes="rate")
        yield Banner(id="banner")
        yield Static(id="fullness")
        yield Static(id="kindbar")
        with Horizontal(id="context-body"):
            parts = SafeTable(id="parts", zebra_stripes=True)
            parts.add_columns("#", "kind", "tok", "mark", "content")
            yield parts
            side = DataTable(id="breakdown", cursor_type="none", show_cursor=False)
            side.add_columns("kind", "tokens", "share")
            yield side
        yield Static(id="context-why")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#parts").border_title = "[1] messages as the LLM receives them"
        self.query_one("#breakdown").border_title = "breakdown"
        self.update_banner()
        self.query_one("#parts").focus()

    # --- loading --------------------------------------------------------------------------
    def reload(self) -> None:
        if self.feed.reads is not None:
            self.fetch()

    @work(exclusive=True, group="context-view")
    async def fetch(self) -> None:
        reads = self.feed.reads
        if reads is None:
            return
        try:
            view = await reads.sent_view(self.session_id)
        except Exception as exc:  # shown in the panel; the screen stays usable
            self.post_message(self.SentLoaded(None, f"{type(exc).__name__}: {exc}"))
            return
        self.post_message(self.SentLoaded(None if view is UNAVAILABLE else view))

    def on_context_screen_sent_loaded(self, message: SentLoaded) -> None:
        if self.feed.paused:
            return
        self.loads += 1
        self.view = message.view
        self.show_view(message.error)

    def show_view(self, error: str = "") -> None:
        view = self.view
        table = self.query_one("#parts", SafeTable)
        width = max(12, (table.size.width or self.size.width - 38) - 40)
        rows = [] if view is None else part_rows(view, width)
        table.refill(rows)
        self.query_one("#fullness", Static).update(fullness_text(view, self.size.width))
        if view is None:
            self.query_one("#kindbar", Static).update(
                Text(error or "not available (the daemon does not offer this yet)", "grey50"))
        else:
            self.query_one("#kindbar", Static).update(kind_bar(view, self.size.width - 2))
        fill_breakdown(self.query_one("#breakdown", DataTable), view)
        if view is not None:
            table.border_subtitle = (f"{len(view.parts)} messages · {view.sent_tokens:,} tokens "
                                     f"sent" + (" · kinds derived by the TUI" if view.fallback
                                                else ""))
            self.query_one("#context-why", Static).update(Text(view.why, "grey70"))

    def on_resize(self) -> None:
        if self.view is not None:
            self.show_view()

    def apply(self, changes: Drained) -> None:
        if (self.session_id in changes.detail or self.session_id in changes.sessions
                or changes.resync):
            self.reload()
        if self.session_id in changes.removed:
            self.notify(f"session {self.session_id} was deleted", severity="warning")
            if self.is_current:
                self.app.pop_screen()

    # --- keys -----------------------------------------------------------------------------
    def selected_part(self) -> Part | None:
        table = self.query_one("#parts", SafeTable)
        if self.view is None or table.selected_key is None:
            return None
        return next((p for p in self.view.parts if p.key == table.selected_key), None)

    def selected_recalled(self) -> RecalledLine | None:
        table = self.query_one("#parts", SafeTable)
        if self.view is None or table.selected_key is None:
            return None
        for p in self.view.parts:
            for ln in recalled_lines(p) if p.kind == "recalled" else []:
                if ln.key == table.selected_key:
                    return ln
        return None

    def action_exclude(self) -> None:
        line = self.selected_recalled()
        if line is None:
            self.notify("Select a recalled line (kind 'recalled') to exclude it from this "
                        "session's recall", severity="warning")
            return
        self.post_message(self.ExcludeRecalled(self.session_id, line))

    class ExcludeRecalled(Message):
        """A person asked that this session stop recalling an entry (the app acts on it)."""

        def __init__(self, session_id: str, line: RecalledLine) -> None:
            super().__init__()
            self.session_id = session_id
            self.line = line

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.data_table.id == "parts":
            self.action_open()

    def action_open(self) -> None:
        part = self.selected_part()
        if part is None:
            self.notify("No message selected: move to one with j/k", severity="warning")
            return
        self.app.push_screen(ItemScreen.for_part(self.session_id, part, self.feed.reads))

    def action_copy(self) -> None:
        part = self.selected_part()
        if part is None:
            self.notify("No message selected: move to one with j/k", severity="warning")
            return
        self.app.copy_to_clipboard(part.text)
        self.notify(f"copied message {part.index + 1} ({len(part.text):,} characters)")

    def action_write_json(self) -> None:
        if self.view is None:
            self.notify("Nothing to write yet", severity="warning")
            return
        path = export_path(self.feed.settings.export_dir, self.session_id, self.feed.clock())
        path.write_text(self.view.to_json(), encoding="utf-8")
        self.notify(f"wrote {len(self.view.parts)} messages to {path}")

    def action_back(self) -> None:
        self.app.pop_screen()

    def action_focus_panel(self, n: int) -> None:
        if n == 1:
            self.query_one("#parts").focus()


class ItemScreen(ModalScreen[None]):
    """One entry, summary or message in full (scrollable), with the entries a summary replaced."""

    BINDINGS = [Binding("escape,q", "close", "Close"), Binding("y", "copy", "Copy"),
                Binding("g,home", "top", "Top", show=False),
                Binding("G,end", "bottom", "Bottom", show=False)]

    def __init__(self, session_id: str, title: str, body: str, *,
                 summary_id: int | None = None, entry_ids: list[int] | None = None,
                 reads: Reads | None = None) -> None:
        super().__init__()
        self.reads = reads  #: reads the entries a summary replaced; None: not shown
        self.session_id = session_id
        self.title_text = title
        self.body = body
        self.summary_id = summary_id
        self.entry_ids = entry_ids or []
        self.replaced: list[dict[str, Any]] | None = None  #: filled by the expand fetch

    @classmethod
    def for_part(cls, session_id: str, p: Part, reads: Reads | None = None) -> ItemScreen:
        title = (f"message {p.index + 1} · {LABEL.get(p.kind, p.kind)} · {p.role} · "
                 f"{p.tokens:,} tokens · {p.mark}")
        if p.entry_ids:
            title += f" · entries {', '.join(map(str, p.entry_ids[:8]))}"
        return cls(session_id, title, p.text, summary_id=p.summary_id,
                   entry_ids=p.entry_ids if p.kind in ("gap_summary", "omission_marker") else [],
                   reads=reads)

    def compose(self) -> ComposeResult:
        with VerticalScroll(classes="dialog item", id="item-scroll"):
            yield Label(self.title_text, classes="dialog-title")
            yield Static(Text(self.body), id="item-body")
            yield Static(id="item-replaced")
            yield Static("y copies · Esc closes · g/G top/bottom", classes="dialog-hint")

    def on_mount(self) -> None:
        self.query_one("#item-scroll").focus()
        if self.summary_id is not None or self.entry_ids:
            self.load_replaced()

    @work(exclusive=True, group="item")
    async def load_replaced(self) -> None:
        reads = self.reads
        if reads is None:
            return
        entries: list[dict[str, Any]] = []
        if self.summary_id is not None:
            result = await reads.session_expand(self.session_id, self.summary_id)
            if isinstance(result, dict):
                entries = [e for e in result.get("entries") or [] if isinstance(e, dict)]
        else:
            result = await reads.session_get(self.session_id)
            wanted = set(self.entry_ids)
            if isinstance(result, dict):
                entries = [e for e in result.get("entries") or []
                           if isinstance(e, dict) and e.get("id") in wanted]
        self.replaced = entries
        text = Text()
        text.append(f"\nthe {len(entries)} entries this replaced\n", "bold")
        for e in entries:
            text.append(f"\n#{e.get('id')} {e.get('role', '?')}/{e.get('type', '?')} "
                        f"{e.get('tokens', '?')} tok\n", "bold cyan")
            text.append(str(e.get("content") or ""))
            text.append("\n")
        self.query_one("#item-replaced", Static).update(text)

    def action_copy(self) -> None:
        self.app.copy_to_clipboard(self.body)
        self.notify(f"copied {len(self.body):,} characters")

    def action_top(self) -> None:
        self.query_one("#item-scroll", VerticalScroll).scroll_home(animate=False)

    def action_bottom(self) -> None:
        self.query_one("#item-scroll", VerticalScroll).scroll_end(animate=False)

    def action_close(self) -> None:
        self.dismiss(None)
