"""bench/recall.py's fourth, held-out data set (``siblings_data.py``): deterministic, two
siblings over many dated sessions, every question's evidence marked and holding its answer,
stale values before current ones, and a chat export's time stamp."""

from __future__ import annotations

import re
from collections import Counter

from bench.data import recall_data as rd
from bench.data import siblings_data as sd
from tests.bench.seeded import assert_seeded

CONVS = sd.build()


def test_the_same_seed_gives_the_same_data() -> None:
    assert_seeded(sd.build, sd.SEED, CONVS)


def test_two_speakers_many_sessions_and_questions_of_every_kind() -> None:
    assert len(CONVS) == sd.N_CONVERSATIONS
    cats: Counter[str] = Counter()
    doubled = 0
    for c in CONVS:
        assert len(c.sessions) >= 20 and len(c.turns) >= 200
        assert len({t.speaker for t in c.turns}) == 2
        assert all(a.when <= b.when for a, b in zip(c.turns, c.turns[1:], strict=False))
        doubled += sum(a.speaker == b.speaker for a, b in zip(c.turns, c.turns[1:],
                                                               strict=False))
        cats.update(q.category for q in c.questions)
    assert set(cats) == set(rd.CATEGORIES) and sum(cats.values()) >= 100
    assert doubled >= 100  # double texting: a sibling's messages in a row


def test_evidence_holds_the_answer_and_stale_values_come_first() -> None:
    for c in CONVS:
        for q in c.questions:
            assert q.evidence and all(0 <= i < len(c.turns) for i in q.evidence)
            text = " ".join(c.turns[i].text for i in q.evidence)
            if q.category in ("single", "updated") and not q.text.startswith("Who "):
                assert q.answer.lower() in text.lower(), q
            if q.category == "temporal" and q.text.startswith(("In what month", "When")):
                assert c.turns[q.evidence[0]].when.strftime("%B %Y") == q.answer
            if q.stale:
                assert max(q.stale) < min(q.evidence)
            if q.category == "nokw":  # no content word of the question in the evidence
                asked = set(rd.words(q.text))
                assert not asked & set(rd.words(text)), q


def test_dated_turns_carry_a_chat_exports_stamp() -> None:
    t = CONVS[0].turns[0]
    assert re.fullmatch(r"\d\d/\d\d/\d{4}, \d\d:\d\d - " + re.escape(t.body()), t.render(True))
    assert t.render(False) == t.body()
