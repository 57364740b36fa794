"""Undo: ``memman_undo`` reverses the calling client's last pin, unpin, eviction, recall
exclusion or promotion, from the audit log.

The audit log records every such change with what is needed to reverse it (the entry id and
its previous pin state; the evicted snippet or cache entry in full; the promotion's target and
the value it replaced). Undo picks the newest such record of the calling client
(``opts.client`` to name another, ``opts.session_id`` to narrow it, ``opts.audit_id`` for one
record) that no earlier undo reversed, applies the inverse through the part that owns the
change, and writes an ``undo`` record naming the one it reversed — in the same transaction
where the part allows. Undoing again walks further back. Automatic evictions (LRU, capacity,
expiry, a deleted session) are not the client's actions and are never undone.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from memman.errors import CONFLICT, MemmanError, not_found
from memman_daemon.storage.sqlite import audit as audit_rows
from memman_daemon.storage.sqlite.store import Op

UNDOABLE = ("pin", "unpin", "evict", "promote", "recall_exclude", "recall_include")
_SCAN = 500  #: audit records looked at for the newest undoable one
#: the layer of user memory a promotion's target lives in (cleared by memory_clear)
_LAYER = {"preference": "semantic", "rule": "procedural", "playbook": "procedural"}


class Undo:
    """The parts an undo reverses changes through, given by the app."""

    def __init__(self, *, store: Any, audit: Any, separate_audit: Any, clock: Any,
                 sessions: Any, engine: Any, recall: Any, scratchpad: Any, cache: Any,
                 user_memory: Any, agent_md: Any) -> None:
        self.store, self.audit, self.separate_audit, self.clock = (store, audit,
                                                                   separate_audit, clock)
        self.sessions, self.engine, self.recall = sessions, engine, recall
        self.scratchpad, self.cache = scratchpad, cache
        self.user_memory, self.agent_md = user_memory, agent_md

    async def _candidates(self, client: str, session_id: str | None) -> list[sqlite3.Row]:
        return await audit_rows.of_client(self.store, client, UNDOABLE, session_id, _SCAN)

    async def _undone(self) -> set[int]:
        out: set[int] = set()
        for data in await audit_rows.undo_data(self.store):
            with_id = json.loads(data).get("undone")
            if isinstance(with_id, int):
                out.add(with_id)
        return out

    def _undoable(self, action: str, data: dict[str, Any]) -> bool:
        if action == "evict":
            return data.get("reason") == "explicit" and ("snippet" in data or "entry" in data)
        return True

    async def undo(self, caller: str, opts: dict[str, Any]) -> dict[str, Any]:
        """``memman_undo`` for client ``caller``."""
        client = opts.get("client", caller)
        session_id = opts.get("session_id")
        audit_id = opts.get("audit_id")
        dry_run = opts.get("dry_run", False)
        done = await self._undone()
        rec: dict[str, Any] | None = None
        for row in await self._candidates(client, session_id):
            data = json.loads(row[10])
            if row[0] in done or not self._undoable(row[2], data):
                continue
            if audit_id is not None and row[0] != audit_id:
                continue
            rec = dict(zip(("id", "at", "action", "what", "source", "target", "client",
                            "session_id", "user_id", "tenant_id"), row[:10], strict=True))
            rec["data"] = data
            break
        shared = self.separate_audit  # None with SQLite: one audit log, read above
        if shared is not None and audit_id is None:  # promotions are audited in the shared store
            newer = await shared.newest_promotion(client, session_id, rec["at"] if rec else None)
            if newer is not None:
                raise MemmanError(CONFLICT, f"the newest undoable action of client {client!r} is "
                                  f"the promotion to {newer['target']!r} (shared audit "
                                  f"#{newer['id']}); undo does not reverse promotions made in the "
                                  "shared store yet: reverse it with memman_memory_learn or "
                                  "memman_memory_forget (older actions are not undone instead)",
                                  {"promotion": newer})
        if rec is None:
            raise not_found("undoable action", audit_id if audit_id is not None else
                            f"of client {client!r}" + (f" in session {session_id!r}"
                                                       if session_id else ""))
        if dry_run:
            return {"undone": rec, "audit_id": None, "result": None, "dry_run": True}
        urec, uop = self.audit.record(
            "undo", rec["what"], f"audit#{rec['id']}", rec["source"], caller,
            session_id=rec["session_id"], user_id=rec["user_id"], tenant_id=rec["tenant_id"],
            undone=rec["id"], undone_action=rec["action"])
        action = rec["action"]
        if action in ("pin", "unpin"):
            result = await self._unpin(rec, uop)
        elif action in ("recall_exclude", "recall_include"):
            result = await self._unexclude(rec, uop)
        elif action == "evict" and "snippet" in rec["data"]:
            result = await self._restore_snippet(rec, uop)
        elif action == "evict":
            result = await self._restore_cache(rec, uop)
        else:
            result = await self._unpromote(rec, uop)
        return {"undone": rec, "audit_id": urec.id, "result": result}

    def _session_of(self, rec: dict[str, Any]) -> Any:
        """The session the action was in, refused when it was deleted after the action (a session
        opened again under the same id is another one: undo never writes into it)."""
        s = self.sessions.get(rec["session_id"])
        began = s.meta.opened_at or s.meta.created_at
        if began > rec["at"]:
            raise MemmanError(CONFLICT, f"session {rec['session_id']!r} was deleted after this "
                              f"{rec['action']} (audit #{rec['id']}) and opened again (or imported) "
                              "since; undo does not write into the new session",
                              {"audit_id": rec["id"], "session_id": rec["session_id"],
                               "action_at": rec["at"], "session_opened_at": began})
        return s

    async def _unpin(self, rec: dict[str, Any], uop: Op) -> dict[str, Any]:
        s = self._session_of(rec)
        entry_id = int(rec["data"]["entry_id"])
        previous = bool(rec["data"].get("previous"))
        return await self.engine.pin(s, entry_id, previous, ops=[uop])

    async def _unexclude(self, rec: dict[str, Any], uop: Op) -> dict[str, Any]:
        sid = rec["session_id"]
        self.sessions.get(sid)
        entry_id = int(rec["data"]["entry_id"])
        previous = bool(rec["data"].get("previous"))
        await self.recall.set_exclusion(sid, entry_id, previous, self.clock.now(), [uop])
        return {"session_id": sid, "entry_id": entry_id, "excluded": previous}

    async def _restore_snippet(self, rec: dict[str, Any], uop: Op) -> dict[str, Any]:
        from memman_daemon.tiers.scratchpad import Snippet

        self._session_of(rec)
        return await self.scratchpad.restore(Snippet.from_wire(rec["data"]["snippet"]), [uop])

    async def _restore_cache(self, rec: dict[str, Any], uop: Op) -> dict[str, Any]:
        from memman_daemon.tiers.cache import CacheEntry

        self._session_of(rec)
        return await self.cache.restore(CacheEntry.from_wire(rec["data"]["entry"]), [uop])

    async def _scope_still_there(self, rec: dict[str, Any], kind: str) -> None:
        """Refuse (-32002) to undo a promotion into a scope deleted after it: the user's memory
        layer cleared, or the tenant's agent.md document removed, since the action."""
        store = self.store
        if kind in _LAYER:
            for aid, data in await audit_rows.later(store, rec["id"], "clear",
                                                    user_id=rec["user_id"]):
                if _LAYER[kind] in (data.get("counts") or {}):
                    raise MemmanError(CONFLICT, f"the {_LAYER[kind]} memory of user "
                                      f"{rec['user_id']!r} was cleared after this promotion (audit "
                                      f"#{aid} after #{rec['id']}); undo does not write into it",
                                      {"audit_id": rec["id"], "cleared_by": aid})
        elif kind == "business":
            source = f"docs:{rec['tenant_id']}/agent.md"
            for aid, _ in await audit_rows.later(store, rec["id"], "remove",
                                                 tenant_id=rec["tenant_id"], source=source):
                raise MemmanError(CONFLICT, f"agent.md of tenant {rec['tenant_id']!r} was removed "
                                  f"after this promotion (audit #{aid} after #{rec['id']}); undo "
                                  "does not write into it", {"audit_id": rec["id"], "removed_by": aid})

    async def _unpromote(self, rec: dict[str, Any], uop: Op) -> dict[str, Any]:
        """Put the target back as it was (the replaced value, or no record), and unmark the
        snippet when it is still in the scratchpad."""
        data = rec["data"]
        kind = data.get("target_kind") or rec["target"].split(":", 1)[0]
        ref: str = rec["target"]
        previous = data.get("replaced")
        user, tenant = rec["user_id"], rec["tenant_id"]
        extra: list[Op] = [uop]
        sn = None
        sid = rec["session_id"]
        if sid and sid in self.scratchpad.by_session:
            snippet_id = int(rec["source"].rsplit("#", 1)[-1])
            sn = self.scratchpad.by_session[sid].get(snippet_id)
            if sn is not None:
                kept = [p for p in sn.promoted if p.get("audit_id") != rec["id"]]
                if len(kept) != len(sn.promoted):
                    sn.promoted[:] = kept
                    extra.append(self.scratchpad.op(sn))
        um = self.user_memory
        if not data.get("changed", True):
            await self.store.write(extra)
            return {"ref": ref, "restored": "nothing changed by the promotion"}
        await self._scope_still_there(rec, kind)
        if kind in ("preference", "rule"):
            key = ref.split(":", 1)[1]
            if previous is not None:
                prep = um.prepare_preference if kind == "preference" else um.prepare_rule
                change = await prep(user, key, previous, replace=True)
                await um.commit(change, extra)
                return {"ref": ref, "restored": previous}
            await um.delete(await um.record(user, kind, key), extra)
            return {"ref": ref, "restored": None}
        if kind == "playbook":
            rid = int(ref.rsplit("#", 1)[-1])
            await um.delete(await um.record(user, kind, record_id=rid), extra)
            return {"ref": ref, "restored": None}
        if kind == "business":
            await self.agent_md.unappend(tenant, ref, rec["what"], previous)
            await self.store.write(extra)
            return {"ref": ref, "restored": previous}
        raise MemmanError(CONFLICT, f"cannot undo a promotion to {ref!r}")
