"""The budgeted context window (seed 001): what the LLM receives now.

A session's *timeline* is its active entries plus the compression summaries that replaced older
ones, in log order, grouped into *units*: one entry, one summary, or an assistant tool call with
all its tool results (kept or dropped together, so the list is always valid for the chat API).

``plan()`` decides, without calling any LLM:

* full tokens / budget -> band: ok < 60 % <= warn < 80 % <= prune < 90 % <= aggressive <= 100 %
  < emergency. Up to the prune threshold everything is kept.
* otherwise pinned units and system prompts are kept, the rolling summary if it fits, then the
  other units by importance (seed 001 score) while they fit into ``target_usage`` of the budget;
  runs of dropped entries (gaps) of ``min_gap_for_summary`` or more are summarized, shorter ones
  replaced by an omission marker.

``ContextBuilder.context()`` turns a plan into chat messages, fetching gap summaries from the
LLM within a deadline (never in emergency mode), and guarantees the result fits the budget unless
the mandatory units alone exceed it (flagged ``over_budget``).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from memman_daemon.engine import scoring
from memman_daemon.engine.summarizer import fallback_summary
from memman_daemon.model import Entry, Session, Summary
from memman_daemon.tokens import REPLY_PRIMING

if TYPE_CHECKING:
    from memman_daemon.core import Core

BANDS = ("ok", "warn", "prune", "aggressive", "emergency")


def _only_appended(old: tuple, new: tuple) -> bool:
    """Keys (session object, entries, active entries, summaries, version): the log only grew,
    every new entry is active, and nothing was pinned, compressed, cleared or imported."""
    grown = new[1] - old[1]
    return (old[0] == new[0] and old[3:] == new[3:] and grown > 0
            and new[2] - old[2] == grown)


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


@dataclass
class Unit:
    """Entries (or one summary) that enter or leave the context together."""

    index: int  #: position in the timeline
    items: list[Entry | Summary]
    tokens: int
    static: float  #: max role/content score part over the items
    mandatory: str = ""  #: "pinned" / "system" when it always stays
    invalid: str = ""  #: why it can never be sent (broken tool pairing)
    pending: set[str] = field(default_factory=set)  #: tool_call ids still without a result

    @property
    def is_summary(self) -> bool:
        return isinstance(self.items[0], Summary)

    def messages(self) -> list[dict[str, Any]]:
        if self.is_summary:
            sm = self.items[0]
            return [{"role": "system", "content": sm.content}]
        return [e.chat_message() for e in self.items]


PENDING = "tool call whose results are not (all) in the log yet"


@dataclass
class Timeline:
    key: tuple
    units: list[Unit]
    entry_unit: dict[int, Unit]  #: active entry id -> its unit
    # what extending the timeline with newly appended entries needs
    open_calls: dict[str, Unit] = field(default_factory=dict)  #: call id -> unit awaiting it
    seen_summaries: set[int] = field(default_factory=set)
    consumed: int = 0  #: entries of the session's log already turned into units


@dataclass
class Gap:
    units: list[Unit]
    count: int  #: entries and summaries in the gap
    tokens: int
    summarize: bool
    reason: str = ""
    text: str = ""
    source: str = ""  #: "llm" / "fallback" / "marker"
    message_tokens: int = 0

    @property
    def first_id(self) -> int:
        return self.units[0].items[0].id

    @property
    def last_id(self) -> int:
        return self.units[-1].items[-1].id

    def key(self, session_id: str) -> tuple:
        return (session_id, self.first_id, self.last_id, self.count)

    def items(self) -> list[Entry]:
        out: list[Entry] = []
        for u in self.units:
            for it in u.items:
                if isinstance(it, Summary):
                    out.append(Entry(id=it.id, session_id=it.session_id, type="summary",
                                     role="system", content=it.content, tokens=it.tokens,
                                     created_at=it.start))
                else:
                    out.append(it)
        return out


@dataclass
class Plan:
    session: Session
    budget: int
    model: str
    full_tokens: int
    usage: float
    band: str
    units: list[Unit]
    selected: set[int]  #: unit indexes kept (mandatory included)
    scores: dict[int, float]  #: unit index -> importance
    gaps: list[Gap]
    rolling: dict[str, Any] | None  #: the rolling-summary message, or None
    rolling_tokens: int
    rolling_reason: str
    over_budget: bool
    pruned: bool
    target_tokens: int


class ContextBuilder:
    """Per-session timeline caches and the context algorithm."""

    def __init__(self, core: Core) -> None:
        self.core = core
        self._timelines: dict[str, Timeline] = {}
        self._static: dict[int, float] = {}  #: entry/summary id -> static score part
        self._gap_text: dict[tuple, str] = {}  #: gap key -> LLM summary text (bounded)
        self._gap_fallback: dict[tuple, str] = {}  #: gap key -> fallback summary (bounded)
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
        if len(self._gap_text) > 4096:
            self._gap_text.clear()

    # --- the timeline ---------------------------------------------------------------
    def timeline(self, s: Session) -> Timeline:
        key = (id(s), len(s.entries), s.active_count, len(s.summaries), self.versions.get(s.id, 0))
        tl = self._timelines.get(s.id)
        if tl is not None and tl.key == key:
            return tl
        if tl is not None and _only_appended(tl.key, key):
            # the common case (an agent added entries): extend, O(new entries), not O(log)
            self._consume(tl, s, s.entries[tl.consumed:])
            tl.key = key
            return tl
        tl = Timeline(key, [], {})
        self._consume(tl, s, s.entries)
        self._timelines[s.id] = tl
        return tl

    def _consume(self, tl: Timeline, s: Session, entries: list[Entry]) -> None:
        """Turn log entries into units, appending to ``tl``."""
        cfg = self.core.config
        sc = cfg.scoring
        keep_system = cfg.context.keep_system_prompts
        static = self._static
        units, entry_unit, open_calls = tl.units, tl.entry_unit, tl.open_calls
        for e in entries:
            if e.summary_id is not None:
                if e.summary_id in tl.seen_summaries:
                    continue
                tl.seen_summaries.add(e.summary_id)
                sm = s.summaries.get(e.summary_id)
                if sm is None:
                    continue
                st = static.get(sm.id)
                if st is None:
                    st = static[sm.id] = scoring.summary_static_score(sm, sc)
                units.append(Unit(len(units), [sm], sm.tokens, st))
                continue
            st = static.get(e.id)
            if st is None:
                st = static[e.id] = scoring.static_score(e, sc)
            if e.role == "tool":
                owner = open_calls.pop(e.tool_call_id or "", None)
                if owner is not None:
                    owner.items.append(e)
                    owner.tokens += e.tokens
                    owner.static = max(owner.static, st)
                    owner.pending.discard(e.tool_call_id or "")
                    if not owner.pending and owner.invalid == PENDING:
                        owner.invalid = ""  # its last result arrived
                    if e.pinned:
                        owner.mandatory = "pinned"
                    entry_unit[e.id] = owner
                    continue
                u = Unit(len(units), [e], e.tokens, st,
                         invalid="tool result without its tool call in the active log")
            else:
                u = Unit(len(units), [e], e.tokens, st)
                if e.tool_calls:
                    u.pending = {c["id"] for c in e.tool_calls}
                    for cid in u.pending:
                        open_calls[cid] = u
            if e.pinned:
                u.mandatory = "pinned"
            elif keep_system and e.role == "system" and e.type == "message":
                u.mandatory = "system"
            units.append(u)
            entry_unit[e.id] = u
        tl.consumed = len(s.entries)
        for u in open_calls.values():
            if u.pending and not u.invalid:
                u.invalid = PENDING

    def message_tokens(self, msg: dict[str, Any], model: str) -> int:
        key = (msg["role"], msg["content"] or "")
        n = self._msg_tokens.get(key)
        if n is None:
            if len(self._msg_tokens) > 4096:
                self._msg_tokens.clear()
            n = self._msg_tokens[key] = self.core.tokens.count_message(msg, model)
        return n

    def rolling_message(self, s: Session) -> dict[str, Any] | None:
        if not self.core.config.context.include_rolling_summary or not s.meta.summary:
            return None
        return {"role": "system", "content": "[Conversation summary]\n" + s.meta.summary}

    # --- the plan ------------------------------------------------------------------
    def plan(self, s: Session, budget: int | None = None, model: str | None = None) -> Plan:
        cfg = self.core.config.context
        budget = budget or s.meta.max_tokens or cfg.max_tokens
        model = model or s.meta.model
        units = self.timeline(s).units
        n = len(units)
        rolling = self.rolling_message(s)
        rolling_tokens = self.message_tokens(rolling, model) if rolling else 0
        valid_tokens = sum(u.tokens for u in units if not u.invalid)
        full = valid_tokens + rolling_tokens + REPLY_PRIMING
        usage = full / budget
        band = band_for(usage, cfg)
        rw = self.core.config.scoring.recency_weight
        denom = max(n - 1, 1)
        scores = {u.index: min(u.static + rw * (u.index / denom), 1.0) for u in units}
        plan = Plan(s, budget, model, full, usage, band, units, set(), scores, [], rolling,
                    rolling_tokens, "", False, False, int(cfg.target_usage * budget))
        if usage < cfg.prune_threshold:
            plan.selected = {u.index for u in units if not u.invalid}
            plan.rolling_reason = "included" if rolling else ""
            plan.gaps = self._gaps(plan) if any(u.invalid for u in units) else []
            return plan
        plan.pruned = True
        mandatory = [u for u in units if u.mandatory and not u.invalid]
        mand_tokens = sum(u.tokens for u in mandatory)
        plan.selected = {u.index for u in mandatory}
        if mand_tokens + REPLY_PRIMING > budget:
            plan.over_budget = True
            plan.rolling = None
            plan.rolling_reason = "dropped: pinned entries and system prompts alone exceed the budget"
            plan.gaps = self._gaps(plan)
            return plan
        remaining = plan.target_tokens - mand_tokens - REPLY_PRIMING
        if rolling:
            if rolling_tokens < remaining:
                remaining -= rolling_tokens
                plan.rolling_reason = "included"
            else:
                plan.rolling = None
                plan.rolling_reason = "dropped: does not fit the target with the pinned entries"
        candidates = [u for u in units if not u.mandatory and not u.invalid]
        candidates.sort(key=lambda u: (scores[u.index], u.index), reverse=True)
        for u in candidates:
            if remaining <= 0:
                break
            if remaining - u.tokens > 0:
                plan.selected.add(u.index)
                remaining -= u.tokens
        plan.gaps = self._gaps(plan)
        return plan

    def _gaps(self, plan: Plan) -> list[Gap]:
        min_gap = self.core.config.context.min_gap_for_summary
        gaps: list[Gap] = []
        run: list[Unit] = []

        def close() -> None:
            if run:
                count = sum(len(u.items) for u in run)
                gaps.append(Gap(list(run), count, sum(u.tokens for u in run),
                                summarize=count >= min_gap))
                run.clear()

        for u in plan.units:
            if u.index in plan.selected:
                close()
            else:
                run.append(u)
        close()
        return gaps

    # --- the context ----------------------------------------------------------------
    async def context(self, s: Session, budget: int | None = None,
                      model: str | None = None) -> dict[str, Any]:
        plan = self.plan(s, budget, model)
        self.counters["contexts"] += 1
        cfg = self.core.config.context
        emergency = plan.band == "emergency"
        if plan.pruned:
            self.counters["pruned"] += 1
        if emergency:
            self.counters["emergencies"] += 1
        if plan.over_budget:
            self.counters["over_budget"] += 1
        await self._fill_gaps(plan, emergency)
        # fit the budget: gap summaries become markers, then markers go
        kept_tokens = sum(plan.units[i].tokens for i in plan.selected)
        total = kept_tokens + plan.rolling_tokens * bool(plan.rolling) + REPLY_PRIMING
        total += sum(g.message_tokens for g in plan.gaps)
        if total > plan.budget and not plan.over_budget:
            total = self._fit(plan, total)
        if plan.over_budget:
            for g in plan.gaps:
                total -= g.message_tokens
                g.message_tokens = 0
                g.source = "none"
        self.counters["markers"] += sum(g.source == "marker" for g in plan.gaps)
        messages = self._messages(plan)
        gaps_out = [{"first_id": g.first_id, "last_id": g.last_id, "count": g.count,
                     "tokens": g.tokens, "action": _action(g), "source": g.source,
                     "reason": g.reason} for g in plan.gaps]
        dropped = sum(g.count for g in plan.gaps)
        return {
            "session_id": s.id,
            "messages": messages,
            "tokens": total,
            "budget": plan.budget,
            "full_tokens": plan.full_tokens,
            "usage": round(plan.usage, 4),
            "final_usage": round(total / plan.budget, 4),
            "band": plan.band,
            "pruned": plan.pruned,
            "emergency": emergency,
            "over_budget": plan.over_budget,
            "model": plan.model,
            "encoding": self.core.tokens.encoding_name(plan.model),
            "target_tokens": plan.target_tokens if plan.pruned else plan.budget,
            "kept_entries": sum(len(plan.units[i].items) for i in plan.selected),
            "dropped_entries": dropped,
            "summarized_entries": sum(g.count for g in plan.gaps if _action(g) == "summarized"),
            "gaps": gaps_out,
            "rolling_summary": plan.rolling_reason,
            "why": _why(plan, cfg),
        }

    def _fit(self, plan: Plan, total: int) -> int:
        """Shrink gap messages until the context fits: drop the markers of the smallest gaps
        first, then turn summaries into markers, then drop those markers too."""
        def drop_marker(g: Gap, why: str) -> int:
            g.source = "none"
            g.reason += "; " + why
            n, g.message_tokens = g.message_tokens, 0
            return n

        for g in sorted((g for g in plan.gaps if g.source == "marker"), key=lambda g: g.count):
            if total <= plan.budget:
                return total
            total -= drop_marker(g, "no room left for an omission marker")
        summarized = sorted((g for g in plan.gaps if g.source in ("llm", "fallback")),
                            key=lambda g: g.message_tokens, reverse=True)
        for g in summarized:
            if total <= plan.budget:
                return total
            total -= g.message_tokens
            self._marker(g, plan.model, "omitted: no room left for its summary")
            total += g.message_tokens
        for g in sorted(summarized, key=lambda g: g.count):
            if total <= plan.budget:
                return total
            total -= drop_marker(g, "no room left for an omission marker")
        return total

    def _marker(self, g: Gap, model: str, reason: str) -> None:
        g.text = f"[{g.count} message{'s' if g.count != 1 else ''} omitted]"
        g.source = "marker"
        g.reason = reason
        g.message_tokens = self.message_tokens(
            {"role": self.core.config.context.gap_role, "content": g.text}, model)

    async def _fill_gaps(self, plan: Plan, emergency: bool) -> None:
        cfg = self.core.config.context
        summarizer = self.core.summarizer
        sid = plan.session.id
        waits = []
        for g in plan.gaps:
            if all(u.invalid for u in g.units):
                self._marker(g, plan.model, "omitted: " + g.units[0].invalid)
                g.source = "none"
                g.message_tokens = 0
                continue
            if not g.summarize or (emergency and not cfg.emergency_gap_summaries):
                why = (f"omitted: a gap of {g.count} < {cfg.min_gap_for_summary} entries"
                       if not g.summarize else "omitted: emergency mode, no summaries")
                self._marker(g, plan.model, why)
                continue
            g.reason = (f"summarized: a gap of {g.count} >= {cfg.min_gap_for_summary} entries"
                        + ("; emergency mode, no LLM" if emergency else ""))
            key = g.key(sid)
            cached = self._gap_text.get(key)
            if cached is not None:
                self._set_summary(g, cached, "llm", plan.model)
                continue
            text = self._gap_fallback.get(key)
            if text is None:  # deterministic, and a gap's entries never change: compute once
                if len(self._gap_fallback) > 4096:
                    self._gap_fallback.clear()
                text = self._gap_fallback[key] = fallback_summary(g.items())
                summarizer.count_fallback("emergency" if emergency else
                                          None if summarizer.available else "no_key")
            self._set_summary(g, text, "fallback", plan.model)
            now = self.core.clock.monotonic()
            if (not emergency and summarizer.available
                    and self._gap_inflight.get(key, -1e18) < now
                    and len(waits) < cfg.max_gap_llm_calls):
                # a failed or late call may be retried after the LLM timeout has passed
                self._gap_inflight[key] = now + self.core.config.llm.timeout_s + 1.0
                waits.append((g, key))
        if not waits:
            return

        async def one(g: Gap, key: tuple) -> None:
            def late(text: str, key: tuple = key) -> None:
                self._gap_text[key] = text
                self._gap_inflight.pop(key, None)
            text, source = await summarizer.summarize_entries(
                g.items(), target_tokens=cfg.gap_summary_max_tokens, session_id=sid,
                deadline=cfg.llm_deadline_s, on_late=late)
            if source == "llm":
                self._gap_text[key] = text
                self._gap_inflight.pop(key, None)
                self._set_summary(g, text, "llm", plan.model)

        await asyncio.gather(*(one(g, k) for g, k in waits))

    def _set_summary(self, g: Gap, text: str, source: str, model: str) -> None:
        cfg = self.core.config.context
        enc = self.core.tokens.encoding(model)
        toks = enc.encode(text, disallowed_special=())
        if len(toks) > cfg.gap_summary_max_tokens:
            text = enc.decode(toks[: cfg.gap_summary_max_tokens]) + " ..."
        g.text = f"[Summary of {g.count} earlier messages: {text}]"
        g.source = source
        if source == "llm":
            self.counters["gap_llm"] += 1
        self.counters["gap_summaries"] += 1
        g.message_tokens = self.message_tokens({"role": cfg.gap_role, "content": g.text}, model)

    def _messages(self, plan: Plan) -> list[dict[str, Any]]:
        role = self.core.config.context.gap_role
        gap_at = {g.units[0].index: g for g in plan.gaps}
        out: list[dict[str, Any]] = []
        rolling_done = plan.rolling is None
        for u in plan.units:
            if not rolling_done and u.mandatory != "system":
                out.append(plan.rolling)
                rolling_done = True
            g = gap_at.get(u.index)
            if g is not None and g.message_tokens:
                out.append({"role": role, "content": g.text})
            if u.index in plan.selected:
                out.extend(u.messages())
        if not rolling_done:
            out.append(plan.rolling)
        return out


def _action(g: Gap) -> str:
    if g.source in ("llm", "fallback"):
        return "summarized"
    if g.source == "marker":
        return "omitted"
    return "dropped"


def _why(plan: Plan, cfg: Any) -> str:
    pct = f"{plan.usage:.0%}"
    if plan.over_budget:
        return (f"emergency: the history is {pct} of the budget and the pinned entries and "
                f"system prompts alone exceed it; only they are sent")
    if not plan.pruned:
        return (f"{pct} of the budget, under the {cfg.prune_threshold:.0%} prune threshold: "
                f"everything is kept")
    mode = {"prune": "pruning low-importance entries",
            "aggressive": "aggressive pruning with summaries",
            "emergency": "emergency pruning without LLM summaries"}[plan.band]
    return (f"{pct} of the budget ({plan.band}): {mode}; kept pinned entries, system prompts and "
            f"the highest-scored entries up to {cfg.target_usage:.0%} of the budget")


def preview(builder: ContextBuilder, s: Session, budget: int | None = None,
            model: str | None = None) -> dict[str, Any]:
    """Per entry: what ``context`` would do now, with its score and the reason. Changes nothing."""
    plan = builder.plan(s, budget, model)
    cfg = builder.core.config.context
    tl = builder.timeline(s)
    gap_of: dict[int, Gap] = {}
    for g in plan.gaps:
        for u in g.units:
            gap_of[u.index] = g
    rows: list[dict[str, Any]] = []
    for e in s.entries:
        row: dict[str, Any] = {"entry_id": e.id, "type": e.type, "role": e.role,
                               "tokens": e.tokens, "pinned": e.pinned}
        if e.summary_id is not None:
            row.update(decision="compressed", score=None, summary_id=e.summary_id,
                       reason=f"compressed into summary {e.summary_id} (expand to see it)")
            rows.append(row)
            continue
        u = tl.entry_unit.get(e.id)
        if u is None:
            continue
        row["score"] = round(plan.scores[u.index], 4)
        row["unit"] = u.index
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
                row.update(decision="kept", reason=f"score {plan.scores[u.index]:.2f} fits the "
                                                   f"{cfg.target_usage:.0%} target")
        else:
            g = gap_of[u.index]
            if plan.over_budget:
                decision = "dropped"
                reason = "pinned entries and system prompts alone exceed the budget"
            elif g.summarize and not (plan.band == "emergency" and not cfg.emergency_gap_summaries):
                decision = "summarized"
                reason = (f"score {plan.scores[u.index]:.2f} lost to higher-scored entries; "
                          f"its gap of {g.count} >= {cfg.min_gap_for_summary} is summarized"
                          + (" without the LLM (emergency)" if plan.band == "emergency" else ""))
            else:
                decision = "omitted"
                reason = (f"score {plan.scores[u.index]:.2f} lost to higher-scored entries; "
                          f"its gap of {g.count} is replaced by an omission marker")
            row.update(decision=decision, reason=reason, gap=[g.first_id, g.last_id])
        if len(u.items) > 1:
            row["group"] = [it.id for it in u.items]
        rows.append(row)
    summaries = []
    for u in tl.units:
        if u.is_summary:
            sm = u.items[0]
            kept = u.index in plan.selected
            summaries.append({"summary_id": sm.id, "tokens": sm.tokens,
                              "score": round(plan.scores[u.index], 4),
                              "decision": "kept" if kept else
                              ("summarized" if gap_of[u.index].summarize else "omitted")})
    return {"session_id": s.id, "budget": plan.budget, "full_tokens": plan.full_tokens,
            "usage": round(plan.usage, 4), "band": plan.band, "pruned": plan.pruned,
            "over_budget": plan.over_budget, "target_tokens": plan.target_tokens,
            "rolling_summary": plan.rolling_reason, "entries": rows, "summaries": summaries,
            "why": _why(plan, cfg)}
