"""SessionEngine: the session pipeline's mutations (finalize, compress, pin, clear, import,
usage) and its reads (context, preview, expand, export); it owns the per-session locks and
the background compression.

Every mutation goes through the session log (``Sessions``): entries enter by ``append``; other
changes are made on the in-memory objects and committed by ``Sessions.commit`` (which restores
the session from disk if the commit fails); then a ``session`` event is published. Mutations of one session are serialized by a per-session lock.
Automatic compression runs in the background after ``entry_added`` events.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import TYPE_CHECKING, Any

from memman.errors import CONFLICT, MemmanError, invalid_params, not_found
from memman.types import Compaction, ContextAnswer, Preview
from memman_daemon.component import Component
from memman_daemon.engine import compression, cycles, portability, usage
from memman_daemon.engine.window.builder import ContextBuilder
from memman_daemon.engine.window.request import Request
from memman_daemon.engine.window.timeline import Timelines
from memman_daemon.model import Cycle, Exchange, Session, SessionMeta
from memman_daemon.scope import owner_conflict
from memman_daemon.sessions import Sessions

if TYPE_CHECKING:
    from memman.config import Config
    from memman_daemon.background import BackgroundShare
    from memman_daemon.clock import Clock
    from memman_daemon.events import EventBus
    from memman_daemon.llm.summarizer import Summarizer
    from memman_daemon.recall.index import RecallIndex
    from memman_daemon.search.embeddings import Embedder
    from memman_daemon.storage.sqlite.store import Op
    from memman_daemon.tiers.audit import Recorder
    from memman_daemon.tiers.cache import ToolCache
    from memman_daemon.tokens import TokenCounter

log = logging.getLogger(__name__)


class SessionEngine(Component):
    stats_key = "session_engine"

    def __init__(self, *, config: Config, clock: Clock, events: EventBus,
                 tokens: TokenCounter, sessions: Sessions, summarizer: Summarizer,
                 embedder: Embedder, audit: Recorder, cache: ToolCache,
                 background: BackgroundShare, recall: RecallIndex | None = None) -> None:
        self.config, self.clock, self.events, self.tokens = config, clock, events, tokens
        #: automatic compression is background work: it runs within this time budget
        self.background = background
        self.sessions, self.summarizer, self.audit = sessions, summarizer, audit
        self.cache = cache  #: its cached tool results ride in the context; cycles age them
        #: every session's units, analysed once (compression and the window read them); the
        #: analysis follows the log in the background, within the same time budget
        self.timelines = Timelines(config, background)
        self.recall = recall  #: the one retriever: this session and the user's past ones
        self.builder = ContextBuilder(config=config, clock=clock, tokens=tokens,
                                      timelines=self.timelines, recall=recall,
                                      sessions=sessions.by_id)
        self._locks: dict[str, asyncio.Lock] = {}
        self._compacting: dict[str, asyncio.Task] = {}
        self._again: set[str] = set()
        self._sweeper: asyncio.Task | None = None
        #: sessions whose background work failed: id -> {error, at, failures, retry_at}; left
        #: alone until retry_at (compression.quarantine_retry_s), reported in stats
        self.quarantine: dict[str, dict[str, Any]] = {}
        self._quarantined: dict[str, Session] = {}  #: the session object that failed
        self.last_context: dict[str, int] = {}  #: session id -> tokens of the last context
        self.counters = {"finalized": 0, "compressions": 0, "entries_compressed": 0,
                         "compression_llm": 0, "imports": 0, "clears": 0, "usage_reports": 0}

    # --- component -------------------------------------------------------------------
    async def load(self) -> None:
        self._sweeper = asyncio.get_running_loop().create_task(self._sweep())

    async def close(self) -> None:
        tasks = [t for t in [self._sweeper, *self._compacting.values()] if t is not None]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.timelines.close()

    def stats(self) -> dict[str, Any]:
        return {**self.counters, "context": dict(self.builder.counters),
                "compacting": len(self._compacting),
                "analysis_pending": self.timelines.pending(),
                "quarantined": {sid: {k: v for k, v in q.items() if k != "retry_mono"}
                                for sid, q in self.quarantine.items()}}

    def lock(self, session_id: str) -> asyncio.Lock:
        lk = self._locks.get(session_id)
        if lk is None:
            lk = self._locks[session_id] = asyncio.Lock()
        return lk

    def _publish(self, s: Session, kind: str, data: dict[str, Any]) -> None:
        self.events.publish("session", kind, data, **Sessions.scope(s))

    def _alive(self, s: Session) -> bool:
        return self.sessions.by_id.get(s.id) is s

    # --- automatic compression -----------------------------------------------------
    async def _sweep(self) -> None:
        """Every ``compression.check_interval_s``: start compression where the active set is
        over its limits, and drop caches of deleted sessions. (Two integer comparisons per
        session; adds themselves stay untouched.)"""
        cfg = self.config.compression
        while True:
            await asyncio.sleep(cfg.check_interval_s)
            try:
                by_id = self.sessions.by_id
                for sid in [k for k, s in self._quarantined.items() if by_id.get(k) is not s]:
                    self.quarantine.pop(sid, None)  # deleted or imported: a new start
                    self._quarantined.pop(sid, None)
                for sid in [k for k in self.timelines.versions if k not in by_id]:
                    self.timelines.forget(sid)
                    self.timelines.versions.pop(sid, None)
                    self.last_context.pop(sid, None)
                    self._locks.pop(sid, None)
                if cfg.auto_compress:
                    for s in list(by_id.values()):
                        self.maybe_compress(s)
            except Exception:
                log.exception("compression sweep failed")

    def maybe_compress(self, s: Session) -> None:
        """Start background compression of ``s`` if it is over the limits (the compression design)."""
        if not self.config.compression.auto_compress:
            return
        if not compression.needs_compression(s, self.config.compression):
            return
        q = self.quarantine.get(s.id)
        if q is not None and self._quarantined.get(s.id) is s and \
                self.clock.monotonic() < q["retry_mono"]:
            return
        if s.id in self._compacting:
            self._again.add(s.id)
            return
        self._compacting[s.id] = asyncio.get_running_loop().create_task(self._auto(s.id))

    async def _auto(self, sid: str) -> None:
        try:
            while True:
                self._again.discard(sid)
                s = self.sessions.by_id.get(sid)
                if s is None or not compression.needs_compression(s, self.config.compression):
                    return
                try:
                    # the per-entry analysis first, a slice at a time within the background
                    # share; then one batch folded
                    await self.timelines.catch_up(s, self.background)
                    if not self._alive(s):
                        return
                    done = await self.compact(s, deadline=None, paced=True)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # noqa: BLE001 - quarantined, never a loop of tracebacks
                    # a failed commit restored the session from disk: the timeline cached for
                    # the entries it replaced must not be planned on again
                    self.timelines.forget(sid)
                    self._quarantine(s, exc)
                    return
                if self.quarantine.pop(sid, None) is not None:
                    self._quarantined.pop(sid, None)
                    log.info("automatic compression of session %s works again", sid)
                if done is None and sid not in self._again:
                    return
        finally:
            self._compacting.pop(sid, None)

    def _quarantine(self, s: Session, exc: Exception) -> None:
        """Leave ``s`` alone after its background work failed: logged (a traceback the first
        time, one line after), reported under ``quarantined`` in stats, tried again after
        ``compression.quarantine_retry_s`` or as soon as the session is imported or
        deleted."""
        prev = self.quarantine.get(s.id) if self._quarantined.get(s.id) is s else None
        error = f"{type(exc).__name__}: {exc}"
        retry = self.config.compression.quarantine_retry_s
        failures = (prev["failures"] if prev else 0) + 1
        self.quarantine[s.id] = {"error": error[:500], "at": self.clock.now(),
                                 "failures": failures, "retry_in_s": retry,
                                 "retry_mono": self.clock.monotonic() + retry}
        self._quarantined[s.id] = s
        if prev is None or prev["error"] != error[:500]:
            log.error("automatic compression of session %s failed; the session is quarantined "
                      "(left alone for %.0f s; memman status lists it)", s.id, retry,
                      exc_info=exc)
        else:
            log.warning("automatic compression of session %s failed again (%d times): %s",
                        s.id, failures, error)

    async def compact(self, s: Session, *, deadline: float | None,
                      paced: bool = False) -> dict[str, Any] | None:
        """Compress everything older than the recent window now; None if nothing qualifies.
        ``paced`` (automatic compression): at most ``compression.AUTO_BATCH`` entries, chosen
        and summarized within the background share."""
        cfg = self.config.compression
        async with self.lock(s.id):
            if not self._alive(s):
                return None
            async with self.background.turn() if paced else contextlib.nullcontext():
                tl = self.timelines.timeline(s)
                entries = compression.select(tl, cfg, compression.AUTO_BATCH if paced else None)
                if not entries:
                    return None
                original = sum(e.tokens for e in entries)
                target = max(int(original * cfg.ratio), 16)
                known = {e.id: tl.an.cands[e.id] for e in entries if e.id in tl.an.cands}
            # the extractive summary of up to a thousand entries takes a few hundred ms: in a
            # worker thread (pure: the entries and their cached analysis), so the other clients
            # are not held behind it
            fallback = await asyncio.to_thread(self.summarizer.extractive, entries, target,
                                               known)
            text, source = await self.summarizer.summarize_entries(
                entries, target_tokens=target, session_id=s.id, deadline=deadline,
                fallback=fallback)
            if not self._alive(s) or any(e.summary_id is not None for e in entries):
                return None
            content = compression.summary_content(entries, text)
            tokens = self.tokens.count_message({"role": "system", "content": content},
                                                    s.meta.model)
            sm = compression.make_summary(self.sessions.next_id(), s, entries, content,
                                          tokens, source, self.clock.now())
            s.meta.counters["compressions"] = s.meta.counters.get("compressions", 0) + 1
            if source == "llm":
                s.meta.counters["compression_llm"] = s.meta.counters.get("compression_llm", 0) + 1
            # the context timeline stays: it holds every entry, compressed or not
            await self.sessions.fold(s, sm, entries)
            self.counters["compressions"] += 1
            self.counters["entries_compressed"] += len(entries)
            if source == "llm":
                self.counters["compression_llm"] += 1
            result = {"summary": compression.summary_wire(sm),
                      "tokens_saved": sm.original_tokens - sm.tokens,
                      "session": s.overview()}
            self._publish(s, "compressed", result)
            return result

    # --- cycles (the Q&A-cycle design) -----------------------------------------------------------
    async def finalize(self, s: Session, question: str, answer: str) -> dict[str, Any]:
        ccfg = self.config.cycle
        summ = self.summarizer
        # the cycle this call ends; a concurrent finalize that ends it first wins
        cycle_no = s.meta.counters.get("cycles", 0)
        async with self.lock(s.id):
            if not self._alive(s):
                raise not_found("session", s.id)
            prev = s.meta.exchanges[-1] if s.meta.exchanges else None
            again = (prev is not None and not cycles.cycle_entries(s) and s.meta.cycle.start_id
                     and prev.question == question and (prev.answer == answer or prev.summarized)
                     and prev.answer_bytes == len(answer.encode()))
            if s.meta.counters.get("cycles", 0) != cycle_no or again:
                raise MemmanError(CONFLICT, f"this cycle of session {s.id!r} was already "
                                  "finalized (by a concurrent call with the same question and "
                                  "answer); nothing was recorded. Finalize once per cycle")
            m = s.meta
            now = self.clock.now()
            current = cycles.cycle_entries(s)
            new = []
            if ccfg.log_answers:
                if question and not any(e.role == "user" and e.content == question for e in current):
                    new.append({"type": "message", "role": "user", "content": question})
                if answer and not any(e.role == "assistant" and e.content == answer
                                      for e in current):
                    new.append({"type": "message", "role": "assistant", "content": answer})
            added = [self.sessions.build_entry(s, raw) for raw in new]
            size = len(answer.encode())
            kept, summarized = answer, False
            if size > ccfg.answer_max_bytes:
                kept, src = await summ.condense_text(answer, target_bytes=ccfg.answer_target_bytes,
                                                     session_id=s.id, deadline=ccfg.llm_deadline_s)
                summarized = True
                _bump(m, "answers_summarized")
                if src == "llm":
                    _bump(m, "llm_answer_summaries")
            first = current[0].id if current else (added[0].id if added else 0)
            last = (added or current)[-1].id if (added or current) else 0
            m.exchanges.append(Exchange(question, kept, size, summarized, now, first, last))
            folded = 0
            compressed = False
            while len(m.exchanges) > ccfg.max_exchanges:
                oldest = m.exchanges.pop(0)
                m.summary += cycles.format_exchange(oldest, s)
                folded += 1
                if len(m.summary.encode()) > ccfg.summary_max_bytes:
                    m.summary, src = await summ.condense_text(
                        m.summary, target_bytes=ccfg.summary_target_bytes, keep="tail",
                        session_id=s.id, deadline=ccfg.llm_deadline_s)
                    compressed = True
                    _bump(m, "summary_compressions")
                    if src == "llm":
                        _bump(m, "llm_compressions")
            last_id = added[-1].id if added else (s.entries[-1].id if s.entries else 0)
            agent_ids = [e.id for e in current + added if e.role != "user"]
            m.cycle = Cycle(user_question="", agent_message_ids=[], final_answer=None,
                            start_id=last_id + 1)
            m.updated_at = max(m.updated_at, now)  # never behind the entries just logged
            _bump(m, "cycles")
            await self.sessions.append(s, added, meta=True)
            self.counters["finalized"] += 1
            await self._age_cache(s)
            self.maybe_compress(s)
            state = self.memory_state(s)
            result = {"exchange": vars(m.exchanges[-1]).copy(), "folded": folded,
                      "summary_compressed": compressed, "agent_message_ids": agent_ids,
                      "added_entry_ids": [e.id for e in added], "state": state}
            self._publish(s, "cycle_finalized", result)
            if folded or compressed:
                self._publish(s, "summary_updated", {"summary_bytes": state["summary_bytes"],
                                                     "folded": folded, "compressed": compressed})
            return result

    async def _age_cache(self, s: Session) -> None:
        """A finished cycle ages the session's cached tool results (durations decrement); a
        failure there is logged and does not undo the finished cycle."""
        try:
            await self.cache.on_cycle_finalized(s.id)
        except Exception:
            log.exception("ageing the tool cache after a cycle failed")

    def memory_state(self, s: Session) -> dict[str, Any]:
        """The Q&A-cycle design's stats, named as it names them."""
        m = s.meta
        return {"exchanges": len(m.exchanges), "summary_bytes": len(m.summary.encode()),
                "llm_compressions": m.counters.get("llm_compressions", 0),
                "summary_compressions": m.counters.get("summary_compressions", 0),
                "cycles": m.counters.get("cycles", 0)}

    # --- reads -------------------------------------------------------------------
    async def context(self, s: Session, opts: dict[str, Any]) -> ContextAnswer:
        """What the agent sends now; counts it and publishes ``pruned`` when entries were left out."""
        self.maybe_compress(s)
        out = await self.assemble(s, opts)
        self.last_context[s.id] = out["tokens"]
        if out["pruned"]:
            self._publish(s, "pruned", {k: out[k] for k in (
                "tokens", "budget", "history_tokens", "usage", "band", "emergency", "over_budget",
                "kept_entries", "dropped_entries", "summarized_entries")})
        return out

    def budget(self, s: Session, requested: int | None = None) -> int:
        """The budget of a request: the one asked for, else the session's, else ``[context]
        max_tokens`` — resolved here only (the window, the usage series, the series answer)."""
        return int(requested or s.meta.max_tokens or self.config.context.max_tokens)

    def request(self, s: Session, opts: dict[str, Any]) -> Request:
        """One context request with every default resolved here, once: the budget (option,
        else the session's, else the configured default), the model, the question, the tool
        definitions and the cached tool results that ride along."""
        budget, model, query, tools, recall = _opts(opts)
        budget = self.budget(s, budget)
        model = model or s.meta.model
        tool_tokens = self.tokens.count_tools(tools, model) if tools else 0
        cached, cached_tokens, note = self._cached_tools(s, budget - tool_tokens, model)
        return Request(budget, model, query or "", tool_tokens, cached, cached_tokens, note,
                       recall=recall)

    async def assemble(self, s: Session, opts: dict[str, Any]) -> ContextAnswer:
        """The context window (history within the budget, plus cached tool results), with no
        side effects: used by ``context`` and by the report."""
        return await self.builder.context(s, self.request(s, opts))

    async def preview(self, s: Session, opts: dict[str, Any]) -> Preview:
        out = await self.builder.preview(s, self.request(s, opts))
        out["compaction"] = self.compaction_preview(s)
        return out

    def compaction_preview(self, s: Session) -> Compaction:
        """What compression (the compression design) would fold next, and whether it would start by itself."""
        cfg = self.config.compression
        chosen = compression.select(self.timelines.timeline(s), cfg)
        return {"entry_ids": [e.id for e in chosen],
                "tokens": sum(e.tokens for e in chosen),
                "automatic": cfg.auto_compress and compression.needs_compression(s, cfg),
                "reason": (f"{len(chosen)} entries older than the newest {cfg.recent_window}"
                           if chosen else f"fewer than {cfg.min_entries} entries outside the "
                           f"newest {cfg.recent_window}, pinned entries and system prompts")}

    def _cached_tools(self, s: Session, budget: int,
                      model: str) -> tuple[list[dict[str, Any]], int, str]:
        """The Q&A-cycle design: cached tool results ride along in the context (their tokens are taken from
        the budget first). They are left out when they alone would use half the budget."""
        msgs = _not_in_log(self.cache.context_messages(s.id), s)
        if not msgs:
            return [], 0, ""
        tokens = sum(self.tokens.count_message(m, model) for m in msgs)
        if tokens * 2 > budget:
            return [], 0, (f"cached tool results ({tokens} tokens) left out: more than half "
                           f"the {budget}-token budget")
        return msgs, tokens, f"{len(msgs)} cached tool messages included ({tokens} tokens)"

    def expand(self, s: Session, summary_id: int) -> dict[str, Any]:
        sm = s.summaries.get(summary_id)
        if sm is None:
            raise not_found("summary", summary_id)
        return {"summary": compression.summary_wire(sm),
                "entries": [s.by_id[i].to_wire() for i in sm.entry_ids if i in s.by_id]}

    # --- pin / clear / import / usage -----------------------------------------------
    async def pin(self, s: Session, entry_id: int, pinned: bool, *, client: str | None = None,
                  ops: list[Op] | None = None) -> dict[str, Any]:
        """Pin or unpin an entry. With ``client``, a change is audited (``pin`` / ``unpin``,
        ``audit_id`` in the answer); ``ops`` (undo's record) go along. The entry's row and
        those rows commit in one transaction: no change stands without its audit row."""
        e = s.by_id.get(entry_id)
        if e is None:
            raise not_found("entry", entry_id)
        ops = list(ops or [])
        out: dict[str, Any] = {"entry_id": entry_id, "pinned": pinned}
        audit_id = None
        if e.pinned != pinned:
            before = e.pinned
            e.pinned = pinned
            if client is not None:
                rec, audit_op = self.audit.record(
                    "pin" if pinned else "unpin", e.content or "", f"session:{s.id}#{entry_id}",
                    "pinned" if pinned else "unpinned", client, **Sessions.scope(s),
                    entry_id=entry_id, previous=before, role=e.role, type=e.type)
                ops.append(audit_op)
                audit_id = rec.id
            self.timelines.invalidate(s.id)
            try:
                await self.sessions.save_entry(s, e, ops)
            finally:
                self.timelines.invalidate(s.id)
        elif ops:
            await self.sessions.commit(s, ops)
        self._publish(s, "pinned", out)
        return out if audit_id is None else {**out, "audit_id": audit_id}

    async def remove(self, s: Session, entry_id: int | None, client: str = "") -> dict[str, Any]:
        """Remove one entry (``entry_id``; None: the newest, i.e. pop) from the log, audited.

        A summary that linked the entry drops the link and says so: its ``removed_entry_ids``
        names the entry and a note is appended to its text (which may still reflect it).
        """
        async with self.lock(s.id):
            if entry_id is None:
                if not s.entries:
                    return {"removed": None, "summaries": [], "audit_id": None,
                            "session": s.overview()}
                e = s.entries[-1]
            elif (found := s.by_id.get(entry_id)) is None:
                raise not_found("entry", entry_id)
            else:
                e = found
            relinked = [sm for sm in s.summaries.values() if e.id in sm.entry_ids]
            for sm in relinked:
                sm.entry_ids = [i for i in sm.entry_ids if i != e.id]
                sm.removed_entry_ids.append(e.id)
                sm.original_tokens = max(0, sm.original_tokens - e.tokens)
                sm.content += (f"\n[Entry {e.id} ({e.role} {e.type}) was removed on request "
                               "after this summary was written; the summary no longer links it "
                               "and its text above may still reflect it.]")
                sm.tokens = self.tokens.count_message({"role": "system",
                                                            "content": sm.content}, s.meta.model)
                sm.ratio = round(sm.original_tokens / max(sm.tokens, 1), 3)
            if self.recall is not None:
                self.recall.removed(s, [e.id])
            cycle = s.meta.cycle
            meta = e.id in cycle.agent_message_ids
            if meta:
                cycle.agent_message_ids.remove(e.id)
            self.timelines.forget(s.id)
            what = e.content or _json_text(e.tool_calls)
            rec, audit_op = self.audit.record(
                "remove", what, f"session:{s.id}#{e.id}", "-", client, **Sessions.scope(s),
                entry_id=e.id, type=e.type, role=e.role, tokens=e.tokens,
                summary_ids=[sm.id for sm in relinked], pop=entry_id is None)
            await self.sessions.remove_entry(s, e, relinked, meta=meta, extra=[audit_op])
            out = {"removed": e.to_wire(),
                   "summaries": [{"summary_id": sm.id, "entry_ids": sm.entry_ids,
                                  "removed_entry_ids": sm.removed_entry_ids} for sm in relinked],
                   "audit_id": rec.id, "session": s.overview()}
            self._publish(s, "entry_removed", {**out, "entry_id": e.id, "client": client})
            return out

    async def clear(self, s: Session) -> dict[str, Any]:
        async with self.lock(s.id):
            n, k = len(s.entries), len(s.summaries)
            old = s.meta
            self.timelines.forget(s.id)
            self.last_context.pop(s.id, None)
            await self.sessions.clear(s, SessionMeta(
                user_id=old.user_id, tenant_id=old.tenant_id, model=old.model,
                max_tokens=old.max_tokens, created_at=old.created_at,
                updated_at=self.clock.now(),
                # who may see it outlives a clear: its recall opt-out, its agent and project
                recall=old.recall, agent=old.agent, project=old.project,
                recall_project=old.recall_project))
            self.timelines.forget(s.id)  # memory is cleared after the commit: a read between
            self.last_context.pop(s.id, None)
            self.counters["clears"] += 1
            out = {"entries_removed": n, "summaries_removed": k, "session": s.overview()}
            self._publish(s, "cleared", out)
            return out

    def _moved(self, existing: Session, s: Session, reassign: bool, client: str) -> list[Any]:
        """An import that replaces another owner's session (the scope's rule): -32002 unless
        ``reassign``, then the move's audit row (it commits with the import)."""
        old, new = existing.meta, s.meta
        moved = {k: (getattr(old, k), getattr(new, k)) for k in ("user_id", "tenant_id")
                 if getattr(old, k) != getattr(new, k)}
        if not moved:
            return []
        if not reassign:
            raise owner_conflict(s.id, old.user_id, old.tenant_id,
                                 {k: b for k, (_a, b) in moved.items()})
        _rec, op = self.audit.record(
            "reassign", ", ".join(f"{k} {a!r} -> {b!r}" for k, (a, b) in moved.items()),
            f"session:{s.id}", f"user:{new.user_id}", client, session_id=s.id,
            user_id=new.user_id, tenant_id=new.tenant_id,
            previous={k: a for k, (a, _b) in moved.items()})
        return [op]

    async def import_(self, data: dict[str, Any], opts: dict[str, Any],
                      client: str = "") -> dict[str, Any]:
        """Restore an export (``data`` checked whole against ``memman.schemas.EXPORT`` by the
        method's schema) under fresh ids, in one transaction; memory changes after the commit."""
        sessions = self.sessions
        sid = opts.get("session_id") or data.get("session_id")
        if not isinstance(sid, str) or not sid:
            raise invalid_params("opts.session_id", "name the session (or export one that has it)")
        replace = bool(opts.get("replace", False))
        async with self.lock(sid):
            existing = sessions.by_id.get(sid)
            if existing is not None and not replace:
                raise MemmanError(CONFLICT, f"session {sid!r} exists; pass opts.replace=true to "
                                            "overwrite it or opts.session_id to import under "
                                            "another name")
            s = await portability.parse_off_loop(data, sid, sessions)
            audit: list[Any] = []
            if existing is not None:
                audit = self._moved(existing, s, bool(opts.get("reassign", False)), client)
            await sessions.replace(s, existing, audit)
            self.timelines.forget(sid)
            self.counters["imports"] += 1
            out = {"session_id": sid, "entries": len(s.entries), "summaries": len(s.summaries),
                   "ids_remapped": True, "session": s.overview()}
            self._publish(s, "imported", out)
            return out

    async def report_usage(self, s: Session, prompt_tokens: int,
                           completion_tokens: int) -> dict[str, Any]:
        rec = usage.record(s.meta, self.clock.now(), prompt_tokens, completion_tokens,
                           self.last_context.get(s.id), self.config.context.usage_history)
        await self.sessions.save_meta(s)
        self.counters["usage_reports"] += 1
        out = {"record": rec, "usage": usage.stats(s.meta)}
        self._publish(s, "usage", out)
        return out


def _json_text(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, default=str) if obj else ""


def _bump(m: SessionMeta, key: str) -> None:
    m.counters[key] = m.counters.get(key, 0) + 1


def _not_in_log(msgs: list[dict[str, Any]], s: Session) -> list[dict[str, Any]]:
    """Cached tool results whose result is already a tool entry of the log are sent once: as
    part of the history (kept, or summarized with it)."""
    if not msgs:
        return msgs
    logged = {e.content for e in s.entries if e.role == "tool"}
    fresh = [m for m in msgs[1:] if m["content"] not in logged]
    if len(fresh) == len(msgs) - 1:
        return msgs
    if not fresh:
        return []
    ids = {m["tool_call_id"] for m in fresh}
    call = dict(msgs[0])
    call["tool_calls"] = [c for c in msgs[0]["tool_calls"] if c["id"] in ids]
    return [call, *fresh]


def _opts(opts: dict[str, Any]) -> tuple[int | None, str | None, str | None, list | None, bool]:
    """The options as the declaration checked them (``memman.schemas.CONTEXT_OPTS``)."""
    return (opts.get("max_tokens"), opts.get("model"), opts.get("query"), opts.get("tools"),
            opts.get("recall", True))
