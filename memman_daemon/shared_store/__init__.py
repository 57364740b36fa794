"""Where the shared tiers live: the local SQLite file (default) or PostgreSQL.

User memory, business context (documents, chunks, agent.md), promotions and the audit of
their changes are the *shared* tiers; sessions (entry log, summaries, cycles, tool cache,
scratchpad) always stay in the local SQLite file. ``[storage] shared`` (env
``MEMMAN_STORAGE_SHARED``, flag ``--shared``) chooses, once, at start:

- empty: ``LocalShared`` and the tier classes of ``memman_daemon.tiers`` — one SQLite file;
- ``postgresql://...``: ``PgStore`` and the classes of this package, which keep the tiers'
  methods, checks and answer shapes and change only where records are kept and how they are
  found. Every daemon naming the same database shares them.

``Backend`` is that choice: the store component, the event bus and one class per shared tier.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from memman.config import Config
from memman_daemon.events import EventBus
from memman_daemon.tiers.agentmd import AgentMd
from memman_daemon.tiers.audit import AuditLog
from memman_daemon.tiers.docs import BusinessDocs
from memman_daemon.tiers.user_memory import UserMemory

if TYPE_CHECKING:
    from memman_daemon.core import Core

SCHEMES = ("postgresql://", "postgres://")


@dataclass
class Backend:
    name: str  #: "sqlite" or "postgresql"
    store: Any  #: LocalShared or PgStore (a core component, stats key "shared")
    events: EventBus
    audit: type  #: core.audit: records session-tier actions locally, lists everything
    shared_audit: type | None  #: where shared-tier changes are audited (None: core.audit)
    user_memory: type
    docs: type
    agent_md: type


def backend_for(config: Config) -> Backend:
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
    return Backend("postgresql", store, bus, MergedAuditLog, PgAuditLog, PgUserMemory,
                   PgBusinessDocs, PgAgentMd)


def wire(core: Core) -> None:
    """After the components exist: state changes become ``stats`` events; other daemons'
    agent.md changes reach this daemon's files."""
    store = core.shared
    if core.backend.name != "postgresql":
        return

    def on_state(state: str) -> None:
        core.events.publish("stats", "shared_store", lambda: {"shared": store.stats()})

    store.on_state = on_state
    for component in (core.user_memory, core.docs, core.agent_md):
        on_remote = getattr(component, "on_remote", None)
        if on_remote is not None:  # e.g. drop vectors loaded for a scope another daemon changed
            core.events.on_remote.append(on_remote)  # type: ignore[attr-defined]
