"""The audit group (``storage/audit.py``) in PostgreSQL: shared-tier changes, each row with
the daemon that wrote it (``host``); ids from the shared sequence."""

from __future__ import annotations

from typing import Any

from memman_daemon.storage.audit import COLUMNS, AuditRecord, select_newest, select_promotion
from memman_daemon.storage.postgres.ops import PgOp
from memman_daemon.storage.postgres.pool import PgStore


def _mark(n: int) -> str:
    return f"${n}"


class PgAudit:
    def __init__(self, pg: PgStore) -> None:
        self.pg = pg
        self.host = pg.origin

    async def load(self) -> None:
        """Nothing to read ahead: ids come from the shared sequence."""

    async def ensure_ids(self, n: int) -> None:
        await self.pg.ensure_ids(n)

    def take_id(self) -> int:
        return self.pg.take_id()

    def insert_op(self, rec: AuditRecord) -> PgOp:
        marks = ",".join(_mark(i) for i in range(1, 13))
        return PgOp(f"INSERT INTO audit({COLUMNS}, host) VALUES ({marks})",
                    (*rec.row(), self.pg.origin))

    async def newest(self, filt: dict[str, Any]) -> list[AuditRecord]:
        sql, args = select_newest(filt, _mark)
        return [AuditRecord.from_row(r) for r in await self.pg.fetch(sql, *args)]

    async def newest_promotion(self, client: str, session_id: str | None,
                               after: float | None) -> AuditRecord | None:
        sql, args = select_promotion(client, session_id, after, _mark)
        row = await self.pg.fetchrow(sql, *args)
        return AuditRecord.from_row(row) if row else None
