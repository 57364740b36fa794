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

import asyncio
import hashlib
import itertools
import re
from collections.abc import Hashable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from memman.config import DEFAULT_MODEL
from memman.errors import invalid_params, not_found
from memman_daemon.search import fts
from memman_daemon.search.hybrid import BM25, VECTOR, rrf
from memman_daemon.search.vector_matrix import blobs_to_matrix
from memman_daemon.storage.sqlite import docs as doc_rows
from memman_daemon.storage.sqlite import fts as fts_rows
from memman_daemon.storage.sqlite.store import Op
from memman_daemon.tiers.chunking import chunk_text
from memman_daemon.tiers.searchable import SearchableTier

_WORD = re.compile(r"\w+", re.UNICODE)

#: rerank weights: (lexical, semantic, coverage, proximity, phrase)
WEIGHTS_FTS = (0.50, 0.0, 0.25, 0.15, 0.10)
WEIGHTS_HYBRID = (0.30, 0.30, 0.20, 0.10, 0.10)

#: a document longer than this (characters) is hashed and chunked off the event loop
OFF_LOOP_CHARS = 256 * 1024


def _digest(content: str) -> str:
    return hashlib.sha256(content.encode()).hexdigest()


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


def check_doc(tenant_id: str, doc: Any) -> None:
    """``memman_docs_add``'s checks of its parameters (-32602 naming the parameter)."""
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
    if not isinstance(doc.get("metadata") or {}, dict):
        raise invalid_params("doc.metadata", "expected a map")


def candidate(chunk_id: int, doc: int, seq: int, text: str,
              lexical: float = 0.0) -> dict[str, Any]:
    """A chunk found by BM25 (``lexical``) or by its vector, before reranking."""
    return {"chunk_id": chunk_id, "doc": doc, "seq": seq, "text": text, "lexical": lexical,
            "semantic": 0.0}


def search_answer(query: str, cands: dict[int, dict[str, Any]],
                  fused_parts: dict[int, dict[str, Any]], by_pk: dict[int, Doc], top_k: int,
                  per_doc: int, hybrid: bool) -> list[dict[str, Any]]:
    """``memman_docs_search``'s answer: the candidates reranked, each with its document."""
    ranked = rerank(query, list(cands.values()), top_k, per_doc, hybrid)
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


class BusinessDocs(SearchableTier):
    """Every tenant's documents (metadata in memory), their chunks and vectors. Vector
    scopes are tenant ids. Built with ``SearchableTier``'s arguments."""

    stats_key = "docs"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.docs: dict[str, dict[str, Doc]] = {}
        self._doc_ids = itertools.count(1)
        self._chunk_ids = itertools.count(1)

    async def load(self) -> None:
        self.docs.clear()
        for pk, tenant, doc_id, d in await doc_rows.all_docs(self.store):
            self.docs.setdefault(tenant, {})[doc_id] = Doc(**{**d, "pk": pk})
        top_doc, top_chunk = await doc_rows.max_ids(self.store)
        self._doc_ids = itertools.count(top_doc + 1)
        self._chunk_ids = itertools.count(top_chunk + 1)
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
        found = await doc_rows.scope_vectors(self.store, str(key), self.embedder.model_id, dim)
        return [r[0] for r in found], blobs_to_matrix([r[1] for r in found], dim)

    async def count_vector_backlog(self, model_id: str) -> int:
        return await doc_rows.count_vector_backlog(self.store, model_id)

    async def vector_backlog(self, after: int, model_id: str, limit: int) -> list[tuple[int, str]]:
        rows = await doc_rows.vector_backlog(self.store, after, model_id, limit)
        for cid, tenant, _ in rows:
            self._backlog_scope[cid] = tenant
        return [(cid, text) for cid, _, text in rows]

    async def store_vectors(self, ids: list[int], vecs: np.ndarray, model_id: str) -> None:
        await self.store.write([doc_rows.late_vector_op(i, v, model_id)
                                for i, v in zip(ids, vecs, strict=True)])
        if self.embedder.model_id == model_id:
            self.vscopes.add_stored(self._backlog_scope, ids, vecs)

    def _publish(self, kind: str, tenant_id: str, **data: Any) -> None:
        self.events.publish("docs", kind, data, tenant_id=tenant_id)

    def get(self, tenant_id: str, doc_id: str) -> Doc | None:
        return self.docs.get(tenant_id, {}).get(doc_id)

    async def add(self, tenant_id: str, doc: dict[str, Any]) -> dict[str, Any]:
        """Add or replace a document; returns ``{doc, changed}`` (same content: unchanged)."""
        check_doc(tenant_id, doc)
        # a large document (a 50 MB agent.md) is hashed and chunked on a worker thread
        big = len(doc["content"]) > OFF_LOOP_CHARS
        digest = (await asyncio.to_thread(_digest, doc["content"]) if big
                  else _digest(doc["content"]))
        doc_id = doc.get("doc_id") or digest[:16]
        old = self.get(tenant_id, doc_id)
        if old is not None and old.hash == digest:
            return {"doc": old.to_wire(), "changed": False}
        pk = old.pk if old else next(self._doc_ids)
        if big:
            d, chunks = await asyncio.to_thread(self._chunked, tenant_id, doc, digest, old, pk)
        else:
            d, chunks = self._chunked(tenant_id, doc, digest, old, pk)
        data = {k: v for k, v in d.to_wire().items() if k != "pk"}
        ops: list[Op] = []
        if old is not None:
            ops += doc_rows.delete_chunks_ops(pk)
        ops.append(doc_rows.put_op(pk, tenant_id, doc_id, data))
        ids = [next(self._chunk_ids) for _ in chunks]
        ops += [doc_rows.chunk_op(cid, pk, tenant_id, c.seq, c.tokens, c.text)
                for cid, c in zip(ids, chunks, strict=True)]
        if big:
            await asyncio.sleep(0)  # the rows of many chunks were just built: let others in
        emb = self.embedder
        model = emb.model_id
        vecs = await emb.embed([c.text for c in chunks]) if emb.embeds_now(len(chunks)) else None
        if vecs is not None:
            ops += [doc_rows.vector_op(cid, tenant_id, v, model)
                    for cid, v in zip(ids, vecs, strict=True)]
        old_ids = []
        if old is not None:
            old_ids = await doc_rows.chunk_ids(self.store, pk)
        await self.store.write(ops)
        if vecs is None and emb.enabled:
            self.vector_sync.request()  # after the commit: the worker must see the rows
        self.vscopes.remove(tenant_id, old_ids)
        if vecs is not None and emb.model_id == model:
            self.vscopes.add(tenant_id, ids, vecs)
        self.docs.setdefault(tenant_id, {})[doc_id] = d
        self._publish("updated" if old else "added", tenant_id, doc=d.to_wire(),
                      vectors=vecs is not None)
        return {"doc": d.to_wire(), "changed": True}

    def _chunked(self, tenant_id: str, doc: dict[str, Any], digest: str, old: Doc | None,
                 pk: int) -> tuple[Doc, list[Any]]:
        """The checked ``doc`` (content hash ``digest``, replacing ``old``) as a ``Doc`` with
        key ``pk``, and its chunks."""
        content = doc["content"]
        cfg = self.config.docs
        enc = self.tokens.encoding(DEFAULT_MODEL)
        chunks = chunk_text(content, enc, cfg.chunk_tokens, cfg.chunk_overlap)
        now = self.clock.now()
        doc_id = doc.get("doc_id") or digest[:16]
        d = Doc(pk=pk, tenant_id=tenant_id, doc_id=doc_id, title=doc.get("title") or doc_id,
                source=doc.get("source") or "upload", hash=digest, chunks=len(chunks),
                tokens=len(enc.encode_ordinary(content)),
                bytes=len(content.encode()), created_at=old.created_at if old else now,
                updated_at=now, metadata=doc.get("metadata") or {})
        return d, chunks

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
            pk = await doc_rows.doc_of_chunk(self.store, ref, tenant_id)
            by_pk = {d.pk: d for d in self.docs.get(tenant_id, {}).values()}
            d = by_pk.get(pk) if pk is not None else None
            if d is None:
                raise not_found("chunk", ref)
        elif isinstance(ref, str) and ref:
            d = self.get(tenant_id, ref)
            if d is None:
                raise not_found("document", ref)
        else:
            raise invalid_params("ref", "expected a doc_id (text) or a chunk id (integer)")
        rec, aop = self.audit.record(
            "remove", d.title, f"docs:{tenant_id}/{d.doc_id}", "-", client, tenant_id=tenant_id,
            doc=d.to_wire(), ref=ref)
        chunk_ids = await doc_rows.chunk_ids(self.store, d.pk)
        await self.store.write([*doc_rows.delete_ops(d.pk), aop])
        del self.docs[tenant_id][d.doc_id]
        self.vscopes.remove(tenant_id, chunk_ids)
        self._publish("deleted", tenant_id, doc_id=d.doc_id, chunks=d.chunks, doc=d.to_wire(),
                      audit_id=rec.id, client=client)
        return {"removed": d.to_wire(), "chunks": d.chunks, "audit_id": rec.id}

    def _search_sizes(self, query: str, opts: dict[str, Any]) -> tuple[int, int]:
        """A search's query checked and counted; ``(top_k, candidates)`` from ``opts`` or
        ``[docs]``."""
        if not query.strip():
            raise invalid_params("query", "must not be empty")
        self.searches += 1
        cfg = self.config.docs
        return int(opts.get("limit") or cfg.top_k), int(opts.get("candidates") or cfg.candidates)

    async def search(self, tenant_id: str, query: str, opts: dict[str, Any]) -> list[dict[str, Any]]:
        """Top chunks, best first: ``{doc_id, title, seq, text, score, parts, ...}``."""
        top_k, n_cand = self._search_sizes(query, opts)
        cfg = self.config.docs
        store = self.store
        cands: dict[int, dict[str, Any]] = {}
        total = sum(d.chunks for v in self.docs.values() for d in v.values())
        match = fts.match_expr(await fts_rows.informative(store, "doc_chunks_fts",
                                                          fts.words(query), total))
        if match:
            # words that common everywhere: rank only the newest max_scan matching chunks,
            # unless that leaves this tenant fewer than top_k (see user_memory for the same)
            low = await fts_rows.newest_bound(store, "doc_chunks_fts", match, cfg.max_scan)
            found = await doc_rows.fts_ranked(store, match, low, tenant_id, n_cand)
            if low and len(found) < top_k:
                found = await doc_rows.fts_ranked(store, match, 0, tenant_id, n_cand)
            for cid, doc, seq, text, r in found:
                cands[cid] = candidate(cid, doc, seq, text, -r)
        emb = self.embedder
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
                for cid, doc, seq, text in await doc_rows.chunks(store, missing):
                    cands[cid] = candidate(cid, doc, seq, text)
            for cid, sim in m.similarities(qv[0], list(cands)).items():
                cands[cid]["semantic"] = max(0.0, sim)
            cands, fused_parts = fuse_chunks(cands, hits, self.config.memory, n_cand)
        by_pk = {d.pk: d for d in self.docs.get(tenant_id, {}).values()}
        return search_answer(query, cands, fused_parts, by_pk, top_k, cfg.max_chunks_per_doc,
                             qv is not None)
