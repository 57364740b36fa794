"""agent.md in PostgreSQL (``storage/agentmd.py``): the ``agent_md`` row is the shared
truth. An edit names the version it read, so of two daemons editing one tenant's agent.md at
once (row or no row yet) the second's commit fails and it edits again from the first's
content; an import overwrites (last writer wins)."""

from __future__ import annotations

from memman_daemon.storage.agentmd import AgentMdRow, sha
from memman_daemon.storage.postgres.ops import PgOp
from memman_daemon.storage.postgres.pool import PgStore

COLS = "content=$2, hash=$3, updated_at=$4, updated_by=$5"


class PgAgentMd:
    def __init__(self, pg: PgStore) -> None:
        self.pg = pg

    async def get(self, tenant_id: str) -> AgentMdRow | None:
        r = await self.pg.fetchrow("SELECT content, hash, updated_at, version FROM agent_md "
                                   "WHERE tenant_id=$1", tenant_id)
        return AgentMdRow(*r) if r else None

    async def tenants(self) -> list[str]:
        return [r[0] for r in await self.pg.fetch("SELECT tenant_id FROM agent_md")]

    def put_ops(self, tenant_id: str, text: str, at: float, read: AgentMdRow | None,
                force: bool) -> list[PgOp]:
        args = (tenant_id, text, sha(text), at, self.pg.origin)
        insert = ("INSERT INTO agent_md(tenant_id, content, hash, updated_at, updated_by) "
                  "VALUES ($1,$2,$3,$4,$5)")
        if force:
            return [PgOp(f"{insert} ON CONFLICT (tenant_id) DO UPDATE SET {COLS}, "
                         "version=agent_md.version + 1", args)]
        if read is None:  # a row written meanwhile breaks the primary key: ConstraintError
            return [PgOp(insert, args)]
        return [PgOp(f"UPDATE agent_md SET {COLS}, version=version + 1 WHERE tenant_id=$1 "
                     "AND version=$6", (*args, read.version), expect=1)]

    def delete_ops(self, tenant_id: str) -> list[PgOp]:
        return [PgOp("DELETE FROM agent_md WHERE tenant_id=$1", (tenant_id,))]
