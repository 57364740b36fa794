"""Session: the context as sent, usage over time, tool cache, scratchpad, summaries, log.

Panels are numbered (1-6 focus them): [1] the messages the LLM receives now (exactly
``memman_session_context``'s list), [2] sent and history tokens over time, [3] the tool cache,
[4] the scratchpad, [5] summaries, [6] this session's events. Every action works on the focused
panel's selected row only; a selection follows its item across refreshes or clears.
"""

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

from memman.fullness import Fullness, as_session_budget, fullness
from memman_tui import keymap
from memman_tui.backend import UNAVAILABLE
from memman_tui.feed import Feed
from memman_tui.live import Drained
from memman_tui.rows import (
    as_list,
    cache_cells,
    cache_key,
    reasons_long,
    scratch_cells,
    scratch_rows,
    snippet_id,
    summaries_of,
    summary_label,
)
from memman_tui.screens.base import MonitorScreen
from memman_tui.screens.context import ItemScreen
from memman_tui.sent import SHORT_LABEL, STYLE, Part, SentView
from memman_tui.widgets.banner import Banner, RateLabel
from memman_tui.widgets.breakdown import fullness_text
from memman_tui.widgets.chart import UsageChart
from memman_tui.widgets.event_log import EventLog
from memman_tui.widgets.safe_table import SafeTable


@dataclass
class Detail:
    """Everything the session screen shows, fetched in one go."""

    session: Any = None
    sent: Any = None  #: a SentView, UNAVAILABLE, or None
    cache: Any = None
    candidates: Any = None
    errors: list[str] = field(default_factory=list)


HELD_TEXT = ("the selected message left the context (folded into a summary or dropped); it "
             "is held here while you act on it (x pins it back); j / k moves on")
ENTRY_LIMIT = 400  #: newest entries fetched (their content fills the panels)
NOT_AVAILABLE = Text("not available (the daemon does not offer this yet)", "grey50 italic")
MARK_STYLE = {"kept": "green", "summarized": "cyan", "omitted": "grey62",
              "pinned": "bold magenta"}

#: panel number -> widget id (the numbers are shown in the titles)
PANELS = {1: "context", 2: "chart", 3: "cache", 4: "scratch", 5: "summaries", 6: "log"}
TITLES = {"context": "context as sent (what the LLM receives now)", "chart": "sent / history over time",
          "cache": "tool cache", "scratch": "scratchpad · promotion candidates",
          "summaries": "summaries", "log": "events"}


def context_cells(p: Part, content_width: int, marked: bool) -> tuple[Any, ...]:
    ident = Text(("● " if marked else "") + str(p.index + 1), "bold yellow" if marked else "")
    content = f"{p.role}: " + p.text.replace("\n", " ⏎ ")
    if len(content) > content_width:
        content = content[: max(1, content_width - 1)] + "…"
    return (ident, Text(SHORT_LABEL.get(p.kind, p.kind), STYLE.get(p.kind, "")), f"{p.tokens:,}",
            Text(p.mark, MARK_STYLE.get(p.mark, "")), Text(content))


def is_system(p: Part) -> bool:
    return p.role == "system" or p.kind in ("system_prompt", "context")


class SessionScreen(MonitorScreen):
    BINDINGS = keymap.bindings(keymap.SESSION)

    class DetailLoaded(Message):
        """A fetch of the session's panels finished."""

        def __init__(self, detail: Detail) -> None:
            super().__init__()
            self.detail = detail

    class Pin(Message):
        """Pin or unpin entries: (entry id, pin it?, the part shown, is it a system entry?)."""

        def __init__(self, session_id: str, pins: list[tuple[int, bool, Part, bool]]) -> None:
            super().__init__()
            self.session_id = session_id
            self.pins = pins

    class Evict(Message):
        """Evict cache entries or scratchpad snippets (``tier``), named by ``labels``."""

        def __init__(self, session_id: str, tier: str, keys: list[Any],
                     labels: list[str]) -> None:
            super().__init__()
            self.session_id = session_id
            self.tier = tier
            self.keys = keys
            self.labels = labels

    class Promote(Message):
        """Promote scratchpad snippets (the app asks where to)."""

        def __init__(self, session_id: str, snippets: list[dict[str, Any]]) -> None:
            super().__init__()
            self.session_id = session_id
            self.snippets = snippets

    def __init__(self, feed: Feed, session_id: str, **kwargs: Any) -> None:
        super().__init__(feed, **kwargs)
        self.session_id = session_id
        self.detail = Detail()
        self.view: SentView | None = None
        self.cache_items: list[dict[str, Any]] = []
        self.scratch_items: list[dict[str, Any]] = []
        self.loads = 0  #: completed fetches (tests wait on it)
        self._held: Part | None = None  #: the selected message held after it left the context
        self._shown_parts: dict[str, Part] = {}  #: the context rows last shown, by key
        self._shown_order: list[str] = []
        self._history_loaded = False

    def compose(self) -> ComposeResult:
        with Horizontal(id="session-head"):
            yield Static(id="session-title", classes="title")
            yield RateLabel(classes="rate")
        yield Static(id="fullness")
        yield Banner(id="banner")
        yield Static(id="why")
        with Grid(id="session-grid"):
            ctx = SafeTable(id="context", zebra_stripes=True)
            ctx.add_columns("#", "kind", "tok", "mark", "content")
            yield ctx
            yield UsageChart(id="chart")
            cache = SafeTable(id="cache")
            cache.add_columns("exchanges left", "TTL", "hits", "key", "tool call")
            yield cache
            scratch = SafeTable(id="scratch")
            scratch.add_columns("id", "score", "promoted", "snippet", "score parts")
            yield scratch
            yield Tree("summaries", id="summaries")
            yield EventLog(session_id=self.session_id, id="log",
                           max_lines=self.feed.settings.log_size)
        yield Input(placeholder="filter rows and log lines as you type", id="filter")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#filter", Input).display = False
        for n, wid in PANELS.items():
            self.query_one(f"#{wid}").border_title = f"[{n}] {TITLES[wid]}"
        tree = self.query_one("#summaries", Tree)
        tree.show_root = False
        tree.auto_expand = False  # Enter opens in full; Space expands in place
        self.show_head()
        self.update_banner()
        self.query_one("#log", EventLog).catch_up(list(self.feed.live.log))
        self.fill_chart()
        self.query_one("#context", SafeTable).focus()

    # --- loading ----------------------------------------------------------------------------
    def reload(self) -> None:
        self.query_one("#log", EventLog).catch_up(list(self.feed.live.log))
        if self.feed.reads is not None:
            self.fetch()

    @work(exclusive=True, group="session-detail")
    async def fetch(self) -> None:
        reads = self.feed.reads
        if reads is None:
            return
        sid = self.session_id
        if not self._history_loaded:  # the past: the series and the evictions, once
            self._history_loaded = True
            series, audit = await asyncio.gather(
                reads.session_series(sid), reads.audit_list({"session_id": sid,
                                                                 "action": "evict"}),
                return_exceptions=True)
            if isinstance(series, dict):
                self.feed.live.load_series(sid, series.get("points") or [])
            if isinstance(audit, dict):
                self.feed.live.load_evictions(sid, audit.get("records") or [])
        results = await asyncio.gather(
            reads.session_get(sid, {"limit": ENTRY_LIMIT}), reads.sent_view(sid),
            reads.cache_list(sid), reads.scratchpad_candidates(sid), return_exceptions=True)
        detail = Detail()
        for name, value in zip(("session", "sent", "cache", "candidates"), results, strict=True):
            if isinstance(value, BaseException):
                # a failed read keeps what was shown (and the person's selection in it);
                # the panel says its rows are from the last read that worked
                detail.errors.append(f"{name}: {value}")
                value = getattr(self.detail, name)
            setattr(detail, name, value)
        self.post_message(self.DetailLoaded(detail))

    def on_session_screen_detail_loaded(self, message: DetailLoaded) -> None:
        if self.feed.paused and self.loads > 0:  # pause freezes what is shown; resuming
            return  # reloads (a screen opened while paused still shows its first fetch)
        self.show(message.detail)

    def show(self, detail: Detail) -> None:
        self.loads += 1
        self.detail = detail
        self.view = detail.sent if isinstance(detail.sent, SentView) else None
        self.cache_items = as_list(detail.cache, "entries")
        self.scratch_items = scratch_rows(detail.candidates)
        self.show_head()
        self.fill_context()
        self.fill_cache()
        self.fill_scratch()
        self.fill_summaries()
        self.fill_chart()

    def overview(self) -> dict[str, Any]:
        ov = self.feed.live.sessions.get(self.session_id)
        if ov is None and isinstance(self.detail.session, dict):
            ov = self.detail.session.get("session") or self.detail.session
        return ov or {"session_id": self.session_id}

    def show_head(self) -> None:
        ov = self.overview()
        title = Text()
        title.append(f"session {self.session_id}", "bold")
        title.append(f"  {ov.get('user_id', '-')}@{ov.get('tenant_id', '-')} · "
                     f"{ov.get('model', '-')} · {ov.get('exchanges', 0)} exchanges · "
                     f"rolling summary {ov.get('summary_bytes', 0):,} B", "grey70")
        if ov.get("agent") or ov.get("project"):  # a coding agent's conversation
            title.append(f" · {ov.get('agent') or '-'} in {ov.get('project') or '-'}", "grey70")
        self.query_one("#session-title", Static).update(title)
        self.query_one("#fullness", Static).update(
            fullness_text(self.view, self.size.width, self.fullness()))

    def fullness(self) -> Fullness:
        """How full, as the overview and `memman sessions` say it: the newest usage point
        against the session's budget, else the preview (marked)."""
        ov = dict(self.overview())
        if not ov.get("max_tokens") and self.view is not None:
            ov["max_tokens"] = self.view.budget
        preview = None if self.view is None else {
            "sent_tokens": self.view.sent_tokens, "history_tokens": self.view.history_tokens}
        return fullness(ov, self.feed.live.series.get(self.session_id) or [], preview)

    def _matches(self, *cells: Any) -> bool:
        q = self.filter_text.lower()
        return not q or any(q in str(c).lower() for c in cells)

    def _refill(self, table: SafeTable, rows: list[tuple[Any, tuple[Any, ...]]],
                unavailable: bool) -> None:
        if unavailable:
            table.refill([("__na__", (NOT_AVAILABLE, *[""] * (len(table.columns) - 1)))])
            table.selected_key = None
            table.show_cursor = False
            return
        table.refill(rows)

    def fill_context(self) -> None:
        table = self.query_one("#context", SafeTable)
        marks = self.marks.get("context", set())
        view = self.view
        width = max(16, (table.size.width or self.size.width * 3 // 5) - 36)
        rows = [] if view is None else [
            (p.key, context_cells(p, width, p.key in marks)) for p in view.parts
            if self._matches(p.kind, p.mark, p.role, p.text)]
        had = table.selected_key
        # the selected row stays while the person acts: when an update takes it out of the
        # context (folded into a summary, dropped, or past the newest entries), the row is
        # held where it was, as last shown, marked "held"; the hold ends when the selection
        # moves (then the next update leaves it out)
        shown = {p.key: p for p in view.parts} if view is not None else {}
        if (had is not None and had not in shown and view is not None
                and self.detail.sent is not UNAVAILABLE):
            held = self._held if self._held is not None and self._held.key == had else (
                self._shown_parts.get(had))
            if held is not None:
                cells = list(context_cells(held, width, had in marks))
                cells[3] = Text("held", "bold yellow")
                at = min(self._shown_order.index(had) if had in self._shown_order else 0,
                         len(rows))
                rows.insert(at, (had, tuple(cells)))
                if self._held is None or self._held.key != had:
                    self._held = held
                    if table.has_focus:
                        self.explain(Text(HELD_TEXT, "yellow"))
        elif self._held is not None and self._held.key != had:
            self._held = None
        self._refill(table, rows, self.detail.sent is UNAVAILABLE)
        if view is not None:
            self._shown_parts = {**shown, **({self._held.key: self._held}
                                             if self._held is not None else {})}
            self._shown_order = [k for k, _ in rows]
        if view is not None:
            stale = next((e for e in self.detail.errors if e.startswith("sent:")), None)
            table.border_subtitle = (f"{len(view.parts)} messages · {view.sent_tokens:,} tok sent"
                                     + (f" · as last read (now: {stale[6:60]})" if stale else "")
                                     + " · Enter opens · v full screen")

    def fill_chart(self) -> None:
        self.query_one("#chart", UsageChart).points = as_session_budget(
            list(self.feed.live.series.get(self.session_id, [])),
            int(self.overview().get("max_tokens") or 0))

    def fill_cache(self) -> None:
        table = self.query_one("#cache", SafeTable)
        marks = self.marks.get("cache", set())
        now = self.feed.clock()
        rows = [(cache_key(c), cache_cells(c, now, cache_key(c) in marks))
                for c in self.cache_items if self._matches(*c.values())]
        self._refill(table, rows, self.detail.cache is UNAVAILABLE)
        table.border_subtitle = f"{len(self.cache_items)} cached"

    def fill_scratch(self) -> None:
        table = self.query_one("#scratch", SafeTable)
        marks = self.marks.get("scratch", set())
        live = self.feed.live
        rows = []
        for s in self.scratch_items:
            if not self._matches(*s.values()):
                continue
            cells = list(scratch_cells(s, str(snippet_id(s)) in marks))
            if live.is_rewritten(self.session_id, s):
                cells[0] = Text.assemble(cells[0], (" ↺evicted before", "bold red"))
            rows.append((str(snippet_id(s)), tuple(cells)))
        self._refill(table, rows, self.detail.candidates is UNAVAILABLE)
        table.border_subtitle = f"{len(self.scratch_items)} snippets (≤64, LRU)"

    def fill_summaries(self) -> None:
        tree = self.query_one("#summaries", Tree)
        expanded = {n.data.get("id") for n in tree.root.children
                    if n.is_expanded and isinstance(n.data, dict)}
        tree.clear()
        summaries = summaries_of(self.detail.session, None)
        if isinstance(self.detail.session, dict) and self.detail.session.get("summary"):
            rolling = str(self.detail.session["summary"])
            tree.root.add_leaf(Text(f"rolling summary ({len(rolling.encode()):,} B): "
                                    + rolling[:100].replace("\n", " "), "italic"),
                               data={"rolling": rolling})
        for s in summaries:
            node = tree.root.add(summary_label(s), data=s, allow_expand=True)
            if s.get("id") in expanded:
                self.expand_summary(node)
        tree.border_subtitle = f"{len(summaries)} linked · Enter opens"

    def apply(self, changes: Drained) -> None:
        if changes.lines:
            self.query_one("#log", EventLog).add_lines(changes.lines)
        if self.session_id in changes.sessions:
            self.show_head()
        if self.session_id in changes.series:
            self.fill_chart()
        if self.session_id in changes.detail or changes.resync:
            self.reload()
        if self.session_id in changes.removed:
            self.notify(f"session {self.session_id} was deleted", severity="warning")
            if self.is_current:
                self.app.pop_screen()

    def on_resize(self) -> None:
        if self.view is not None:
            self.fill_context()

    def tick(self) -> None:
        if self.cache_items:  # wall-clock TTLs count down between events
            self.fill_cache()

    # --- the selected item of the focused panel ---------------------------------------------
    def panel(self) -> str | None:
        focused = self.focused
        return focused.id if focused is not None and focused.id in TITLES else None

    def selected_part(self) -> Part | None:
        key = self.query_one("#context", SafeTable).selected_key
        if self.view is None or key is None:
            return None
        found = next((p for p in self.view.parts if p.key == key), None)
        if found is None and self._held is not None and self._held.key == key:
            return self._held  # a held row: the message as last shown
        return found

    def selected_in(self, table_id: str) -> dict[str, Any] | None:
        key = self.query_one(f"#{table_id}", SafeTable).selected_key
        if key is None or key == "__na__":
            return None
        if table_id == "cache":
            return next((c for c in self.cache_items if cache_key(c) == key), None)
        return next((s for s in self.scratch_items if str(snippet_id(s)) == key), None)

    def explain(self, text: Text | str) -> None:
        self.query_one("#why", Static).update(text if isinstance(text, Text)
                                              else Text(text, "grey70"))

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        # only the panel the user is in explains its row; refills of the others stay quiet
        table = event.data_table
        if not table.has_focus or not isinstance(table, SafeTable) or table.selected_key is None:
            return
        if table.id == "scratch":
            item = self.selected_in("scratch")
            if item is not None:
                self.explain(f"snippet {snippet_id(item)}: score {item.get('score')} — "
                             f"{reasons_long(item)}")
        elif table.id == "context":
            p = self.selected_part()
            if p is not None and self._held is not None and p is self._held:
                self.explain(Text(HELD_TEXT, "yellow"))
            elif p is not None:
                ids = ", ".join(map(str, p.entry_ids[:6])) or "-"
                why = f"message {p.index + 1}: {p.kind}, {p.mark}, entries {ids}"
                if p.score is not None:
                    why += f", score {p.score:.2f}"
                if self.view is not None and self.view.why:
                    why += f" — {self.view.why}"
                self.explain(why)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.data_table.id in ("context", "cache", "scratch"):
            self.action_open()

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "filter":
            self.query_one("#log", EventLog).set_query(event.value)
            self.fill_context()
            self.fill_cache()
            self.fill_scratch()

    # --- keys ---------------------------------------------------------------------------------
    def action_focus_panel(self, n: int) -> None:
        wid = PANELS.get(n)
        if wid is None:
            return
        widget = self.query_one(f"#{wid}")
        if widget.can_focus:
            widget.focus()
        else:
            self.notify(f"panel {n} ({TITLES[wid]}) only shows; nothing to select there",
                        timeout=2)

    def action_mark(self) -> None:
        table = self.focused if isinstance(self.focused, SafeTable) else None
        if table is None or table.selected_key in (None, "__na__"):
            return
        marks = self.marks.setdefault(table.id or "", set())
        marks.symmetric_difference_update({table.selected_key})
        table.action_cursor_down()  # the user's own move: the next row is selected
        {"context": self.fill_context, "cache": self.fill_cache,
         "scratch": self.fill_scratch}.get(table.id or "", lambda: None)()

    def _marked_or_selected(self, table_id: str) -> list[Any]:
        marks = self.marks.get(table_id, set())
        if marks:
            return sorted(marks, key=str)
        key = self.query_one(f"#{table_id}", SafeTable).selected_key
        return [] if key in (None, "__na__") else [key]

    def action_back(self) -> None:
        if self.clear_filter() or self.clear_marks():
            self.query_one("#log", EventLog).set_query("")
            self.fill_context()
            self.fill_cache()
            self.fill_scratch()
            self.query_one("#context", SafeTable).focus()
            return
        self.app.pop_screen()

    def _need(self, panel: str, verb: str) -> bool:
        if self.panel() == panel:
            return True
        n = next(k for k, v in PANELS.items() if v == panel)
        self.notify(f"{verb} works on panel [{n}] {TITLES[panel]}: press {n} first",
                    severity="warning")
        return False

    def action_pin(self) -> None:
        if not self._need("context", "Pin / unpin"):
            return
        keys = self._marked_or_selected("context")
        parts = [p for p in (self.view.parts if self.view else []) if p.key in keys]
        if self._held is not None and self._held.key in keys:  # the held row counts too
            parts.append(self._held)
        targets = [p for p in parts if len(p.entry_ids) == 1]
        if not targets:
            self.notify("No message selected that is one entry (summaries and markers cannot "
                        "be pinned)", severity="warning")
            return
        entries = {e.get("id"): e for e in as_list(self.detail.session, "entries")}
        pins = []
        for p in targets:
            eid = p.entry_ids[0]
            pinned = bool(entries.get(eid, {}).get("pinned")) or p.mark == "pinned"
            pins.append((eid, not pinned, p, is_system(p)))
        self.post_message(self.Pin(self.session_id, pins))

    def action_evict(self) -> None:
        panel = self.panel()
        if panel not in ("cache", "scratch"):
            self.notify("Evict works on panel [3] tool cache or [4] scratchpad: press 3 or 4",
                        severity="warning")
            return
        keys = self._marked_or_selected(panel)
        if not keys:
            self.notify("No row selected: move to one with j/k", severity="warning")
            return
        if panel == "cache":
            items = {cache_key(c): c for c in self.cache_items}
            labels = [f"{items[k].get('tool_name', '?')}({items[k].get('parameters', '')})"
                      if k in items else str(k) for k in keys]
        else:
            items = {str(snippet_id(s)): s for s in self.scratch_items}
            labels = [f"#{k} {items[k].get('text', '')}" if k in items else str(k) for k in keys]
        self.post_message(self.Evict(self.session_id, "cache" if panel == "cache" else "scratchpad",
                                     keys, labels))

    def action_promote(self) -> None:
        if not self._need("scratch", "Promote"):
            return
        keys = self._marked_or_selected("scratch")
        if not keys:
            self.notify("No snippet selected: move to one with j/k", severity="warning")
            return
        by_id = {str(snippet_id(s)): s for s in self.scratch_items}
        self.post_message(self.Promote(self.session_id,
                                       [by_id.get(k, {"id": k}) for k in keys]))

    def action_compact(self) -> None:
        self.post_message(self.Compact([self.session_id]))

    def action_view_context(self) -> None:
        self.post_message(self.OpenContext(self.session_id))

    def action_freeze(self) -> None:
        frozen = self.query_one("#log", EventLog).toggle_freeze()
        self.notify("event log frozen (f resumes)" if frozen else "event log follows again",
                    timeout=2)

    def _item(self) -> ItemScreen | None:
        panel = self.panel()
        if panel == "context":
            p = self.selected_part()
            return None if p is None else ItemScreen.for_part(self.session_id, p, self.feed.reads)
        if panel == "cache":
            c = self.selected_in("cache")
            if c is None:
                return None
            return ItemScreen(self.session_id, f"cached {c.get('tool_name', '?')}"
                              f"({c.get('parameters', '')}) · hits {c.get('hits', 0)}",
                              str(c.get("result", "")))
        if panel == "scratch":
            s = self.selected_in("scratch")
            if s is None:
                return None
            return ItemScreen(self.session_id, f"snippet {snippet_id(s)} · score "
                              f"{s.get('score')} · {reasons_long(s)}", str(s.get("text", "")))
        if panel == "summaries":
            node = self.query_one("#summaries", Tree).cursor_node
            data = node.data if node is not None else None
            if isinstance(data, dict) and isinstance(data.get("entry"), dict):
                e = data["entry"]
                return ItemScreen(self.session_id, f"entry {e.get('id')} · {e.get('role', '?')}/"
                                  f"{e.get('type', '?')} · {e.get('tokens', '?')} tokens "
                                  "(replaced by the summary above)", str(e.get("content") or ""))
            if isinstance(data, dict) and "rolling" in data:
                return ItemScreen(self.session_id, "rolling summary (the oldest "
                                  "exchanges folded)", data["rolling"])
            if isinstance(data, dict):
                return ItemScreen(self.session_id, f"linked summary #{data.get('id')} · "
                                  f"{len(data.get('entry_ids') or [])} entries · "
                                  f"{data.get('original_tokens', '?')}→{data.get('tokens', '?')} "
                                  "tok", str(data.get("content", "")), summary_id=data.get("id"),
                                  reads=self.feed.reads)
        return None

    def action_open(self) -> None:
        item = self._item()
        if item is None:
            self.notify("Nothing selected to open here", severity="warning")
            return
        self.app.push_screen(item)

    def action_copy(self) -> None:
        item = self._item()
        if item is None:
            self.notify("Nothing selected to copy", severity="warning")
            return
        self.app.copy_to_clipboard(item.body)
        self.notify(f"copied {len(item.body):,} characters")

    def on_tree_node_selected(self, event: Tree.NodeSelected) -> None:
        if event.node.data is not None:
            self.action_open()

    def on_tree_node_expanded(self, event: Tree.NodeExpanded) -> None:
        data = event.node.data
        if isinstance(data, dict) and "id" in data and not event.node.children:
            self.expand_summary(event.node)

    @work(group="expand")
    async def expand_summary(self, node: Any) -> None:
        s = node.data
        if not isinstance(s, dict) or self.feed.reads is None or node.children:
            return
        result = await self.feed.reads.session_expand(self.session_id, s.get("id"))
        if result is UNAVAILABLE:
            entries = [e for e in as_list(self.detail.session, "entries")
                       if e.get("id") in set(s.get("entry_ids") or [])]
            if not entries:
                node.add_leaf(NOT_AVAILABLE)
        else:
            entries = as_list(result, "entries")
        for e in entries:
            node.add_leaf(Text(f"{e.get('id')} {e.get('role', '?')}/{e.get('type', '?')} "
                               f"{e.get('tokens', '?')} tok: "
                               + str(e.get("content") or "")[:90].replace("\n", " ")),
                          data={"entry": e})
        node.expand()
