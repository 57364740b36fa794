"""bench/recall.py's third, held-out data set (``group_data.py``): deterministic, a group chat
of three over many dated sessions, every question's evidence marked and holding its answer,
stale values before current ones, and its own time stamp."""

from __future__ import annotations

import re
from collections import Counter

from bench.data import group_data as gd
from bench.data import recall_data as rd
from tests.bench.seeded import assert_seeded

CONVS = gd.build()


def test_the_same_seed_gives_the_same_data() -> None:
    assert_seeded(gd.build, gd.SEED, CONVS)


def test_three_speakers_many_sessions_and_questions_of_every_kind() -> None:
    assert len(CONVS) == gd.N_CONVERSATIONS
    cats: Counter[str] = Counter()
    for c in CONVS:
        assert len(c.sessions) >= 18 and len(c.turns) >= 200
        assert len({t.speaker for t in c.turns}) == 3
        assert all(a.when <= b.when for a, b in zip(c.turns, c.turns[1:], strict=False))
        cats.update(q.category for q in c.questions)
    assert set(cats) == set(rd.CATEGORIES) and sum(cats.values()) >= 100


def test_evidence_holds_the_answer_and_stale_values_come_first() -> None:
    for c in CONVS:
        for q in c.questions:
            assert q.evidence and all(0 <= i < len(c.turns) for i in q.evidence)
            text = " ".join(c.turns[i].text for i in q.evidence)
            if q.category in ("single", "updated"):
                assert q.answer.lower() in text.lower(), q
            if q.category == "temporal" and q.text.startswith(("In what month", "When")):
                assert c.turns[q.evidence[0]].when.strftime("%B %Y") == q.answer
            if q.stale:
                assert max(q.stale) < min(q.evidence)
            if q.category == "nokw":  # no content word of the question in the evidence
                # ("one" is: "a healthy little one called Maud" in a voice note, as measured)
                asked = set(rd.words(q.text)) - {"us", "our", "one"}
                assert not asked & set(rd.words(text)), q


def test_dated_turns_carry_their_own_stamp() -> None:
    t = CONVS[0].turns[0]
    assert re.fullmatch(r"\(\d{1,2}:\d\d [ap]m, \d{1,2} [A-Z][a-z]+ \d{4}\) " + re.escape(
        t.body()), t.render(True))
    assert t.render(False) == t.body()
