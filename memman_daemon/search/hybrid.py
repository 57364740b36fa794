"""Hybrid retrieval: fuse ranked candidate lists (BM25 from FTS5, vector similarity).

The three-tier design's shape: gather ~100 candidates from each retriever, fuse, keep the top 10. Fusion is
reciprocal rank fusion (Cormack et al. 2009): a candidate's fused score is the sum over the
lists it appears in of ``1 / (k + rank)`` (rank from 1, k = 60 by default). It needs no score
calibration between BM25 (unbounded) and cosine (-1..1), which is why it is used here: a
paraphrase with no shared word ranks by its vector alone, an exact keyword by BM25 alone, and
a hit found by both rises above either.

Every fused hit carries its parts: which lists matched (``matched``), its rank and raw score
in each, and the fused score. Nothing here touches storage, so any backend can reuse it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from memman_daemon.search.words import STOPWORDS

BM25 = "bm25"
VECTOR = "vector"


@dataclass
class Fused:
    """One candidate after fusion. ``parts[list] = {rank, score}`` for the lists it is in."""

    id: int
    rrf: float = 0.0
    parts: dict[str, dict[str, float]] = field(default_factory=dict)

    @property
    def matched(self) -> list[str]:
        return sorted(self.parts)

    def to_wire(self) -> dict[str, Any]:
        return {"rrf": round(self.rrf, 6), "matched": self.matched,
                **{name: {"rank": int(p["rank"]), "score": round(p["score"], 6)}
                   for name, p in self.parts.items()}}


def rrf(lists: dict[str, list[tuple[int, float]]], k: int = 60,
        weights: dict[str, float] | None = None) -> list[Fused]:
    """Fuse ``{list name: [(id, score), ...] best first}``; best fused first (ties keep the
    order of first appearance). ``weights[list]`` (default 1) scales a list's 1/(k + rank)."""
    fused: dict[int, Fused] = {}
    for name, ranked in lists.items():
        w = (weights or {}).get(name, 1.0)
        for rank, (rid, score) in enumerate(ranked, start=1):
            f = fused.get(rid)
            if f is None:
                f = fused[rid] = Fused(rid)
            if name in f.parts:
                continue  # a list naming an id twice: its best rank counts
            f.parts[name] = {"rank": rank, "score": score}
            f.rrf += w / (k + rank)
    return sorted(fused.values(), key=lambda f: -f.rrf)


def dense_ranks(scores: np.ndarray, mask: np.ndarray, top: int) -> np.ndarray:
    """A whole corpus at once: the 1-based rank of each ``mask`` row with a finite, non-zero
    score, for the best ``top``; 0 elsewhere (not in the list)."""
    n = len(scores)
    out = np.zeros(n, dtype=np.int64)
    cand = np.flatnonzero(mask & np.isfinite(scores) & (scores != 0))
    if not len(cand):
        return out
    k = min(top, len(cand))
    part = cand[np.argpartition(-scores[cand], k - 1)[:k]] if len(cand) > k else cand
    best = part[np.argsort(-scores[part], kind="stable")]
    out[best] = np.arange(1, len(best) + 1)
    return out


def rrf_dense(ranks: list[np.ndarray], k: int = 60) -> np.ndarray:
    """``rrf`` over a whole corpus at once (the recall index's form): ``ranks[i][row]`` is the
    row's rank in list ``i`` (0: not in it); the row's fused score is the same sum of
    ``1 / (k + rank)``."""
    fused = np.zeros(len(ranks[0]) if ranks else 0, dtype=np.float64)
    for r in ranks:
        m = r > 0
        fused[m] += 1.0 / (k + r[m])
    return fused


def memory_vector_text(kind: str, key: str | None, content: str,
                       metadata: dict[str, Any]) -> str:
    """The text a user-memory record is embedded as: a playbook by its ``user_query`` (the
    three-tier design indexes playbooks by it), a preference or rule as key and value, anything else its
    content."""
    if kind == "playbook":
        return str(metadata.get("user_query") or content)
    if kind in ("preference", "rule") and key:
        # "report_currency" reads as words to a model: "report currency"
        return f"{key.replace('_', ' ')}: {content}"
    return content


#: words that carry no topic: left out of the BM25 half of a hybrid query (the one list)
STOP_WORDS = STOPWORDS


def content_words(words: list[str]) -> list[str]:
    """``words`` without stop words, unless that leaves none."""
    kept = [w for w in words if w not in STOP_WORDS]
    return kept or words


#: starts only where a word starts: the same tokens as ``\w*\d...`` from any position, but
#: linear — tried inside a long word without digits, that pattern took seconds (quadratic)
_NUMERIC = re.compile(r"(?<!\w)\w*\d[\w.,:/-]*", re.UNICODE)


def identifiers(text: str) -> frozenset[str]:
    """The tokens of ``text`` that carry digits (amounts, dates, ids, versions)."""
    return frozenset(m.group(0).strip(".,:/-").casefold() for m in _NUMERIC.finditer(text))


def may_be_duplicate(a: str, b: str) -> bool:
    """A guard for near-duplicates found by vectors: two texts that name different numbers or
    identifiers ("event 3" / "event 4", "rose 12%" / "rose 15%") are different facts, however
    close their vectors are (a static model barely sees digits)."""
    return identifiers(a) == identifiers(b)
