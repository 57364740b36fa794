"""How the shared tiers are tied together once ``storage.backend_for`` chose where they live.

User memory, business context (documents, chunks, agent.md), promotions and the audit of their
changes are the *shared* tiers: one class each, for both backends, over the storage groups of
``Storage``. What still depends on the choice lives here, in two functions:

- ``audit_logs``: the audit logs. With SQLite one log holds everything; with PostgreSQL the
  shared tiers' changes are audited in the shared store and ``memman_audit_list`` merges that
  with the session-tier actions recorded locally (``MergedAuditLog``).
- ``connect``: the hooks between the tiers once they exist; with PostgreSQL, other daemons'
  changes (events across daemons) invalidate this daemon's caches and a reconnection resyncs.
"""

from __future__ import annotations

from typing import Any

from memman_daemon.clock import Clock
from memman_daemon.storage import Storage
from memman_daemon.storage.sqlite.audit import SqliteAudit
from memman_daemon.tiers.agentmd import AgentMd
from memman_daemon.tiers.audit import AuditLog, MergedAuditLog
from memman_daemon.tiers.docs import BusinessDocs


def audit_logs(storage: Storage, clock: Clock) -> tuple[AuditLog | MergedAuditLog, AuditLog | None]:
    """(the audit log: records session-tier actions locally and lists all; where shared-tier
    changes are audited when that is another store, else None)."""
    if storage.pg is None:
        return AuditLog(storage.audit, clock), None
    shared_audit = AuditLog(storage.audit, clock, stats_key="shared_audit")
    return MergedAuditLog(AuditLog(SqliteAudit(storage.local), clock), shared_audit), shared_audit


def connect(storage: Storage, user_memory: Any, docs: BusinessDocs, agent_md: AgentMd) -> None:
    """Once the tiers exist: a removed agent.md document removes the file here too. With
    PostgreSQL, state changes become ``stats`` events and drop what was read of the documents
    (other daemons' events of an outage are lost); other daemons' changes drop what this one
    read of that scope and bring its agent.md files in line; a reconnection resyncs them."""
    docs.on_agent_md_removed.append(agent_md.removed)
    store, events = storage.pg, storage.events
    if store is None:
        return

    def on_state(state: str) -> None:
        docs.invalidate()
        events.publish("stats", "shared_store", lambda: {"shared": store.stats()})

    store.on_state = on_state
    if not agent_md.read_only:
        store.on_up.append(agent_md.rescan)
    events.on_remote += [user_memory.on_remote, docs.on_remote,  # type: ignore[attr-defined]
                         agent_md.on_remote]
