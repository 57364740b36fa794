"""Ask the one retriever (``recall/index.py``) what the question needs: this session's units
best first, and the related entries of the user's other sessions.

A past session's entry is offered only when it is related (a shared informative word or a
cosine at the model's similarity threshold) and the scope lets this session see it
(``memman_daemon/scope.py``: not private, not excluded by this session, not forgotten for
recall, its session takes part in recall) — the statement that replaced its value too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from memman_daemon.engine.window.candidates import Recalled
from memman_daemon.engine.window.timeline import Timeline
from memman_daemon.model import Entry, Session
from memman_daemon.scope import Caller, across_entry, across_mask
from memman_daemon.search import late, words

if TYPE_CHECKING:
    from memman_daemon.recall.index import RecallIndex


TOPIC_DF = 0.1  #: a word in more than this share of the corpus's entries is not the topic
LATER_MAX = 6  #: recalled entries (the best) checked for a later session's replacing statement
LATER_ROWS = 4  #: the later entries each check reads: the most alike by BM25 on its words
#: past entries ranked by the second stage, not related but alike enough (``late.SPARE_MIN``),
#: offered for the room left (the best first): a fresh session's budget is otherwise half
#: empty while the ranking still holds evidence
SPARE_MAX = 100


@dataclass
class Retrieval:
    query: str
    query_id: int | None  #: the log entry that is the question (when taken from the log)
    units: list[int] = field(default_factory=list)  #: this session's units, best first
    unit_rank: dict[int, int] = field(default_factory=dict)  #: unit -> its rank (from 1)
    unit_row: dict[int, int] = field(default_factory=dict)  #: unit -> its best row
    unit_score: dict[int, float] = field(default_factory=dict)
    hits: Any = None  #: the retriever's arrays (score parts, read for the units shown)
    recalled: list[Recalled] = field(default_factory=list)  #: best first
    #: the question's topic: its words that are rare in the corpus (a name said in half the
    #: turns, or "today", tells which turn answers it no better than chance)
    topic: frozenset[str] = frozenset()
    stand_ins: int = 0  #: hits ranked by the static model while their vector is pending
    pending: int = 0  #: entries of the corpus still waiting for their vector

    def parts(self, unit: int) -> dict[str, Any]:
        """A unit's rank and score parts ({} when it was not retrieved)."""
        row = self.unit_row.get(unit)
        if row is None or self.hits is None:
            return {}
        return {"rank": self.unit_rank[unit], **self.hits.parts(row)}


def question(s: Session, query: str) -> tuple[str, int | None]:
    """What the window is retrieved for: the given query, else the newest user message —
    a bounded excerpt of it (``words.excerpt``: a pasted megabyte costs what 4,000 characters
    cost, on every request)."""
    if query:
        return words.excerpt(query), None
    for e in reversed(s.entries[-200:]):
        if e.role == "user" and e.type == "message" and e.content:
            return words.excerpt(e.content), e.id
    return "", None


def retrieve(index: RecallIndex | None, s: Session, tl: Timeline, query: str,
             query_id: int | None, vecs: list[tuple[Any, Any]] | None, *, recall: bool,
             max_items: int, sessions: dict[str, Session],
             superseded: Callable[[Session], dict[int, int]],
             completes: Callable[[Session, int, frozenset[str]],
                                 tuple[int, float] | None],
             replaces: Callable[[list[tuple[Entry, str]]], dict[int, int]]) -> Retrieval:
    """``vecs``: the question's vectors (``RecallIndex.question_vectors``, awaited before:
    nothing here awaits, so the timeline and the corpus do not grow under it).
    ``completes(session, entry id, topic)``: the entry of that session that completes it
    (``candidates.completing`` over its timeline) and the share of the hit's score it gets.
    ``replaces([(entry, session id), ...])``: in time order, entry id -> the later entry that
    replaced a value it holds (``supersede.py``'s rules)."""
    out = Retrieval(query, query_id)
    if index is None or not query or vecs is None:
        return out
    c = index.corpus_of(s)
    hits = index.retrieve_facets(c, query, vecs)
    out.topic = frozenset(t for t in words.terms(query)
                          if c.bm25.df(t) <= TOPIC_DF * max(c.bm25.live, 1))
    out.pending = hits.pending
    out.hits = hits
    mine = c.of_session(s.id)
    rank = 0
    eids, entry_unit, fused, stand_in = c.eids, tl.entry_unit, hits.fused, hits.stand_in
    for row in hits.order(mine):
        eid = eids[row]
        if eid == query_id:
            continue
        u = entry_unit.get(eid)
        if u is None or u.index in out.unit_rank:
            continue
        rank += 1
        out.units.append(u.index)
        out.unit_rank[u.index] = rank
        out.unit_row[u.index] = row
        out.unit_score[u.index] = float(fused[row])
        out.stand_ins += bool(stand_in[row])
    if not recall or index.config.recall.scope == "off" or s.meta.recall is False:
        return out
    # who may see what is the scope's decision, before ranking (``memman_daemon/scope.py``)
    caller = Caller(s.meta.user_id, s.meta.tenant_id, s.id, project=s.meta.project,
                    keeps_project=s.meta.recall_project)
    others = across_mask(index, c, caller)
    alive_others = c.alive() & ~mine

    def recallable(row: int) -> tuple[Entry, Session | None] | None:
        """The entry of a row another session logged, when it may be recalled here."""
        return across_entry(index, c, row, caller)

    replaced: dict[str, dict[int, int]] = {}  #: per source session, read once
    spare = 0
    late_score = hits.late_score
    for row in hits.order(others):
        if len(out.recalled) >= max_items:
            break
        related = hits.related(row)
        if not related and (late_score is None or late_score[row] < late.SPARE_MIN
                            or spare >= SPARE_MAX):
            continue
        if (got_e := recallable(row)) is None:
            continue
        spare += not related
        e, src = got_e
        sid = c.sids[row]
        eid = e.id
        item = Recalled(e, sid, row, float(hits.fused[row]), hits, spare=not related)
        fix: Recalled | None = None
        if src is not None:
            # the statement that replaced a value it holds comes with it; when that
            # statement may not be shown here, neither may the value it replaced
            if sid not in replaced:
                replaced[sid] = superseded(src)
            later = replaced[sid].get(eid)
            if later is not None:
                lrow = c.row_of.get(later, -1)
                got_f = recallable(lrow)
                if got_f is None:
                    continue
                fix = Recalled(got_f[0], sid, lrow, item.score, hits, supersedes=eid,
                               spare=item.spare)
        out.recalled.append(item)
        out.stand_ins += bool(hits.stand_in[row])
        if fix is not None:
            out.recalled.append(fix)
        if src is None:
            continue
        # the turn that completes it in its session competes at a share of its score, as in
        # this session (select orders recalled entries by score)
        got = completes(src, eid, out.topic)
        if got is not None:
            crow = c.row_of.get(got[0], -1)
            if (got_c := recallable(crow)) is not None:
                out.recalled.append(Recalled(got_c[0], sid, crow, item.score * got[1], hits,
                                             spare=item.spare))
    _replaced_later(out, index, c, alive_others, recallable, replaces)
    return out


def _replaced_later(out: Retrieval, index: RecallIndex, c: Any, others: np.ndarray,
                    recallable: Callable[[int], tuple[Entry, Session | None] | None],
                    replaces: Callable[[list[tuple[Entry, str]]], dict[int, int]]) -> None:
    """Across sessions, a newer statement supersedes an older one: a recalled entry whose
    value a later session replaced brings that statement (select sends the two together or
    neither). The later entries looked at are the ones most alike by BM25 on its words (a
    correction repeats the old value or the subject) — bounded: ``LATER_MAX`` entries,
    ``LATER_ROWS`` rows each. ``others``: every live row of the user's other sessions, the
    ones this session may not be shown included: a value replaced by a statement it may not
    see (private, recall off, excluded) leaves the window rather than go stale."""
    done = {r.supersedes for r in out.recalled if r.supersedes}
    at = np.frombuffer(c.at, dtype=np.float64, count=c.n)
    best = sorted((r for r in out.recalled if not r.supersedes and r.entry.id not in done
                   and r.row >= 0), key=lambda r: -r.score)[:LATER_MAX]
    hidden: set[int] = set()
    for item in best:
        e = item.entry
        # its words as indexed (a bounded head: a megabyte entry costs what 4,000 chars do)
        scores = c.bm25.scores(words.terms(c.texts[item.row]))
        alike = np.flatnonzero((scores > 0) & others & (at > e.created_at))
        if len(alike) > LATER_ROWS:  # the best few, without sorting them all
            alike = alike[np.argpartition(-scores[alike], LATER_ROWS)[:LATER_ROWS]]
        later = [(f, c.sids[row], row) for row in alike.tolist()
                 if (f := index.entry_at(c, row)[0]) is not None]
        if not later:
            continue
        later.sort(key=lambda x: (x[0].created_at, x[0].id))
        by = replaces([(e, item.session_id), *((f, sid) for f, sid, _r in later)])
        new = by.get(e.id)
        hit = next((x for x in later if x[0].id == new), None)
        if hit is None:
            continue
        f, sid, row = hit  # (recalled on its own too, maybe: select sends an entry once)
        if recallable(row) is None:
            hidden.add(e.id)
            continue
        out.recalled.append(Recalled(f, sid, row, item.score, item.hits, supersedes=e.id,
                                     spare=item.spare))
    if hidden:
        out.recalled = [r for r in out.recalled
                        if r.entry.id not in hidden and r.supersedes not in hidden]
