"""The budgeted context window: what the LLM receives now, filled from the lossless log.

The pipeline, each step a plain function of the one before:

1. **timeline** — every entry of the log (compressed ones too: compression changes what a
   stretch costs when it does not fit, never what it says), grouped into *units*: one entry, or
   an assistant tool call with all its results (kept or dropped together, so the list is always
   valid for the chat API). Each entry is analysed once: fact candidates with their salience
   (``facts``), words for BM25 (``relevance``), superseded values (``supersede``).
2. **score** — per unit: recency, role, content (keywords), salience, relevance to the
   question being answered, superseded (``scoring``).
3. **plan** — the budget decides: under the prune threshold everything is sent; above it the
   system prompt, pinned entries and the current exchange stay, then units by score per token
   while they fit, and each stretch that did not fit is sent as a summary of its facts (an LLM
   summary or a linked compression summary where one exists, else extractive), or as one
   omission marker. The window then fills at least ``target_usage`` of the budget.
4. **render** — chat messages in log order, each with its part (kind, tokens, entries).

The LLM is only at the edge (``ContextBuilder.context`` may wait ``llm_deadline_s`` for gap
summaries); ``preview`` renders the same plan without waiting, so both agree.
"""

from __future__ import annotations

import asyncio
import heapq
import time
from bisect import insort
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from memman_daemon.background import SLICE_S
from memman_daemon.engine import extractive, facts, scoring
from memman_daemon.engine.relevance import TermIndex
from memman_daemon.engine.supersede import Supersession
from memman_daemon.model import Entry, Session, Summary
from memman_daemon.tokens import REPLY_PRIMING

if TYPE_CHECKING:
    from memman.config import Config
    from memman_daemon.background import BackgroundShare
    from memman_daemon.clock import Clock
    from memman_daemon.llm.summarizer import Summarizer
    from memman_daemon.search.embeddings import Embedder
    from memman_daemon.tokens import TokenCounter

BANDS = ("ok", "warn", "prune", "aggressive", "emergency")
SEMANTIC_Z = 2.0  #: standard deviations above the session's mean cosine to count as related
SEMANTIC_TOP = 200  #: entries considered by meaning per request
SEMANTIC_MIN_ENTRIES = 20  #: fewer entries give no usable mean and spread
PENDING = "tool call whose results are not (all) in the log yet"


def band_for(usage: float, cfg: Any) -> str:
    if usage > 1.0:
        return "emergency"
    if usage >= cfg.aggressive_threshold:
        return "aggressive"
    if usage >= cfg.prune_threshold:
        return "prune"
    if usage >= cfg.warn_threshold:
        return "warn"
    return "ok"


# --- 1. the timeline ------------------------------------------------------------------------
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
    fact_chars: int = 0  #: characters of fact candidates (what a summary of it would need)
    val_n: int = 0  #: candidates that carry a value
    sup_n: int = 0  #: ...of which a later entry superseded
    sizef: float = 1.0  #: how much its size weighs against keeping it whole
    errors: int = 0  #: tool results with an error line
    tools: tuple[str, ...] = ()  #: tool names it calls or answers

    @property
    def first(self) -> Entry:
        return self.items[0]


@dataclass
class Request:
    """One context request, its defaults resolved once (``SessionEngine.request``)."""

    budget: int  #: tokens the whole prompt may take
    model: str
    query: str = ""  #: what relevance is measured against ("" = the newest user message)
    tool_tokens: int = 0  #: tokens of the function definitions sent with the request
    cached: list[dict[str, Any]] = field(default_factory=list)  #: cached tool results to send
    cached_tokens: int = 0
    cached_note: str = ""
    slack: int = 0  #: tokens held back after a first plan came out over the budget


@dataclass
class Analysis:
    """What each entry of one session's log carries, computed once per entry (entries never
    change): candidates, words (BM25), superseded values, header features, summary picks."""

    session: int  #: id() of the session object analysed
    done: int = 0  #: entries analysed: a prefix of the log
    cands: dict[int, list[facts.Candidate]] = field(default_factory=dict)
    index: TermIndex = field(default_factory=TermIndex)
    sup: Supersession = field(default_factory=Supersession)
    picks: list[tuple[float, int, int]] = field(default_factory=list)  #: (-score, id, k), sorted
    pick: dict[tuple[int, int], extractive.Pick] = field(default_factory=dict)
    feat: dict[int, tuple[bool, tuple[str, ...], bool]] = field(default_factory=dict)
    stat: dict[int, tuple[float, float, float, int, int]] = field(default_factory=dict)
    heads: dict[tuple, str] = field(default_factory=dict)  #: gap key -> header (bounded)
    tok: dict[str, int] = field(default_factory=dict)  #: summary line -> tokens (bounded)
    ids: list[int] = field(default_factory=list)  #: entry ids in log order
    vec_ids: list[int] = field(default_factory=list)  #: entries with a vector, in row order
    vec_blocks: list[Any] = field(default_factory=list)  #: their unit vectors, in blocks

    def feed(self, entries: list[Entry], sc: Any) -> None:
        for e in entries:
            self.ids.append(e.id)
            text = scoring.entry_text(e)
            cands = facts.analyse(e.content, structured=e.role == "tool")
            for c in e.tool_calls or []:  # a call's arguments: the command, rarely the fact
                fn = c.get("function", {})
                for cand in facts.analyse(f"{fn.get('name', '')}({fn.get('arguments', '')})",
                                          structured=True):
                    cand.salience *= 0.5
                    cands.append(cand)
            self.cands[e.id] = cands
            self.index.add(e.id, facts.terms(text))
            self.sup.feed(e.id, cands, f"tool:{e.name}" if e.role == "tool" else "message")
            for p in extractive.picks_of(e, cands):
                self.pick[p.order] = p
                insort(self.picks, (-p.score, p.order[0], p.order[1]))
            self.feat[e.id] = extractive.features(e)
            tool = sc.typed_tools_count_as_marker and e.type in ("tool_call", "tool_result")
            self.stat[e.id] = (
                max((c.salience for c in cands), default=0.0),
                scoring.content_score(text, sc, tool=tool),
                scoring.static_score(e, sc),
                sum(len(c.text) for c in cands if c.salience >= extractive.MIN_SALIENCE),
                sum(1 for c in cands if c.salience >= extractive.MIN_SALIENCE))
        self.done += len(entries)


class UnitArrays:
    """Per-unit numbers as numpy columns (row = unit index), kept in step with the units, so a
    request scores 10k units and finds its gaps without a Python loop over all of them."""

    FIELDS = ("tokens", "items", "facts", "const", "keyword_total", "supf", "sizef", "invalid",
              "mandatory", "users", "errors")

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
        c["facts"][i] = u.fact_chars
        c["const"][i] = u.const
        c["keyword_total"][i] = u.keyword_total
        c["supf"][i] = u.sup_n / u.val_n if u.val_n else 0.0
        c["sizef"][i] = u.sizef
        c["invalid"][i] = bool(u.invalid)
        c["mandatory"][i] = bool(u.mandatory)
        c["users"][i] = sum(1 for e in u.items if e.role == "user")
        c["errors"][i] = u.errors
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
    chars = vals = sups = 0
    by = an.sup.by
    for e in u.items:
        st = an.stat[e.id]
        sal, content = max(sal, st[0]), max(content, st[1])
        keyword_total = max(keyword_total, st[2])
        chars += st[3]
        vals += st[4]
        if by:
            sups += sum(1 for k, c in enumerate(an.cands[e.id])
                        if (e.id, k) in by and c.salience >= extractive.MIN_SALIENCE)
    u.salience, u.content, u.keyword_total = sal, content, keyword_total
    u.fact_chars, u.val_n, u.sup_n = chars, vals, sups
    u.const = scoring.unit_constant(u.first.role, content, sal, sc)
    feats = [an.feat[e.id] for e in u.items]
    u.errors = sum(1 for f in feats if f[2])
    u.tools = tuple(dict.fromkeys(t for f in feats for t in f[1]))
    u.sizef = (1.0 + u.tokens / 300.0) ** 0.5


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


# --- 3. the plan ----------------------------------------------------------------------------
@dataclass
class Gap:
    """A run of units not sent as originals, sent as one summary or one marker (or nothing)."""

    units: list[Unit]
    count: int  #: entries in the gap
    tokens: int  #: their tokens as originals
    text: str = ""
    source: str = "none"  #: "llm" / "linked" / "fallback" (extractive) / "marker" / "none"
    reason: str = ""
    message_tokens: int = 0
    summary_id: int | None = None  #: the linked compression summary used
    fact_chars: int = 0  #: characters of fact candidates in it

    @property
    def first_id(self) -> int:
        return self.units[0].first.id

    @property
    def last_id(self) -> int:
        return self.units[-1].items[-1].id

    def key(self, session_id: str) -> tuple:
        return (session_id, self.first_id, self.last_id, self.count)

    def entries(self) -> list[Entry]:
        return [e for u in self.units for e in u.items]

    @property
    def action(self) -> str:
        if self.source in ("llm", "linked", "fallback"):
            return "summarized"
        return "omitted" if self.source == "marker" else "dropped"


@dataclass
class Plan:
    session: Session
    request: Request
    budget: int  #: what history may take: the request budget less tool definitions and cache
    full_tokens: int  #: the whole log as originals (valid units), reply priming included
    usage: float
    band: str
    units: list[Unit]
    scores: Any  #: unit index -> total score (a numpy array)
    timeline: Any  #: the Timeline the plan was made from
    relevance: dict[int, float]  #: entry id -> relevance to the question (0..1)
    selected: set[int] = field(default_factory=set)
    gaps: list[Gap] = field(default_factory=list)
    rolling: dict[str, Any] | None = None
    rolling_reason: str = ""
    over_budget: bool = False
    pruned: bool = False
    target_tokens: int = 0
    notes: dict[int, str] = field(default_factory=dict)  #: entry id -> "replaced later" note
    tokens: int = 0  #: what the rendered window costs (priming, tools and cache included)


class ContextBuilder:
    """Per-session timeline caches, and the plan -> window steps."""

    def __init__(self, *, config: Config, clock: Clock, tokens: TokenCounter,
                 embedder: Embedder, summarizer: Summarizer) -> None:
        self.config, self.clock, self.tokens = config, clock, tokens
        self.embedder, self.summarizer = embedder, summarizer
        self._timelines: dict[str, Timeline] = {}
        self._gap_llm: dict[tuple, str] = {}  #: gap key -> LLM summary text (bounded)
        self._gap_inflight: dict[tuple, float] = {}  #: gap key -> retry-after (monotonic)
        self._msg_tokens: dict[tuple[str, str], int] = {}
        self.versions: dict[str, int] = {}  #: bumped by the engine on pin/compress/clear/import
        self.counters = {"contexts": 0, "pruned": 0, "emergencies": 0, "over_budget": 0,
                         "gap_summaries": 0, "gap_llm": 0, "markers": 0}

    def invalidate(self, session_id: str) -> None:
        self.versions[session_id] = self.versions.get(session_id, 0) + 1

    def forget(self, session_id: str) -> None:
        self._timelines.pop(session_id, None)
        self.invalidate(session_id)
        if len(self._gap_llm) > 4096:
            self._gap_llm.clear()

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

    async def catch_up(self, s: Session, background: BackgroundShare) -> None:
        """Analyse the entries not analysed yet and group them into units, a few at a time
        within the background share (~50-100 µs an entry: a burst of adds is served first,
        this follows), so that the next ``timeline`` has nothing left to do. Returns once
        every entry is in; while adds outrun the share, it keeps following them."""
        while True:
            async with background.turn():
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

    def message_tokens(self, msg: dict[str, Any], model: str) -> int:
        key = (msg["role"], msg["content"] or "")
        n = self._msg_tokens.get(key)
        if n is None:
            if len(self._msg_tokens) > 4096:
                self._msg_tokens.clear()
            n = self._msg_tokens[key] = self.tokens.count_message(msg, model)
        return n

    def rolling_message(self, s: Session) -> dict[str, Any] | None:
        if not self.config.context.include_rolling_summary or not s.meta.summary:
            return None
        return {"role": "system", "content": "[Conversation summary]\n" + s.meta.summary}

    # --- planning ---------------------------------------------------------------------
    def plan(self, s: Session, req: Request) -> Plan:
        cfg = self.config.context
        tl = self.timeline(s)
        units = tl.units
        query, query_id = _query(s, req.query)
        rel = tl.an.index.scores(facts.terms(query), exclude=query_id) if query else {}
        for eid, r in self._semantic(s, tl, query, query_id).items():
            if r > rel.get(eid, 0.0):
                rel[eid] = r
        rel_unit = np.zeros(len(units))
        for eid, r in rel.items():
            u = tl.entry_unit.get(eid)
            if u is not None and r > rel_unit[u.index]:
                rel_unit[u.index] = r
        scores = scoring.totals(tl.arr, rel_unit, self.config.scoring)
        reserved = req.tool_tokens + req.cached_tokens
        budget = max(req.budget - reserved - req.slack, 0)
        valid_mask = tl.arr["invalid"] == 0
        full = int(tl.arr["tokens"][valid_mask].sum()) + REPLY_PRIMING
        usage = (full + reserved) / req.budget
        plan = Plan(s, req, budget, full, usage, band_for(usage, cfg), units, scores, tl, rel,
                    target_tokens=int(cfg.target_usage * req.budget))
        rolling = self.rolling_message(s)
        if usage < cfg.prune_threshold and not req.slack:
            plan.selected = set(np.flatnonzero(valid_mask).tolist())
            plan.target_tokens = req.budget
            self._supersede_notes(plan, tl)
            if rolling is not None:
                rt = self.message_tokens(rolling, req.model)
                if (full + reserved + rt) / req.budget < cfg.prune_threshold:
                    plan.rolling, plan.rolling_reason = rolling, "included"
                else:
                    plan.rolling_reason = "dropped: the whole log fits and it repeats it"
            self._gaps(plan, tl, query, room=0)
            return plan
        plan.pruned = True
        self._select(plan, tl, query, rolling)
        return plan

    def _semantic(self, s: Session, tl: Timeline, query: str,
                  query_id: int | None) -> dict[int, float]:
        """Relevance by meaning, where the local embedder is on: entries whose vector stands
        out as close to the question's (``SEMANTIC_Z`` deviations above the session's mean,
        up to 0.8 at twice that), so a question phrased differently from the fact still
        brings it back. Entry vectors are
        computed once (the embedder prefetches them as entries arrive); a remote embedder is
        never waited for on this path."""
        emb = self.embedder
        if not query or not emb.enabled or not emb.local:
            return {}
        an = tl.an
        done = len(an.vec_ids)
        if done < len(an.ids):
            new = [i for i in an.ids[done:] if i in s.by_id]
            vecs = emb.cached([_embed_text(s.by_id[i]) for i in new]) if new else None
            if new and vecs is None:
                return {}
            if new:
                an.vec_ids.extend(new)
                an.vec_blocks.append(vecs)
        if not an.vec_ids:
            return {}
        if len(an.vec_blocks) > 1:
            an.vec_blocks = [np.concatenate(an.vec_blocks)]
        q = emb.cached([query[:2000]])
        if q is None:
            return {}
        sims = an.vec_blocks[0] @ q[0]
        if len(sims) < SEMANTIC_MIN_ENTRIES:
            return {}
        # a small static model gives low cosines even for the right pair: what counts is how
        # far an entry stands out from the rest of this session (a z-score), not the value;
        # the question's own entry is not part of that rest
        rest = sims[:-1] if query_id is not None and an.vec_ids[-1] == query_id else sims
        mu, sd = float(rest.mean()), float(rest.std()) or 1.0
        top = np.argpartition(-sims, min(SEMANTIC_TOP, len(sims) - 1))[:SEMANTIC_TOP]
        out = {}
        for i in top:
            eid = an.vec_ids[i]
            z = (float(sims[i]) - mu) / sd
            if eid != query_id and z > SEMANTIC_Z:
                out[eid] = 0.8 * min(1.0, (z - SEMANTIC_Z) / SEMANTIC_Z)
        return out

    def _select(self, plan: Plan, tl: Timeline, query: str,
                rolling: dict[str, Any] | None) -> None:
        cfg = self.config.context
        req = plan.request
        cap = int(cfg.fill_usage * plan.budget) - REPLY_PRIMING
        arr = tl.arr
        valid = arr["invalid"] == 0
        mand = np.flatnonzero((arr["mandatory"] != 0) & valid)
        used = int(arr["tokens"][mand].sum())
        plan.selected = set(mand.tolist())
        if used + REPLY_PRIMING > plan.budget:
            plan.over_budget = True
            plan.rolling_reason = "dropped: pinned entries and system prompts alone exceed the budget"
            self._gaps(plan, tl, query, room=0)
            return
        # the exchange in progress: the question first, then its newest steps (half the room)
        current = _current_exchange(plan.units)
        for k, u in enumerate([current[0], *reversed(current[1:])]):
            if u.index in plan.selected or u.invalid:
                continue
            if used + u.tokens <= (cap if k == 0 else cap // 2):
                plan.selected.add(u.index)
                used += u.tokens
        # room for summaries of what does not fit: what the dropped facts need, within bounds
        selected = plan.selected
        mask = valid.copy()
        mask[list(selected)] = False
        idx = np.flatnonzero(mask)
        value = int(arr["facts"][idx].sum()) // 4
        summary_room = min(max(int(value * 0.8), int(cfg.summary_min_share * cap)),
                           int(cfg.summary_max_share * cap))
        pri = plan.scores[idx] / arr["sizef"][idx]
        order = idx[np.argsort(-pri, kind="stable")].tolist()
        tokens = arr["tokens"].tolist()
        room = cap - summary_room
        for i in order:
            if used + tokens[i] <= room:
                selected.add(i)
                used += int(tokens[i])
        used += self._gaps(plan, tl, query, room=cap - used)
        # what the summaries did not need goes to more originals (then summaries are redone)
        left = cap - used
        added = False
        for i in order:
            if i not in selected and tokens[i] <= left:
                selected.add(i)
                left -= int(tokens[i])
                added = True
        if added:
            used = sum(int(tokens[i]) for i in selected)
            used += self._gaps(plan, tl, query, room=cap - used)
        self._supersede_notes(plan, tl)
        used += sum(self._note_cost(plan, i) for i in plan.notes)
        if rolling is not None:
            text = _dedupe(rolling["content"], plan, tl)
            msg = {"role": "system", "content": text}
            rt = self.message_tokens(msg, req.model)
            if text.strip() != "[Conversation summary]" and used + rt <= cap:
                plan.rolling, plan.rolling_reason = msg, "included"
            else:
                plan.rolling_reason = "dropped: the budget went to originals and their summaries"

    def _gaps(self, plan: Plan, tl: Timeline, query: str, room: int) -> int:
        """Runs of units not selected -> one summary or marker each; returns their tokens."""
        cfg = self.config.context
        model = plan.request.model
        an = tl.an
        gaps: list[Gap] = []
        selected = plan.selected
        n = len(plan.units)
        out_mask = np.ones(n + 2, dtype=np.int8)  # 1 = not sent as an original
        out_mask[0] = out_mask[-1] = 0
        if selected:
            out_mask[np.fromiter(selected, dtype=np.int64, count=len(selected)) + 1] = 0
        edges = np.flatnonzero(np.diff(out_mask))  # run starts and ends, alternating
        if len(edges):
            arr = tl.arr
            sums = {f: np.concatenate(([0.0], np.cumsum(arr[f]))) for f in ("items", "tokens",
                                                                              "facts")}
            for a, b in zip(edges[0::2].tolist(), edges[1::2].tolist(), strict=True):
                gaps.append(Gap(plan.units[a:b], int(sums["items"][b] - sums["items"][a]),
                                int(sums["tokens"][b] - sums["tokens"][a]),
                                fact_chars=int(sums["facts"][b] - sums["facts"][a])))
        plan.gaps = gaps
        sendable = [g for g in gaps if not all(u.invalid for u in g.units)]
        for g in gaps:
            if not any(not u.invalid for u in g.units):
                g.reason = "dropped: " + g.units[0].invalid
        if room <= 0:
            return 0
        sid = plan.session.id
        used = 0
        gap_of: dict[int, Gap] = {}  #: unit index -> its (sendable) gap
        for g in sendable:
            for u in g.units:
                if not u.invalid:
                    gap_of[u.index] = g
        # LLM summaries of a gap (from earlier requests) first
        for g in sendable:
            llm = self._gap_llm.get(g.key(sid))
            if llm is not None:
                self._set_text(g, f"[Summary of {g.count} earlier messages: {llm}]", "llm", model)
                if used + g.message_tokens <= room:
                    used += g.message_tokens
                    for u in g.units:
                        gap_of.pop(u.index, None)
                    continue
                g.text, g.source, g.message_tokens = "", "none", 0
        # linked compression summaries made by the LLM stand for their whole stretch
        linked: list[extractive.Pick] = []
        skip: set[int] = set()
        owner: dict[int, Gap] = {}  #: entry id -> the gap its picks belong to
        for sm in s_llm_summaries(plan.session):
            us = {tl.entry_unit[i].index for i in sm.entry_ids if i in tl.entry_unit}
            gs = {id(gap_of.get(i)) for i in us}
            g = gap_of.get(next(iter(us), -1))
            if g is not None and len(gs) == 1 and sm.tokens <= (room - used) // 2:
                g.summary_id = sm.id
                linked.append(extractive.Pick((sm.entry_ids[0], -1), "summary", sm.content, 10.0))
                owner[sm.entry_ids[0]] = g
                skip.update(sm.entry_ids)
        # the pool: lines that match the question (scored again), then by salience alone
        qterms = set(facts.terms(query)) if query else set()
        idf = {t: an.index.idf(t) for t in qterms}
        # a line that matches two or three of the question's words is about it: a long
        # question asking for many things must not dilute each of them
        enough = 2.0 * (sum(idf.values()) / len(idf)) if idf else 1.0

        entry_rel = 0.0  # a line shares some of its entry's relevance (its neighbours'
        # words say what it is about: "ring.go:88" sits in the race detector's output)

        def relevance(c: facts.Candidate) -> float:
            own = min(1.0, sum(idf[t] for t in qterms & c.terms) / enough)
            return max(own, 0.5 * entry_rel)

        by = an.sup.by
        boosted: list[extractive.Pick] = []
        for eid in plan.relevance:
            u = tl.entry_unit.get(eid)
            if u is None or u.index not in gap_of or eid in skip:
                continue
            e = plan.session.by_id.get(eid)
            if e is None:
                continue
            sup = {(eid, k) for k in range(len(an.cands[eid])) if (eid, k) in by}
            entry_rel = plan.relevance[eid]
            boosted += extractive.picks_of(e, an.cands[eid], skip=sup, relevance=relevance)
            owner[eid] = gap_of[u.index]
        boosted.sort(key=lambda p: p.score, reverse=True)
        rel_ids = plan.relevance
        entry_unit = tl.entry_unit

        def static() -> Any:
            for _neg, eid, k in an.picks:
                if eid in rel_ids or eid in skip or (eid, k) in by:
                    continue
                u = entry_unit.get(eid)
                if u is None:
                    continue
                g = gap_of.get(u.index)
                if g is not None:
                    owner[eid] = g
                    yield an.pick[(eid, k)]

        tok = an.tok

        def measure(text: str) -> int:
            n = tok.get(text)
            if n is None:
                if len(tok) > 65536:
                    tok.clear()
                n = tok[text] = self.tokens.count_text(text, model)
            return n

        heads: dict[int, str] = {}

        def head(g: Gap) -> str:
            h = heads.get(id(g))
            if h is None:
                key = (g.first_id, g.last_id, g.count)
                h = an.heads.get(key)
                if h is None:
                    if len(an.heads) > 4096:
                        an.heads.clear()
                    h = an.heads[key] = (f"[Summary of {g.count} earlier messages "
                                         f"({self._header(plan, g)})]")
                heads[id(g)] = h
            return h

        def group(p: extractive.Pick) -> tuple[int, int]:
            # the first line of a gap opens its message: a frame and the header line
            g = owner[p.order[0]]
            return id(g), measure(head(g)) + 4

        pool = heapq.merge(linked, boosted, static(), key=lambda p: -p.score)
        chosen, _ = extractive.choose(pool, room - used, measure, presorted=True, group=group)
        by_gap: dict[int, list[extractive.Pick]] = {}
        for p in chosen:
            by_gap.setdefault(id(owner[p.order[0]]), []).append(p)

        def render(g: Gap) -> None:
            picks = by_gap.get(id(g), [])
            src = "linked" if any(p.label == "summary" for p in picks) else "fallback"
            self._set_text(g, extractive.render(head(g), picks), src, model)
            g.reason = f"summarized: {len(picks)} fact lines of {g.count} entries"

        for g in sendable:
            if g.source != "llm" and by_gap.get(id(g)):
                render(g)
                used += g.message_tokens
        # rendering may cost a little more than its lines: the lowest-valued lines give way
        while used > room and chosen:
            worst = min(chosen, key=lambda p: p.score)
            chosen.remove(worst)
            g = owner[worst.order[0]]
            used -= g.message_tokens
            by_gap[id(g)].remove(worst)
            if by_gap[id(g)]:
                render(g)
                used += g.message_tokens
            else:
                g.text, g.source, g.message_tokens = "", "none", 0
        # gaps with nothing worth a line: the header alone if room is left, else a marker
        for g in sendable:
            if g.source != "none":
                continue
            if g.count >= cfg.min_gap_for_summary:
                h = head(g)
                cost = self.message_tokens({"role": cfg.gap_role, "content": h}, model)
                if used + cost <= room:
                    self._set_text(g, h, "fallback", model)
                    g.reason = f"summarized: a gap of {g.count} entries without fact lines " \
                               "(header only)"
                    used += cost
                    continue
            if g is sendable[0] or g.count >= cfg.min_gap_for_summary:
                self._marker(g, model, "omitted: no fact lines and no room for more")
                if used + g.message_tokens <= room:
                    used += g.message_tokens
                    continue
                g.text, g.source, g.message_tokens = "", "none", 0
                g.reason = "omitted: no room left for an omission marker"
            else:
                g.reason = "omitted: a small gap without fact lines (no marker)"
        return used

    def _header(self, plan: Plan, g: Gap) -> str:
        """The compression design's header for a gap, from per-unit counts (no walk over its entries)."""
        a, b = g.units[0].index, g.units[-1].index + 1
        arr = plan.timeline.arr
        users = int(arr["users"][a:b].sum())
        errors = int(arr["errors"][a:b].sum())
        tools: dict[str, None] = {}
        for u in g.units:  # the first few names are enough
            for t in u.tools:
                tools[t] = None
            if len(tools) > 4:
                break
        return extractive.header_counts(g.count, users, list(tools), errors)

    def _set_text(self, g: Gap, text: str, source: str, model: str) -> None:
        g.text, g.source = text, source
        g.message_tokens = self.message_tokens(
            {"role": self.config.context.gap_role, "content": text}, model)

    def _marker(self, g: Gap, model: str, reason: str) -> None:
        self._set_text(g, f"[{g.count} message{'s' if g.count != 1 else ''} omitted]", "marker",
                       model)
        g.reason = reason

    def _supersede_notes(self, plan: Plan, tl: Timeline) -> None:
        """A kept original that states a value replaced later says so, with the later text."""
        for i in plan.selected:
            for e in plan.units[i].items:
                later = [tl.sup.by[(e.id, k)] for k in range(len(tl.cands.get(e.id, ())))
                         if (e.id, k) in tl.sup.by]
                if later:
                    texts = list(dict.fromkeys(t for _, t in later))[:3]
                    plan.notes[e.id] = "\n[replaced later: " + " | ".join(texts) + "]"

    def _note_cost(self, plan: Plan, entry_id: int) -> int:
        e = plan.session.by_id.get(entry_id)
        if e is None:
            return 0
        msg = e.chat_message()
        msg["content"] = (msg.get("content") or "") + plan.notes[entry_id]
        return self.tokens.count_message(msg, plan.request.model) - e.tokens

    # --- rendering -----------------------------------------------------------------------
    def render(self, plan: Plan) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Chat messages in log order and, aligned with them, what each one is."""
        role = self.config.context.gap_role
        model = plan.request.model
        gap_at = {g.units[0].index: g for g in plan.gaps}
        msgs: list[dict[str, Any]] = []
        parts: list[dict[str, Any]] = []
        rolling_done = plan.rolling is None

        def put(msg: dict[str, Any], part: dict[str, Any]) -> None:
            msgs.append(msg)
            parts.append(part)

        for i in sorted(plan.selected | gap_at.keys()):
            u = plan.units[i]
            if not rolling_done and u.mandatory != "system":
                put(plan.rolling, _part("rolling_summary", self.message_tokens(plan.rolling, model)))  # type: ignore[arg-type]
                rolling_done = True
            g = gap_at.get(u.index)
            if g is not None and g.message_tokens:
                kind = {"marker": "omission_marker", "linked": "linked_summary"}.get(
                    g.source, "gap_summary")
                put({"role": role, "content": g.text},
                    _part(kind, g.message_tokens, [e.id for e in g.entries()],
                          summary_id=g.summary_id, mark="omitted" if kind == "omission_marker"
                          else "summarized"))
            if u.index in plan.selected:
                sc = float(plan.scores[u.index])
                for e in u.items:
                    msg = e.chat_message()
                    tokens = e.tokens
                    note = plan.notes.get(e.id)
                    if note:
                        msg["content"] = (msg.get("content") or "") + note
                        tokens = self.tokens.count_message(msg, model)
                    put(msg, _part(_kind(e, u), tokens, [e.id], score=sc,
                                   mark="pinned" if u.mandatory == "pinned" else "kept"))
        if not rolling_done:
            put(plan.rolling, _part("rolling_summary", self.message_tokens(plan.rolling, model)))  # type: ignore[arg-type]
        if plan.request.cached:
            at = len(msgs) - 1 if msgs and msgs[-1].get("role") == "user" else len(msgs)
            cached_parts = [_part("cached_tool_result", self.tokens.count_message(m, model))
                            for m in plan.request.cached]
            msgs[at:at] = plan.request.cached
            parts[at:at] = cached_parts
        return msgs, parts

    def window(self, plan: Plan) -> dict[str, Any]:
        """The answer of ``memman_session_context`` for a plan."""
        cfg = self.config.context
        req = plan.request
        msgs, parts = self.render(plan)
        sent = sum(p["tokens"] for p in parts) + REPLY_PRIMING + req.tool_tokens
        # an exact count of cached messages may differ from the reserve by a token or two
        plan.tokens = sent
        breakdown: dict[str, int] = {}
        for p in parts:
            breakdown[p["kind"]] = breakdown.get(p["kind"], 0) + p["tokens"]
        breakdown["reply_priming"] = REPLY_PRIMING
        breakdown["tool_definitions"] = req.tool_tokens
        breakdown["free"] = max(req.budget - sent, 0)
        history = plan.full_tokens
        return {
            "session_id": plan.session.id,
            "messages": msgs,
            "parts": parts,
            "breakdown": breakdown,
            "tokens": sent,
            "sent_tokens": sent,
            "history_tokens": history,
            "sent_usage": round(sent / req.budget, 4),
            "history_usage": round(history / req.budget, 4),
            "tool_tokens": req.tool_tokens,
            "budget": req.budget,
            "full_tokens": plan.full_tokens,
            "usage": round(plan.usage, 4),
            "final_usage": round(sent / req.budget, 4),
            "band": plan.band,
            "pruned": plan.pruned,
            "emergency": plan.band == "emergency",
            "over_budget": plan.over_budget,
            "model": req.model,
            "encoding": self.tokens.encoding_name(req.model),
            "query": _query(plan.session, req.query)[0][:200],
            "target_tokens": plan.target_tokens,
            "kept_entries": sum(len(plan.units[i].items) for i in plan.selected),
            "dropped_entries": sum(g.count for g in plan.gaps),
            "summarized_entries": sum(g.count for g in plan.gaps if g.action == "summarized"),
            "gaps": [{"first_id": g.first_id, "last_id": g.last_id, "count": g.count,
                      "tokens": g.tokens, "action": g.action, "source": g.source,
                      "reason": g.reason} for g in plan.gaps],
            "rolling_summary": plan.rolling_reason,
            "why": _why(plan, cfg),
            "cached_tools": {"messages": len(req.cached), "tokens": req.cached_tokens,
                             "note": req.cached_note},
        }

    # --- the request path (LLM at the edge) ---------------------------------------------
    def build(self, s: Session, req: Request) -> tuple[Plan, dict[str, Any]]:
        """Plan and render; a window that came out over the budget (notes on superseded
        values, rounding of summary lines) is planned again with that much held back."""
        plan = self.plan(s, req)
        out = self.window(plan)
        for _ in range(3):
            over = out["tokens"] - req.budget
            if over <= 0 or plan.over_budget:
                break
            req = replace(req, slack=req.slack + over + 8)
            plan = self.plan(s, req)
            out = self.window(plan)
        return plan, out

    async def context(self, s: Session, req: Request) -> dict[str, Any]:
        plan, out = self.build(s, req)
        self.counters["contexts"] += 1
        self.counters["pruned"] += plan.pruned
        self.counters["emergencies"] += plan.band == "emergency"
        self.counters["over_budget"] += plan.over_budget
        if await self._ask_llm(plan):
            plan, out = self.build(s, req)
        self.counters["gap_summaries"] += sum(g.action == "summarized" for g in plan.gaps)
        self.counters["gap_llm"] += sum(g.source == "llm" for g in plan.gaps)
        self.counters["markers"] += sum(g.source == "marker" for g in plan.gaps)
        return out

    async def _ask_llm(self, plan: Plan) -> bool:
        """Ask the LLM for summaries of the larger gaps, within the deadline; True when one
        arrived in time (the window is then planned again with it)."""
        cfg = self.config.context
        summarizer = self.summarizer
        emergency = plan.band == "emergency"
        if emergency or not summarizer.available:
            for g in plan.gaps:
                if g.source == "fallback":
                    summarizer.count_fallback("emergency" if emergency else "no_key")
            return False
        sid = plan.session.id
        now = self.clock.monotonic()
        waits = []
        for g in sorted(plan.gaps, key=lambda g: g.tokens, reverse=True):
            key = g.key(sid)
            if (g.source in ("llm", "none") or g.count < cfg.min_gap_for_summary
                    or self._gap_inflight.get(key, -1e18) >= now):
                continue
            if len(waits) >= cfg.max_gap_llm_calls:
                break
            # a failed or late call may be retried after the LLM timeout has passed
            self._gap_inflight[key] = now + self.config.llm.timeout_s + 1.0
            waits.append((g, key))
        if not waits:
            return False
        got = False

        async def one(g: Gap, key: tuple) -> None:
            nonlocal got

            def late(text: str, key: tuple = key) -> None:
                self._gap_llm[key] = text
                self._gap_inflight.pop(key, None)
            text, source = await summarizer.summarize_entries(
                g.entries(), target_tokens=cfg.gap_summary_max_tokens, session_id=sid,
                deadline=cfg.llm_deadline_s, on_late=late)
            if source == "llm":
                self._gap_llm[key] = _cap(text, cfg.gap_summary_max_tokens,
                                          self.tokens.encoding(plan.request.model))
                self._gap_inflight.pop(key, None)
                got = True

        await asyncio.gather(*(one(g, k) for g, k in waits))
        return got

    # --- preview: the same plan, per entry -----------------------------------------------
    def preview(self, s: Session, req: Request) -> dict[str, Any]:
        plan, out = self.build(s, req)
        cfg = self.config.context
        tl = self.timeline(s)
        gap_of = {u.index: g for g in plan.gaps for u in g.units}
        sconf = self.config.scoring
        n = len(tl.units)
        rows: list[dict[str, Any]] = []
        for e in s.entries:
            u = tl.entry_unit.get(e.id)
            if u is None:
                continue
            rel = max((plan.relevance.get(it.id, 0.0) for it in u.items), default=0.0)
            sc = scoring.parts(u, n, rel, float(plan.scores[u.index]), sconf)
            row: dict[str, Any] = {"entry_id": e.id, "type": e.type, "role": e.role,
                                   "tokens": e.tokens, "pinned": e.pinned,
                                   "score": round(sc.total, 4), "score_parts": sc.wire(),
                                   "unit": u.index}
            if e.summary_id is not None:
                row["summary_id"] = e.summary_id
            if u.invalid:
                row.update(decision="dropped", reason=u.invalid)
            elif u.index in plan.selected:
                if u.mandatory:
                    row.update(decision="kept", reason="pinned" if u.mandatory == "pinned"
                               else "system prompt: always kept")
                elif not plan.pruned:
                    row.update(decision="kept", reason=f"under the {cfg.prune_threshold:.0%} "
                                                       "prune threshold")
                else:
                    row.update(decision="kept", reason=f"score {sc.total:.2f} "
                               f"({sc.explain()}) fits the budget")
                if e.id in plan.notes:
                    row["superseded"] = True
            else:
                g = gap_of[u.index]
                decision = "compressed" if g.source == "linked" else g.action
                row.update(decision=decision, gap=[g.first_id, g.last_id],
                           reason=f"score {sc.total:.2f} ({sc.explain()}) lost to "
                                  f"higher-scored entries; {g.reason}")
            if len(u.items) > 1:
                row["group"] = [it.id for it in u.items]
            rows.append(row)
        summaries = [{"summary_id": sm.id, "tokens": sm.tokens, "entry_ids": sm.entry_ids,
                      "decision": "kept" if any(g.summary_id == sm.id for g in plan.gaps)
                      else "originals" if all(tl.entry_unit[i].index in plan.selected
                                              for i in sm.entry_ids if i in tl.entry_unit)
                      else "not used"}
                     for sm in s.summaries.values()]
        keep = ("budget", "full_tokens", "usage", "band", "pruned", "over_budget",
                "target_tokens", "rolling_summary", "why", "cached_tools", "parts",
                "breakdown", "tokens", "sent_tokens", "history_tokens", "sent_usage",
                "history_usage", "tool_tokens", "query", "gaps", "model", "encoding")
        return {"session_id": s.id, **{k: out[k] for k in keep}, "entries": rows,
                "summaries": summaries}


# --- helpers -------------------------------------------------------------------------------
def _part(kind: str, tokens: int, entry_ids: list[int] | None = None, *,
          summary_id: int | None = None, score: float | None = None,
          mark: str = "kept") -> dict[str, Any]:
    return {"kind": kind, "tokens": tokens, "entry_ids": entry_ids or [],
            "summary_id": summary_id, "score": None if score is None else round(score, 4),
            "mark": mark}


def _kind(e: Entry, u: Unit) -> str:
    if u.mandatory == "system":
        return "system_prompt"
    if u.mandatory == "pinned":
        return "pinned"
    if e.tool_calls:
        return "tool_call"
    if e.role == "tool":
        return "tool_result"
    return "context" if e.type == "context" else "message"


def _query(s: Session, query: str) -> tuple[str, int | None]:
    """The text relevance is measured against: the given query, else the newest user message."""
    if query:
        return query, None
    for e in reversed(s.entries[-200:]):
        if e.role == "user" and e.type == "message" and e.content:
            return e.content, e.id
    return "", None


def _embed_text(e: Entry) -> str:
    """What an entry means for relevance: its content (as the embedder prefetched it)."""
    return e.content or scoring.entry_text(e)


def _current_exchange(units: list[Unit]) -> list[Unit]:
    """The newest user message and every unit after it."""
    for i in range(len(units) - 1, -1, -1):
        if units[i].first.role == "user":
            return units[i:]
    return units[-1:]


def s_llm_summaries(s: Session) -> list[Summary]:
    """Compression summaries the LLM wrote: they may say more than an extract of the same
    entries, so a gap that covers one sends it (an extractive one says what the pool says)."""
    return [sm for sm in s.summaries.values() if sm.source == "llm"]


def _dedupe(text: str, plan: Plan, tl: Timeline) -> str:
    """Rolling-summary lines whose facts the window already holds, or that state a value a
    later entry superseded, are left out."""
    have = "\n".join(g.text for g in plan.gaps)
    stale = [tl.an.cands[eid][k].text for eid, k in tl.an.sup.by]
    keep = []
    for ln in text.splitlines():
        body = ln.split(": ", 1)[-1].strip()
        if body and body in have:
            continue
        if any(t in ln for t in stale):
            continue
        keep.append(ln)
    return "\n".join(keep)


def _cap(text: str, tokens: int, enc: Any) -> str:
    toks = enc.encode_ordinary(text)
    if len(toks) <= tokens:
        return text
    cut = enc.decode(toks[:tokens])
    end = max(cut.rfind(". "), cut.rfind("\n"))
    return (cut[: end + 1] if end > len(cut) // 2 else cut.rsplit(" ", 1)[0]) + " ..."


def _why(plan: Plan, cfg: Any) -> str:
    pct = f"{plan.usage:.0%}"
    if plan.over_budget:
        return (f"emergency: the history is {pct} of the budget and the pinned entries and "
                f"system prompts alone exceed it; only they are sent")
    if not plan.pruned:
        return (f"{pct} of the budget, under the {cfg.prune_threshold:.0%} prune threshold: "
                f"everything is kept")
    mode = {"prune": "pruning low-value entries",
            "aggressive": "aggressive pruning with summaries",
            "emergency": "emergency pruning without LLM summaries"}[plan.band]
    return (f"{pct} of the budget ({plan.band}): {mode}; kept the system prompt, pinned "
            f"entries, the current exchange and the highest-scored entries per token; what did "
            f"not fit is sent as summaries of its facts")
