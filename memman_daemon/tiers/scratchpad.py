"""The session scratchpad (the three-tier design): short reflective snippets, at most 64, LRU-evicted.

Each session's snippets are kept in memory in least-recently-used order (an ``OrderedDict``,
oldest use first). Writing a snippet that is already there (same text after collapsing
whitespace and case) raises its ``frequency`` and counts as a use instead of adding a copy.
Reads count as use too. When a write would pass ``scratchpad.max_snippets`` the
least-recently-used snippet is evicted, and the eviction is written to the audit log in the
same transaction. Promoted snippets are marked (``promoted``) and are safe to evict: their
content lives in a higher tier.

Every change is answered after commit; the order of use is stored as ``used_seq`` so the LRU
order survives a restart.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import OrderedDict
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from memman.errors import CONFLICT, MemmanError, not_found
from memman_daemon.component import Component
from memman_daemon.search.hybrid import may_be_duplicate
from memman_daemon.storage.sqlite import scratchpad as scratchpad_rows
from memman_daemon.storage.sqlite.store import Op

if TYPE_CHECKING:
    from memman.config import Config
    from memman_daemon.clock import Clock
    from memman_daemon.events import EventBus
    from memman_daemon.search.embeddings import Embedder
    from memman_daemon.sessions import Sessions
    from memman_daemon.storage.sqlite.store import Store
    from memman_daemon.tiers.audit import Recorder


def normalize(text: str) -> str:
    """The form two snippets are compared in: whitespace collapsed, case folded."""
    return " ".join(text.split()).casefold()


@dataclass
class Snippet:
    """One scratchpad snippet: a reflective natural-language sentence or two."""

    id: int
    session_id: str
    text: str
    created_at: float  #: unix seconds
    last_used_at: float  #: unix seconds of the last write or read
    used_seq: int  #: order of last use (higher = more recent); LRU evicts the lowest
    frequency: int = 1  #: times this text was written
    explicit: bool = False  #: the user asked to save it to memory
    salience: float | None = None  #: writer's own 0..1 judgement, if given
    surprisal: float | None = None  #: writer's own 0..1 judgement, if given
    flow: str | None = None  #: the flow that wrote it
    metadata: dict[str, Any] = field(default_factory=dict)
    promoted: list[dict[str, Any]] = field(default_factory=list)  #: {target, ref, at, audit_id}

    def to_wire(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_wire(cls, d: dict[str, Any]) -> Snippet:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})




class Scratchpad(Component):
    """Every session's snippets, in memory in LRU order, and their rows."""

    stats_key = "scratchpad"

    def __init__(self, config: Config, clock: Clock, store: Store, events: EventBus,
                 sessions: Sessions, embedder: Embedder, audit: Recorder, *,
                 read_only: bool = False) -> None:
        self.config = config
        self.clock = clock
        self.store = store
        self.events = events
        self.sessions = sessions
        self.embedder = embedder
        self.audit = audit  #: evictions are audited here (the local audit log)
        self.read_only = read_only
        self.by_session: dict[str, OrderedDict[int, Snippet]] = {}
        self._ids = itertools.count(1)
        self._seq = itertools.count(1)
        self.counters = {"writes": 0, "duplicates": 0, "reads": 0, "evicted": 0, "promoted": 0}
        #: snippet id -> (model id, unit vector): for near-duplicates, computed when needed
        self._vectors: dict[int, tuple[str, Any]] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    def lock(self, session_id: str) -> asyncio.Lock:
        """Write, read, evict and promote of one session's snippets run one at a time: an
        evict and a promotion of the same snippet cannot both act on it (the later one finds
        it gone: -32001)."""
        lk = self._locks.get(session_id)
        if lk is None:
            lk = self._locks[session_id] = asyncio.Lock()
        return lk

    async def load(self) -> None:
        self.by_session.clear()
        snippets = [Snippet.from_wire(d) for d in await scratchpad_rows.all_snippets(self.store)]
        snippets.sort(key=lambda s: s.used_seq)
        self._ids = itertools.count(max((s.id for s in snippets), default=0) + 1)
        self._seq = itertools.count(max((s.used_seq for s in snippets), default=0) + 1)
        orphans = [sn for sn in snippets if sn.session_id not in self.sessions.by_id]
        if orphans and not self.read_only:  # their session was deleted, rows stayed
            await self.store.write(self._evict_ops(orphans, "session deleted", ""))
            snippets = [sn for sn in snippets if sn.session_id in self.sessions.by_id]
        for sn in snippets:
            self.by_session.setdefault(sn.session_id, OrderedDict())[sn.id] = sn

    def stats(self) -> dict[str, Any]:
        return {"snippets": sum(len(v) for v in self.by_session.values()),
                "sessions": len(self.by_session), **self.counters}

    # --- helpers -------------------------------------------------------------------------
    @staticmethod
    def op(sn: Snippet) -> Op:
        return scratchpad_rows.put_op(sn.id, sn.session_id, sn.to_wire())

    @staticmethod
    def delete_op(sn: Snippet) -> Op:
        return scratchpad_rows.delete_op(sn.id)

    def _publish(self, kind: str, session_id: str, **data: Any) -> None:
        s = self.sessions.by_id.get(session_id)
        scope = self.sessions.scope(s) if s else {"session_id": session_id}
        self.events.publish("scratchpad", kind, data, **scope)

    def _touch(self, pad: OrderedDict[int, Snippet], sn: Snippet) -> None:
        sn.used_seq = next(self._seq)
        sn.last_used_at = self.clock.now()
        pad.move_to_end(sn.id)

    def pad(self, session_id: str) -> OrderedDict[int, Snippet]:
        self.sessions.get(session_id)
        return self.by_session.setdefault(session_id, OrderedDict())

    def get(self, session_id: str, snippet_id: int) -> Snippet:
        sn = self.pad(session_id).get(snippet_id)
        if sn is None:
            raise not_found("snippet", snippet_id)
        return sn

    def _evict_ops(self, victims: list[Snippet], reason: str, client: str) -> list[Op]:
        ops: list[Op] = []
        for v in victims:
            s = self.sessions.by_id.get(v.session_id)
            _, aop = self.audit.record(
                "evict", v.text, f"scratchpad:{v.session_id}#{v.id}", "-", client,
                session_id=v.session_id, user_id=s.meta.user_id if s else None,
                tenant_id=s.meta.tenant_id if s else None, reason=reason,
                promoted=[p["target"] for p in v.promoted], frequency=v.frequency,
                snippet=v.to_wire())  # the whole snippet: memman_undo restores it
            ops += [self.delete_op(v), aop]
        return ops

    async def restore(self, sn: Snippet, extra: list[Op]) -> dict[str, Any]:
        """Put an evicted snippet back (``memman_undo``), as the most recently used, with
        ``extra`` (the undo's audit row) in the same transaction."""
        pad = self.pad(sn.session_id)
        if sn.id in pad:
            raise MemmanError(CONFLICT, f"snippet {sn.id} is in the scratchpad already")
        if len(pad) >= self.config.scratchpad.max_snippets:
            raise MemmanError(CONFLICT, f"the scratchpad of {sn.session_id!r} is full "
                              f"({self.config.scratchpad.max_snippets} snippets); evict one "
                              "first")
        pad[sn.id] = sn
        try:
            await self.store.write([self.op(sn), *extra])
        except Exception:
            pad.pop(sn.id, None)
            raise
        self._publish("written", sn.session_id, snippet=sn.to_wire(), count=len(pad),
                      restored=True)
        return {"snippet": sn.to_wire()}

    async def _near_duplicate(self, pad: OrderedDict[int, Snippet], text: str
                              ) -> tuple[Snippet | None, float | None, Any]:
        """The snippet of ``pad`` most similar to ``text`` if at or above
        ``scratchpad.duplicate_threshold`` (embeddings on), with the similarity and the new
        text's vector (kept for the next comparison)."""
        emb = self.embedder
        if not emb.enabled:
            return None, None, None
        model = emb.model_id
        stale = [sn for sn in pad.values()
                 if self._vectors.get(sn.id, ("", None))[0] != model]
        vecs = await emb.embed([text] + [sn.text for sn in stale])
        if vecs is None:
            return None, None, None
        for sn, v in zip(stale, vecs[1:], strict=True):
            self._vectors[sn.id] = (model, v)
        q = vecs[0]
        best, best_sim = None, -1.0
        for sn in pad.values():
            if not may_be_duplicate(sn.text, text):
                continue
            sim = float(self._vectors[sn.id][1] @ q)
            if sim > best_sim:
                best, best_sim = sn, sim
        if best is not None and best_sim >= self.config.scratchpad.duplicate_threshold:
            return best, round(best_sim, 6), q
        return None, None, q

    # --- operations ----------------------------------------------------------------------
    async def write(self, session_id: str, text: str, opts: dict[str, Any],
                    client: str = "") -> dict[str, Any]:
        """Add a snippet (or raise the frequency of the same one). Returns
        ``{snippet, created, evicted: [ids]}``."""
        async with self.lock(session_id):
            return await self._write(session_id, text, opts, client)

    async def _write(self, session_id: str, text: str, opts: dict[str, Any],
                     client: str) -> dict[str, Any]:
        text = text.strip()  # the declared schema refused an empty one and checked the opts
        pad = self.pad(session_id)
        norm = normalize(text)
        existing = next((sn for sn in pad.values() if normalize(sn.text) == norm), None)
        similarity = 1.0 if existing is not None else None
        vec = None
        if existing is None:
            existing, similarity, vec = await self._near_duplicate(pad, text)
        now = self.clock.now()
        if existing is not None:
            before = Snippet.from_wire(existing.to_wire())
            existing.frequency += 1
            existing.explicit = existing.explicit or bool(opts.get("explicit"))
            for k in ("salience", "surprisal"):
                if opts.get(k) is not None:
                    setattr(existing, k, max(getattr(existing, k) or 0.0, float(opts[k])))
            self._touch(pad, existing)
            try:
                await self.store.write([self.op(existing)])
            except Exception:
                pad[existing.id] = before
                raise
            self.counters["duplicates"] += 1
            self._publish("updated", session_id, snippet=existing.to_wire(),
                          similarity=similarity)
            return {"snippet": existing.to_wire(), "created": False, "evicted": [],
                    "duplicate_of": existing.id, "similarity": similarity}
        sn = Snippet(id=next(self._ids), session_id=session_id, text=text, created_at=now,
                     last_used_at=now, used_seq=next(self._seq),
                     explicit=bool(opts.get("explicit")),
                     salience=_opt_float(opts.get("salience")),
                     surprisal=_opt_float(opts.get("surprisal")), flow=opts.get("flow"),
                     metadata=dict(opts.get("metadata") or {}))
        pad[sn.id] = sn
        victims: list[Snippet] = []
        while len(pad) > self.config.scratchpad.max_snippets:
            _, victim = pad.popitem(last=False)
            victims.append(victim)
        try:
            await self.store.write([self.op(sn), *self._evict_ops(victims, "lru", client)])
        except Exception:
            pad.pop(sn.id, None)
            for v in reversed(victims):
                pad[v.id] = v
                pad.move_to_end(v.id, last=False)
            raise
        self.counters["writes"] += 1
        self.counters["evicted"] += len(victims)
        if vec is not None:
            self._vectors[sn.id] = (self.embedder.model_id, vec)
        for v in victims:
            self._vectors.pop(v.id, None)
        self._publish("written", session_id, snippet=sn.to_wire(), count=len(pad))
        for v in victims:
            self._publish("evicted", session_id, snippet_id=v.id, text=v.text, reason="lru",
                          promoted=bool(v.promoted))
        return {"snippet": sn.to_wire(), "created": True, "evicted": [v.id for v in victims]}

    async def read(self, session_id: str, ids: list[int] | None = None) -> list[dict[str, Any]]:
        """Snippets in writing order (all, or the given ids); each read counts as a use."""
        async with self.lock(session_id):
            return await self._read(session_id, ids)

    async def _read(self, session_id: str, ids: list[int] | None) -> list[dict[str, Any]]:
        pad = self.pad(session_id)
        if ids is None:
            chosen = sorted(pad.values(), key=lambda s: s.id)
        else:
            chosen = [self.get(session_id, i) for i in ids]
        if not chosen:
            return []
        # keep the relative LRU order of what was read: touch it oldest-use first
        for sn in sorted(chosen, key=lambda s: s.used_seq):
            self._touch(pad, sn)
        if not self.read_only:
            await self.store.write([self.op(sn) for sn in chosen])
        self.counters["reads"] += 1
        return [sn.to_wire() for sn in chosen]

    def peek(self, session_id: str) -> list[Snippet]:
        """Snippets in writing order without counting a use (TUI, candidates, summaries)."""
        return sorted(self.by_session.get(session_id, {}).values(), key=lambda s: s.id)

    def snippets(self, session_id: str) -> list[str]:
        """The snippet texts in writing order, for the summarizer prompt (the three-tier design: the
        summary is better with the scratchpad's insights). Does not count as a use."""
        return [sn.text for sn in self.peek(session_id)]

    async def evict(self, session_id: str, snippet_id: int, client: str = "") -> dict[str, Any]:
        async with self.lock(session_id):
            return await self._evict(session_id, snippet_id, client)

    async def _evict(self, session_id: str, snippet_id: int, client: str) -> dict[str, Any]:
        pad = self.pad(session_id)
        sn = self.get(session_id, snippet_id)
        del pad[snippet_id]
        self._vectors.pop(snippet_id, None)
        try:
            await self.store.write(self._evict_ops([sn], "explicit", client))
        except Exception:
            pad[sn.id] = sn
            raise
        self.counters["evicted"] += 1
        self._publish("evicted", session_id, snippet_id=sn.id, text=sn.text, reason="explicit",
                      promoted=bool(sn.promoted))
        return {"evicted": sn.id, "was_promoted": bool(sn.promoted)}

    async def clear(self, session_ids: list[str], client: str = "", reason: str = "clear") -> int:
        """Evict every snippet of these sessions (memory_clear of the working layer)."""
        victims = [sn for sid in session_ids for sn in self.by_session.get(sid, {}).values()]
        if not victims:
            for sid in session_ids:
                self.by_session.pop(sid, None)
            return 0
        await self.store.write(self._evict_ops(victims, reason, client))
        for sid in session_ids:
            self.by_session.pop(sid, None)
        for v in victims:
            self._vectors.pop(v.id, None)
        self.counters["evicted"] += len(victims)
        for v in victims:
            self._publish("evicted", v.session_id, snippet_id=v.id, text=v.text, reason=reason,
                          promoted=bool(v.promoted))
        return len(victims)

    async def on_session_deleted(self, session_id: str, client: str = "") -> int:
        """A deleted session's scratchpad goes with it (each snippet audited)."""
        n = await self.clear([session_id], client, reason="session deleted")
        self._locks.pop(session_id, None)
        return n


def _opt_float(v: Any) -> float | None:
    return None if v is None else float(v)
