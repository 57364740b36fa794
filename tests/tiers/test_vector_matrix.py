"""The in-memory vector index and reciprocal rank fusion (pure functions, no daemon needed)."""

from __future__ import annotations

import numpy as np

from memman_daemon.search.hybrid import identifiers, may_be_duplicate, rrf
from memman_daemon.search.vector_matrix import EXACT_MAX, VectorMatrix


def unit(rng: np.random.Generator, n: int, dim: int = 256) -> np.ndarray:
    v = rng.standard_normal((n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def test_exact_search_add_replace_remove() -> None:
    rng = np.random.default_rng(1)
    vecs = unit(rng, 50)
    m = VectorMatrix(256)
    m.add(range(100, 150), vecs)
    top = m.search(vecs[7], 3)
    assert top[0][0] == 107 and abs(top[0][1] - 1.0) < 1e-5
    m.remove([107, 149, 999])
    assert len(m) == 48 and 107 not in m and 148 in m
    assert all(rid != 107 for rid, _ in m.search(vecs[7], 48))
    m.add([120], vecs[7][None, :])  # replace 120's vector
    assert m.search(vecs[7], 1)[0][0] == 120 and len(m) == 48
    sims = m.similarities(vecs[7], [120, 107])
    assert list(sims) == [120] and abs(sims[120] - 1.0) < 1e-5


def test_sign_bit_prefilter_finds_what_the_exact_scan_finds() -> None:
    rng = np.random.default_rng(2)
    n = EXACT_MAX * 2
    vecs = unit(rng, n)
    m = VectorMatrix(256)
    m.add(range(n), vecs)
    hits = 0
    for i in range(0, n, n // 20):
        q = vecs[i] + 0.3 * unit(rng, 1)[0]
        q /= np.linalg.norm(q)
        exact = set(np.argsort(-(vecs @ q))[:10].tolist())
        got = m.search(q, 10)
        assert got[0][0] == i
        hits += len(exact & {rid for rid, _ in got})
    assert hits >= 0.95 * 20 * 10


def test_rrf_weights_and_parts() -> None:
    fused = rrf({"bm25": [(1, 9.0), (2, 5.0)], "vector": [(3, 0.8), (1, 0.5)]}, k=5,
                weights={"bm25": 0.5, "vector": 1.0})
    by = {f.id: f for f in fused}
    assert by[1].matched == ["bm25", "vector"]
    assert abs(by[1].rrf - (0.5 / 6 + 1.0 / 7)) < 1e-12
    assert [f.id for f in fused] == [1, 3, 2]
    w = by[3].to_wire()
    assert w["matched"] == ["vector"] and w["vector"] == {"rank": 1, "score": 0.8}


def test_identifiers_guard_near_duplicates() -> None:
    assert identifiers("Revenue in Q3 rose 12% on 2024-10-03") == {"q3", "12", "2024-10-03"}
    assert may_be_duplicate("Ana wants every amount in EUR", "Ana wants all amounts in EUR")
    assert not may_be_duplicate("event 3 about widgets", "event 4 about widgets")
