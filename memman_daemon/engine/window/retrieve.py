"""Ask the one retriever (``recall/index.py``) what the question needs: this session's units
best first, and the user's other sessions' entries best first — every one the scope lets this
session see, in rank order, as many as could fill the room (the budget decides, in ``select``,
as it does for this session's units: nothing a ranked past turn could fill is left free).

A past session's entry comes with what memman adds to plain retrieval: the turn that completes
it in its session, and the statement that replaced a value it holds (from its session or a
later one). Who may see what is ``memman_daemon/scope.py``'s decision: the rows are masked
before ranking (``across_mask``) and what a hit brings along is checked per row
(``across_entry``): not private, not excluded by this session, not forgotten for recall, its
session takes part in recall — a value whose replacing statement may not be shown here is not
shown either.

The work per request is bounded by the room, not by the corpus: past entries are taken in rank
order only until their tokens could fill the room ``OFFER`` times over (``[recall] max_items``
at most), and only those get their completing and superseding entries; when the selection
still leaves room and more ranked entries remain, the builder asks for more (``more``, with
``MORE`` times the offer). A session's replaced values are read once per version of its
timeline (``Sources``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from memman_daemon.engine import facts
from memman_daemon.engine.supersede import Supersession
from memman_daemon.engine.window import candidates as cand
from memman_daemon.engine.window.candidates import Recalled
from memman_daemon.engine.window.timeline import Timeline, Timelines
from memman_daemon.model import Entry, Session
from memman_daemon.scope import Caller, across_entry, across_mask
from memman_daemon.search import words

if TYPE_CHECKING:
    from memman.config import Config
    from memman_daemon.recall.index import RecallIndex


TOPIC_DF = 0.1  #: a word in more than this share of the corpus's entries is not the topic
LATER_MAX = 6  #: recalled entries (the best) checked for a later session's replacing statement
LATER_ROWS = 4  #: the later entries each check reads: the most alike by BM25 on its words
#: ...its rarest words (the fewest postings): they decide BM25's ranking, and the work of a
#: check is the length of their postings, not of every common word's
LATER_TERMS = 8
#: past entries are offered in rank order until their tokens fill the room this many times
#: over: the selection skips some (the same words again, one too large for what is left, a
#: value whose replacement does not fit), and the rest still fill it
OFFER = 1.25
MORE = 4  #: the offer asked again, this many times larger, when the room was not filled


@dataclass
class Retrieval:
    query: str
    query_id: int | None  #: the log entry that is the question (when taken from the log)
    units: list[int] = field(default_factory=list)  #: this session's units, best first
    unit_rank: dict[int, int] = field(default_factory=dict)  #: unit -> its rank (from 1)
    unit_row: dict[int, int] = field(default_factory=dict)  #: unit -> its best row
    unit_score: dict[int, float] = field(default_factory=dict)
    hits: Any = None  #: the retriever's arrays (score parts, read for the units shown)
    #: past sessions' entries, in rank order, each followed by what it brings along
    recalled: list[Recalled] = field(default_factory=list)
    #: the question's topic: its words that are rare in the corpus (a name said in half the
    #: turns, or "today", tells which turn answers it no better than chance)
    topic: frozenset[str] = frozenset()
    stand_ins: int = 0  #: hits ranked by the static model while their vector is pending
    pending: int = 0  #: entries of the corpus still waiting for their vector
    #: the offer of past entries stopped at its bound while ranked ones remained (``more``)
    cut: bool = False
    #: what asking for more reads again: (corpus, rows this session may be shown, caller)
    across: tuple[Any, np.ndarray, Caller] | None = None
    own: list[tuple[float, int]] = field(default_factory=list)  #: (score, tokens), best first
    recalled_stand_ins: int = 0  #: of ``stand_ins``, the past entries' (offered again: undone)

    def parts(self, unit: int) -> dict[str, Any]:
        """A unit's rank and score parts ({} when it was not retrieved)."""
        row = self.unit_row.get(unit)
        if row is None or self.hits is None:
            return {}
        return {"rank": self.unit_rank[unit], **self.hits.parts(row)}


class Sources:
    """The user's other sessions as the window reads them, from their timelines (each entry
    analysed once, as it arrived): the turn that completes an entry there, and the values
    later statements replaced — read once per version of the session's timeline, not once
    per recalled entry."""

    def __init__(self, config: Config, timelines: Timelines,
                 sessions: dict[str, Session]) -> None:
        self.config, self.timelines, self.sessions = config, timelines, sessions
        self._replaced: dict[str, tuple[tuple, dict[int, int]]] = {}
        self._current: dict[str, Timeline] = {}  #: timelines read by this request

    def begin(self) -> None:
        """A new request: timelines are looked up afresh (once each, then kept for it)."""
        self._current.clear()

    def timeline(self, s: Session) -> Timeline:
        tl = self._current.get(s.id)
        if tl is None:
            tl = self._current[s.id] = self.timelines.timeline(s)
        return tl

    def replaced(self, s: Session) -> dict[int, int]:
        """``s``'s replaced values: entry id -> the entry that replaced it."""
        tl = self.timeline(s)
        got = self._replaced.get(s.id)
        if got is None or got[0] != tl.key:
            by = {eid: later for (eid, _k), (later, _t) in tl.an.sup.by.items()}
            got = self._replaced[s.id] = (tl.key, by)
            if len(self._replaced) > 4096:  # sessions gone: drop the oldest reads
                self._replaced.pop(next(iter(self._replaced)))
        return got[1]

    def completes(self, s: Session, eid: int, topic: frozenset[str]
                  ) -> tuple[int, float] | None:
        """The entry of ``s`` that completes entry ``eid`` there, and the share of its score
        it carries (``candidates.completing``, else ``continuing``)."""
        if not self.config.context.neighbours:
            return None
        tl = self.timeline(s)
        u = tl.entry_unit.get(eid)
        got = None
        if u is not None:
            got = cand.completing(tl.units, u.index, topic) \
                or cand.continuing(tl.units, u.index)
        if got is None or len(tl.units[got[0]].items) != 1:
            return None
        return tl.units[got[0]].first.id, got[1]

    def analysed(self, e: Entry, sid: str) -> list[Any]:
        """An entry's fact candidates: from its session's cached analysis, else made now."""
        src = self.sessions.get(sid)
        an = self.timeline(src).an if src is not None else None
        got = an.cands.get(e.id) if an is not None else None
        return got if got is not None else facts.analyse((e.content or "")[:4000],
                                                         structured=False)

    def supersession(self, entries: list[tuple[Entry, str]]) -> Supersession:
        """``supersede.py``'s rules over entries of the user's sessions, in time order."""
        sup = Supersession()
        for e, sid in entries:
            sup.feed(e.id, self.analysed(e, sid), "message")
        return sup


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
             query_id: int | None, vecs: list[tuple[Any, ...]] | None, *, recall: bool,
             room: int, max_items: int, sources: Sources) -> Retrieval:
    """``vecs``: the question's vectors (``RecallIndex.question_vectors``, awaited before:
    nothing here awaits, so the timeline and the corpus do not grow under it). ``room``: the
    tokens the window may fill (bounds how many past entries are offered)."""
    out = Retrieval(query, query_id)
    if index is None or not query or vecs is None:
        return out
    c = index.corpus_of(s)
    mine = c.of_session(s.id)
    recalls = recall and index.config.recall.scope != "off" and s.meta.recall is not False
    # who may see what is the scope's decision, before ranking (``memman_daemon/scope.py``):
    # a row this session may not be shown is in no list and lends its words to no neighbour
    caller = Caller(s.meta.user_id, s.meta.tenant_id, s.id, project=s.meta.project,
                    keeps_project=s.meta.recall_project)
    others = across_mask(index, c, caller) if recalls else np.zeros(c.n, dtype=bool)
    hits = index.retrieve_facets(c, query, vecs, mine | others)
    out.topic = frozenset(t for t in words.terms(query)
                          if c.bm25.df(t) <= TOPIC_DF * max(c.bm25.live, 1))
    out.pending = hits.pending
    out.hits = hits
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
    if not recalls:
        return out
    out.across = (c, others, caller)
    # this session's units ranked above a past entry take the room before it
    out.own = [(out.unit_score[i], tl.units[i].tokens) for i in out.units]
    _recall(out, index, c, hits, others, caller, room, OFFER * max(room, 1), max_items,
            sources)
    _replaced_later(out, index, c, c.alive() & ~mine, caller, sources)
    return out


def more(out: Retrieval, index: RecallIndex, s: Session, room: int, max_items: int,
         sources: Sources) -> bool:
    """The selection left room while the offer of past entries stopped at its bound: offer
    them again, ``MORE`` times as many tokens (the same rank order, so the same entries
    first). False when there is nothing more to offer."""
    if not out.cut or out.across is None:
        return False
    c, others, caller = out.across
    out.recalled, out.cut = [], False
    out.stand_ins -= out.recalled_stand_ins
    out.recalled_stand_ins = 0
    _recall(out, index, c, out.hits, others, caller, room, MORE * OFFER * max(room, 1),
            max_items, sources)
    _replaced_later(out, index, c, c.alive() & ~c.of_session(s.id), caller, sources)
    return True


def _recall(out: Retrieval, index: RecallIndex, c: Any, hits: Any, others: np.ndarray,
            caller: Caller, room: int, need: float, max_items: int, sources: Sources) -> None:
    """Past entries in rank order, each followed by the statement that replaced a value it
    holds (sent together or not at all) and the turn that completes it (a candidate of its
    own at a share of its score) — until their tokens reach ``need`` (``cut`` then)."""
    offered = 0
    by_id: dict[int, Recalled] = {}  #: an entry is offered once, at its best score
    own, k = out.own, 0  #: this session's ranked units, taken as the walk passes their score

    def offer(item: Recalled) -> None:
        nonlocal offered
        was = by_id.get(item.entry.id)
        if was is not None:  # a completing turn that is a hit of its own too
            if item.score > was.score and was.supersedes is None:
                was.score = item.score
            return
        by_id[item.entry.id] = item
        out.recalled.append(item)
        if item.entry.tokens <= room:  # one that can never fit fills nothing
            offered += item.entry.tokens

    for row in hits.order(others):
        if len(out.recalled) >= max_items:
            break
        score = float(hits.fused[row])
        while k < len(own) and own[k][0] >= score:
            offered += own[k][1] if own[k][1] <= room else 0
            k += 1
        if offered >= need:
            out.cut = True
            break
        # a row of this daemon passed the scope's mask (``across_mask``, the same rules):
        # its entry is read as it is; another host's row is checked whole
        got_e = across_entry(index, c, row, caller) if c.eids[row] in c.remote \
            else index.entry_at(c, row)
        if got_e is None:
            continue
        e, src = got_e
        if e is None:
            continue
        sid = c.sids[row]
        item = Recalled(e, sid, row, score, hits)
        fix: Recalled | None = None
        if src is not None:
            # the statement that replaced a value it holds comes with it; when that
            # statement may not be shown here, neither may the value it replaced
            later = sources.replaced(src).get(e.id)
            if later is not None:
                lrow = c.row_of.get(later, -1)
                got_f = across_entry(index, c, lrow, caller)
                if got_f is None:
                    continue
                fix = Recalled(got_f[0], sid, lrow, item.score, hits, supersedes=e.id)
        offer(item)
        out.recalled_stand_ins += bool(hits.stand_in[row])
        out.stand_ins += bool(hits.stand_in[row])
        if fix is not None:
            offer(fix)
        if src is None:
            continue
        # the turn that completes it in its session competes at a share of its score, as in
        # this session (select orders recalled entries by score)
        got = sources.completes(src, e.id, out.topic)
        if got is not None:
            crow = c.row_of.get(got[0], -1)
            if (got_c := across_entry(index, c, crow, caller)) is not None:
                offer(Recalled(got_c[0], sid, crow, item.score * got[1], hits))


def _replaced_later(out: Retrieval, index: RecallIndex, c: Any, others: np.ndarray,
                    caller: Caller, sources: Sources) -> None:
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
        # its rarest words as indexed (a bounded head: a megabyte entry costs what 4,000
        # characters do)
        terms = sorted(set(words.terms(c.texts[item.row])), key=c.bm25.df)[:LATER_TERMS]
        scores = c.bm25.scores(terms)
        alike = np.flatnonzero((scores > 0) & others & (at > e.created_at))
        if len(alike) > LATER_ROWS:  # the best few, without sorting them all
            alike = alike[np.argpartition(-scores[alike], LATER_ROWS)[:LATER_ROWS]]
        later = [(f, c.sids[row], row) for row in alike.tolist()
                 if (f := index.entry_at(c, row)[0]) is not None]
        if not later:
            continue
        later.sort(key=lambda x: (x[0].created_at, x[0].id))
        sup = sources.supersession([(e, item.session_id),
                                    *((f, sid) for f, sid, _r in later)])
        new = {old: n for (old, _k), (n, _t) in sup.by.items() if old != n}.get(e.id)
        hit = next((x for x in later if x[0].id == new), None)
        if hit is None:
            continue
        f, sid, row = hit  # (recalled on its own too, maybe: select sends an entry once)
        if across_entry(index, c, row, caller) is None:
            hidden.add(e.id)
            continue
        out.recalled.append(Recalled(f, sid, row, item.score, item.hits, supersedes=e.id))
    if hidden:
        out.recalled = [r for r in out.recalled
                        if r.entry.id not in hidden and r.supersedes not in hidden]
