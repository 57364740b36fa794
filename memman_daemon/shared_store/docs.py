"""Business documents in the shared store (PostgreSQL).

Same chunking, same rerank, same answers as ``tiers/docs.py``; documents, chunks and vectors
live in PostgreSQL and are read from it on every call (no per-daemon copy to go stale).
Candidates come from PostgreSQL's full text (``websearch_to_tsquery`` over the chunks'
``tsvector``, ranked by ``ts_rank``) plus the nearest vectors, then the inherited local
reranker orders them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable, Hashable
from typing import Any

import asyncpg

from memman.errors import invalid_params, not_found
from memman_daemon.storage.postgres import vectors
from memman_daemon.storage.postgres.ops import execute
from memman_daemon.storage.postgres.pool import PgStore, SharedCounts
from memman_daemon.storage.postgres.search import SharedVectorBackend, informative_query
from memman_daemon.tiers.agentmd import DOC_ID
from memman_daemon.tiers.docs import (
    BusinessDocs,
    Doc,
    candidate,
    check_doc,
    fuse_chunks,
    search_answer,
)


def doc_from_row(pk: int, data: str) -> Doc:
    return Doc(**{**json.loads(data), "pk": pk})


class PgBusinessDocs(BusinessDocs):
    """Business documents kept in PostgreSQL: ``BusinessDocs``' arguments and the shared
    store."""

    def __init__(self, *args: Any, pg: PgStore, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.pg = pg
        #: set by the app: called (awaited) with the tenant when its agent.md document was
        #: removed, so the file on each host follows
        self.on_agent_md_removed: list[Callable[[str], Awaitable[Any]]] = []
        self.vectors = SharedVectorBackend(self.pg)  # type: ignore[assignment]
        self._counts = SharedCounts(
            pg, "SELECT (SELECT count(DISTINCT tenant_id) FROM docs), (SELECT count(*) FROM docs), "
            "(SELECT count(*) FROM doc_chunks)", ("tenants", "documents", "chunks"))

    async def load(self) -> None:
        """Nothing to read ahead: documents are read from PostgreSQL on every call."""

    async def close(self) -> None:
        self._counts.close()

    def stats(self) -> dict[str, Any]:
        """Counts as of the previous call (refreshed in the background: stats are sync)."""
        return {**self._counts.current(), "searches": self.searches,
                "vector_backend": self.pg.vector_backend, "backend": "postgresql",
                "vector_index": self.vscopes.stats()}

    async def fetch_doc(self, tenant_id: str, doc_id: str, conn: Any = None) -> Doc | None:
        sql = "SELECT id, data FROM docs WHERE tenant_id=$1 AND doc_id=$2"
        row = await (conn.fetchrow(sql, tenant_id, doc_id) if conn is not None
                     else self.pg.fetchrow(sql, tenant_id, doc_id))
        return doc_from_row(row[0], row[1]) if row else None

    def prepare(self, tenant_id: str, doc: dict[str, Any], old: Doc | None
                ) -> tuple[Doc | None, list[Any], str]:
        """Validate and chunk; ``(None, [], digest)`` when the content is unchanged."""
        check_doc(tenant_id, doc)
        digest = hashlib.sha256(doc["content"].encode()).hexdigest()
        if old is not None and old.hash == digest:
            return None, [], digest
        d, chunks = self._chunked(tenant_id, doc, digest, old, old.pk if old else 0)
        return d, chunks, digest

    async def write_doc(self, conn: Any, d: Doc, chunks: list[Any], ids: list[int],
                        vecs: list[list[float]] | None, replacing: bool) -> None:
        """The document's rows, inside the caller's transaction."""
        data = {k: v for k, v in d.to_wire().items() if k != "pk"}
        if replacing:
            await conn.execute("DELETE FROM doc_chunks WHERE doc=$1", d.pk)
        await conn.execute(
            "INSERT INTO docs(id, tenant_id, doc_id, data) VALUES ($1,$2,$3,$4) "
            "ON CONFLICT (id) DO UPDATE SET data=EXCLUDED.data",
            d.pk, d.tenant_id, d.doc_id, json.dumps(data, ensure_ascii=False, default=str))
        if chunks:
            await conn.executemany(
                "INSERT INTO doc_chunks(id, doc, tenant_id, seq, tokens, content) "
                "VALUES ($1,$2,$3,$4,$5,$6)",
                [(cid, d.pk, d.tenant_id, c.seq, c.tokens, c.text)
                 for cid, c in zip(ids, chunks, strict=True)])
        if vecs is not None and len(vecs):
            backend, model = self.pg.vector_backend, self.embedder.model_id
            await execute(conn, [vectors.put_op(backend, "chunk_vectors", cid, v, model,
                                                d.tenant_id)
                                 for cid, v in zip(ids, vecs, strict=True)])

    async def put(self, conn: Any, tenant_id: str, doc: dict[str, Any]
                  ) -> tuple[Doc, bool, bool, bool]:
        """Add or replace inside the caller's transaction (the row is locked, so two daemons
        replacing one document are serialized). ``(doc, changed, replaced, vectors)``."""
        content = doc["content"]
        doc_id = doc.get("doc_id") or hashlib.sha256(content.encode()).hexdigest()[:16]
        row = await conn.fetchrow("SELECT id, data FROM docs WHERE tenant_id=$1 AND doc_id=$2 "
                                  "FOR UPDATE", tenant_id, doc_id)
        old = doc_from_row(row[0], row[1]) if row else None
        d, chunks, _ = self.prepare(tenant_id, doc, old)
        if d is None:
            assert old is not None
            return old, False, False, False
        ids = [r[0] for r in await conn.fetch(
            "SELECT nextval('memman_ids') FROM generate_series(1, $1)",
            len(chunks) + (0 if old else 1))]
        if old is None:
            d.pk = ids.pop(0)
        emb = self.embedder
        vecs = await emb.embed([c.text for c in chunks]) if emb.embeds_now(len(chunks)) else None
        await self.write_doc(conn, d, chunks, ids, vecs, old is not None)
        self.forget_scope(tenant_id)  # this daemon's loaded vectors reload on next search
        return d, True, old is not None, vecs is not None and len(vecs) > 0

    async def add(self, tenant_id: str, doc: dict[str, Any]) -> dict[str, Any]:
        check_doc(tenant_id, doc)
        for attempt in range(3):
            try:
                d, changed, replaced, vecs = await self.pg.run(
                    lambda conn: self.put(conn, tenant_id, doc))
                break
            except asyncpg.UniqueViolationError:  # another daemon added it first: replace it
                if attempt == 2:
                    raise
        if changed and not vecs and d.chunks and self.embedder.enabled:
            # stored without vectors: the background worker fills them in, after the commit
            self.vector_sync.request()
        if changed:
            self._publish("updated" if replaced else "added", tenant_id, doc=d.to_wire(),
                          vectors=vecs)
        return {"doc": d.to_wire(), "changed": changed}

    async def list(self, tenant_id: str) -> list[dict[str, Any]]:  # type: ignore[override]
        rows = await self.pg.fetch("SELECT id, data FROM docs WHERE tenant_id=$1 ORDER BY id",
                                   tenant_id)
        return [doc_from_row(pk, data).to_wire() for pk, data in rows]

    async def remove(self, tenant_id: str, ref: str | int, client: str = "") -> dict[str, Any]:
        """As the SQLite tier: one document (by doc_id, or by one of its chunks' ids) with all
        its chunks and vectors, audited in the same transaction."""
        if isinstance(ref, bool) or not isinstance(ref, (str, int)) or ref == "":
            raise invalid_params("ref", "expected a doc_id (text) or a chunk id (integer)")
        await self.pg.ensure_ids(1)
        audit = self.audit

        async def tx(conn: Any) -> tuple[Doc, Any]:
            if isinstance(ref, int):
                row = await conn.fetchrow(
                    "SELECT d.id, d.data FROM doc_chunks c JOIN docs d ON d.id = c.doc "
                    "WHERE c.id=$1 AND c.tenant_id=$2 FOR UPDATE OF d", ref, tenant_id)
                if row is None:
                    raise not_found("chunk", ref)
            else:
                row = await conn.fetchrow("SELECT id, data FROM docs WHERE tenant_id=$1 AND "
                                          "doc_id=$2 FOR UPDATE", tenant_id, ref)
                if row is None:
                    raise not_found("document", ref)
            d = doc_from_row(row[0], row[1])
            rec, aop = audit.record("remove", d.title, f"docs:{tenant_id}/{d.doc_id}", "-",
                                    client, tenant_id=tenant_id, doc=d.to_wire(), ref=ref)
            await conn.execute("DELETE FROM docs WHERE id=$1", d.pk)  # chunks, vectors cascade
            if d.doc_id == DOC_ID:  # agent.md removed everywhere: its shared content too
                await conn.execute("DELETE FROM agent_md WHERE tenant_id=$1", tenant_id)
            await conn.execute(aop.sql, *aop.args)
            return d, rec

        d, rec = await self.pg.run(tx)
        self.forget_scope(tenant_id)
        self._publish("deleted", tenant_id, doc_id=d.doc_id, chunks=d.chunks, doc=d.to_wire(),
                      audit_id=rec.id, client=client)
        if d.doc_id == DOC_ID:  # each host's file follows (this one now, others by event)
            for hook in self.on_agent_md_removed:
                await hook(tenant_id)
        return {"removed": d.to_wire(), "chunks": d.chunks, "audit_id": rec.id}

    # --- vectors ---------------------------------------------------------------------------
    async def _load_scope(self, key: Hashable) -> tuple[list[int], Any]:
        dim = self.vscopes.dim or 0
        rows = await self.pg.fetch(
            "SELECT id, embedding FROM chunk_vectors WHERE tenant_id=$1 AND model=$2 AND dim=$3",
            key, self.embedder.model_id, dim)
        return vectors.matrix(rows, dim)

    def forget_scope(self, tenant_id: str) -> None:
        self.vscopes.scopes.pop(tenant_id, None)

    def on_remote(self, topic: str, kind: str, scope: dict[str, Any]) -> None:
        if topic == "docs" and scope.get("tenant_id"):
            self.forget_scope(scope["tenant_id"])

    async def count_vector_backlog(self, model_id: str) -> int:
        return int(await self.pg.fetchval(
            "SELECT count(*) FROM doc_chunks c LEFT JOIN chunk_vectors v ON v.id = c.id "
            "WHERE v.id IS NULL OR v.model <> $1", model_id))

    async def vector_backlog(self, after: int, model_id: str, limit: int) -> list[tuple[int, str]]:
        rows = await self.pg.fetch(
            "SELECT c.id, c.tenant_id, c.content FROM doc_chunks c "
            "LEFT JOIN chunk_vectors v ON v.id = c.id WHERE c.id > $1 "
            "AND (v.id IS NULL OR v.model <> $2) ORDER BY c.id LIMIT $3", after, model_id, limit)
        for cid, tenant, _ in rows:
            self._backlog_scope[cid] = tenant
        return [(cid, text) for cid, _, text in rows]

    async def store_vectors(self, ids: list[int], vecs: Any, model_id: str) -> None:
        backend = self.pg.vector_backend

        async def tx(conn: Any) -> None:
            tenants = {r[0]: r[1] for r in await conn.fetch(
                "SELECT id, tenant_id FROM doc_chunks WHERE id = ANY($1)", ids)}
            await execute(conn, [vectors.put_op(backend, "chunk_vectors", i, v, model_id,
                                                tenants[i])
                                 for i, v in zip(ids, vecs, strict=True) if i in tenants])
        await self.pg.run(tx)
        for i in ids:
            tenant = self._backlog_scope.pop(i, None)
            if tenant is not None:
                self.forget_scope(tenant)

    async def search(self, tenant_id: str, query: str, opts: dict[str, Any]) -> list[dict[str, Any]]:
        """As the SQLite tier (BM25 and vector candidates fused by reciprocal rank, then the
        reranker), with PostgreSQL's full text and the shared store's vectors."""
        top_k, n_cand = self._search_sizes(query, opts)
        cfg = self.config.docs
        emb = self.embedder
        emb.check_config()
        qv = await emb.embed([query]) if emb.enabled else None
        pgvector = self.pg.vector_backend == "pgvector"

        async def read(conn: Any) -> tuple[list[Any], list[tuple[int, float]], list[Any]]:
            found: list[Any] = []
            tsq = await informative_query(conn, "doc_chunks", query)
            if tsq:
                found = await conn.fetch(
                    "SELECT c.id, c.doc, c.seq, c.content, ts_rank(c.tsv, q) AS r "
                    "FROM doc_chunks c, websearch_to_tsquery('english', $2) q "
                    "WHERE c.tsv @@ q AND c.tenant_id=$1 ORDER BY r DESC, c.id DESC LIMIT $3",
                    tenant_id, tsq, n_cand)
            hits: list[tuple[int, float]] = []
            if qv is not None and pgvector:
                hits = await vectors.nearest(conn, "FROM chunk_vectors v WHERE v.tenant_id=$1",
                                             [tenant_id], qv[0], emb.model_id, n_cand)
            docs = await conn.fetch("SELECT id, data FROM docs WHERE tenant_id=$1", tenant_id)
            return found, hits, docs

        found, hits, doc_rows = await self.pg.run(read)
        cands: dict[int, dict[str, Any]] = {}
        for cid, doc, seq, text, r in found:
            cands[cid] = candidate(cid, doc, seq, text, float(r))
        fused_parts: dict[int, dict[str, Any]] = {}
        if qv is not None:
            m = None
            if not pgvector:  # the fallback: this daemon's matrix of the tenant's vectors
                self.vscopes.dim = int(qv.shape[1])
                m = await self.vscopes.get(tenant_id, int(qv.shape[1]))
                hits = m.search(qv[0], n_cand)
            missing = [cid for cid, _ in hits if cid not in cands]
            if missing:
                for cid, doc, seq, text in await self.pg.fetch(
                        "SELECT id, doc, seq, content FROM doc_chunks WHERE id = ANY($1)",
                        missing):
                    cands[cid] = candidate(cid, doc, seq, text)
            sims = dict(hits)
            if m is not None:
                sims.update(m.similarities(qv[0], list(cands)))
            for cid, sim in sims.items():
                if cid in cands:
                    cands[cid]["semantic"] = max(0.0, sim)
            cands, fused_parts = fuse_chunks(cands, hits, self.config.memory, n_cand)
        by_pk = {pk: doc_from_row(pk, data) for pk, data in doc_rows}
        return search_answer(query, cands, fused_parts, by_pk, top_k, cfg.max_chunks_per_doc,
                             qv is not None)
