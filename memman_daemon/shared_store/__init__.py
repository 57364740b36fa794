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

from memman.config import Config
from memman_daemon.clock import Clock
from memman_daemon.events import EventBus
from memman_daemon.tiers.agentmd import AgentMd
from memman_daemon.tiers.audit import AuditLog
from memman_daemon.tiers.docs import BusinessDocs
from memman_daemon.tiers.user_memory import UserMemory

SCHEMES = ("postgresql://", "postgres://")


@dataclass
class Backend:
    name: str  #: "sqlite" or "postgresql"
    store: Any  #: LocalShared or PgStore (a component of the app, stats key "shared")
    events: EventBus
    #: the audit log: ``(store, clock)`` -> records session-tier actions locally, lists all
    audit: Callable[..., AuditLog]
    shared_audit: Any  #: where shared-tier changes are audited (None: the audit log itself)
    user_memory: Callable[..., UserMemory]  #: takes ``UserMemory``'s arguments
    docs: Callable[..., BusinessDocs]  #: takes ``BusinessDocs``' arguments
    agent_md: Callable[..., AgentMd]  #: takes ``AgentMd``'s arguments


def backend_for(config: Config, clock: Clock) -> Backend:
    dsn = config.storage.shared.strip()
    if not dsn:
        from memman_daemon.shared_store.pg import LocalShared
        return Backend("sqlite", LocalShared(), EventBus(), AuditLog, None, UserMemory,
                       BusinessDocs, AgentMd)
    if not dsn.startswith(SCHEMES):
        raise ValueError(f"storage.shared must be a postgresql://... URL (or empty for the "
                         f"local SQLite file), not {dsn[:40]!r}")
    from memman_daemon.shared_store.agentmd import PgAgentMd
    from memman_daemon.shared_store.audit import MergedAuditLog, PgAuditLog
    from memman_daemon.shared_store.docs import PgBusinessDocs
    from memman_daemon.shared_store.events import SharedEventBus
    from memman_daemon.shared_store.pg import PgStore
    from memman_daemon.shared_store.user_memory import PgUserMemory

    s = config.storage
    store = PgStore(dsn, timeout_s=s.shared_timeout_s, pool_size=s.shared_pool_size,
                    backoff_max_s=s.shared_backoff_max_s)
    bus = SharedEventBus(send=store.notify, origin=store.origin)
    store.on_notify = bus.receive
    shared_audit = PgAuditLog(store, clock)
    return Backend("postgresql", store, bus, partial(MergedAuditLog, shared=shared_audit),
                   shared_audit, partial(PgUserMemory, pg=store), partial(PgBusinessDocs, pg=store),
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
