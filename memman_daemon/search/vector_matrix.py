"""Nearest neighbours in memory: one float32 matrix per scope (a user's layer, a tenant).

Vectors are stored durably in SQLite (``memory_vectors``, ``chunk_vectors``) in sqlite-vec's
float32 format, with the model that made them. Ranking runs over an in-memory copy: a scope's
matrix is loaded from SQLite on its first search (only vectors of the model in force), kept up
to date as rows are written, and dropped when the model changes. Exact search is one
matrix-vector product up to ``EXACT_MAX`` rows; past that a sign-bit prefilter narrows it
first (below). sqlite-vec's exact scan of 100,000 such rows took 90-150 ms here
(docs/decisions.md). Memory: 1 KiB + 32 bytes per 256-dimension vector.

The classes here know nothing of memman's tables, so another storage backend can reuse them
with its own loader.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable, Iterable
from typing import Any

import numpy as np

#: up to this many vectors a search is one exact matrix-vector product; above, a binary
#: prefilter (sign bits, Hamming distance) picks ``PREFILTER`` rows that are then ranked exactly
EXACT_MAX = 8_192
PREFILTER = 2_000


class VectorMatrix:
    """Ids and their unit vectors; ``search`` returns ``(id, cosine)`` best first.

    Beside the float32 rows, each vector's sign bits are kept (``dim / 8`` bytes) when the
    dimension is a multiple of 64. Past ``EXACT_MAX`` rows a search ranks all rows by Hamming
    distance of the bits (a few milliseconds for 100,000: 32 bytes a row instead of 1 KiB)
    and scores the ``PREFILTER`` nearest exactly, so its cost grows with memory bandwidth
    for a few per cent of the data instead of all of it.
    """

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self._mat = np.zeros((0, dim), dtype=np.float32)
        self._words = dim // 64 if dim % 64 == 0 else 0
        self._bits = np.zeros((0, self._words), dtype=np.uint64)
        self._ids = np.zeros(0, dtype=np.int64)
        self._n = 0
        self._pos: dict[int, int] = {}

    def _signs(self, vecs: np.ndarray) -> np.ndarray:
        packed = np.packbits(vecs.reshape(-1, self.dim) > 0, axis=1)
        return packed.view(np.uint64).reshape(-1, self._words)

    def __len__(self) -> int:
        return self._n

    def __contains__(self, rid: int) -> bool:
        return rid in self._pos

    def _grow(self, need: int) -> None:
        cap = len(self._ids)
        if need <= cap:
            return
        cap = max(need, cap * 2, 64)
        mat = np.zeros((cap, self.dim), dtype=np.float32)
        bits = np.zeros((cap, self._words), dtype=np.uint64)
        ids = np.zeros(cap, dtype=np.int64)
        mat[:self._n] = self._mat[:self._n]
        bits[:self._n] = self._bits[:self._n]
        ids[:self._n] = self._ids[:self._n]
        self._mat, self._bits, self._ids = mat, bits, ids

    def add(self, ids: Iterable[int], vecs: np.ndarray) -> None:
        """Insert or replace. Vectors of another dimension are ignored."""
        ids = list(ids)
        if not ids or vecs.shape[1] != self.dim:
            return
        self._grow(self._n + len(ids))
        signs = self._signs(vecs) if self._words else None
        for i, (rid, v) in enumerate(zip(ids, vecs, strict=True)):
            p = self._pos.get(rid)
            if p is None:
                p = self._n
                self._n += 1
                self._pos[rid] = p
                self._ids[p] = rid
            self._mat[p] = v
            if signs is not None:
                self._bits[p] = signs[i]

    def remove(self, ids: Iterable[int]) -> None:
        for rid in ids:
            p = self._pos.pop(rid, None)
            if p is None:
                continue
            last = self._n - 1
            if p != last:
                moved = int(self._ids[last])
                self._mat[p] = self._mat[last]
                self._bits[p] = self._bits[last]
                self._ids[p] = moved
                self._pos[moved] = p
            self._n = last

    def get(self, rid: int) -> np.ndarray | None:
        p = self._pos.get(rid)
        return None if p is None else self._mat[p]

    def similarities(self, query: np.ndarray, ids: Iterable[int]) -> dict[int, float]:
        """Cosine of ``query`` with each of ``ids`` that has a vector."""
        out = {}
        for rid in ids:
            p = self._pos.get(rid)
            if p is not None:
                out[rid] = float(self._mat[p] @ query)
        return out

    def search(self, query: np.ndarray, k: int) -> list[tuple[int, float]]:
        if self._n == 0 or k <= 0 or query.shape[-1] != self.dim:
            return []
        q = query.astype(np.float32, copy=False)
        n = self._n
        if n > EXACT_MAX and self._words and k < PREFILTER:
            ham = np.bitwise_count(self._bits[:n] ^ self._signs(q)[0]).sum(axis=1)
            rows = np.argpartition(ham, PREFILTER)[:PREFILTER]
            sims = self._mat[rows] @ q
            top = np.argpartition(-sims, k)[:k]
            top = top[np.argsort(-sims[top], kind="stable")]
            return [(int(self._ids[rows[i]]), float(sims[i])) for i in top]
        sims = self._mat[:n] @ q
        if k < n:
            top = np.argpartition(-sims, k)[:k]
        else:
            top = np.arange(n)
        top = top[np.argsort(-sims[top], kind="stable")]
        return [(int(self._ids[i]), float(sims[i])) for i in top]

    @property
    def nbytes(self) -> int:
        return int(self._mat.nbytes + self._bits.nbytes + self._ids.nbytes)


Loader = Callable[[Hashable], Awaitable[tuple[list[int], np.ndarray]]]


class VectorScopes:
    """Matrices by scope key, each loaded once through ``loader(key) -> (ids, vectors)``."""

    def __init__(self, loader: Loader) -> None:
        self.loader = loader
        self.scopes: dict[Hashable, VectorMatrix] = {}
        self.dim: int | None = None

    def reset(self) -> None:
        """Forget every loaded matrix (the model changed)."""
        self.scopes.clear()
        self.dim = None

    async def get(self, key: Hashable, dim: int) -> VectorMatrix:
        m = self.scopes.get(key)
        if m is not None and m.dim == dim:
            return m
        # registered before loading, so vectors written meanwhile are added to it (and are
        # newer than what the loader reads: those ids are not overwritten)
        m = self.scopes[key] = VectorMatrix(dim)
        ids, vecs = await self.loader(key)
        keep = [i for i, rid in enumerate(ids) if rid not in m]
        if keep:
            m.add([ids[i] for i in keep], vecs[keep])
        return m

    def add(self, key: Hashable, ids: list[int], vecs: np.ndarray) -> None:
        """Keep a loaded scope current (an unloaded one reads the rows when first used)."""
        m = self.scopes.get(key)
        if m is not None:
            m.add(ids, vecs)

    def add_stored(self, pending: dict[int, Any], ids: list[int], vecs: np.ndarray) -> None:
        """Vectors the background worker stored: each joins the scope ``pending`` noted for
        its row when the row was read (and leaves ``pending``)."""
        for i, v in zip(ids, vecs, strict=True):
            scope = pending.pop(i, None)
            if scope is not None:
                self.add(scope, [i], v[None, :])

    def remove(self, key: Hashable, ids: Iterable[int]) -> None:
        m = self.scopes.get(key)
        if m is not None:
            m.remove(ids)

    def stats(self) -> dict[str, int]:
        return {"scopes": len(self.scopes),
                "vectors": sum(len(m) for m in self.scopes.values()),
                "bytes": sum(m.nbytes for m in self.scopes.values())}


def blobs_to_matrix(blobs: list[bytes], dim: int) -> np.ndarray:
    """sqlite-vec float32 blobs -> (n, dim) array."""
    if not blobs:
        return np.zeros((0, dim), dtype=np.float32)
    return np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(len(blobs), dim).copy()
