"""Business context (the three-tier design): per-tenant documents, chunked by tokens and searchable.

Documents are chunked (``chunking.py``) into ``doc_chunks``, indexed by FTS5 and, when an
embeddings endpoint is configured, embedded into ``chunk_vectors``. Search follows the three-tier design's
retrieval shape: gather ~``docs.candidates`` (100) candidates — BM25 from FTS5, plus the
nearest vectors when there are any — then rerank to ``docs.top_k`` (10). The reranker is
deterministic and local (no LLM call, so it is fast and testable): it blends the normalized
BM25 score, the cosine similarity, query-term coverage, term proximity and an exact-phrase
bonus, then keeps at most ``docs.max_chunks_per_doc`` chunks of one document so one long
document cannot fill the top 10. docs/tiers.md gives the weights and the reasoning.

Document metadata is held in memory (list is a dict read); chunks live in SQLite.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from collections.abc import Hashable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from memman.errors import invalid_params, not_found
from memman_daemon.search import fts
from memman_daemon.search.hybrid import BM25, VECTOR, rrf
from memman_daemon.search.vector_matrix import VectorScopes, blobs_to_matrix
from memman_daemon.search.vectors import VectorIndex
from memman_daemon.store import Op
from memman_daemon.tiers.chunking import chunk_text

if TYPE_CHECKING:
    from memman_daemon.app import App

_WORD = re.compile(r"\w+", re.UNICODE)

#: rerank weights: (lexical, semantic, coverage, proximity, phrase)
WEIGHTS_FTS = (0.50, 0.0, 0.25, 0.15, 0.10)
WEIGHTS_HYBRID = (0.30, 0.30, 0.20, 0.10, 0.10)


@dataclass
class Doc:
    """A business document of one tenant."""

    pk: int
    tenant_id: str
    doc_id: str
    title: str
    source: str  #: where it came from (a path for agent.md, a URL, "upload", "promotion")
    hash: str  #: sha256 of the content; re-adding the same content changes nothing
    chunks: int
    tokens: int  #: tokens of the whole document
    bytes: int
    created_at: float
    updated_at: float
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_wire(self) -> dict[str, Any]:
        return asdict(self)


def _stem(term: str) -> str:
    return term[:5] if len(term) > 5 else term


def rerank_features(query: str, text: str) -> tuple[float, float, float]:
    """(coverage, proximity, phrase) of ``text`` for ``query``, each 0..1.

    coverage: share of distinct query terms present (prefix-matched, like the porter-stemmed
    index); proximity: how tightly the present terms cluster (terms / shortest word window
    holding them all); phrase: 1 if the whole query appears verbatim.
    """
    terms = list(dict.fromkeys(_WORD.findall(query.lower())))
    if not terms:
        return 0.0, 0.0, 0.0
    words = _WORD.findall(text.lower())
    positions: dict[str, list[int]] = {}
    stems = {t: _stem(t) for t in terms}
    for i, w in enumerate(words):
        for t, s in stems.items():
            if w.startswith(s):
                positions.setdefault(t, []).append(i)
    present = [t for t in terms if t in positions]
    coverage = len(present) / len(terms)
    proximity = 0.0
    if len(present) >= 2:
        events = sorted((p, t) for t in present for p in positions[t])
        need, have, left, best = len(present), {}, 0, len(words) + 1
        for pos, t in events:
            have[t] = have.get(t, 0) + 1
            while len(have) == need:
                best = min(best, pos - events[left][0] + 1)
                lt = events[left][1]
                have[lt] -= 1
                if not have[lt]:
                    del have[lt]
                left += 1
        proximity = min(1.0, len(present) / best) if best <= len(words) else 0.0
    elif len(present) == 1 and len(terms) == 1:
        proximity = 1.0
    q = " ".join(_WORD.findall(query.lower()))
    phrase = 1.0 if len(terms) > 1 and q and q in " ".join(words) else 0.0
    return coverage, proximity, phrase


def fuse_chunks(cands: dict[int, dict[str, Any]], hits: list[tuple[int, float]], mc: Any,
                n_cand: int) -> tuple[dict[int, dict[str, Any]], dict[int, Any]]:
    """Reciprocal rank fusion of the candidate chunks' lexical and vector ranks: the
    candidates that stay, and each one's fusion parts."""
    lex_list = sorted(((c["chunk_id"], c["lexical"]) for c in cands.values()
                       if c["lexical"] > 0), key=lambda t: -t[1])
    vec_list = [(cid, s) for cid, s in hits if cid in cands]
    fused = rrf({BM25: lex_list, VECTOR: vec_list}, mc.rrf_k,
                {BM25: mc.bm25_weight, VECTOR: mc.vector_weight})
    fused_parts = {f.id: f.to_wire() for f in fused[:n_cand]}
    return {cid: c for cid, c in cands.items() if cid in fused_parts}, fused_parts


def rerank(query: str, cands: list[dict[str, Any]], top_k: int, per_doc: int,
           hybrid: bool) -> list[dict[str, Any]]:
    """Order candidates ``{chunk_id, doc, text, lexical, semantic}`` and keep ``top_k``."""
    w = WEIGHTS_HYBRID if hybrid else WEIGHTS_FTS
    top_lex = max((c["lexical"] for c in cands), default=0.0) or 1.0
    # cosine scales differ by model (a static model's paraphrases score ~0.3): scale to the
    # best candidate, as BM25 is
    top_sem = max((c.get("semantic") or 0.0 for c in cands), default=0.0) or 1.0
    for c in cands:
        cov, prox, phrase = rerank_features(query, c["text"])
        lex = c["lexical"] / top_lex
        sem = (c.get("semantic") or 0.0) / top_sem
        c["parts"] = {"lexical": round(lex, 4), "semantic": round(sem, 4) if hybrid else None,
                      "coverage": round(cov, 4), "proximity": round(prox, 4), "phrase": phrase}
        c["score"] = round(w[0] * lex + w[1] * sem + w[2] * cov + w[3] * prox + w[4] * phrase, 6)
    cands.sort(key=lambda c: (-c["score"], c["chunk_id"]))
    out, per = [], {}
    for c in cands:
        if per.get(c["doc"], 0) >= per_doc:
            continue
        per[c["doc"]] = per.get(c["doc"], 0) + 1
        out.append(c)
        if len(out) >= top_k:
            break
    return out


class BusinessDocs:
    stats_key = "docs"

    def __init__(self, app: App) -> None:
        self.app = app
        self.docs: dict[str, dict[str, Doc]] = {}
        self._doc_ids = itertools.count(1)
        self._chunk_ids = itertools.count(1)
        self.vectors = VectorIndex(app.config.database_path)
        self.vscopes = VectorScopes(self._load_scope)  #: tenant_id -> chunk vectors in memory
        self._backlog_scope: dict[int, str] = {}
        self.searches = 0

    async def load(self) -> None:
        self.docs.clear()
        store = self.app.store
        for pk, tenant, doc_id, data in await store.fetchall(
                "SELECT id, tenant_id, doc_id, data FROM docs"):
            d = json.loads(data)
            self.docs.setdefault(tenant, {})[doc_id] = Doc(**{**d, "pk": pk})
        top = await store.fetchall("SELECT max(id) FROM docs")
        self._doc_ids = itertools.count((top[0][0] or 0) + 1)
        top = await store.fetchall("SELECT max(id) FROM doc_chunks")
        self._chunk_ids = itertools.count((top[0][0] or 0) + 1)
        self.vectors.open()

    async def close(self) -> None:
        self.vectors.close()

    def stats(self) -> dict[str, Any]:
        return {"tenants": len(self.docs), "documents": sum(len(v) for v in self.docs.values()),
                "chunks": sum(d.chunks for v in self.docs.values() for d in v.values()),
                "searches": self.searches, "vector_backend": self.vectors.backend,
                "vector_index": self.vscopes.stats()}

    # --- vectors ---------------------------------------------------------------------------
    async def _load_scope(self, key: Hashable) -> tuple[list[int], np.ndarray]:
        dim = self.vscopes.dim or 0
        rows = await self.app.store.fetchall(
            "SELECT id, embedding FROM chunk_vectors WHERE tenant_id=? AND model=? AND dim=?",
            (key, self.app.embedder.model_id, dim))
        return [r[0] for r in rows], blobs_to_matrix([r[1] for r in rows], dim)

    async def count_vector_backlog(self, model_id: str) -> int:
        rows = await self.app.store.fetchall(
            "SELECT count(*) FROM doc_chunks c LEFT JOIN chunk_vectors v ON v.id = c.id "
            "WHERE v.id IS NULL OR v.model <> ?", (model_id,))
        return rows[0][0]

    async def vector_backlog(self, after: int, model_id: str, limit: int) -> list[tuple[int, str]]:
        rows = await self.app.store.fetchall(
            "SELECT c.id, c.tenant_id, c.content FROM doc_chunks c "
            "LEFT JOIN chunk_vectors v ON v.id = c.id WHERE c.id > ? "
            "AND (v.id IS NULL OR v.model <> ?) ORDER BY c.id LIMIT ?", (after, model_id, limit))
        for cid, tenant, _ in rows:
            self._backlog_scope[cid] = tenant
        return [(cid, text) for cid, _, text in rows]

    async def store_vectors(self, ids: list[int], vecs: np.ndarray, model_id: str) -> None:
        await self.app.store.write([
            ("INSERT OR REPLACE INTO chunk_vectors(id, tenant_id, dim, embedding, model) "
             "SELECT id, tenant_id, ?, ?, ? FROM doc_chunks WHERE id=?",
             (int(v.shape[0]), v.astype(np.float32).tobytes(), model_id, i))
            for i, v in zip(ids, vecs, strict=True)])
        if self.app.embedder.model_id != model_id:
            return
        for i, v in zip(ids, vecs, strict=True):
            tenant = self._backlog_scope.pop(i, None)
            if tenant is not None:
                self.vscopes.add(tenant, [i], v[None, :])

    def _publish(self, kind: str, tenant_id: str, **data: Any) -> None:
        self.app.events.publish("docs", kind, data, tenant_id=tenant_id)

    def get(self, tenant_id: str, doc_id: str) -> Doc | None:
        return self.docs.get(tenant_id, {}).get(doc_id)

    async def add(self, tenant_id: str, doc: dict[str, Any]) -> dict[str, Any]:
        """Add or replace a document; returns ``{doc, changed}`` (same content: unchanged)."""
        if not tenant_id:
            raise invalid_params("tenant_id", "must not be empty")
        if not isinstance(doc, dict):
            raise invalid_params("doc", "expected a map with at least 'content'")
        content = doc.get("content")
        if not isinstance(content, str) or not content.strip():
            raise invalid_params("doc.content", "expected non-empty text")
        for k in ("doc_id", "title", "source"):
            if doc.get(k) is not None and not isinstance(doc[k], str):
                raise invalid_params(f"doc.{k}", "expected a string")
        meta = doc.get("metadata") or {}
        if not isinstance(meta, dict):
            raise invalid_params("doc.metadata", "expected a map")
        digest = hashlib.sha256(content.encode()).hexdigest()
        doc_id = doc.get("doc_id") or digest[:16]
        old = self.get(tenant_id, doc_id)
        if old is not None and old.hash == digest:
            return {"doc": old.to_wire(), "changed": False}
        cfg = self.app.config.docs
        enc = self.app.tokens.encoding("gpt-4o-mini")
        chunks = chunk_text(content, enc, cfg.chunk_tokens, cfg.chunk_overlap)
        now = self.app.clock.now()
        pk = old.pk if old else next(self._doc_ids)
        d = Doc(pk=pk, tenant_id=tenant_id, doc_id=doc_id, title=doc.get("title") or doc_id,
                source=doc.get("source") or "upload", hash=digest, chunks=len(chunks),
                tokens=len(enc.encode(content, disallowed_special=())),
                bytes=len(content.encode()), created_at=old.created_at if old else now,
                updated_at=now, metadata=meta)
        data = {k: v for k, v in d.to_wire().items() if k != "pk"}
        ops: list[Op] = []
        if old is not None:
            ops += [("DELETE FROM chunk_vectors WHERE id IN (SELECT id FROM doc_chunks WHERE doc=?)",
                     (pk,)), ("DELETE FROM doc_chunks WHERE doc=?", (pk,))]
        ops.append(("INSERT OR REPLACE INTO docs(id, tenant_id, doc_id, data) VALUES (?,?,?,?)",
                    (pk, tenant_id, doc_id, json.dumps(data, ensure_ascii=False, default=str))))
        ids = [next(self._chunk_ids) for _ in chunks]
        ops += [("INSERT INTO doc_chunks(id, doc, tenant_id, seq, tokens, content) "
                 "VALUES (?,?,?,?,?,?)", (cid, pk, tenant_id, c.seq, c.tokens, c.text))
                for cid, c in zip(ids, chunks, strict=True)]
        emb = self.app.embedder
        model = emb.model_id
        vecs = await emb.embed([c.text for c in chunks]) if emb.embeds_now(len(chunks)) else None
        if vecs is not None:
            ops += [("INSERT OR REPLACE INTO chunk_vectors(id, tenant_id, dim, embedding, model) "
                     "VALUES (?,?,?,?,?)", (cid, tenant_id, int(v.shape[0]),
                                             v.astype(np.float32).tobytes(), model))
                    for cid, v in zip(ids, vecs, strict=True)]
        old_ids = []
        if old is not None:
            old_ids = [r[0] for r in await self.app.store.fetchall(
                "SELECT id FROM doc_chunks WHERE doc=?", (pk,))]
        await self.app.store.write(ops)
        if vecs is None and emb.enabled:
            self.app.vector_sync.request()  # after the commit: the worker must see the rows
        self.vscopes.remove(tenant_id, old_ids)
        if vecs is not None and emb.model_id == model:
            self.vscopes.add(tenant_id, ids, vecs)
        self.docs.setdefault(tenant_id, {})[doc_id] = d
        self._publish("updated" if old else "added", tenant_id, doc=d.to_wire(),
                      vectors=vecs is not None)
        return {"doc": d.to_wire(), "changed": True}

    def list(self, tenant_id: str) -> list[dict[str, Any]]:
        return [d.to_wire() for d in sorted(self.docs.get(tenant_id, {}).values(),
                                            key=lambda d: d.pk)]

    async def delete(self, tenant_id: str, doc_id: str, client: str = "") -> dict[str, Any]:
        out = await self.remove(tenant_id, doc_id, client)
        return {"deleted": doc_id, "chunks": out["chunks"]}

    async def remove(self, tenant_id: str, ref: str | int, client: str = "") -> dict[str, Any]:
        """Remove one document with all its chunks, audited. ``ref`` is its ``doc_id``, or the
        id of one of its chunks (``chunk_id`` in search results): the source of that chunk."""
        if isinstance(ref, int) and not isinstance(ref, bool):
            rows = await self.app.store.fetchall(
                "SELECT doc FROM doc_chunks WHERE id=? AND tenant_id=?", (ref, tenant_id))
            by_pk = {d.pk: d for d in self.docs.get(tenant_id, {}).values()}
            d = by_pk.get(rows[0][0]) if rows else None
            if d is None:
                raise not_found("chunk", ref)
        elif isinstance(ref, str) and ref:
            d = self.get(tenant_id, ref)
            if d is None:
                raise not_found("document", ref)
        else:
            raise invalid_params("ref", "expected a doc_id (text) or a chunk id (integer)")
        rec, aop = self.app.shared_audit.record(
            "remove", d.title, f"docs:{tenant_id}/{d.doc_id}", "-", client, tenant_id=tenant_id,
            doc=d.to_wire(), ref=ref)
        chunk_ids = [r[0] for r in await self.app.store.fetchall(
            "SELECT id FROM doc_chunks WHERE doc=?", (d.pk,))]
        await self.app.store.write([
            ("DELETE FROM chunk_vectors WHERE id IN (SELECT id FROM doc_chunks WHERE doc=?)",
             (d.pk,)),
            ("DELETE FROM doc_chunks WHERE doc=?", (d.pk,)),
            ("DELETE FROM docs WHERE id=?", (d.pk,)), aop])
        del self.docs[tenant_id][d.doc_id]
        self.vscopes.remove(tenant_id, chunk_ids)
        self._publish("deleted", tenant_id, doc_id=d.doc_id, chunks=d.chunks, doc=d.to_wire(),
                      audit_id=rec.id, client=client)
        return {"removed": d.to_wire(), "chunks": d.chunks, "audit_id": rec.id}

    async def search(self, tenant_id: str, query: str, opts: dict[str, Any]) -> list[dict[str, Any]]:
        """Top chunks, best first: ``{doc_id, title, seq, text, score, parts, ...}``."""
        if not query.strip():
            raise invalid_params("query", "must not be empty")
        self.searches += 1
        cfg = self.app.config.docs
        top_k = int(opts.get("limit") or cfg.top_k)
        n_cand = int(opts.get("candidates") or cfg.candidates)
        store = self.app.store
        cands: dict[int, dict[str, Any]] = {}
        total = sum(d.chunks for v in self.docs.values() for d in v.values())
        match = fts.match_expr(await fts.informative(store, "doc_chunks_fts", fts.words(query),
                                                     total))
        if match:
            # words that common everywhere: rank only the newest max_scan matching chunks,
            # unless that leaves this tenant fewer than top_k (see user_memory for the same)
            bound = await store.fetchall(
                "SELECT rowid FROM doc_chunks_fts WHERE doc_chunks_fts MATCH ? "
                "ORDER BY rowid DESC LIMIT 1 OFFSET ?", (match, cfg.max_scan))
            low = bound[0][0] if bound else 0
            sql = ("SELECT c.id, c.doc, c.seq, c.content, bm25(doc_chunks_fts) AS r "
                   "FROM doc_chunks_fts JOIN doc_chunks c ON c.id = doc_chunks_fts.rowid "
                   "WHERE doc_chunks_fts MATCH ? AND doc_chunks_fts.rowid >= ? "
                   "AND c.tenant_id=? ORDER BY r LIMIT ?")
            found = await store.fetchall(sql, (match, low, tenant_id, n_cand))
            if low and len(found) < top_k:
                found = await store.fetchall(sql, (match, 0, tenant_id, n_cand))
            for cid, doc, seq, text, r in found:
                cands[cid] = {"chunk_id": cid, "doc": doc, "seq": seq, "text": text,
                              "lexical": -r, "semantic": 0.0}
        emb = self.app.embedder
        emb.check_config()
        qv = await emb.embed([query]) if emb.enabled else None
        fused_parts: dict[int, dict[str, Any]] = {}
        if qv is not None:
            # hybrid: ~n_cand nearest chunks joined to the BM25 candidates, fused by
            # reciprocal rank; the n_cand best fused go on to the reranker
            self.vscopes.dim = int(qv.shape[1])
            m = await self.vscopes.get(tenant_id, int(qv.shape[1]))
            hits = m.search(qv[0], n_cand)
            missing = [cid for cid, _ in hits if cid not in cands]
            if missing:
                for cid, doc, seq, text in await store.fetchall(
                        f"SELECT id, doc, seq, content FROM doc_chunks WHERE id IN "
                        f"({','.join('?' * len(missing))})", missing):
                    cands[cid] = {"chunk_id": cid, "doc": doc, "seq": seq, "text": text,
                                  "lexical": 0.0, "semantic": 0.0}
            for cid, sim in m.similarities(qv[0], list(cands)).items():
                cands[cid]["semantic"] = max(0.0, sim)
            cands, fused_parts = fuse_chunks(cands, hits, self.app.config.memory, n_cand)
        ranked = rerank(query, list(cands.values()), top_k, cfg.max_chunks_per_doc,
                        qv is not None)
        by_pk = {d.pk: d for d in self.docs.get(tenant_id, {}).values()}
        out = []
        for c in ranked:
            d = by_pk.get(c["doc"])
            out.append({"doc_id": d.doc_id if d else None, "title": d.title if d else None,
                        "source": d.source if d else None, "chunk_id": c["chunk_id"],
                        "seq": c["seq"], "text": c["text"], "score": c["score"],
                        "lexical": c["lexical"], "parts": {**c["parts"],
                                                           **fused_parts.get(c["chunk_id"], {})},
                        "matched": fused_parts.get(c["chunk_id"], {}).get("matched", [BM25]),
                        "candidates": len(cands)})
        return out
