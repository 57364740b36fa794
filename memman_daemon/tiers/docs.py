"""Business context (the three-tier design): per-tenant documents, chunked by tokens and searchable.

Documents are chunked (``chunking.py``) into ``doc_chunks``, indexed by FTS5 and, when an
embeddings endpoint is configured, embedded into ``chunk_vectors``. Search follows the three-tier design's
retrieval shape: gather ~``docs.candidates`` (100) candidates — BM25 from FTS5, plus the
nearest vectors when there are any — then rerank to ``docs.top_k`` (10). The reranker is
deterministic and local (no LLM call, so it is fast and testable): it blends the normalized
BM25 score, the cosine similarity, query-term coverage, term proximity and an exact-phrase
bonus, then keeps at most ``docs.max_chunks_per_doc`` chunks of one document so one long
document cannot fill the top 10. docs/tiers.md gives the weights and the reasoning.

Written once over the documents group (``storage/docs.py``), for the local SQLite file and
PostgreSQL alike: what differs (BM25 from FTS5 or ``ts_rank`` from a ``tsvector``, vectors
ranked by pgvector or in this daemon's matrix, ids counted here or from the shared sequence)
is below that interface. Each tenant's documents are read through an explicit cache
(``DocCache``) that this daemon's writes and other daemons' events (``on_remote``) invalidate;
the matrices of loaded vectors (``vscopes``) are dropped the same way.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from memman.config import DEFAULT_MODEL
from memman.errors import not_found
from memman_daemon.search.core import (
    BM25,
    Found,
    Fusion,
    Ranked,
    Retriever,
    Scope,
    SqlLexical,
    VectorStore,
    question,
)
from memman_daemon.search.words import words as split_words
from memman_daemon.storage import ConstraintError
from memman_daemon.storage.agentmd import DOC_ID
from memman_daemon.storage.counts import BackgroundCounts
from memman_daemon.storage.docs import Doc, NewChunk
from memman_daemon.tiers.chunking import chunk_text_counted
from memman_daemon.tiers.searchable import SearchableTier

if TYPE_CHECKING:
    from memman.config import Config
    from memman_daemon.clock import Clock
    from memman_daemon.events import EventBus
    from memman_daemon.search.embeddings import Embedder
    from memman_daemon.search.reembed import VectorSync
    from memman_daemon.storage import Storage
    from memman_daemon.tiers.audit import Recorder
    from memman_daemon.tokens import TokenCounter

__all__ = ["BusinessDocs", "Doc", "DocCache", "rerank", "rerank_features"]


#: rerank weights: (lexical, semantic, coverage, proximity, phrase)
WEIGHTS_FTS = (0.50, 0.0, 0.25, 0.15, 0.10)
WEIGHTS_HYBRID = (0.30, 0.30, 0.20, 0.10, 0.10)

#: a document longer than this (characters) is hashed and chunked off the event loop
OFF_LOOP_CHARS = 256 * 1024


def _digest(content: str) -> str:
    return hashlib.sha256(content.encode()).hexdigest()


def _stem(term: str) -> str:
    return term[:5] if len(term) > 5 else term


def rerank_features(query: str, text: str) -> tuple[float, float, float]:
    """(coverage, proximity, phrase) of ``text`` for ``query``, each 0..1.

    coverage: share of distinct query terms present (prefix-matched, like the porter-stemmed
    index); proximity: how tightly the present terms cluster (terms / shortest word window
    holding them all); phrase: 1 if the whole query appears verbatim.
    """
    terms = list(dict.fromkeys(split_words(query)))
    if not terms:
        return 0.0, 0.0, 0.0
    words = split_words(text)
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
        have: dict[str, int] = {}
        need, left, best = len(present), 0, len(words) + 1
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
    q = " ".join(split_words(query))
    phrase = 1.0 if len(terms) > 1 and q and q in " ".join(words) else 0.0
    return coverage, proximity, phrase


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
    out: list[dict[str, Any]] = []
    per: dict[int, int] = {}
    for c in cands:
        if per.get(c["doc"], 0) >= per_doc:
            continue
        per[c["doc"]] = per.get(c["doc"], 0) + 1
        out.append(c)
        if len(out) >= top_k:
            break
    return out


def candidate(chunk_id: int, doc: int, seq: int, text: str,
              lexical: float = 0.0) -> dict[str, Any]:
    """A chunk found by BM25 (``lexical``) or by its vector, before reranking."""
    return {"chunk_id": chunk_id, "doc": doc, "seq": seq, "text": text, "lexical": lexical,
            "semantic": 0.0}


class Rerank:
    """The documents' stage after ranking: the fusion's best ``candidates`` (all of them when
    full text alone ranked), each chunk's cosine floored at 0, reranked locally (``rerank``)
    to ``top_k``, at most ``per_doc`` chunks of one document."""

    name = "rerank"

    def __init__(self, candidates: int, top_k: int, per_doc: int) -> None:
        self.candidates, self.top_k, self.per_doc = candidates, top_k, per_doc

    def __call__(self, ranked: Ranked) -> Ranked:
        kept = ranked.hits[: self.candidates] if ranked.fused else ranked.hits
        cands = []
        for c in kept:
            row = c.row
            row["semantic"] = max(0.0, c.cosine) if c.cosine is not None else 0.0
            row["fused"] = c.fused.to_wire() if c.fused is not None else {}
            cands.append(row)
        ranked.candidates = len(cands)
        order = {row["chunk_id"]: c for row, c in zip(cands, kept, strict=True)}
        out = rerank(ranked.query, cands, self.top_k, self.per_doc, ranked.fused)
        ranked.hits = [order[row["chunk_id"]] for row in out]
        for c in ranked.hits:
            c.score = c.row["score"]
        return ranked


def search_answer(ranked: Ranked, by_pk: dict[int, Doc]) -> list[dict[str, Any]]:
    """``memman_docs_search``'s answer: the reranked candidates, each with its document."""
    out = []
    for hit in ranked.hits:
        c = hit.row
        d = by_pk.get(c["doc"])
        fused = c["fused"]
        out.append({"doc_id": d.doc_id if d else None, "title": d.title if d else None,
                    "source": d.source if d else None, "chunk_id": c["chunk_id"],
                    "seq": c["seq"], "text": c["text"], "score": c["score"],
                    "lexical": c["lexical"], "parts": {**c["parts"], **fused},
                    "matched": fused.get("matched", [BM25]),
                    "candidates": ranked.candidates})
    return out


class DocCache:
    """Each tenant's documents as last read: the read-through cache of ``list``, ``get`` and
    search answers. ``invalidate`` drops a tenant (or all); a read that raced an
    invalidation is not kept."""

    def __init__(self, read: Callable[[str], Awaitable[list[Doc]]]) -> None:
        self._read = read
        self.by_tenant: dict[str, dict[str, Doc]] = {}
        self._generation = 0

    async def docs(self, tenant_id: str) -> dict[str, Doc]:
        got = self.by_tenant.get(tenant_id)
        if got is None:
            generation = self._generation
            got = {d.doc_id: d for d in await self._read(tenant_id)}
            if generation == self._generation:
                self.by_tenant[tenant_id] = got
        return got

    def invalidate(self, tenant_id: str | None = None) -> None:
        self._generation += 1
        if tenant_id is None:
            self.by_tenant.clear()
        else:
            self.by_tenant.pop(tenant_id, None)


@dataclass
class Prepared:
    """A document's change, ready to commit (``ops``) and then to announce (``committed``)."""

    doc: Doc
    old: Doc | None
    ops: list[Any]
    ids: list[int]
    vecs: Any
    model: str
    old_ids: list[int]
    changed: bool = True


class BusinessDocs(SearchableTier):
    """Every tenant's documents, their chunks and vectors, over ``storage.docs``. Vector
    scopes are tenant ids."""

    stats_key = "docs"

    def __init__(self, config: Config, clock: Clock, storage: Storage, events: EventBus,
                 tokens: TokenCounter, embedder: Embedder, vector_sync: VectorSync,
                 audit: Recorder) -> None:
        super().__init__(config, clock, storage.local, events, tokens, embedder, vector_sync,
                         audit)
        self.storage = storage
        self.rows = storage.docs
        self.vectors = self.rows.vectors  #: the rows' vector index (how vectors are ranked)
        self.cache = DocCache(self.rows.of_tenant)
        self.counts = BackgroundCounts(self.rows.counts, ("tenants", "documents", "chunks"))
        self._locks: dict[str, asyncio.Lock] = {}
        #: set by the app: called (awaited) with the tenant when its agent.md document was
        #: removed, so the file on each host follows
        self.on_agent_md_removed: list[Callable[[str], Awaitable[Any]]] = []

    async def load(self) -> None:
        await self.rows.load()
        self.vectors.open()
        await self.counts.refresh()

    async def close(self) -> None:
        self.counts.close()
        self.vectors.close()

    def stats(self) -> dict[str, Any]:
        """Counts as of the previous call (refreshed in the background: stats are sync)."""
        return {**self.counts.current(), "searches": self.searches,
                "vector_backend": self.vectors.backend, "backend": self.storage.name,
                "vector_index": self.vscopes.stats()}

    def invalidate(self, tenant_id: str | None = None) -> None:
        """Forget what was read of ``tenant_id`` (every tenant: None): documents, vectors."""
        self.cache.invalidate(tenant_id)
        if tenant_id is None:
            self.vscopes.scopes.clear()
        else:
            self.vscopes.scopes.pop(tenant_id, None)

    def on_remote(self, topic: str, kind: str, scope: dict[str, Any]) -> None:
        """Another daemon changed a tenant's documents."""
        if topic == "docs" and scope.get("tenant_id"):
            self.invalidate(scope["tenant_id"])

    # --- vectors ---------------------------------------------------------------------------
    async def _load_scope(self, key: Hashable) -> tuple[list[int], np.ndarray]:
        return await self.rows.scope_vectors(str(key), self.embedder.model_id,
                                             self.vscopes.dim or 0)

    async def count_vector_backlog(self, model_id: str) -> int:
        return await self.rows.count_backlog(model_id)

    async def vector_backlog(self, after: int, model_id: str, limit: int) -> list[tuple[int, str]]:
        rows = await self.rows.backlog(after, model_id, limit)
        for cid, tenant, _ in rows:
            self._backlog_scope[cid] = tenant
        return [(cid, text) for cid, _, text in rows]

    async def store_vectors(self, ids: list[int], vecs: np.ndarray, model_id: str) -> None:
        await self.storage.write(self.rows.late_vector_ops(ids, vecs, model_id))
        if self.embedder.model_id == model_id:
            self.vscopes.add_stored(self._backlog_scope, ids, vecs)

    def _publish(self, kind: str, tenant_id: str, **data: Any) -> None:
        self.events.publish("docs", kind, data, tenant_id=tenant_id)

    # --- add -------------------------------------------------------------------------------
    def _lock(self, tenant_id: str) -> asyncio.Lock:
        return self._locks.setdefault(tenant_id, asyncio.Lock())

    async def add(self, tenant_id: str, doc: dict[str, Any]) -> dict[str, Any]:
        """Add or replace a document; returns ``{doc, changed}`` (same content: unchanged)."""
        async with self._lock(tenant_id):  # one writer of a tenant's documents per daemon
            for attempt in range(3):
                p = await self.prepare(tenant_id, doc)
                try:
                    await self.storage.write(p.ops)
                    break
                except ConstraintError:  # another daemon added it first: replace that one
                    if attempt == 2:
                        raise
        self.committed(p)
        return {"doc": p.doc.to_wire(), "changed": p.changed}

    async def prepare(self, tenant_id: str, doc: dict[str, Any]) -> Prepared:
        """The checked ``doc`` as the operations storing it (none when its content is
        unchanged). Commit ``ops`` (with whatever else must commit with them), then call
        ``committed``; a ``ConstraintError`` means: prepare again."""
        # a large document (a 50 MB agent.md) is hashed and chunked on a worker thread
        big = len(doc["content"]) > OFF_LOOP_CHARS
        digest = (await asyncio.to_thread(_digest, doc["content"]) if big
                  else _digest(doc["content"]))
        doc_id = doc.get("doc_id") or digest[:16]
        old = await self.rows.get(tenant_id, doc_id)
        if old is not None and old.hash == digest:
            return Prepared(old, old, [], [], None, "", [], changed=False)
        pk = old.pk if old else await self.rows.new_doc_id()
        if big:
            d, chunks = await asyncio.to_thread(self._chunked, tenant_id, doc, digest, old, pk)
        else:
            d, chunks = self._chunked(tenant_id, doc, digest, old, pk)
        ids = await self.rows.new_chunk_ids(len(chunks))
        if big:
            await asyncio.sleep(0)  # the chunks were just built: let others in
        emb = self.embedder
        model = emb.model_id
        vecs = await emb.embed([c.text for c in chunks]) if emb.embeds_now(len(chunks)) else None
        old_ids = await self.rows.chunk_ids(pk) if old is not None else []

        def ops() -> list[Any]:  # one row per chunk: tens of thousands for a 50 MB document
            new = [NewChunk(cid, c.seq, c.tokens, c.text)
                   for cid, c in zip(ids, chunks, strict=True)]
            return self.rows.upsert_ops(d, new, vecs, model, old is not None)

        return Prepared(d, old, await asyncio.to_thread(ops) if big else ops(), ids, vecs,
                        model, old_ids)

    def committed(self, p: Prepared) -> None:
        """After ``p.ops`` committed: the caches follow, the change is announced."""
        if not p.changed:
            return
        tenant_id = p.doc.tenant_id
        if p.vecs is None and p.ids and self.embedder.enabled:
            self.vector_sync.request()  # after the commit: the worker must see the rows
        self.cache.invalidate(tenant_id)
        self.vscopes.remove(tenant_id, p.old_ids)
        if p.vecs is not None and self.embedder.model_id == p.model:
            self.vscopes.add(tenant_id, p.ids, p.vecs)
        self._publish("updated" if p.old else "added", tenant_id, doc=p.doc.to_wire(),
                      vectors=p.vecs is not None)

    def _chunked(self, tenant_id: str, doc: dict[str, Any], digest: str, old: Doc | None,
                 pk: int) -> tuple[Doc, list[Any]]:
        """The checked ``doc`` (content hash ``digest``, replacing ``old``) as a ``Doc`` with
        key ``pk``, and its chunks."""
        content = doc["content"]
        cfg = self.config.docs
        enc = self.tokens.encoding(DEFAULT_MODEL)
        # the tokens counted by the one encoding chunking makes (a second one held a 50 MB
        # agent.md's worker thread seconds longer)
        chunks, tokens = chunk_text_counted(content, enc, cfg.chunk_tokens, cfg.chunk_overlap)
        now = self.clock.now()
        doc_id = doc.get("doc_id") or digest[:16]
        d = Doc(pk=pk, tenant_id=tenant_id, doc_id=doc_id, title=doc.get("title") or doc_id,
                source=doc.get("source") or "upload", hash=digest, chunks=len(chunks),
                tokens=tokens,
                bytes=len(content.encode()), created_at=old.created_at if old else now,
                updated_at=now, metadata=doc.get("metadata") or {})
        return d, chunks

    # --- remove ----------------------------------------------------------------------------
    async def delete(self, tenant_id: str, doc_id: str, client: str = "") -> dict[str, Any]:
        out = await self.remove(tenant_id, doc_id, client)
        return {"deleted": doc_id, "chunks": out["chunks"]}

    async def remove(self, tenant_id: str, ref: str | int, client: str = "", *,
                     follow: bool = True) -> dict[str, Any]:
        """Remove one document with all its chunks, audited in the same transaction. ``ref``
        is its ``doc_id``, or the id of one of its chunks (``chunk_id`` in search results):
        the source of that chunk. Removing agent.md removes its content too, and (``follow``)
        each host's file follows."""
        if isinstance(ref, str):
            d = await self.rows.get(tenant_id, ref)
            if d is None:
                raise not_found("document", ref)
        else:  # a chunk's id (the schema lets nothing else through: never a bool)
            d = await self.rows.of_chunk(tenant_id, ref)
            if d is None:
                raise not_found("chunk", ref)
        await self.audit.ensure_ids(1)
        rec, aop = self.audit.record(
            "remove", d.title, f"docs:{tenant_id}/{d.doc_id}", "-", client, tenant_id=tenant_id,
            doc=d.to_wire(), ref=ref)
        chunk_ids = await self.rows.chunk_ids(d.pk)
        agent_md = self.storage.agent_md.delete_ops(tenant_id) if d.doc_id == DOC_ID else []
        await self.storage.write([*agent_md, *self.rows.delete_ops(d), aop])
        self.cache.invalidate(tenant_id)
        self.vscopes.remove(tenant_id, chunk_ids)
        self._publish("deleted", tenant_id, doc_id=d.doc_id, chunks=d.chunks, doc=d.to_wire(),
                      audit_id=rec.id, client=client)
        if follow and d.doc_id == DOC_ID:  # each host's file follows (this one now, others
            for hook in self.on_agent_md_removed:  # by the event)
                await hook(tenant_id)
        return {"removed": d.to_wire(), "chunks": d.chunks, "audit_id": rec.id}

    # --- search ----------------------------------------------------------------------------
    def _search_sizes(self, query: str, opts: dict[str, Any]) -> tuple[int, int]:
        """A search counted; ``(top_k, candidates)`` from ``opts`` or ``[docs]``."""
        self.searches += 1
        cfg = self.config.docs
        return int(opts.get("limit") or cfg.top_k), int(opts.get("candidates") or cfg.candidates)

    async def search(self, tenant_id: str, query: str, opts: dict[str, Any]) -> list[dict[str, Any]]:
        """Top chunks, best first: ``{doc_id, title, seq, text, score, parts, ...}``: the
        retrieval core over the tenant's chunks (full text and nearest vectors, fused by
        reciprocal rank with ``[docs]``'s constants), then its declared stage, the local
        reranker (``Rerank``)."""
        top_k, n_cand = self._search_sizes(query, opts)
        query = question(query)  # a huge query is ranked by its head and tail (bounded work)
        cfg = self.config.docs
        emb = self.embedder
        emb.check_config()
        qv = await emb.embed([query]) if emb.enabled else None
        ranked = await self.retriever(top_k).run(
            query, Scope(tenant_id), candidates=n_cand, qv=None if qv is None else qv[0],
            cosines=n_cand, stages=(Rerank(n_cand, top_k, cfg.max_chunks_per_doc),))
        by_pk = {d.pk: d for d in (await self.cache.docs(tenant_id)).values()}
        return search_answer(ranked, by_pk)

    def retriever(self, top_k: int) -> Retriever:
        """The retrieval core over the documents group: SQL full text (the tenant in its
        ``WHERE``), the store's or the loaded matrix's vectors, ``[docs]``'s fusion."""
        cfg = self.config.docs

        async def text(query: str, scope: Scope, k: int) -> list[Found]:
            return [(cid, score, candidate(cid, doc, seq, text, score))
                    for cid, doc, seq, text, score in await self.rows.full_text(
                        scope.owner, query, k, top_k, cfg.max_scan)]

        async def nearest(qv: np.ndarray, scope: Scope, k: int) -> list[tuple[int, float]] | None:
            return await self.rows.nearest(scope.owner, qv, self.embedder.model_id, k)

        async def rows(ids: list[int], scope: Scope) -> dict[int, dict[str, Any]]:
            return {cid: candidate(cid, doc, seq, text)
                    for cid, doc, seq, text in await self.rows.chunks(ids)}

        return Retriever(SqlLexical(text), VectorStore(nearest, self.vscopes,
                                                       lambda scope: [scope.owner]),
                         rows, Fusion.of(cfg))

    # --- reads (last: ``list`` would shadow the type in the annotations above) -----------------------------------------------------------------------------
    async def get(self, tenant_id: str, doc_id: str) -> Doc | None:
        return (await self.cache.docs(tenant_id)).get(doc_id)

    async def list(self, tenant_id: str) -> list[dict[str, Any]]:
        docs = (await self.cache.docs(tenant_id)).values()
        return [d.to_wire() for d in sorted(docs, key=lambda d: d.pk)]
