"""memman tui: the Textual app that watches the daemon live and lets a person fix memory.

The app owns the connection (with a reconnect loop and a banner), the live state fed by the
subscription, and the refresh tick; screens own their widgets. Data down, messages up: every
screen is built with the app's :class:`~memman_tui.feed.Feed` and shows what it holds; for an
action it posts a message, handled here once, through :mod:`memman_tui.actions` (each checks
read-only mode first and asks before destroying). Every daemon call runs in a worker.

An event's way to a screen: the client library checks its ``seq`` (a gap calls
``on_event_gap``) and hands it to ``on_daemon_event``; ``LiveState.on_event`` records it;
``EventsPending`` asks for one repaint, at most once per refresh interval (``flush``);
``LiveState.drain`` gives the changes, and the monitor screen on top repaints them (``apply``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from textual import work
from textual.app import App, SystemCommand
from textual.css.query import NoMatches
from textual.message import Message
from textual.screen import Screen
from textual.worker import Worker, WorkerState

from memman.errors import FORBIDDEN, INVALID_PARAMS, NOT_FOUND, ConnectionLost, MemmanError
from memman.reconnect import EventGap
from memman_tui import keymap
from memman_tui.actions import Actions
from memman_tui.backend import UNAVAILABLE, Backend, ClientFactory
from memman_tui.feed import Feed
from memman_tui.live import Drained, LiveState
from memman_tui.rows import as_list, snippet_id
from memman_tui.screens.base import MonitorScreen
from memman_tui.screens.clients import ClientsScreen
from memman_tui.screens.context import ContextScreen
from memman_tui.screens.dialogs import ErrorScreen, NoDaemonScreen
from memman_tui.screens.help import HelpScreen
from memman_tui.screens.memory import MemoryScreen
from memman_tui.screens.overview import OverviewScreen
from memman_tui.screens.session import SessionScreen
from memman_tui.settings import RATES, Settings
from memman_tui.widgets.daemon_header import DaemonHeader


class MemmanApp(App):
    """The memman terminal app."""

    CSS_PATH = "app.tcss"
    TITLE = "memman"
    BINDINGS = keymap.bindings(keymap.GLOBAL)

    class EventsPending(Message):
        """Daemon events arrived; collapses with the previous one still queued (Toolong)."""

        def can_replace(self, message: Message) -> bool:
            return isinstance(message, MemmanApp.EventsPending)

    class Connected(Message):
        """The connection (re)opened and the sessions were loaded."""

    def __init__(self, settings: Settings | None = None, *, factory: ClientFactory | None = None,
                 clock: Callable[[], float] | None = None, reconnect_delay: float = 1.0) -> None:
        super().__init__()
        self.settings = settings or Settings()
        self.factory = factory
        self.clock = clock or time.time
        self.reconnect_delay = reconnect_delay
        #: what every screen is built with (data down); the app alone writes it
        self.feed = Feed(LiveState(max_pending=self.settings.max_pending,
                                   log_size=self.settings.log_size),
                         self.settings, self.clock,
                         connection_text="connecting to the memman daemon…")
        self.actions = Actions(self.feed, self.push_screen_wait, self.notify)
        self.ever_connected = False
        self.stats: dict[str, Any] | None = None
        self._last_flush = 0.0
        self._flush_timer: Any = None
        self._tick_timer: Any = None
        self.started_daemon: subprocess.Popen | None = None
        self.quitting = False

    # the feed's fields, as the app (and its tests) name them
    @property
    def live(self) -> LiveState:
        return self.feed.live

    @property
    def backend(self) -> Backend | None:
        return self.feed.backend

    @backend.setter
    def backend(self, backend: Backend | None) -> None:
        self.feed.backend = backend

    @property
    def paused(self) -> bool:
        return self.feed.paused

    @paused.setter
    def paused(self, paused: bool) -> None:
        self.feed.paused = paused

    @property
    def connection_text(self) -> str:
        return self.feed.connection_text

    # --- lifecycle ----------------------------------------------------------------------------
    def on_mount(self) -> None:
        self.push_screen(OverviewScreen(self.feed))
        self._tick_timer = self.set_interval(self.settings.refresh_s, self.tick)
        self.connection_loop()

    @property
    def socket_label(self) -> str:
        from memman.paths import socket_path

        return str(socket_path(self.settings.socket)[0])

    @work(exclusive=True, group="connection")
    async def connection_loop(self) -> None:
        attempt = 0
        while True:
            backend = None
            try:
                backend = await Backend.connect(self.settings.socket, self.factory,
                                                on_gap=self.on_event_gap)
                await backend.subscribe(self.on_daemon_event)
                rows = await backend.session_list()
            except Exception as exc:  # no daemon, refused, lost during setup
                if backend is not None:
                    await backend.close()
                attempt += 1
                waiting_for_start = self.started_daemon is not None and attempt <= 50
                if not self.ever_connected and not waiting_for_start:
                    choice = await self.push_screen_wait(
                        NoDaemonScreen(self.socket_label, _reason(exc)))
                    attempt = 0
                    if choice == "quit":
                        self.exit()
                        return
                    if choice == "start":
                        self.start_daemon()
                    continue
                self.set_connection(f"⚠ daemon unreachable at {self.socket_label} — "
                                    f"reconnecting (attempt {attempt})")
                delay = 0.2 if waiting_for_start else min(self.reconnect_delay * attempt, 5.0)
                await asyncio.sleep(delay)
                continue
            attempt = 0
            self.backend = backend
            self.live.load_sessions(rows)
            self.ever_connected = True
            self.set_connection("")
            self.post_message(self.Connected())
            await backend.wait_closed()
            self.backend = None
            if self.quitting:
                return
            self.set_connection("⚠ connection to the daemon lost — reconnecting…")
            # a daemon that accepts and drops at once must not make this loop spin
            await asyncio.sleep(self.reconnect_delay)

    def start_daemon(self) -> None:
        cmd = list(self.settings.start_daemon_cmd or (sys.executable, "-m", "memman_daemon"))
        if self.settings.socket:
            cmd += ["--socket", str(self.settings.socket)]
        self.started_daemon = subprocess.Popen(cmd, stdin=subprocess.DEVNULL,
                                               stdout=subprocess.DEVNULL,
                                               stderr=subprocess.DEVNULL, start_new_session=True)
        self.set_connection("starting a memman daemon…")
        self.notify(f"started a daemon (pid {self.started_daemon.pid}); it keeps running after "
                    "you quit")

    def set_connection(self, text: str) -> None:
        self.feed.connection_text = text
        self.update_banners()
        for screen in self.screen_stack:  # figures from before the loss are greyed out
            for widget in screen.query("DaemonHeader, #fullness, #session-title, SafeTable"):
                widget.set_class(bool(text), "-stale")

    def update_banners(self) -> None:
        for screen in self.screen_stack:
            if isinstance(screen, MonitorScreen):
                screen.update_banner()

    def on_memman_app_connected(self, _message: Connected) -> None:
        self.refresh_stats()
        self.load_counts()
        if isinstance(self.screen, MonitorScreen):
            self.screen.reload()

    # --- live updates -------------------------------------------------------------------------
    def on_daemon_event(self, event: str, payload: dict[str, Any]) -> None:
        """Subscription callback (sync, hot): record, then ask for one coalesced repaint."""
        self.live.on_event(event, payload)
        self.post_message(self.EventsPending())

    def on_event_gap(self, _gap: EventGap) -> None:
        """The client library saw events go missing (the one sequence check): reload all."""
        self.live.missed()
        self.post_message(self.EventsPending())

    def on_memman_app_events_pending(self, _message: EventsPending) -> None:
        if self.paused or self._flush_timer is not None:
            return
        wait = self._last_flush + self.settings.refresh_s - time.monotonic()
        if wait <= 0:
            self.flush()
        else:  # never repaint faster than the refresh rate
            self._flush_timer = self.set_timer(wait, self.flush)

    def flush(self) -> None:
        self._flush_timer = None
        if self.paused:
            return
        self._last_flush = time.monotonic()
        changes = self.live.drain()
        if changes.empty:
            return
        for severity, text in changes.alerts[:5]:  # threshold crossings, expiries, rewrites
            self.notify(text, severity=severity, timeout=6)  # type: ignore[arg-type]
        if changes.resync:
            self.resync()
        elif changes.stale:
            self.refresh_overviews(changes.stale)
        screen = self.monitor_screen()
        if screen is not None:  # also under a dialog: the log and rows keep up behind it
            with contextlib.suppress(NoMatches):  # the app may be closing meanwhile
                screen.apply(changes)

    def monitor_screen(self) -> MonitorScreen | None:
        """The top-most monitor screen (the one showing, or the one under a dialog)."""
        for screen in reversed(self.screen_stack):
            if isinstance(screen, MonitorScreen):
                return screen
        return None

    def tick(self) -> None:
        if self.paused:
            return
        self.refresh_stats()
        self.refresh_previews()
        if self.live.has_pending() and self._flush_timer is None:
            self.flush()
        screen = self.monitor_screen()
        if screen is not None:
            with contextlib.suppress(NoMatches):  # the app may be closing meanwhile
                screen.tick()

    @work(exclusive=True, group="stats")
    async def refresh_stats(self) -> None:
        if self.backend is None or self.paused:
            return
        try:
            stats = await self.backend.stats()
        except MemmanError:
            return
        if self.paused:  # paused while asking: the header stays as it was
            return
        self.stats = None if stats is UNAVAILABLE else stats
        for screen in self.screen_stack:
            if isinstance(screen, OverviewScreen):
                for header in screen.query(DaemonHeader):  # none while shutting down
                    header.show_stats(self.stats, self.clock())

    @work(exclusive=True, group="counts")
    async def load_counts(self) -> None:
        """Cache and scratchpad sizes per session, once per connection; events keep them."""
        backend = self.backend
        if backend is None:
            return
        gate = asyncio.Semaphore(16)

        async def one(sid: str) -> None:
            async with gate:
                cache, cands, series = await asyncio.gather(
                    backend.cache_list(sid), backend.scratchpad_candidates(sid),
                    backend.session_series(sid, {"limit": self.settings.series_points}),
                    return_exceptions=True)
            if isinstance(series, dict) and sid not in self.live.series:
                self.live.load_series(sid, series.get("points") or [])
            keys = ({str(e.get("key")) for e in as_list(cache, "entries")}
                    if isinstance(cache, (dict, list)) else None)
            ids = ({snippet_id(c) for c in as_list(cands, "candidates")}
                   if isinstance(cands, (dict, list)) else None)
            self.live.load_counts(sid, keys, ids)

        sids = list(self.live.sessions)
        await asyncio.gather(*(one(sid) for sid in sids))
        screen = self.screen
        if isinstance(screen, OverviewScreen):
            with contextlib.suppress(NoMatches):  # the app may be closing meanwhile
                screen.rebuild()

    @work(exclusive=True, group="previews")
    async def refresh_previews(self) -> None:
        """Sessions with no request yet show a preview (marked): what a request would send
        now (`peek`: nothing recorded, no compression), re-read when the session changed."""
        backend, live = self.backend, self.live
        if backend is None:
            return
        todo = [sid for sid, ov in live.sessions.items() if not live.series.get(sid)
                and (live.previews.get(sid) or {}).get("at") != ov.get("updated_at")]
        if not todo:
            return
        gate = asyncio.Semaphore(4)

        async def one(sid: str) -> None:
            at = live.sessions.get(sid, {}).get("updated_at")
            async with gate:
                try:
                    ans = await backend.session_context(sid, {"peek": True})
                except MemmanError:
                    return
            if isinstance(ans, dict):
                live.previews[sid] = {"sent_tokens": ans.get("tokens"),
                                      "history_tokens": ans.get("history_tokens"), "at": at}

        await asyncio.gather(*(one(sid) for sid in todo[:50]))
        screen = self.monitor_screen()
        if isinstance(screen, OverviewScreen) and not self.paused:
            with contextlib.suppress(NoMatches):
                screen.apply(Drained(sessions=set(todo) & set(live.sessions)))

    @work(exclusive=True, group="overviews")
    async def refresh_overviews(self, stale: set[str]) -> None:
        """Rows whose events carried no overview: one session_list for all of them."""
        if self.backend is None:
            return
        self.live.load_sessions(await self.backend.session_list())
        screen = self.monitor_screen()
        if screen is not None:
            with contextlib.suppress(NoMatches):
                screen.apply(Drained(sessions=stale & set(self.live.sessions)))

    @work(exclusive=True, group="resync")
    async def resync(self) -> None:
        if self.backend is None:
            return
        self.live.load_sessions(await self.backend.session_list())
        if isinstance(self.screen, MonitorScreen):
            with contextlib.suppress(NoMatches):
                self.screen.reload()

    # --- global actions -------------------------------------------------------------------------
    def action_refresh_now(self) -> None:
        self.resync()
        self.refresh_stats()

    def set_rate(self, seconds: float) -> None:
        self.settings.refresh_s = seconds
        if self._tick_timer is not None:
            self._tick_timer.stop()
        self._tick_timer = self.set_interval(seconds, self.tick)
        self.notify(f"refresh every {seconds:g} s", timeout=2)
        self.update_banners()

    def action_faster(self) -> None:
        slower = [r for r in RATES if r < self.settings.refresh_s]
        self.set_rate(slower[-1] if slower else RATES[0])

    def action_slower(self) -> None:
        faster = [r for r in RATES if r > self.settings.refresh_s]
        self.set_rate(faster[0] if faster else RATES[-1])

    def action_pause(self) -> None:
        """Freeze everything: no repaint, no countdown, no fetched answer applied; resuming
        applies what arrived meanwhile and reloads the screen."""
        self.paused = not self.paused
        self.update_banners()
        if not self.paused:
            self.flush()
            self.refresh_stats()
            screen = self.monitor_screen()
            if screen is not None:
                screen.reload()

    def action_help(self) -> None:
        sections: list[tuple[str, list[keymap.Key]]] = [("everywhere", keymap.GLOBAL)]
        screen = self.screen
        for cls, keys in ((OverviewScreen, keymap.OVERVIEW), (SessionScreen, keymap.SESSION),
                          (MemoryScreen, keymap.MEMORY), (ContextScreen, keymap.CONTEXT),
                          (ClientsScreen, keymap.CLIENTS)):
            if isinstance(screen, cls):
                sections.insert(0, (cls.__name__.removesuffix("Screen").lower(), keys))
        focused = screen.focused
        if focused is not None:
            extra = [(b.key, b.action, b.description or b.action,
                      b.tooltip or b.description or "", True)
                     for b in focused.BINDINGS if hasattr(b, "key")]
            if extra:
                sections.append((f"panel {focused.id or ''}".strip(), extra))
        self.push_screen(HelpScreen(sections))

    def action_memory(self) -> None:
        user, tenant = "default", "default"
        screen = self.screen
        ov = None
        if isinstance(screen, OverviewScreen):
            ov = screen.selected_session()
        elif isinstance(screen, SessionScreen):
            ov = screen.overview()
        if ov:
            user, tenant = ov.get("user_id", user), ov.get("tenant_id", tenant)
        self.push_screen(MemoryScreen(self.feed, user, tenant))

    def open_session(self, session_id: str) -> None:
        self.push_screen(SessionScreen(self.feed, session_id))

    def open_context(self, session_id: str) -> None:
        self.push_screen(ContextScreen(self.feed, session_id))

    def action_clients(self) -> None:
        if not isinstance(self.screen, ClientsScreen):
            self.push_screen(ClientsScreen(self.feed))

    def action_undo(self) -> None:
        self.change(self.actions.undo)

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        yield SystemCommand("Refresh now", "Reload everything from the daemon", self.action_refresh_now)
        yield SystemCommand("Pause / resume", "Hold live updates", self.action_pause)
        yield SystemCommand("Memory", "User memory and business context", self.action_memory)
        yield SystemCommand("Clients", "Who is connected to the daemon", self.action_clients)
        yield SystemCommand("Undo", "Undo your last pin, unpin, evict or promotion",
                            self.action_undo)
        yield SystemCommand("Help", "List every key", self.action_help)
        for sid in sorted(self.live.sessions)[:200]:
            yield SystemCommand(f"Open session {sid}", "Session screen",
                                lambda sid=sid: self.open_session(sid))

    # --- actions: the screens' messages, each handled once (memman_tui/actions.py) ------------
    def on_overview_screen_open_session(self, message: OverviewScreen.OpenSession) -> None:
        self.open_session(message.session_id)

    def on_monitor_screen_open_context(self, message: MonitorScreen.OpenContext) -> None:
        self.open_context(message.session_id)

    def on_monitor_screen_compact(self, message: MonitorScreen.Compact) -> None:
        self.change(self.actions.compact, message.session_ids)

    def on_overview_screen_delete_sessions(self, message: OverviewScreen.DeleteSessions) -> None:
        self.change(self.actions.delete, message.session_ids)

    def on_session_screen_pin(self, message: SessionScreen.Pin) -> None:
        self.change(self.actions.pin, message.session_id, message.pins)

    def on_session_screen_evict(self, message: SessionScreen.Evict) -> None:
        self.change(self.actions.evict, message.session_id, message.tier, message.keys,
                    message.labels)

    def on_session_screen_promote(self, message: SessionScreen.Promote) -> None:
        self.change(self.actions.promote, message.session_id, message.snippets)

    def on_context_screen_exclude_recalled(self, message: ContextScreen.ExcludeRecalled) -> None:
        self.change(self.actions.exclude_recalled, message.session_id, message.line.entry_id,
                    message.line.session_id)

    @work(group="actions")
    async def change(self, action: Callable[..., Awaitable[bool]], *args: Any) -> None:
        """Run one action in its own worker (its dialogs wait here; a failure is shown once,
        by on_worker_state_changed); a change clears the marks and reloads the screen."""
        if await action(*args):
            self._after_change()

    def _after_change(self) -> None:
        screen = self.screen
        if isinstance(screen, MonitorScreen):
            screen.clear_marks()
            screen.reload()

    # --- errors ----------------------------------------------------------------------------------------
    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """Every failed worker surfaces here, once, as a modal that says what to do."""
        if event.state != WorkerState.ERROR:
            return
        error = event.worker.error
        if isinstance(error, ConnectionLost):  # the banner and the reconnect loop handle it
            self.notify("not done: the connection to the daemon was lost; reconnecting",
                        severity="error")
            return
        if isinstance(error, MemmanError):
            title = f"The daemon refused: {error.message}"
            hint = {FORBIDDEN: "The daemon is read-only or refused this client.",
                    NOT_FOUND: "It may have been removed meanwhile; press r to refresh.",
                    INVALID_PARAMS: "This is a bug in memman tui; please report it."}.get(error.code, "")
            self.push_screen(ErrorScreen(title, f"code {error.code}\n{hint}"))
        else:
            self.push_screen(ErrorScreen("Something went wrong",
                                         f"{type(error).__name__}: {error}\n"
                                         "Press r to refresh; if it persists, report it."))

    async def action_quit(self) -> None:
        self.quitting = True
        self.workers.cancel_group(self, "connection")
        if self.backend is not None:
            await self.backend.close()
        self.exit()


def _reason(exc: BaseException) -> str:
    if isinstance(exc, FileNotFoundError):
        return "the socket file does not exist"
    if isinstance(exc, ConnectionRefusedError):
        return "the socket exists but nothing accepts connections"
    return f"{type(exc).__name__}: {exc}"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="memman tui", description="Watch and fix memman memory live.")
    p.add_argument("--socket", help="daemon socket (default: $MEMMAN_SOCKET or "
                                    "$XDG_RUNTIME_DIR/memman/memman.sock)")
    p.add_argument("--read-only", action="store_true",
                   help="disable every change: promote, evict, pin, compact, delete")
    p.add_argument("--refresh", type=float, default=None, metavar="SECONDS",
                   help="refresh interval (default 1; + and - change it live)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    settings = Settings.from_env(socket=args.socket or os.environ.get("MEMMAN_SOCKET"),
                                 read_only=args.read_only or None, refresh_s=args.refresh)
    app = MemmanApp(settings)
    app.run()
    return 0 if app.return_code in (None, 0) else int(app.return_code)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main(sys.argv[1:]))

