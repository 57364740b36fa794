"""bench/recall.py's second data set (``months_data.py``): deterministic, dated sessions over
months, every question's evidence marked and holding its answer, stale values before current
ones, and not the tuned set's look (news told over two turns, names only in the first)."""

from __future__ import annotations

from collections import Counter

from bench.data import months_data as md
from bench.data import recall_data as rd
from tests.bench.seeded import assert_seeded

CONVS = md.build()


def test_the_same_seed_gives_the_same_data() -> None:
    assert_seeded(md.build, md.SEED, CONVS)


def test_months_of_sessions_and_questions_of_every_kind() -> None:
    assert len(CONVS) == md.N_CONVERSATIONS
    cats: Counter[str] = Counter()
    for c in CONVS:
        assert len(c.sessions) >= 16 and len(c.turns) >= 300
        assert (c.sessions[-1] - c.sessions[0]).days >= 150
        assert all(a.when <= b.when for a, b in zip(c.turns, c.turns[1:], strict=False))
        assert {t.session for t in c.turns} == set(range(len(c.sessions)))
        cats.update(q.category for q in c.questions)
    assert set(cats) == set(rd.CATEGORIES) and sum(cats.values()) >= 150


def test_evidence_holds_the_answer_and_stale_values_come_first() -> None:
    two_turn = 0
    for c in CONVS:
        for q in c.questions:
            assert q.evidence and all(0 <= i < len(c.turns) for i in q.evidence)
            text = " ".join(c.turns[i].text for i in q.evidence)
            if q.category in ("single", "updated"):
                assert q.answer.lower() in text.lower(), q
            if q.category == "temporal" and q.text.startswith("In which month"):
                assert c.turns[q.evidence[0]].when.strftime("%B %Y") == q.answer
            if q.stale:
                assert max(q.stale) < min(q.evidence)
            # a news item told over two turns: the value's turn names no one
            two_turn += any(c.turns[i].text.startswith(("They ", "Well they"))
                            for i in q.evidence)
    assert two_turn >= 20
