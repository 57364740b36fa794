"""``select`` is a function of data: hand-made candidates, retrieval and a table of costs
(numpy columns, lines with their measures), no builder, no tokenizer."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from memman_daemon.engine.window.candidates import SessionCandidates
from memman_daemon.engine.window.retrieve import Retrieval
from memman_daemon.engine.window.select import Costs, Line, UnitLines, lines_tokens, select
from memman_daemon.engine.window.timeline import Unit
from memman_daemon.model import Entry

CFG = SimpleNamespace(prune_threshold=0.0, recent_share=0.0, neighbours=False,
                      target_usage=0.95)


def units(tokens: list[int]) -> list[Unit]:
    out = []
    for i, n in enumerate(tokens):
        e = Entry(id=i + 1, session_id="s", type="message",
                  role="user" if i % 2 == 0 else "assistant", content=f"turn {i}", tokens=n,
                  created_at=float(i))
        out.append(Unit(i, [e], n))
    return out


def candidates(us: list[Unit], current: list[int]) -> SessionCandidates:
    return SessionCandidates(us, np.ones(len(us), dtype=bool), [], current,
                             sum(u.tokens for u in us), {})


def retrieval(ranked: list[int]) -> Retrieval:
    r = Retrieval("what happened?", None)
    for k, i in enumerate(ranked):
        r.units.append(i)
        r.unit_rank[i] = k + 1
        r.unit_score[i] = 1.0 - k / 10
    return r


def table(plain: list[int], dated: list[int], day: list[int], **kw) -> Costs:
    return Costs(plain=np.array(plain), dated=np.array(dated), day=np.array(day),
                 recalled_header=0, **kw)


def test_a_date_is_paid_by_the_first_unit_of_its_day_kept():
    """Both costs are in the table: a unit pays its dated cost when the unit kept before it is
    of another day, and one placed before a dated unit of its day takes that date over."""
    us = units([10] * 6)
    c = candidates(us, current=[5])
    costs = table(plain=[10] * 6, dated=[15, 15, 15, 15, 10, 10],
                  day=[100, 100, 101, 101, -1, -1])
    # the question (5), the ranked 1 and 2 (each the first of its day: dated), then newest
    # first: 4, 3 (the day of 2: plain), 0 (dated; 1 loses its date: 15 - 5)
    sel = select(c, retrieval([1, 2]), 70, costs, CFG)
    assert set(sel.units) == {0, 1, 2, 3, 4, 5}
    assert sel.dated == {0, 2}
    assert sel.used == 10 + 15 + 15 + 10 + 10 + (15 - 5)
    # five tokens fewer: 0 no longer fits
    sel = select(c, retrieval([1, 2]), 65, costs, CFG)
    assert set(sel.units) == {1, 2, 3, 4, 5} and sel.dated == {1, 2} and sel.used == 60


def test_a_large_unit_sends_the_lines_that_fit_summed_from_their_measures():
    us = units([10, 400])
    c = candidates(us, current=[])
    row = UnitLines(base=20, tail="]\n", picks=[
        Line(3, "c", alone=30, joined=31),
        Line(0, "/a", alone=50, joined=51, lead="/", rest_alone=49, rest_joined=50),
        Line(1, "b", alone=200, joined=201),  # does not fit
        Line(2, "d:", alone=10, joined=11, tail=":\n"),
    ], joins={("]\n", "/"): 2, (":\n", "/"): 1})
    costs = table(plain=[10, 400], dated=[10, 400], day=[-1, -1], lines={1: row}, lines_rank=1)
    sel = select(c, retrieval([1]), 200, costs, CFG)
    # in their order; "/a" joins the heading's last piece, the last line has no newline
    assert sel.lines == {1: (["/a", "d:", "c"], 20 + (2 + 50) + 11 + 30)}
    assert lines_tokens(row, [row.picks[1], row.picks[3], row.picks[0]]) == 113
    assert set(sel.units) == {0} and sel.used == 113 + 10


def test_a_unit_past_the_lines_in_the_table_is_asked_for():
    us = units([10, 400])
    c = candidates(us, current=[])
    costs = table(plain=[10, 400], dated=[10, 400], day=[-1, -1], lines_rank=0)
    sel = select(c, retrieval([1]), 200, costs, CFG)
    assert sel.wants_lines == 1 and not sel.units
    # covered by the table and absent from it: the unit has no matching line
    costs.lines_rank = 1
    sel = select(c, retrieval([1]), 200, costs, CFG)
    assert sel.wants_lines is None and not sel.lines and set(sel.units) == {0}
