"""The audit log with a shared store.

Changes to shared tiers (promotions, clearing user memory, agent.md imports) are audited in
PostgreSQL, in the same transaction as the change, with the daemon that made them (``host``
in the row, ``data.host`` on the wire). Changes to host-local session tiers (tool-cache and
scratchpad evictions) stay audited in the local SQLite file beside the sessions they concern,
so they keep working while the shared store is down. ``memman_audit_list`` returns both,
newest first by time; the two sources number their records independently.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from memman_daemon.component import Component
from memman_daemon.storage.postgres.ops import PgOp
from memman_daemon.storage.sqlite.audit import COLUMNS as COLS
from memman_daemon.storage.sqlite.audit import select_newest
from memman_daemon.tiers.audit import AuditLog, AuditRecord

if TYPE_CHECKING:
    from memman_daemon.clock import Clock
    from memman_daemon.storage.postgres.pool import PgStore
    from memman_daemon.storage.sqlite.store import Store


class PgAuditLog(Component):
    """The shared part: ``record()`` returns a ``PgOp`` to commit with the change."""

    stats_key = "shared_audit"

    def __init__(self, pg: PgStore, clock: Clock) -> None:
        self.pg = pg
        self.clock = clock
        self.written = 0

    def stats(self) -> dict[str, Any]:
        return {"written": self.written}

    def record(self, action: str, what: str, source: str, target: str, client: str, *,
               session_id: str | None = None, user_id: str | None = None,
               tenant_id: str | None = None, **data: Any) -> tuple[AuditRecord, PgOp]:
        data = {**data, "host": self.pg.origin}
        rec = AuditRecord.new(self.pg.take_id(), self.clock.now(), action, what, source, target,
                              client, session_id, user_id, tenant_id, data)
        self.written += 1
        op = PgOp(f"INSERT INTO audit({COLS}, host) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12)",
                  (*rec.row(), json.dumps(rec.data, ensure_ascii=False, default=str),
                   self.pg.origin))
        return rec, op

    async def list(self, filt: dict[str, Any]) -> list[dict[str, Any]]:
        sql, args = select_newest(filt, lambda n: f"${n}")
        rows = await self.pg.fetch(sql, *args)
        return [AuditRecord.from_row(r).to_wire() for r in rows]


    async def newest_promotion(self, client: str, session_id: str | None,
                               after: float | None) -> dict[str, Any] | None:
        """The client's newest promotion (of this session) made after ``after``, or None —
        ``memman_undo`` does not reverse shared promotions and must not skip one silently."""
        args: list[Any] = [client, after if after is not None else float("-inf")]
        where = "client=$1 AND action='promote' AND at >= $2"
        if session_id is not None:
            args.append(session_id)
            where += " AND session_id=$3"
        row = await self.pg.fetchrow(f"SELECT {COLS} FROM audit WHERE {where} "
                                     "ORDER BY at DESC, id DESC LIMIT 1", *args)
        return AuditRecord.from_row(row).to_wire() if row else None


class MergedAuditLog(AuditLog):
    """The local audit with a shared store: records locally (session tiers), lists both."""

    def __init__(self, store: Store, clock: Clock, shared: PgAuditLog) -> None:
        super().__init__(store, clock)
        self.shared = shared

    async def list(self, filt: dict[str, Any]) -> list[dict[str, Any]]:
        local = await super().list(filt)
        shared = await self.shared.list(filt)
        limit = int(filt.get("limit") or 100)
        return sorted(local + shared, key=lambda r: (-r["at"], -r["id"]))[:limit]
