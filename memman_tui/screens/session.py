"""Session: the context window as the LLM receives it, summaries, tool cache, scratchpad, log."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.containers import Grid, Horizontal
from textual.message import Message
from textual.widgets import DataTable, Footer, Input, Static, Tree

from memman_tui import keymap
from memman_tui.backend import UNAVAILABLE
from memman_tui.live import Drained
from memman_tui.rows import (
    ContextRow,
    as_list,
    cache_cells,
    cache_key,
    context_cells,
    context_rows,
    first,
    reasons_long,
    scratch_cells,
    scratch_rows,
    snippet_id,
    summaries_of,
    summary_label,
    used_tokens,
)
from memman_tui.screens.base import MonitorScreen
from memman_tui.widgets.banner import Banner, RateLabel
from memman_tui.widgets.event_log import EventLog
from memman_tui.widgets.gauge import TokenGauge


@dataclass
class Detail:
    """Everything the session screen shows, fetched in one go."""

    session: Any = None
    preview: Any = None
    cache: Any = None
    candidates: Any = None
    errors: list[str] = field(default_factory=list)


ENTRY_LIMIT = 400  #: newest entries fetched for the context panel
NOT_AVAILABLE = Text("not available (the daemon does not offer this yet)", "grey50 italic")


class SessionScreen(MonitorScreen):
    BINDINGS = keymap.bindings(keymap.SESSION)

    class DetailLoaded(Message):
        """A fetch of the session's panels finished."""

        def __init__(self, detail: Detail) -> None:
            super().__init__()
            self.detail = detail

    def __init__(self, session_id: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.session_id = session_id
        self.detail = Detail()
        self.context: list[ContextRow] = []
        self.cache_items: list[dict[str, Any]] = []
        self.scratch_items: list[dict[str, Any]] = []
        self.loads = 0  #: completed fetches (tests wait on it)

    def compose(self) -> ComposeResult:
        with Horizontal(id="session-head"):
            yield Static(id="session-title", classes="title")
            yield TokenGauge(id="gauge")
            yield RateLabel(classes="rate")
        yield Banner(id="banner")
        yield Static(id="why")
        with Grid(id="session-grid"):
            ctx: DataTable = DataTable(id="context", cursor_type="row", zebra_stripes=True)
            ctx.add_columns("id", "role", "type", "tok", "score", "mark", "content")
            yield ctx
            cache: DataTable = DataTable(id="cache", cursor_type="row")
            cache.add_columns("exchanges left", "TTL", "hits", "key", "tool call")
            yield cache
            scratch: DataTable = DataTable(id="scratch", cursor_type="row")
            scratch.add_columns("id", "score", "promoted", "snippet", "score parts")
            yield scratch
            yield Tree("summaries", id="summaries")
            yield EventLog(session_id=self.session_id, id="log",
                           max_lines=self.mm.settings.log_size)
        yield Input(placeholder="filter rows as you type", id="filter")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#filter", Input).display = False
        titles = {"#context": "context window (as the LLM receives it)",
                  "#cache": "tool cache", "#scratch": "scratchpad · promotion candidates",
                  "#summaries": "summaries", "#log": "events"}
        for sel, title in titles.items():
            self.query_one(sel).border_title = title
        self.query_one("#summaries", Tree).show_root = False
        self.show_head()
        self.update_banner()
        self.query_one("#log", EventLog).catch_up(list(self.mm.live.log))
        self.query_one("#context", DataTable).focus()

    # --- loading ----------------------------------------------------------------------------
    def reload(self) -> None:
        self.query_one("#log", EventLog).catch_up(list(self.mm.live.log))
        if self.mm.backend is not None:
            self.fetch()

    @work(exclusive=True, group="session-detail")
    async def fetch(self) -> None:
        backend = self.mm.backend
        if backend is None:
            return
        sid = self.session_id
        results = await asyncio.gather(
            backend.session_get(sid, {"limit": ENTRY_LIMIT}), backend.session_preview(sid),
            backend.cache_list(sid), backend.scratchpad_candidates(sid), return_exceptions=True)
        detail = Detail()
        for name, value in zip(("session", "preview", "cache", "candidates"),
                               results, strict=True):
            if isinstance(value, BaseException):
                detail.errors.append(f"{name}: {value}")
                value = None
            setattr(detail, name, value)
        self.post_message(self.DetailLoaded(detail))

    def on_session_screen_detail_loaded(self, message: DetailLoaded) -> None:
        self.show(message.detail)

    def show(self, detail: Detail) -> None:
        self.loads += 1
        self.detail = detail
        self.context = context_rows(detail.preview, detail.session)
        self.cache_items = as_list(detail.cache, "entries", "items", "cache")
        self.scratch_items = scratch_rows(detail.candidates)
        self.show_head()
        self.fill_context()
        self.fill_cache()
        self.fill_scratch()
        self.fill_summaries()

    def overview(self) -> dict[str, Any]:
        ov = self.mm.live.sessions.get(self.session_id)
        if ov is None and isinstance(self.detail.session, dict):
            ov = self.detail.session.get("session") or self.detail.session
        return ov or {"session_id": self.session_id}

    def show_head(self) -> None:
        ov = self.overview()
        gauge = self.query_one("#gauge", TokenGauge)
        ctx = self.detail.preview
        used = used_tokens(ov)
        if isinstance(ctx, dict):
            used = int(first(ctx, "full_tokens", "tokens", default=used) or 0)
            gauge.budget = int(first(ctx, "budget", "max_tokens", default=ov.get("max_tokens") or 8000))
        else:
            gauge.budget = int(ov.get("max_tokens") or 8000)
        gauge.used = used
        title = Text()
        title.append(f"session {self.session_id}", "bold")
        title.append(f"  user {ov.get('user_id', '-')}  tenant {ov.get('tenant_id', '-')}  "
                     f"model {ov.get('model', '-')}  exchanges {ov.get('exchanges', 0)}  "
                     f"summary {ov.get('summary_bytes', 0):,} B", "grey70")
        self.query_one("#session-title", Static).update(title)

    def _matches(self, *cells: Any) -> bool:
        q = self.filter_text.lower()
        return not q or any(q in str(c).lower() for c in cells)

    def _refill(self, table: DataTable, rows: list[tuple[Any, tuple[Any, ...]]],
                unavailable: bool) -> None:
        current = self.current_key(table)
        table.clear()
        if unavailable:
            table.add_row(*([NOT_AVAILABLE] + [""] * (len(table.columns) - 1)), key="__na__")
            return
        keys = []
        for key, cells in rows:
            table.add_row(*cells, key=key)
            keys.append(key)
        if current in keys:
            table.move_cursor(row=keys.index(current), animate=False)

    def fill_context(self) -> None:
        table = self.query_one("#context", DataTable)
        marks = self.marks.get("context", set())
        rows = [(str(r.entry_id), context_cells(r, str(r.entry_id) in marks)) for r in self.context
                if self._matches(r.role, r.type, r.mark, r.content)]
        unavailable = self.detail.preview is UNAVAILABLE and self.detail.session is UNAVAILABLE
        self._refill(table, rows, unavailable)
        kept = sum(r.tokens for r in self.context if r.mark in ("kept", "pinned"))
        nxt = sum(1 for r in self.context if r.next_out)
        table.border_subtitle = (f"{len(self.context)} entries · {kept:,} tok kept"
                                 + (f" · compaction preview: {nxt} go next" if nxt else "")
                                 + ("" if self.detail.preview is not UNAVAILABLE
                                    else " · scores not available: raw log"))
        why = self.detail.preview.get("why") if isinstance(self.detail.preview, dict) else None
        self.query_one("#why", Static).update(Text(f"context: {why}" if why else "", "grey70"))

    def fill_cache(self) -> None:
        table = self.query_one("#cache", DataTable)
        marks = self.marks.get("cache", set())
        now = self.mm.clock()
        rows = [(cache_key(c), cache_cells(c, now, cache_key(c) in marks))
                for c in self.cache_items if self._matches(*c.values())]
        self._refill(table, rows, self.detail.cache is UNAVAILABLE)
        table.border_subtitle = f"{len(self.cache_items)} cached"

    def fill_scratch(self) -> None:
        table = self.query_one("#scratch", DataTable)
        marks = self.marks.get("scratch", set())
        rows = [(str(snippet_id(s)), scratch_cells(s, str(snippet_id(s)) in marks))
                for s in self.scratch_items if self._matches(*s.values())]
        self._refill(table, rows, self.detail.candidates is UNAVAILABLE)
        table.border_subtitle = f"{len(self.scratch_items)} snippets (≤64, LRU)"

    def fill_summaries(self) -> None:
        tree = self.query_one("#summaries", Tree)
        expanded = {n.data.get("id") for n in tree.root.children
                    if n.is_expanded and isinstance(n.data, dict)}
        tree.clear()
        summaries = summaries_of(self.detail.session, self.detail.preview)
        if isinstance(self.detail.session, dict) and self.detail.session.get("summary"):
            rolling = str(self.detail.session["summary"])
            tree.root.add_leaf(Text(f"rolling summary ({len(rolling.encode()):,} B): "
                                    + rolling[:100].replace("\n", " "), "italic"))
        for s in summaries:
            node = tree.root.add(summary_label(s), data=s, allow_expand=True)
            if s.get("id") in expanded:
                self.expand_summary(node)
        tree.border_subtitle = f"{len(summaries)} linked · Enter expands"

    def apply(self, changes: Drained) -> None:
        if changes.lines:
            self.query_one("#log", EventLog).add_lines(changes.lines)
        if self.session_id in changes.sessions:
            self.show_head()
        if self.session_id in changes.detail or changes.resync:
            self.reload()
        if self.session_id in changes.removed:
            self.notify(f"session {self.session_id} was deleted", severity="warning")
            if self.is_current:
                self.app.pop_screen()

    def tick(self) -> None:
        if self.cache_items:  # wall-clock TTLs count down between events
            self.fill_cache()

    # --- keys ---------------------------------------------------------------------------------
    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        # only the panel the user is in explains its row; refills of the others stay quiet
        if event.row_key is None or not event.data_table.has_focus:
            return
        if event.data_table.id == "scratch":
            item = next((s for s in self.scratch_items
                         if str(snippet_id(s)) == event.row_key.value), None)
            if item is not None:
                self.query_one("#why", Static).update(
                    Text(f"snippet {snippet_id(item)}: score {item.get('score')} — "
                         f"{reasons_long(item)}", "grey70"))
            return
        if event.data_table.id != "context":
            return
        row = next((r for r in self.context if str(r.entry_id) == event.row_key.value), None)
        if row is not None:
            self.query_one("#why", Static).update(
                Text(f"entry {row.entry_id}: {row.mark} — {row.reason or 'no reason given'}",
                     "grey70"))

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "filter":
            self.query_one("#log", EventLog).query_text = event.value
            self.fill_context()
            self.fill_cache()
            self.fill_scratch()

    def focused_table(self) -> DataTable | None:
        return self.focused if isinstance(self.focused, DataTable) else None

    def action_mark(self) -> None:
        table = self.focused_table()
        if table is None or self.current_key(table) == "__na__":
            return
        self.toggle_mark(table)
        {"context": self.fill_context, "cache": self.fill_cache,
         "scratch": self.fill_scratch}.get(table.id or "", lambda: None)()

    def action_back(self) -> None:
        if self.clear_filter() or self.clear_marks():
            self.fill_context()
            self.fill_cache()
            self.fill_scratch()
            self.query_one("#context", DataTable).focus()
            return
        self.app.pop_screen()

    def action_pin(self) -> None:
        table = self.query_one("#context", DataTable)
        ids = [int(k) for k in self.targets(table) if str(k).isdigit()]
        pinned = {r.entry_id: r.pinned for r in self.context}
        if ids:
            self.mm.pin_entries(self.session_id, [(i, not pinned.get(i, False)) for i in ids])

    def action_evict(self) -> None:
        table = self.focused_table()
        if table is None or table.id not in ("cache", "scratch"):
            self.notify("Evict works on the tool cache or the scratchpad: Tab to one of them",
                        severity="warning")
            return
        keys = [k for k in self.targets(table) if k != "__na__"]
        if keys:
            self.mm.evict(self.session_id, "cache" if table.id == "cache" else "scratchpad", keys)

    def action_promote(self) -> None:
        table = self.query_one("#scratch", DataTable)
        keys = [k for k in self.targets(table) if k != "__na__"]
        if not keys:
            self.notify("No scratchpad snippet to promote", severity="warning")
            return
        by_id = {str(snippet_id(s)): s for s in self.scratch_items}
        self.mm.promote(self.session_id, [by_id.get(k, {"id": k}) for k in keys])

    def action_compact(self) -> None:
        self.mm.compact_sessions([self.session_id])

    def action_expand(self) -> None:
        tree = self.query_one("#summaries", Tree)
        if tree.cursor_node is not None:
            self.expand_summary(tree.cursor_node)

    def on_tree_node_expanded(self, event: Tree.NodeExpanded) -> None:
        if isinstance(event.node.data, dict) and not event.node.children:
            self.expand_summary(event.node)

    @work(group="expand")
    async def expand_summary(self, node: Any) -> None:
        s = node.data
        if not isinstance(s, dict) or self.mm.backend is None or node.children:
            return
        result = await self.mm.backend.session_expand(self.session_id, s.get("id"))
        if result is UNAVAILABLE:
            entries = [e for e in as_list(self.detail.session, "entries")
                       if e.get("id") in set(s.get("entry_ids") or [])]
            if not entries:
                node.add_leaf(NOT_AVAILABLE)
        else:
            entries = as_list(result, "entries", "items")
        for e in entries:
            node.add_leaf(Text(f"{e.get('id')} {e.get('role', '?')}/{e.get('type', '?')} "
                               f"{e.get('tokens', '?')} tok: "
                               + str(e.get("content") or "")[:90].replace("\n", " ")))
        node.expand()
