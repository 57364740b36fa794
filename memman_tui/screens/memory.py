"""Memory: a user's preferences, rules, playbooks and episodic entries; a tenant's documents
and agent.md state; search across the selected tab."""

from __future__ import annotations

import asyncio
from typing import Any

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.message import Message
from textual.widgets import DataTable, Footer, Input, Static, TabbedContent, TabPane

from memman_tui import keymap
from memman_tui.backend import UNAVAILABLE
from memman_tui.live import Drained
from memman_tui.rows import as_list, first
from memman_tui.screens.base import MonitorScreen
from memman_tui.widgets.banner import Banner

#: tab id -> (title, memory type asked for, keys of the answer that may hold these items)
TABS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "preferences": ("Preferences", "semantic", ("semantic", "preferences", "knowledge")),
    "rules": ("Rules", "procedural", ("rules", "procedural")),
    "playbooks": ("Playbooks", "playbook", ("playbooks", "playbook")),
    "episodic": ("Episodic", "episodic", ("episodic", "episodes")),
    "docs": ("Business docs", "docs", ("documents", "docs", "items")),
}
COLUMNS = ("id / key", "value / content", "meta", "updated")
NOT_AVAILABLE = Text("not available (the daemon does not offer this yet)", "grey50 italic")


def item_cells(item: dict[str, Any]) -> tuple[str, str, str, str]:
    ident = first(item, "key", "condition", "title", "name", "id", "doc_id", default="?")
    value = first(item, "value", "action", "content", "outcome", "text", "summary", default="")
    meta_bits = []
    for k in ("score", "source", "chunks", "bytes", "flow", "user_query", "tags", "origin"):
        if item.get(k) not in (None, "", []):
            meta_bits.append(f"{k}={item[k]}")
    updated = first(item, "updated_at", "timestamp", "created_at", "at", default="")
    if isinstance(updated, (int, float)) and updated:
        import time

        updated = time.strftime("%Y-%m-%d %H:%M", time.gmtime(updated))
    return (str(ident)[:40], str(value).replace("\n", " ")[:160], " ".join(meta_bits)[:60],
            str(updated))


class MemoryScreen(MonitorScreen):
    BINDINGS = keymap.bindings(keymap.MEMORY)

    class Loaded(Message):
        def __init__(self, data: dict[str, Any]) -> None:
            super().__init__()
            self.data = data

    def __init__(self, user_id: str = "default", tenant_id: str = "default", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.user_id = user_id
        self.tenant_id = tenant_id
        self.data: dict[str, Any] = {}

    def compose(self) -> ComposeResult:
        yield Static(id="memory-title", classes="title")
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
        text.append(f"  user {self.user_id}  tenant {self.tenant_id}   (u: next user)", "grey70")
        self.query_one("#memory-title", Static).update(text)

    # --- loading --------------------------------------------------------------------------------
    def reload(self) -> None:
        if self.mm.backend is not None:
            self.fetch(self.filter_text)

    @work(exclusive=True, group="memory")
    async def fetch(self, query: str = "") -> None:
        backend = self.mm.backend
        if backend is None:
            return
        data: dict[str, Any] = {}
        if query:
            user_types = [(tab, mtype) for tab, (_t, mtype, _k) in TABS.items() if tab != "docs"]
            answers = await asyncio.gather(
                *[backend.memory_search(self.user_id, mtype, query) for _tab, mtype in user_types],
                backend.docs_search(self.tenant_id, query), return_exceptions=True)
            for (tab, _m), answer in zip(user_types, answers[:-1], strict=True):
                data[tab] = answer
            data["docs"] = answers[-1]
            data["agentmd"] = self.data.get("agentmd")
        else:
            everything, docs = await asyncio.gather(
                backend.memory_list(self.user_id), backend.docs_list(self.tenant_id),
                return_exceptions=True)
            for tab, (_title, _mtype, keys) in TABS.items():
                if tab == "docs":
                    continue
                data[tab] = self._pick(everything, keys)
            data["docs"] = docs
            data["agentmd"] = docs
        self.post_message(self.Loaded(data))

    @staticmethod
    def _pick(answer: Any, keys: tuple[str, ...]) -> Any:
        if answer is UNAVAILABLE or isinstance(answer, BaseException):
            return answer
        if isinstance(answer, dict):
            for k in keys:
                if k in answer:
                    value = answer[k]
                    if isinstance(value, dict):  # semantic as {key: value}
                        value = [v if isinstance(v, dict) else {"key": kk, "value": v}
                                 for kk, v in value.items()]
                    return value
            return []
        if isinstance(answer, list):  # a flat list with a type field
            wanted = set(keys)
            return [x for x in answer if isinstance(x, dict)
                    and (x.get("type") in wanted or x.get("kind") in wanted)]
        return []

    def on_memory_screen_loaded(self, message: Loaded) -> None:
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
            items = as_list(answer, "items", "results", "documents", "docs", "entries")
            for i, item in enumerate(items):
                table.add_row(*item_cells(item), key=f"{tab}-{i}")
            table.border_subtitle = f"{len(items)} items"
        self.show_agentmd(self.data.get("agentmd"))

    def show_agentmd(self, docs: Any) -> None:
        box = self.query_one("#agentmd", Static)
        if docs is UNAVAILABLE or docs is None:
            box.update(NOT_AVAILABLE)
            return
        info = docs.get("agent_md") if isinstance(docs, dict) else None
        if info is None:
            for d in as_list(docs, "documents", "docs", "items"):
                if str(first(d, "name", "title", "path", default="")).endswith("agent.md"):
                    info = d
        if not info:
            box.update(Text("agent.md: none loaded for this tenant", "grey50"))
            return
        if isinstance(info, dict):
            text = Text()
            for k, v in info.items():
                if k in ("content", "text"):
                    continue
                text.append(f"{k}: ", "grey62")
                text.append(f"{v}\n")
            content = first(info, "content", "text", default="")
            if content:
                text.append("\n" + str(content)[:2000])
            box.update(text)
        else:
            box.update(str(info))

    def apply(self, changes: Drained) -> None:
        if changes.memory or changes.resync:
            self.reload()

    # --- keys -------------------------------------------------------------------------------------
    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "filter":
            self.fetch(event.value.strip())

    def action_next_user(self) -> None:
        pairs = sorted({(ov.get("user_id", "default"), ov.get("tenant_id", "default"))
                        for ov in self.mm.live.sessions.values()})
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
