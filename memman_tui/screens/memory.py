"""Memory: a user's preferences, rules, playbooks and episodic entries; a tenant's documents
and agent.md state; search across the selected tab."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.message import Message
from textual.widgets import DataTable, Footer, Input, Static, TabbedContent, TabPane

from memman_tui import keymap
from memman_tui.backend import UNAVAILABLE
from memman_tui.feed import Feed
from memman_tui.live import Drained
from memman_tui.rows import as_list
from memman_tui.screens.base import MonitorScreen
from memman_tui.widgets.banner import Banner, RateLabel

#: tab id -> (title, memory type, record kinds shown; None = all)
TABS: dict[str, tuple[str, str, tuple[str, ...] | None]] = {
    "preferences": ("Preferences", "semantic", None),
    "rules": ("Rules", "procedural", ("rule",)),
    "playbooks": ("Playbooks", "procedural", ("playbook",)),
    "episodic": ("Episodic", "episodic", None),
    "docs": ("Business docs", "docs", None),
}
COLUMNS = ("id / key", "value / content", "meta", "updated")
NOT_AVAILABLE = Text("not available (the daemon does not offer this yet)", "grey50 italic")


#: record kind -> the field that holds its value (memman.types.MemoryRecord); others: content
VALUE_FIELD = {"preference": "value", "rule": "action", "playbook": "outcome"}


def item_cells(item: dict[str, Any]) -> tuple[str, str, str, str]:
    """A user-memory record (key or id, value) or a document / document chunk (title, text)."""
    if "doc_id" in item:  # memman.types.Document / DocHit
        ident = item.get("title") or item["doc_id"]
        value = item.get("text") or ""
    else:
        ident = item["key"] if item.get("key") is not None else item.get("id", "?")
        field = VALUE_FIELD.get(str(item.get("kind")))
        value = item.get(field) if field and item.get(field) is not None else None
        value = value if value is not None else (item.get("content") or "")
    meta_bits = []
    for k in ("kind", "score", "source", "chunks", "user_query"):
        if item.get(k) not in (None, "", []):
            meta_bits.append(f"{k}={item[k]}")
    updated = item.get("updated_at") or ""
    if isinstance(updated, (int, float)) and updated:
        updated = time.strftime("%Y-%m-%d %H:%M", time.gmtime(updated))
    return (str(ident)[:40], str(value).replace("\n", " ")[:160], " ".join(meta_bits)[:60],
            str(updated))


class MemoryScreen(MonitorScreen):
    BINDINGS = keymap.bindings(keymap.MEMORY)

    class Loaded(Message):
        def __init__(self, data: dict[str, Any]) -> None:
            super().__init__()
            self.data = data

    def __init__(self, feed: Feed, user_id: str = "default", tenant_id: str = "default", **kwargs: Any) -> None:
        super().__init__(feed, **kwargs)
        self.user_id = user_id
        self.tenant_id = tenant_id
        self.data: dict[str, Any] = {}
        self.loads = 0  #: completed fetches (tests wait on it)

    def compose(self) -> ComposeResult:
        with Horizontal(classes="title-row"):
            yield Static(id="memory-title", classes="title")
            yield RateLabel(classes="rate")
        yield Banner(id="banner")
        with TabbedContent(id="tabs"):
            for tab_id, (title, _type, _keys) in TABS.items():
                with TabPane(title, id=f"tab-{tab_id}"):
                    table: DataTable = DataTable(id=tab_id, cursor_type="row", zebra_stripes=True)
                    table.add_columns(*COLUMNS)
                    yield table
            with TabPane("agent.md", id="tab-agentmd"):
                yield Static(id="agentmd")
        yield Input(placeholder="search the selected tab", id="filter")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#filter", Input).display = False
        self.show_title()
        self.update_banner()

    def show_title(self) -> None:
        text = Text()
        text.append("memory", "bold")
        text.append(f"  user {self.user_id}  tenant {self.tenant_id}   (n: next user)", "grey70")
        self.query_one("#memory-title", Static).update(text)

    # --- loading --------------------------------------------------------------------------------
    def reload(self) -> None:
        if self.feed.reads is not None:
            self.fetch(self.filter_text)

    @work(exclusive=True, group="memory")
    async def fetch(self, query: str = "") -> None:
        reads = self.feed.reads
        if reads is None:
            return
        types = ("semantic", "procedural", "episodic")
        if query:
            calls = [reads.memory_search(self.user_id, t, query) for t in types]
            calls.append(reads.docs_search(self.tenant_id, query))
        else:
            calls = [reads.memory_list(self.user_id, t) for t in types]
            calls.append(reads.docs_list(self.tenant_id))
        answers = dict(zip((*types, "docs"), await asyncio.gather(*calls, return_exceptions=True),
                           strict=True))
        data: dict[str, Any] = {}
        for tab, (_title, mtype, kinds) in TABS.items():
            answer = answers[mtype]
            if answer is UNAVAILABLE or isinstance(answer, BaseException):
                data[tab] = answer
                continue
            # memory_list: records; memory_search / docs_search: results; docs_list: docs
            items = as_list(answer, "results" if query else ("docs" if mtype == "docs" else
                                                                   "records"))
            if kinds is not None:
                items = [x for x in items if x.get("kind") in kinds]
            data[tab] = items
        docs = answers["docs"]
        data["agentmd"] = self.data.get("agentmd") if query else (
            docs.get("agent_md") if isinstance(docs, dict) else docs)
        self.post_message(self.Loaded(data))

    def on_memory_screen_loaded(self, message: Loaded) -> None:
        self.loads += 1
        self.data = message.data
        for tab in TABS:
            table = self.query_one(f"#{tab}", DataTable)
            table.clear()
            answer = self.data.get(tab)
            if answer is UNAVAILABLE:
                table.add_row(NOT_AVAILABLE, "", "", "")
                continue
            if isinstance(answer, BaseException):
                table.add_row(Text(f"error: {answer}", "red"), "", "", "")
                continue
            items = answer if isinstance(answer, list) else []
            for i, item in enumerate(items):
                table.add_row(*item_cells(item), key=f"{tab}-{i}")
            table.border_subtitle = f"{len(items)} items"
        self.show_agentmd(self.data.get("agentmd"))

    def show_agentmd(self, info: Any) -> None:
        """agent.md state: where it is, its size and age, and its head (read locally)."""
        box = self.query_one("#agentmd", Static)
        if info is UNAVAILABLE or info is None or isinstance(info, BaseException):
            box.update(NOT_AVAILABLE)
            return
        path = Path(str(info))
        text = Text()
        text.append("agent.md  ", "bold")
        text.append(str(path) + "\n", "grey70")
        try:
            st = path.stat()
            content = path.read_text(errors="replace")
        except OSError:
            text.append(f"not created yet for tenant {self.tenant_id!r} — promote a snippet to "
                        "business context (p) or write the file to start it", "grey50")
            box.update(text)
            return
        text.append(f"{st.st_size:,} bytes, changed "
                    f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(st.st_mtime))}\n\n",
                    "grey70")
        text.append(content[:3000])
        box.update(text)

    def apply(self, changes: Drained) -> None:
        if changes.memory or changes.resync:
            self.reload()

    # --- keys -------------------------------------------------------------------------------------
    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "filter":
            self.fetch(event.value.strip())

    def action_next_user(self) -> None:
        pairs = sorted({(ov.get("user_id", "default"), ov.get("tenant_id", "default"))
                        for ov in self.feed.live.sessions.values()})
        if not pairs:
            return
        current = (self.user_id, self.tenant_id)
        index = (pairs.index(current) + 1) % len(pairs) if current in pairs else 0
        self.user_id, self.tenant_id = pairs[index]
        self.show_title()
        self.reload()

    def action_back(self) -> None:
        if self.clear_filter():
            self.reload()
            return
        self.app.pop_screen()
