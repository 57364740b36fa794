"""The audit log: every promotion and eviction — what, from where, to where, by whom, when.

Rows are appended in the same transaction as the change they describe (callers add
``AuditLog.op(...)`` to their write), so the log never claims a change that did not commit and
never misses one that did. Read it with ``memman_audit_list``.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from memman_daemon.clock import Clock
from memman_daemon.component import Component
from memman_daemon.storage.sqlite import audit as audit_rows
from memman_daemon.storage.sqlite.store import Op, Store


@dataclass
class AuditRecord:
    """One audited action."""

    id: int
    at: float  #: unix seconds
    action: str  #: promote, evict, expire, replace, ...
    what: str  #: the text or cache call the action moved or removed
    source: str  #: where it came from, e.g. "scratchpad:s1#7" or "cache:s1/<key>"
    target: str  #: where it went, e.g. "preference:theme", "agent.md:acme" or "-" for an eviction
    client: str  #: the connection's client name
    session_id: str | None = None
    user_id: str | None = None
    tenant_id: str | None = None
    data: dict[str, Any] = field(default_factory=dict)  #: reason, previous value, ...

    def to_wire(self) -> dict[str, Any]:
        return asdict(self)

    def row(self) -> tuple[Any, ...]:
        """Every column but ``data``, in the order of the table's columns."""
        return (self.id, self.at, self.action, self.what, self.source, self.target,
                self.client, self.session_id, self.user_id, self.tenant_id)

    @classmethod
    def new(cls, id: int, at: float, action: str, what: str, source: str, target: str,
            client: str, session_id: str | None, user_id: str | None, tenant_id: str | None,
            data: dict[str, Any]) -> AuditRecord:
        """A new record: ``what`` cut to 2000 characters, an unnamed client as "-"."""
        return cls(id, at, action, what[:2000], source, target, client or "-", session_id,
                   user_id, tenant_id, data)

    @classmethod
    def from_row(cls, r: Any) -> AuditRecord:
        """From a row of the audit table (either store): ``data`` is its JSON text."""
        return cls(*r[:10], data=json.loads(r[10]))


class Recorder(Protocol):
    """Where a tier's changes are audited: ``AuditLog`` here, ``PgAuditLog`` with a shared
    store. ``record`` gives the record and the operation to commit with the change."""

    def record(self, action: str, what: str, source: str, target: str, client: str, *,
               session_id: str | None = None, user_id: str | None = None,
               tenant_id: str | None = None, **data: Any) -> tuple[AuditRecord, Any]: ...


class AuditLog(Component):
    """The audit log in the local SQLite file: ``record`` gives the row to commit with the
    change; ``list`` reads it back."""

    stats_key = "audit"

    def __init__(self, store: Store, clock: Clock) -> None:
        self.store = store
        self.clock = clock
        self._ids = itertools.count(1)
        self.written = 0

    async def load(self) -> None:
        self._ids = itertools.count(await audit_rows.max_id(self.store) + 1)

    def stats(self) -> dict[str, Any]:
        return {"written": self.written}

    def record(self, action: str, what: str, source: str, target: str, client: str, *,
               session_id: str | None = None, user_id: str | None = None,
               tenant_id: str | None = None, **data: Any) -> tuple[AuditRecord, Op]:
        """A new record and the operation that stores it (commit it with the change)."""
        rec = AuditRecord.new(next(self._ids), self.clock.now(), action, what, source, target,
                              client, session_id, user_id, tenant_id, data)
        self.written += 1
        return rec, audit_rows.insert_op(rec.row(), rec.data)

    async def list(self, filt: dict[str, Any]) -> list[dict[str, Any]]:
        """Newest first. ``filt``: session_id, user_id, tenant_id, action, before_id, limit."""
        return [AuditRecord.from_row(r).to_wire() for r in await audit_rows.newest(self.store, filt)]
