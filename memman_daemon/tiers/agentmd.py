"""agent.md per tenant (the three-tier design): the hand-written cold-start context, kept searchable.

The file's path comes from ``Config.agent_md_path(tenant)`` (``[docs] agent_md``, a template
with ``{tenant}``; by default ``<data>/tenants/{tenant}/agent.md``). A tenant id is a name, not a
path: it becomes one file-name component through ``memman.paths.id_to_filename`` (``/``,
``..``, a leading ``.`` and every other odd byte are %-escaped), and a path that would still
resolve outside its root (a symlinked tenant directory) is refused. At start every existing
agent.md is ingested as the tenant's document ``agent.md``; then the directory above the
``{tenant}`` part is watched with watchfiles (50 ms debounce), so an edit on disk is
re-ingested well within a second. Each tick of the watcher (at least once a second) also
compares every tenant's path with the version last read or written here (inode, size, mtime):
a change whose event was lost — watchfiles drops one that lands as its wait times out — and a
FIFO or directory replaced by a file are still ingested.

Written once over the agent.md group (``storage/agentmd.py``), which says where the content
is kept besides the file:

- In PostgreSQL, the shared row is the truth; the tenant's ``agent.md`` document (chunks,
  vectors) is written in the same transaction. Each host's file is regenerated from the row
  (atomically) when the row changes: at start, after a reconnection, and when another
  daemon's event says so; a deleted file is regenerated too.
- In the SQLite file there is no copy: the row read back is the document's hash, so a
  deleted file removes the document.
- An edit on disk is imported (audited ``import``, in the same transaction): the file's hash
  differs from what this daemon last synced and, if the row changed since as well, the file
  is the newer of the two (its mtime against the row's ``updated_at``, wall clock) — last
  writer wins.
- A promotion to business edits the content as last stored: the new content and the
  document commit together, naming the version they were made from, so of two daemons
  promoting at once the second edits again from the first's (and gets -32002 for the same
  key unless it asked to replace); then the file is replaced atomically (a temporary file in
  the same directory, fsynced, ``os.replace``). With a ``key`` the line is ``- **key**: text``
  and a different existing line for that key is a conflict unless replaced.
- Removing the ``agent.md`` document (``memman_docs_delete`` / ``memman_docs_remove``)
  removes the content, and each host then deletes its file (unless it was edited there
  meanwhile: then that edit is imported).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memman.errors import CONFLICT, FORBIDDEN, MemmanError
from memman.files import NotARegularFile, read_regular
from memman.paths import filename_to_id, id_to_filename
from memman_daemon.component import Component
from memman_daemon.storage import ConstraintError, StoreError
from memman_daemon.storage.agentmd import DOC_ID, AgentMdRow, sha

if TYPE_CHECKING:
    from memman.config import Config
    from memman_daemon.events import EventBus
    from memman_daemon.storage import Storage
    from memman_daemon.tiers.audit import Recorder
    from memman_daemon.tiers.docs import BusinessDocs, Prepared

log = logging.getLogger(__name__)

__all__ = ["DOC_ID", "HEADER", "AgentMd", "AgentMdUnreadable", "atomic_write", "edit_text"]
#: an edit made from content another writer changed meanwhile is made again, this many times
ATTEMPTS = 3
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


#: a text longer than this is hashed on a worker thread (sha256 of a 50 MB agent.md held
#: the loop ~0.2 s, three times per ingest)
HASH_OFF_LOOP_CHARS = 256 * 1024


async def _hash(text: str) -> str:
    return await asyncio.to_thread(sha, text) if len(text) > HASH_OFF_LOOP_CHARS else sha(text)


def atomic_write(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` so a reader sees the old file or the new, never half."""
    install(stage(path, text), path)


def stage(path: Path, text: str) -> str:
    """``text`` written and synced to a temporary file beside ``path`` (its name): what can
    fail for want of space or permission fails here, before anything is committed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".agent.md.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        discard(tmp)
        raise
    return tmp


def discard(tmp: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(tmp)


def install(tmp: str, path: Path) -> None:
    """Move a staged file into place (a rename: needs no space) and sync the directory."""
    try:
        os.replace(tmp, path)
    except BaseException:
        discard(tmp)
        raise
    dfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def _signature(path: Path) -> tuple[int, ...] | None:
    """What tells one version of the file at ``path`` from another (a FIFO or directory in its
    place included); None when there is nothing there."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _read(path: Path, max_bytes: int) -> tuple[str | None, float]:
    """The file's text and mtime (None, 0 when absent); ``AgentMdUnreadable`` otherwise."""
    text = read_agent_md(path, max_bytes)
    if text is None:
        return None, 0.0
    try:
        return text, path.stat().st_mtime
    except FileNotFoundError:
        return None, 0.0


def _unlink(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


def _without_line(current: str, line: str) -> str | None:
    lines = current.splitlines()
    if line not in lines:
        return None
    lines.remove(line)
    return "\n".join(lines) + "\n"


class AgentMd(Component):
    """Each tenant's agent.md file: ingested into ``docs`` when it changes, appended to by
    promotions."""

    stats_key = "agent_md"

    def __init__(self, config: Config, events: EventBus, docs: BusinessDocs, storage: Storage,
                 audit: Recorder, *, read_only: bool = False) -> None:
        self.config = config
        self.events = events
        self.docs = docs
        self.storage = storage
        self.rows = storage.agent_md
        self.audit = audit  #: where imports are audited (the shared audit with PostgreSQL)
        self.read_only = read_only
        #: hash of the file content this daemon last read from or wrote to disk, per tenant
        self._known: dict[str, str] = {}
        self.imports = 0
        self.regenerated = 0
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._locks: dict[str, asyncio.Lock] = {}
        self._names: dict[str, str] = {}  #: file-name component -> tenant id (shortened ones)
        #: per tenant, the version of its path last read (or written) here: the watcher's
        #: tick compares, so a change whose event was lost is still ingested
        self._seen: dict[str, tuple[int, ...] | None] = {}
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
        """Sync every agent.md on disk and every tenant with stored content (unchanged ones
        cost a hash)."""
        tenants = {t for p in self._existing() if (t := self.tenant_of(str(p)))}
        try:
            stored = await self.rows.tenants()
        except MemmanError:
            stored = []  # the shared store is down: done again when it is back
        one_file = "{tenant}" not in self.template
        tenants |= {t for t in stored if not one_file or t == "default"}
        for tenant in sorted(tenants):
            try:
                await self.ingest(tenant)
            except MemmanError as exc:
                log.info("agent.md of tenant %s not synced now: %s", tenant, exc.message)
            except Exception:
                log.exception("syncing agent.md of tenant %s failed", tenant)

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
                "watch_errors": self.watch_errors, "imports": self.imports,
                "regenerated": self.regenerated}

    async def removed(self, tenant_id: str) -> None:
        """The tenant's agent.md document was removed: this host's file follows now, the
        others' on the event."""
        self.events.publish("docs", "agent_md_ingested",
                            {"path": str(self.path(tenant_id)), "changed": True, "chunks": 0,
                             "removed": True}, tenant_id=tenant_id)
        await self.ingest(tenant_id)

    def on_remote(self, topic: str, kind: str, scope: dict[str, Any]) -> None:
        """Another daemon changed a tenant's agent.md: bring the local file in line."""
        tenant_id = scope.get("tenant_id")
        if topic == "docs" and kind == "agent_md_ingested" and tenant_id:
            asyncio.get_running_loop().create_task(self._quiet_ingest(tenant_id))

    async def _quiet_ingest(self, tenant_id: str) -> None:
        try:
            await self.ingest(tenant_id)
        except Exception as exc:
            log.info("agent.md of tenant %s not synced now: %s", tenant_id, exc)

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
                # every tick: a file that differs from the version last read is read again,
                # whether or not its event came (watchfiles drops one that lands as its wait
                # times out; a FIFO or directory replaced by a file must not stay unseen)
                tenants |= set(await asyncio.to_thread(self._changed))
                for tenant in sorted(tenants):
                    try:
                        await self.ingest(tenant)
                    except Exception:
                        log.exception("re-ingesting agent.md of tenant %s failed", tenant)
        finally:
            self.watching = None

    def _changed(self) -> list[str]:
        """Tenants whose agent.md is not the version last read here (a stat each; on a
        worker thread)."""
        tenants = set(self._seen)
        tenants |= {t for p in self._existing() if (t := self.tenant_of(str(p)))}
        out = []
        for tenant in tenants:
            try:
                path = self.path(tenant)
            except MemmanError:
                continue
            if tenant not in self._seen or _signature(path) != self._seen[tenant]:
                out.append(tenant)
        return out

    # --- sync ----------------------------------------------------------------------------
    async def ingest(self, tenant_id: str) -> dict[str, Any]:
        """Bring the tenant's file, its stored content and its ``agent.md`` document in line."""
        async with self._lock(tenant_id):
            return await self._ingest(tenant_id)

    async def _ingest(self, tenant_id: str) -> dict[str, Any]:
        path = self.path(tenant_id)
        # taken before the read: a file changed during it differs at the next tick
        self._seen[tenant_id] = await asyncio.to_thread(_signature, path)
        try:
            text, mtime = await asyncio.to_thread(_read, path,
                                                  self.config.docs.agent_md_max_bytes)
        except AgentMdUnreadable as exc:  # logged, the document kept as it was
            self.unreadable += 1
            log.error("agent.md of tenant %s not ingested: %s", tenant_id, exc.message)
            return {"changed": False, "chunks": 0, "error": exc.message}
        row = await self.rows.get(tenant_id)
        fh = await _hash(text) if text is not None else None
        blank = text is None or not text.strip()
        if row is None:
            if blank:
                return {"changed": False, "chunks": 0}
            if fh == self._known.get(tenant_id):  # removed since this daemon synced: follow
                await asyncio.to_thread(_unlink, path)
                self._known.pop(tenant_id, None)
                return {"changed": True, "chunks": 0, "removed": True}
            assert text is not None and fh is not None
            return await self._import(tenant_id, path, text, fh)
        if fh == row.hash:
            self._known[tenant_id] = row.hash
            return {"changed": False, "chunks": 0}
        if text is None and row.content is None:  # the file was the only copy: the document
            await self.docs.remove(tenant_id, DOC_ID, follow=False)  # goes with it
            self._known.pop(tenant_id, None)
            self.events.publish("docs", "agent_md_ingested",
                                {"path": str(path), "changed": True, "chunks": 0,
                                 "removed": True}, tenant_id=tenant_id)
            return {"changed": False, "chunks": 0}
        known = self._known.get(tenant_id)
        edited = not blank and fh != known
        if edited and known != row.hash:
            # both the file and the stored content changed since this daemon last synced (or
            # it has not synced yet): the later write wins
            edited = mtime >= row.updated_at
        if row.content is None or edited:
            if blank:
                return {"changed": False, "chunks": 0}
            assert text is not None and fh is not None
            return await self._import(tenant_id, path, text, fh)
        await self._regenerate(tenant_id, path, row.content)
        return {"changed": False, "chunks": 0, "regenerated": True}

    async def _regenerate(self, tenant_id: str, path: Path, content: str) -> None:
        await asyncio.to_thread(atomic_write, path, content)
        self._seen[tenant_id] = await asyncio.to_thread(_signature, path)  # written here
        self._known[tenant_id] = await _hash(content)
        self.regenerated += 1

    async def _commit(self, tenant_id: str, path: Path, text: str, read: AgentMdRow | None, *,
                      imported: Callable[[], list[Any]] | None = None) -> Prepared:
        """Store ``text`` as the content with its document, in one transaction: an edit made
        from ``read``, or (``imported``: the audit operations) the file's content, whatever
        is stored."""
        p = await self.docs.prepare(tenant_id, {"doc_id": DOC_ID, "title": "agent.md",
                                                "source": str(path), "content": text})
        force = imported is not None
        ops = [*self.rows.put_ops(tenant_id, text, time.time(), read, force=force),
               *p.ops, *(imported() if imported is not None else [])]
        await self.storage.write(ops)
        self.docs.committed(p)
        self.ingests += 1
        if p.changed:
            self.events.publish("docs", "agent_md_ingested",
                                {"path": str(path), "changed": True, "chunks": p.doc.chunks},
                                tenant_id=tenant_id)
        return p

    async def _import(self, tenant_id: str, path: Path, text: str, fh: str) -> dict[str, Any]:
        """The file on disk is the newest write: make it the stored content (audited);
        ``fh``: its hash (``sha(text)``, computed off the loop for a large file)."""
        await self.audit.ensure_ids(ATTEMPTS)

        def audited() -> list[Any]:
            _, aop = self.audit.record("import", text[:2000], f"file:{path}",
                                       f"agent.md:{tenant_id}", "agent.md", tenant_id=tenant_id,
                                       hash=fh)
            return [aop]

        for attempt in range(ATTEMPTS):
            try:
                p = await self._commit(tenant_id, path, text, None, imported=audited)
                break
            except ConstraintError:  # the document first written by another daemon
                if attempt == ATTEMPTS - 1:
                    raise
        self._known[tenant_id] = fh
        self.imports += 1
        return {"changed": p.changed, "chunks": p.doc.chunks}

    # --- edits -----------------------------------------------------------------------------
    async def _edit(self, tenant_id: str, change: Callable[[str], tuple[str | None, Any]]
                    ) -> tuple[Path, str | None, Any]:
        """Apply ``change`` (current content -> ``(new or None, answer)``) to the content as
        last stored (or the file, or ``HEADER``), commit it with its document and replace the
        file. Made again from the newer content when another writer got there first."""
        path = self.path(tenant_id)
        for attempt in range(ATTEMPTS):
            local, _ = await asyncio.to_thread(_read, path, self.config.docs.agent_md_max_bytes)
            row = await self.rows.get(tenant_id)
            current = row.content if row is not None and row.content is not None else (
                local if local and local.strip() else HEADER)
            new, answer = change(current)
            if new is None:
                return path, None, answer
            # the file is written before the commit and moved into place after it: a full or
            # read-only data dir refuses the edit with nothing stored (-32003), instead of a
            # stored edit answered as an internal error with the file left behind
            try:
                tmp = await asyncio.to_thread(stage, path, new)
            except OSError as exc:
                raise StoreError(f"agent.md {path} cannot be written ({exc}); nothing was "
                                 "changed. Free some space there or fix its permissions; the "
                                 "daemon keeps running.") from exc
            try:
                await self._commit(tenant_id, path, new, row)
                break
            except ConstraintError:
                await asyncio.to_thread(discard, tmp)
                if attempt == ATTEMPTS - 1:
                    raise
            except BaseException:
                await asyncio.to_thread(discard, tmp)
                raise
        assert new is not None
        await asyncio.to_thread(install, tmp, path)
        self._seen[tenant_id] = await asyncio.to_thread(_signature, path)  # written here
        self._known[tenant_id] = await _hash(new)
        self.regenerated += 1
        return path, new, answer

    async def unappend(self, tenant_id: str, ref: str, text: str, previous: str | None) -> None:
        """Reverse a promotion to ``ref`` (``agent.md:<tenant>[#key]``) that appended
        ``text`` (``memman_undo``): a keyed line gets its ``previous`` text back, else the
        appended line is taken out."""
        key = ref.split("#", 1)[1] if "#" in ref else None
        if key and previous is not None:
            await self.append(tenant_id, previous, key=key, replace=True)
            return
        line = _key_line(key, text) if key else f"- {' '.join(text.split())}"
        async with self._lock(tenant_id):
            await self._edit(tenant_id, lambda current: (_without_line(current, line), None))

    async def append(self, tenant_id: str, text: str, *, key: str | None = None,
                     replace: bool = False) -> dict[str, Any]:
        """Append ``text`` (as ``- text`` or ``- **key**: text``) and ingest. Returns
        ``{path, changed, previous}``; identical text already present is no change."""
        await self.audit.ensure_ids(1)  # for the promotion's audit record
        async with self._lock(tenant_id):
            path, new, previous = await self._edit(tenant_id, lambda current: edit_text(
                current, tenant_id, text, key=key, replace=replace))
            return {"path": str(path), "changed": new is not None, "previous": previous}
