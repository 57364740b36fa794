"""Where records are kept: the local SQLite file, and optionally a shared PostgreSQL.

Sessions (entry log, summaries, cycles, tool cache, scratchpad) always live in the local SQLite
file (``storage/sqlite/``). The *shared* table groups -- user memory, documents and chunks,
agent.md, promotions, their audit and the recall index -- live in that same file by default,
or in PostgreSQL (``storage/postgres/``) when ``[storage] shared`` (env
``MEMMAN_STORAGE_SHARED``, flag ``--shared``) names one. ``backend_for(config)`` makes that
choice once, at start; nothing above this package asks which backend it got.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from memman.config import Config
from memman_daemon.events import EventBus
from memman_daemon.storage.agentmd import AgentMdStore
from memman_daemon.storage.audit import AuditStore
from memman_daemon.storage.docs import DocsStore
from memman_daemon.storage.memories import MemoryRows
from memman_daemon.storage.sqlite.store import ConstraintError, Store, StoreError

__all__ = ["ConstraintError", "Storage", "StoreError", "backend_for"]

SCHEMES = ("postgresql://", "postgres://")


@dataclass
class Storage:
    """The chosen backend for the shared table groups."""

    name: str  #: "sqlite" or "postgresql"
    store: Any  #: LocalShared or PgStore (a component of the app, stats key "shared")
    events: EventBus  #: with PostgreSQL, events cross daemons
    local: Store  #: the local SQLite file (sessions; with SQLite, the shared groups too)
    pg: Any = None  #: the PgStore, or None with SQLite
    # the table groups (storage/<group>.py) in the chosen backend; ``audit``: where changes
    # to the shared tiers are audited
    docs: DocsStore = None  # type: ignore[assignment]
    agent_md: AgentMdStore = None  # type: ignore[assignment]
    audit: AuditStore = None  # type: ignore[assignment]
    memories: MemoryRows = None  # type: ignore[assignment]  # set by backend_for
    #: the recall index's storage (``storage/recall.py``): local, or shared across hosts
    recall: Any = None

    async def write(self, ops: Iterable[Any]) -> None:
        """Commit the operations of the shared table groups in one transaction: ``Op``
        (``(sql, params)`` for the local file) and, with PostgreSQL, ``PgOp``. With PostgreSQL
        the shared part commits first (the record of the change), then the local part (a
        snippet's "promoted" mark, say). A row refused by a unique index raises
        ``ConstraintError`` on either backend: another writer got there first."""
        if self.pg is None:
            await self.local.write(list(ops))
            return
        from memman_daemon.storage.postgres.ops import write_mixed
        await write_mixed(self.pg, self.local, ops)


def backend_for(config: Config, local: Store, *, read_only: bool = False) -> Storage:
    dsn = config.storage.shared.strip()
    if not dsn:
        from memman_daemon.storage.sqlite.agentmd import SqliteAgentMd
        from memman_daemon.storage.sqlite.audit import SqliteAudit
        from memman_daemon.storage.sqlite.docs import SqliteDocs
        from memman_daemon.storage.sqlite.memories import SqliteMemories
        from memman_daemon.storage.sqlite.recall import LocalRecall
        from memman_daemon.storage.sqlite.shared import LocalShared
        return Storage("sqlite", LocalShared(), EventBus(), local, docs=SqliteDocs(local),
                       agent_md=SqliteAgentMd(local), audit=SqliteAudit(local),
                       memories=SqliteMemories(local), recall=LocalRecall(local))
    if not dsn.startswith(SCHEMES):
        raise ValueError(f"storage.shared must be a postgresql://... URL (or empty for the "
                         f"local SQLite file), not {dsn[:40]!r}")
    from memman_daemon.storage.postgres.agentmd import PgAgentMd
    from memman_daemon.storage.postgres.audit import PgAudit
    from memman_daemon.storage.postgres.docs import PgDocs
    from memman_daemon.storage.postgres.events import SharedEventBus
    from memman_daemon.storage.postgres.memories import PgMemories
    from memman_daemon.storage.postgres.pool import PgStore

    s = config.storage
    store = PgStore(dsn, timeout_s=s.shared_timeout_s, pool_size=s.shared_pool_size,
                    backoff_max_s=s.shared_backoff_max_s)
    bus = SharedEventBus(send=store.notify, origin=store.origin)
    from memman_daemon.storage.postgres.recall import SharedRecall
    store.on_notify = bus.receive
    return Storage("postgresql", store, bus, local, store, docs=PgDocs(store),
                   agent_md=PgAgentMd(store), audit=PgAudit(store), memories=PgMemories(store),
                   recall=SharedRecall(store, bus, local, publish=not read_only))
