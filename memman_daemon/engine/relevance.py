"""BM25 over a session's entries, in memory: which old entries the current question is about.

Session entries are searched on every context request, so the index lives next to the timeline
(built once per entry, extended as entries arrive) and reads never touch SQLite.
"""

from __future__ import annotations

import math
from collections import defaultdict

K1 = 1.2
B = 0.75


class TermIndex:
    """Postings per stemmed term: doc id -> term frequency."""

    def __init__(self) -> None:
        self.postings: dict[str, dict[int, int]] = defaultdict(dict)
        self.length: dict[int, int] = {}
        self.total = 0

    def add(self, doc: int, words: list[str]) -> None:
        if doc in self.length:
            return
        self.length[doc] = len(words)
        self.total += len(words)
        for w in words:
            p = self.postings[w]
            p[doc] = p.get(doc, 0) + 1

    def idf(self, term: str) -> float:
        n = len(self.length)
        df = len(self.postings.get(term, ()))
        return math.log(1 + (n - df + 0.5) / (df + 0.5)) if df else 0.0

    def scores(self, query: list[str], exclude: int | None = None) -> dict[int, float]:
        """BM25 of every document that shares a term with ``query``, normalized to 0..1 (the
        best match is 1; ``exclude``, the question's own entry, is left out)."""
        n = len(self.length)
        if not n or not query:
            return {}
        avg = self.total / n or 1.0
        out: dict[int, float] = defaultdict(float)
        for term in set(query):
            post = self.postings.get(term)
            if not post:
                continue
            # very common words (in over half the entries) say little about what is asked
            if len(post) > n / 2 and n > 20:
                continue
            idf = self.idf(term)
            length = self.length
            for doc, tf in post.items():
                out[doc] += idf * tf * (K1 + 1) / (tf + K1 * (1 - B + B * length[doc] / avg))
        out.pop(exclude, None)
        if not out:
            return {}
        top = max(out.values())
        return {d: v / top for d, v in out.items()}
