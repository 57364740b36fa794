"""agent.md per tenant (the three-tier design): the hand-written cold-start context, kept searchable.

The file's path comes from ``Config.agent_md_path(tenant)`` (``[docs] agent_md``, a template
with ``{tenant}``; by default ``<data>/tenants/{tenant}/agent.md``). A tenant id is a name, not a
path: it becomes one file-name component through ``memman.paths.id_to_filename`` (``/``,
``..``, a leading ``.`` and every other odd byte are %-escaped), and a path that would still
resolve outside its root (a symlinked tenant directory) is refused. At start every existing
agent.md is ingested as the tenant's document ``agent.md``; then the directory above the
``{tenant}`` part is watched with watchfiles (50 ms debounce), so an edit on disk is
re-ingested well within a second. A deleted file removes the document.

Promotion to business appends to agent.md atomically — the new content goes to a temporary
file in the same directory, is fsynced, and replaces the old one with ``os.replace`` — then
ingests it at once (the watcher sees the same content and skips it). With a ``key`` the line
is ``- **key**: text`` and a different existing line for that key is a conflict unless
replaced.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memman.errors import CONFLICT, FORBIDDEN, MemmanError
from memman.files import NotARegularFile, read_regular
from memman.paths import filename_to_id, id_to_filename
from memman_daemon.component import Component

if TYPE_CHECKING:
    from memman.config import Config
    from memman_daemon.events import EventBus
    from memman_daemon.tiers.docs import BusinessDocs

log = logging.getLogger(__name__)

DOC_ID = "agent.md"
HEADER = "# agent.md\n\nBusiness context for this tenant. memman appends promoted snippets below.\n"


def _key_line(key: str, text: str) -> str:
    return f"- **{key}**: {' '.join(text.split())}"


def _key_pattern(key: str) -> re.Pattern[str]:
    return re.compile(rf"^- \*\*{re.escape(key)}\*\*: (.*)$", re.MULTILINE)


def edit_text(current: str, tenant_id: str, text: str, *, key: str | None,
              replace: bool) -> tuple[str | None, str | None]:
    """agent.md ``current`` with ``text`` appended (``- text``) or set as ``key``'s line.

    Returns ``(new, previous)``: ``new`` None when nothing changes; CONFLICT when ``key``
    already says something else and ``replace`` is false."""
    flat = " ".join(text.split())
    line = _key_line(key, text) if key else f"- {flat}"
    if key:
        m = _key_pattern(key).search(current)
        if m is None:
            return current.rstrip("\n") + "\n" + line + "\n", None
        previous = m.group(1)
        if previous == flat:
            return None, previous
        if not replace:
            raise MemmanError(CONFLICT, f"agent.md of tenant {tenant_id!r} already says "
                              f"{key!r} is {previous!r}; the promoted text differs. Pass "
                              "replace=true to overwrite that line",
                              {"key": key, "existing": previous, "proposed": flat})
        return current[:m.start()] + line + current[m.end():], previous
    if line in current.splitlines():
        return None, None
    return current.rstrip("\n") + "\n" + line + "\n", None


def read_agent_md(path: Path, max_bytes: int) -> str | None:
    """The file's text, None when there is none. Never blocks (a FIFO is refused, not waited
    on: ``memman.files.read_regular``); anything but a regular UTF-8 file of at most
    ``max_bytes`` raises ``AgentMdUnreadable`` saying what is wrong. Call it off the loop."""
    try:
        data = read_regular(path, max_bytes, "agent.md", "docs.agent_md_max_bytes")
    except FileNotFoundError:
        return None
    except NotARegularFile as exc:
        raise AgentMdUnreadable(str(exc)) from None
    except OSError as exc:
        raise AgentMdUnreadable(f"agent.md {path} cannot be read: {exc.strerror or exc}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise AgentMdUnreadable(f"agent.md {path} is not UTF-8 text (byte {exc.start} is not); "
                                "fix the file or move it aside") from None


class AgentMdUnreadable(MemmanError):
    """The tenant's agent.md is there but cannot be used as text (-32002: fix the file)."""

    def __init__(self, message: str) -> None:
        super().__init__(CONFLICT, message)


def atomic_write(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` so a reader sees the old file or the new, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".agent.md.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    dfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


class AgentMd(Component):
    """Each tenant's agent.md file: ingested into ``docs`` when it changes, appended to by
    promotions."""

    stats_key = "agent_md"

    def __init__(self, config: Config, events: EventBus, docs: BusinessDocs, *,
                 read_only: bool = False) -> None:
        self.config = config
        self.events = events
        self.docs = docs
        self.read_only = read_only
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._locks: dict[str, asyncio.Lock] = {}
        self._names: dict[str, str] = {}  #: file-name component -> tenant id (shortened ones)
        self.ingests = 0
        self.unreadable = 0  #: agent.md files refused (not a regular file, too large, not UTF-8)
        self.watch_errors = 0  #: times the watcher failed and was started again
        self.watching: str | None = None
        template = config.docs.agent_md or str(
            config.data_dir / "tenants" / "{tenant}" / "agent.md")
        self.template = template
        if "{tenant}" in template:
            prefix = template[:template.index("{tenant}")]
            self.root = Path(prefix) if prefix.endswith(os.sep) else Path(prefix).parent
            self.pattern = re.compile(
                "^" + re.escape(template).replace(re.escape("{tenant}"), "(?P<tenant>[^/]+)") + "$")
            # any path at or under a tenant's part of the template (e.g. a new tenant dir)
            self.under = re.compile("^" + re.escape(prefix) + "(?P<tenant>[^/]+)(/|$)")
        else:  # one file for every tenant: it is the "default" tenant's
            self.root = Path(template).parent
            self.pattern = re.compile("^" + re.escape(template) + "$")
            self.under = self.pattern

    def path(self, tenant_id: str) -> Path:
        """The tenant's agent.md; never outside the root of the template (-32005)."""
        self._names[id_to_filename(tenant_id)] = tenant_id
        p = self.config.agent_md_path(tenant_id)
        if "{tenant}" in self.template:
            root = os.path.realpath(self.root)
            real = os.path.realpath(p)
            if not real.startswith(root.rstrip(os.sep) + os.sep):
                raise MemmanError(FORBIDDEN, f"agent.md of tenant {tenant_id!r} would be "
                                  f"{real}, outside {root}; refusing to read or write it "
                                  "(a symlink in the tenants directory?)")
        return p

    def tenant_of(self, path: str) -> str | None:
        """The tenant whose agent.md is, or whose agent.md may be under, ``path``."""
        m = self.pattern.match(path) or self.under.match(path)
        if m is None:
            return None
        component = m.groupdict().get("tenant")
        if component is None:
            return "default"
        return filename_to_id(component) or self._names.get(component)

    def _lock(self, tenant_id: str) -> asyncio.Lock:
        return self._locks.setdefault(tenant_id, asyncio.Lock())

    async def read(self, path: Path) -> str | None:
        """``read_agent_md`` on a worker thread, with the configured cap."""
        return await asyncio.to_thread(read_agent_md, path, self.config.docs.agent_md_max_bytes)

    # --- lifecycle -----------------------------------------------------------------------
    async def load(self) -> None:
        if self.read_only:  # a read-only daemon writes nothing, ingestion included
            return
        self.root.mkdir(parents=True, exist_ok=True)
        await self.rescan()
        if self.config.docs.watch:
            self._stop.clear()
            self._task = asyncio.get_running_loop().create_task(self._watch(),
                                                                 name="memman-agent-md-watch")

    async def rescan(self) -> None:
        """Ingest every agent.md on disk whose content changed (unchanged ones cost a hash)."""
        for path in self._existing():
            tenant = self.tenant_of(str(path))
            if tenant:
                try:
                    await self.ingest(tenant)
                except Exception:
                    log.exception("ingesting %s failed", path)

    def _existing(self) -> list[Path]:
        if "{tenant}" not in self.template:
            p = Path(self.template)
            return [p] if p.exists() else []
        rest = self.template[len(str(self.root)):].lstrip(os.sep)
        return sorted(self.root.glob(rest.replace("{tenant}", "*")))

    async def close(self) -> None:
        self._stop.set()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None

    def stats(self) -> dict[str, Any]:
        return {"watching": self.watching, "ingests": self.ingests, "unreadable": self.unreadable,
                "watch_errors": self.watch_errors}

    async def _watch(self) -> None:
        """Watch until closed; a watch that fails (its directory removed, say) is logged and
        started again a second later."""
        while not self._stop.is_set():
            try:
                await self._watch_once()
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - logged; the watch goes on
                self.watch_errors += 1
                log.error("watching %s for agent.md changes failed: %s; watching again in 1 s",
                          self.root, exc)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), 1.0)
                with contextlib.suppress(OSError):
                    self.root.mkdir(parents=True, exist_ok=True)

    async def _watch_once(self) -> None:
        from watchfiles import awatch

        debounce = self.config.docs.watch_debounce_ms
        root_id = _identity(self.root)
        self.watching = str(self.root)
        first = True
        try:
            # yield_on_timeout: the first (empty) yield means the watches are in place; a
            # rescan then catches anything written between load() and that moment. It also
            # comes once a second, to see that the root is still the directory watched: a
            # removed (or replaced) root ends inotify's watch without a word
            async for changes in awatch(self.root, debounce=debounce, step=min(50, debounce),
                                        stop_event=self._stop, recursive=True,
                                        rust_timeout=1000, yield_on_timeout=True):
                if _identity(self.root) != root_id:
                    raise RuntimeError(f"{self.root} was removed or replaced")
                if first:
                    first = False
                    await self.rescan()
                # a change to a directory (a new tenant dir with its file in it) re-checks
                # that tenant's agent.md: the file may have appeared before its dir was watched
                tenants = {t for _, p in changes if (t := self.tenant_of(p))}
                for tenant in sorted(tenants):
                    try:
                        await self.ingest(tenant)
                    except Exception:
                        log.exception("re-ingesting agent.md of tenant %s failed", tenant)
        finally:
            self.watching = None

    # --- ingest and append ---------------------------------------------------------------
    async def ingest(self, tenant_id: str) -> dict[str, Any]:
        """Bring the tenant's ``agent.md`` document in line with the file on disk."""
        async with self._lock(tenant_id):
            return await self._ingest(tenant_id)

    async def _ingest(self, tenant_id: str) -> dict[str, Any]:
        docs = self.docs
        path = self.path(tenant_id)
        try:
            text = await self.read(path)
        except AgentMdUnreadable as exc:  # logged, the document kept as it was
            self.unreadable += 1
            log.error("agent.md of tenant %s not ingested: %s", tenant_id, exc.message)
            return {"changed": False, "chunks": 0, "error": exc.message}
        if text is None:
            if docs.get(tenant_id, DOC_ID) is not None:
                await docs.delete(tenant_id, DOC_ID)
                self.events.publish("docs", "agent_md_ingested",
                                         {"path": str(path), "changed": True, "chunks": 0,
                                          "removed": True}, tenant_id=tenant_id)
            return {"changed": False, "chunks": 0}
        if not text.strip():
            return {"changed": False, "chunks": 0}
        res = await docs.add(tenant_id, {"doc_id": DOC_ID, "title": "agent.md",
                                         "source": str(path), "content": text})
        if res["changed"]:
            self.ingests += 1
            self.events.publish("docs", "agent_md_ingested",
                                     {"path": str(path), "changed": True,
                                      "chunks": res["doc"]["chunks"]}, tenant_id=tenant_id)
        return {"changed": res["changed"], "chunks": res["doc"]["chunks"]}

    async def unappend(self, tenant_id: str, ref: str, text: str, previous: str | None) -> None:
        """Reverse a promotion to ``ref`` (``agent.md:<tenant>[#key]``) that appended
        ``text`` (``memman_undo``): a keyed line gets its ``previous`` text back, else the
        appended line is taken out; the file is ingested again."""
        key = ref.split("#", 1)[1] if "#" in ref else None
        if key and previous is not None:
            await self.append(tenant_id, previous, key=key, replace=True)
            return
        async with self._lock(tenant_id):
            path = self.path(tenant_id)
            current = await self.read(path)
            if current is None:
                return
            line = _key_line(key, text) if key else f"- {' '.join(text.split())}"
            lines = current.splitlines()
            if line not in lines:
                return
            lines.remove(line)
            await asyncio.to_thread(atomic_write, path, "\n".join(lines) + "\n")
            await self._ingest(tenant_id)

    async def append(self, tenant_id: str, text: str, *, key: str | None = None,
                     replace: bool = False) -> dict[str, Any]:
        """Append ``text`` (as ``- text`` or ``- **key**: text``) and ingest. Returns
        ``{path, changed, previous}``; identical text already present is no change."""
        async with self._lock(tenant_id):
            path = self.path(tenant_id)
            current = await self.read(path)
            if current is None:
                current = HEADER
            new, previous = edit_text(current, tenant_id, text, key=key, replace=replace)
            if new is None:
                return {"path": str(path), "changed": False, "previous": previous}
            await asyncio.to_thread(atomic_write, path, new)
            await self._ingest(tenant_id)
            return {"path": str(path), "changed": True, "previous": previous}
