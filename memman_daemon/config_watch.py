"""Reload the config file when it changes (watchfiles).

The daemon's ``Config`` object is shared by every component; a reload copies the new values
into its section objects in place, so everyone sees them at their next read. The socket and
data dir are fixed for the daemon's life: a file that names others is logged as "restart
needed" and they are not applied. A file that fails to parse, or that is not a regular file (a
FIFO, a directory: ``memman.config.read_toml``), is reported and the old values stay. The file
is read on a worker thread, never on the event loop. An error in the watcher itself is logged
and the watch starts again; closing it always completes.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import watchfiles

from memman import paths
from memman.config import Config, read_toml

if TYPE_CHECKING:
    from memman_daemon.events import EventBus

log = logging.getLogger(__name__)

#: after the watch itself failed (its directory went away, say): wait this long, then again
RETRY_S = 1.0


class ConfigWatcher:
    def __init__(self, config: Config, events: EventBus) -> None:
        self.config, self.events = config, events  #: the config is changed in place on reload
        self.path = Path(config.config_file or paths.config_path()).absolute()
        self.reloads = 0
        self.last_error: str | None = None
        self.watch_errors = 0
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()

    async def start(self) -> None:
        directory = self.path.parent
        if not directory.is_dir():
            return  # nothing to watch; a config created later needs a restart
        self._stop.clear()
        self._task = asyncio.create_task(self._watch(directory), name="memman-config-watch")

    async def close(self) -> None:
        self._stop.set()
        if self._task is not None:
            self._task.cancel()
            # whatever the watch died of, shutting down goes on
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None

    async def _watch(self, directory: Path) -> None:
        target = str(self.path)
        while not self._stop.is_set():
            try:
                # only the config file: other files in its folder (a log, say) must not wake us
                async for _changes in watchfiles.awatch(
                        directory, stop_event=self._stop, debounce=200, step=50,
                        recursive=False, watch_filter=lambda _c, p: p == target):
                    await self.reload_off_loop()
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - logged; the watch goes on
                self.watch_errors += 1
                self.last_error = f"watching {directory} failed: {exc}"
                log.error("config watch: %s; watching again in %.0f s", self.last_error,
                          RETRY_S)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), RETRY_S)

    def _load(self) -> tuple[Config, dict[str, Any]]:
        """The file's values (and its top-level socket / data_dir, as written)."""
        cfg = self.config
        raw = read_toml(self.path)
        fresh = Config.load(self.path, socket=cfg.socket, data_dir=cfg.data_dir)
        return fresh, {k: raw[k] for k in ("socket", "data_dir") if k in raw}

    async def reload_off_loop(self) -> bool:
        """``reload`` with the file read on a worker thread."""
        try:
            loaded = await asyncio.to_thread(self._load)
        except Exception as exc:  # noqa: BLE001 - reported, old values kept
            return self._failed(exc)
        return self._apply(*loaded)

    def reload(self) -> bool:
        """Apply the file's current values; False (and the old values kept) if it is invalid."""
        try:
            loaded = self._load()
        except Exception as exc:  # noqa: BLE001 - reported, old values kept
            return self._failed(exc)
        return self._apply(*loaded)

    def _failed(self, exc: Exception) -> bool:
        self.last_error = str(exc)
        log.error("config reload failed, keeping the old values: %s", exc)
        return False

    def _apply(self, fresh: Config, fixed: dict[str, Any]) -> bool:
        cfg = self.config
        running = {"socket": cfg.socket, "data_dir": cfg.data_dir}
        for key, value in fixed.items():
            if not isinstance(value, str) or Path(value).expanduser() != Path(running[key]):
                log.warning("config %s names %s = %r, but the daemon runs with %s; restart "
                            "needed to change it (not applied)", self.path, key, value,
                            running[key])
        for f in dataclasses.fields(cfg):
            old, new = getattr(cfg, f.name), getattr(fresh, f.name)
            if dataclasses.is_dataclass(old):
                for sf in dataclasses.fields(old):
                    setattr(old, sf.name, getattr(new, sf.name))
        self.reloads += 1
        self.last_error = None
        for warning in fresh.warnings:  # a removed option still set, an unknown variable
            log.warning("config: %s", warning)
        log.info("config reloaded from %s", self.path)
        self.events.publish("stats", "config_reloaded", {"path": str(self.path)})
        return True

    def stats(self) -> dict[str, object]:
        return {"path": str(self.path), "reloads": self.reloads, "last_error": self.last_error,
                "watch_errors": self.watch_errors}
