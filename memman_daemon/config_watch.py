"""Reload the config file when it changes (watchfiles).

The daemon's ``Config`` object is shared by every component; a reload copies the new values
into its section objects in place, so everyone sees them at their next read. The socket and
data dir are fixed for the daemon's life (changing them needs a restart, and the log says so).
A file that fails to parse is reported and the old values stay.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from pathlib import Path
from typing import TYPE_CHECKING

import watchfiles

from memman import paths
from memman.config import Config

if TYPE_CHECKING:
    from memman_daemon.events import EventBus

log = logging.getLogger(__name__)


class ConfigWatcher:
    def __init__(self, config: Config, events: EventBus) -> None:
        self.config, self.events = config, events  #: the config is changed in place on reload
        self.path = Path(config.config_file or paths.config_path()).absolute()
        self.reloads = 0
        self.last_error: str | None = None
        self._task: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()

    async def start(self) -> None:
        directory = self.path.parent
        if not directory.is_dir():
            return  # nothing to watch; a config created later needs a restart
        self._task = asyncio.create_task(self._watch(directory), name="memman-config-watch")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _watch(self, directory: Path) -> None:
        stop = asyncio.Event()
        target = str(self.path)
        # only the config file: other files in its folder (a log, say) must not wake us
        async for _changes in watchfiles.awatch(directory, stop_event=stop, debounce=200,
                                                step=50, recursive=False,
                                                watch_filter=lambda _c, p: p == target):
            self.reload()

    def reload(self) -> bool:
        """Apply the file's current values; False (and the old values kept) if it is invalid."""
        cfg = self.config
        try:
            fresh = Config.load(self.path, socket=cfg.socket, data_dir=cfg.data_dir)
        except ValueError as exc:
            self.last_error = str(exc)
            log.error("config reload failed, keeping the old values: %s", exc)
            return False
        for f in dataclasses.fields(cfg):
            old, new = getattr(cfg, f.name), getattr(fresh, f.name)
            if dataclasses.is_dataclass(old):
                for sf in dataclasses.fields(old):
                    setattr(old, sf.name, getattr(new, sf.name))
        self.reloads += 1
        self.last_error = None
        log.info("config reloaded from %s", self.path)
        self.events.publish("stats", "config_reloaded", {"path": str(self.path)})
        return True

    def stats(self) -> dict[str, object]:
        return {"path": str(self.path), "reloads": self.reloads, "last_error": self.last_error}
