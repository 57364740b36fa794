"""What the app hands down to every monitor screen (data down; actions go up as messages).

A screen is built with the app's one :class:`Feed` and reads what it shows from it: the live
state the subscription keeps, the daemon's typed methods for its own reads (None while
disconnected), the settings, the clock, and the connection's state for its banner. It never
names the app and never changes the daemon's state itself: a change is a message the app
handles once, through :mod:`memman_tui.actions`.

No textual import here: plain data, like :mod:`memman_tui.live`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from memman_tui.backend import Backend
from memman_tui.live import LiveState
from memman_tui.settings import Settings


@dataclass
class Feed:
    """The app's state a screen shows. The app writes it; the one exception is a session
    screen's first fetch, which fills in that session's past (``LiveState.load_series``,
    ``load_evictions``) before it draws."""

    live: LiveState  #: sessions, series, counts and the event log, kept by the events
    settings: Settings
    clock: Callable[[], float]
    backend: Backend | None = None  #: for the screen's own reads; None while disconnected
    connection_text: str = ""  #: "" when connected, else what the banner says
    paused: bool = False  #: z: nothing fetched is applied while paused
