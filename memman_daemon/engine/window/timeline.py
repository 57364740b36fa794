"""The session's timeline: every entry of the lossless log (compressed ones too) grouped into
*units* — one entry, or an assistant tool call with all its results (kept or dropped together,
so a window is always valid for the chat API) — each analysed once: fact candidates with their
salience and words (``facts``), superseded values (``supersede``). Compression
chooses what to fold from it; the window takes its candidates from it.

``Timelines`` keeps one per session. Two things follow the log, each a prefix of it: the units
(a few µs an entry: every read has them all) and the analysis (~50-150 µs an entry). The
analysis is done by a background follower as entries arrive (``appended``: in slices within the
background share, so a burst of adds is served first), and by a read only up to a bound
(``INLINE_ENTRIES`` on the event loop at once, ``WAIT_ENTRIES`` in slices that yield): after a
burst of adds or a restart a read does not wait for the analysis of the whole log. It gets every
unit, the newest entries' own analysis (``NEWEST_OWN``: their facts and salience) and the rest
as far as the follower has come; a unit not analysed yet scores by its role and content words
only, and supersession reaches it when the follower does. Rebuilt from the cached analysis
after a pin or a config change.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from memman_daemon.background import SLICE_S
from memman_daemon.changes import Changes, Owner
from memman_daemon.component import stop_task
from memman_daemon.engine import extractive, facts, scoring
from memman_daemon.engine.supersede import Supersession
from memman_daemon.model import Entry, Session
from memman_daemon.scope import session_owner

if TYPE_CHECKING:
    from memman.config import Config
    from memman_daemon.background import BackgroundShare

log = logging.getLogger(__name__)

PENDING = "tool call whose results are not (all) in the log yet"
#: a backlog a read analyses on the event loop at once (~50-150 µs an entry); a larger one in
#: slices, or by the follower
INLINE_ENTRIES = 256
#: entries a read turns into units on the event loop at once (a few µs each); more in slices
UNITS_INLINE = 5000
#: a request waits (in slices that yield) for the analysis of a backlog up to this many entries;
#: a larger one (a burst of adds, a restart) is the background follower's, and the window uses
#: what is analysed
WAIT_ENTRIES = 4000
#: ...then the request analyses the newest entries on their own (facts, salience: what the
#: newest turns of a window are scored by), this many at most
NEWEST_OWN = 1000
ANALYSE_MAX_CHARS = facts.ANALYSE_MAX_CHARS  #: characters of one entry analysed
#: an entry whose text opens with its own date ("[Tue 5 Mar 2024 18:41] ...") needs no prefix
#: (this session's units) and no date in its heading (recalled lines)
STATES_ITS_DATE = re.compile(
    r"^\s*(?:\[[^\]]{0,40}\b(?:19|20)\d\d\b[^\]]{0,20}\]|(?:19|20)\d\d-\d\d-\d\d)")


@dataclass(slots=True)
class Unit:
    """Entries that enter or leave the context together, with their cached score inputs."""

    index: int  #: position in the timeline
    items: list[Entry]
    tokens: int
    mandatory: str = ""  #: "system" / "pinned" when it always stays
    invalid: str = ""  #: why it can never be sent (broken tool pairing)
    #: tool_call ids still without a result (a unit without tool calls shares the empty one)
    pending: set[str] | frozenset[str] = frozenset()
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
    change). Two parts: an entry's own (``own``: candidates, salience, score inputs — pure, in
    any order) and what is fed in log order (``feed``: superseded values, summary picks), of
    which ``done`` entries are in."""

    session: int  #: id() of the session object analysed
    done: int = 0  #: entries fed in log order: a prefix of the log
    cands: dict[int, list[facts.Candidate]] = field(default_factory=dict)
    sup: Supersession = field(default_factory=Supersession)
    pick: dict[tuple[int, int], extractive.Pick] = field(default_factory=dict)
    stat: dict[int, tuple[float, float, float, int]] = field(default_factory=dict)
    _picks: list[tuple[float, int, int]] = field(default_factory=list)
    _sorted: bool = True

    @property
    def picks(self) -> list[tuple[float, int, int]]:
        """(-score, entry id, k) of every fed entry's picks, best first (sorted when read: a
        sorted insert per pick was O(picks) each)."""
        if not self._sorted:
            self._picks.sort()
            self._sorted = True
        return self._picks

    def own(self, e: Entry, sc: Any) -> list[facts.Candidate]:
        """``e``'s candidates and score inputs, computed once."""
        got = self.cands.get(e.id)
        if got is not None:
            return got
        # bounded work: a huge entry is analysed by its head (it is stored and sent whole)
        cands = facts.analyse(e.content[:ANALYSE_MAX_CHARS], structured=e.role == "tool")
        for c in e.tool_calls or []:  # a call's arguments: the command, rarely the fact
            fn = c.get("function", {})
            for cand in facts.analyse(f"{fn.get('name', '')}({fn.get('arguments', '')})",
                                      structured=True):
                cand.salience *= 0.5
                cands.append(cand)
        self.cands[e.id] = cands
        content, static = _content(e, sc)
        self.stat[e.id] = (max((c.salience for c in cands), default=0.0), content, static,
                           sum(1 for c in cands if c.salience >= extractive.MIN_SALIENCE))
        return cands

    def feed(self, entries: list[Entry], sc: Any) -> None:
        """The next entries of the log, in order."""
        for e in entries:
            cands = self.own(e, sc)
            self.sup.feed(e.id, cands, f"tool:{e.name}" if e.role == "tool" else "message")
            for p in extractive.picks_of(e, cands):
                self.pick[p.order] = p
                self._picks.append((-p.score, p.order[0], p.order[1]))
                self._sorted = False
        self.done += len(entries)

    def stat_of(self, e: Entry, sc: Any) -> tuple[float, float, float, int]:
        """``e``'s score inputs; before its analysis, those of its role and content words
        (no salience yet)."""
        got = self.stat.get(e.id)
        if got is not None:
            return got
        content, static = _content(e, sc)
        return 0.0, content, static, 0


def _content(e: Entry, sc: Any) -> tuple[float, float]:
    """(content score, static score) of an entry: keyword rules over a bounded head."""
    text = scoring.entry_text(e)[:ANALYSE_MAX_CHARS]
    tool = sc.typed_tools_count_as_marker and e.type in ("tool_call", "tool_result")
    content = scoring.content_score(text, sc, tool=tool)
    return content, scoring.static_score(e, sc, content=content)


def states_its_date(text: str | None) -> bool:
    """``STATES_ITS_DATE`` of a text; most texts are told by their first character (a
    recalled line is offered again by every request that asks about it)."""
    if not text or (text[0] not in "[12" and not text[0].isspace()):
        return False
    return STATES_ITS_DATE.match(text[:64]) is not None


class UnitArrays:
    """Per-unit numbers as numpy columns (row = unit index), kept in step with the units, so a
    request scores 10k units, finds its gaps and costs its dates without a Python loop over all
    of them. ``first_at``: the first entry's time (its date, when one is shown);
    ``states_date``: its text opens with its own date (no prefix); ``joins``: its text opens
    with a character a date prefix's last piece takes in (a newline, a slash), so the dated
    cost is measured, not added."""

    FIELDS = ("tokens", "items", "const", "keyword_total", "supf", "invalid", "mandatory",
              "first_at", "states_date", "joins")

    def __init__(self) -> None:
        self.n = 0
        self.cols = {f: np.zeros(64) for f in self.FIELDS}

    def put(self, u: Unit) -> None:
        self.put_many([u])

    def put_many(self, units: list[Unit]) -> None:
        """The units' rows, one column at a time (a start puts 60,000 units: ten numpy item
        writes a unit cost more than building the units)."""
        if not units:
            return
        top = max(u.index for u in units)
        cap = len(self.cols["tokens"])
        if top >= cap:
            for f, col in self.cols.items():
                grown = np.zeros(max(cap * 2, top + 64))
                grown[:cap] = col
                self.cols[f] = grown
        c = self.cols
        at = [u.index for u in units]
        firsts = [u.items[0].content or "" for u in units]
        c["tokens"][at] = [u.tokens for u in units]
        c["items"][at] = [len(u.items) for u in units]
        c["const"][at] = [u.const for u in units]
        c["keyword_total"][at] = [u.keyword_total for u in units]
        c["supf"][at] = [u.sup_n / u.val_n if u.val_n else 0.0 for u in units]
        c["invalid"][at] = [bool(u.invalid) for u in units]
        c["mandatory"][at] = [bool(u.mandatory) for u in units]
        c["first_at"][at] = [u.items[0].created_at for u in units]
        c["states_date"][at] = [states_its_date(f) for f in firsts]
        c["joins"][at] = [f[:1] in ("\r", "\n", "/") for f in firsts]
        if top >= self.n:
            self.n = top + 1

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

    def behind(self, entries: int) -> bool:
        """Entries of a log of ``entries`` not in units or not analysed yet."""
        return self.consumed < entries or self.an.done < entries


def _restat(u: Unit, an: Analysis, sc: Any) -> None:
    """A unit's cached score inputs, from its items' analysis."""
    sal = content = keyword_total = 0.0
    vals = sups = 0
    by = an.sup.by
    for e in u.items:
        st = an.stat_of(e, sc)
        sal, content = max(sal, st[0]), max(content, st[1])
        keyword_total = max(keyword_total, st[2])
        vals += st[3]
        if by and e.id in an.cands:
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
                owner.pending.discard(e.tool_call_id or "")  # type: ignore[union-attr]
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
    tl.arr.put_many(list(touched.values()))


def _restat_entries(tl: Timeline, entries: list[Entry], sc: Any) -> None:
    """The units of newly analysed entries take their analysis in."""
    seen: dict[int, Unit] = {}
    for e in entries:
        u = tl.entry_unit.get(e.id)
        if u is not None and u.index not in seen:
            seen[u.index] = u
            _restat(u, tl.an, sc)
    tl.arr.put_many(list(seen.values()))


def _apply_superseded(tl: Timeline) -> None:
    """Units holding values that later entries superseded recount them (a score input)."""
    new, tl.an.sup.new = tl.an.sup.new, []
    by, cands = tl.an.sup.by, tl.an.cands
    for u in {id(u): u for u in (tl.entry_unit.get(eid) for eid, _ in new) if u}.values():
        u.sup_n = sum(1 for e in u.items for k, c in enumerate(cands.get(e.id, ()))
                      if (e.id, k) in by and c.salience >= extractive.MIN_SALIENCE)
        tl.arr.put(u)




class Timelines:
    """One timeline per session, kept current: the units by every read, the analysis by a
    background follower (``appended``) and by reads up to a bound."""

    def __init__(self, config: Config, background: BackgroundShare | None = None) -> None:
        self.config = config
        self.background = background  #: the follower's time budget (None: no follower)
        self._timelines: dict[str, Timeline] = {}
        self.versions: dict[str, int] = {}  #: bumped by the engine on pin/compress/clear/import
        #: sessions with entries not analysed yet, in the order they fell behind
        self._follow: dict[str, Session] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        #: set by the app: work that goes first (the recall index's rows of new entries: every
        #: read needs them, the analysis only scores)
        self.yield_to: Callable[[], bool] = lambda: False
        #: bumped for the session's owner by every step that changes its timeline (units,
        #: analysis); for everyone by a version (a pin, a forget: rare)
        self.changes = Changes()

    def invalidate(self, session_id: str) -> None:
        self.versions[session_id] = self.versions.get(session_id, 0) + 1
        self.changes.bump()

    def state(self, owner: Owner) -> tuple[int, int] | None:
        """What a read of ``owner``'s sessions depends on here, as numbers that change
        whenever it does; None while one of its sessions' entries wait for the follower (a
        read may then analyse some)."""
        for sid, s in self._follow.items():
            if session_owner(s) != owner:
                continue
            tl = self._timelines.get(sid)
            if tl is None or tl.an.session != id(s) or tl.behind(len(s.entries)):
                return None
        return self.changes.of(owner)

    def forget(self, session_id: str) -> None:
        self._timelines.pop(session_id, None)
        self._follow.pop(session_id, None)
        self.invalidate(session_id)

    # --- following the log ---------------------------------------------------------------
    def appended(self, s: Session, entries: list[Entry]) -> None:
        """New entries of ``s`` (the session log's hook): the follower analyses them."""
        self._behind(s)

    def _behind(self, s: Session) -> None:
        self._follow[s.id] = s
        if self.background is None:
            return
        if self._task is None or self._task.done():
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                return
            self._task = loop.create_task(self._run(), name="memman-timelines")
        self._wake.set()

    async def close(self) -> None:
        await stop_task(self._task)
        self._task = None

    def pending(self) -> int:
        """Entries of the followed sessions not analysed yet."""
        out = 0
        for sid, s in self._follow.items():
            tl = self._timelines.get(sid)
            done = tl.an.done if tl is not None and tl.an.session == id(s) else 0
            out += max(len(s.entries) - done, 0)
        return out

    async def _run(self) -> None:
        """The follower: each session that fell behind, a slice at a time within the
        background share (round robin), until its units and analysis have every entry."""
        assert self.background is not None
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._follow:
                if self.yield_to():  # the recall index's rows of new entries go first
                    await asyncio.sleep(SLICE_S)
                    continue
                sid, s = next(iter(self._follow.items()))
                async with self.background.turn():
                    if self._follow.get(sid) is not s:
                        continue  # forgotten (deleted, cleared, replaced) meanwhile
                    try:
                        done = self._slice(self._current(s), s)
                    except Exception:  # a bug, not a loop of tracebacks: reads still work
                        log.exception("analysing session %s failed", sid)
                        done = True
                if self._follow.get(sid) is s:
                    del self._follow[sid]
                    if not done:
                        self._follow[sid] = s  # to the back: the others get their turn

    # --- reads -----------------------------------------------------------------------------
    def holds(self, s: Session, tl: Timeline) -> bool:
        """``tl`` is still ``s``'s timeline (no pin, forget or config change since)."""
        return self._timelines.get(s.id) is tl and tl.key == self._key(s)

    def timeline(self, s: Session) -> Timeline:
        """The session's units (at most ``UNITS_INLINE`` more built now), analysed as far as
        the follower has come (a backlog of ``INLINE_ENTRIES`` or fewer, now); what is left is
        the follower's. Bounded work on the event loop whatever the backlog: a request calls
        ``prepare`` first, which brings its session's units up to date in slices."""
        tl = self._timelines.get(s.id)
        if tl is not None and tl.consumed == tl.an.done == len(s.entries) \
                and not tl.an.sup.new and tl.key == self._key(s):
            return tl  # up to date: a window reads dozens of past sessions' timelines
        tl = self._current(s)
        # a backlog small enough to analyse now is (a few new entries, a small session); a
        # larger one is left whole to the follower
        backlog = len(s.entries) - tl.an.done
        self._step(tl, s, UNITS_INLINE, backlog if backlog <= INLINE_ENTRIES else 0)
        if tl.behind(len(s.entries)):
            self._behind(s)
        return tl

    def _current(self, s: Session) -> Timeline:
        """The session's timeline for the current key; a new one (on the same analysis) when
        a pin or a config change made the units stale, or for a new session object."""
        key = self._key(s)
        tl = self._timelines.get(s.id)
        if tl is None or tl.key != key:
            an = tl.an if tl is not None and tl.an.session == id(s) else Analysis(id(s))
            an.sup.new = []
            tl = self._timelines[s.id] = Timeline(key, an)
            self.versions.setdefault(s.id, 0)  # the engine's sweep forgets it with the session
        return tl

    def _key(self, s: Session) -> tuple:
        """A timeline's key: (session object, version, scoring config, system prompts kept)."""
        return (id(s), self.versions.get(s.id, 0), id(self.config.scoring),
                self.config.context.keep_system_prompts)

    def _step(self, tl: Timeline, s: Session, units: int, entries: int) -> None:
        """Up to ``units`` more entries into units and ``entries`` more analysed."""
        sc = self.config.scoring
        n = len(s.entries)
        if (tl.consumed < n and units) or (tl.an.done < n and entries) or tl.an.sup.new:
            self.changes.bump(session_owner(s))
        if tl.consumed < n and units:
            extend(tl, s.entries[tl.consumed: tl.consumed + units],
                   self.config.context.keep_system_prompts, sc)
        an = tl.an
        if an.done < n and entries:
            batch = s.entries[an.done: an.done + entries]
            an.feed(batch, sc)
            _restat_entries(tl, batch, sc)
        _apply_superseded(tl)

    def _slice(self, tl: Timeline, s: Session, *, analyse: bool = True) -> bool:
        """About ``SLICE_S`` of work: units first, then the analysis. True when done."""
        t0 = time.perf_counter()
        units, done = tl.consumed, tl.an.done
        while tl.consumed < len(s.entries) and time.perf_counter() - t0 < SLICE_S:
            self._step(tl, s, 256, 0)
        while analyse and tl.an.done < len(s.entries) and time.perf_counter() - t0 < SLICE_S:
            self._step(tl, s, 0, 8)
        if self.background is not None:  # long-lived objects: out of the collector's sight
            self.background.grew(max(tl.consumed - units, 0) + max(tl.an.done - done, 0))
        return tl.consumed >= len(s.entries) and (not analyse or tl.an.done >= len(s.entries))

    async def prepare(self, s: Session) -> None:
        """Before a request, in slices that yield to other clients: every entry in units; the
        analysis of a backlog up to ``WAIT_ENTRIES`` entries; past that (a burst of adds, a
        restart) only the newest ``NEWEST_OWN`` entries' own analysis, and the follower does
        the rest — this request waits for none of it."""
        while not self._slice(self._current(s), s, analyse=False):
            await asyncio.sleep(0)
        tl = self._current(s)
        if len(s.entries) - tl.an.done <= WAIT_ENTRIES:
            while not self._slice(self._current(s), s):
                await asyncio.sleep(0)
            return
        self._behind(s)
        sc = self.config.scoring
        todo = [e for e in s.entries[-NEWEST_OWN:] if e.id not in tl.an.cands]
        while todo:
            t0 = time.perf_counter()
            batch: list[Entry] = []
            while todo and time.perf_counter() - t0 < SLICE_S:
                e = todo.pop()
                self.changes.bump(session_owner(s))
                tl.an.own(e, sc)
                batch.append(e)
            _restat_entries(tl, batch, sc)
            if todo:
                await asyncio.sleep(0)
                if self._current(s) is not tl:
                    return  # a pin or a config change meanwhile: the units are rebuilt

    async def catch_up(self, s: Session, background: BackgroundShare | None) -> None:
        """Every entry into units and analysed, a slice at a time within the background share
        (compression reads the whole analysis): a burst of adds is served first, this
        follows; while adds outrun the share, it keeps following them. Without a share: slices
        of ``SLICE_S``, yielding between them."""
        while True:
            if background is None:
                await asyncio.sleep(0)
            if self.yield_to():  # as the follower: the recall index's rows go first (after a
                await asyncio.sleep(SLICE_S)  # restart, the first question waits for them)
                continue
            async with background.turn() if background is not None else _no_turn():
                if self._slice(self._current(s), s):
                    return



@contextlib.asynccontextmanager
async def _no_turn() -> AsyncIterator[None]:
    yield
