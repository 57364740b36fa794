"""What the app hands down to every monitor screen (data down; actions go up as messages).

A screen is built with the app's one :class:`Feed` and reads what it shows from it: the live
state the subscription keeps, the daemon's read methods for its own fetches (``reads``, None
while disconnected), the settings, the clock, and the connection's state for its banner. It never
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


class Reads:
    """The daemon's methods a screen may call: reads only, so a screen cannot change state
    by itself (a change is a message to the app)."""

    def __init__(self, backend: Backend) -> None:
        self.session_get = backend.session_get
        self.session_series = backend.session_series
        self.session_expand = backend.session_expand
        self.sent_view = backend.sent_view
        self.audit_list = backend.audit_list
        self.cache_list = backend.cache_list
        self.scratchpad_candidates = backend.scratchpad_candidates
        self.memory_list = backend.memory_list
        self.memory_search = backend.memory_search
        self.docs_list = backend.docs_list
        self.docs_search = backend.docs_search
        self.clients_list = backend.clients_list


@dataclass
class Feed:
    """The app's state a screen shows. The app writes it; the one exception is a session
    screen's first fetch, which fills in that session's past (``LiveState.load_series``,
    ``load_evictions``) before it draws."""

    live: LiveState  #: sessions, series, counts and the event log, kept by the events
    settings: Settings
    clock: Callable[[], float]
    #: the connection's typed methods (the app's and its actions'); None while disconnected
    backend: Backend | None = None
    connection_text: str = ""  #: "" when connected, else what the banner says
    paused: bool = False  #: z: nothing fetched is applied while paused

    @property
    def reads(self) -> Reads | None:
        """What a screen fetches for itself through: the backend's reads only."""
        return None if self.backend is None else Reads(self.backend)
