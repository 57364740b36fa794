"""Where the shared tiers live: the local SQLite file (default) or PostgreSQL.

User memory, business context (documents, chunks, agent.md), promotions and the audit of
their changes are the *shared* tiers; sessions (entry log, summaries, cycles, tool cache,
scratchpad) always stay in the local SQLite file. ``[storage] shared`` (env
``MEMMAN_STORAGE_SHARED``, flag ``--shared``) chooses, once, at start:

- empty: ``LocalShared`` and the tier classes of ``memman_daemon.tiers`` — one SQLite file;
- ``postgresql://...``: ``PgStore`` and the classes of this package, which keep the tiers'
  methods, checks and answer shapes and change only where records are kept and how they are
  found. Every daemon naming the same database shares them.

``Backend`` is that choice: the store component, the event bus, the shared audit and one
constructor per shared tier (the SQLite tier's arguments; with PostgreSQL the shared store is
bound in). ``connect`` ties the PostgreSQL parts together once the tiers exist.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from memman_daemon.clock import Clock
from memman_daemon.events import EventBus
from memman_daemon.storage import Storage
from memman_daemon.tiers.agentmd import AgentMd
from memman_daemon.tiers.audit import AuditLog
from memman_daemon.tiers.docs import BusinessDocs


@dataclass
class Backend:
    name: str  #: "sqlite" or "postgresql"
    store: Any  #: LocalShared or PgStore (a component of the app, stats key "shared")
    events: EventBus
    #: the audit log: ``(store, clock)`` -> records session-tier actions locally, lists all
    audit: Callable[..., AuditLog]
    shared_audit: Any  #: where shared-tier changes are audited (None: the audit log itself)
    docs: Callable[..., BusinessDocs]  #: takes ``BusinessDocs``' arguments
    agent_md: Callable[..., AgentMd]  #: takes ``AgentMd``'s arguments


def tiers_for(storage: Storage, clock: Clock) -> Backend:
    if storage.pg is None:
        return Backend("sqlite", storage.store, storage.events, AuditLog, None, BusinessDocs,
                       AgentMd)
    from memman_daemon.shared_store.agentmd import PgAgentMd
    from memman_daemon.shared_store.audit import MergedAuditLog, PgAuditLog
    from memman_daemon.shared_store.docs import PgBusinessDocs

    store = storage.pg
    shared_audit = PgAuditLog(store, clock)
    return Backend("postgresql", store, storage.events, partial(MergedAuditLog, shared=shared_audit),
                   shared_audit, partial(PgBusinessDocs, pg=store),
                   partial(PgAgentMd, pg=store, audit=shared_audit))


def connect(backend: Backend, user_memory: Any, docs: Any, agent_md: Any) -> None:
    """With PostgreSQL, once the tiers exist: state changes become ``stats`` events; other
    daemons' changes drop the vectors this daemon loaded for that scope and bring its agent.md
    files in line; a removed agent.md document removes the file here too."""
    if backend.name != "postgresql":
        return
    store, events = backend.store, backend.events

    def on_state(state: str) -> None:
        events.publish("stats", "shared_store", lambda: {"shared": store.stats()})

    store.on_state = on_state
    events.on_remote += [user_memory.on_remote, docs.on_remote,  # type: ignore[attr-defined]
                         agent_md.on_remote]
    docs.on_agent_md_removed.append(agent_md.removed)
