"""TUI settings: one plain object, read from flags and ``MEMMAN_TUI_*`` environment variables."""

from __future__ import annotations

import os
from dataclasses import dataclass

ENV_PREFIX = "MEMMAN_TUI_"

#: refresh intervals `+` / `-` step through (seconds)
RATES: tuple[float, ...] = (0.25, 0.5, 1.0, 2.0, 5.0)


@dataclass
class Settings:
    """What the app needs to start; the running app only reads it."""

    socket: str | None = None  #: daemon socket; None = memman.paths default
    read_only: bool = False  #: disable every change (promote, evict, pin, compact, delete)
    refresh_s: float = 1.0  #: seconds between repaints of live data
    log_size: int = 500  #: lines kept in the event log
    max_pending: int = 5000  #: events buffered per tick before a full resync replaces them
    start_daemon_cmd: tuple[str, ...] | None = None  #: how "start one" launches a daemon
    export_dir: str | None = None  #: where `w` writes the context as JSON (None: the current dir)
    series_points: int = 48  #: points of each session's usage series the overview sparkline shows

    @classmethod
    def from_env(cls, **overrides: object) -> Settings:
        s = cls()
        if v := os.environ.get(ENV_PREFIX + "REFRESH_S"):
            s.refresh_s = float(v)
        if v := os.environ.get(ENV_PREFIX + "READ_ONLY"):
            s.read_only = v.lower() in ("1", "true", "yes")
        if v := os.environ.get(ENV_PREFIX + "LOG_SIZE"):
            s.log_size = int(v)
        if v := os.environ.get(ENV_PREFIX + "EXPORT_DIR"):
            s.export_dir = v
        for key, value in overrides.items():
            if value is not None:
                setattr(s, key, value)
        return s
