"""Where the shared tiers live: the local SQLite file (default) or PostgreSQL.

User memory, business context (documents, chunks, agent.md), promotions and the audit of
their changes are the *shared* tiers; sessions (entry log, summaries, cycles, tool cache,
scratchpad) always stay in the local SQLite file. ``[storage] shared`` (env
``MEMMAN_STORAGE_SHARED``, flag ``--shared``) chooses, once, at start:

- empty: ``LocalShared`` and the tier classes of ``memman_daemon.tiers`` — one SQLite file;
- ``postgresql://...``: ``PgStore``; user memory's tier is still a subclass in this package.
  Documents, agent.md and the audit are the same classes on both, over the storage groups
  ``backend_for`` chose. Every daemon naming the same database shares them.

``Backend`` is that choice: the store component, the event bus, the shared audit and one
constructor per shared tier. ``connect`` ties the parts together once the tiers exist.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from memman_daemon.clock import Clock
from memman_daemon.events import EventBus
from memman_daemon.storage import Storage
from memman_daemon.storage.sqlite.audit import SqliteAudit
from memman_daemon.tiers.agentmd import AgentMd
from memman_daemon.tiers.audit import AuditLog, MergedAuditLog
from memman_daemon.tiers.docs import BusinessDocs
from memman_daemon.tiers.user_memory import UserMemory


@dataclass
class Backend:
    name: str  #: "sqlite" or "postgresql"
    store: Any  #: LocalShared or PgStore (a component of the app, stats key "shared")
    events: EventBus
    #: the audit log: records session-tier actions locally, lists all
    audit: AuditLog | MergedAuditLog
    shared_audit: AuditLog | None  #: where shared-tier changes are audited (None: ``audit``)
    user_memory: Callable[..., UserMemory]  #: takes ``UserMemory``'s arguments
    docs: Callable[..., BusinessDocs]  #: takes ``BusinessDocs``' arguments
    agent_md: Callable[..., AgentMd]  #: takes ``AgentMd``'s arguments


def tiers_for(storage: Storage, clock: Clock) -> Backend:
    if storage.pg is None:
        return Backend("sqlite", storage.store, storage.events, AuditLog(storage.audit, clock),
                       None, UserMemory, BusinessDocs, AgentMd)
    from memman_daemon.shared_store.user_memory import PgUserMemory

    store = storage.pg
    shared_audit = AuditLog(storage.audit, clock, stats_key="shared_audit")
    audit = MergedAuditLog(AuditLog(SqliteAudit(storage.local), clock), shared_audit)
    return Backend("postgresql", store, storage.events, audit, shared_audit,
                   partial(PgUserMemory, pg=store), BusinessDocs, AgentMd)


def connect(backend: Backend, user_memory: Any, docs: BusinessDocs, agent_md: AgentMd) -> None:
    """Once the tiers exist: a removed agent.md document removes the file here too. With
    PostgreSQL, state changes become ``stats`` events and drop what was read of the documents
    (other daemons' events of an outage are lost); other daemons' changes drop what this one
    read of that scope and bring its agent.md files in line; a reconnection resyncs them."""
    docs.on_agent_md_removed.append(agent_md.removed)
    if backend.name != "postgresql":
        return
    store, events = backend.store, backend.events

    def on_state(state: str) -> None:
        docs.invalidate()
        events.publish("stats", "shared_store", lambda: {"shared": store.stats()})

    store.on_state = on_state
    if not agent_md.read_only:
        store.on_up.append(agent_md.rescan)
    events.on_remote += [user_memory.on_remote, docs.on_remote,  # type: ignore[attr-defined]
                         agent_md.on_remote]
