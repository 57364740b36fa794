"""agent.md in the local SQLite file (``storage/agentmd.py``): the file is the only copy of
the content, so the row is read from the tenant's ``agent.md`` document (its hash and time)
and nothing is stored beside the document."""

from __future__ import annotations

import json
from typing import Any

from memman_daemon.storage.agentmd import DOC_ID, AgentMdRow
from memman_daemon.storage.sqlite.store import Store


class SqliteAgentMd:
    def __init__(self, store: Store) -> None:
        self.store = store

    async def get(self, tenant_id: str) -> AgentMdRow | None:
        rows = await self.store.fetchall("SELECT data FROM docs WHERE tenant_id=? AND doc_id=?",
                                         (tenant_id, DOC_ID))
        if not rows:
            return None
        d = json.loads(rows[0][0])
        return AgentMdRow(None, d["hash"], d["updated_at"], 0)

    async def tenants(self) -> list[str]:
        return []  # no copy to make a missing file from

    def put_ops(self, tenant_id: str, text: str, at: float, read: AgentMdRow | None,
                force: bool) -> list[Any]:
        return []  # the document's own rows are the record (one writer: this daemon)

    def delete_ops(self, tenant_id: str) -> list[Any]:
        return []
