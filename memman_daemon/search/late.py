"""Late interaction (MaxSim): a text scored against a question token by token.

The search model's forward pass gives one output per word piece; the sentence vector is their
mean. Late interaction keeps the token outputs: for each of the question's informative tokens
its best cosine against the text's tokens, summed (ColBERT's MaxSim). A question word then
finds the one word of a long turn that answers it, where the mean of the turn's words blurs it.

Stored compactly, a bounded size per entry (``pack``): a text's token vectors (unit length)
are averaged over ``TOKENS`` consecutive runs when it has more (segment means: measured as good
as keeping every token, where keeping the first ones loses), renormalized, and quantized to
4 bits per dimension with one float16 scale per token: ``TOKENS`` x (384 / 2 + 2) bytes =
3,104 bytes an entry for MiniLM (docs/performance.md, "Evidence recall", has the measurements:
int4 ranks as float32 does; 8 tokens lose at the small budgets).

The window uses it as a second stage (``rerank``): the question's best ``[recall]
rerank_candidates`` (300) candidates of
the BM25 + cosine fusion are put in MaxSim order (measured: the same evidence recall as MaxSim
over every entry, at a bounded cost whatever the corpus size; fused with BM25 by RRF it does
worse at small budgets).
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from memman_daemon.search.words import STOPWORDS

TOKENS = 16  #: token vectors kept per entry at most (segment means beyond)


def width(dim: int) -> int:
    """Bytes of one packed token: 4 bits a dimension, and a float16 scale."""
    return dim // 2 + 2


#: word pieces of a turn's head looked at for a speaker's name ("Noor:", "Mary Ann:", after
#: a time stamp the embedding kept: "12/06/2023, 15:05 - Noor:")
HEAD_PIECES = 32
NAME_PIECES = 4  #: a name longer than this (in word pieces) is not kept apart


def head(pieces: list[str]) -> tuple[int, int]:
    """``(start, end)``: the word pieces of a turn's leading speaker name (``pieces[start:end]``,
    the ``:`` after it at ``end``), or ``(0, 0)`` when its head has none. The name is one to
    three words of letters right before the first ``:`` that follows a letter, among the first
    ``HEAD_PIECES`` pieces (a time's ``15:05`` is passed over: digits before it)."""
    for i, p in enumerate(pieces[:HEAD_PIECES]):
        if p != ":" or i == 0:
            continue
        j, words = i, 0
        while j > 0 and i - j < NAME_PIECES and pieces[j - 1].lstrip("#").isalpha():
            j -= 1
            if not pieces[j].startswith("##"):
                words += 1
        if j == i:  # digits before it (a time): the name may come later
            continue
        if words > 3 or pieces[j].startswith("##"):
            return 0, 0
        return j, i
    return 0, 0


def pack(tokens: np.ndarray, name: tuple[int, int] = (0, 0)) -> tuple[np.ndarray, int]:
    """(uint8 array (TOKENS, width), tokens kept) of a text's unit token vectors (n, dim).

    ``name``: the tokens ``[start, end)`` of a leading speaker name (``head``). When the text
    has more than ``TOKENS`` tokens, the name's tokens keep a vector each, what comes before
    them (a time stamp) one mean, and the rest the remaining means: averaged into the first
    segment mean with the turn's first words, a question about the speaker ("what did Noor
    say about the trip") no longer found the name in a long turn, where plain MaxSim over
    every token does."""
    n, dim = tokens.shape if tokens.ndim == 2 else (0, 0)
    out = np.zeros((TOKENS, width(dim or 2)), dtype=np.uint8)
    if n == 0:
        return out, 0
    t = np.asarray(tokens, dtype=np.float32)
    if n > TOKENS:  # segment means, renormalized
        start, end = name
        if 0 <= start < end <= n - TOKENS // 2:  # the name's tokens apart, then the rest
            parts = ([t[:start].mean(axis=0, keepdims=True)] if start else []) + [t[start:end]]
            rest = t[end:]
            t = np.concatenate(parts + [_means(rest, TOKENS - (end - start) - (start > 0))])
        else:
            t = _means(t, TOKENS)
    k = len(t)
    scale = np.abs(t).max(axis=1, keepdims=True) / 7.0
    scale[scale == 0] = 1.0
    q = (np.clip(np.rint(t / scale), -7, 7).astype(np.int8) + 8).astype(np.uint8)  # 1..15
    out[:k, : dim // 2] = q[:, 0::2] | (q[:, 1::2] << 4)
    out[:k, dim // 2:] = scale.astype("<f2").view(np.uint8).reshape(k, 2)
    return out, k


def _means(t: np.ndarray, k: int) -> np.ndarray:
    """``t`` (n, dim) as ``k`` means of consecutive runs (all of it when n <= k), unit length."""
    if len(t) > k:
        cuts = np.linspace(0, len(t), k + 1).round().astype(int)
        t = np.add.reduceat(t, cuts[:-1], axis=0) / np.diff(cuts)[:, None]
    norms = np.linalg.norm(t, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    out: np.ndarray = t / norms
    return out


def unpack(packed: np.ndarray, dim: int) -> np.ndarray:
    """Token vectors (..., TOKENS, dim) float32 of packed rows (..., TOKENS, width)."""
    half = dim // 2
    lo = (packed[..., :half] & 0x0F).astype(np.int8) - 8
    hi = (packed[..., :half] >> 4).astype(np.int8) - 8
    q = np.empty(packed.shape[:-1] + (dim,), dtype=np.float32)
    q[..., 0::2] = lo
    q[..., 1::2] = hi
    scale = np.ascontiguousarray(packed[..., half: half + 2]).view("<f2").astype(np.float32)
    out: np.ndarray = q * scale
    return out


def question_tokens(tokens: np.ndarray, pieces: list[str]) -> np.ndarray:
    """The question's informative tokens: word pieces that are not stop words or punctuation
    (measured: "what", "did", "?" match everything alike and blur the sum); all of them when
    none is left. A piece is judged by the whole word it is part of ("##" pieces continue the
    one before): judged alone, "Noor" (``no`` ``##or``) or "Kaja" (``ka`` ``##ja``) lose
    pieces that are stop words, and a name the question turns on vanished from the score."""
    keep = np.array([w is not None for w in _words(pieces, len(tokens))], dtype=bool)
    return tokens[keep] if keep.any() else tokens


def question_words(tokens: np.ndarray, pieces: list[str]) -> list[str]:
    """The word each of ``question_tokens``' tokens is part of (in order; "" where every
    token was kept for want of an informative one)."""
    words = _words(pieces, len(tokens))
    kept = [w for w in words if w is not None]
    return kept if kept else [""] * len(tokens)


def _words(pieces: list[str], n: int) -> list[str | None]:
    """Per token (of ``n``), the lower-cased whole word its piece is part of, or None when
    that word is a stop word or punctuation (or the token has no piece)."""
    spans: list[list[str]] = []  #: the pieces of each word, in order
    for p in pieces[:n]:
        if p.startswith("##") and spans:
            spans[-1].append(p[2:])
        else:
            spans.append([p])
    out: list[str | None] = []
    for span in spans:
        w = "".join(span).lower()
        ok = any(ch.isalnum() for ch in w) and w not in STOPWORDS
        out += [w if ok else None] * len(span)
    return out + [""] * (n - len(out))  # tokens past the pieces: kept, as before


def maxsim(q: np.ndarray, packed: np.ndarray, counts: np.ndarray, dim: int) -> np.ndarray:
    """MaxSim of question tokens ``q`` (m, dim) against packed rows (k, TOKENS, width) with
    ``counts`` tokens each: (k,) scores (0 for a row with no tokens)."""
    out: np.ndarray = best(q, packed, counts, dim).sum(axis=1).astype(np.float32)
    return out


#: entries scored at a time (``best``), ``TOKENS`` token rows each: their 4-bit values become
#: float32 in buffers kept per thread (~3 MB), not in a fresh array of the whole candidate set
#: each call (7.6 MB at 620 candidates, which the C library maps on its own and the kernel
#: faults in page by page: ``background.tune_malloc`` maps blocks from 128 KB; half of
#: MaxSim's time)
CHUNK = 256
_scratch = threading.local()


class _Scratch:
    """One thread's buffers for ``best``, grown when a call needs more."""

    def __init__(self, rows: int, width: int, m: int) -> None:
        half = width - 2  # the 4-bit values' bytes (the scale's two bytes are not copied)
        self.packed = np.empty((rows, TOKENS, width), np.uint8)  #: a chunk's rows, gathered
        self.values = np.empty((rows * TOKENS, half), np.uint8)  #: their 4-bit values
        self.floats = np.empty((rows * TOKENS, half), np.float32)  #: contiguous for BLAS
        self.sims = np.empty(rows * TOKENS * m, np.float32)
        self.other = np.empty(rows * TOKENS * m, np.float32)

    @staticmethod
    def get(rows: int, width: int, m: int) -> _Scratch:
        got: _Scratch | None = getattr(_scratch, "bufs", None)
        if got is None or got.packed.shape[0] < rows or got.packed.shape[2] != width \
                or got.sims.size < rows * TOKENS * m:
            got = _scratch.bufs = _Scratch(rows, width, max(m, 32))
        return got


def best(q: np.ndarray, packed: Any, counts: np.ndarray, dim: int,
         rows: np.ndarray | None = None) -> np.ndarray:
    """For each row and question token, its best cosine among the row's tokens: (k, m), the
    terms MaxSim sums (0 for a row with no tokens). The 4-bit values are never unpacked into
    vectors: the low and high halves of each byte (the even and odd dimensions) meet the
    question's even and odd dimensions in two products, the offset of 8 and each token's
    scale applied to the (k x TOKENS, m) result; ``CHUNK`` rows at a time. With ``rows``,
    ``packed`` is a store indexed by them (``Blocks``: gathered a chunk at a time) and
    ``counts`` are the rows' own."""
    k = len(rows) if rows is not None else len(packed)
    m = len(q)
    if not k or not m:
        return np.zeros((k, m), dtype=np.float32)
    half = dim // 2
    qe = np.ascontiguousarray(q[:, 0::2].T, dtype=np.float32)  # (half, m)
    qo = np.ascontiguousarray(q[:, 1::2].T, dtype=np.float32)
    offset = 8.0 * (qe.sum(axis=0) + qo.sum(axis=0))
    invalid = np.arange(TOKENS)[None, :] >= counts[:, None]  # (k, TOKENS)
    buf = _Scratch.get(min(k, CHUNK), width(dim), m)
    top = np.empty((k, m), dtype=np.float32)
    for a in range(0, k, CHUNK):
        b = min(k, a + CHUNK)
        t = (b - a) * TOKENS
        if rows is None:
            chunk = packed[a:b]
        elif isinstance(packed, np.ndarray):  # "clip": not buffered (the rows are valid)
            chunk = np.take(packed, rows[a:b], axis=0, out=buf.packed[: b - a], mode="clip")
        else:
            chunk = packed.take(rows[a:b], buf.packed[: b - a])
        body = chunk[..., :half].reshape(t, half)
        scale = np.ascontiguousarray(chunk[..., half: half + 2]).view("<f2").reshape(t, 1)
        u, f = buf.values[:t], buf.floats[:t]
        sims = buf.sims[: t * m].reshape(t, m)
        other = buf.other[: t * m].reshape(t, m)
        np.bitwise_and(body, 0x0F, out=u)
        np.copyto(f, u)
        np.matmul(f, qe, out=sims)
        np.right_shift(body, 4, out=u)
        np.copyto(f, u)
        np.matmul(f, qo, out=other)
        sims += other
        sims -= offset
        sims *= scale
        part = sims.reshape(b - a, TOKENS, m)
        part[invalid[a:b]] = -np.inf
        part.max(axis=1, out=top[a:b])
    top[~np.isfinite(top)] = 0.0
    return top


class Kept:
    """``best`` of one question's tokens against the rows scored so far, kept (rows sorted,
    their (k, m) values): a question asked again (the next context of the same exchange, a
    tool loop's requests) widens and multiplies only the rows not scored yet. A row's value
    depends on its token vectors alone, which do not change while the owner's epoch stays
    (``RecallIndex._kept``); what the caller may see is decided before (the rows it asks
    for), so nothing kept is ever shown by itself."""

    def __init__(self, m: int) -> None:
        self.rows = np.zeros(0, dtype=np.int64)
        self.vals = np.zeros((0, m), dtype=np.float32)

    def best(self, q: np.ndarray, packed: Any, counts: np.ndarray, rows: np.ndarray,
             dim: int, cap: int) -> np.ndarray:
        """``best(q, packed[rows], counts[rows], dim)``, from what is kept where it can;
        ``packed``: indexed by an array of rows (``Blocks``); ``rows`` unique, in any order;
        at most ``cap`` rows kept."""
        order = np.argsort(rows, kind="stable")
        got = self._best(q, packed, counts, rows[order], dim, cap)
        out = np.empty_like(got)
        out[order] = got
        return out

    def _best(self, q: np.ndarray, packed: Any, counts: np.ndarray, rows: np.ndarray,
              dim: int, cap: int) -> np.ndarray:
        pos = np.searchsorted(self.rows, rows)
        hit = np.zeros(len(rows), dtype=bool)
        if len(self.rows):
            inside = pos < len(self.rows)
            hit[inside] = self.rows[pos[inside]] == rows[inside]
        out = np.empty((len(rows), len(q)), dtype=np.float32)
        out[hit] = self.vals[pos[hit]]
        miss = np.flatnonzero(~hit)
        if len(miss):
            new_rows = rows[miss]
            new = best(q, packed, counts[new_rows].astype(np.int64), dim, rows=new_rows)
            out[miss] = new
            if len(self.rows) + len(miss) > cap:  # a new set of rows: start again
                self.rows, self.vals = np.zeros(0, dtype=np.int64), self.vals[:0]
            at = np.searchsorted(self.rows, new_rows)
            self.rows = np.insert(self.rows, at, new_rows)
            self.vals = np.insert(self.vals, at, new, axis=0)
        return out


def rerank(fused: np.ndarray, rows: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """``fused`` with the scores of ``rows`` (a first ranking's best, best first) handed out
    again in the order of ``scores`` (their MaxSim): the same values, so whatever reads the
    fused scale (shares of a hit's score, thresholds) reads it unchanged; only the order
    within the candidates changes."""
    out = fused.copy()
    if len(rows) < 2:
        return out
    slots = np.sort(fused[rows])[::-1]
    order = rows[np.argsort(-scores, kind="stable")]
    out[order] = slots
    return out
