"""The budget decides: which units and recalled entries a window sends.

In order, each only while it fits (every cost exact, by the daemon's own count):

1. the system prompt and pinned units (they alone over the budget: ``over_budget``);
2. when the whole log fits under the prune threshold, all of it;
3. otherwise the exchange in progress (its question, then its newest steps, up to half), and
   ``[context] recent_share`` of the room for the newest turns (continuity);
4. then the retrieved items best first, from this session and from past ones alike, each unit
   with the statement that superseded a value it holds, and the turn that completes it as a
   candidate of its own (when the turn of the two that asks, asks about the question's
   topic); a retrieved unit too large to keep whole sends its lines that match the question
   (for a question that asks for many things: its fact lines, placed later);
5. what is left goes to the next newest turns — with no question (no ``opts.query``, no user
   message), to the most important units instead (``scoring.totals``: the profile in force,
   seed 001's formula for ``keyword``), within ``[context] target_usage`` of the room;
   importance also breaks ties of the retrieval rank.

Dates: an old unit opens with its date when the unit kept before it is of another day; the
cost of that prefix is counted as the unit is placed (the table holds both costs,
``Costs.plain`` and ``Costs.dated``, and each unit's day), so the plan's total is the
window's total. Salience and recency never push out a retrieved unit; they only order the
fill.

Every cost is data the builder measured before (``Costs``): select calls nothing back.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from memman_daemon.engine.window.candidates import Recalled, SessionCandidates, completing
from memman_daemon.engine.window.retrieve import Retrieval
from memman_daemon.engine.window.summarize import MAX_LINES

LINES_MIN_TOKENS = 150
#: a retrieved unit over this share of the room (and LINES_MIN_TOKENS) sends its matching
#: lines rather than itself: one long tool output must not take the room of many answers
BIG_SHARE = 4
BIG_TOKENS = 300  #: ...and any retrieved unit this large: its matching lines go first
MAX_MISSES = 64  #: turns in a row that do not fit before the last fill stops (bounded work)


@dataclass
class Costs:
    """Exact token costs, as data the builder measures before the selection (row = unit index
    of this session's timeline; select only reads it). A unit's date prefix depends on the unit
    kept before it, so both costs are in the table and select picks as it places the unit."""

    plain: np.ndarray  #: unit -> tokens as sent without a date (int)
    dated: np.ndarray  #: unit -> tokens as sent with its date first (= plain where day < 0)
    day: np.ndarray  #: unit -> its day (days since the epoch, UTC), or -1 when it shows none
    recalled_header: int  #: tokens of the recalled message without lines
    #: a recalled group (session, day) -> tokens of its heading line (with its newline),
    #: paid by the group's first line sent
    headings: dict[tuple[str, str], int] = field(default_factory=dict)
    #: a retrieved unit too large to keep whole -> its lines that match the question (a unit
    #: ranked up to ``lines_rank`` and absent here has none)
    lines: dict[int, UnitLines] = field(default_factory=dict)
    #: the retrieval ranks (from 1) ``lines`` covers; select asks for more past it
    #: (``Selection.wants_lines``)
    lines_rank: int = 0


@dataclass(frozen=True, slots=True)
class Line:
    """A line of a large unit that shares a word with the question, with its exact measures.
    ``lead``: its first characters, which the line before takes into its last piece when that
    piece is punctuation that took the newline in (``tail``; o200k: a run of slashes);
    ``rest_*``: the line without them."""

    pos: int  #: its position in the unit's text: lines are sent in this order
    text: str
    alone: int  #: tokens of the line (the last line of the message)
    joined: int  #: tokens of the line with the newline after it
    tail: str = ""  #: its last piece with the newline, when a following ``lead`` joins it
    lead: str = ""
    rest_alone: int = 0
    rest_joined: int = 0


@dataclass(frozen=True)
class UnitLines:
    """A unit too large to keep whole, as its lines that match the question: the candidates
    best first (``summarize.line_candidates``); select takes them greedily into the room
    (each costs its tokens and a newline, ``MAX_LINES`` at most) and sends them in their
    order, the message's tokens added up from its lines' measures (``lines_tokens``)."""

    base: int  #: tokens of the message with no line: its frame and its heading with a newline
    tail: str  #: the heading's last piece with the newline (a first line's ``lead`` joins it)
    picks: list[Line]
    #: (a tail, a lead) -> tokens of the piece they make together, over the tail's
    joins: dict[tuple[str, str], int] = field(default_factory=dict)


def lines_tokens(row: UnitLines, chosen: list[Line]) -> int:
    """The lines message's exact tokens: the frame and heading, each line with its newline,
    the last without; where a line's ``lead`` joins the piece before, that piece's measure."""
    total, tail = row.base, row.tail
    for k, ln in enumerate(chosen):
        last = k == len(chosen) - 1
        if ln.lead and tail:
            total += row.joins[(tail, ln.lead)] + (ln.rest_alone if last else ln.rest_joined)
        else:
            total += ln.alone if last else ln.joined
        tail = ln.tail
    return total


class _Wanted(Exception):
    """select reached a unit whose lines the table does not hold."""

    def __init__(self, unit: int) -> None:
        self.unit = unit


@dataclass
class Selection:
    units: dict[int, str] = field(default_factory=dict)  #: unit -> why it is sent
    lines: dict[int, tuple[list[str], int]] = field(default_factory=dict)  #: unit -> lines sent
    recalled: list[Recalled] = field(default_factory=list)  #: in the order chosen
    used: int = 0
    over_budget: bool = False
    pruned: bool = False
    dated: set[int] = field(default_factory=set)  #: units sent with their date first
    #: the fact lines of a broad question: (message text, entry ids quoted, message tokens)
    facts: tuple[str, list[int], int] | None = None
    #: set when select reached a unit past ``Costs.lines_rank``: no selection was made; the
    #: builder adds that unit's lines to the table and selects again
    wants_lines: int | None = None


class _Fill:
    """The running selection: kept units in log order, their date prefixes, the tokens."""

    def __init__(self, room: int, costs: Costs) -> None:
        self.room, self.costs = room, costs
        self.sel = Selection()
        self.order: list[int] = []
        self.recalled_ids: set[int] = set()
        self.groups: set[tuple[str, str]] = set()  #: recalled groups whose heading is sent

    def delta(self, i: int) -> tuple[int, bool, int | None]:
        """Tokens unit ``i`` adds (with the date prefixes it adds or takes from its next
        kept neighbour), whether it is dated, and the neighbour that loses its date."""
        c = self.costs
        pos = bisect_left(self.order, i)
        prev = c.day[self.order[pos - 1]] if pos > 0 else -1
        d = c.day[i]
        dated = d >= 0 and d != prev
        cost = int(c.dated[i] if dated else c.plain[i])
        loses = None
        if pos < len(self.order):
            nxt = self.order[pos]
            if nxt in self.sel.dated and c.day[nxt] == d:
                loses = nxt
                cost -= int(c.dated[nxt] - c.plain[nxt])
        return cost, dated, loses

    def add(self, i: int, why: str, limit: int | None = None) -> bool:
        if i in self.sel.units:
            return True
        cost, dated, loses = self.delta(i)
        if self.sel.used + cost > (self.room if limit is None else limit):
            return False
        self.sel.used += cost
        self.sel.units[i] = why
        self.order.insert(bisect_left(self.order, i), i)
        if dated:
            self.sel.dated.add(i)
        if loses is not None:
            self.sel.dated.discard(loses)
        return True

    def add_together(self, items: list[tuple[int, str]]) -> bool:
        """Units sent together or not at all: a value and the statement that replaced it
        (a window never shows only the corrected-away value)."""
        saved = (self.sel.used, dict(self.sel.units), list(self.order), set(self.sel.dated))
        for i, why in items:
            if not self.add(i, why):
                self.sel.used, self.sel.units, self.order, self.sel.dated = saved
                return False
        return True

    def add_recalled_together(self, items: list[Recalled]) -> bool:
        if len(items) == 1:
            return self.add_recalled(items[0])
        # a value and its replacement: undone by what was appended (no copy of the lists)
        n, used, groups = len(self.sel.recalled), self.sel.used, set(self.groups)
        for r in items:
            if not self.add_recalled(r):
                for x in self.sel.recalled[n:]:
                    self.recalled_ids.discard(x.entry.id)
                del self.sel.recalled[n:]
                self.sel.used, self.groups = used, groups
                return False
        return True

    def add_recalled(self, r: Recalled) -> bool:
        if r.entry.id in self.recalled_ids:
            return True
        cost = r.tokens + (0 if self.sel.recalled else self.costs.recalled_header)
        if r.group not in self.groups:
            cost += self.costs.headings.get(r.group, 0)
        if self.sel.used + cost > self.room:
            return False
        self.sel.used += cost
        self.sel.recalled.append(r)
        self.recalled_ids.add(r.entry.id)
        self.groups.add(r.group)
        return True


def select(c: SessionCandidates, r: Retrieval, room: int, costs: Costs, cfg: Any,
           reserve: int = 0, importance: np.ndarray | None = None) -> Selection:
    """``reserve``: tokens kept back from the ranked fill for the fact lines of a question that
    asks for many things (``summarize.fact_lines``, placed by the builder). ``importance``:
    each unit's importance score (``scoring.totals``, the profile in force): it breaks ties of
    the retrieval rank and, for a window with no question, orders the fill (up to
    ``target_usage`` of the room) instead of newest first. Reads only data: ``costs`` is the
    table of every cost; a unit past the lines the table holds ends it with
    ``wants_lines`` set (the builder fills more and selects again)."""
    try:
        return _select(c, r, room, costs, cfg, reserve, importance)
    except _Wanted as w:
        return Selection(wants_lines=w.unit)


def _select(c: SessionCandidates, r: Retrieval, room: int, costs: Costs, cfg: Any,
            reserve: int, importance: np.ndarray | None) -> Selection:
    f = _Fill(room, costs)
    sel = f.sel
    #: a recalled entry -> the recalled statement that replaced a value it holds
    replaced_by = {item.supersedes: item for item in r.recalled if item.supersedes}
    for i in c.mandatory:
        f.add(i, "system prompt" if c.units[i].mandatory == "system" else "pinned",
              limit=1 << 62)
    if sel.used > room:
        sel.over_budget = True
        return sel
    if c.history_tokens <= cfg.prune_threshold * room and _fits_all(c, f):
        for i in np.flatnonzero(c.valid).tolist():
            f.add(i, "the whole log fits", limit=1 << 62)
        seen = set(_texts(c, sel.units))
        for item in sorted(r.recalled, key=lambda x: -x.score):  # best first, once each
            if item.entry.content not in seen and f.add_recalled_together(
                    _with_later(item, replaced_by)):
                seen.add(item.entry.content)
        return sel
    sel.pruned = True
    # the exchange in progress: its question, then its newest steps within half the room
    half = min(room, sel.used + room // 2)
    for k, i in enumerate(c.current):
        f.add(i, "current exchange", limit=None if k == 0 else half)
    # a question asking for many things keeps room for their fact lines
    f.room = max(sel.used, room - reserve)
    room = f.room
    # continuity: the newest turns, within their share
    recent = min(room, sel.used + int(cfg.recent_share * room))
    for i in c.newest():
        if sel.used >= recent or not f.add(i, "newest turns", limit=recent):
            break
    # what the question needs, best first, from this session and past ones alike; a unit
    # brings the statement that superseded a value it holds at once, and the turn that
    # completes it as a candidate of its own, at a share of its score (candidates.completing)
    heap: list[tuple[float, int, int, Any]] = []
    ranked = r.units
    #: this session's ranked units in the heap's order, taken from the front as the fill
    #: reaches them (``lazy``): only the recalled entries and queued neighbours are in the
    #: heap (thousands of units at 10,000 entries, most never reached)
    lazy = importance is not None and len(ranked) > 1
    if lazy:  # ties of the rank: the more important first
        assert importance is not None
        idx = np.asarray(ranked)  # (thousands of units at 60,000 entries: no key per unit)
        score = np.fromiter((r.unit_score[i] for i in ranked), np.float64, len(ranked))
        ranked = idx[np.lexsort((-importance[idx], -score))].tolist()
    else:
        for k, i in enumerate(ranked):
            heap.append((-r.unit_score[i], k, 0, i))
    for k, item in enumerate(r.recalled):
        heap.append((-item.score, k, 1, item))
    heapq.heapify(heap)
    seen = set(_texts(c, sel.units))
    because: dict[int, str] = {}  #: neighbours queued: why they would be sent
    tick = len(ranked) + len(r.recalled)
    front = 0 if lazy else len(ranked)  #: the next of ``ranked`` not taken (``lazy``)
    #: the front of ``ranked`` in the heap's shape (-score, order, kind, item): the item is a
    #: unit here, a unit or (kind 1) a recalled entry in the heap
    head: tuple[float, int, int, Any] | None = \
        (-r.unit_score[ranked[0]], 0, 0, ranked[0]) if lazy else None
    while (heap or head is not None) and room - sel.used >= 8:
        if head is not None and (not heap or head < heap[0]):
            neg, _k, kind, x = head
            front += 1
            head = (-r.unit_score[ranked[front]], front, 0, ranked[front]) \
                if front < len(ranked) else None
        else:
            neg, _k, kind, x = heapq.heappop(heap)
        if kind == 1:
            if x.entry.content not in seen and f.add_recalled_together(
                    _with_later(x, replaced_by)):
                seen.add(x.entry.content)
            continue
        why = because.get(x)
        text = _text(c, x)
        if not c.valid[x] or x in sel.units or (text and text in seen):
            continue  # the same words again add nothing
        rank = r.unit_rank.get(x)
        later_units = _replacing(c, sel, x)
        if later_units:  # whole, with what replaced its value, or not at all
            if f.add_together([(x, why or f"retrieved #{rank}"),
                               *((j, f"supersedes a value of #{rank}") for j in later_units)]):
                seen.update([text, *(_text(c, j) for j in later_units)])
            continue
        big = c.units[x].tokens >= min(max(LINES_MIN_TOKENS, room // BIG_SHARE), BIG_TOKENS)
        if why is None and big and reserve:
            continue  # a broad question: a large entry's facts come as fact lines instead
        if why is None and big and _lines(f, r, x):
            continue  # a large entry: its lines that match the question go first
        if not f.add(x, why or f"retrieved #{rank}"):
            if why is None and c.units[x].tokens >= LINES_MIN_TOKENS:
                _lines(f, r, x)
            continue
        seen.add(text)
        if cfg.neighbours and why is None:
            got = completing(c.units, x, r.topic)
            if got is not None and c.valid[got[0]] and got[0] not in sel.units:
                j, weight = got
                tick += 1
                because[j] = f"completes #{rank}"
                heapq.heappush(heap, (neg * weight, tick, 0, j))
    # what is left: the next newest turns (a run of turns too large for the rest ends it);
    # with no question, nothing ranks them but their importance: the most important first,
    # within ``target_usage`` of the room (the keyword-scoring design's headroom)
    misses = 0
    why = "newest turns (room left)"
    order: Any = c.newest()
    if importance is not None and not r.query:
        order = _by_importance(c, importance)
        room = f.room = max(sel.used, int(cfg.target_usage * f.room))
        why = "importance (no question)"
    for i in order:
        if room - sel.used < 8 or misses >= MAX_MISSES:
            break
        if i in sel.units:
            continue
        later = [(j, f"supersedes a value of a turn kept for its {why.split()[0]}")
                 for j in _replacing(c, sel, i)]
        added = f.add_together([(i, why), *later]) if later else f.add(i, why)
        misses = 0 if added else misses + 1
    if not sel.units and not sel.recalled:
        _least_valid(c, f)
    return sel


def _least_valid(c: SessionCandidates, f: _Fill) -> None:
    """Nothing fits a tiny budget: the least list a chat API accepts is still sent — the
    question of the exchange in progress, else the newest turn — marked ``over_budget``
    (an empty list is refused by the API; the caller sees the budget was passed)."""
    first = c.current[0] if c.current else next(iter(c.newest()), None)
    if first is not None:
        f.add(first, "the least a chat API accepts (over the budget)", limit=1 << 62)
        f.sel.over_budget = True


def _by_importance(c: SessionCandidates, importance: np.ndarray) -> list[int]:
    """The sendable units not taken yet, most important first (ties: the newer first)."""
    rest = np.fromiter(c.newest(), dtype=np.int64)
    if not len(rest):
        return []
    return rest[np.argsort(-importance[rest], kind="stable")].tolist()


def _replacing(c: SessionCandidates, sel: Selection, i: int) -> list[int]:
    """The sendable units, not sent yet, whose statements replaced a value unit ``i`` holds."""
    return [j for j in c.companions.get(i, ()) if c.valid[j] and j not in sel.units]


def _with_later(item: Recalled, replaced_by: dict[int, Recalled]) -> list[Recalled]:
    """A recalled entry and the statement that replaced a value it holds (sent together)."""
    later = replaced_by.get(item.entry.id)
    return [item] if later is None else [item, later]


def _fits_all(c: SessionCandidates, f: _Fill) -> bool:
    """The whole log fits, dates included (an upper bound: every old unit dated)."""
    costs = f.costs
    total = int(np.where(costs.day >= 0, costs.dated, costs.plain)[c.valid].sum())
    return total <= f.room


def _text(c: SessionCandidates, i: int) -> str:
    u = c.units[i]
    return u.first.content or "" if len(u.items) == 1 else ""


def _texts(c: SessionCandidates, units: Any) -> list[str]:
    return [t for t in (_text(c, i) for i in units) if t]


def _lines(f: _Fill, r: Retrieval, i: int) -> bool:
    """A retrieved unit too large to keep whole: its lines that match the question, best
    first while they fit (each with a newline), sent in their order."""
    if i in f.sel.lines:
        return True
    row = f.costs.lines.get(i)
    if row is None:
        if r.unit_rank.get(i, 0) > f.costs.lines_rank:
            raise _Wanted(i)
        return False
    room = f.room - f.sel.used - row.base
    chosen: list[Line] = []
    used = 0
    for ln in row.picks:
        n = ln.alone + 1
        if used + n <= room:
            chosen.append(ln)
            used += n
        if len(chosen) >= MAX_LINES:
            break
    if not chosen:
        return False
    chosen.sort(key=lambda ln: ln.pos)
    tokens = lines_tokens(row, chosen)
    if f.sel.used + tokens <= f.room:
        f.sel.lines[i] = ([ln.text for ln in chosen], tokens)
        f.sel.used += tokens
        return True
    return False
