"""bench/recall.py's data: deterministic, and as large and varied as the issue (#21) asks.

At least 8 conversations of at least 300 turns across at least 10 dated sessions, at least 100
questions with their evidence turns marked, every category well represented; turns 5-60 words;
a question's evidence can be told apart from every other turn; facts "without keywords" share
no content word with their question; an updated fact's replaced value comes before the current
one. Also the benchmark's own pieces that need no daemon: BM25, RRF, the budget fill.
"""

from __future__ import annotations

from collections import Counter

import pytest

from bench.data import recall_data as rd
from tests.bench.seeded import assert_seeded

CONVS = rd.build()


def test_the_same_seed_gives_the_same_data_and_another_seed_other_data() -> None:
    assert_seeded(rd.build, rd.SEED, CONVS)
    assert {c.style for c in CONVS[:2]} == {"chat", "agent"}


def test_sizes() -> None:
    assert len(CONVS) >= 8
    styles = Counter(c.style for c in CONVS)
    assert styles["chat"] >= len(CONVS) / 2 and styles["agent"] >= 2
    for c in CONVS:
        assert len(c.turns) >= 300, c.cid
        assert len(c.sessions) >= 10, c.cid
        assert {t.session for t in c.turns} == set(range(len(c.sessions)))
        gaps = [b - a for a, b in zip(c.sessions, c.sessions[1:], strict=False)]
        assert all(g >= rd.dt.timedelta(days=1) for g in gaps), c.cid
        assert all(a.when <= b.when for a, b in zip(c.turns, c.turns[1:], strict=False)), c.cid
        assert [t.index for t in c.turns] == list(range(len(c.turns)))
        assert {t.speaker for t in c.turns} == set(c.speakers)
        for t in c.turns:
            assert 5 <= len(t.text.split()) <= 60, (c.cid, t.index, t.text)
    qs = [q for c in CONVS for q in c.questions]
    assert len(qs) >= 100
    cats = Counter(q.category for q in qs)
    assert set(cats) == set(rd.CATEGORIES)
    assert min(cats.values()) >= 20, cats
    assert len({q.qid for q in qs}) == len(qs)


def test_no_filler_line_repeats_within_a_conversation() -> None:
    for c in CONVS:
        bodies = Counter(t.text for t in c.turns)
        # greetings and goodbyes recur session after session; nothing else does
        repeated = [t for t, n in bodies.items() if n > 1 and len(t.split()) > 12]
        assert not repeated, (c.cid, repeated[:3])


@pytest.mark.parametrize("conv", CONVS, ids=lambda c: c.cid)
def test_questions_and_their_evidence(conv: rd.Conversation) -> None:
    bodies = [t.body() for t in conv.turns]
    names = {w.lower() for s in conv.speakers for w in s.split()} | {"assistant"}
    for q in conv.questions:
        assert q.evidence, q.qid
        assert all(0 <= i < len(conv.turns) for i in q.evidence + q.stale), q.qid
        for i in q.evidence:  # verbatim match finds this turn and no other
            assert sum(bodies[i] in b for b in bodies) == 1, (q.qid, bodies[i])
        ev_words = {w for i in q.evidence for w in rd.words(conv.turns[i].text)}
        q_words = set(rd.words(q.text)) - names
        if q.category == "single":
            assert len(q.evidence) == 1 and q_words & ev_words, q.qid
        elif q.category == "multi":
            assert 2 <= len(q.evidence) <= 3, q.qid
        elif q.category == "temporal":
            assert any(w in conv.turns[i].text.lower() for i in q.evidence
                       for w in ("today", "this morning", "last night", "an hour ago",
                                 "just got back", "since we last", "is done")), q.qid
        elif q.category == "updated":
            assert len(q.evidence) == 1 and q.stale, q.qid
            assert max(q.stale) < min(q.evidence), q.qid
            assert conv.turns[q.evidence[0]].text != conv.turns[q.stale[0]].text
        elif q.category == "nokw":
            assert len(q.evidence) == 1, q.qid
            assert not q_words & ev_words, (q.qid, q_words & ev_words)


def test_the_benchmarks_retrievers_and_fill() -> None:
    from bench.recall import BM25, REPLY_PRIMING, fill, newest_first, ranking, rrf

    docs = [rd.words(s) for s in ("the cat sat on the mat", "dogs bark at night",
                                  "a cat and a dog", "nothing here at all")]
    bm = BM25(docs)
    s = bm.scores(rd.words("cat"))
    assert s[0] > 0 and s[2] > 0 and s[1] == 0 and s[3] == 0
    assert ranking(s, only_positive=True) == sorted([0, 2], key=lambda i: -s[i])
    assert rrf([0, 1], [1, 0])[0] in (0, 1) and set(rrf([0, 1], [2])) == {0, 1, 2}
    costs = [10, 50, 10, 10]
    assert fill([1, 0, 2, 3], costs, REPLY_PRIMING + 30) == [0, 2, 3]  # 50 skipped, the rest fit
    assert newest_first(costs, REPLY_PRIMING + 25) == [2, 3]
