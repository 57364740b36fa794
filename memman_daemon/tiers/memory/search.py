"""Finding user memory: hybrid search of the stored layers (full text plus the four-layer
design's recency bonus; with embeddings, vectors fused by reciprocal rank), the term search of
working memory, the three-tier design's lookup (exact flow first, then similarity), the
playbook for a request, and what bears on a question (the window's ``learned`` part)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from memman.errors import invalid_params
from memman_daemon.scope import caller_of
from memman_daemon.search import fts
from memman_daemon.search.core import (
    BM25,
    VECTOR,
    Found,
    Fusion,
    Ranked,
    Retriever,
    Scope,
    SqlLexical,
    VectorStore,
    question,
)
from memman_daemon.search.hybrid import content_words
from memman_daemon.search.words import words as split_words
from memman_daemon.storage.memories import KEYED_KINDS, MemoryRecord
from memman_daemon.tiers.memory.core import MEMORY_TYPES, STORED_TYPES, MemoryCore, check_type

if TYPE_CHECKING:
    from memman_daemon.sessions import Sessions
    from memman_daemon.tiers.scratchpad import Scratchpad



def term_score(text: str, terms: list[str]) -> float:
    """The four-layer design's term score: 2 per exact word occurrence, 1 for a term inside a
    word."""
    lowered = text.lower()
    words = split_words(lowered)
    score = 0.0
    for t in terms:
        exact = sum(1 for w in words if w == t)
        if exact:
            score += 2 * exact
        elif t in lowered:
            score += 1
    return score


def playbook_snippet(pb: MemoryRecord) -> str:
    """A playbook as one scratchpad snippet: the recipe the skill can follow or adapt."""
    m = pb.metadata
    calls = ", ".join(
        str(c.get("tool_id") or c.get("tool") or c.get("name") or c) if isinstance(c, dict)
        else str(c) for c in (m.get("tool_calls") or []))
    slots = ", ".join(f"{k}={v}" for k, v in (m.get("slots") or {}).items())
    parts = [f"Playbook for flow {pb.key}: a past request \"{m.get('user_query', '')}\""]
    if slots:
        parts.append(f"slots {slots}")
    if calls:
        parts.append(f"tool calls {calls}")
    if m.get("outcome"):
        parts.append(f"outcome: {m['outcome']}")
    return "; ".join(parts) + "."


def _threshold(value: float | None, default: float) -> float:
    """``opts.threshold`` (a cosine from -1 to 1: the schema checked it), else the default."""
    return default if value is None else float(value)


def in_scope(rec: MemoryRecord, scope: Scope) -> bool:
    """``rec`` is within ``scope``: its user, one of its layers, its kind, its key prefix."""
    return (rec.user_id == scope.owner and rec.type in scope.layers
            and (not scope.kind or rec.kind == scope.kind)
            and (scope.key_prefixes is None
                 or rec.key is not None and rec.key.startswith(scope.key_prefixes)))


class KeyedFloor:
    """A stage after ranking (the three-tier design): a preference or rule applies or not —
    one found by meaning alone (not by its words) is kept only at a cosine of at least
    ``threshold``."""

    name = "keyed_floor"

    def __init__(self, threshold: float) -> None:
        self.threshold = threshold

    def __call__(self, ranked: Ranked) -> Ranked:
        if ranked.fused:
            ranked.hits = [c for c in ranked.hits if not (
                c.row.kind in KEYED_KINDS and BM25 not in c.matched
                and (c.cosine or 0.0) < self.threshold)]
        return ranked


class Recency:
    """A stage after ranking (the four-layer design's recency bonus): a record's score gains
    up to ``[memory] recency_bonus`` as it is new — on the lexical scale when full text alone
    ranked, else ``rrf_recency`` at most on the fused scale; best first again (ties: newer
    id first)."""

    name = "recency"

    def __init__(self, bonus: Any, now: float, most: float, rrf_most: float) -> None:
        self.bonus, self.now, self.most, self.rrf_most = bonus, now, most, rrf_most

    def __call__(self, ranked: Ranked) -> Ranked:
        for c in ranked.hits:
            b = self.bonus(c.row.updated_at, self.now)
            c.extra["recency"] = b
            if ranked.fused:
                part = self.rrf_most * (b / self.most if self.most else 0.0)
                c.extra["rrf_recency"] = part
                c.score = round(c.score + part, 6)
            else:
                c.score = round(c.lexical + b, 6)
        ranked.hits.sort(key=lambda c: (-c.score, -c.id))
        return ranked


class MemorySearch:
    """Search, lookup and playbooks over every layer of a user."""

    def __init__(self, core: MemoryCore, sessions: Sessions, scratchpad: Scratchpad, *,
                 read_only: bool) -> None:
        self.core = core
        self.sessions = sessions
        self.scratchpad = scratchpad
        self.read_only = read_only
        self.searches = 0

    def user_sessions(self, user_id: str, tenant_id: str | None = None) -> list[str]:
        """The user's sessions (within ``tenant_id`` when given: what a session said is the
        user's within its tenant, ``memman.scope``)."""
        return [sid for sid, s in self.sessions.by_id.items() if s.meta.user_id == user_id
                and (tenant_id is None or s.meta.tenant_id == tenant_id)]

    async def search(self, user_id: str, type_: str, query: str,
                     opts: dict[str, Any]) -> list[dict[str, Any]]:
        """Best first, each with ``score`` and its parts (``lexical``, ``semantic``,
        ``recency``; in hybrid mode also ``matched`` and ``parts``: rank and score in each
        list, fused score). ``type_`` "" or "all" searches the stored layers together.
        ``opts.flow``: the three-tier design's lookup -- exact flow id matches first, then
        (with a query) records similar to the query above ``memory.similarity_threshold``."""
        self.searches += 1
        self.core.embedder.check_config()
        query = question(query)  # a huge query is ranked by its head and tail (bounded work)
        limit = int(opts.get("limit") or self.core.config.memory.search_limit)
        if type_ in ("", "all"):
            types: tuple[str, ...] = STORED_TYPES
        else:
            check_type(type_, MEMORY_TYPES)
            types = (type_,)
        if types == ("working",):
            return self._search_working(user_id, query, limit, opts.get("session_id"),
                                        caller_of(self.sessions.by_id, user_id,
                                                  opts.get("tenant_id")).tenant_id)
        kind = opts.get("kind")
        flow = opts.get("flow")
        if flow is not None:
            return await self._lookup(user_id, types, flow, query, limit, kind,
                                      opts.get("threshold"))
        if not query.strip():
            raise invalid_params("query", "must not be empty (or pass opts.flow for playbooks)")
        return await self._search_stored(user_id, types, query, limit, kind,
                                         self.mode_for(opts), opts.get("key_prefixes"))

    def mode_for(self, opts: dict[str, Any]) -> str:
        """``opts.mode``: "hybrid" (default with embeddings on), "fts" or "vector"; with
        embeddings off every mode is "fts"."""
        mode = opts.get("mode")
        if not self.core.embedder.enabled:
            return "fts"
        return mode or "hybrid"

    def _recency(self, at: float, now: float) -> float:
        cfg = self.core.config.memory
        age = max(0.0, now - at)
        if age >= cfg.recency_window_s:
            return 0.0
        return cfg.recency_bonus * (1.0 - age / cfg.recency_window_s)

    # --- the retrieval core's backends over the memories group ----------------------------
    async def _full_text(self, query: str, scope: Scope, k: int, *, content_only: bool,
                         want: int) -> list[Found]:
        """The SQL lexical index: records of the scope (its user, layers, kind: the
        ``WHERE``) matching ``query``, best first. ``content_only``: stop words left out of
        the query (the hybrid half)."""
        cfg = self.core.config.memory
        words = fts.words(query)
        if content_only:
            words = content_words(words)
        # in a hybrid search the vectors carry the meaning, so full text needs fewer rows
        found = await self.core.rows.full_text(
            scope.owner, scope.layers, words, scope.kind, k,
            scan=cfg.hybrid_max_scan if content_only else cfg.max_scan, want=want,
            key_prefixes=scope.key_prefixes)
        return [(r.id, s, r) for r, s in found]

    async def _store_nearest(self, qv: np.ndarray, scope: Scope,
                             k: int) -> list[tuple[int, float]] | None:
        if scope.key_prefixes is not None or scope.kind in KEYED_KINDS:
            # a key prefix or a keyed kind: the cached keyed records are all of them, so
            # they are ranked among those in scope (before ranking), not the layer's nearest
            # (a kind of episodic record: in the store's WHERE where it ranks, else its
            # nearest are filtered, ``_rows``)
            recs = [r for r in await self._keyed(scope.owner, scope.layers, scope.kind)
                    if in_scope(r, scope)]
            sims = await self.core_vectors().similarities(qv, scope, [r.id for r in recs],
                                                          load=True)
            return sorted(sims.items(), key=lambda t: -t[1])[:k]
        return await self.core.rows.nearest(scope.owner, scope.layers, qv,
                                            self.core.embedder.model_id, k, scope.kind)

    async def _rows(self, ids: list[int], scope: Scope) -> dict[int, MemoryRecord]:
        """The live records among ``ids`` that are within ``scope``."""
        got = await self.core.rows.live(ids)
        return {i: r for i, r in got.items() if in_scope(r, scope)}

    def core_vectors(self) -> VectorStore:
        """The retrieval core's vector store over user memory: the store ranks where it can,
        else the user's layers' loaded matrices."""
        return VectorStore(self._store_nearest, self.core.vscopes,
                           lambda scope: [(scope.owner, t) for t in scope.layers])

    def retriever(self, *, want: int, content_only: bool) -> Retriever:
        """The retrieval core over user memory: SQL full text, the store's or the loaded
        matrices' vectors, fused with ``[memory]``'s constants."""
        core = self.core

        async def text(query: str, scope: Scope, k: int) -> list[Found]:
            return await self._full_text(query, scope, k, content_only=content_only, want=want)

        return Retriever(SqlLexical(text), self.core_vectors(), self._rows,
                         Fusion.of(core.config.memory))

    async def _search_stored(self, user_id: str, types: tuple[str, ...], query: str,
                             limit: int, kind: str | None, mode: str = "hybrid",
                             key_prefixes: list[str] | None = None) -> list[dict[str, Any]]:
        core = self.core
        cfg = core.config.memory
        scope = Scope(user_id, types, kind or None,
                      None if key_prefixes is None else tuple(key_prefixes))
        qv = await core.embedder.embed([query]) if mode != "fts" else None
        ranked = await self.retriever(want=limit, content_only=mode == "hybrid").run(
            query, scope, candidates=cfg.candidates, qv=None if qv is None else qv[0],
            lexical=mode != "vector", cosines=limit * 4,
            stages=(KeyedFloor(core.embedder.threshold("similarity",
                                                       cfg.similarity_threshold)),
                    Recency(self._recency, core.clock.now(), cfg.recency_bonus,
                            cfg.rrf_recency)))
        out = []
        for c in ranked.hits[:limit]:
            rec = c.row
            bonus = c.extra["recency"]
            hit = {**rec.to_wire(), "score": c.score, "lexical": round(c.lexical, 6),
                   "semantic": None if c.cosine is None else round(c.cosine, 6),
                   "recency": round(bonus, 6), "matched": c.matched}
            if c.fused is not None:
                hit["parts"] = {**c.fused.to_wire(), "recency": round(c.extra["rrf_recency"], 6)}
            out.append(hit)
        return out

    # --- the three-tier design's lookup: exact id (flow) first, then similarity -----------
    async def _keyed(self, user_id: str, types: tuple[str, ...],
                     kind: str | None) -> list[MemoryRecord]:
        """The live keyed records (preferences, rules, playbooks) of these layers, in id
        order."""
        recs = [r for r in (await self.core.cache.user(user_id)).values() if r.type in types
                and (not kind or r.kind == kind)]
        return sorted(recs, key=lambda r: r.id)

    async def similar(self, user_id: str, types: tuple[str, ...], query: str,
                      kind: str | None = None) -> list[tuple[MemoryRecord, float]]:
        """Keyed records by cosine to ``query``, best first (empty with embeddings off): the
        retrieval core's vector list over the scope's keyed records."""
        recs = await self._keyed(user_id, types, kind)
        if not recs or not query.strip():
            return []
        qv = await self.core.embedder.embed([query])
        if qv is None:
            return []
        scope = Scope(user_id, tuple(sorted({r.type for r in recs})), kind)
        ranked = await self.retriever(want=0, content_only=True).by_vector(
            qv[0], scope, {r.id: r for r in recs})
        scored = [(c.row, c.score) for c in ranked.hits]
        scored.sort(key=lambda t: (-t[1], -t[0].updated_at))
        return scored

    async def _lookup(self, user_id: str, types: tuple[str, ...], flow: str, query: str,
                      limit: int, kind: str | None, threshold: Any) -> list[dict[str, Any]]:
        types = tuple(t for t in types if t in ("semantic", "procedural")) or ("procedural",)
        exact = [r for r in await self._keyed(user_id, types, kind) if r.key == flow]
        exact.sort(key=lambda r: -r.updated_at)
        out = [{**r.to_wire(), "score": 1.0, "match": "flow", "matched": ["flow"]}
               for r in exact]
        if query.strip():
            th = _threshold(threshold, self.core.embedder.threshold(
                "similarity", self.core.config.memory.similarity_threshold))
            seen = {r.id for r in exact}
            for r, sim in await self.similar(user_id, types, query, kind):
                if sim >= th and r.id not in seen:
                    out.append({**r.to_wire(), "score": round(sim, 6), "semantic": round(sim, 6),
                                "match": "similarity", "matched": [VECTOR], "threshold": th})
        return out[:limit]

    async def bearing_on(self, s: Any, query: str) -> list[str]:
        """The preferences and rules of the session's user that bear on ``query`` (found as
        memory search finds them: hybrid, with the similarity floor for a match by meaning
        alone) and the playbook that matches it, as window lines, best first. Only for a user
        of whom this daemon holds keyed records: building a window never waits on a store."""
        user = s.meta.user_id
        if not self.core.cache.peek(user):
            return []
        out: list[str] = []
        for type_ in ("semantic", "procedural"):
            for r in await self.search(user, type_, query, {"limit": 5}):
                if r.get("kind") in ("preference", "rule"):
                    out.append(f"- {r['kind']} {r.get('key') or ''}: {r.get('content', '')}")
        got = await self.playbook(user, query, {"write": False})
        pb = got.get("playbook")
        if pb:
            out.append(f"- playbook for '{pb.get('key') or ''}': {pb.get('content', '')}")
        return list(dict.fromkeys(out))

    async def playbook(self, user_id: str, query: str, opts: dict[str, Any],
                       client: str = "") -> dict[str, Any]:
        """The three-tier design: the playbook for this request -- the newest playbook of
        ``opts.flow`` if there is one, else the one most similar to ``query`` at or above
        ``memory.playbook_threshold`` (``opts.threshold``). With ``opts.session_id`` it is
        written to that session's scratchpad (before the skill runs), unless ``opts.write``
        is false."""
        flow = opts.get("flow")
        sid = opts.get("session_id")
        if sid is not None:
            s = self.sessions.get(sid)
            if s.meta.user_id != user_id:
                raise invalid_params("opts.session_id", f"session {sid!r} belongs to user "
                                     f"{s.meta.user_id!r}, not {user_id!r}")
        core = self.core
        th = _threshold(opts.get("threshold"), core.embedder.threshold(
            "playbook", core.config.memory.playbook_threshold))
        if not query.strip() and not flow:
            raise invalid_params("query", "must not be empty (or pass opts.flow)")
        core.embedder.check_config()
        chosen: MemoryRecord | None = None
        match, sim = None, None
        if flow:
            books = sorted((b for b in await self._keyed(user_id, ("procedural",), "playbook")
                            if b.key == flow), key=lambda b: -b.updated_at)
            if books:
                chosen, match, sim = books[0], "flow", 1.0
        ranked = await self.similar(user_id, ("procedural",), query, "playbook")
        if chosen is None and ranked and ranked[0][1] >= th:
            chosen, match, sim = ranked[0][0], "similarity", ranked[0][1]
        snippet = None
        if chosen is not None and sid and opts.get("write", True) and not self.read_only:
            res = await self.scratchpad.write(sid, playbook_snippet(chosen), {
                "flow": chosen.key, "metadata": {"source": "playbook", "playbook_id": chosen.id,
                                                 "match": match}}, client)
            snippet = res["snippet"]
        return {"playbook": chosen.to_wire() if chosen else None, "match": match,
                "similarity": None if sim is None else round(sim, 6), "threshold": th,
                "mode": "hybrid" if core.embedder.enabled else "flow",
                "candidates": [{"id": r.id, "flow": r.key, "user_query":
                                r.metadata.get("user_query"), "similarity": round(s, 6)}
                               for r, s in ranked[:3]],
                "snippet": snippet}

    def _search_working(self, user_id: str, query: str, limit: int,
                        session_id: str | None, tenant_id: str) -> list[dict[str, Any]]:
        terms = split_words(query)
        now = self.core.clock.now()
        out = []
        for sid in self.user_sessions(user_id, tenant_id):
            if session_id and sid != session_id:
                continue
            for sn in self.scratchpad.peek(sid):
                base = term_score(sn.text, terms)
                if base <= 0:
                    continue
                bonus = self._recency(sn.last_used_at, now)
                out.append({**sn.to_wire(), "type": "working", "score": round(base + bonus, 6),
                            "lexical": base, "semantic": None, "recency": round(bonus, 6)})
        out.sort(key=lambda d: (-d["score"], -d["id"]))
        return out[:limit]
