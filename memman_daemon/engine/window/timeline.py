"""The session's timeline: every entry of the lossless log (compressed ones too) grouped into
*units* — one entry, or an assistant tool call with all its results (kept or dropped together,
so a window is always valid for the chat API) — each analysed once: fact candidates with their
salience (``facts``), words (``relevance``), superseded values (``supersede``). Compression
chooses what to fold from it; the window takes its candidates from it.

``Timelines`` keeps one per session, extended as entries arrive (O(new entries)), rebuilt from
the cached analysis after a pin or a config change.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from bisect import insort
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from memman_daemon.background import SLICE_S
from memman_daemon.engine import extractive, facts, scoring
from memman_daemon.engine.relevance import DocFreq
from memman_daemon.engine.supersede import Supersession
from memman_daemon.model import Entry, Session

if TYPE_CHECKING:
    from memman.config import Config
    from memman_daemon.background import BackgroundShare

PENDING = "tool call whose results are not (all) in the log yet"
INLINE_ENTRIES = 2000  #: a request analyses this many new entries at once, more in slices
ANALYSE_MAX_CHARS = facts.ANALYSE_MAX_CHARS  #: characters of one entry analysed


@dataclass
class Unit:
    """Entries that enter or leave the context together, with their cached score inputs."""

    index: int  #: position in the timeline
    items: list[Entry]
    tokens: int
    mandatory: str = ""  #: "system" / "pinned" when it always stays
    invalid: str = ""  #: why it can never be sent (broken tool pairing)
    pending: set[str] = field(default_factory=set)  #: tool_call ids still without a result
    salience: float = 0.0  #: best candidate's salience
    content: float = 0.0  #: the keyword-scoring design keyword part (best item)
    keyword_total: float = 0.0  #: the keyword-scoring design's role/content total (best item)
    const: float = 0.0  #: the request-independent part of the total
    val_n: int = 0  #: candidates that carry a value
    sup_n: int = 0  #: ...of which a later entry superseded

    @property
    def first(self) -> Entry:
        return self.items[0]


@dataclass
class Analysis:
    """What each entry of one session's log carries, computed once per entry (entries never
    change): candidates, words, superseded values, summary picks, score inputs."""

    session: int  #: id() of the session object analysed
    done: int = 0  #: entries analysed: a prefix of the log
    cands: dict[int, list[facts.Candidate]] = field(default_factory=dict)
    index: DocFreq = field(default_factory=DocFreq)  #: the idf of words over the session
    sup: Supersession = field(default_factory=Supersession)
    picks: list[tuple[float, int, int]] = field(default_factory=list)  #: (-score, id, k), sorted
    pick: dict[tuple[int, int], extractive.Pick] = field(default_factory=dict)
    stat: dict[int, tuple[float, float, float, int]] = field(default_factory=dict)

    def feed(self, entries: list[Entry], sc: Any) -> None:
        for e in entries:
            # bounded work: a huge entry is analysed by its head (it is stored and sent whole)
            text = scoring.entry_text(e)[:ANALYSE_MAX_CHARS]
            cands = facts.analyse(e.content[:ANALYSE_MAX_CHARS], structured=e.role == "tool")
            for c in e.tool_calls or []:  # a call's arguments: the command, rarely the fact
                fn = c.get("function", {})
                for cand in facts.analyse(f"{fn.get('name', '')}({fn.get('arguments', '')})",
                                          structured=True):
                    cand.salience *= 0.5
                    cands.append(cand)
            self.cands[e.id] = cands
            # its words as its candidates hold them (not the text tokenized a second time)
            self.index.add(t for c in cands for t in c.terms)
            self.sup.feed(e.id, cands, f"tool:{e.name}" if e.role == "tool" else "message")
            for p in extractive.picks_of(e, cands):
                self.pick[p.order] = p
                insort(self.picks, (-p.score, p.order[0], p.order[1]))
            tool = sc.typed_tools_count_as_marker and e.type in ("tool_call", "tool_result")
            content = scoring.content_score(text, sc, tool=tool)
            self.stat[e.id] = (
                max((c.salience for c in cands), default=0.0),
                content,
                scoring.static_score(e, sc, content=content),
                sum(1 for c in cands if c.salience >= extractive.MIN_SALIENCE))
        self.done += len(entries)


class UnitArrays:
    """Per-unit numbers as numpy columns (row = unit index), kept in step with the units, so a
    request scores 10k units and finds its gaps without a Python loop over all of them."""

    FIELDS = ("tokens", "items", "const", "keyword_total", "supf", "invalid", "mandatory")

    def __init__(self) -> None:
        self.n = 0
        self.cols = {f: np.zeros(64) for f in self.FIELDS}

    def put(self, u: Unit) -> None:
        i = u.index
        cap = len(self.cols["tokens"])
        if i >= cap:
            for f, col in self.cols.items():
                grown = np.zeros(max(cap * 2, i + 64))
                grown[:cap] = col
                self.cols[f] = grown
        c = self.cols
        c["tokens"][i] = u.tokens
        c["items"][i] = len(u.items)
        c["const"][i] = u.const
        c["keyword_total"][i] = u.keyword_total
        c["supf"][i] = u.sup_n / u.val_n if u.val_n else 0.0
        c["invalid"][i] = bool(u.invalid)
        c["mandatory"][i] = bool(u.mandatory)
        if i >= self.n:
            self.n = i + 1

    def __getitem__(self, f: str) -> Any:
        return self.cols[f][: self.n]


@dataclass
class Timeline:
    key: tuple
    an: Analysis
    arr: UnitArrays = field(default_factory=UnitArrays)
    units: list[Unit] = field(default_factory=list)
    entry_unit: dict[int, Unit] = field(default_factory=dict)
    open_calls: dict[str, Unit] = field(default_factory=dict)
    consumed: int = 0  #: entries of the log already turned into units
    system_id: int | None = None  #: the session's leading system prompt
    #: units before this one are folded or never folded (``compression.select``'s start)
    folded: int = 0

    @property
    def cands(self) -> dict[int, list[facts.Candidate]]:
        return self.an.cands

    @property
    def sup(self) -> Supersession:
        return self.an.sup


def _only_appended(old: tuple, new: tuple) -> bool:
    """Keys (session object, entries, version, config): the log only grew."""
    return old[0] == new[0] and old[2:] == new[2:] and new[1] > old[1]


def _restat(u: Unit, an: Analysis, sc: Any) -> None:
    """A unit's cached score inputs, from its items' analysis."""
    sal = content = keyword_total = 0.0
    vals = sups = 0
    by = an.sup.by
    for e in u.items:
        st = an.stat[e.id]
        sal, content = max(sal, st[0]), max(content, st[1])
        keyword_total = max(keyword_total, st[2])
        vals += st[3]
        if by:
            sups += sum(1 for k, c in enumerate(an.cands[e.id])
                        if (e.id, k) in by and c.salience >= extractive.MIN_SALIENCE)
    u.salience, u.content, u.keyword_total = sal, content, keyword_total
    u.val_n, u.sup_n = vals, sups
    u.const = scoring.unit_constant(u.first.role, content, sal, sc)


def extend(tl: Timeline, entries: list[Entry], keep_system: bool, sc: Any) -> None:
    """Turn analysed log entries into units, appending to ``tl``."""
    units, entry_unit, open_calls, an = tl.units, tl.entry_unit, tl.open_calls, tl.an
    for e in entries:
        if tl.system_id is None and not units and e.role == "system":
            tl.system_id = e.id
        if e.role == "tool":
            owner = open_calls.pop(e.tool_call_id or "", None)
            if owner is not None:
                owner.items.append(e)
                owner.tokens += e.tokens
                owner.pending.discard(e.tool_call_id or "")
                if not owner.pending and owner.invalid == PENDING:
                    owner.invalid = ""  # its last result arrived
                if e.pinned:
                    owner.mandatory = owner.mandatory or "pinned"
                entry_unit[e.id] = owner
                _restat(owner, an, sc)
                continue
            u = Unit(len(units), [e], e.tokens,
                     invalid="tool result without its tool call in the log")
        else:
            u = Unit(len(units), [e], e.tokens)
            if e.tool_calls:
                u.pending = {c["id"] for c in e.tool_calls}
                for cid in u.pending:
                    open_calls[cid] = u
        if e.id == tl.system_id:
            u.mandatory = "system"
        elif e.pinned:
            u.mandatory = "pinned"
        elif keep_system and e.role == "system" and e.type == "message":
            u.mandatory = "system"
        _restat(u, an, sc)
        units.append(u)
        entry_unit[e.id] = u
    tl.consumed += len(entries)
    touched = {e.id: entry_unit[e.id] for e in entries if e.id in entry_unit}
    for u in open_calls.values():
        if u.pending and not u.invalid:
            u.invalid = PENDING
        touched[u.first.id] = u
    for u in touched.values():
        tl.arr.put(u)


def _apply_superseded(tl: Timeline) -> None:
    """Units holding values that later entries superseded recount them (a score input)."""
    new, tl.an.sup.new = tl.an.sup.new, []
    by, cands = tl.an.sup.by, tl.an.cands
    for u in {id(u): u for u in (tl.entry_unit.get(eid) for eid, _ in new) if u}.values():
        u.sup_n = sum(1 for e in u.items for k, c in enumerate(cands[e.id])
                      if (e.id, k) in by and c.salience >= extractive.MIN_SALIENCE)
        tl.arr.put(u)




class Timelines:
    """One timeline per session, kept current."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self._timelines: dict[str, Timeline] = {}
        self.versions: dict[str, int] = {}  #: bumped by the engine on pin/compress/clear/import

    def invalidate(self, session_id: str) -> None:
        self.versions[session_id] = self.versions.get(session_id, 0) + 1

    def forget(self, session_id: str) -> None:
        self._timelines.pop(session_id, None)
        self.invalidate(session_id)

    def timeline(self, s: Session) -> Timeline:
        """The session's units, extended as entries arrive (O(new entries)); rebuilt from the
        cached analysis after a pin or a config change, from scratch for a new session object."""
        cfg = self.config
        key = self._key(s, len(s.entries))
        tl = self._timelines.get(s.id)
        if tl is not None and tl.key == key:
            return tl
        an = tl.an if tl is not None and tl.an.session == id(s) else Analysis(id(s))
        if an.done < len(s.entries):
            an.feed(s.entries[an.done:], cfg.scoring)
        keep_system = cfg.context.keep_system_prompts
        if tl is not None and tl.an is an and _only_appended(tl.key, key):
            extend(tl, s.entries[tl.consumed:], keep_system, cfg.scoring)
            tl.key = key
        else:
            an.sup.new = []
            tl = Timeline(key, an)
            extend(tl, s.entries, keep_system, cfg.scoring)
            self._timelines[s.id] = tl
        _apply_superseded(tl)
        return tl

    def _key(self, s: Session, entries: int) -> tuple:
        """A timeline's key: (session object, entries in units, version, scoring config)."""
        return (id(s), entries, self.versions.get(s.id, 0), id(self.config.scoring))

    async def prepare(self, s: Session) -> None:
        """Before a request: a backlog of more than ``INLINE_ENTRIES`` entries not analysed
        yet (the first context after a burst of adds) is analysed in slices that yield to
        other clients — this request waits for it, the others do not."""
        tl = self._timelines.get(s.id)
        done = tl.an.done if tl is not None and tl.an.session == id(s) else 0
        if len(s.entries) - done > INLINE_ENTRIES:
            await self.catch_up(s, None)

    async def catch_up(self, s: Session, background: BackgroundShare | None) -> None:
        """Analyse the entries not analysed yet and group them into units, a few at a time
        within the background share (~50-100 µs an entry: a burst of adds is served first,
        this follows), so that the next ``timeline`` has nothing left to do. Returns once
        every entry is in; while adds outrun the share, it keeps following them. Without a
        share (a request waiting for it): slices of ``SLICE_S``, yielding between them."""
        while True:
            if background is None:
                await asyncio.sleep(0)
            async with background.turn() if background is not None else _no_turn():
                sc, keep_system = self.config.scoring, self.config.context.keep_system_prompts
                tl = self._timelines.get(s.id)
                if tl is None or tl.an.session != id(s):
                    # an empty timeline of this session, extended below
                    tl = self._timelines[s.id] = Timeline(self._key(s, 0), Analysis(id(s)))
                an = tl.an
                t0 = time.perf_counter()
                while an.done < len(s.entries) and time.perf_counter() - t0 < SLICE_S:
                    an.feed(s.entries[an.done:an.done + 8], sc)
                # the units too, unless a pin or a config change made them stale (then the
                # next ``timeline`` rebuilds them from this analysis)
                fresh = tl.key == self._key(s, tl.consumed)
                if fresh and tl.consumed < an.done:
                    extend(tl, s.entries[tl.consumed:an.done], keep_system, sc)
                    tl.key = self._key(s, tl.consumed)
                    _apply_superseded(tl)
                if an.done >= len(s.entries) and (tl.consumed >= len(s.entries) or not fresh):
                    return



@contextlib.asynccontextmanager
async def _no_turn() -> AsyncIterator[None]:
    yield
