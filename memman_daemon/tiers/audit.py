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
from memman_daemon.store import Op, Store


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


class Recorder(Protocol):
    """Where a tier's changes are audited: ``AuditLog`` here, ``PgAuditLog`` with a shared
    store. ``record`` gives the record and the operation to commit with the change."""

    def record(self, action: str, what: str, source: str, target: str, client: str, *,
               session_id: str | None = None, user_id: str | None = None,
               tenant_id: str | None = None, **data: Any) -> tuple[AuditRecord, Any]: ...


class AuditLog:
    """The audit log in the local SQLite file: ``record`` gives the row to commit with the
    change; ``list`` reads it back."""

    stats_key = "audit"

    def __init__(self, store: Store, clock: Clock) -> None:
        self.store = store
        self.clock = clock
        self._ids = itertools.count(1)
        self.written = 0

    async def load(self) -> None:
        rows = await self.store.fetchall("SELECT max(id) FROM audit")
        self._ids = itertools.count((rows[0][0] or 0) + 1)

    async def close(self) -> None:
        pass

    def stats(self) -> dict[str, Any]:
        return {"written": self.written}

    def record(self, action: str, what: str, source: str, target: str, client: str, *,
               session_id: str | None = None, user_id: str | None = None,
               tenant_id: str | None = None, **data: Any) -> tuple[AuditRecord, Op]:
        """A new record and the operation that stores it (commit it with the change)."""
        rec = AuditRecord(next(self._ids), self.clock.now(), action, what[:2000], source,
                          target, client or "-", session_id, user_id, tenant_id, data)
        self.written += 1
        op = ("INSERT INTO audit(id, at, action, what, source, target, client, session_id, "
              "user_id, tenant_id, data) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
              (rec.id, rec.at, rec.action, rec.what, rec.source, rec.target, rec.client,
               rec.session_id, rec.user_id, rec.tenant_id,
               json.dumps(rec.data, ensure_ascii=False, default=str)))
        return rec, op

    async def list(self, filt: dict[str, Any]) -> list[dict[str, Any]]:
        """Newest first. ``filt``: session_id, user_id, tenant_id, action, before_id, limit."""
        where, params = [], []
        for k in ("session_id", "user_id", "tenant_id", "action"):
            if filt.get(k) is not None:
                where.append(f"{k}=?")
                params.append(filt[k])
        if filt.get("before_id") is not None:
            where.append("id<?")
            params.append(int(filt["before_id"]))
        sql = ("SELECT id, at, action, what, source, target, client, session_id, user_id, "
               "tenant_id, data FROM audit")
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY id DESC LIMIT ?"
        params.append(int(filt.get("limit") or 100))
        rows = await self.store.fetchall(sql, params)
        return [AuditRecord(*r[:10], data=json.loads(r[10])).to_wire() for r in rows]
