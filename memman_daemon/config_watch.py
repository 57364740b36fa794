"""Reload the config file when it changes (watchfiles).

The daemon's ``Config`` object is shared by every component; a reload copies the new values
into its section objects in place, so everyone sees them at their next read. The socket and
data dir are fixed for the daemon's life: a file that names others is logged as "restart
needed" and they are not applied. A file that fails to parse, or that is not a regular file (a
FIFO, a directory, a file over ``CONFIG_MAX_BYTES``: ``memman.config.read_toml``), is reported
(the log, ``memman_stats`` ``config.last_error``, ``memman status``) and the old values stay.

A changed file is read only once it has stopped changing (the same size, mtime and inode over
``SETTLE_S``, before and after the read), so a file still being written is never applied
half-written; one that keeps changing is reported and read again at its next change. The file
is read once per reload, on a worker thread, never on the event loop. Besides watchfiles'
events the file is looked at every ``POLL_MS``: a change whose event was lost (watchfiles drops
one that lands as its timeout clears) is still applied. An error in the watcher itself is
logged and the watch starts again; closing it always completes.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
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
#: a changed file is applied once it stayed the same this long (an editor's save is done by
#: then; a 100 MB file written in chunks is not)
SETTLE_S = 0.3
#: waits for a file to stop changing before the reload is given up until its next change
SETTLE_TRIES = 20
#: the file is looked at this often without an event (milliseconds)
POLL_MS = 1000

#: what tells one version of the file from another: None when there is none
Signature = tuple[int, ...] | None


def signature(path: Path) -> Signature:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    except OSError:
        return (-1,)  # unreadable as a path: read_toml says why
    return (st.st_dev, st.st_ino, st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class ConfigWatcher:
    def __init__(self, config: Config, events: EventBus) -> None:
        self.config, self.events = config, events  #: the config is changed in place on reload
        self.path = Path(config.config_file or paths.config_path()).absolute()
        self.reloads = 0
        self.last_error: str | None = None
        self.watch_errors = 0
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        #: the version of the file last applied or refused (the poll compares against it)
        self._seen: Signature = None

    async def start(self) -> None:
        directory = self.path.parent
        if not directory.is_dir():
            return  # nothing to watch; a config created later needs a restart
        self._seen = await asyncio.to_thread(signature, self.path)  # the one loaded at start
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
                # only the config file: other files in its folder (a log, say) must not wake us;
                # an empty set every POLL_MS: the file is compared with the version last seen
                async for changes in watchfiles.awatch(
                        directory, stop_event=self._stop, debounce=200, step=50,
                        recursive=False, watch_filter=lambda _c, p: p == target,
                        rust_timeout=POLL_MS, yield_on_timeout=True):
                    if changes or await asyncio.to_thread(signature, self.path) != self._seen:
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
        """The file's values (and its top-level socket / data_dir, as written), from one read."""
        cfg = self.config
        raw = read_toml(self.path)
        fresh = Config.load(self.path, socket=cfg.socket, data_dir=cfg.data_dir, tables=raw)
        return fresh, {k: raw[k] for k in ("socket", "data_dir") if k in raw}

    def _load_settled(self, before: Signature) -> tuple[Signature, Any]:
        """``_load``'s values or exception, and the file's signature after the read (when it
        differs from ``before`` the file changed meanwhile and the read is not used)."""
        try:
            loaded: Any = self._load()
        except Exception as exc:  # noqa: BLE001 - handed back: applied or reported by the loop
            loaded = exc
        return signature(self.path), loaded

    async def reload_off_loop(self) -> bool:
        """``reload`` with the file read on a worker thread, once it has stopped changing:
        a file still being written is neither applied nor refused half-written."""
        for _ in range(SETTLE_TRIES):
            before = await asyncio.to_thread(signature, self.path)
            await asyncio.sleep(SETTLE_S)
            if await asyncio.to_thread(signature, self.path) != before:
                continue
            after, loaded = await asyncio.to_thread(self._load_settled, before)
            if after != before:
                continue
            self._seen = after
            if isinstance(loaded, Exception):
                return self._failed(loaded)
            return self._apply(*loaded)
        # still changing: the old values stay, and the poll (the version not yet seen) or
        # the next event reads it again
        self.last_error = (f"config file {self.path} kept changing for "
                           f"{SETTLE_S * SETTLE_TRIES:.0f} s; not applied yet")
        log.warning("config reload: %s", self.last_error)
        return False

    def reload(self) -> bool:
        """Apply the file's current values; False (and the old values kept) if it is invalid."""
        self._seen = signature(self.path)
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
