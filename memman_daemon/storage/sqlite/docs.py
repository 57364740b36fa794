"""The documents group (``storage/docs.py``) in the local SQLite file: ``docs`` (metadata as
JSON), ``doc_chunks`` with its FTS5 index ``doc_chunks_fts`` (BM25), ``chunk_vectors``
ranked in the daemon's matrix. Ids count up from the highest in use (this daemon is the
file's only writer)."""

from __future__ import annotations

import itertools
import json
from typing import Any

import numpy as np

from memman_daemon.search import fts
from memman_daemon.search.vector_matrix import blobs_to_matrix
from memman_daemon.search.vectors import VectorIndex
from memman_daemon.storage.docs import ChunkRow, Doc, Match, NewChunk
from memman_daemon.storage.sqlite import fts as fts_rows
from memman_daemon.storage.sqlite.store import Op, Store

#: ``late_vector_ops``' statement: nothing is stored for a chunk deleted meanwhile
LATE_VECTOR = ("INSERT OR REPLACE INTO chunk_vectors(id, tenant_id, dim, embedding, model) "
               "SELECT id, tenant_id, ?, ?, ? FROM doc_chunks WHERE id=?")


def _doc(pk: int, data: str) -> Doc:
    return Doc(**{**json.loads(data), "pk": pk})


def _blob(vec: np.ndarray) -> bytes:
    return vec.astype(np.float32).tobytes()


class SqliteDocs:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.vectors = VectorIndex(store.path)
        self._doc_ids = itertools.count(1)
        self._chunk_ids = itertools.count(1)

    async def _one(self, sql: str, params: Any = ()) -> Any:
        rows = await self.store.fetchall(sql, params)
        return rows[0] if rows else None

    async def load(self) -> None:
        top_doc = (await self._one("SELECT max(id) FROM docs"))[0] or 0
        top_chunk = (await self._one("SELECT max(id) FROM doc_chunks"))[0] or 0
        self._doc_ids = itertools.count(top_doc + 1)
        self._chunk_ids = itertools.count(top_chunk + 1)

    async def new_doc_id(self) -> int:
        return next(self._doc_ids)

    async def new_chunk_ids(self, n: int) -> list[int]:
        return [next(self._chunk_ids) for _ in range(n)]

    # --- reads -----------------------------------------------------------------------------
    async def get(self, tenant_id: str, doc_id: str) -> Doc | None:
        r = await self._one("SELECT id, data FROM docs WHERE tenant_id=? AND doc_id=?",
                            (tenant_id, doc_id))
        return _doc(*r) if r else None

    async def of_chunk(self, tenant_id: str, chunk_id: int) -> Doc | None:
        r = await self._one("SELECT d.id, d.data FROM doc_chunks c JOIN docs d ON d.id = c.doc "
                            "WHERE c.id=? AND c.tenant_id=?", (chunk_id, tenant_id))
        return _doc(*r) if r else None

    async def of_tenant(self, tenant_id: str) -> list[Doc]:
        return [_doc(*r) for r in await self.store.fetchall(
            "SELECT id, data FROM docs WHERE tenant_id=? ORDER BY id", (tenant_id,))]

    async def counts(self) -> dict[str, int]:
        r = await self._one("SELECT (SELECT count(DISTINCT tenant_id) FROM docs), "
                            "(SELECT count(*) FROM docs), (SELECT count(*) FROM doc_chunks)")
        return dict(zip(("tenants", "documents", "chunks"), r, strict=True))

    async def chunk_ids(self, pk: int) -> list[int]:
        return [r[0] for r in await self.store.fetchall(
            "SELECT id FROM doc_chunks WHERE doc=?", (pk,))]

    async def chunks(self, ids: list[int]) -> list[ChunkRow]:
        return [(r[0], r[1], r[2], r[3]) for r in await self.store.fetchall(
            f"SELECT id, doc, seq, content FROM doc_chunks WHERE id IN ({','.join('?' * len(ids))})",
            ids)]

    # --- writes ----------------------------------------------------------------------------
    def upsert_ops(self, d: Doc, chunks: list[NewChunk], vecs: np.ndarray | None, model: str,
                   replacing: bool) -> list[Op]:
        data = json.dumps(d.data(), ensure_ascii=False, default=str)
        row = (d.pk, d.tenant_id, d.doc_id, data)
        ops: list[Op] = []
        if replacing:
            ops += self._delete_chunks(d.pk)
            ops.append(("INSERT INTO docs(id, tenant_id, doc_id, data) VALUES (?,?,?,?) "
                        "ON CONFLICT(id) DO UPDATE SET data=excluded.data", row))
        else:  # a plain insert: the same doc_id added meanwhile is a ConstraintError
            ops.append(("INSERT INTO docs(id, tenant_id, doc_id, data) VALUES (?,?,?,?)", row))
        ops += [("INSERT INTO doc_chunks(id, doc, tenant_id, seq, tokens, content) "
                 "VALUES (?,?,?,?,?,?)", (c.id, d.pk, d.tenant_id, c.seq, c.tokens, c.text))
                for c in chunks]
        if vecs is not None:
            ops += [("INSERT OR REPLACE INTO chunk_vectors(id, tenant_id, dim, embedding, model) "
                     "VALUES (?,?,?,?,?)", (c.id, d.tenant_id, int(v.shape[0]), _blob(v), model))
                    for c, v in zip(chunks, vecs, strict=True)]
        return ops

    @staticmethod
    def _delete_chunks(pk: int) -> list[Op]:
        return [("DELETE FROM chunk_vectors WHERE id IN (SELECT id FROM doc_chunks WHERE doc=?)",
                 (pk,)), ("DELETE FROM doc_chunks WHERE doc=?", (pk,))]

    def delete_ops(self, d: Doc) -> list[Op]:
        return [*self._delete_chunks(d.pk), ("DELETE FROM docs WHERE id=?", (d.pk,))]

    def late_vector_ops(self, ids: list[int], vecs: np.ndarray, model: str) -> list[Op]:
        return [(LATE_VECTOR, (int(v.shape[0]), _blob(v), model, i))
                for i, v in zip(ids, vecs, strict=True)]

    # --- search ----------------------------------------------------------------------------
    async def _fts(self, match: str, low: int, tenant_id: str, limit: int) -> list[Match]:
        rows = await self.store.fetchall(
            "SELECT c.id, c.doc, c.seq, c.content, bm25(doc_chunks_fts) AS r "
            "FROM doc_chunks_fts JOIN doc_chunks c ON c.id = doc_chunks_fts.rowid "
            "WHERE doc_chunks_fts MATCH ? AND doc_chunks_fts.rowid >= ? "
            "AND c.tenant_id=? ORDER BY r LIMIT ?", (match, low, tenant_id, limit))
        return [(cid, doc, seq, text, -r) for cid, doc, seq, text, r in rows]  # BM25: lower is better

    async def full_text(self, tenant_id: str, query: str, limit: int, at_least: int,
                        max_scan: int) -> list[Match]:
        # as many as the highest id (one b-tree descent; count(*) reads every page): see
        # storage/sqlite/memories.py's full_text
        total = (await self._one("SELECT coalesce(max(rowid), 0) FROM doc_chunks"))[0]
        match = fts.match_expr(await fts_rows.informative(self.store, "doc_chunks_fts",
                                                          fts.words(query), total))
        if not match:
            return []
        # words that common everywhere: rank only the newest max_scan matching chunks, unless
        # that leaves this tenant fewer than at_least
        low = await fts_rows.newest_bound(self.store, "doc_chunks_fts", match, max_scan)
        found = await self._fts(match, low, tenant_id, limit)
        if low and len(found) < at_least:
            found = await self._fts(match, 0, tenant_id, limit)
        return found

    async def nearest(self, tenant_id: str, vec: np.ndarray, model: str,
                      k: int) -> list[tuple[int, float]] | None:
        return None  # ranked in the daemon's matrix of the tenant's vectors

    async def scope_vectors(self, tenant_id: str, model: str,
                            dim: int) -> tuple[list[int], np.ndarray]:
        rows = await self.store.fetchall(
            "SELECT id, embedding FROM chunk_vectors WHERE tenant_id=? AND model=? AND dim=?",
            (tenant_id, model, dim))
        return [r[0] for r in rows], blobs_to_matrix([r[1] for r in rows], dim)

    # --- the background re-embed -----------------------------------------------------------
    async def count_backlog(self, model: str) -> int:
        return (await self._one(
            "SELECT count(*) FROM doc_chunks c LEFT JOIN chunk_vectors v ON v.id = c.id "
            "WHERE v.id IS NULL OR v.model <> ?", (model,)))[0]

    async def backlog(self, after: int, model: str, limit: int) -> list[tuple[int, str, str]]:
        return [(r[0], r[1], r[2]) for r in await self.store.fetchall(
            "SELECT c.id, c.tenant_id, c.content FROM doc_chunks c "
            "LEFT JOIN chunk_vectors v ON v.id = c.id WHERE c.id > ? "
            "AND (v.id IS NULL OR v.model <> ?) ORDER BY c.id LIMIT ?", (after, model, limit))]
