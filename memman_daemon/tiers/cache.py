"""The per-session tool-result cache (the Q&A-cycle design).

A tool call is cached under the Q&A-cycle design's key (md5 of ``"{tool}:{json.dumps(params,
sort_keys=True)}"``, see ``memman.cache_state.cache_key``). Its lifetime counts *exchanges*: a
hit refreshes ``remaining_duration`` to ``original_duration``, every finalized Q&A cycle takes
one off (``on_cycle_finalized``), and at ≤ 0 the entry is evicted. An optional wall-clock
``ttl_s`` bounds it as well; the TTL is counted from ``cached_at`` and a hit does not extend it
(a stale result must not live forever just because it is popular).

Lookups are answered from memory. The refresh a hit causes is committed in the background
(the answer does not wait for it; hits arriving meanwhile share one write, and a hit on an
entry already at full duration writes nothing): after a crash an entry may be one refresh
behind, never wrong. Puts, evictions and the per-cycle decrement are answered only after commit.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from memman.cache_state import cache_key
from memman.errors import CONFLICT, MemmanError, invalid_params, not_found
from memman_daemon.component import Component
from memman_daemon.storage.sqlite import cache as cache_rows
from memman_daemon.storage.sqlite.store import Op, Store, StoreError

if TYPE_CHECKING:
    from memman.config import Config
    from memman_daemon.clock import Clock
    from memman_daemon.events import EventBus
    from memman_daemon.sessions import Sessions
    from memman_daemon.tiers.audit import Recorder

log = logging.getLogger(__name__)

COUNTERS = ("hits", "misses", "puts", "expired", "evicted")


@dataclass
class CacheEntry:
    """One cached tool result (the Q&A-cycle design's cache entry plus TTL and hit bookkeeping)."""

    key: str
    session_id: str
    tool_name: str
    parameters: dict[str, Any]
    result: str  #: the tool's output as the chat API's tool message content
    remaining_duration: int  #: exchanges left
    original_duration: int  #: exchanges a hit refreshes it to
    call_id: str  #: the tool_call id used when the result reaches the context
    cached_at: float  #: unix seconds
    ttl_s: float | None = None  #: wall-clock lifetime from cached_at (seconds), or None
    hits: int = 0
    last_hit_at: float | None = None
    #: the result as it was put (a map, list, number...), when it was not text; ``result`` is
    #: its JSON text, which the context's tool message carries
    value: Any = None

    @property
    def expires_at(self) -> float | None:
        return self.cached_at + self.ttl_s if self.ttl_s else None

    def expired(self, now: float) -> bool:
        exp = self.expires_at
        return exp is not None and now >= exp

    def to_wire(self) -> dict[str, Any]:
        # built by hand: dataclasses.asdict deep-copies and is the slowest part of a hit
        return {"key": self.key, "session_id": self.session_id, "tool_name": self.tool_name,
                "parameters": self.parameters,
                "result": self.result if self.value is None else self.value,
                "remaining_duration": self.remaining_duration,
                "original_duration": self.original_duration, "call_id": self.call_id,
                "cached_at": self.cached_at, "ttl_s": self.ttl_s, "hits": self.hits,
                "last_hit_at": self.last_hit_at, "expires_at": self.expires_at}

    @classmethod
    def from_wire(cls, d: dict[str, Any]) -> CacheEntry:
        e = cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d and k != "value"})
        if not isinstance(e.result, str):  # stored structured: keep it, and its text
            e.value, e.result = e.result, _result_text(e.result)
        return e


def _key(tool: str, params: dict[str, Any]) -> str:
    try:
        return cache_key(tool, params)
    except (TypeError, ValueError) as exc:
        raise invalid_params("params", f"must be JSON-compatible to form the cache key "
                             f"(text keys, no binary values): {exc}") from None


def _structured(result: Any) -> Any:
    """The result to give back as it was put: None for text (``result`` holds it)."""
    if isinstance(result, (str, bytes)) or result is None:
        return None
    try:  # kept only if it survives the JSON record in SQLite unchanged
        return result if json.loads(json.dumps(result, ensure_ascii=False)) == result else None
    except (TypeError, ValueError):
        return None


def _result_text(result: Any) -> str:
    if isinstance(result, str):
        return result
    if isinstance(result, bytes):
        return result.decode("utf-8", "replace")
    return json.dumps(result, ensure_ascii=False, sort_keys=True, default=str)


class ToolCache(Component):
    """All sessions' cached tool results, in memory, with SQLite as the durable record."""

    stats_key = "cache"

    def __init__(self, *, config: Config, clock: Clock, store: Store, events: EventBus,
                 sessions: Sessions, audit: Recorder, read_only: bool) -> None:
        self.config, self.clock, self.store, self.events = config, clock, store, events
        self.sessions, self.audit, self.read_only = sessions, audit, read_only
        self.by_session: dict[str, dict[str, CacheEntry]] = {}
        self.counters: dict[str, int] = dict.fromkeys(COUNTERS, 0)
        self.session_counters: dict[str, dict[str, int]] = {}
        self._dirty: dict[tuple[str, str], CacheEntry] = {}  #: refreshed by hits, not yet written
        self._flush_task: asyncio.Task[None] | None = None
        self._pending: set[asyncio.Task[Any]] = set()  #: expiries committing in the background

    # --- lifecycle -----------------------------------------------------------------------
    async def load(self) -> None:
        self.by_session.clear()
        orphans: set[str] = set()
        for wire in await cache_rows.all_entries(self.store):
            e = CacheEntry.from_wire(wire)
            if e.session_id not in self.sessions.by_id:
                orphans.add(e.session_id)  # its session was deleted
                continue
            self.by_session.setdefault(e.session_id, {})[e.key] = e
        if orphans and not self.read_only:
            await self.store.write([cache_rows.delete_session_op(sid) for sid in orphans])

    async def close(self) -> None:
        if self._flush_task is not None:
            await asyncio.gather(self._flush_task, return_exceptions=True)
        if self._pending:
            await asyncio.gather(*self._pending, return_exceptions=True)
        await self._flush()

    def stats(self) -> dict[str, Any]:
        looked = self.counters["hits"] + self.counters["misses"]
        return {"entries": sum(len(v) for v in self.by_session.values()), **self.counters,
                "hit_rate": round(self.counters["hits"] / looked, 4) if looked else 0.0}

    # --- helpers -------------------------------------------------------------------------
    @staticmethod
    def put_op(e: CacheEntry) -> Op:
        return cache_rows.put_op(e.session_id, e.key, e.to_wire())

    @staticmethod
    def delete_op(e: CacheEntry) -> Op:
        return cache_rows.delete_op(e.session_id, e.key)

    def _count(self, session_id: str, name: str, n: int = 1) -> None:
        self.counters[name] += n
        sc = self.session_counters.setdefault(session_id, dict.fromkeys(COUNTERS, 0))
        sc[name] += n

    async def restore(self, e: CacheEntry, extra: list[Op]) -> dict[str, Any]:
        """Put an evicted entry back (``memman_undo``), with ``extra`` (the undo's audit row)
        in the same transaction."""
        bucket = self.by_session.setdefault(e.session_id, {})
        if e.key in bucket:
            raise MemmanError(CONFLICT, f"cache entry {e.key} is cached again already")
        bucket[e.key] = e
        try:
            await self.store.write([self.put_op(e), *extra])
        except Exception:
            bucket.pop(e.key, None)
            raise
        self._publish("put", e.session_id, entry=e.to_wire(), restored=True)
        return {"entry": e.to_wire()}

    def _publish(self, kind: str, session_id: str, **data: Any) -> None:
        s = self.sessions.by_id.get(session_id)
        scope = self.sessions.scope(s) if s else {"session_id": session_id}
        self.events.publish("cache", kind, data, **scope)

    def _audit_ops(self, entries: list[CacheEntry], action: str, reason: str,
                   client: str) -> list[Op]:
        ops = []
        for e in entries:
            s = self.sessions.by_id.get(e.session_id)
            _, op = self.audit.record(
                action, f"{e.tool_name}({json.dumps(e.parameters, sort_keys=True)})",
                f"cache:{e.session_id}/{e.key}", "-", client, session_id=e.session_id,
                user_id=s.meta.user_id if s else None, tenant_id=s.meta.tenant_id if s else None,
                reason=reason, remaining_duration=e.remaining_duration,
                entry=e.to_wire())  # the whole entry: memman_undo restores it
            ops.append(op)
        return ops

    def _mark_dirty(self, e: CacheEntry) -> None:
        """Commit a hit's refresh in the background; hits arriving meanwhile share the write.
        A read-only daemon keeps the refresh in memory only."""
        if self.read_only:
            return
        self._dirty[(e.session_id, e.key)] = e
        if self._flush_task is None or self._flush_task.done():
            self._flush_task = asyncio.get_running_loop().create_task(self._flush())

    def _background(self, work: Any) -> None:
        """Run a removal's commit without making the caller wait; failures are logged."""
        task = asyncio.get_running_loop().create_task(work)
        self._pending.add(task)

        def done(t: asyncio.Task[Any]) -> None:
            self._pending.discard(t)
            if not t.cancelled() and t.exception() is not None:
                log.warning("cache expiry not committed: %s", t.exception())
        task.add_done_callback(done)

    async def _flush(self) -> None:
        if not self._dirty:
            return
        dirty, self._dirty = self._dirty, {}
        live = [e for e in dirty.values()
                if self.by_session.get(e.session_id, {}).get(e.key) is e]
        try:
            await self.store.write([self.put_op(e) for e in live])
        except StoreError as exc:  # the in-memory value stays; it is only a refresh
            log.warning("cache refresh not committed: %s", exc)

    # --- operations ----------------------------------------------------------------------
    def entries(self, session_id: str) -> list[CacheEntry]:
        """The session's cached entries, oldest first (no expiry check)."""
        return sorted(self.by_session.get(session_id, {}).values(), key=lambda e: e.cached_at)

    def lookup(self, session_id: str, tool: str, params: dict[str, Any]) -> CacheEntry | None:
        """The cached result of ``tool(params)`` with its duration refreshed, or None.

        Synchronous, so the protocol answers it inline like any in-memory read: the disk work
        (a refresh, the removal of an expired entry) is committed in the background."""
        self.sessions.get(session_id)
        key = _key(tool, params)
        bucket = self.by_session.get(session_id)
        e = bucket.get(key) if bucket else None
        if bucket is None or e is None:
            self._count(session_id, "misses")
            self._publish("miss", session_id, key=key, tool_name=tool)
            return None
        now = self.clock.now()
        if e.expired(now):
            bucket.pop(key, None)  # gone for every later lookup at once; the row goes below
            self._background(self._remove(session_id, [e], "expired", "ttl", ""))
            self._count(session_id, "misses")
            self._publish("miss", session_id, key=key, tool_name=tool)
            return None
        e.hits += 1
        e.last_hit_at = now
        if e.remaining_duration != e.original_duration:
            # only the refresh needs the disk; hit counts ride along with the next write
            e.remaining_duration = e.original_duration
            self._mark_dirty(e)
        self._count(session_id, "hits")
        self._publish("hit", session_id, key=key, tool_name=tool,
                      remaining_duration=e.remaining_duration,
                      original_duration=e.original_duration)
        return e

    def build(self, session_id: str, tool: str, params: dict[str, Any], result: Any,
              opts: dict[str, Any]) -> CacheEntry:
        """Make a put's entry (not stored yet). Its parameters were checked by the method's
        declared schema (``CACHE_OPTS``, ``INJECTED_RESULT``): a duration >= 1, a finite
        ``ttl_s`` >= 0 (0: none), a string ``call_id``."""
        duration = opts.get("duration", self.config.cache.default_duration)
        ttl = opts.get("ttl_s", self.config.cache.default_ttl_s) or None
        key = _key(tool, params)
        call_id = opts.get("call_id") or f"call_{key[:24]}"
        return CacheEntry(key=key, session_id=session_id, tool_name=tool, parameters=params,
                          result=_result_text(result), remaining_duration=duration,
                          value=_structured(result),
                          original_duration=duration, call_id=call_id,
                          cached_at=self.clock.now(),
                          ttl_s=float(ttl) if ttl is not None else None)

    def stage(self, entries: list[CacheEntry], client: str = "") -> tuple[list[Op], list[CacheEntry]]:
        """Put ``entries`` in memory; returns (ops to commit, entries evicted for room)."""
        ops: list[Op] = []
        evicted: list[CacheEntry] = []
        cap = self.config.cache.max_entries_per_session
        for e in entries:
            bucket = self.by_session.setdefault(e.session_id, {})
            bucket[e.key] = e
            ops.append(self.put_op(e))
            while len(bucket) > cap:
                victim = min((x for x in bucket.values() if x is not e),
                             key=lambda x: (x.remaining_duration, x.cached_at))
                del bucket[victim.key]
                evicted.append(victim)
                ops.append(self.delete_op(victim))
        ops += self._audit_ops(evicted, "evict", "capacity", client)
        return ops, evicted

    def unstage(self, entries: list[CacheEntry], evicted: list[CacheEntry]) -> None:
        """Undo ``stage`` after a failed commit."""
        for e in entries:
            self.by_session.get(e.session_id, {}).pop(e.key, None)
        for v in evicted:
            self.by_session.setdefault(v.session_id, {})[v.key] = v

    def published_put(self, entries: list[CacheEntry], evicted: list[CacheEntry]) -> None:
        for e in entries:
            self._count(e.session_id, "puts")
            self._publish("put", e.session_id, entry=e.to_wire())
        for v in evicted:
            self._count(v.session_id, "evicted")
            self._publish("evicted", v.session_id, key=v.key, tool_name=v.tool_name,
                          reason="capacity")

    async def put(self, session_id: str, tool: str, params: dict[str, Any], result: Any,
                  opts: dict[str, Any], client: str = "") -> CacheEntry:
        self.sessions.get(session_id)
        e = self.build(session_id, tool, params, result, opts)
        old = self.by_session.get(session_id, {}).get(e.key)
        ops, evicted = self.stage([e], client)
        try:
            await self.store.write(ops)
        except StoreError:
            self.unstage([e], evicted)
            if old is not None:
                self.by_session.setdefault(session_id, {})[old.key] = old
            raise
        self.published_put([e], evicted)
        return e

    async def _remove(self, session_id: str, victims: list[CacheEntry], kind: str, reason: str,
                      client: str, extra_ops: list[Op] | None = None) -> None:
        bucket = self.by_session.get(session_id, {})
        for v in victims:
            bucket.pop(v.key, None)
        ops = [self.delete_op(v) for v in victims] + (extra_ops or [])
        ops += self._audit_ops(victims, "expire" if kind == "expired" else "evict", reason, client)
        try:
            await self.store.write(ops)
        except StoreError:
            for v in victims:
                bucket[v.key] = v
            raise
        for v in victims:
            self._count(session_id, kind)
            self._publish(kind, session_id, key=v.key, tool_name=v.tool_name, reason=reason)

    async def evict(self, session_id: str, key: str, client: str = "") -> int:
        """Evict one entry by key, or all of the session's entries with ``key == "*"``."""
        self.sessions.get(session_id)
        bucket = self.by_session.get(session_id, {})
        if key == "*":
            victims = list(bucket.values())
        elif key in bucket:
            victims = [bucket[key]]
        else:
            raise not_found("cache entry", key)
        if victims:
            await self._remove(session_id, victims, "evicted", "explicit", client)
        return len(victims)

    async def on_cycle_finalized(self, session_id: str) -> list[str]:
        """End of a Q&A cycle (the Q&A-cycle design): every entry loses one exchange; ≤ 0 or past its TTL
        is evicted. Committed before it returns; returns the evicted keys. The engine's
        finalize calls this."""
        bucket = self.by_session.get(session_id)
        if not bucket:
            return []
        now = self.clock.now()
        for e in bucket.values():
            e.remaining_duration -= 1
        gone = [e for e in bucket.values() if e.remaining_duration <= 0]
        expired = [e for e in bucket.values() if e.remaining_duration > 0 and e.expired(now)]
        kept = [e for e in bucket.values() if e.remaining_duration > 0 and not e.expired(now)]
        ops = [self.put_op(e) for e in kept]
        try:
            if gone:
                await self._remove(session_id, gone, "evicted", "duration", "", ops)
                ops = []
            if expired:
                await self._remove(session_id, expired, "expired", "ttl", "", ops)
                ops = []
            if ops:
                await self.store.write(ops)
        except StoreError:
            for e in kept + gone + expired:
                e.remaining_duration += 1
                bucket[e.key] = e
            raise
        for e in kept:
            self._publish("decremented", session_id, key=e.key, tool_name=e.tool_name,
                          remaining_duration=e.remaining_duration,
                          original_duration=e.original_duration)
        return [e.key for e in gone + expired]

    def context_messages(self, session_id: str) -> list[dict[str, Any]]:
        """Cached tool results as chat messages for the context (the Q&A-cycle design's
        ``prepare_messages_for_agent`` "including cached tools").

        Returns ``[]`` when nothing is cached, else one assistant message carrying a
        ``tool_calls`` array (one call per cached entry, oldest first, ``arguments`` as JSON
        text) followed by one ``{"role": "tool", "tool_call_id", "content"}`` message per
        call — valid for the OpenAI chat API as a unit. Entries past their TTL are left out
        (they are evicted on the next lookup or finalize). Place them after the history and
        before the new user message.
        """
        now = self.clock.now()
        return self.context_messages_for([e for e in self.entries(session_id)
                                          if not e.expired(now)])

    @staticmethod
    def context_messages_for(live: list[CacheEntry]) -> list[dict[str, Any]]:
        """``live`` entries as one assistant tool_calls message plus their tool messages."""
        if not live:
            return []
        ids: list[str] = []
        for e in live:  # call ids must be unique within one assistant message
            ids.append(e.call_id if e.call_id not in ids else f"{e.call_id}_{e.key[:8]}")
        calls = [{"id": cid, "type": "function",
                  "function": {"name": e.tool_name,
                               "arguments": json.dumps(e.parameters, sort_keys=True,
                                                       ensure_ascii=False)}}
                 for cid, e in zip(ids, live, strict=True)]
        out: list[dict[str, Any]] = [{"role": "assistant", "content": None, "tool_calls": calls}]
        out += [{"role": "tool", "tool_call_id": cid, "content": e.result}
                for cid, e in zip(ids, live, strict=True)]
        return out

    async def on_session_deleted(self, session_id: str, client: str = "") -> int:
        """A deleted session's cache goes with it (audited). Returns the entries removed."""
        victims = list(self.by_session.get(session_id, {}).values())
        if victims:
            await self._remove(session_id, victims, "evicted", "session deleted", client)
        self.by_session.pop(session_id, None)
        self.session_counters.pop(session_id, None)
        return len(victims)
