"""Who is connected to the daemon: name, pid, since, requests per second, subscriptions."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.message import Message
from textual.widgets import Footer, Static

from memman_tui import keymap
from memman_tui.backend import UNAVAILABLE
from memman_tui.feed import Feed
from memman_tui.screens.base import MonitorScreen
from memman_tui.widgets.banner import Banner, RateLabel
from memman_tui.widgets.countdown import ago
from memman_tui.widgets.safe_table import SafeTable


def subscriptions_text(subs: list[dict[str, Any]]) -> str:
    if not subs:
        return "-"
    out = []
    for s in subs:
        topics = ",".join(s.get("topics") or []) or "all"
        flt = " ".join(f"{k}={v}" for k, v in (s.get("filter") or {}).items())
        out.append(f"#{s.get('id')} {topics}" + (f" [{flt}]" if flt else ""))
    return "; ".join(out)


class ClientsScreen(MonitorScreen):
    BINDINGS = keymap.bindings(keymap.CLIENTS)

    class ClientsLoaded(Message):
        def __init__(self, result: Any) -> None:
            super().__init__()
            self.result = result

    def __init__(self, feed: Feed, **kwargs: Any) -> None:
        super().__init__(feed, **kwargs)
        self.clients: list[dict[str, Any]] = []
        self._last: dict[int, tuple[float, int]] = {}  #: id -> (at, requests) of the last load
        self.rates: dict[int, float] = {}
        self.loads = 0

    def compose(self) -> ComposeResult:
        with Horizontal(classes="title-row"):
            yield Static("memman — connected clients", classes="title")
            yield RateLabel(classes="rate")
        yield Banner(id="banner")
        table = SafeTable(id="clients", zebra_stripes=True)
        table.add_columns("id", "name", "pid", "since", "req/s", "requests", "subscriptions")
        yield table
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#clients").border_title = "[1] clients"
        self.update_banner()
        self.query_one("#clients").focus()

    def reload(self) -> None:
        if self.feed.reads is not None:
            self.fetch()

    def tick(self) -> None:
        self.reload()

    @work(exclusive=True, group="clients")
    async def fetch(self) -> None:
        reads = self.feed.reads
        if reads is None:
            return
        self.post_message(self.ClientsLoaded(await reads.clients_list()))

    def on_clients_screen_clients_loaded(self, message: ClientsLoaded) -> None:
        if self.feed.paused:
            return
        self.loads += 1
        table = self.query_one("#clients", SafeTable)
        result = message.result
        if result is UNAVAILABLE or not isinstance(result, dict):
            table.refill([("__na__", (Text("not available (the daemon does not offer "
                                           "memman_clients_list)", "grey50"),
                                      "", "", "", "", "", ""))])
            return
        at = float(result.get("at") or self.feed.clock())
        self.clients = [c for c in result.get("clients") or [] if isinstance(c, dict)]
        rows = []
        for c in self.clients:
            cid = int(c.get("id") or 0)
            requests = int(c.get("requests") or 0)
            last = self._last.get(cid)
            if last is not None and at > last[0]:  # the rate over the last refresh
                self.rates[cid] = max(0.0, (requests - last[1]) / (at - last[0]))
            self._last[cid] = (at, requests)
            rate = self.rates.get(cid, float(c.get("requests_per_s") or 0.0))
            name = Text(str(c.get("name", "?")), "bold" if c.get("you") else "")
            if c.get("you"):
                name.append(" (this TUI)", "grey62")
            rows.append((str(cid), (str(cid), name, str(c.get("pid") or "-"),
                                    ago(at, c.get("since")), f"{rate:.1f}", f"{requests:,}",
                                    Text(subscriptions_text(c.get("subscriptions") or [])))))
        table.refill(rows)
        table.border_subtitle = f"{len(self.clients)} connected"

    def action_back(self) -> None:
        self.app.pop_screen()

    def action_focus_panel(self, n: int) -> None:
        if n == 1:
            self.query_one("#clients").focus()
