"""The retrieval core: the one retriever behind recall, user memory search (every type), the
playbook lookup, document search, MCP ``search`` and the LangGraph store (both through
``memman_memory_search`` / ``memman_docs_search``).

One shape, whatever the rows::

    scope ─▶ lexical index ─┐
                            ├─▶ fusion (RRF, constants from config) ─▶ stages ─▶ answer
    scope ─▶ vector store ──┘

- **Scope first.** The caller's scope (``Scope``: the owner — a user, a tenant —, the layers,
  a kind, or a row mask from ``memman_daemon/scope.py``) is an argument of every backend, which
  applies it *before* it ranks: a SQL ``WHERE`` (user memory, documents) or a mask over the
  rows (the recall index's corpus: ``across_mask``). No path ranks rows the caller may not see.
- **One lexical index interface** (``LexicalIndex``): in memory, BM25 over a corpus
  (``Bm25Lexical``: ``search/bm25.py``, the recall index's), or SQL full text (``SqlLexical``:
  a table group's ``full_text`` — FTS5 in the SQLite file, ``ts_rank`` in PostgreSQL —
  adapted by the tier that owns the group).
- **One vector store interface** (``VectorStore``): the store ranks where it can (pgvector),
  else the scope's vectors loaded into the daemon's matrices (``search/vector_matrix.py``;
  sqlite-vec and the fallback matrix of PostgreSQL alike). ``DenseVectors`` is the recall
  index's form: one matrix-vector product over a whole corpus.
- **Fusion** (``Fusion``): reciprocal rank fusion (``search/hybrid.py``) with its constants
  from config, per use: ``[recall] rrf_k`` (60), ``[memory] rrf_k`` / ``bm25_weight`` /
  ``vector_weight`` (5, 0.5, 1.0), ``[docs]`` the same keys.
- **Stages after ranking**, each declared (``Stage``): what is specific to one caller. The
  recall index's MaxSim second stage (``MaxSim``: late interaction over the fusion's best
  ``[recall] rerank_candidates``), user memory's floor for keyed records and its recency bonus
  (``tiers/memory/search.py``), the documents' reranker (``tiers/docs.py``), the window's
  completing turn (``engine/window/retrieve.py``, over the recall index's ``Hits``).

``Retriever.run`` is the list form (user memory, documents, the playbook lookup);
``dense`` is the same fusion over a whole in-memory corpus at once (arrays indexed by row: the
recall index's ``retrieve``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from memman_daemon.search import late
from memman_daemon.search.hybrid import BM25, VECTOR, Fused, dense_ranks, rrf, rrf_dense
from memman_daemon.search.words import excerpt

__all__ = ["BM25", "VECTOR", "Bm25Lexical", "Candidate", "DenseRanking", "DenseVectors",
           "Found", "Fusion", "LexicalIndex", "MaxSim", "Ranked", "Retriever", "Scope",
           "SqlLexical", "Stage", "VectorStore", "dense", "question"]

#: a lexical match: ``(id, score (higher is better), the row as the backend read it)``
Found = tuple[int, float, Any]


def question(text: str) -> str:
    """The part of a question that is ranked: a huge one by its head and tail (bounded work,
    ``words.excerpt``), for every path alike."""
    return excerpt(text)


@dataclass(frozen=True)
class Scope:
    """What the caller may be shown, handed to every backend, which applies it before it
    ranks. ``owner``: the user id (user memory, recall) or the tenant id (documents);
    ``layers``: user memory's types; ``kind``: one kind of record; ``key_prefixes``: only
    keyed records whose key starts with one of them (the LangGraph store's namespace);
    ``mask``: the rows of an in-memory corpus the caller may see
    (``memman_daemon/scope.py``'s ``across_mask``)."""

    owner: str
    layers: tuple[str, ...] = ()
    kind: str | None = None
    key_prefixes: tuple[str, ...] | None = None
    mask: np.ndarray | None = field(default=None, compare=False, hash=False)


@dataclass(frozen=True)
class Fusion:
    """Reciprocal rank fusion (Cormack et al. 2009) with its constants: ``k`` and each list's
    weight. From config, per use (``Fusion.of(config.recall)``, ``config.memory``,
    ``config.docs``)."""

    k: int = 60
    lexical_weight: float = 1.0
    vector_weight: float = 1.0

    @classmethod
    def of(cls, section: Any) -> Fusion:
        """The constants of one config section: ``rrf_k`` and, where it has them,
        ``bm25_weight`` and ``vector_weight``."""
        return cls(int(section.rrf_k), float(getattr(section, "bm25_weight", 1.0)),
                   float(getattr(section, "vector_weight", 1.0)))

    def fuse(self, lexical: list[tuple[int, float]],
             vector: list[tuple[int, float]]) -> list[Fused]:
        """Two ranked lists, best fused first (``hybrid.rrf``)."""
        return rrf({BM25: lexical, VECTOR: vector}, self.k,
                   {BM25: self.lexical_weight, VECTOR: self.vector_weight})

    def merge(self, lists: dict[str, list[int]]) -> list[Fused]:
        """Ranked lists of ids from sources whose scores do not compare (``memman_search``'s
        four), merged by rank alone, best first; a tie keeps the order of ``lists``."""
        return rrf({name: [(i, 0.0) for i in ids] for name, ids in lists.items()}, self.k)

    def fuse_dense(self, ranks: list[np.ndarray]) -> np.ndarray:
        """The same over whole corpora: ``ranks[i][row]`` 1-based, 0 where not in list i
        (the recall index's lists are unweighted)."""
        return rrf_dense(ranks, self.k)


# --- the lexical index ---------------------------------------------------------------------
class LexicalIndex(Protocol):
    """Rows of ``scope`` matching ``query``, best first, at most ``k``."""

    async def ranked(self, query: str, scope: Scope, k: int) -> list[Found]: ...


class SqlLexical:
    """The SQL backend: a table group's full-text search (FTS5 / PostgreSQL ``ts_rank``,
    written per dialect in ``storage/<backend>/<group>.py``), the scope in its ``WHERE``.
    ``search(query, scope, k)`` is the group's read, adapted by the tier that owns it."""

    def __init__(self, search: Callable[[str, Scope, int], Awaitable[list[Found]]]) -> None:
        self._search = search

    async def ranked(self, query: str, scope: Scope, k: int) -> list[Found]:
        return await self._search(query, scope, k)


class Bm25Lexical:
    """The in-memory backend: BM25 over a corpus (``search/bm25.py``), the scope a row mask.
    ``terms`` turns a question into the index's terms (``words.terms``)."""

    def __init__(self, bm25: Any, terms: Callable[[str], list[str]]) -> None:
        self.bm25 = bm25
        self.terms = terms

    def scores(self, query: str, mask: np.ndarray | None = None) -> np.ndarray:
        """Every row's BM25 for ``query`` (0 outside ``mask``, and for dead rows)."""
        out: np.ndarray = self.bm25.scores(self.terms(query))
        if mask is not None:
            out = np.where(mask[: len(out)], out, 0.0).astype(np.float32)
        return out

    async def ranked(self, query: str, scope: Scope, k: int) -> list[Found]:
        s = self.scores(query, scope.mask)
        rows = np.flatnonzero(s > 0)
        if len(rows) > k:
            rows = rows[np.argpartition(-s[rows], k - 1)[:k]]
        rows = rows[np.argsort(-s[rows], kind="stable")]
        return [(int(r), float(s[r]), None) for r in rows]


# --- the vector store ----------------------------------------------------------------------
class VectorStore:
    """Nearest rows of a scope: ranked by the store where it can (``nearest`` answers a list:
    pgvector), else in the scope's matrices loaded into the daemon (``matrices``: a
    ``VectorScopes``; ``keys(scope)``: the matrices a scope spans — a user's layers, a
    tenant's chunks)."""

    def __init__(self, nearest: Callable[[np.ndarray, Scope, int],
                                         Awaitable[list[tuple[int, float]] | None]],
                 matrices: Any, keys: Callable[[Scope], Iterable[Hashable]]) -> None:
        self._nearest = nearest
        self.matrices = matrices
        self.keys = keys

    async def nearest(self, qv: np.ndarray, scope: Scope, k: int
                      ) -> tuple[list[tuple[int, float]], bool]:
        """``(id, cosine)`` of the ``k`` nearest, best first; and whether they were ranked in
        the loaded matrices (then ``similarities`` reads the same ones)."""
        hits = await self._nearest(qv, scope, k)
        if hits is not None:
            return hits, False
        dim = int(qv.shape[-1])
        self.matrices.dim = dim
        out: list[tuple[int, float]] = []
        for key in self.keys(scope):
            out += (await self.matrices.get(key, dim)).search(qv, k)
        out.sort(key=lambda h: -h[1])
        return out[:k], True

    async def similarities(self, qv: np.ndarray, scope: Scope, ids: Sequence[int], *,
                           load: bool) -> dict[int, float]:
        """The cosine of each of ``ids`` whose vector is in the scope's matrices (``load``:
        read the matrices that are not loaded yet; else only those that are)."""
        out: dict[int, float] = {}
        if not ids:
            return out
        dim = int(qv.shape[-1])
        for key in self.keys(scope):
            if load:
                self.matrices.dim = dim
                m = await self.matrices.get(key, dim)
            else:
                m = self.matrices.scopes.get(key)
            if m is not None:
                out.update(m.similarities(qv, ids))
        return out


class DenseVectors:
    """The in-memory form over a whole corpus: a ``(capacity, dim)`` matrix and which rows
    have a vector; one matrix-vector product, rows without a vector 0."""

    def __init__(self, matrix: np.ndarray | None, has: np.ndarray) -> None:
        self.matrix = matrix
        self.has = has

    def cosines(self, qv: np.ndarray | None, n: int, mask: np.ndarray) -> np.ndarray:
        have = self.has[:n] & mask
        if qv is None or self.matrix is None or not have.any():
            return np.zeros(n, dtype=np.float32)
        out: np.ndarray = np.where(have, self.matrix[:n] @ qv, 0.0).astype(np.float32)
        return out


# --- ranking -------------------------------------------------------------------------------
@dataclass
class Candidate:
    """One row after ranking: its lexical score (0: not a lexical match), its cosine (None:
    not known), its fusion (None: one list ranked it), and the score the stages change."""

    id: int
    row: Any
    lexical: float = 0.0
    cosine: float | None = None
    fused: Fused | None = None
    score: float = 0.0
    #: what the stages added, by name (shown in a hit's parts)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def matched(self) -> list[str]:
        return self.fused.matched if self.fused is not None else [BM25]


@dataclass
class Ranked:
    """A retrieval: candidates best first; ``fused``: both lists ranked (else one did);
    ``candidates``: how many were ranked before the stages cut."""

    query: str
    hits: list[Candidate]
    fused: bool
    qv: np.ndarray | None = None
    candidates: int = 0


class Stage(Protocol):
    """A step after ranking, declared by the caller that needs it: takes the ranking, answers
    it changed (re-ordered, re-scored, cut). ``name`` is what a hit's parts call it."""

    name: str

    def __call__(self, ranked: Ranked) -> Ranked: ...


class Retriever:
    """The list form: a lexical index and a vector store over one table group, fused, then
    the caller's stages. ``rows(ids, scope)`` reads the rows the vectors found that the
    lexical index did not, keeping only those within ``scope`` (before fusion)."""

    def __init__(self, lexical: LexicalIndex | None, vectors: VectorStore | None,
                 rows: Callable[[list[int], Scope], Awaitable[dict[int, Any]]] | None,
                 fusion: Fusion) -> None:
        self.lexical = lexical
        self.vectors = vectors
        self.rows = rows
        self.fusion = fusion

    async def run(self, query: str, scope: Scope, *, candidates: int, qv: np.ndarray | None,
                  lexical: bool = True, cosines: int = 0,
                  stages: Sequence[Stage] = ()) -> Ranked:
        """``query`` ranked within ``scope``: up to ``candidates`` from each list (the
        lexical one unless ``lexical`` is false; the vector one when ``qv`` is given), fused;
        the cosine of the best ``cosines`` fused that only the lexical list found, from the
        loaded matrices; then ``stages`` in order."""
        found: list[Found] = []
        if lexical and self.lexical is not None:
            found = await self.lexical.ranked(query, scope, candidates)
        rows = {i: r for i, _, r in found}
        lex = {i: s for i, s, _ in found}
        if qv is None or self.vectors is None:
            hits = [Candidate(i, r, s, score=s) for i, s, r in found]
            return _staged(Ranked(query, hits, False, None, len(hits)), stages)
        nearest, _ = await self.vectors.nearest(qv, scope, candidates)
        missing = [i for i, _ in nearest if i not in rows]
        if missing and self.rows is not None:
            rows.update(await self.rows(missing, scope))
        vec_list = [(i, s) for i, s in nearest if i in rows]
        # a lexical score of 0 is no match (``ts_rank`` can give it): not in the list
        lex_list = sorted(((i, s) for i, s in lex.items() if i in rows and s > 0),
                          key=lambda t: -t[1])
        fused = self.fusion.fuse(lex_list, vec_list)
        sims = dict(vec_list)
        if cosines:
            need = [f.id for f in fused[:cosines] if f.id not in sims]
            sims.update(await self.vectors.similarities(qv, scope, need, load=False))
        hits = [Candidate(f.id, rows[f.id], lex.get(f.id, 0.0), sims.get(f.id), f, f.rrf)
                for f in fused if f.id in rows]
        return _staged(Ranked(query, hits, True, qv, len(hits)), stages)

    async def by_vector(self, qv: np.ndarray, scope: Scope, rows: dict[int, Any],
                        stages: Sequence[Stage] = ()) -> Ranked:
        """Only the vector list, over given rows of the scope (the keyed records: the lookup
        and the playbook for a request): each by its cosine, best first, rows without a
        vector left out."""
        assert self.vectors is not None
        sims = await self.vectors.similarities(qv, scope, list(rows), load=True)
        hits = [Candidate(i, r, cosine=sims[i], score=sims[i]) for i, r in rows.items()
                if i in sims]
        hits.sort(key=lambda c: -c.score)
        return _staged(Ranked("", hits, False, qv, len(hits)), stages)


def _staged(ranked: Ranked, stages: Sequence[Stage]) -> Ranked:
    for stage in stages:
        ranked = stage(ranked)
    return ranked


# --- the dense form: a whole in-memory corpus at once (the recall index) -------------------
@dataclass
class DenseRanking:
    """Every row of a corpus ranked at once: the fused score (0: in no list) and each list's
    1-based rank (0: not in it)."""

    fused: np.ndarray
    lexical_rank: np.ndarray
    vector_rank: np.ndarray
    late: np.ndarray | None = None  #: MaxSim per question token where the stage ranked


def dense(lexical: np.ndarray, cosine: np.ndarray, lexical_ok: np.ndarray,
          vector_ok: np.ndarray, fusion: Fusion, candidates: int) -> DenseRanking:
    """The core over a whole corpus: the best ``candidates`` of each list within its mask
    (the scope, and for vectors the rows that have one), fused by ``fusion``."""
    lrank = dense_ranks(lexical, lexical_ok, candidates)
    vrank = dense_ranks(np.where(vector_ok, cosine, -np.inf), vector_ok, candidates)
    return DenseRanking(fusion.fuse_dense([lrank, vrank]), lrank, vrank)


#: ``(rows) -> (row, neighbour)`` pairs: for each of ``rows``, the turns that carry it on in
#: its conversation (the recall index's ``neighbours``: the same speaker's turn next to it),
#: only rows the caller may see
Context = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]


class MaxSim:
    """The recall index's stage after fusion: the fusion's best ``wide`` rows that have token
    vectors, in MaxSim order (late interaction, ``search/late.py``), on the fused scale (the
    same values handed out again, so whatever reads the scale reads it unchanged).

    With ``context`` and a ``share`` > 0, a turn is scored in its conversation: each question
    token takes its best cosine among the turn's own tokens, or ``share`` of its best among
    a neighbouring turn's (the same speaker carrying on) — news told over two turns ("bad
    news about Piet" / "they got a concussion") is found by a question that names the person
    and asks what happened, where each turn alone matches half of it. The neighbours of the
    candidates are scored too (one outside the fusion's best joins at its lowest place)."""

    name = "maxsim"

    def __init__(self, wide: int, share: float = 0.0) -> None:
        self.wide = wide
        self.share = share

    def dense(self, ranking: DenseRanking, packed: Any, counts: np.ndarray,
              qtok: np.ndarray | None, context: Context | None = None,
              weights: np.ndarray | None = None, kept: late.Kept | None = None,
              cap: int = 0) -> DenseRanking:
        """``ranking`` with its best candidates re-ordered; ``late`` set to each row's MaxSim
        per question token (0: not ranked by it). ``weights``: each question token's weight
        in the sum (its word's rarity in the corpus, ``RecallIndex.retrieve``); None: 1.
        ``kept``: the rows this question's tokens were scored against before (up to ``cap``
        of them), scored again only where missing."""
        fused = ranking.fused
        if qtok is None or packed is None:
            return ranking
        cand = np.flatnonzero(fused > 0)
        if len(cand) > self.wide:
            cand = cand[np.argpartition(-fused[cand], self.wide)[: self.wide]]
        cand = cand[counts[cand] > 0]
        if len(cand) < 2 or packed.shape[2] != late.width(qtok.shape[1]):
            return ranking
        rows, src, dst = cand, None, None
        if context is not None and self.share > 0:
            a, b = context(cand)
            ok = counts[b] > 0
            a, b = a[ok], b[ok]
            if len(a):
                rows = np.union1d(cand, b)
                # both ways: a candidate takes from its neighbour and the neighbour from it
                src = np.searchsorted(rows, np.concatenate([a, b]))
                dst = np.searchsorted(rows, np.concatenate([b, a]))
        if kept is not None:
            best = kept.best(qtok, packed, counts, rows, qtok.shape[1], cap)
        else:
            best = late.best(qtok, packed, counts[rows].astype(np.int64), qtok.shape[1],
                             rows=rows)
        if src is not None and dst is not None:
            lifted = best.copy()
            np.maximum.at(lifted, src, self.share * best[dst])
            best = lifted
        if weights is not None and len(weights) == best.shape[1] and weights.sum() > 0:
            best = best * weights[None, :]
            total = float(weights.sum())
        else:
            total = float(max(len(qtok), 1))
        scores = best.sum(axis=1).astype(np.float32)
        per = np.zeros(len(fused), dtype=np.float32)
        per[rows] = scores / total
        base = fused
        joined = fused[rows] <= 0
        if joined.any():  # a neighbour outside the fusion's lists: the lowest place to give
            base = fused.copy()
            base[rows[joined]] = float(fused[cand].min()) * 0.5
        return DenseRanking(late.rerank(base, rows, scores), ranking.lexical_rank,
                            ranking.vector_rank, per)
