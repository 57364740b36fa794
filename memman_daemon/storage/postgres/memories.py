"""The ``memories`` table group in the shared store (``storage/memories.py``'s ``MemoryRows``):
``memories`` (with its stored ``tsvector`` and the ``dedup`` column the unique index
``memories_live`` covers) and ``memory_vectors`` (pgvector's ``vec`` beside the bytes where the
server has it). Writes are ``PgOp``s for ``Storage.write``; other daemons write the same rows
(not ``sole_writer``), and ids come from the shared sequence.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from memman_daemon.storage.memories import (
    COLUMNS,
    MemoryRecord,
    UserCounts,
    dedup_of,
    newest_where,
    to_json,
)
from memman_daemon.storage.postgres import vectors
from memman_daemon.storage.postgres.ops import PgOp, execute
from memman_daemon.storage.postgres.pool import PgStore
from memman_daemon.storage.postgres.search import SharedVectorBackend, informative_query

UPSERT = ("INSERT INTO memories(id, user_id, type, kind, key, content, metadata, created_at, "
          "updated_at, archived_by, dedup) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11) "
          "ON CONFLICT (id) DO UPDATE SET user_id=EXCLUDED.user_id, type=EXCLUDED.type, "
          "kind=EXCLUDED.kind, key=EXCLUDED.key, content=EXCLUDED.content, "
          "metadata=EXCLUDED.metadata, created_at=EXCLUDED.created_at, "
          "updated_at=EXCLUDED.updated_at, archived_by=EXCLUDED.archived_by, dedup=EXCLUDED.dedup")
M_COLUMNS = ", ".join(f"m.{c.strip()}" for c in COLUMNS.split(","))
#: the live records of some layers of a user ($1 user, $2 layers)
LIVE_OF = "m.user_id=$1 AND m.type = ANY($2::text[]) AND m.archived_by IS NULL"


def upsert_args(rec: MemoryRecord) -> tuple[Any, ...]:
    return (*rec.row(), dedup_of(rec))


def numbered(sql: str, start: int = 1) -> str:
    """``?`` marks as ``$n``, from ``$start``."""
    n = iter(range(start, start + sql.count("?")))
    return re.sub(r"\?", lambda _: f"${next(n)}", sql)


class PgMemories:
    """User memory's rows in PostgreSQL."""

    sole_writer = False

    def __init__(self, pg: PgStore) -> None:
        self.pg = pg
        self.vectors = SharedVectorBackend(pg)

    @property
    def vector_backend(self) -> str:
        return str(self.pg.vector_backend)

    async def open(self) -> None:
        pass

    async def reserve_ids(self, n: int) -> None:
        await self.pg.ensure_ids(n)

    def next_id(self) -> int:
        return self.pg.take_id()

    # --- reads ----------------------------------------------------------------------------
    async def _select(self, where: str, *args: Any) -> list[MemoryRecord]:
        rows = await self.pg.fetch(f"SELECT {COLUMNS} FROM memories {where}", *args)
        return [MemoryRecord.from_row(r) for r in rows]

    async def get(self, record_id: int, user_id: str | None = None) -> MemoryRecord | None:
        found = await self._select("WHERE id=$1 AND ($2::text IS NULL OR user_id=$2)",
                                   record_id, user_id)
        return found[0] if found else None

    async def live(self, ids: list[int]) -> dict[int, MemoryRecord]:
        if not ids:
            return {}
        found = await self._select("WHERE archived_by IS NULL AND id = ANY($1)", ids)
        return {r.id: r for r in found}

    async def keyed(self, user_id: str | None = None) -> list[MemoryRecord]:
        return await self._select(
            "WHERE ($1::text IS NULL OR user_id=$1) AND type IN ('semantic','procedural') "
            "AND archived_by IS NULL ORDER BY id", user_id)

    async def live_key(self, user_id: str, kind: str, dedup: str) -> MemoryRecord | None:
        found = await self._select("WHERE user_id=$1 AND kind=$2 AND dedup=$3 "
                                   "AND archived_by IS NULL", user_id, kind, dedup)
        return found[0] if found else None

    async def newest(self, user_id: str, type_: str, *, limit: int,
                     include_archived: bool = False, kind: str | None = None,
                     before_id: int | None = None) -> list[MemoryRecord]:
        where, params = newest_where(user_id, type_, include_archived=include_archived,
                                     kind=kind, before_id=before_id)
        return await self._select(f"WHERE {numbered(where)} ORDER BY id DESC "
                                  f"LIMIT ${len(params) + 1}", *params, limit)

    async def oldest_live(self, user_id: str, type_: str) -> list[MemoryRecord]:
        return await self._select("WHERE user_id=$1 AND type=$2 AND archived_by IS NULL "
                                  "ORDER BY created_at, id", user_id, type_)

    async def full_text(self, user_id: str, types: tuple[str, ...], words: list[str],
                        kind: str | None, candidates: int, *, scan: int,
                        want: int, key_prefixes: tuple[str, ...] | None = None
                        ) -> list[tuple[MemoryRecord, float]]:
        # `scan` is FTS5's concern: the GIN index finds the matches without scoring them all
        args: list[Any] = [user_id, list(types), kind, candidates]

        async def read(conn: Any) -> list[Any]:
            tsq = await informative_query(conn, "memories", " ".join(words))
            if not tsq:
                return []
            return await conn.fetch(
                f"SELECT {M_COLUMNS}, ts_rank(m.tsv, q) AS r FROM memories m, "
                f"websearch_to_tsquery('english', $5) q WHERE m.tsv @@ q AND {LIVE_OF} "
                "AND ($3::text IS NULL OR m.kind=$3) "
                "AND ($6::text[] IS NULL OR EXISTS (SELECT 1 FROM unnest($6::text[]) p(x) "
                "WHERE left(m.key, length(p.x)) = p.x)) "
                "ORDER BY r DESC, m.id DESC LIMIT $4",
                *args, tsq, None if key_prefixes is None else list(key_prefixes))

        return [(MemoryRecord.from_row(r), float(r[10])) for r in await self.pg.run(read)]

    async def nearest(self, user_id: str, types: tuple[str, ...], query: np.ndarray,
                      model: str, k: int, kind: str | None = None
                      ) -> list[tuple[int, float]] | None:
        if self.pg.vector_backend != "pgvector":
            return None  # ranked in the daemon's matrices, loaded from here
        return await self.pg.run(lambda conn: vectors.nearest(
            conn, f"FROM memory_vectors v JOIN memories m ON m.id = v.id WHERE {LIVE_OF} "
            "AND ($3::text IS NULL OR m.kind=$3)", [user_id, list(types), kind], query, model,
            k))

    async def scope_vectors(self, user_id: str, type_: str, model: str,
                            dim: int) -> tuple[list[int], np.ndarray]:
        rows = await self.pg.fetch(
            f"SELECT v.id, v.embedding FROM memory_vectors v JOIN memories m ON m.id = v.id "
            f"WHERE {LIVE_OF} AND v.model=$3 AND v.dim=$4", user_id, [type_], model, dim)
        return vectors.matrix(rows, dim)

    async def backlog(self, after: int, model: str, limit: int) -> list[MemoryRecord]:
        rows = await self.pg.fetch(
            f"SELECT {M_COLUMNS} FROM memories m LEFT JOIN memory_vectors v ON v.id = m.id "
            "WHERE m.id > $1 AND m.archived_by IS NULL AND (v.id IS NULL OR v.model <> $2) "
            "ORDER BY m.id LIMIT $3", after, model, limit)
        return [MemoryRecord.from_row(r) for r in rows]

    async def count_backlog(self, model: str) -> int:
        return int(await self.pg.fetchval(
            "SELECT count(*) FROM memories m LEFT JOIN memory_vectors v ON v.id = m.id "
            "WHERE m.archived_by IS NULL AND (v.id IS NULL OR v.model <> $1)", model))

    async def counts(self) -> dict[str, int]:
        row = await self.pg.fetchrow(
            "SELECT count(DISTINCT user_id), count(*) FILTER (WHERE type='episodic'), "
            "count(*) FILTER (WHERE kind='preference'), count(*) FILTER (WHERE kind='rule'), "
            "count(*) FILTER (WHERE kind='playbook') FROM memories WHERE archived_by IS NULL")
        keys = ("users", "episodic", "preferences", "rules", "playbooks")
        return {k: int(v) for k, v in zip(keys, row or (0,) * 5, strict=True)}

    async def user_counts(self, user_id: str) -> UserCounts:
        async def read(conn: Any) -> UserCounts:
            rows = await conn.fetch(
                "SELECT type, kind, count(*), sum(length(content) + length(metadata) + "
                "length(coalesce(key,''))) FROM memories WHERE user_id=$1 "
                "AND archived_by IS NULL GROUP BY type, kind", user_id)
            archived = await conn.fetchval(
                "SELECT count(*) FROM memories WHERE user_id=$1 AND archived_by IS NOT NULL",
                user_id)
            vecs = await conn.fetchval(
                "SELECT count(*) FROM memory_vectors v JOIN memories m ON m.id=v.id "
                "WHERE m.user_id=$1", user_id)
            return UserCounts.from_rows([tuple(r) for r in rows], archived, vecs)
        return await self.pg.run(read)

    async def counts_by_type(self, user_id: str, types: list[str]) -> dict[str, int]:
        rows = await self.pg.fetch("SELECT type, count(*) FROM memories WHERE user_id=$1 "
                                   "AND type = ANY($2) GROUP BY type", user_id, types)
        return {r[0]: int(r[1]) for r in rows}

    async def count_archived_by(self, summary_id: int) -> int:
        return int(await self.pg.fetchval("SELECT count(*) FROM memories WHERE archived_by=$1",
                                          summary_id))

    async def put_vectors(self, ids: list[int], vecs: np.ndarray, model: str) -> None:
        ops = {i: self.put_vector(i, v, model) for i, v in zip(ids, vecs, strict=True)}

        async def tx(conn: Any) -> None:
            live = await conn.fetch("SELECT id FROM memories WHERE id = ANY($1)", ids)
            await execute(conn, [ops[r[0]] for r in live])
        await self.pg.run(tx)

    # --- writes ---------------------------------------------------------------------------
    def upsert(self, rec: MemoryRecord) -> list[PgOp]:
        return [PgOp(UPSERT, upsert_args(rec))]

    def put_vector(self, record_id: int, vec: np.ndarray, model: str) -> PgOp:
        return vectors.put_op(self.pg.vector_backend, "memory_vectors", record_id, vec, model)

    def touch(self, record_id: int, metadata: dict[str, Any], updated_at: float) -> PgOp:
        return PgOp("UPDATE memories SET metadata=$1, updated_at=$2 WHERE id=$3",
                    (to_json(metadata), updated_at, record_id))

    def archive(self, ids: list[int], summary_id: int) -> list[PgOp]:
        return [PgOp("UPDATE memories SET archived_by=$1 WHERE id = ANY($2)", (summary_id, ids))]

    def rewrite(self, record_id: int, content: str, metadata: dict[str, Any]) -> PgOp:
        return PgOp("UPDATE memories SET content=$1, metadata=$2 WHERE id=$3",
                    (content, to_json(metadata), record_id))

    def relink(self, summary_id: int) -> PgOp:
        return PgOp("UPDATE memories SET archived_by=0 WHERE archived_by=$1", (summary_id,))

    def delete(self, record_id: int) -> list[PgOp]:
        return [PgOp("DELETE FROM memories WHERE id=$1", (record_id,))]  # its vector cascades

    def clear(self, user_id: str, types: list[str]) -> list[PgOp]:
        return [PgOp("DELETE FROM memories WHERE user_id=$1 AND type = ANY($2)",
                     (user_id, types))]
