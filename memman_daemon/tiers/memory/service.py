"""``UserMemory``: the one user-memory component the API, promotion, undo and the window's
``learned`` hook use, on either backend -- it dispatches to the layers (``keyed.py``,
``episodic.py``, ``search.py``; working memory is the scratchpad) and holds what spans them:
append by type, list, compact, stats, forget and clear, and the background re-embed's
source methods."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import numpy as np

from memman.config import DEFAULT_MODEL
from memman.errors import NOT_FOUND, MemmanError, invalid_params
from memman_daemon.component import Component
from memman_daemon.storage.memories import MemoryRecord
from memman_daemon.tiers.memory.cache import LatestCounts
from memman_daemon.tiers.memory.core import (
    MEMORY_TYPES,
    Change,
    MemoryCore,
    check_type,
)
from memman_daemon.tiers.memory.episodic import Episodic
from memman_daemon.tiers.memory.keyed import Keyed
from memman_daemon.tiers.memory.search import MemorySearch

if TYPE_CHECKING:
    from memman.config import Config
    from memman_daemon.clock import Clock
    from memman_daemon.events import EventBus
    from memman_daemon.search.embeddings import Embedder
    from memman_daemon.search.reembed import VectorSync
    from memman_daemon.sessions import Sessions
    from memman_daemon.storage import Storage
    from memman_daemon.tiers.audit import Recorder
    from memman_daemon.tiers.scratchpad import Scratchpad
    from memman_daemon.tokens import TokenCounter


def clear_types(type_: str) -> tuple[str, ...]:
    """The layers ``memman_memory_clear`` of ``type_`` deletes ("" or "all": every one)."""
    types = MEMORY_TYPES if type_ in ("", "all") else (type_,)
    for t in types:
        check_type(t)
    return types


def summary_without(sm: MemoryRecord, removed_id: int) -> tuple[str, dict[str, Any]]:
    """A compaction summary's content and metadata once the record ``removed_id`` it linked
    was forgotten: the link dropped, a note saying so (its text may still reflect it)."""
    meta = dict(sm.metadata)
    meta["entry_ids"] = [i for i in meta.get("entry_ids", []) if i != removed_id]
    meta["removed_entry_ids"] = [*meta.get("removed_entry_ids", []), removed_id]
    note = (f"\n[Entry {removed_id} was removed on request after this summary was "
            "written; the summary no longer links it and its text above may still "
            "reflect it.]")
    return sm.content + note, meta


class UserMemory(Component):
    """The episodic, semantic and procedural layers of every user (working memory is the
    scratchpad's), over ``storage.memories``. Vector scopes are ``(user_id, type)``."""

    stats_key = "memory"

    def __init__(self, config: Config, clock: Clock, storage: Storage, events: EventBus,
                 tokens: TokenCounter, embedder: Embedder, vector_sync: VectorSync,
                 audit: Recorder, sessions: Sessions, scratchpad: Scratchpad, *,
                 read_only: bool = False) -> None:
        self.config = config
        self.core = core = MemoryCore(config, clock, storage, events, embedder, vector_sync,
                                      audit)
        self.storage = storage
        self.rows = core.rows
        self.cache = core.cache  #: the keyed records' read-through cache (``invalidate``)
        self.vscopes = core.vscopes
        self.vectors = core.rows.vectors
        self.embedder = embedder
        self.tokens = tokens
        self.sessions = sessions
        self.scratchpad = scratchpad
        self.keyed = Keyed(core)
        self.episodic = Episodic(core)
        self.finder = MemorySearch(core, sessions, scratchpad, read_only=read_only)
        self._counts = LatestCounts(core.rows)
        self._locks: dict[str, asyncio.Lock] = {}
        #: record id -> its scope, for records handed to the background re-embed
        self._backlog_scope: dict[int, Any] = {}
        # the layers' methods, under the names the API, promotion and undo call
        self.prepare_preference = self.keyed.prepare_preference
        self.prepare_rule = self.keyed.prepare_rule
        self.prepare_playbook = self.keyed.prepare_playbook
        self.learn = self.keyed.learn
        self.recall = self.keyed.recall
        self.commit = core.commit
        self.search = self.finder.search
        self.mode_for = self.finder.mode_for
        self.similar = self.finder.similar
        self.playbook = self.finder.playbook
        self.bearing_on = self.finder.bearing_on

    # --- lifecycle -----------------------------------------------------------------------
    async def load(self) -> None:
        await self.rows.open()
        await self.cache.load()
        self.vectors.open()
        await self._counts.refresh()

    async def close(self) -> None:
        self._counts.close()
        self.vectors.close()

    def stats(self) -> dict[str, Any]:
        """Counts as of the previous call (read in the background: stats are sync)."""
        return {**self._counts.current(),
                "searches": self.finder.searches, "search_mode": self.search_mode,
                "duplicates": self.episodic.duplicates, "races": self.core.races,
                "backend": self.storage.name, "vector_backend": self.rows.vector_backend,
                "vector_index": self.vscopes.stats()}

    @property
    def search_mode(self) -> str:
        return "hybrid" if self.embedder.enabled else "fts"

    def on_remote(self, topic: str, kind: str, scope: dict[str, Any]) -> None:
        """Another daemon changed a user's memory: drop this daemon's view of it."""
        if topic == "memory" and scope.get("user_id"):
            self.cache.invalidate(scope["user_id"])
            self.core.forget_scopes(scope["user_id"])

    def _lock(self, user_id: str) -> asyncio.Lock:
        return self._locks.setdefault(user_id, asyncio.Lock())

    # --- vectors: the background re-embed's source ---------------------------------------
    async def count_vector_backlog(self, model_id: str) -> int:
        return await self.rows.count_backlog(model_id)

    async def vector_backlog(self, after: int, model_id: str, limit: int) -> list[tuple[int, str]]:
        """Live records after id ``after`` with no vector of ``model_id``: ``(id, text)``."""
        out = []
        for rec in await self.rows.backlog(after, model_id, limit):
            self._backlog_scope[rec.id] = (rec.user_id, rec.type)
            out.append((rec.id, self.core.vector_text(rec)))
        return out

    async def store_vectors(self, ids: list[int], vecs: np.ndarray, model_id: str) -> None:
        """Write vectors the background worker made (skipping records deleted meanwhile)."""
        await self.rows.put_vectors(ids, vecs, model_id)
        if self.embedder.model_id == model_id:
            self.vscopes.add_stored(self._backlog_scope, ids, vecs)

    # --- append: by layer ------------------------------------------------------------------
    async def append(self, user_id: str, type_: str, entry: dict[str, Any],
                     client: str = "") -> dict[str, Any]:
        check_type(type_)
        return await self.core.decided(lambda: self._append(user_id, type_, entry, client))

    async def _append(self, user_id: str, type_: str, entry: dict[str, Any],
                      client: str) -> dict[str, Any]:
        # the shapes were checked by the method's schema (content: a string or nil, metadata
        # a map or nil); what is left here is what needs more than one field
        content = entry.get("content") or ""
        metadata = entry.get("metadata") or {}
        if entry.get("id") is not None:
            metadata = {**metadata, "external_id": entry["id"]}
        if type_ == "working":  # the local scratchpad: works while a shared store is down
            return await self._append_working(user_id, entry, content, metadata, client)
        ch: Change | dict[str, Any]
        if type_ == "semantic":
            key = entry.get("key") or metadata.get("key") or entry.get("id")
            if not isinstance(key, str) or not key:
                raise invalid_params("entry.key", "a semantic entry needs a key (entry.key or "
                                     "metadata.key)")
            ch = await self.keyed.prepare_preference(user_id, key, content, replace=True,
                                                     metadata=metadata)
        elif type_ == "procedural":
            if "flow" in entry or "flow_dact" in entry or metadata.get("kind") == "playbook":
                pb = {**metadata, **{k: v for k, v in entry.items() if k != "metadata"}}
                ch = await self.keyed.prepare_playbook(user_id, pb, replace=True)
            else:
                cond = entry.get("condition") or metadata.get("condition")
                if not isinstance(cond, str) or not cond:
                    raise invalid_params("entry.condition", "a procedural rule needs a condition "
                                         "(entry.condition or metadata.condition); a playbook "
                                         "needs a flow")
                action = entry.get("action") or content
                ch = await self.keyed.prepare_rule(user_id, cond, action, replace=True,
                                                   metadata=metadata)
        else:
            ch = await self.episodic.append(user_id, entry, content, metadata)
            if isinstance(ch, dict):  # a near-duplicate: the stored entry was bumped
                return ch
        await self.core.commit(ch, client=client)
        return {"type": type_, "record": ch.record.to_wire(), "created": ch.changed}

    async def _append_working(self, user_id: str, entry: dict[str, Any], content: str,
                              metadata: dict[str, Any], client: str) -> dict[str, Any]:
        sid = entry.get("session_id") or metadata.get("session_id")
        if not isinstance(sid, str):
            raise invalid_params("entry.session_id", "working memory is a session's "
                                 "scratchpad: name the session")
        s = self.sessions.get(sid)
        if s.meta.user_id != user_id:
            raise invalid_params("entry.session_id", f"session {sid!r} belongs to user "
                                 f"{s.meta.user_id!r}, not {user_id!r}")
        if not content.strip():  # a snippet has text (the schema lets content be absent)
            raise invalid_params("entry.content", "must not be empty")
        res = await self.scratchpad.write(sid, content, {"metadata": metadata}, client)
        return {"type": "working", "record": res["snippet"], "created": res["created"]}

    # --- list / compact / stats ----------------------------------------------------------
    def _working(self, user_id: str) -> list[Any]:
        return [sn for sid in self.finder.user_sessions(user_id)
                for sn in self.scratchpad.peek(sid)]

    async def compact(self, user_id: str, type_: str, opts: dict[str, Any],
                      client: str = "") -> dict[str, Any]:
        """The four-layer design's compact: keep the newest ``keep_last`` live, fold the older
        ones into one summary entry (``summarize_older``, default true). Older entries are
        archived behind the summary (``archived_by``), not deleted; working snippets are
        evicted (audited)."""
        check_type(type_)
        keep = opts.get("keep_last", self.config.memory.compact_keep_last)
        summarize = bool(opts.get("summarize_older", True))
        if type_ == "working":
            evicted = 0
            for sid in self.finder.user_sessions(user_id):
                snips = self.scratchpad.peek(sid)
                for sn in snips[:max(0, len(snips) - keep)]:
                    await self.scratchpad.evict(sid, sn.id, client)
                    evicted += 1
            return {"type": type_, "archived": evicted, "summary_id": None, "kept": keep}
        async with self._lock(user_id):
            return await self.episodic.compact(user_id, type_, keep, summarize)

    async def stats_for(self, user_id: str) -> dict[str, Any]:
        """The four-layer design's MemoryStats for one user (sizes in bytes, tokens by
        tiktoken)."""
        n = await self.rows.user_counts(user_id)
        working = self._working(user_id)
        return {
            "user_id": user_id,
            "working_memory_tokens": sum(self.tokens.count_text(sn.text, DEFAULT_MODEL)
                                         for sn in working),
            "working_snippets": len(working),
            "episodic_entry_count": n.episodic,
            "semantic_entry_count": n.live.get("preference", 0),
            "procedural_rule_count": n.live.get("rule", 0),
            "playbook_count": n.live.get("playbook", 0),
            "archived_count": n.archived,
            "vector_count": n.vectors,
            "total_storage_bytes": n.stored_bytes + sum(len(sn.text.encode()) for sn in working),
            "search_mode": self.search_mode,
        }

    # --- forget / delete / clear: the only calls that delete -------------------------------
    async def owns(self, user_id: str, record_id: int) -> bool:
        """``record_id`` is a stored memory record of ``user_id`` (live or archived)."""
        return await self.rows.get(record_id, user_id) is not None

    async def forget(self, user_id: str, record_id: int, client: str = "") -> dict[str, Any]:
        """Delete one stored record of ``user_id`` (its vector goes with it), audited. A
        compaction summary that linked it drops the link and says so; forgetting a summary
        leaves its entries archived."""
        rows = self.rows
        await rows.reserve_ids(1)  # the audit record's
        async with self._lock(user_id):
            rec = await rows.get(record_id, user_id)
            if rec is None:
                raise MemmanError(NOT_FOUND, f"memory record {record_id} of user {user_id!r} "
                                  "not found; memman_memory_search or memman_memory_list show "
                                  "the ids")
            ops: list[Any] = rows.delete(rec.id)
            summary_id = rec.archived_by or None
            found = await rows.get(summary_id) if summary_id else None
            if found is not None:
                ops.append(rows.rewrite(found.id, *summary_without(found, rec.id)))
            else:
                summary_id = None
            unlinked = 0
            if rec.kind == "summary":
                unlinked = await rows.count_archived_by(rec.id)
                ops.append(rows.relink(rec.id))
            arec, aop = self.core.audit.record(
                "forget", rec.content, f"memory:{rec.user_id}#{rec.id}", "-", client,
                user_id=rec.user_id, record=rec.to_wire(), summary_id=summary_id,
                unlinked=unlinked)
            await self.storage.write([*ops, aop])
        self.cache.drop(rec)
        self.vscopes.remove((user_id, rec.type), [rec.id])
        out = {"forgotten": rec.to_wire(), "summary_id": summary_id, "unlinked": unlinked,
               "audit_id": arec.id}
        self.core.publish("forgotten", rec.user_id, record_id=rec.id, client=client, **out)
        return out

    async def delete(self, record: MemoryRecord | None, extra: list[Any]) -> None:
        """Delete ``record`` (a promotion's new record, ``memman_undo``) with ``extra`` in
        the same transaction; with no record, commit ``extra`` alone."""
        ops = list(extra)
        if record is not None:
            ops = [*self.rows.delete(record.id), *extra]
        await self.storage.write(ops)
        if record is not None:
            self.cache.drop(record)
            self.vscopes.remove((record.user_id, record.type), [record.id])
            self.core.publish("deleted", record.user_id, record=record.to_wire())

    async def record(self, user_id: str, kind: str, key: str | None = None,
                     record_id: int | None = None) -> MemoryRecord | None:
        """A live keyed record of the user: by key (a preference or rule), or by id."""
        if record_id is None:
            return await self.cache.key(user_id, kind, key)
        return next((r for r in (await self.cache.user(user_id)).values()
                     if r.kind == kind and r.id == record_id), None)

    async def clear(self, user_id: str, type_: str, client: str = "") -> dict[str, Any]:
        """Delete one layer ("" = all) of a user's memory. The only call that deletes it. The
        stored layers go first: when their store cannot be reached nothing is cleared."""
        types = clear_types(type_)
        cleared: dict[str, int] = {}
        stored = [t for t in types if t != "working"]
        if stored:
            await self.rows.reserve_ids(1)  # the audit record's
            async with self._lock(user_id):
                counts = await self.rows.counts_by_type(user_id, stored)
                _, aop = self.core.audit.record(
                    "clear", f"user memory: {', '.join(stored)}", f"memory:{user_id}", "-",
                    client, user_id=user_id, counts=counts)
                await self.storage.write([*self.rows.clear(user_id, stored), aop])
            cleared.update(counts)
            self.cache.invalidate(user_id)  # read again when next needed
            for t in stored:
                self.vscopes.scopes.pop((user_id, t), None)
        if "working" in types:
            cleared["working"] = await self.scratchpad.clear(
                self.finder.user_sessions(user_id), client)
        self.core.publish("cleared", user_id, types=list(types), counts=cleared)
        return {"cleared": cleared}

    # (last: below it, ``list`` in an annotation would name this method)
    async def list(self, user_id: str, type_: str, opts: dict[str, Any]) -> list[dict[str, Any]]:
        """Newest first; ``opts``: limit (50), before_id, kind, include_archived."""
        check_type(type_)
        limit = int(opts.get("limit") or 50)
        if type_ == "working":
            sns = sorted(self._working(user_id), key=lambda s: -s.id)
            return [{**s.to_wire(), "type": "working"} for s in sns[:limit]]
        before = opts.get("before_id")
        found = await self.rows.newest(user_id, type_, limit=limit,
                                       include_archived=bool(opts.get("include_archived")),
                                       kind=opts.get("kind") or None,
                                       before_id=int(before) if before is not None else None)
        return [r.to_wire() for r in found]
