"""The documents group (``storage/docs.py``) in PostgreSQL: the same tables, full text from
the chunks' ``tsvector`` (``websearch_to_tsquery``, ranked by ``ts_rank``), vectors ranked by
pgvector where the server has it. Ids come from the shared sequence; a replaced document's row
is locked first, so two daemons replacing it are serialized."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from memman_daemon.storage.docs import ChunkRow, Doc, Match, NewChunk
from memman_daemon.storage.postgres import vectors
from memman_daemon.storage.postgres.ops import PgOp
from memman_daemon.storage.postgres.pool import PgStore
from memman_daemon.storage.postgres.search import SharedVectorBackend, informative_query


def _doc(row: Any) -> Doc:
    return Doc(**{**json.loads(row[1]), "pk": row[0]})


class PgDocs:
    def __init__(self, pg: PgStore) -> None:
        self.pg = pg
        self.vectors = SharedVectorBackend(pg)

    async def load(self) -> None:
        """Nothing to read ahead: ids come from the shared sequence."""

    async def new_doc_id(self) -> int:
        await self.pg.ensure_ids(1)
        return self.pg.take_id()

    async def new_chunk_ids(self, n: int) -> list[int]:
        await self.pg.ensure_ids(n)
        return [self.pg.take_id() for _ in range(n)]

    # --- reads -----------------------------------------------------------------------------
    async def get(self, tenant_id: str, doc_id: str) -> Doc | None:
        r = await self.pg.fetchrow("SELECT id, data FROM docs WHERE tenant_id=$1 AND doc_id=$2",
                                   tenant_id, doc_id)
        return _doc(r) if r else None

    async def of_chunk(self, tenant_id: str, chunk_id: int) -> Doc | None:
        r = await self.pg.fetchrow("SELECT d.id, d.data FROM doc_chunks c JOIN docs d "
                                   "ON d.id = c.doc WHERE c.id=$1 AND c.tenant_id=$2",
                                   chunk_id, tenant_id)
        return _doc(r) if r else None

    async def of_tenant(self, tenant_id: str) -> list[Doc]:
        return [_doc(r) for r in await self.pg.fetch(
            "SELECT id, data FROM docs WHERE tenant_id=$1 ORDER BY id", tenant_id)]

    async def counts(self) -> dict[str, int]:
        r = await self.pg.fetchrow(
            "SELECT (SELECT count(DISTINCT tenant_id) FROM docs), (SELECT count(*) FROM docs), "
            "(SELECT count(*) FROM doc_chunks)")
        assert r is not None
        return {"tenants": r[0], "documents": r[1], "chunks": r[2]}

    async def chunk_ids(self, pk: int) -> list[int]:
        return [r[0] for r in await self.pg.fetch("SELECT id FROM doc_chunks WHERE doc=$1", pk)]

    async def chunks(self, ids: list[int]) -> list[ChunkRow]:
        return [tuple(r) for r in await self.pg.fetch(  # type: ignore[misc]
            "SELECT id, doc, seq, content FROM doc_chunks WHERE id = ANY($1)", ids)]

    # --- writes ----------------------------------------------------------------------------
    def upsert_ops(self, d: Doc, chunks: list[NewChunk], vecs: np.ndarray | None, model: str,
                   replacing: bool) -> list[PgOp]:
        data = json.dumps(d.data(), ensure_ascii=False, default=str)
        ops: list[PgOp] = []
        insert = "INSERT INTO docs(id, tenant_id, doc_id, data) VALUES ($1,$2,$3,$4)"
        if replacing:  # the row locked first: the DELETE then sees a concurrent writer's chunks
            ops += [PgOp("SELECT 1 FROM docs WHERE id=$1 FOR UPDATE", (d.pk,)),
                    PgOp("DELETE FROM doc_chunks WHERE doc=$1", (d.pk,))]
            insert += " ON CONFLICT (id) DO UPDATE SET data=EXCLUDED.data"
        ops.append(PgOp(insert, (d.pk, d.tenant_id, d.doc_id, data)))
        ops += [PgOp("INSERT INTO doc_chunks(id, doc, tenant_id, seq, tokens, content) "
                     "VALUES ($1,$2,$3,$4,$5,$6)", (c.id, d.pk, d.tenant_id, c.seq, c.tokens,
                                                    c.text)) for c in chunks]
        if vecs is not None:
            backend = self.pg.vector_backend
            ops += [vectors.put_op(backend, "chunk_vectors", c.id, v, model, d.tenant_id)
                    for c, v in zip(chunks, vecs, strict=True)]
        return ops

    def delete_ops(self, d: Doc) -> list[PgOp]:
        return [PgOp("DELETE FROM docs WHERE id=$1", (d.pk,))]  # chunks and vectors cascade

    def late_vector_ops(self, ids: list[int], vecs: np.ndarray, model: str) -> list[PgOp]:
        cols, sel = "id, tenant_id, dim, embedding, model", "id, tenant_id, $2, $3, $4"
        sets = "dim=EXCLUDED.dim, embedding=EXCLUDED.embedding, model=EXCLUDED.model"
        pgvector = self.pg.vector_backend == "pgvector"
        if pgvector:
            cols, sel, sets = cols + ", vec", sel + ", $5::text::vector", sets + ", vec=EXCLUDED.vec"
        sql = (f"INSERT INTO chunk_vectors({cols}) SELECT {sel} FROM doc_chunks WHERE id=$1 "
               f"ON CONFLICT (id) DO UPDATE SET {sets}")
        return [PgOp(sql, (i, len(v), vectors.blob(v), model)
                     + ((vectors.literal(v),) if pgvector else ()))
                for i, v in zip(ids, vecs, strict=True)]

    # --- search ----------------------------------------------------------------------------
    async def full_text(self, tenant_id: str, query: str, limit: int, at_least: int,
                        max_scan: int) -> list[Match]:
        async def read(conn: Any) -> list[Any]:
            tsq = await informative_query(conn, "doc_chunks", query)
            if not tsq:
                return []
            return await conn.fetch(
                "SELECT c.id, c.doc, c.seq, c.content, ts_rank(c.tsv, q) AS r "
                "FROM doc_chunks c, websearch_to_tsquery('english', $2) q "
                "WHERE c.tsv @@ q AND c.tenant_id=$1 ORDER BY r DESC, c.id DESC LIMIT $3",
                tenant_id, tsq, limit)
        return [(r[0], r[1], r[2], r[3], float(r[4])) for r in await self.pg.run(read)]

    async def nearest(self, tenant_id: str, vec: np.ndarray, model: str,
                      k: int) -> list[tuple[int, float]] | None:
        if self.pg.vector_backend != "pgvector":
            return None  # the fallback: the daemon's matrix of the tenant's vectors
        return await self.pg.run(lambda conn: vectors.nearest(
            conn, "FROM chunk_vectors v WHERE v.tenant_id=$1", [tenant_id], vec, model, k))

    async def scope_vectors(self, tenant_id: str, model: str,
                            dim: int) -> tuple[list[int], np.ndarray]:
        return vectors.matrix(await self.pg.fetch(
            "SELECT id, embedding FROM chunk_vectors WHERE tenant_id=$1 AND model=$2 AND dim=$3",
            tenant_id, model, dim), dim)

    # --- the background re-embed -----------------------------------------------------------
    async def count_backlog(self, model: str) -> int:
        return int(await self.pg.fetchval(
            "SELECT count(*) FROM doc_chunks c LEFT JOIN chunk_vectors v ON v.id = c.id "
            "WHERE v.id IS NULL OR v.model <> $1", model))

    async def backlog(self, after: int, model: str, limit: int) -> list[tuple[int, str, str]]:
        return [(r[0], r[1], r[2]) for r in await self.pg.fetch(
            "SELECT c.id, c.tenant_id, c.content FROM doc_chunks c "
            "LEFT JOIN chunk_vectors v ON v.id = c.id WHERE c.id > $1 "
            "AND (v.id IS NULL OR v.model <> $2) ORDER BY c.id LIMIT $3", after, model, limit)]
