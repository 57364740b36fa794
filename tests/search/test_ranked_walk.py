"""``Hits.ranked``: the walks over ranked rows sort only the best of them first, lazily; the
order must be exactly that of one stable sort (ties by row), or a window would change."""

import numpy as np

from memman_daemon.recall.index import Hits


def _hits(fused: np.ndarray) -> Hits:
    n = len(fused)
    z = np.zeros(n, dtype=np.float32)
    return Hits(None, fused, z, z, z, z, np.zeros(n, dtype=bool), 0.0)  # type: ignore[arg-type]


def test_the_lazy_order_is_the_stable_sort_ties_at_the_cut_included() -> None:
    rng = np.random.default_rng(3)
    for trial in range(40):
        n = int(rng.integers(1, 400))
        # few distinct values: many ties, also at the cut between the two parts
        fused = rng.integers(0, 6, n).astype(np.float32) / 5
        mask = rng.random(n) < 0.8
        hits = _hits(fused)
        idx = np.flatnonzero(mask & (fused > 0))
        want = idx[np.argsort(-fused[idx], kind="stable")].tolist()
        for first in (1, 3, 16, 1024):
            got = list(hits.ranked(mask, first=first))
            assert [r for r, _ in got] == want, (trial, first)
            assert [s for _, s in got] == fused[want].tolist()
        assert hits.order(mask) == want


def test_a_walk_that_stops_early_sorts_only_the_first_part() -> None:
    fused = np.linspace(1.0, 2.0, 10_000).astype(np.float32)
    walk = _hits(fused).ranked(np.ones(len(fused), dtype=bool), first=100)
    best = [next(walk) for _ in range(3)]
    assert [r for r, _ in best] == [9999, 9998, 9997]
