"""Ask the one retriever (``recall/index.py``) what the question needs: this session's units
best first, and the related entries of the user's other sessions.

A past session's entry is offered only when it is related (a shared informative word or a
cosine at the model's similarity threshold), not private, not excluded by this session, not
forgotten for recall (on another host: ``RecallIndex.forgotten``), and its session takes part
in recall.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from memman_daemon.engine.window.candidates import Recalled
from memman_daemon.engine.window.timeline import Timeline
from memman_daemon.model import Entry, Session
from memman_daemon.search import words

if TYPE_CHECKING:
    from memman_daemon.recall.index import RecallIndex


TOPIC_DF = 0.1  #: a word in more than this share of the corpus's entries is not the topic
LATER_MAX = 6  #: recalled entries (the best) checked for a later session's replacing statement
LATER_ROWS = 4  #: the later entries each check reads: the most alike by BM25 on its words


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
    """What the window is retrieved for: the given query, else the newest user message."""
    if query:
        return query, None
    for e in reversed(s.entries[-200:]):
        if e.role == "user" and e.type == "message" and e.content:
            return e.content, e.id
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
    others = ~mine & c.alive()
    priv = np.frombuffer(c.private, dtype=np.int8, count=c.n) != 0
    others &= ~priv
    excluded = index.excluded.get(s.id, set()) | index.forgotten
    replaced: dict[str, dict[int, int]] = {}  #: per source session, read once

    def recallable(row: int) -> tuple[Entry, Session | None] | None:
        """The entry of a row another session logged, when it may be recalled here."""
        eid, sid = c.eids[row], c.sids[row]
        e = c.remote.get(eid)  # an entry of another daemon's session (shared store)
        src = None if e is not None else sessions.get(sid)
        if e is None:
            if src is None or src.meta.recall is False:
                return None
            e = src.by_id.get(eid)
        return None if e is None or eid in excluded else (e, src)

    for row in hits.order(others):
        if len(out.recalled) >= max_items:
            break
        if not hits.related(row) or (got_e := recallable(row)) is None:
            continue
        e, src = got_e
        sid = c.sids[row]
        eid = e.id
        item = Recalled(e, sid, row, float(hits.fused[row]), hits)
        out.recalled.append(item)
        out.stand_ins += bool(hits.stand_in[row])
        if src is None:
            continue
        # the statement that replaced a value it holds comes with it
        if sid not in replaced:
            replaced[sid] = superseded(src)
        later = replaced[sid].get(eid)
        if later is not None and later not in excluded and (f := src.by_id.get(later)):
            out.recalled.append(Recalled(f, sid, c.row_of.get(later, -1), item.score, hits,
                                         supersedes=eid))
        # the turn that completes it in its session competes at a share of its score, as in
        # this session (select orders recalled entries by score)
        got = completes(src, eid, out.topic)
        if got is not None and got[0] not in excluded:
            row = c.row_of.get(got[0], -1)
            f = src.by_id.get(got[0])
            if f is not None and row >= 0 and not priv[row]:
                out.recalled.append(Recalled(f, sid, row, item.score * got[1], hits))
    _replaced_later(out, c, others, recallable, replaces)
    return out


def _replaced_later(out: Retrieval, c: Any, others: np.ndarray,
                    recallable: Callable[[int], tuple[Entry, Session | None] | None],
                    replaces: Callable[[list[tuple[Entry, str]]], dict[int, int]]) -> None:
    """Across sessions, a newer statement supersedes an older one: a recalled entry whose
    value a later session replaced brings that statement (select sends the two together or
    neither). The later entries looked at are the ones most alike by BM25 on its words (a
    correction repeats the old value or the subject) — bounded: ``LATER_MAX`` entries,
    ``LATER_ROWS`` rows each."""
    done = {r.supersedes for r in out.recalled if r.supersedes}
    at = np.frombuffer(c.at, dtype=np.float64, count=c.n)
    best = sorted((r for r in out.recalled if not r.supersedes and r.entry.id not in done
                   and r.row >= 0), key=lambda r: -r.score)[:LATER_MAX]
    for item in best:
        e = item.entry
        scores = c.bm25.scores(words.terms(e.content or ""))
        alike = np.flatnonzero((scores > 0) & others & (at > e.created_at))
        if len(alike) > LATER_ROWS:  # the best few, without sorting them all
            alike = alike[np.argpartition(-scores[alike], LATER_ROWS)[:LATER_ROWS]]
        rows = alike.tolist()
        later = [(got[0], c.sids[row], row) for row in rows if (got := recallable(row))]
        if not later:
            continue
        later.sort(key=lambda x: (x[0].created_at, x[0].id))
        by = replaces([(e, item.session_id), *((f, sid) for f, sid, _r in later)])
        new = by.get(e.id)
        hit = next((x for x in later if x[0].id == new), None)
        if hit is None:
            continue
        f, sid, row = hit  # (recalled on its own too, maybe: select sends an entry once)
        out.recalled.append(Recalled(f, sid, row, item.score, item.hits, supersedes=e.id))
