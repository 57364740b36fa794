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

from collections import OrderedDict
from collections.abc import Callable
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
MARK_MAX = 60  #: recalled entries (the best) compared for values replaced across sessions
LATER_MAX = 6  #: ...of which the best are checked for a later session's replacing statement
LATER_ROWS = 4  #: the later entries each check reads: the most alike by BM25 on its words
#: ...its rarest words (the fewest postings): they decide BM25's ranking, and the work of a
#: check is the length of their postings, not of every common word's. A word in more than
#: ``TOPIC_DF`` of the corpus (and ``LATER_COMMON`` rows) names no subject and is not used
#: (over 60,000 entries of a small vocabulary every word is in most rows: the checks read
#: millions of postings)
LATER_TERMS = 8
LATER_COMMON = 200
#: past entries are offered in rank order until their tokens fill the room this many times
#: over: the selection skips some (the same words again, one too large for what is left, a
#: value whose replacement does not fit), and the rest still fill it
OFFER = 1.25
MORE = 4  #: the offer asked again, this many times larger, when the room was not filled
RUNS = 64  #: supersession runs kept (``Sources.superseded``)
LISTS = 64  #: BM25 scores of the correction lookups kept (``Sources.bm25_reads``)


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
    #: values replaced across sessions among the best past entries (``_superseded``): old
    #: entry id -> the entry that replaced it
    replaced: dict[int, int] = field(default_factory=dict)

    def parts(self, unit: int) -> dict[str, Any]:
        """A unit's rank and score parts ({} when it was not retrieved)."""
        row = self.unit_row.get(unit)
        if row is None or self.hits is None:
            return {}
        return {"rank": self.unit_rank[unit], **self.hits.parts(row)}


class Sources:
    """The user's other sessions as the window reads them, from their timelines (each entry
    analysed once, as it arrived): the turn that completes an entry there, and the values
    later statements replaced — kept per state of the session's timeline (a past session
    rarely changes while others read it), not worked out again per recalled entry and
    request."""

    def __init__(self, config: Config, timelines: Timelines,
                 sessions: dict[str, Session]) -> None:
        self.config, self.timelines, self.sessions = config, timelines, sessions
        #: session -> (its analysis, values replaced so far, entry id -> the entry that
        #: replaced it): ``by`` only grows, so its size tells whether the read is current
        self._replaced: dict[str, tuple[Any, int, dict[int, int]]] = {}
        #: session -> (its timeline, entries in units, entry id -> what may complete it,
        #: whatever the question: ``candidates.completers`` and ``continuing``)
        self._completes: dict[str, tuple[Timeline, int, dict[int, Any]]] = {}
        self._current: dict[str, Timeline] = {}  #: timelines read by this request
        self._runs: OrderedDict[tuple, dict[int, int]] = OrderedDict()  #: ``superseded``
        #: ``bm25_reads``: (the index's state, its terms' parts, lists' scores)
        self._bm25: tuple[tuple[int, int, int], dict[str, Any],
                          dict[tuple[str, ...], np.ndarray]] | None = None

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
        an = self.timeline(s).an
        got = self._replaced.get(s.id)
        if got is None or got[0] is not an or got[1] != len(an.sup.by):
            by = {eid: later for (eid, _k), (later, _t) in an.sup.by.items()}
            got = self._replaced[s.id] = (an, len(an.sup.by), by)
            _bound(self._replaced)
        return got[2]

    def completing(self, s: Session, topic: frozenset[str]
                   ) -> Callable[[int], tuple[int, float] | None] | None:
        """For an entry id of ``s``, the entry there that completes it, and the share of its
        score it carries (``candidates.completing``, else ``continuing``); None: neighbours
        off. What may complete each entry is kept per version of the session's timeline
        (every new question asks about the same past turns); the topic is checked per call."""
        if not self.config.context.neighbours:
            return None
        tl = self.timeline(s)
        got = self._completes.get(s.id)
        if got is None or got[0] is not tl or got[1] != tl.consumed:
            got = self._completes[s.id] = (tl, tl.consumed, {})
            _bound(self._completes)
        known = got[2]
        units = tl.units

        def of(eid: int) -> tuple[int, float] | None:
            shape = known.get(eid, _UNREAD)
            if shape is _UNREAD:
                u = tl.entry_unit.get(eid)
                shape = known[eid] = None if u is None else (
                    cand.completers(units, u.index), cand.continuing(units, u.index))
            if shape is None:
                return None
            found = cand.completes(shape[0], topic) or shape[1]
            if found is None or len(units[found[0]].items) != 1:
                return None
            return units[found[0]].first.id, found[1]
        return of

    def bm25_reads(self, c: Any) -> tuple[dict[str, Any], dict[tuple[str, ...], np.ndarray]]:
        """For corpus ``c`` as it is now: its BM25 terms' parts (``Bm25.term``) and the
        scores of lists of terms read so far — kept while the index does not change
        (``Bm25.state``); at most ``LISTS`` lists."""
        b = c.bm25
        key = (id(b), *b.state)
        if self._bm25 is None or self._bm25[0] != key or len(self._bm25[2]) > LISTS:
            self._bm25 = (key, {}, {})
        return self._bm25[1], self._bm25[2]

    def analysed(self, e: Entry, sid: str) -> list[Any]:
        """An entry's fact candidates: from its session's cached analysis, else made now."""
        src = self.sessions.get(sid)
        an = self.timeline(src).an if src is not None else None
        got = an.cands.get(e.id) if an is not None else None
        return got if got is not None else facts.analyse((e.content or "")[:4000],
                                                         structured=False)

    def superseded(self, entries: list[tuple[Entry, str]]) -> dict[int, int]:
        """``supersede.py``'s rules over entries of the user's sessions, in time order: old
        entry id -> the entry that replaced a value it holds. Kept for the last ``RUNS``
        lists (the same entries, the same answer — asked again by every step of an agent's
        turn; the text is in the key: another host's row may come back with another)."""
        key = tuple((e.id, e.content, self._analysed(e, sid)) for e, sid in entries)
        got = self._runs.get(key)
        if got is not None:
            self._runs.move_to_end(key)
            return got
        sup = Supersession()
        for e, sid in entries:
            sup.feed(e.id, self.analysed(e, sid), "message")
        got = self._runs[key] = {old: new for (old, _k), (new, _t) in sup.by.items()
                                 if old != new}
        if len(self._runs) > RUNS:
            self._runs.popitem(last=False)
        return got

    def _analysed(self, e: Entry, sid: str) -> bool:
        """``e``'s analysis is its session's (not the stand-in ``analysed`` makes)."""
        src = self.sessions.get(sid)
        return src is not None and e.id in self.timeline(src).an.cands


_UNREAD = object()  #: ``Sources.completing``: an entry not looked at yet


def _bound(reads: dict[str, Any]) -> None:
    """Sessions gone: the oldest reads give way."""
    if len(reads) > 4096:
        reads.pop(next(iter(reads)))


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
    eids, entry_unit = c.eids, tl.entry_unit
    order = hits.order(mine)
    # the rows' scores and flags read at once (thousands of rows at 10k entries: a numpy
    # scalar per row cost more than the walk's own steps)
    idx = np.asarray(order, dtype=np.int64)
    fused, stand_in = hits.fused[idx].tolist(), hits.stand_in[idx].tolist()
    unit_rank = out.unit_rank
    for at, row in enumerate(order):
        eid = eids[row]
        if eid == query_id:
            continue
        u = entry_unit.get(eid)
        if u is None or u.index in unit_rank:
            continue
        rank += 1
        out.units.append(u.index)
        unit_rank[u.index] = rank
        out.unit_row[u.index] = row
        out.unit_score[u.index] = fused[at]
        out.stand_ins += stand_in[at]
    if not recalls:
        return out
    out.across = (c, others, caller)
    # this session's units ranked above a past entry take the room before it
    out.own = [(out.unit_score[i], tl.units[i].tokens) for i in out.units]
    _recall(out, index, c, hits, others, caller, room, OFFER * max(room, 1), max_items,
            sources)
    _superseded(out, index, c, c.alive() & ~mine, caller, sources)
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
    _superseded(out, index, c, c.alive() & ~c.of_session(s.id), caller, sources)
    return True


def _recall(out: Retrieval, index: RecallIndex, c: Any, hits: Any, others: np.ndarray,
            caller: Caller, room: int, need: float, max_items: int, sources: Sources) -> None:
    """Past entries in rank order, each followed by the statement that replaced a value it
    holds (sent together or not at all) and the turn that completes it (a candidate of its
    own at a share of its score) — until their tokens reach ``need`` (``cut`` then)."""
    offered = 0
    by_id: dict[int, Recalled] = {}  #: an entry is offered once, at its best score
    own, k = out.own, 0  #: this session's ranked units, taken as the walk passes their score

    def offer(e: Entry, sid: str, row: int, score: float, supersedes: int | None = None) -> None:
        nonlocal offered
        was = by_id.get(e.id)
        if was is not None:  # a completing turn that is a hit of its own too
            if score > was.score and was.supersedes is None:
                was.score = score
            return
        item = by_id[e.id] = Recalled(e, sid, row, score, hits, supersedes=supersedes)
        out.recalled.append(item)
        if e.tokens <= room:  # one that can never fit fills nothing
            offered += e.tokens

    #: per session of this request: (the session, its replaced values, its completing
    #: turns) read once, not per row
    reads: dict[str, tuple[Session, dict[int, int], Any]] = {}
    fused, stand_in, remote, eids, sids = hits.fused, hits.stand_in, c.remote, c.eids, c.sids
    row_of, by_sid = c.row_of, index.sessions.by_id
    order = hits.order(others)
    scores = fused[order[:4096]].tolist()  # the walk stops long before, most of the time
    for at, row in enumerate(order):
        if len(out.recalled) >= max_items:
            break
        score = scores[at] if at < len(scores) else float(fused[row])
        while k < len(own) and own[k][0] >= score:
            offered += own[k][1] if own[k][1] <= room else 0
            k += 1
        if offered >= need:
            out.cut = True
            break
        eid, sid = eids[row], sids[row]
        if eid in remote:  # another host's row is checked whole
            got_e = across_entry(index, c, row, caller)
            if got_e is None or got_e[0] is None:
                continue
            e, src = got_e
        else:
            # a row of this daemon passed the scope's mask (``across_mask``, the same rules):
            # its entry is read as it is
            src = by_sid.get(sid)
            mine_e = src.by_id.get(eid) if src is not None else None
            if mine_e is None:
                continue
            e = mine_e
        read = None
        if src is not None:  # (another host's row has no session here, whatever its id)
            read = reads.get(sid)
            if read is None:
                read = reads[sid] = (src, sources.replaced(src),
                                     sources.completing(src, out.topic))
        f = None
        if read is not None:
            # the statement that replaced a value it holds comes with it; when that
            # statement may not be shown here, neither may the value it replaced (a row of
            # this daemon's session: the scope's mask says, as for the hit)
            later = read[1].get(e.id)
            if later is not None:
                lrow = row_of.get(later, -1)
                f = read[0].by_id.get(later) if lrow >= 0 and others[lrow] else None
                if f is None:
                    continue
        offer(e, sid, row, score)
        if stand_in[row]:
            out.recalled_stand_ins += 1
            out.stand_ins += 1
        if f is not None:
            offer(f, sid, lrow, score, supersedes=e.id)
        if read is None or read[2] is None:
            continue
        # the turn that completes it in its session competes at a share of its score, as in
        # this session (select orders recalled entries by score)
        got = read[2](e.id)
        if got is not None:
            crow = row_of.get(got[0], -1)
            if crow >= 0 and others[crow] and (g := read[0].by_id.get(got[0])) is not None:
                offer(g, sid, crow, score * got[1])


def _superseded(out: Retrieval, index: RecallIndex, c: Any, others: np.ndarray,
                caller: Caller, sources: Sources) -> None:
    """Across sessions, a newer statement supersedes an older one — worked out once for the
    request, over the best-ranked past entries offered (``MARK_MAX``) and, for the best
    ``LATER_MAX`` of them, the later entries most alike by BM25 on its words (a correction
    repeats the old value or the subject; ``LATER_ROWS`` rows each). From that one run:

    * a recalled entry whose value a later entry replaced brings that statement (select sends
      the two together or neither);
    * ``out.replaced`` (old entry id -> the entry that replaced it): the builder marks the
      recalled lines sent "replaced later" / "current" from it.

    ``others``: every live row of the user's other sessions, the ones this session may not be
    shown included: a value replaced by a statement it may not see (private, recall off,
    excluded) leaves the window rather than go stale."""
    ranked = sorted((r for r in out.recalled if r.row >= 0), key=lambda r: -r.score)[:MARK_MAX]
    best = [r for r in ranked if not r.supersedes]
    done = {r.supersedes for r in out.recalled if r.supersedes}
    at = np.frombuffer(c.at, dtype=np.float64, count=c.n)
    per_term, per_list = sources.bm25_reads(c)

    def alike(terms: list[str]) -> np.ndarray:
        # ``Bm25.scores`` of them, each term's part computed once for every entry checked
        # (and each list once while the index is the same: the next request asks again)
        key = tuple(terms)
        got = per_list.get(key)
        if got is not None:
            return got
        parts = []
        for t in dict.fromkeys(terms):
            if t not in per_term:
                per_term[t] = c.bm25.term(t)  # (a copy: kept past this request)
            parts.append(per_term[t])
        got = per_list[key] = c.bm25.total(parts)
        return got

    later_of: dict[int, list[tuple[Entry, str, int]]] = {}
    for item in [r for r in best if r.entry.id not in done][:LATER_MAX]:
        e = item.entry
        # its rarest words as indexed (a bounded head: a megabyte entry costs what 4,000
        # characters do)
        common = max(TOPIC_DF * c.bm25.live, LATER_COMMON)
        terms = [t for t in sorted(set(words.terms(c.texts[item.row])), key=c.bm25.df)
                 [:LATER_TERMS] if c.bm25.df(t) <= common]
        if not terms:
            continue
        scores = alike(terms)
        rows = np.flatnonzero((scores > 0) & others & (at > e.created_at))
        if len(rows) > LATER_ROWS:  # the best few, without sorting them all
            rows = rows[np.argpartition(-scores[rows], LATER_ROWS)[:LATER_ROWS]]
        later = [(f, c.sids[row], row) for row in rows.tolist()
                 if (f := index.entry_at(c, row)[0]) is not None]
        if later:
            later_of[e.id] = later
    fed = {r.entry.id: (r.entry, r.session_id) for r in ranked}
    for later in later_of.values():
        for f, sid, _row in later:
            fed.setdefault(f.id, (f, sid))
    out.replaced = sources.superseded(sorted(fed.values(),
                                             key=lambda x: (x[0].created_at, x[0].id)))
    by_item = {r.entry.id: r for r in best}
    hidden: set[int] = set()
    for eid, later in later_of.items():
        later_by_id = {f.id: (f, sid, row) for f, sid, row in later}
        new = replacement(out.replaced, eid, later_by_id)
        if new is None:
            continue
        # (recalled on its own too, maybe: select sends an entry once)
        f, sid, row = later_by_id[new]
        if across_entry(index, c, row, caller) is None:
            hidden.add(eid)
            continue
        item = by_item[eid]
        out.recalled.append(Recalled(f, sid, row, item.score, item.hits, supersedes=eid))
    if hidden:
        out.recalled = [r for r in out.recalled
                        if r.entry.id not in hidden and r.supersedes not in hidden]


def replacement(replaced: dict[int, int], eid: int, among: Any) -> int | None:
    """The entry of ``among`` that replaced entry ``eid``'s value: its replacement, or that
    one's, and so on (a value changed twice)."""
    new, seen = replaced.get(eid), {eid}
    while new is not None and new not in among and new not in seen:
        seen.add(new)
        new = replaced.get(new)
    return new if new is not None and new in among else None
