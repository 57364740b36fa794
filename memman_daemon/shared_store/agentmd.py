"""agent.md with a shared store: the content lives in PostgreSQL, each host's file follows it.

- The shared row (``agent_md``: content, hash, updated_at, updated_by, version) is the truth;
  the tenant's ``agent.md`` document (chunks, vectors) is written in the same transaction.
- Each daemon regenerates its local file from the row (atomically, as before) when the row
  changes: at start, after a reconnection, and when another daemon's event says so.
- An edit on disk is imported: the file's hash differs from what this daemon last synced and,
  if the shared row changed since as well, the file is the newer of the two (its mtime against
  the row's ``updated_at``, wall clock) — last writer wins. The import is audited (action
  ``import``) in the same transaction.
- A promotion to business (and an import of the file) edits the shared row under a
  transaction-scoped advisory lock on the tenant (``TENANT_LOCK``), taken before the row is
  read: a row lock (``SELECT ... FOR UPDATE``) locks nothing while the tenant has no row yet,
  and the second ``INSERT ... ON CONFLICT DO UPDATE`` then overwrote the first writer. So two
  daemons promoting at once are serialized by the database: the second sees the first's line
  (and gets -32002 with it for the same key, unless it asked to replace).
- A deleted file is regenerated from the shared row. Removing the ``agent.md`` document
  (``memman_docs_delete`` / ``memman_docs_remove``) removes the shared content, and each host
  then deletes its file (unless it was edited there meanwhile: then that edit is imported).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import asyncpg

from memman.errors import MemmanError
from memman_daemon.storage.postgres.ops import execute
from memman_daemon.tiers.agentmd import (
    DOC_ID,
    HEADER,
    AgentMd,
    atomic_write,
    edit_text,
    read_agent_md,
)

if TYPE_CHECKING:
    from memman_daemon.shared_store.docs import PgBusinessDocs
    from memman_daemon.storage.postgres.pool import PgStore
    from memman_daemon.tiers.audit import Recorder

log = logging.getLogger(__name__)

#: serializes the writers of one tenant's agent.md across daemons, row or no row (released at
#: the end of the transaction)
TENANT_LOCK = "SELECT pg_advisory_xact_lock(hashtext('memman.agent_md:' || $1::text))"


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


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


class PgAgentMd(AgentMd):
    """agent.md kept in PostgreSQL, each host's file in line with it: ``AgentMd``'s
    arguments, the shared store and the shared audit (imports are audited)."""

    docs: PgBusinessDocs

    def __init__(self, *args: Any, pg: PgStore, audit: Recorder, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.pg = pg
        self.audit = audit
        #: hash of the file content this daemon last read from or wrote to disk, per tenant
        self._known: dict[str, str] = {}
        self.imports = 0
        self.regenerated = 0

    async def load(self) -> None:
        if self.read_only:
            return
        self.pg.on_up.append(self.rescan)
        await super().load()

    def stats(self) -> dict[str, Any]:
        return {**super().stats(), "imports": self.imports, "regenerated": self.regenerated}

    async def rescan(self) -> None:
        tenants = {t for p in self._existing() if (t := self.tenant_of(str(p)))}
        try:
            rows = await self.pg.fetch("SELECT tenant_id FROM agent_md")
        except MemmanError:
            rows = []  # down: done again when it is back
        one_file = "{tenant}" not in self.template
        tenants |= {r[0] for r in rows if not one_file or r[0] == "default"}
        for tenant in sorted(tenants):
            try:
                await self.ingest(tenant)
            except MemmanError as exc:
                log.info("agent.md of tenant %s not synced now: %s", tenant, exc.message)
            except Exception:
                log.exception("syncing agent.md of tenant %s failed", tenant)

    async def removed(self, tenant_id: str) -> None:
        """The tenant's agent.md document was removed from the shared store: this host's
        file follows now, the others' on the event."""
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

    # --- sync ----------------------------------------------------------------------------
    async def _ingest(self, tenant_id: str) -> dict[str, Any]:
        path = self.path(tenant_id)
        text, mtime = await asyncio.to_thread(_read, path, self.config.docs.agent_md_max_bytes)
        row = await self.pg.fetchrow(
            "SELECT content, hash, updated_at FROM agent_md WHERE tenant_id=$1", tenant_id)
        fh = sha(text) if text is not None else None
        if row is None:
            if text is None or not text.strip():
                return {"changed": False, "chunks": 0}
            if fh == self._known.get(tenant_id):  # removed from the shared store: follow
                await asyncio.to_thread(_unlink, path)
                self._known.pop(tenant_id, None)
                return {"changed": True, "chunks": 0, "removed": True}
            return await self._import(tenant_id, path, text)
        content, shared_hash, updated_at = row
        if fh == shared_hash:
            self._known[tenant_id] = fh
            return {"changed": False, "chunks": 0}
        known = self._known.get(tenant_id)
        edited = text is not None and text.strip() != "" and fh != known
        if edited and known != shared_hash:
            # both the file and the shared copy changed since this daemon last synced (or it
            # has not synced yet): the later write wins
            edited = mtime >= updated_at
        if edited:
            assert text is not None
            return await self._import(tenant_id, path, text)
        await self._regenerate(tenant_id, path, content)
        return {"changed": False, "chunks": 0, "regenerated": True}

    async def _regenerate(self, tenant_id: str, path: Path, content: str) -> None:
        await asyncio.to_thread(atomic_write, path, content)
        self._known[tenant_id] = sha(content)
        self.regenerated += 1

    async def _put_shared(self, conn: Any, tenant_id: str, path: Path, text: str
                          ) -> tuple[Any, bool, bool, bool]:
        """The shared row and the ``agent.md`` document, inside the caller's transaction."""
        await conn.execute(
            "INSERT INTO agent_md(tenant_id, content, hash, updated_at, updated_by) "
            "VALUES ($1,$2,$3,$4,$5) ON CONFLICT (tenant_id) DO UPDATE SET "
            "content=EXCLUDED.content, hash=EXCLUDED.hash, updated_at=EXCLUDED.updated_at, "
            "updated_by=EXCLUDED.updated_by, version=agent_md.version + 1",
            tenant_id, text, sha(text), time.time(), self.pg.origin)
        return await self.docs.put(conn, tenant_id, {
            "doc_id": DOC_ID, "title": "agent.md", "source": str(path), "content": text})

    def _published(self, tenant_id: str, path: Path, d: Any, replaced: bool, vecs: bool) -> None:
        self.docs._publish("updated" if replaced else "added", tenant_id,
                                doc=d.to_wire(), vectors=vecs)
        self.events.publish("docs", "agent_md_ingested",
                                 {"path": str(path), "changed": True, "chunks": d.chunks},
                                 tenant_id=tenant_id)

    async def _import(self, tenant_id: str, path: Path, text: str) -> dict[str, Any]:
        """The file on disk is the newest write: make it the shared content (audited)."""
        await self.pg.ensure_ids(1)
        audit = self.audit

        async def tx(conn: Any) -> tuple[Any, bool, bool, bool]:
            await conn.execute(TENANT_LOCK, tenant_id)
            res = await self._put_shared(conn, tenant_id, path, text)
            _, aop = audit.record("import", text[:2000], f"file:{path}", f"agent.md:{tenant_id}",
                                  "agent.md", tenant_id=tenant_id, hash=sha(text))
            await execute(conn, [aop])
            return res

        d, changed, replaced, vecs = await self._run_retrying(tx)
        self._known[tenant_id] = sha(text)
        self.ingests += 1
        self.imports += 1
        if changed:
            self._published(tenant_id, path, d, replaced, vecs)
        return {"changed": changed, "chunks": d.chunks}

    async def _run_retrying(self, tx: Any) -> Any:
        for attempt in range(3):
            try:
                return await self.pg.run(tx)
            except asyncpg.UniqueViolationError:  # a first row written by another daemon
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    async def append(self, tenant_id: str, text: str, *, key: str | None = None,
                     replace: bool = False) -> dict[str, Any]:
        await self.pg.ensure_ids(1)  # for the promotion's audit record
        async with self._lock(tenant_id):
            path = self.path(tenant_id)
            local, _ = await asyncio.to_thread(_read, path, self.config.docs.agent_md_max_bytes)

            async def tx(conn: Any) -> tuple[str | None, str | None, Any]:
                await conn.execute(TENANT_LOCK, tenant_id)  # before the read: row or no row
                row = await conn.fetchrow(
                    "SELECT content FROM agent_md WHERE tenant_id=$1 FOR UPDATE", tenant_id)
                current = row[0] if row else (local if local and local.strip() else HEADER)
                new, previous = edit_text(current, tenant_id, text, key=key, replace=replace)
                if new is None:
                    return None, previous, None
                return new, previous, await self._put_shared(conn, tenant_id, path, new)

            new, previous, res = await self._run_retrying(tx)
            if new is None:
                return {"path": str(path), "changed": False, "previous": previous}
            await self._regenerate(tenant_id, path, new)
            self.ingests += 1
            d, changed, replaced, vecs = res
            if changed:
                self._published(tenant_id, path, d, replaced, vecs)
            return {"path": str(path), "changed": True, "previous": previous}
