"""The SQL of business documents in the local SQLite file: ``docs`` (one row per document,
its metadata as JSON), ``doc_chunks`` (the chunks searched), their FTS5 index
``doc_chunks_fts`` and ``chunk_vectors`` (one vector per chunk, with the model that made it).
The rows to write, as ops for ``Store.write``, and every read. Caller: ``tiers/docs.py``
(``BusinessDocs``); the shared store's PostgreSQL tables have their own SQL
(``shared_store/docs.py``).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from memman_daemon.storage.sqlite.store import Op, Store


def _marks(n: int) -> str:
    return ",".join("?" * n)


# --- writes ---------------------------------------------------------------------------------
def put_op(pk: int, tenant_id: str, doc_id: str, data: dict[str, Any]) -> Op:
    """The document's row (``data``: its metadata, stored as JSON)."""
    return ("INSERT OR REPLACE INTO docs(id, tenant_id, doc_id, data) VALUES (?,?,?,?)",
            (pk, tenant_id, doc_id, json.dumps(data, ensure_ascii=False, default=str)))


def chunk_op(chunk_id: int, pk: int, tenant_id: str, seq: int, tokens: int, text: str) -> Op:
    return ("INSERT INTO doc_chunks(id, doc, tenant_id, seq, tokens, content) "
            "VALUES (?,?,?,?,?,?)", (chunk_id, pk, tenant_id, seq, tokens, text))


def vector_op(chunk_id: int, tenant_id: str, vec: np.ndarray, model: str) -> Op:
    return ("INSERT OR REPLACE INTO chunk_vectors(id, tenant_id, dim, embedding, model) "
            "VALUES (?,?,?,?,?)", (chunk_id, tenant_id, int(vec.shape[0]),
                                   vec.astype(np.float32).tobytes(), model))


def late_vector_op(chunk_id: int, vec: np.ndarray, model: str) -> Op:
    """A vector made in the background: stored only while its chunk still exists."""
    return ("INSERT OR REPLACE INTO chunk_vectors(id, tenant_id, dim, embedding, model) "
            "SELECT id, tenant_id, ?, ?, ? FROM doc_chunks WHERE id=?",
            (int(vec.shape[0]), vec.astype(np.float32).tobytes(), model, chunk_id))


def delete_chunks_ops(pk: int) -> list[Op]:
    """Every chunk (and vector) of document ``pk``; its row stays."""
    return [("DELETE FROM chunk_vectors WHERE id IN (SELECT id FROM doc_chunks WHERE doc=?)",
             (pk,)), ("DELETE FROM doc_chunks WHERE doc=?", (pk,))]


def delete_ops(pk: int) -> list[Op]:
    """Document ``pk`` with its chunks and vectors."""
    return [*delete_chunks_ops(pk), ("DELETE FROM docs WHERE id=?", (pk,))]


# --- reads ----------------------------------------------------------------------------------
async def all_docs(store: Store) -> list[tuple[int, str, str, dict[str, Any]]]:
    """``(pk, tenant_id, doc_id, metadata)`` of every document."""
    return [(pk, tenant, doc_id, json.loads(data)) for pk, tenant, doc_id, data
            in await store.fetchall("SELECT id, tenant_id, doc_id, data FROM docs")]


async def max_ids(store: Store) -> tuple[int, int]:
    """The highest document and chunk ids in use (0 when none)."""
    docs = await store.fetchall("SELECT max(id) FROM docs")
    chunks = await store.fetchall("SELECT max(id) FROM doc_chunks")
    return docs[0][0] or 0, chunks[0][0] or 0


async def chunk_ids(store: Store, pk: int) -> list[int]:
    return [r[0] for r in await store.fetchall("SELECT id FROM doc_chunks WHERE doc=?", (pk,))]


async def doc_of_chunk(store: Store, chunk_id: int, tenant_id: str) -> int | None:
    """The document (pk) a chunk of this tenant belongs to."""
    rows = await store.fetchall("SELECT doc FROM doc_chunks WHERE id=? AND tenant_id=?",
                                (chunk_id, tenant_id))
    return rows[0][0] if rows else None


async def chunks(store: Store, ids: list[int]) -> list[tuple[int, int, int, str]]:
    """``(chunk_id, doc pk, seq, text)`` of these chunks."""
    return await store.fetchall(
        f"SELECT id, doc, seq, content FROM doc_chunks WHERE id IN ({_marks(len(ids))})", ids)


# --- vectors --------------------------------------------------------------------------------
async def scope_vectors(store: Store, tenant_id: str, model: str,
                        dim: int) -> list[tuple[int, bytes]]:
    """``(chunk_id, embedding)`` of the tenant's chunks, of this model."""
    return await store.fetchall(
        "SELECT id, embedding FROM chunk_vectors WHERE tenant_id=? AND model=? AND dim=?",
        (tenant_id, model, dim))


async def count_vector_backlog(store: Store, model: str) -> int:
    """Chunks with no vector of ``model``."""
    rows = await store.fetchall(
        "SELECT count(*) FROM doc_chunks c LEFT JOIN chunk_vectors v ON v.id = c.id "
        "WHERE v.id IS NULL OR v.model <> ?", (model,))
    return rows[0][0]


async def vector_backlog(store: Store, after: int, model: str,
                         limit: int) -> list[tuple[int, str, str]]:
    """``(chunk_id, tenant_id, text)`` of chunks after id ``after`` with no vector of
    ``model``, in id order."""
    return await store.fetchall(
        "SELECT c.id, c.tenant_id, c.content FROM doc_chunks c "
        "LEFT JOIN chunk_vectors v ON v.id = c.id WHERE c.id > ? "
        "AND (v.id IS NULL OR v.model <> ?) ORDER BY c.id LIMIT ?", (after, model, limit))


# --- full text ------------------------------------------------------------------------------
async def fts_ranked(store: Store, match: str, low: int, tenant_id: str,
                     limit: int) -> list[tuple[int, int, int, str, float]]:
    """The tenant's chunks matching ``match`` from rowid ``low`` on, best BM25 first:
    ``(chunk_id, doc pk, seq, text, bm25)`` (lower BM25 is better)."""
    return await store.fetchall(
        "SELECT c.id, c.doc, c.seq, c.content, bm25(doc_chunks_fts) AS r "
        "FROM doc_chunks_fts JOIN doc_chunks c ON c.id = doc_chunks_fts.rowid "
        "WHERE doc_chunks_fts MATCH ? AND doc_chunks_fts.rowid >= ? "
        "AND c.tenant_id=? ORDER BY r LIMIT ?", (match, low, tenant_id, limit))
