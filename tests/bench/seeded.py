"""What every data set of bench/recall.py promises: the same seed gives the same data,
another seed other data, and the quick run's conversations are the full set's first."""

from __future__ import annotations

from collections.abc import Callable

from bench.data import recall_data as rd


def snapshot(convs: list[rd.Conversation]) -> list:
    return [(c.cid, c.style, c.speakers, [s.isoformat() for s in c.sessions],
             [(t.index, t.session, t.role, t.render(True)) for t in c.turns],
             [(q.qid, q.category, q.text, q.answer, q.evidence, q.stale) for q in c.questions])
            for c in convs]


def assert_seeded(build: Callable[..., list[rd.Conversation]], seed: int,
                  convs: list[rd.Conversation]) -> None:
    assert snapshot(build()) == snapshot(convs)
    assert snapshot(build(seed + 1)) != snapshot(convs)
    assert snapshot(build(conversations=2)) == snapshot(convs[:2])
