"""An incremental in-memory BM25 index over short documents (session entries).

Documents are rows ``0..n-1`` added in order and never renumbered; a removed row is only
marked dead (its postings stay, its score is masked). Postings are stdlib arrays, so a term's
list is viewed by numpy without a copy and a query costs O(postings of its terms), whatever
the size of the index.

Okapi BM25 (Robertson & Zaragoza 2009) with k1 = 1.2, b = 0.75; idf is the non-negative
``log(1 + (N - df + 0.5) / (df + 0.5))``.
"""

from __future__ import annotations

import math
from array import array
from collections import Counter

import numpy as np

K1 = 1.2
B = 0.75
#: terms of one document indexed at most (a huge entry is still found by its first words;
#: its BM25 length is capped too, so it neither dominates nor vanishes)
MAX_TERMS = 2000


class Bm25:
    def __init__(self) -> None:
        self._rows: dict[str, array] = {}
        self._tfs: dict[str, array] = {}
        self._len = array("f")
        self._alive = array("b")
        self.n = 0  #: rows added
        self.live = 0  #: rows not removed
        self._total = 0.0  #: sum of live lengths

    @property
    def state(self) -> tuple[int, int]:
        """Names the index's state: rows are only added or removed, so their counts change
        with every change (what is kept per state of it: ``RecallIndex._lexical``,
        ``Sources.bm25_reads``)."""
        return self.n, self.live

    def add(self, terms: list[str]) -> int:
        """Index one document; returns its row."""
        row = self.n
        terms = terms[:MAX_TERMS]
        rows, tfs = self._rows, self._tfs
        for t, c in Counter(terms).items():  # one lookup a term (a start indexes every entry)
            r = rows.get(t)
            if r is None:
                rows[t] = array("i", (row,))
                tfs[t] = array("f", (c,))
            else:
                r.append(row)
                tfs[t].append(c)
        self._len.append(len(terms))
        self._alive.append(1)
        self.n += 1
        self.live += 1
        self._total += len(terms)
        return row

    def add_many(self, docs: list[list[str]]) -> int:
        """Index many documents at once; returns the first's row, the others follow in
        order. The same postings as ``add`` one at a time."""
        docs = [d[:MAX_TERMS] for d in docs]
        local: dict[str, int] = {}
        ids = np.fromiter([local.setdefault(t, len(local)) for d in docs for t in d],
                          dtype=np.int64)
        return self.add_numbered(ids, np.fromiter(map(len, docs), dtype=np.int64,
                                                  count=len(docs)), list(local))

    def add_numbered(self, ids: np.ndarray, lens: np.ndarray, names: list[str]) -> int:
        """``add_many`` of documents given as term numbers (``words.numbered_terms``: a
        start indexes every entry): ``ids`` every document's terms (at most ``MAX_TERMS``
        each) one after another, ``lens`` their counts, ``names`` the terms by number. Built
        with one sort of (term, row) pairs instead of a dict lookup and two appends per pair."""
        first = self.n
        if not len(lens):
            return first
        rows_of = np.repeat(np.arange(first, first + len(lens), dtype=np.int64), lens)
        pairs, tf = np.unique(ids << 32 | rows_of, return_counts=True)  # by term, then row
        tid = pairs >> 32
        rb = (pairs & 0xFFFFFFFF).astype(np.int32).tobytes()
        tb = tf.astype(np.float32).tobytes()
        starts = np.flatnonzero(np.diff(tid, prepend=-1))  # each term's first pair
        ends = np.append(starts[1:], len(tid)) if len(tid) else starts
        rows, tfs = self._rows, self._tfs
        for a, b, i in zip((starts * 4).tolist(), (ends * 4).tolist(), tid[starts].tolist(),
                           strict=True):
            t = names[i]
            r = rows.get(t)
            if r is None:
                rows[t] = array("i", rb[a:b])
                tfs[t] = array("f", tb[a:b])
            else:
                r.frombytes(rb[a:b])
                tfs[t].frombytes(tb[a:b])
        self._len.extend(lens.astype(np.float32).tolist())
        self._alive.extend(bytes([1]) * len(lens))
        self.n += len(lens)
        self.live += len(lens)
        self._total += float(lens.sum())
        return first

    def remove(self, row: int) -> None:
        if 0 <= row < self.n and self._alive[row]:
            self._alive[row] = 0
            self.live -= 1
            self._total -= self._len[row]

    def df(self, term: str) -> int:
        r = self._rows.get(term)
        return len(r) if r is not None else 0

    def postings(self, term: str) -> np.ndarray:
        """The rows that hold ``term`` (removed ones included), without a copy."""
        r = self._rows.get(term)
        return np.frombuffer(r, dtype=np.int32) if r is not None else np.zeros(0, np.int32)

    def idf(self, term: str) -> float:
        df = self.df(term)  # postings of removed rows count too: clamp so idf stays >= 0
        n = max(self.live, 1)
        return math.log(1.0 + (max(n - df, 0) + 0.5) / (df + 0.5))

    def scores(self, terms: list[str]) -> np.ndarray:
        """BM25 of every row for the query ``terms`` (0 for rows without any, and dead rows)."""
        return self.total([self.term(t) for t in dict.fromkeys(terms)])

    def term(self, t: str) -> tuple[np.ndarray, np.ndarray] | None:
        """One term's part of the score: (its rows, what it adds to each); None when no row
        holds it. Valid until the index changes (a caller scoring many queries over one
        state of it computes each term once). The rows are a copy: a view of the postings
        kept by a caller would stop the index from growing them (an array exporting its
        buffer cannot resize: the next add of the term would fail)."""
        r = self._rows.get(t)
        if r is None or not self.n:
            return None
        lens = np.frombuffer(self._len, dtype=np.float32, count=self.n)
        avg = max(self._total / max(self.live, 1), 1.0)
        rows = np.frombuffer(r, dtype=np.int32).copy()
        tf = np.frombuffer(self._tfs[t], dtype=np.float32)
        norm = tf + K1 * (1.0 - B + B * lens[rows] / avg)
        return rows, self.idf(t) * tf * (K1 + 1.0) / norm

    def total(self, parts: list[tuple[np.ndarray, np.ndarray] | None]) -> np.ndarray:
        """Every row's score from its terms' parts (``term``), in their order."""
        out = np.zeros(self.n, dtype=np.float32)
        for part in parts:
            if part is not None:
                out[part[0]] += part[1]  # a row is once per term
        alive = np.frombuffer(self._alive, dtype=np.int8, count=self.n)
        out[alive == 0] = 0.0
        return out
