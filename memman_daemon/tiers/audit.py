"""The audit log: every promotion and eviction — what, from where, to where, by whom, when.

Rows are appended in the same transaction as the change they describe (callers add the
operation ``record(...)`` returns to their write), so the log never claims a change that did
not commit and never misses one that did. Read it with ``memman_audit_list``.

``AuditLog`` is written once over the audit group (``storage/audit.py``): the local file's,
or PostgreSQL's for shared-tier changes (each record then names its daemon, ``data.host``).
With PostgreSQL, ``MergedAuditLog`` puts the two together: session-tier actions (evictions,
pins) are recorded locally, beside their sessions, so they keep working while the shared store
is down, and ``list`` returns both, newest first by time (the two number their records
independently).
"""

from __future__ import annotations

from typing import Any, Protocol

from memman_daemon.clock import Clock
from memman_daemon.component import Component
from memman_daemon.storage.audit import AuditRecord, AuditStore

__all__ = ["AuditLog", "AuditRecord", "MergedAuditLog", "Recorder"]


class Recorder(Protocol):
    """Where a tier's changes are audited. ``record`` gives the record and the operation to
    commit with the change; ``ensure_ids`` first (a shared store's ids are reserved ahead)."""

    async def ensure_ids(self, n: int) -> None: ...

    def record(self, action: str, what: str, source: str, target: str, client: str, *,
               session_id: str | None = None, user_id: str | None = None,
               tenant_id: str | None = None, **data: Any) -> tuple[AuditRecord, Any]: ...


class AuditLog(Component):
    """One audit table: ``record`` gives the row to commit with the change; ``list`` reads
    it back."""

    def __init__(self, rows: AuditStore, clock: Clock, stats_key: str = "audit") -> None:
        self.rows = rows
        self.clock = clock
        self.stats_key = stats_key
        self.written = 0

    async def load(self) -> None:
        await self.rows.load()

    def stats(self) -> dict[str, Any]:
        return {"written": self.written}

    async def ensure_ids(self, n: int) -> None:
        await self.rows.ensure_ids(n)

    def record(self, action: str, what: str, source: str, target: str, client: str, *,
               session_id: str | None = None, user_id: str | None = None,
               tenant_id: str | None = None, **data: Any) -> tuple[AuditRecord, Any]:
        """A new record and the operation that stores it (commit it with the change)."""
        if self.rows.host is not None:
            data = {**data, "host": self.rows.host}
        rec = AuditRecord.new(self.rows.take_id(), self.clock.now(), action, what, source,
                              target, client, session_id, user_id, tenant_id, data)
        self.written += 1
        return rec, self.rows.insert_op(rec)

    async def list(self, filt: dict[str, Any]) -> list[dict[str, Any]]:
        """Newest first. ``filt``: session_id, user_id, tenant_id, action, before_id, limit."""
        return [r.to_wire() for r in await self.rows.newest(filt)]

    async def newest_promotion(self, client: str, session_id: str | None,
                               after: float | None) -> dict[str, Any] | None:
        """The client's newest promotion (of this session) made after ``after``, or None —
        ``memman_undo`` does not reverse shared promotions and must not skip one silently."""
        rec = await self.rows.newest_promotion(client, session_id, after)
        return rec.to_wire() if rec is not None else None


class MergedAuditLog(Component):
    """The audit log with a shared store: records in ``local`` (session tiers), lists both."""

    stats_key = "audit"

    def __init__(self, local: AuditLog, shared: AuditLog) -> None:
        self.local = local
        self.shared = shared

    async def load(self) -> None:
        await self.local.load()

    def stats(self) -> dict[str, Any]:
        return self.local.stats()

    async def ensure_ids(self, n: int) -> None:
        await self.local.ensure_ids(n)

    def record(self, action: str, what: str, source: str, target: str, client: str, *,
               session_id: str | None = None, user_id: str | None = None,
               tenant_id: str | None = None, **data: Any) -> tuple[AuditRecord, Any]:
        return self.local.record(action, what, source, target, client, session_id=session_id,
                                 user_id=user_id, tenant_id=tenant_id, **data)

    async def list(self, filt: dict[str, Any]) -> list[dict[str, Any]]:
        both = await self.local.list(filt) + await self.shared.list(filt)
        limit = int(filt.get("limit") or 100)
        return sorted(both, key=lambda r: (-r["at"], -r["id"]))[:limit]
